"""The CLI and a running service: read and acting commands go through it with the same answers, output and
exit codes as on the store; a local service is found through its discovery file (a stale one is ignored);
`tail -f` attaches to its live stream; `run` hands a session over to it."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from starlette.types import Receive, Scope, Send

from agentwatch.cli import cli
from agentwatch.cli._common import resolve_config
from agentwatch.cli.remote import discovery_file, remove_discovery, write_discovery
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.service import ServiceSettings, create_app
from tests.runtime.support import OpenEngine, Scripted, role
from tests.service.support import served


def invoke(*argv: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(argv), env={"AGENTWATCH_SERVER": "", **(env or {})})


async def run_cli(*argv: str, env: dict[str, str] | None = None) -> Result:
    """The CLI in a thread, so that the service in this test's loop can answer it."""
    return await asyncio.to_thread(invoke, *argv, env=env)


def answer_of(result: Result) -> dict[str, Any]:
    value = json.loads(result.stdout)
    assert isinstance(value, dict)
    return value


class Counting:
    """The service app, counting the requests that reach it (by path)."""

    def __init__(self, engine: Engine, settings: ServiceSettings | None = None) -> None:
        self.app = create_app(engine, settings)
        self.state = self.app.state
        self.paths: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            self.paths.append(scope["path"])
        await self.app(scope, receive, send)

    def tools(self) -> list[str]:
        return [p.rsplit("/", 1)[1] for p in self.paths if p.startswith("/api/tools/")]


@asynccontextmanager
async def service(engine: Engine, settings: ServiceSettings | None = None) -> AsyncIterator[tuple[str, Counting]]:
    app = Counting(engine, settings)
    async with served(app) as url:  # type: ignore[arg-type]
        yield url, app


