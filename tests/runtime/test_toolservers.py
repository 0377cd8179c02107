"""Tool servers: an agent calls the tools of real MCP servers (the official SDK's, started by the test) on stdio
and on streamable HTTP; a server that wants authorization opens an `oauth` request the call waits on; a
server's notifications become `external.event`s; a server that cannot start is a visible `runtime.error`."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import JsonValue, ValidationError

from agentwatch.events import (
    AuthRequired,
    Event,
    ExternalEvent,
    RequestOpened,
    RequestResolved,
    RuntimeNotice,
    ToolCall,
    ToolResult,
)
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.runtime.policy import Policy, ToolRequest, Verdict
from agentwatch.runtime.roster import AgentDefinition
from agentwatch.runtime.toolservers import ToolServer, read_oauth_answer, shown_answer, tool_servers
from agentwatch.tools import Caller, Tool
from tests.base_install import base_install
from tests.fakes.mcp_tool_server import VAULT_TOKEN, serve_http
from tests.runtime.support import OpenEngine, Scripted, role

SERVER_SCRIPT = str(Path(__file__).resolve().parents[1] / "fakes" / "mcp_tool_server.py")
STDIO = ToolServer(name="fake", command=sys.executable, args=(SERVER_SCRIPT,))


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    with serve_http() as url:
        yield url


def calls(*steps: tuple[str, dict[str, JsonValue]], seen: list[str] | None = None) -> ScriptedModel:
    """A model that makes these calls one after the other (after each prompt), then replies with every result it
    got; `seen` gets the names of the tools it was offered."""

    def script(ctx: Any) -> Any:
        done: list[str] = []
        for entry in ctx.transcript:
            if entry.kind == "prompt":
                done = []
            elif entry.kind == "tool_result":
                done.append(entry.text)
        if seen is not None:
            seen[:] = ctx.tools
        if len(done) < len(steps):
            name, args = steps[len(done)]
            return CallTool(name, args)
        return Reply(" | ".join(done) or "nothing called")

    return ScriptedModel(function=script)


async def events(engine: Engine, session_id: str) -> list[Event]:
    return await engine.store.read_events(session_id, limit=1000)


def payloads(found: list[Event], kind: type[Any]) -> list[Any]:
    return [e.payload for e in found if isinstance(e.payload, kind)]


async def test_an_agent_calls_a_stdio_servers_tool_and_the_result_is_a_normal_tool_result(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    offered: list[str] = []
    ref = scripted("adder", calls(("fake__add", {"a": 2, "b": 3}), seen=offered))
    async with open_engine(role("adder", ref, mcp_servers=(STDIO,))) as engine:
        snapshot = await engine.task("adder", "add 2 and 3", timeout=60)
        assert (snapshot["status"], snapshot["lastAssistantText"]) == ("completed", "5")
        found = await events(engine, snapshot["agentId"])
        (call,) = payloads(found, ToolCall)
        (result,) = payloads(found, ToolResult)
        assert (call.tool_name, call.input) == ("fake__add", {"a": 2, "b": 3})
        assert (result.tool_call_id, result.tool_name, result.output, result.status) == (
            call.tool_call_id,
            "fake__add",
            "5",
            "ok",
        )
        # The model saw every tool of the server under the server's name, beside none of ours.
        assert sorted(offered) == ["fake__add", "fake__announce", "fake__crash", "fake__vault"]
        assert payloads(found, RuntimeNotice) == []
        pool = tool_servers(engine)
        assert pool._clients == {}  # the task ended: its server was let go
        assert pool._locks == {}  # (and nothing of it is kept, for an engine that meets many sessions)
        await asyncio.gather(*pool._closing)


async def test_a_session_keeps_its_server_across_turns_and_the_engine_closes_it(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    ref = scripted("chat", calls(("fake__add", {"a": 1, "b": 1})))
    async with open_engine(role("chat", ref, mcp_servers=(STDIO,))) as engine:
        session = await engine.create("chat", source="chat")
        await engine.enqueue(session.id, "once")
        await engine.wait(session.id, 60)
        pool = tool_servers(engine)
        (client,) = pool._clients.values()
        await engine.enqueue(session.id, "again")
        after, _ = await engine.wait(session.id, 60)
        assert after.last_text == "2"
        assert list(pool._clients.values()) == [client]  # the same connection, not a second process
        assert len(payloads(await events(engine, session.id), ToolResult)) == 2
    assert pool._clients == {} and pool._closed


async def test_a_server_that_dies_fails_its_call_and_is_started_again_for_the_next_turn(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    def script(ctx: Any) -> Any:
        if ctx.tool_results:
            return Reply(ctx.tool_results[0].output)
        return CallTool("fake__crash", {}) if ctx.prompt == "crash" else CallTool("fake__add", {"a": 4, "b": 5})

    ref = scripted("fragile", ScriptedModel(function=script))
    async with open_engine(role("fragile", ref, mcp_servers=(STDIO,))) as engine:
        session = await engine.create("fragile", source="chat")
        await engine.enqueue(session.id, "crash")
        crashed, _ = await engine.wait(session.id, 60)
        (result,) = payloads(await events(engine, session.id), ToolResult)
        assert result.status == "error" and "closed the connection" in result.output
        assert crashed.status == "idle"  # the model saw the failure; the turn went on
        await engine.enqueue(session.id, "add")
        after, _ = await engine.wait(session.id, 60)
        assert after.last_text == "9"


async def test_a_server_notification_becomes_a_durable_external_event(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    ref = scripted("announcer", calls(("fake__announce", {"text": "hello"})))
    async with open_engine(role("announcer", ref, mcp_servers=(STDIO,))) as engine:
        snapshot = await engine.task("announcer", "announce hello", timeout=60)
        assert snapshot["lastAssistantText"] == "announced hello"
        (notice,) = payloads(await events(engine, snapshot["agentId"]), ExternalEvent)
        assert (notice.source, notice.name) == ("mcp:fake", "notifications/message")
        assert notice.body == {"level": "info", "logger": "announcer", "data": "announcing hello"}
        tail = await engine.call_tool("agent_tail", {"id": snapshot["agentId"], "types": ["external.event"]})
        assert [row["type"] for row in tail["events"]] == ["external.event"]


async def test_an_http_server_that_needs_authorization_opens_an_oauth_request_and_the_call_resumes(
    open_engine: OpenEngine, scripted: Scripted, http_url: str
) -> None:
    server = ToolServer(name="vault", url=http_url)
    ref = scripted("reader", calls(("vault__add", {"a": 20, "b": 22}), ("vault__vault", {})))
    async with open_engine(role("reader", ref, mcp_servers=(server,))) as engine:
        snapshot = await engine.task("reader", "read the secret", timeout=60)
        assert (snapshot["status"], snapshot["word"]) == ("awaiting_input", "needs_you")
        hitl = snapshot["pendingHitl"]
        assert hitl["kind"] == "oauth"
        assert "'vault'" in hitl["questions"][0] and "token" in hitl["questions"][0]
        request = await engine.store.get_request(hitl["hitlId"])
        assert (request.kind, request.status, request.body["server"]) == ("oauth", "pending", "vault")
        assert "invalid_token" in str(request.body["challenge"])

        found = await events(engine, snapshot["agentId"])
        opened_at = [i for i, e in enumerate(found) if isinstance(e.payload, RequestOpened)]
        auth_at = [i for i, e in enumerate(found) if isinstance(e.payload, AuthRequired)]
        assert len(opened_at) == len(auth_at) == 1 and opened_at[0] < auth_at[0]
        (auth,) = payloads(found, AuthRequired)
        assert auth.provider == "mcp:vault"
        assert auth.url is not None and auth.url.endswith("/.well-known/oauth-protected-resource/mcp")
        assert [r.output for r in payloads(found, ToolResult)] == ["42"]  # the call before ran; vault's waits

        got = await engine.call_tool("agent_get", {"id": snapshot["agentId"]})
        assert got["current"]["pendingHitl"]["kind"] == "oauth"

        answered = await engine.call_tool("agent_answer", {"hitlId": hitl["hitlId"], "answer": {"token": VAULT_TOKEN}})
        assert answered["status"] == "resolved"
        session, timed_out = await engine.wait(snapshot["agentId"], 60)
        assert (session.status, timed_out, session.last_text) == ("completed", False, "42 | the secret is 42")

        found = await events(engine, snapshot["agentId"])
        vault_results = [r for r in payloads(found, ToolResult) if r.tool_name == "vault__vault"]
        assert [(r.output, r.status) for r in vault_results] == [("the secret is 42", "ok")]
        (resolved,) = payloads(found, RequestResolved)
        assert VAULT_TOKEN not in json.dumps(resolved.answer)  # the token is never shown in an event
        assert (await engine.store.get_request(hitl["hitlId"])).answer == {"token": VAULT_TOKEN}


async def test_an_oauth_request_is_answered_in_another_engine_after_a_restart(
    open_engine: OpenEngine, scripted: Scripted, http_url: str
) -> None:
    ref = scripted("patient", calls(("vault__vault", {})))
    definition = role("patient", ref, mcp_servers=(ToolServer(name="vault", url=http_url),))
    async with open_engine(definition) as first:
        snapshot = await first.task("patient", "read the secret", timeout=60)
        hitl_id = snapshot["pendingHitl"]["hitlId"]
    async with open_engine(definition) as second:  # the token reaches a connection the first engine never had
        await second.answer(hitl_id, f"Bearer {VAULT_TOKEN}")
        session, _ = await second.wait(snapshot["agentId"], 60)
        assert (session.status, session.last_text) == ("completed", "the secret is 42")


async def test_an_answer_the_server_still_refuses_opens_another_request(
    open_engine: OpenEngine, scripted: Scripted, http_url: str
) -> None:
    ref = scripted("again", calls(("vault__vault", {})))
    async with open_engine(role("again", ref, mcp_servers=(ToolServer(name="vault", url=http_url),))) as engine:
        snapshot = await engine.task("again", "read the secret", timeout=60)
        first = snapshot["pendingHitl"]["hitlId"]
        await engine.answer(first, "done")  # but nothing was authorized: the call is refused again
        session, _ = await engine.wait(snapshot["agentId"], 60)
        again = (await engine.call_tool("agent_get", {"id": session.id}))["current"]["pendingHitl"]
        assert (session.status, again["kind"]) == ("awaiting_input", "oauth") and again["hitlId"] != first
        await engine.answer(again["hitlId"], {"token": VAULT_TOKEN})
        session, _ = await engine.wait(snapshot["agentId"], 60)
        assert (session.status, session.last_text) == ("completed", "the secret is 42")


async def test_declining_authorization_reports_the_call_declined(
    open_engine: OpenEngine, scripted: Scripted, http_url: str
) -> None:
    ref = scripted("decliner", calls(("vault__vault", {})))
    server = ToolServer(name="vault", url=http_url)
    async with open_engine(role("decliner", ref, mcp_servers=(server,))) as engine:
        snapshot = await engine.task("decliner", "read the secret", timeout=60)
        await engine.answer(snapshot["pendingHitl"]["hitlId"], "no")
        session, _ = await engine.wait(snapshot["agentId"], 60)
        (result,) = payloads(await events(engine, session.id), ToolResult)
        assert (session.status, result.status, result.output) == ("completed", "denied", "Authorization was declined.")


@pytest.mark.parametrize(
    "server",
    [
        ToolServer(name="broken", command=sys.executable, args=(SERVER_SCRIPT, "--fail")),
        ToolServer(name="broken", command="/nonexistent/mcp-server"),
        ToolServer(name="broken", url="http://127.0.0.1:9/mcp"),
    ],
    ids=["exits", "missing", "closed-port"],
)
async def test_a_server_that_cannot_start_is_a_runtime_error_naming_it(
    open_engine: OpenEngine, scripted: Scripted, server: ToolServer
) -> None:
    ref = scripted("hopeful", calls())
    async with open_engine(role("hopeful", ref, mcp_servers=(server, STDIO))) as engine:
        snapshot = await engine.task("hopeful", "go", timeout=60)
        assert snapshot["status"] == "completed"  # the turn goes on, with the servers that did start
        (error,) = payloads(await events(engine, snapshot["agentId"]), RuntimeNotice)
        assert error.type == "runtime.error" and error.source == "mcp:broken"
        assert "tool server 'broken'" in error.message and server.where in error.message
        if server.args[-1:] == ("--fail",):  # what it wrote on stderr says why
            assert "this server refuses to start" in error.message
        tail = await engine.call_tool("agent_tail", {"id": snapshot["agentId"]})
        assert "runtime.error" in [row["type"] for row in tail["events"]]


async def test_a_server_that_wants_authorization_before_its_handshake_opens_one_request_for_the_next_turns(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    def script(ctx: Any) -> Any:
        if ctx.tool_results:
            return Reply(ctx.tool_results[0].output)
        return CallTool("locked__vault", {}) if "locked__vault" in ctx.tools else Reply("no vault here")

    ref = scripted("locked-out", ScriptedModel(function=script))
    with serve_http(guard_everything=True) as url:
        async with open_engine(role("locked-out", ref, mcp_servers=(ToolServer(name="locked", url=url),))) as engine:
            session = await engine.create("locked-out", source="chat")
            for prompt in ("first", "again"):  # the turns go on without the server; one request waits for both
                await engine.enqueue(session.id, prompt)
                done, _ = await engine.wait(session.id, 60)
                assert (done.status, done.last_text) == ("idle", "no vault here")
            found = await events(engine, session.id)
            (opened,) = payloads(found, RequestOpened)
            (auth,) = payloads(found, AuthRequired)
            assert (opened.kind, opened.tool_call_id) == ("oauth", None)
            assert auth.provider == "mcp:locked" and auth.url is not None and "oauth-protected-resource" in auth.url
            assert payloads(found, RuntimeNotice) == []
            got = await engine.call_tool("agent_get", {"id": session.id})
            assert got["current"]["pendingHitl"]["kind"] == "oauth"
            assert (got["status"], got["word"]) == ("idle", "needs_you")  # no turn waits, but a person is asked
            listed = await engine.call_tool("agent_list", {"word": ["needs_you"]})
            assert [row["id"] for row in listed["agents"]] == [session.id]

            answered = await engine.call_tool(
                "agent_answer", {"hitlId": opened.request_id, "answer": {"token": VAULT_TOKEN}}
            )
            assert answered["status"] == "resolved"
            await engine.enqueue(session.id, "now read it")
            done, _ = await engine.wait(session.id, 60)
            assert (done.status, done.last_text) == ("idle", "the secret is 42")

        keyed = ToolServer(name="locked", url=url, headers={"Authorization": f"Bearer {VAULT_TOKEN}"})
        async with open_engine(role("locked-out", ref, mcp_servers=(keyed,))) as engine:
            snapshot = await engine.task("locked-out", "go", timeout=60)  # a token in its headers lets it in
            assert snapshot["lastAssistantText"] == "the secret is 42"


async def test_the_policy_decides_server_tools_under_their_prefixed_name(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    def no_adding(request: ToolRequest) -> Verdict | None:
        return Verdict("deny", "no adding today") if request.tool_name == "fake__add" else None

    ref = scripted("refused", calls(("fake__add", {"a": 1, "b": 2})))
    async with open_engine(
        role("refused", ref, mcp_servers=(STDIO,)), policies=[Policy("no-add", no_adding)]
    ) as engine:
        snapshot = await engine.task("refused", "add", timeout=60)
        (result,) = payloads(await events(engine, snapshot["agentId"]), ToolResult)
        assert result.status == "error" and "no adding today" in result.output


async def test_a_server_tool_to_approve_called_against_its_input_schema_fails_at_once_and_nobody_is_asked(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Checked against the schema the server listed the tool with: only the valid call waits on a person."""
    ref = scripted("approved-adder", calls(("fake__add", {"a": "two", "b": 3}), ("fake__add", {"a": 2, "b": 3})))
    definition = role("approved-adder", ref, mcp_servers=(STDIO,), approval_tools=("fake__add",))
    async with open_engine(definition) as engine:
        asked = await engine.task("approved-adder", "add", timeout=60)
        assert asked["pendingHitl"]["kind"] == "approval"
        (request,) = await engine.store.list_requests(session_id=asked["agentId"])
        assert request.body == {"tool_name": "fake__add", "input": {"a": 2, "b": 3}}
        (refused,) = payloads(await events(engine, asked["agentId"]), ToolResult)
        assert refused.status == "error"
        assert refused.output.startswith("InvalidArgument: bad arguments for fake__add: a: 'two' is not of type")
        await engine.answer(request.id, True)
        done, _ = await engine.wait(asked["agentId"], 60)
        assert done.last_text == f"{refused.output} | 5"


