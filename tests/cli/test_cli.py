"""The command line: documented commands, `--json` equal to the tools' answers, structured errors."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from agentwatch.cli import cli
from agentwatch.cli._common import SUGGESTED_COMMANDS
from agentwatch.runtime.models import ScriptedModel
from agentwatch.runtime.tools import builtin_tools
from tests.runtime.support import OpenEngine, Scripted, role

ROOT = Path(__file__).resolve().parents[2]


def all_commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    """Every command and group under `group` (loading the lazy ones), by its full name."""
    found = []
    context = click.Context(group)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        assert command is not None, f"`agentwatch {prefix}{name}` is listed but does not load"
        found.append((f"{prefix}{name}", command))
        if isinstance(command, click.Group):
            found += all_commands(command, f"{prefix}{name} ")
    return found


@pytest.mark.parametrize("tool", sorted(SUGGESTED_COMMANDS))
def test_the_command_of_a_suggested_call_takes_its_arguments_as_said(tool: str) -> None:
    """The command that a suggestion is worded as (`agentwatch.errors.Suggestion`) exists, with a flag or an
    ARGUMENT for each of the tool's arguments that it names."""
    form = SUGGESTED_COMMANDS[tool]
    command = dict(all_commands(cli))[form.command]
    said = {opt for param in command.params for opt in getattr(param, "opts", [])}
    said |= {param.human_readable_name.upper() for param in command.params if isinstance(param, click.Argument)}
    assert set(form.flags.values()) | set(form.then) <= said, f"`agentwatch {form.command}` takes {sorted(said)}"
    arguments = {t.name: t for t in builtin_tools()}[tool].parameters["properties"]
    assert set(form.flags) <= set(arguments), f"{tool} takes {sorted(arguments)}"


@pytest.mark.parametrize(("name", "command"), all_commands(cli), ids=[n for n, _ in all_commands(cli)])
def test_every_command_is_documented_with_an_example(name: str, command: click.Command) -> None:
    assert command.help, f"`agentwatch {name}` has no help text"
    assert "Example" in command.help, f"`agentwatch {name} --help` shows no example"  # (a group's too)
    for param in command.params:
        if isinstance(param, click.Option) and param.name not in ("help",):
            assert param.help, f"`agentwatch {name}` option {param.opts[0]} has no help"