async def until(check: Any, seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


def timeless(value: Any) -> Any:
    """`value` without the times an answer stamps when it is made (`at`, `from`, `to`, `exportedAt`)."""
    if isinstance(value, dict):
        return {k: timeless(v) for k, v in value.items() if k not in ("at", "from", "to", "exportedAt")}
    if isinstance(value, list):
        return [timeless(v) for v in value]
    return value


def nowhere(tmp_path: Path) -> str:
    """A store the CLI cannot read: a command that answers with it went through the service."""
    return f"sqlite:///{tmp_path / 'missing' / 'nothing.db'}"


async def test_read_commands_answer_the_same_through_the_service(
    open_engine: OpenEngine, scripted: Scripted, store_url: str, tmp_path: Path
) -> None:
    model = scripted("remote-helper", ScriptedModel(function=lambda ctx: Reply(f"got {ctx.prompt}")))
    agents = tmp_path / "agents"  # the service and the CLI read the same role file
    agents.mkdir()
    (agents / "helper.md").write_text(role("helper", model).to_markdown())
    env = {"AGENTWATCH_AGENTS_DIR": str(agents)}
    async with open_engine(extensions=[]) as engine:
        session = await engine.create("helper", name="helper", source="chat")
        await engine.enqueue(session.id, "one")
        await engine.wait(session.id, 10)
        async with service(engine) as (url, app):
            for argv in (
                ["ls"],
                ["summary"],
                ["get", "helper"],
                ["history", "helper"],
                ["tail", "helper"],
                ["prompt", "helper"],
                ["export", "helper"],
                ["await", "helper", "--timeout", "0"],
                ["get", "nobody"],  # the same refusal
                ["tail", "helper", "--max-chars", "0"],  # the same usage error, named as the flag
            ):
                local = await run_cli(*argv, "--store", store_url, "--json", env=env)
                remote = await run_cli(*argv, "--server", url, "--store", nowhere(tmp_path), "--json", env=env)
                assert (remote.exit_code, timeless(answer_of(remote))) == (local.exit_code, timeless(answer_of(local)))
            human_local = await run_cli("tail", "helper", "--store", store_url, env=env)
            human_remote = await run_cli("tail", "helper", "--store", nowhere(tmp_path), env={"AGENTWATCH_SERVER": url})
            assert human_remote.exit_code == 0 and human_remote.stdout == human_local.stdout
            assert "agent_list" in app.tools() and "agent_tail" in app.tools()
            refused = await run_cli("tail", "helper", "--max-chars", "0", "--server", url, "--store", nowhere(tmp_path))
            assert refused.exit_code == 2 and "--max-chars" in refused.output
        gone = await run_cli("ls", "--server", url, "--store", store_url, "--json")  # the service stopped
        assert gone.exit_code == 1 and answer_of(gone)["error"]["code"] == "service_unreachable"
        assert "--server none" in answer_of(gone)["error"]["message"]
        direct = await run_cli("ls", "--server", "none", "--store", store_url, "--json", env={"AGENTWATCH_SERVER": url})
        assert direct.exit_code == 0 and [row["name"] for row in answer_of(direct)["agents"]] == ["helper"]


async def test_acting_commands_go_through_the_service_which_stops_its_own_turns(
    open_engine: OpenEngine, scripted: Scripted, store_url: str, tmp_path: Path
) -> None:
    release = asyncio.Event()

    async def slow() -> str:
        """Takes until the test lets it go."""
        await release.wait()
        return "slow done"

    def script(ctx: Any) -> Any:
        if ctx.prompt == "first" and not ctx.tool_results:
            return CallTool("slow", {})
        if ctx.prompt == "choose" and not ctx.tool_results:
            return CallTool("ask_user", {"question": "Where?", "options": ["dev", "staging"]})
        if ctx.prompt == "choose":
            return Reply(f"deploying to {ctx.tool_results[0].output}")
        return Reply(f"answered {ctx.prompt}")

    model = scripted("remote-worker-inproc", ScriptedModel(function=script))
    definition = role("worker", model, tools=("slow", "ask_user"))
    async with open_engine(definition, tools=[slow], extensions=[]) as engine:
        session = await engine.create("worker", name="worker", source="chat")
        async with service(engine) as (url, app):
            away = ["--server", url, "--store", nowhere(tmp_path), "--json"]
            sent = await run_cli("send", "worker", "first", *away)
            assert sent.exit_code == 0, sent.output
            assert answer_of(sent) == {
                "agentId": session.id,
                "pendingInputs": answer_of(sent)["pendingInputs"],
                "duplicate": False,
            }

            async def in_tool() -> bool:
                events = await engine.store.read_events(session.id, limit=100)
                return any(e.type == "tool.call" for e in events)

            await until(in_tool)
            # On the store, a turn another engine runs is stopped by that engine, asked through the store; the
            # answer comes once it has. Through the service, its engine stops its own turns at once.
            stopped = await run_cli("stop", "worker", "--store", store_url, "--json")
            assert stopped.exit_code == 0, stopped.output
            assert (answer_of(stopped)["stopped"], answer_of(stopped)["status"]) == (True, "cancelled")
            again = await run_cli("stop", "worker", *away)
            assert again.exit_code == 0, again.output
            assert (answer_of(again)["stopped"], answer_of(again)["status"]) == (False, "cancelled")
            said = await run_cli("stop", "worker", *away[:-1])  # (once "ses_... had no turn to stop")
            assert said.stdout == f"worker ({session.id}) had no turn to stop (cancelled)\n", said.output
            release.set()

            chooser = await engine.create("worker", name="chooser", source="chat")
            chosen = await run_cli("send", "chooser", "choose", *away)
            assert chosen.exit_code == 0, chosen.output

            async def asking() -> bool:
                return bool((await engine.store.get_session(chooser.id)).status == "awaiting_input")

            await until(asking)
            (request,) = await engine.store.list_requests(session_id=chooser.id, status="pending")
            wrong = await run_cli("answer", request.id, "--choice", "3", *away)  # found by its id alone
            assert wrong.exit_code == 2 and answer_of(wrong)["error"]["details"]["flags"] == ["--choice"]
            picked = await run_cli("answer", "chooser", "--choice", "2", "--server", url, "--store", nowhere(tmp_path))
            assert picked.exit_code == 0, picked.output
            assert picked.stdout.startswith(f"answered {request.id} of {chooser.id}")

            async def deployed() -> bool:
                current = await engine.store.get_session(chooser.id)
                return bool(current.status != "awaiting_input" and current.last_text == "deploying to staging")

            await until(deployed)
            assert {"agent_enqueue", "agent_stop", "agent_answer", "agent_export"} <= set(app.tools())


async def test_create_through_the_service_starts_the_turn_there(
    open_engine: OpenEngine, scripted: Scripted, store_url: str, tmp_path: Path
) -> None:
    model = scripted("remote-created", ScriptedModel(function=lambda ctx: Reply(f"got {ctx.prompt}")))
    async with open_engine(role("helper", model), extensions=[]) as engine, service(engine) as (url, app):
        away = ["--server", url, "--store", nowhere(tmp_path)]
        created = await run_cli("create", "helper", "hello", "--agents-dir", str(tmp_path), *away, "--json")
        assert created.exit_code == 0, created.output
        assert f"--agents-dir not used: the service at {url} has its own roles" in created.stderr
        agent_id = answer_of(created)["agentId"]
        assert app.tools() == ["agent_create"]

        async def done() -> bool:
            return (await engine.store.get_session(agent_id)).status == "completed"

        await until(done)  # the service's engine ran it, with no other command
        assert (await engine.store.get_session(agent_id)).last_text == "got hello"
        sent = await run_cli("send", agent_id, "more", "--server", url, "--store", nowhere(tmp_path))
        assert sent.exit_code == 0 and f"the service at {url} continues it now" in sent.stdout, sent.output


async def test_a_service_is_found_from_a_subdirectory_of_its_project_and_from_its_root(
    open_engine: OpenEngine, scripted: Scripted, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once: the project's default store is relative in its root and absolute in a subdirectory, and the two
    spellings of one store did not match: a service started in one was not found from the other, so `run` ran
    the turn in its own process and `tail -f` read the store beside a running service."""
    model = scripted("remote-subdirectory", ScriptedModel.replying("hello"))
    monkeypatch.chdir(tmp_path)
    relative = f"sqlite:///{Path(store_url.removeprefix('sqlite:///')).relative_to(tmp_path)}"
    async with open_engine(role("helper", model), extensions=[]) as engine, service(engine) as (url, app):
        for announced, asked in ((relative, store_url), (store_url, relative)):
            write_discovery(resolve_config(announced), url, token_needed=False)
            listed = await run_cli("ls", "--store", asked, "--json")
            assert listed.exit_code == 0, listed.output
            assert app.tools() == ["agent_list"], (announced, asked)  # through the service
            app.paths.clear()
            remove_discovery(discovery_file(resolve_config(announced)))


async def test_work_handed_to_a_service_without_the_agents_role_is_not_said_to_go_on_there(
    open_engine: OpenEngine, scripted: Scripted, tmp_path: Path
) -> None:
    """Once: `send` and `answer` through a service that lacks the agent's role (the demo's agents, served by
    `agentwatch serve`) said "the service continues it now", while the agent's log said it would not."""
    from agentwatch.store import SessionDraft

    model = scripted("remote-roleless", ScriptedModel.replying("hello"))
    async with open_engine(role("helper", model), extensions=[]) as engine, service(engine) as (url, _):
        ghost = await engine.store.create_session(SessionDraft(name="ghost", role="ghost"))
        away = ["--server", url, "--store", nowhere(tmp_path)]
        sent = await run_cli("send", "ghost", "hi", *away)
        assert sent.exit_code == 0, sent.output
        assert sent.stdout == (
            f"queued for ghost ({ghost.id}), 1 waiting: the service at {url} has no agent type 'ghost', so it "
            "leaves the work to an engine that has it (one open on this store takes it within a second, else the "
            "next one opened with it)\n"
        )
        created = await run_cli("create", "helper", "hi", "--name", "known", *away)
        assert created.exit_code == 0 and f"the service at {url} continues it now" in created.stdout, created.output
        # `await` times out on it, and says why, as the service tells it (once: nothing, though on the store it said).
        waited = await run_cli("await", "ghost", "--timeout", "0.2", *away)
        assert waited.exit_code == 3, waited.output
        said = " ".join(waited.stderr.split())
        assert said.startswith(f"1 input(s) of ghost wait for an engine to run them: the service at {url} cannot "
                               "run it: no agent type 'ghost'"), said  # fmt: skip
        assert "define the type for the service that should run it" in said, said
        as_json = await run_cli("await", "ghost", "--timeout", "0", "--json", *away)  # (stdout: the answer alone)
        assert as_json.exit_code == 3 and json.loads(as_json.stdout)["timedOut"] is True


async def test_a_local_service_is_found_through_its_discovery_file(
    open_engine: OpenEngine, scripted: Scripted, store_url: str, tmp_path: Path
) -> None:
    model = scripted("remote-found", ScriptedModel.replying("hello"))
    async with open_engine(role("helper", model), extensions=[]) as engine:
        await engine.create("helper", name="helper", source="chat")
        async with service(engine) as (url, app):
            config = resolve_config(store_url)
            path = write_discovery(config, url, token_needed=False)
            assert path == discovery_file(config) and path.parent == tmp_path

            listed = await run_cli("ls", "--store", store_url, "--json")
            assert listed.exit_code == 0 and app.tools() == ["agent_list"]  # through the service

            write_discovery(config, url, token_needed=True)
            needs_token = await run_cli("ls", "--store", store_url, "--json")
            assert needs_token.exit_code == 1
            # A service on loopback prints no token: it has one only when started with AGENTWATCH_TOKEN.
            assert answer_of(needs_token)["error"]["message"] == (
                f"the service at {url} (found in {str(path)!r}) needs a token: set AGENTWATCH_TOKEN to its token "
                "(the AGENTWATCH_TOKEN it was started with, or the one it printed when it started), or pass "
                "--server none to use the store directly"
            )
            assert answer_of(needs_token)["error"]["code"] == "unauthenticated"  # as the service answers it

            # A file whose process is dead, or whose port refuses connections, is ignored: the store answers.
            record = json.loads(path.read_text())
            path.with_name(f".{path.name}.{os.getpid()}").unlink()  # (no other service's own record either)
            dead = await asyncio.create_subprocess_exec("true")
            await dead.wait()
            path.write_text(json.dumps(record | {"token": False, "pid": dead.pid}))
            stale = await run_cli("ls", "--store", store_url, "--json")
            assert stale.exit_code == 0 and answer_of(stale) == answer_of(listed)
            path.write_text(json.dumps(record | {"token": False, "url": "http://127.0.0.1:9"}))
            refused = await run_cli("ls", "--store", store_url, "--json")
            assert refused.exit_code == 0 and answer_of(refused) == answer_of(listed)
            # A file for another store is not this store's service.
            path.write_text(json.dumps(record | {"token": False, "store": "sqlite:////elsewhere.db"}))
            other = await run_cli("ls", "--store", store_url, "--json")
            assert other.exit_code == 0
            assert app.tools() == ["agent_list"]  # none of these reached the service
            # The file names a service that was killed, while another of the store runs (its own record beside
            # the file): that one answers (once: the store did, beside a live service).
            write_discovery(config, url, token_needed=False)
            path.write_text(json.dumps(record | {"token": False, "pid": dead.pid}))
            beside = await run_cli("ls", "--store", store_url, "--json")
            assert beside.exit_code == 0 and app.tools() == ["agent_list", "agent_list"]


def test_run_alone_waits_until_the_observer_has_read_the_turn(
    scripted: Scripted, store_url: str, tmp_path: Path
) -> None:
    writer = scripted("remote-writer", ScriptedModel(function=lambda ctx: Reply("draft written")))
    reviewer = scripted("remote-reviewer", ScriptedModel(function=lambda ctx: Reply("nothing to report")))
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "writer.md").write_text(role("writer", writer, observer="reviewer", grant=("spawn",)).to_markdown())
    (agents / "reviewer.md").write_text(role("reviewer", reviewer).to_markdown())

    result = invoke("run", "writer", "write it", "--name", "writer", "--store", store_url, "--agents-dir", str(agents))
    assert result.exit_code == 0, result.output
    assert "no service running" in result.stderr and "waited until its observer reviewer settled" in result.stderr

    async def observer_read() -> tuple[str, list[str]]:
        async with Engine.open(store=store_url, root=tmp_path, agents_dir=agents, extensions=[]) as engine:
            rows = (await engine.call_tool("agent_list", {}))["agents"]
            (observer,) = [row for row in rows if row["role"] == "reviewer"]
            events = await engine.store.read_events(observer["id"], limit=1000)
            return observer["status"], [e.type for e in events]

    status, types = asyncio.run(observer_read())
    assert status == "idle" and types.count("turn.ended") >= 1 and "message.user" in types


