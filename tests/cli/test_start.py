"""A light start: `--help` loads no command, and no command that runs no model loads a model SDK."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click
import pytest

from agentwatch.cli import COMMANDS, cli

MODEL_SDKS = {"pydantic_ai", "openai", "anthropic"}


def imported(argv: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run `agentwatch ARGV` in a fresh interpreter; return it and every module it imported."""
    command = [sys.executable, "-X", "importtime", "-m", "agentwatch.cli", *argv]
    done = subprocess.run(command, capture_output=True, text=True, cwd=cwd, check=False)
    modules = {
        line.rsplit("|", 1)[-1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    return done, modules


def top_levels(modules: set[str]) -> set[str]:
    return {name.split(".")[0] for name in modules}


def test_help_lists_every_command_and_imports_none(tmp_path: Path) -> None:
    done, modules = imported(["--help"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    for name, (_, short_help) in COMMANDS.items():
        assert f"  {name} " in done.stdout and short_help in done.stdout
    commands = {m for m in modules if m.startswith("agentwatch.cli.") and m != "agentwatch.cli._common"}
    assert commands == set()
    assert not MODEL_SDKS & top_levels(modules)
    assert "rich" not in top_levels(modules)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_listed_help_is_the_commands_own(name: str) -> None:
    command = cli.get_command(click.Context(cli), name)
    assert command is not None
    assert command.short_help == COMMANDS[name][1]


@pytest.mark.parametrize("argv", [[name, "--help"] for name in sorted(COMMANDS)] + [["agents", "check", "--help"]])
def test_no_help_loads_a_model_sdk_nor_rich_nor_pydantic(argv: list[str], tmp_path: Path) -> None:
    done, modules = imported(argv, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (MODEL_SDKS | {"rich", "pydantic"}) & top_levels(modules)  # each costs 0.2 s or more


@pytest.mark.parametrize(
    "argv",
    [
        ["ls"],
        ["summary", "--by-role"],
        ["get", "nobody"],
        ["history", "ses_00000000000000000000000000"],
        ["tail", "ses_00000000000000000000000000"],
        ["prompt", "ses_00000000000000000000000000"],
        ["export", "ses_00000000000000000000000000"],
        ["await", "ses_00000000000000000000000000", "--timeout", "0"],
        ["db", "info"],
        ["agents", "list"],
        ["agents", "check"],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_commands_that_run_no_model_never_load_a_model_sdk(argv: list[str], tmp_path: Path) -> None:
    from agentwatch.store import open_store

    store = f"sqlite:///{tmp_path / 'start.db'}"

    async def create() -> None:
        async with open_store(store):
            pass

    asyncio.run(create())
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "coder.md").write_text("---\nmodel: openai:gpt-4o\n---\nYou write code.\n")
    done, modules = imported([*argv, "--store", store] if argv[0] not in ("agents",) else argv, tmp_path)
    assert "Traceback" not in done.stderr
    assert done.returncode in (0, 1), done.stderr[-2000:]  # 1: the agent is not found, which is fine here
    assert not MODEL_SDKS & top_levels(modules)


READ_TOOL_MODULES = {
    f"agentwatch.reads.{name}" for name in ("listing", "summary", "get", "history", "tail", "prompt", "export")
}
ROSTER = {"agentwatch.runtime.roster", "agentwatch.runtime.models", "yaml"}
"""What reading the agent definitions loads: a command that needs no definition loads none of it."""


@pytest.mark.parametrize(
    ("argv", "tool_modules", "reads_definitions"),
    [
        (["ls"], {"listing"}, False),  # no listed session runs: none can be stuck, no threshold is read
        (["summary"], {"summary"}, True),
        (["get", "asker"], {"get"}, True),
        (["tail", "asker"], {"tail", "get"}, False),  # get: a name is resolved as agent_get resolves it
        (["history", "asker"], {"history", "get"}, False),
        (["prompt", "asker"], {"prompt", "get"}, False),
    ],
    ids=lambda value: value[0] if isinstance(value, list) else None,
)
def test_a_read_command_loads_its_own_read_tool_and_the_definitions_only_when_it_needs_them(
    argv: list[str], tool_modules: set[str], reads_definitions: bool, tmp_path: Path
) -> None:
    from bench.start import prepare_store

    store = f"sqlite:///{tmp_path / 'read.db'}"
    asyncio.run(prepare_store(store))
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "coder.md").write_text("---\nmodel: openai:gpt-4o\n---\nYou write code.\n")
    done, modules = imported([*argv, "--store", store], tmp_path)
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr[-2000:]  # prompt: no turn yet
    assert READ_TOOL_MODULES & modules == {f"agentwatch.reads.{name}" for name in tool_modules}
    assert (ROSTER & modules == ROSTER) is reads_definitions, ROSTER & modules
    # A diff, the config file's parser and a laid-out table load only when there is one (piped: no table).
    assert not {"difflib", "tomllib", "rich.table"} & modules


def test_definitions_are_parsed_only_when_there_are_files(tmp_path: Path) -> None:
    from bench.start import prepare_store

    store = f"sqlite:///{tmp_path / 'read.db'}"
    asyncio.run(prepare_store(store))
    done, modules = imported(["summary", "--store", store], tmp_path)  # no agents directory here
    assert done.returncode == 0, done.stderr[-2000:]
    assert "agentwatch.runtime.roster" in modules  # summary reads the definitions (see the test above)
    assert "yaml" not in top_levels(modules)


@pytest.mark.parametrize(
    "argv",
    [
        ["answer", "asker", "yes"],
        ["approve", "deployer"],
        ["deny", "deployer"],
        ["send", "idler", "more"],
        ["stop", "picker"],
        ["escalate", "scout"],
        ["delete", "idler"],
        ["take-over", "idler"],
        ["hand-back", "held"],
    ],
    ids=lambda argv: argv[0],
)
def test_acting_commands_load_no_model_layer(argv: list[str], tmp_path: Path) -> None:
    from bench.start import prepare_store

    store = f"sqlite:///{tmp_path / 'act.db'}"
    asyncio.run(prepare_store(store))
    done, modules = imported([*argv, "--store", store], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not MODEL_SDKS & top_levels(modules)
    assert "agentwatch.runtime.models._adapter" not in modules


ENGINE_THAT_RUNS_NO_TURN = """
import asyncio, json, sys

from agentwatch import Engine


async def main():
    async with Engine.open(sys.argv[1], runs_turns=False) as engine:
        answer = await engine.call_tool("agent_enqueue", {"agentId": sys.argv[2], "prompt": "queued while away"})
        others = asyncio.all_tasks() - {asyncio.current_task()}
        if others:  # a turn loop the input kicked ends at once: this engine holds no lease to run a turn with
            await asyncio.wait(others, timeout=10)
        tasks = [t.get_name() for t in others if not t.done()]
        held = engine.leases.held
        status = (await engine.store.get_session(sys.argv[2])).status
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("pydantic_ai", "openai", "anthropic"))
    print(json.dumps({"answer": answer, "tasks": tasks, "held": held, "status": status, "loaded": loaded}))


asyncio.run(main())
"""


async def test_an_engine_that_runs_no_turn_leaves_its_work_to_the_next_engine(
    open_engine: Any, tmp_path: Path, store_url: str
) -> None:
    from agentwatch.runtime.models import Reply, ScriptedModel
    from tests.runtime.support import role

    definition = role("visited", "scripted:visited")
    models = {"visited": ScriptedModel(function=lambda ctx: Reply(f"got {ctx.prompt}"))}
    async with open_engine(definition, extensions=[], models=models) as engine:
        session = await engine.create("visited")
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", ENGINE_THAT_RUNS_NO_TURN, store_url, session.id],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout)
    assert seen["answer"]["pendingInputs"] == 1, seen
    assert (seen["tasks"], seen["held"], seen["status"], seen["loaded"]) == ([], [], "idle", [])
    async with open_engine(definition, extensions=[], models=models) as engine:  # the next engine runs it
        deadline = time.monotonic() + 15
        while (await engine.call_tool("agent_get", {"id": session.id}))["current"]["lastAssistantText"] != (
            "got queued while away"
        ):
            assert time.monotonic() < deadline, "the queued input was not run by the next engine"
            await asyncio.sleep(0.02)


def test_an_engine_that_runs_no_turn_takes_no_extensions() -> None:
    from agentwatch import Engine
    from agentwatch.errors import UserError

    async def main() -> None:
        async with Engine.open("sqlite://:memory:", runs_turns=False, extensions=[object()]):  # type: ignore[list-item]
            pass

    with pytest.raises(UserError, match="runs_turns=False"):
        asyncio.run(main())


def test_only_commands_that_end_by_themselves_run_without_the_garbage_collector() -> None:
    from agentwatch.cli import SHORT_COMMANDS

    assert set(COMMANDS) >= SHORT_COMMANDS
    assert not SHORT_COMMANDS & {"run", "serve", "mcp", "tail", "await"}  # these may run for hours


GC_AT_EXIT = """
import atexit, gc, sys

atexit.register(lambda: print("collector on:", gc.isenabled(), file=sys.stderr))
sys.argv = ["agentwatch", *sys.argv[1:]]
from agentwatch.cli import main

main()
"""


@pytest.mark.parametrize(
    ("argv", "collector_on"),
    [
        (["ls"], False),
        (["await", "asker", "--timeout", "0"], False),  # nothing to wait for: it ends as a short command
        (["await", "asker", "--timeout", "5"], True),  # it could have waited: the collector is back on
        (["tail", "asker"], False),
        (["runs", "ls"], False),
        (["serve", "--help"], True),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else None,
)
def test_commands_that_may_wait_start_without_the_collector_and_turn_it_on_before_they_wait(
    argv: list[str], collector_on: bool, tmp_path: Path
) -> None:
    from bench.start import prepare_store

    from agentwatch.cli import WAITING_COMMANDS

    assert {"tail", "await"} == WAITING_COMMANDS
    store = f"sqlite:///{tmp_path / 'gc.db'}"
    asyncio.run(prepare_store(store))
    command = [sys.executable, "-c", GC_AT_EXIT, *argv] + (["--store", store] if argv[-1] != "--help" else [])
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"collector on: {collector_on}" in done.stderr


PLUGINS_AT_EXIT = """
import atexit, sys

def scanned() -> None:
    from pydantic.plugin import _loader
    print("plugins scanned:", _loader._plugins is not None, file=sys.stderr)

atexit.register(scanned)
sys.argv = ["agentwatch", *sys.argv[1:]]
from agentwatch.cli import main

main()
"""


@pytest.mark.parametrize(
    ("argv", "env", "scan"), [(["ls"], {}, False), (["ls"], {"PYDANTIC_DISABLE_PLUGINS": ""}, True)]
)
def test_short_commands_skip_pydantics_plugin_scan_unless_told_otherwise(
    argv: list[str], env: dict[str, str], scan: bool, tmp_path: Path
) -> None:
    """The entry-point scan is a twentieth of a short command's start; a user's own setting still wins."""
    import os

    from bench.start import prepare_store

    store = f"sqlite:///{tmp_path / 'plugins.db'}"
    asyncio.run(prepare_store(store))
    environment = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"} | env
    command = [sys.executable, "-c", PLUGINS_AT_EXIT, *argv, "--store", store]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=environment, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"plugins scanned: {scan}" in done.stderr


@pytest.mark.parametrize(
    ("argv", "short"),
    [(["ls"], True), (["runs", "ls", "--json"], True), (["tail", "x", "-f"], True), (["run", "coder", "hi"], False),
     (["runs", "fire", "deploy"], False), (["--json", "runs", "fire"], False), (["serve"], False), ([], False)],
)  # fmt: skip
def test_a_subcommand_that_runs_agents_starts_as_run_does(argv: list[str], short: bool) -> None:
    """`runs fire` runs the user's setup, models and tool servers when no service runs: no plugin scan skipped
    for it (nor for the processes it starts), no collector turned off."""
    from agentwatch.cli import starts_short

    assert starts_short(argv) is short