@pytest.mark.parametrize(
    ("argv", "tool", "args"),
    [
        (["ls", "--sort", "name"], "agent_list", {"sort": "name"}),
        (["ls", "--word", "done", "--limit", "1"], "agent_list", {"word": ["done"], "limit": 1}),
        (["get", "helper"], "agent_get", {"name": "helper"}),
        (["history", "{id}", "--limit", "3"], "agent_history", {"id": "{id}", "limit": 3}),
        (["tail", "{id}", "--max-chars", "20"], "agent_tail", {"id": "{id}", "maxChars": 20, "maxEvents": 50}),
        (["prompt", "{id}", "--against", "previous"], "agent_prompt", {"id": "{id}", "against": "previous"}),
        (
            ["tail", "{id}", "--before", "{evt}", "--max-events", "3"],
            "agent_tail",
            {"id": "{id}", "beforeId": "{evt}", "maxChars": 500, "maxEvents": 3},
        ),
    ],
)
def test_json_output_is_exactly_the_tools_answer(
    open_engine: OpenEngine,
    scripted: Scripted,
    store_url: str,
    tmp_path: Path,
    argv: list[str],
    tool: str,
    args: dict[str, object],
) -> None:
    model = scripted("cli-helper", ScriptedModel.replying("first answer", "second answer"))
    agents = tmp_path / "agents"  # the engine and the CLI read the same role file
    agents.mkdir()
    (agents / "helper.md").write_text(role("helper", model).to_markdown())

    def filled(value: str, ids: dict[str, str]) -> str:
        for key, replacement in ids.items():
            value = value.replace(key, replacement)
        return value

    async def prepare() -> tuple[dict[str, str], dict[str, object]]:
        async with open_engine(extensions=[]) as engine:
            session = await engine.create("helper", name="helper", source="chat")
            for prompt in ("one", "two"):
                await engine.enqueue(session.id, prompt)
                await engine.wait(session.id, 10)
            [newest] = await engine.store.read_events_backward(session.id, limit=1)
            ids = {"{id}": session.id, "{evt}": newest.id}
            fill = {k: (filled(v, ids) if isinstance(v, str) else v) for k, v in args.items()}
            return ids, await engine.call_tool(tool, fill)

    ids, expected = asyncio.run(prepare())
    argv = [filled(a, ids) for a in argv]
    result = CliRunner(env={"AGENTWATCH_AGENTS_DIR": str(agents)}).invoke(
        cli, [*argv, "--store", store_url, "--json"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    if tool == "agent_list":  # words are relative to the moment of reading; everything else must match
        for rows in (answer["agents"], expected["agents"]):
            for row in rows:  # type: ignore[union-attr]
                row.pop("word")
    assert answer == json.loads(json.dumps(expected, default=str))


def test_a_bad_call_prints_a_structured_error_and_exits_1(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'cli.db'}"
    asyncio.run(_create_store(store))  # read commands refuse a store that does not exist
    command = [sys.executable, "-m", "agentwatch.cli", "get", "ses_nothing", "--store", store, "--json"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env={**os.environ}, check=False)
    assert done.returncode == 1
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "not_found"
    assert "ses_nothing" in error["message"]
    assert "Traceback" not in done.stderr


async def _create_store(url: str) -> None:
    from agentwatch.store import open_store

    async with open_store(url):
        pass


def test_an_unknown_store_scheme_says_what_to_use(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "agentwatch.cli", "db", "info", "--store", "mysql://x/y"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, check=False)
    assert done.returncode == 2  # a usage error, of --store
    assert "Invalid value for '--store': unknown store URL scheme 'mysql'" in done.stderr
    assert "sqlite:///" in done.stderr


def test_a_plain_file_path_is_a_sqlite_store(tmp_path: Path) -> None:
    """`--store /abs/path.db` (or a relative path) is the SQLite store file there, as `sqlite:///` and its
    absolute path; a value that is neither a URL nor a path is a usage error of --store."""
    (tmp_path / "work").mkdir()
    made = CliRunner().invoke(cli, ["create", "coder", "--store", str(tmp_path / "plain.db")])
    assert "plain.db" not in made.output  # (the store is made; the missing role is what it refuses)
    assert (tmp_path / "plain.db").is_file()
    asyncio.run(_one_session(f"sqlite:///{tmp_path / 'plain.db'}"))
    for store in (str(tmp_path / "plain.db"), "../plain.db"):
        command = [sys.executable, "-m", "agentwatch.cli", "ls", "--store", store, "--json"]
        done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path / "work", check=False)
        assert done.returncode == 0, done.stderr
        assert [agent["name"] for agent in json.loads(done.stdout)["agents"]] == ["nova"]
    info = CliRunner().invoke(cli, ["db", "info", "--store", str(tmp_path / "plain.db"), "--json"])
    assert info.exit_code == 0 and json.loads(info.stdout)["url"] == f"sqlite:///{tmp_path / 'plain.db'}"

    for value, said in [
        ("postgresql:/host/db", "is neither a store URL nor a file path"),
        ("a?b.db", "holds a '?'"),
        ("  ", "names no store"),
        ("~no-such-user-here/aw.db", "cannot find the home directory '~no-such-user-here'"),  # (once: internal)
    ]:
        refused = CliRunner().invoke(cli, ["ls", "--store", value, "--json"])
        assert refused.exit_code == 2, refused.output
        error = json.loads(refused.stdout)["error"]
        assert error["details"] == {"flags": ["--store"]} and said in error["message"], error
    assert "the path of a SQLite store file" in " ".join(CliRunner().invoke(cli, ["ls", "--help"]).output.split())


def test_the_variable_and_the_file_name_a_sqlite_file_as_store_does(tmp_path: Path) -> None:
    """Once: only `--store` took a plain path; `AGENTWATCH_STORE=plain.db` was a store URL with no scheme."""
    project = tmp_path / "proj"
    (project / "sub").mkdir(parents=True)
    asyncio.run(_one_session(f"sqlite:///{tmp_path / 'plain.db'}"))
    env = {**os.environ, "AGENTWATCH_STORE": "../plain.db"}  # the working directory's
    for toml in ("", "[sessions]\nstuck_after_seconds = -1\n"):  # a broken file: read with the defaults
        (project / "agentwatch.toml").write_text(toml)
        command = [sys.executable, "-m", "agentwatch.cli", "ls", "--json"]
        done = subprocess.run(command, capture_output=True, text=True, cwd=project, env=env, check=False)
        assert done.returncode == 0, done.stderr
        assert [agent["name"] for agent in json.loads(done.stdout)["agents"]] == ["nova"]
    (project / "agentwatch.toml").write_text('store = "../plain.db"\n')  # the project root's, from a subdirectory
    env.pop("AGENTWATCH_STORE")
    done = subprocess.run(command, capture_output=True, text=True, cwd=project / "sub", env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert [agent["name"] for agent in json.loads(done.stdout)["agents"]] == ["nova"]


async def _one_session(url: str) -> None:
    from agentwatch.store import SessionDraft, open_store

    async with open_store(url) as store:
        await store.create_session(SessionDraft(name="nova", role="coder"))


def test_tail_follow_resumes_after_a_reconnect_with_no_gap_or_repeat(tmp_path: Path) -> None:
    from agentwatch.events import NewEvent, UserMessage
    from agentwatch.store import SessionDraft, open_store

    url = f"sqlite:///{tmp_path / 'follow.db'}"

    async def setup() -> str:
        async with open_store(url) as store:
            session = await store.create_session(SessionDraft(name="s", role="r"))
            await store.append(session.id, [NewEvent(UserMessage(text=f"m{i}")) for i in range(3)])
            return session.id

    async def append(session_id: str, first: int, count: int) -> None:
        async with open_store(url) as store:
            await store.append(session_id, [NewEvent(UserMessage(text=f"m{i}")) for i in range(first, first + count)])

    def follow(session_id: str, until: str, *after: str) -> list[dict[str, Any]]:
        """Run `tail -f` until it prints the message `until`, then cut it off; returns the rows it printed."""
        command = [sys.executable, "-m", "agentwatch.cli", "tail", session_id, "-f", "--json", "--store", url, *after]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=tmp_path)
        assert process.stdout is not None
        rows = []
        for line in process.stdout:
            rows.append(json.loads(line))
            if rows[-1]["detail"] == until:
                break
        process.kill()
        process.wait()
        process.stdout.close()
        return rows

    session_id = asyncio.run(setup())

    def append_later() -> None:
        time.sleep(1.5)
        asyncio.run(append(session_id, 3, 4))

    writer = threading.Thread(target=append_later)
    writer.start()
    first = follow(session_id, "m6")  # the three there before, then four appended while it follows
    writer.join()
    asyncio.run(append(session_id, 7, 3))  # while nobody follows
    second = follow(session_id, "m9", "--after", first[-1]["id"])
    assert [row["detail"] for row in first] == [f"m{i}" for i in range(7)]
    assert [row["detail"] for row in second] == [f"m{i}" for i in range(7, 10)]