def test_run_alone_says_an_observer_that_is_not_armed_does_not_watch(
    scripted: Scripted, store_url: str, tmp_path: Path
) -> None:
    """A model observer of a role without the `spawn` grant is denied: `run` said it "waited until its observer
    reviewer settled", as if one had watched the turn; it now says the observer does not watch, and why."""
    writer = scripted("remote-ungranted", ScriptedModel(function=lambda ctx: Reply("draft written")))
    reviewer = scripted("remote-unarmed", ScriptedModel(function=lambda ctx: Reply("nothing to report")))
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "writer.md").write_text(role("writer", writer, observer="reviewer").to_markdown())
    (agents / "reviewer.md").write_text(role("reviewer", reviewer).to_markdown())

    result = invoke("run", "writer", "write it", "--name", "writer", "--store", store_url, "--agents-dir", str(agents))
    assert result.exit_code == 0, result.output
    assert "waited until its observer" not in result.stderr
    assert "no service running: ran writer here; its observer reviewer does not watch it (denied: " in " ".join(
        result.stderr.split()
    )


def test_run_alone_without_an_observer_says_so(scripted: Scripted, store_url: str, tmp_path: Path) -> None:
    model = scripted("remote-plain", ScriptedModel.replying("done"))
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "plain.md").write_text(role("plain", model).to_markdown())
    result = invoke("run", "plain", "go", "--store", store_url, "--agents-dir", str(agents), "--json")
    assert result.exit_code == 0, result.output
    assert answer_of(result)["status"] == "completed"
    assert "no service running" in result.stderr and "no observer to wait for" in result.stderr


