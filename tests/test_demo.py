"""The demo (`make run`): offline, it leaves the planner's question pending and ends with the commands to look
at it, each working as printed from where the demo ran (`serve` is not run here: it serves until stopped)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "demo" / "run.py"


def _next_commands(cwd: Path, env: dict[str, str]) -> list[str]:
    """The commands the demo, run from `cwd`, ends with (what to do next)."""
    demo = subprocess.run(
        [sys.executable, str(DEMO)],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = demo.stdout.rstrip().splitlines()
    start = next(i for i, line in enumerate(lines) if "what to do next" in line)
    return [re.split(r"\s{2,}", line.strip())[0] for line in lines[start + 1 :]]


def _run(command: str, cwd: Path, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`command` run exactly as printed, from `cwd`."""
    return subprocess.run(
        shlex.split(command),
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_the_demo_ends_with_the_commands_to_see_what_it_left(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "AGENTWATCH_", "VIRTUAL_ENV"))}
    commands = _next_commands(tmp_path, env)
    # The bare name when the shell finds this install's agentwatch, else its path (the temp directory is not
    # below the install, so the path is absolute).
    agentwatch = commands[0].split()[0]
    assert agentwatch in ("agentwatch", str(Path(sys.executable).parent / "agentwatch"))
    store = "--store .agentwatch/demo.db"
    assert commands == [
        f"{agentwatch} ls {store}",
        f"{agentwatch} tail -f planner {store}",
        f'{agentwatch} answer planner "PostgreSQL" {store}',
        f"{sys.executable} {DEMO} --resume",
        f"{agentwatch} serve {store}",
    ]

    listed = _run(commands[0], tmp_path, env)
    assert listed.returncode == 0, listed.stderr
    rows = {row.split("\t")[0]: row.split("\t") for row in listed.stdout.splitlines()[1:]}
    assert rows.keys() == {"coder", "fetcher", "planner"} | {n for n in rows if n.startswith("tester-")}
    assert rows["planner"][3] == "needs_you" and rows["coder"][3] == "done"

    try:
        followed = _run(commands[1], tmp_path, env, timeout=5).stdout
    except subprocess.TimeoutExpired as stopped:  # -f follows until stopped
        out = stopped.stdout
        followed = out.decode() if isinstance(out, bytes) else out or ""
    assert "hitl.requested Should the new service keep its data in SQLite or PostgreSQL?" in followed

    answered = _run(commands[2], tmp_path, env)
    assert answered.returncode == 0 and answered.stdout.startswith("answered req_"), answered.stderr
    after = _run(commands[0], tmp_path, env)
    planner = next(row.split("\t") for row in after.stdout.splitlines() if row.startswith("planner\t"))
    assert planner[3] != "needs_you"

    resumed = subprocess.run(
        shlex.split(commands[3]), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=True
    )
    assert "Plan: 1) add a PostgreSQL store" in resumed.stdout
    final = _run(commands[0], tmp_path, env)
    planner = next(row.split("\t") for row in final.stdout.splitlines() if row.startswith("planner\t"))
    assert (planner[3], planner[4]) == ("done", "completed")


def test_with_its_virtual_environment_active_the_commands_drop_its_path(tmp_path: Path) -> None:
    """Once: `agentwatch` was bare, but the `--resume` line kept the interpreter's path (`.venv/bin/python`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "AGENTWATCH_"))}
    env |= {"VIRTUAL_ENV": sys.prefix, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"}
    commands = _next_commands(tmp_path, env)
    assert [command.split()[0] for command in commands] == ["agentwatch"] * 3 + ["python", "agentwatch"]
    assert commands[3] == f"python {DEMO} --resume"