async def test_a_bare_schema_tool_to_approve_called_with_bad_arguments_fails_at_once_on_a_base_install(
    open_engine: OpenEngine, scripted: Scripted, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool built from a bare JSON schema is checked against it as a server's tool is, with no extra installed:
    the bad call never reaches a person."""
    base_install(monkeypatch)

    async def add(engine: Any, caller: Caller, args: dict[str, Any]) -> JsonValue:
        return args["a"] + args["b"]

    schema: dict[str, JsonValue] = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    }
    bare = Tool("add", "Add two integers.", schema, add, requires_approval=True)
    ref = scripted("bare-adder", calls(("add", {"a": "two", "b": 3}), ("add", {"a": 2, "b": 3})))
    async with open_engine(role("bare-adder", ref, tools=("add",)), tools=[bare]) as engine:
        asked = await engine.task("bare-adder", "add", timeout=60)
        assert asked["pendingHitl"]["kind"] == "approval"
        (request,) = await engine.store.list_requests(session_id=asked["agentId"])
        assert request.body == {"tool_name": "add", "input": {"a": 2, "b": 3}}
        (refused,) = payloads(await events(engine, asked["agentId"]), ToolResult)
        assert refused.output.startswith("InvalidArgument: bad arguments for add: a: 'two' is not of type")
        await engine.answer(request.id, True)
        done, _ = await engine.wait(asked["agentId"], 60)
        assert done.last_text == f"{refused.output} | 5"


def test_a_definition_lists_servers_in_either_spelling_and_bad_ones_are_refused() -> None:
    listed = {"name": "files", "command": "npx", "args": ["-y", "server"], "env": {"A": "1"}}
    for key in ("mcp_servers", "mcpServers"):
        definition = AgentDefinition.model_validate({"name": "a", "model": "scripted:a", key: [listed]})
        assert definition.mcp_servers == (
            ToolServer(name="files", command="npx", args=("-y", "server"), env={"A": "1"}),
        )
        hash(definition)
    bad: list[dict[str, JsonValue]] = [
        {"name": "x", "command": "a", "url": "http://h/mcp"},
        {"name": "x"},
        {"name": "x", "url": "ftp://h"},
        {"name": "x", "url": "http://h/mcp", "args": ["a"]},
        {"name": "Has_Caps", "command": "a"},
        {"name": "x", "command": "a", "port": 3},
    ]
    for server in bad:
        with pytest.raises(ValidationError):
            AgentDefinition.model_validate({"name": "a", "model": "scripted:a", "mcp_servers": [server]})
    twice = [{"name": "x", "command": "a"}, {"name": "x", "url": "http://h/mcp"}]
    with pytest.raises(ValidationError, match="two tool servers are named 'x'"):
        AgentDefinition.model_validate({"name": "a", "model": "scripted:a", "mcp_servers": twice})


def test_a_definition_with_servers_reads_back_from_its_markdown(tmp_path: Path) -> None:
    from agentwatch.runtime.roster import load_roster

    servers = (
        ToolServer(name="fs", command="npx", args=("-y", "server"), env={"A": "1"}, cwd="."),
        ToolServer(name="web", url="http://127.0.0.1:1/mcp", headers={"X-Team": "core"}),
    )
    definition = role("keeper", "scripted:keeper", mcp_servers=servers)
    (tmp_path / "keeper.md").write_text(definition.to_markdown())
    roster = load_roster(tmp_path)
    assert roster.get("keeper") == definition
    (tmp_path / "both.md").write_text("---\nmodel: a:b\nmcp_servers: [{name: x, command: a, url: 'http://h'}]\n---\n")
    (problem,) = [p for p in load_roster(tmp_path).problems if p.path == tmp_path / "both.md"]
    assert (problem.field, "has both `command` and `url`" in problem.message) == ("mcp_servers[0]", True)


def test_oauth_answers() -> None:
    assert read_oauth_answer({"token": "t"}) == read_oauth_answer("Bearer t")
    assert read_oauth_answer({"token": "t"}).token == "t"
    answers: list[JsonValue] = ["done", "no", {"approved": False}, False, True]
    assert [read_oauth_answer(a).approved for a in answers] == [
        True,
        False,
        False,
        False,
        True,
    ]
    assert shown_answer("oauth", {"token": "t"}) == {"approved": True, "token": "[not shown]"}
    assert shown_answer("question", {"token": "t"}) == {"token": "t"}