async def test_a_service_with_a_token_takes_it_from_agentwatch_token(
    open_engine: OpenEngine, scripted: Scripted, tmp_path: Path
) -> None:
    model = scripted("remote-guarded", ScriptedModel.replying("hello"))
    async with open_engine(role("helper", model), extensions=[]) as engine:
        await engine.create("helper", name="helper", source="chat")
        async with service(engine, ServiceSettings(token="s3cret", read_token="r3ad")) as (url, _):
            away = ["--server", url, "--store", nowhere(tmp_path), "--json"]
            refused = await run_cli("ls", *away)
            assert refused.exit_code == 1 and answer_of(refused)["error"]["code"] == "unauthenticated"
            wrong = await run_cli("ls", *away, env={"AGENTWATCH_TOKEN": "guess"})
            assert wrong.exit_code == 1 and answer_of(wrong)["error"]["code"] == "unauthenticated"
            listed = await run_cli("ls", *away, env={"AGENTWATCH_TOKEN": "s3cret"})
            assert listed.exit_code == 0 and [row["name"] for row in answer_of(listed)["agents"]] == ["helper"]
            reader = await run_cli("send", "helper", "hi", *away, env={"AGENTWATCH_TOKEN": "r3ad"})
            assert reader.exit_code == 1 and answer_of(reader)["error"]["code"] == "forbidden"
            assert "read-only token" in answer_of(reader)["error"]["message"]


