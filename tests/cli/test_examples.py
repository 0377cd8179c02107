"""Every example in `--help` works: each is run, as written, in a project where it makes sense."""

from __future__ import annotations

import asyncio
import json
import os
import re
import select
import shlex
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from pydantic import JsonValue

from agentwatch.cli import cli
from agentwatch.runtime.models import ScriptedModel
from agentwatch.store import RequestDraft, SessionDraft, SessionPatch, Store, Write, open_store
from tests.cli.test_cli import all_commands
from tests.runtime.support import OpenEngine, Scripted, role

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_IDS = ("ses_01jdq3v9c8k2m6n4p7r0s5t8w1", "ses_...")
"""The ids the help texts show; the test puts the id of its own `coder` session in their place."""
SETUP = 'def note(text: str) -> str:\n    """Keep a note."""\n    return text\n\n\nsetup = {"tools": [note]}\n'
"""The project's setup the examples name (`--setup myproject.agents:setup`)."""
HOOKS = '[hooks.deploy-check]\nrole = "coder"\nprompt = "Check the deploy."\n'
"""The project's hook the examples fire (`runs fire deploy-check`)."""
EXAMPLE_EVENT = "evt_..."
"""The event id the help texts show; the test puts the id of its `coder`'s newest event in its place."""
EXAMPLE_RUN = "run_..."
"""The run id the help texts show; the test puts the id of its own run of `report` in its place."""


def help_examples() -> list[tuple[str, str]]:
    """(command, example) for every `agentwatch ...` line of every help text, the top level's included; a
    description after two spaces or more is not part of the example."""
    found = []
    for name, command in [("agentwatch", cli), *all_commands(cli)]:
        for line in (command.help or "").splitlines():
            if line.strip().startswith("agentwatch "):
                found.append((name, re.split(r"\s{2,}", line.strip())[0]))
    return found


EXAMPLES = help_examples()


def test_every_command_has_an_example_here() -> None:
    named = {name for name, _ in EXAMPLES}
    leaves = {name for name, command in all_commands(cli) if not isinstance(command, click.Group)}
    assert leaves <= named


@pytest.fixture
def project(open_engine: OpenEngine, scripted: Scripted, tmp_path: Path) -> tuple[Path, str, str, str, str]:
    """A project as the examples assume one: `agents/coder.md`, a setup in `myproject/agents.py`, a hook, the default
    store with a `coder` that has run two turns, a `nova` in chat 42:bot1, two runs of the workflow `report`,
    and the demo's agents under `examples/`; its root, the coder's id, its newest event's id, the second run's id
    and the first's (a second `run_...` in an example, as `compare RUN --against RUN` takes: another run)."""
    model = scripted("cli-examples", ScriptedModel.replying(*["done"] * 8))
    agents = tmp_path / "agents"
    agents.mkdir(exist_ok=True)
    (agents / "coder.md").write_text(role("coder", model).to_markdown())
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "myproject").mkdir()
    (tmp_path / "myproject" / "__init__.py").write_text("")
    (tmp_path / "myproject" / "agents.py").write_text(SETUP)
    (tmp_path / "agentwatch.toml").write_text(HOOKS)
    url = f"sqlite:///{tmp_path / '.agentwatch' / 'agentwatch.db'}"

    async def prepare() -> tuple[str, str, str, str]:
        async with open_engine(store=url, extensions=[]) as engine:
            session = await engine.create("coder", name="coder", source="cli")
            for prompt in ("one", "two"):
                await engine.enqueue(session.id, prompt)
                await engine.wait(session.id, 10)
            coder_id: str = session.id
            runs = []
            for topic in ("tides", "moons"):
                async with engine.run("report", input={"topic": topic}) as run:
                    await run.task("coder", f"notes on {topic}")
                    await run.journal("retry", "an example retry line")
                runs.append(run.id)
        async with open_store(url) as store:
            await store.create_session(SessionDraft(name="nova", role="coder", scope="42:bot1"))
            await _waiting(store, "asker", RequestDraft(kind="question", summary="Which DB?", questions=["Which DB?"]))
            choice = RequestDraft(kind="choice", summary="Where?", questions=["Where?"], options=["dev", "staging"])
            await _waiting(store, "picker", choice)
            await _waiting(store, "deployer", RequestDraft(kind="approval", summary="approve deploy()"))
            held = RequestDraft(
                kind="question", summary="Which?", waits_on="parent", deliver_at=datetime.now(UTC) + timedelta(hours=1)
            )
            await _waiting(store, "scout", held, parent_id=coder_id)
            taken = await store.create_session(SessionDraft(name="held", role="coder"))
            interception: dict[str, JsonValue] = {"by": "ada", "since": datetime.now(UTC).isoformat()}
            await store.write(Write(taken.id, session=SessionPatch(interception=interception)))
            [newest] = await store.read_events_backward(coder_id, limit=1)
        return coder_id, newest.id, runs[1], runs[0]

    return tmp_path, *asyncio.run(prepare())


