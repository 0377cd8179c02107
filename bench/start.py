"""Start-up figures: a cold `from agentwatch import Engine` and a cold `agentwatch --help`, each in a new process.

Each command runs in a fresh interpreter (bytecode caches warm, as after an install), alternating with its
baseline run by run; the figure is the median wall time from spawning the process to its exit, with the CPU
time the process used (user + system) in the note.

- `start.import_engine`: `python -c "from agentwatch import Engine"`, against `python -c "from pydantic_ai
  import Agent"` (what a bare pydantic-ai program imports before it runs anything).
- `start.cli_help`: `agentwatch --help` (the installed console script), against a bare argparse program
  printing its help in a fresh interpreter.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from bench._harness import FULL, QUICK, Context, Result, Target, percentile

__all__ = ["cold_start"]

_BARE_HELP: Final = (
    "import argparse; parser = argparse.ArgumentParser(prog='tool', description='A command line tool.'); "
    "sub = parser.add_subparsers(); [sub.add_parser(name, help=name) for name in ('ls', 'get', 'tail', 'run')]; "
    "parser.parse_args(['--help'])"
)


@dataclass(slots=True)
class _Runs:
    wall_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)


def _run(command: Sequence[str], cwd: Path, runs: _Runs) -> None:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    completed = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False, env=_env())
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if completed.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {completed.returncode}: {completed.stderr.strip()[-500:]}")
    runs.wall_ms.append(wall * 1000)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    runs.cpu_ms.append(cpu * 1000)


def _env() -> dict[str, str]:
    # No variable of ours steers what the commands load.
    return {name: value for name, value in os.environ.items() if not name.startswith("AGENTWATCH_")}


def _cli() -> list[str]:
    script = Path(sys.executable).with_name("agentwatch")
    return [str(script), "--help"] if script.exists() else [sys.executable, "-m", "agentwatch", "--help"]


async def cold_start(ctx: Context) -> list[Result]:
    """Cold import of the engine and cold `agentwatch --help`, each beside its bare baseline."""
    count = 5 if ctx.sizes is FULL else 3 if ctx.sizes is QUICK else 1
    warm = ctx.sizes is FULL or ctx.sizes is QUICK
    cwd = ctx.workdir / "start"
    cwd.mkdir(parents=True, exist_ok=True)
    cases = [
        (
            "start.import_engine",
            [sys.executable, "-c", "from agentwatch import Engine"],
            [sys.executable, "-c", "from pydantic_ai import Agent"],
            500.0,
            'python -c "from agentwatch import Engine"',
            'python -c "from pydantic_ai import Agent"',
        ),
        (
            "start.cli_help",
            _cli(),
            [sys.executable, "-c", _BARE_HELP],
            300.0,
            "agentwatch --help (the console script)",
            "a bare argparse program with four sub-commands printing its --help",
        ),
    ]
    ctx.say(f"start: {count} fresh processes of each command and of its baseline, alternating")
    results: list[Result] = []
    for name, command, baseline, limit, what, against in cases:
        ours, theirs = _Runs(), _Runs()
        if warm:  # one unmeasured run each: the bytecode caches are written
            _run(command, cwd, _Runs())
            _run(baseline, cwd, _Runs())
        for index in range(count):
            pair = [(command, ours), (baseline, theirs)]
            for cmd, runs in pair if index % 2 == 0 else reversed(pair):
                _run(cmd, cwd, runs)
        note = (
            f"median wall time of {count} fresh processes of `{what}`, spawn to exit (CPU user+system "
            f"{percentile(ours.cpu_ms, 50):.0f} ms); baseline: `{against}` (CPU {percentile(theirs.cpu_ms, 50):.0f}"
            f" ms), alternating run by run"
        )
        results.append(
            Result(
                name,
                "ms",
                percentile(ours.wall_ms, 50),
                percentile(theirs.wall_ms, 50),
                "lower",
                Target("value", "<=", limit),
                note,
            )
        )
    return results