async def test_run_hands_a_session_over_and_leaves_its_question_pending_without_a_terminal(
    open_engine: OpenEngine, scripted: Scripted, store_url: str, tmp_path: Path
) -> None:
    def script(ctx: Any) -> Any:
        if not ctx.tool_results:
            return CallTool("ask_user", {"question": "Where to?", "options": ["dev", "staging"]})
        return Reply(f"deploying to {ctx.tool_results[0].output}")

    model = scripted("remote-asker", ScriptedModel(function=script))
    definition = role("asker", model, tools=("ask_user",))
    async with open_engine(definition, extensions=[]) as engine, service(engine) as (url, app):
        ran = await run_cli("run", "asker", "deploy", "--name", "asker", "--server", url, "--store", nowhere(tmp_path))
        assert ran.exit_code == 0, ran.output
        assert "handed asker" in ran.stderr and "asker waits on you: Where to?" in ran.stderr
        assert "needs_you" in ran.stdout  # the final line: it waits, in the service
        assert "agent_create" in app.tools() and "agent_await" in app.tools()
        (request,) = await engine.store.list_requests(status="pending")
        answered = await run_cli("answer", request.id, "--choice", "2", "--server", url, "--store", store_url)
        assert answered.exit_code == 0, answered.output

        async def deployed() -> bool:
            current = await engine.store.get_session(request.session_id)
            return bool(current.last_text == "deploying to staging")

        await until(deployed)  # the service ran the rest of the turn


async def test_run_through_the_service_says_its_agents_dir_is_not_used(
    open_engine: OpenEngine, scripted: Scripted, tmp_path: Path
) -> None:
    """Once `run --agents-dir DIR` with a service running said only "no agent type 'solo'" for a role that only
    DIR defines (the service's roster was asked), not that the flag was left aside, as `create` says."""
    model = scripted("remote-run-dir", ScriptedModel.replying("hello"))
    async with open_engine(role("helper", model), extensions=[]) as engine, service(engine) as (url, app):
        away = ["--server", url, "--store", nowhere(tmp_path)]
        ran = await run_cli("run", "solo", "hi", "--agents-dir", str(tmp_path), *away)
        assert ran.exit_code == 1 and "no agent type 'solo'" in ran.stderr
        note = f"--agents-dir not used: the service at {url} runs the agent with its own roles and setup"
        assert note in ran.stderr and "--server none runs it here" in ran.stderr
        assert app.tools() == ["agent_create"]