async def _waiting(store: Store, name: str, request: RequestDraft, parent_id: str | None = None) -> None:
    """A `coder` session named `name` whose turn is paused on `request` (for `answer`, `approve`, ...)."""
    session = await store.create_session(SessionDraft(name=name, role="coder", parent_id=parent_id))
    turn = request.model_copy(update={"turn_id": "trn_example"})
    patch = SessionPatch(status="awaiting_input", current_turn_id="trn_example")
    await store.write(Write(session.id, session=patch, requests_open=[turn]))


@pytest.mark.parametrize(("name", "example"), EXAMPLES, ids=[example for _, example in EXAMPLES])
def test_the_help_example_works(project: tuple[Path, str, str, str, str], name: str, example: str) -> None:
    root, coder_id, event_id, run_id, earlier_run_id = project
    example = example.replace(EXAMPLE_RUN, run_id, 1).replace(EXAMPLE_RUN, earlier_run_id)
    example = example.replace(EXAMPLE_EVENT, event_id)
    for shown in EXAMPLE_IDS:
        example = example.replace(shown, coder_id)
    argv = shlex.split(example)[1:]
    if ">" in argv:  # a shell redirection: the output is what would land in the file
        argv = argv[: argv.index(">")]
    if "-f" in argv:
        _follow_example(root, argv)
        return
    if argv[0] == "serve":
        _serve_example(root, argv)
        return
    before = os.getcwd()
    os.chdir(root)
    try:
        result = CliRunner().invoke(cli, argv)
    finally:
        os.chdir(before)
    assert result.exit_code == 0, f"`{example}` exited {result.exit_code}:\n{result.output}"
    if "--json" in argv or name == "export":
        json.loads(result.stdout)


def _follow_example(root: Path, argv: list[str]) -> None:
    """`tail -f` follows until stopped: it must print the rows there are, then keep running."""
    command = [sys.executable, "-m", "agentwatch", *argv]
    process = subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    try:
        first = process.stdout.readline()
        assert re.match(r"\d\d:\d\d:\d\d ", first), first
        assert process.poll() is None  # still following
    finally:
        process.kill()
        _, errors = process.communicate()
    assert "Traceback" not in errors


def _serve_example(root: Path, argv: list[str]) -> None:
    """`serve` runs until it is told to stop: it must come up, then drain and exit 0 on SIGTERM."""
    (root / "agentwatch.toml").write_text('[server]\nbind = "127.0.0.1:0"\n')  # any free port, as written
    command = [sys.executable, "-m", "agentwatch", *argv]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # its address line arrives as it is printed
    process = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    try:
        ready, _, _ = select.select([process.stderr], [], [], 120)
        first = process.stderr.readline() if ready else "(nothing within 120 s)"  # where it says it listens
        assert "serving on http://127.0.0.1:" in first, first
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
        _, errors = process.communicate()
    assert "Traceback" not in errors
