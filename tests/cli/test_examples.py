"""Every example in `--help` works: each is run, as written, in a project where it makes sense."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from agentwatch.cli import cli
from agentwatch.runtime.models import ScriptedModel
from agentwatch.store import SessionDraft, open_store
from tests.cli.test_cli import all_commands
from tests.runtime.support import OpenEngine, Scripted, role

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_ID = "ses_01jdq3v9c8k2m6n4p7r0s5t8w1"
"""The id the help texts show; the test puts the id of its own `coder` session in its place."""


def help_examples() -> list[tuple[str, str]]:
    found = []
    for name, command in all_commands(cli):
        for line in (command.help or "").splitlines():
            if line.strip().startswith("agentwatch "):
                found.append((name, line.strip()))
    return found


EXAMPLES = help_examples()


def test_every_command_has_an_example_here() -> None:
    named = {name for name, _ in EXAMPLES}
    leaves = {name for name, command in all_commands(cli) if not isinstance(command, click.Group)}
    assert leaves <= named


@pytest.fixture
def project(open_engine: OpenEngine, scripted: Scripted, tmp_path: Path) -> tuple[Path, str]:
    """A project as the examples assume one: `agents/coder.md`, the default store with a `coder` that has
    run two turns, a `nova` in chat 42:bot1, and the demo's agents under `examples/`."""
    model = scripted("cli-examples", ScriptedModel.replying(*["done"] * 8))
    agents = tmp_path / "agents"
    agents.mkdir(exist_ok=True)
    (agents / "coder.md").write_text(role("coder", model).to_markdown())
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    url = f"sqlite:///{tmp_path / '.agentwatch' / 'agentwatch.db'}"

    async def prepare() -> str:
        async with open_engine(store=url, extensions=[]) as engine:
            session = await engine.create("coder", name="coder", source="cli")
            for prompt in ("one", "two"):
                await engine.enqueue(session.id, prompt)
                await engine.wait(session.id, 10)
            coder_id: str = session.id
        async with open_store(url) as store:
            await store.create_session(SessionDraft(name="nova", role="coder", scope="42:bot1"))
        return coder_id

    return tmp_path, asyncio.run(prepare())


@pytest.mark.parametrize(("name", "example"), EXAMPLES, ids=[example for _, example in EXAMPLES])
def test_the_help_example_works(project: tuple[Path, str], name: str, example: str) -> None:
    root, coder_id = project
    argv = shlex.split(example.replace(EXAMPLE_ID, coder_id))[1:]
    if ">" in argv:  # a shell redirection: the output is what would land in the file
        argv = argv[: argv.index(">")]
    if "-f" in argv:
        _follow_example(root, argv)
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