async def test_run_shows_a_spinner_with_the_time_waited_while_a_turn_is_quiet(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """`run` without --json: between the printed events, a spinner line on the same terminal says what the
    session is doing and for how long; without a terminal nothing is added."""
    import io

    from rich.console import Console

    from agentwatch.cli.run import _wait

    async def nap() -> str:
        await asyncio.sleep(2.5)
        return "rested"

    model = scripted(
        "spinner-nap", ScriptedModel(function=lambda ctx: Reply("up") if ctx.tool_results else CallTool("nap", {}))
    )
    async with open_engine(role("napper", model, tools=("nap",)), tools=[nap]) as engine:
        for terminal in (True, False):
            shown = io.StringIO()
            screen = Console(file=shown, force_terminal=terminal, width=100)
            session = await engine.create("napper", name=f"napper-{terminal}")
            await engine.enqueue(session.id, "sleep")
            done, timed_out = await _wait(engine, session.id, 30, on=screen)
            assert (done.status, timed_out) == ("completed", False)
            if terminal:
                assert f"napper-{terminal} running · 2s" in shown.getvalue()
            else:
                assert shown.getvalue() == ""


def test_a_withdrawn_announcement_hands_the_file_only_to_a_live_service_of_the_same_store(tmp_path: Path) -> None:
    """Stores without a file of their own (PostgreSQL) share the project's discovery path: a service of another
    store still running must not be named when this one stops; a dead one's record is cleared."""
    from agentwatch.config import Config

    config = Config(root=tmp_path, store="postgresql://127.0.0.1/one")
    path = discovery_file(config)
    path.parent.mkdir(parents=True)
    alive, dead = os.getppid(), 2**22 + 12345
    other_store = {"url": "http://127.0.0.1:1", "pid": alive, "token": False, "store": "postgresql://127.0.0.1/two"}
    (path.parent / f".{path.name}.{alive}").write_text(json.dumps(other_store))
    (path.parent / f".{path.name}.{dead}").write_text(json.dumps(other_store | {"pid": dead}))
    write_discovery(config, "http://127.0.0.1:2", token_needed=False)
    remove_discovery(path)
    assert not path.exists()  # the other store's service is not this store's
    assert not (path.parent / f".{path.name}.{dead}").exists()

    same_store = other_store | {"store": "postgresql://127.0.0.1/one", "url": "http://127.0.0.1:3"}
    (path.parent / f".{path.name}.{alive}").write_text(json.dumps(same_store))
    write_discovery(config, "http://127.0.0.1:2", token_needed=False)
    remove_discovery(path)
    assert json.loads(path.read_text())["url"] == "http://127.0.0.1:3"


async def test_an_unknown_agent_or_run_names_the_command_to_run_on_the_store_and_through_the_service(
    open_engine: OpenEngine, store_url: str, tmp_path: Path
) -> None:
    """What to do next is a tool call for an agent (over MCP and HTTP) and the command that makes it for a person
    here: the same suggestion, worded where it is shown, whether the store or a service answered."""
    gone = "ses_01m944ebaz6w8fg8jp3nbf9c4y"
    expected = {
        ("get", "nobody"): ("`agentwatch ls -q nobody` finds similar names", "agent_list {q: 'nobody'}"),
        ("get", gone): ("`agentwatch ls --all` lists the ids", "agent_list {deleted: true}"),
        ("runs", "trace", "run_nope"): ("`agentwatch runs ls` lists the runs", "run_list lists"),
        ("runs", "trace", "workflow:report"): (
            "`agentwatch runs ls --entity workflow:report` lists its runs' ids",
            "run_list {entity: 'workflow:report'}",
        ),
    }
    async with open_engine(extensions=[]) as engine, service(engine) as (url, _):
        for argv, (command, tool_call) in expected.items():
            for where in (["--store", store_url, "--server", "none"], ["--server", url, "--store", nowhere(tmp_path)]):
                said = await run_cli(*argv, *where)
                assert said.exit_code == 1 and command in said.stderr and tool_call not in said.stderr, said.output
                error = answer_of(await run_cli(*argv, *where, "--json"))["error"]
                assert command in error["message"] and error["details"]["suggestions"], error
