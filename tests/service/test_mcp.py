"""The MCP server, driven by the official SDK's own client over streamable HTTP and over stdio."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

import agentwatch
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import ScriptedModel
from agentwatch.service import ServiceSettings, create_app
from tests.service.support import busy_agent_served, role, served

ROOT = Path(__file__).resolve().parents[2]


async def exercise(client: Client, engine_tools: dict[str, Any] | None) -> dict[str, Any]:
    """List tools, run a task, list, tail it, and make a refused call; returns what was seen."""
    listed = await client.list_tools()
    by_name = {tool.name: tool for tool in listed.tools}
    if engine_tools is not None:
        for name, tool in engine_tools.items():
            if tool.asks_user or tool.agents_only:
                assert name not in by_name
            else:
                assert by_name[name].input_schema == tool.parameters
                assert by_name[name].description == tool.description
                modelled = tool.output_schema is not None and tool.output_schema.get("type") == "object"
                assert by_name[name].output_schema == (tool.output_schema if modelled else None)
        assert by_name["agent_get"].output_schema is not None  # (once: no tool had one)
    task = await client.call_tool("agent_task", {"role": "helper", "prompt": "Do it"})
    assert not task.is_error, task
    snapshot = task.structured_content
    assert json.loads(task.content[0].text) == snapshot  # type: ignore[union-attr]
    agents = await client.call_tool("agent_list", {})
    tail = await client.call_tool("agent_tail", {"id": snapshot["agentId"]})
    # The client checks each structured answer against the tool's outputSchema: these would raise if one did not
    # match its own schema.
    for read, args in (
        ("agent_get", {"id": snapshot["agentId"]}),
        ("agent_history", {"id": snapshot["agentId"]}),
        ("agent_summary", {}),
        ("agent_export", {"id": snapshot["agentId"]}),
        ("agent_prompt", {"id": snapshot["agentId"]}),
    ):
        answered = await client.call_tool(read, args)
        assert not answered.is_error, answered
    refused = await client.call_tool("agent_get", {"id": "ses_nobody"})
    bad = await client.call_tool("agent_list", {"bogus": True})
    return {"tools": set(by_name), "task": snapshot, "agents": agents, "tail": tail, "refused": refused, "bad": bad}


def check(seen: dict[str, Any], done_text: str) -> None:
    assert {"agent_list", "agent_tail", "agent_task", "agent_get", "agent_history"} <= seen["tools"]
    assert "ask_user" not in seen["tools"]
    assert seen["task"]["status"] == "completed" and seen["task"]["lastAssistantText"] == done_text
    assert [a["id"] for a in seen["agents"].structured_content["agents"]] == [seen["task"]["agentId"]]
    assert seen["tail"].structured_content["events"], seen["tail"]
    assert seen["refused"].is_error and seen["refused"].structured_content["error"]["code"] == "not_found"
    assert seen["bad"].is_error and seen["bad"].structured_content["error"]["code"] == "invalid_argument"


async def test_mcp_over_streamable_http(open_engine: Any, scripted: Any) -> None:
    model = scripted("mcp-http", ScriptedModel.replying("Done over HTTP."))
    async with open_engine(role("helper", model)) as engine, served(create_app(engine)) as base:
        async with Client(f"{base}/mcp") as client:
            seen = await exercise(client, engine.tools)
            server = client.server_info
        check(seen, "Done over HTTP.")
    assert (server.name, server.version) == ("agentwatch", agentwatch.__version__)


async def test_mcp_over_http_with_a_read_only_token_offers_only_reads(open_engine: Any) -> None:
    settings = ServiceSettings(token="full", read_token="reads")
    async with open_engine() as engine, served(create_app(engine, settings)) as base:
        async with (
            httpx2.AsyncClient(headers={"authorization": "Bearer reads"}) as http,
            Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client,
        ):
            names = {tool.name for tool in (await client.list_tools()).tools}
            refused = await client.call_tool("agent_task", {"role": "helper", "prompt": "go"})
            listed = await client.call_tool("agent_list", {})
        async with httpx2.AsyncClient() as anonymous:
            response = await anonymous.post(f"{base}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        # Once refused with the REST error body, which an MCP client reads as "Server returned an error response".
        async with httpx2.AsyncClient(headers={"authorization": "Bearer stale"}) as http:
            with pytest.raises(BaseExceptionGroup) as caught:  # (the client's task group raises it)
                async with Client(streamable_http_client(f"{base}/mcp", http_client=http)):
                    pass
        assert caught.group_contains(MCPError, match="the token is not valid for this service", depth=None)
    assert "agent_list" in names and "agent_task" not in names
    assert refused.is_error and refused.structured_content["error"]["code"] == "forbidden"
    assert not listed.is_error
    assert response.status_code == 401 and response.json()["error"]["data"]["code"] == "unauthenticated"


async def test_mcp_over_stdio(tmp_path: Path) -> None:
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "tests.service.mcp_stdio_server", f"sqlite:///{tmp_path / 'mcp.db'}", str(tmp_path)],
        cwd=str(ROOT),
    )
    async with Client(server) as client:
        seen = await exercise(client, None)
    check(seen, "Done over stdio.")


def stdio_server(tmp_path: Path, *options: str) -> StdioServerParameters:
    """The `agentwatch mcp` of `tests.service.mcp_stdio_server`, on a store of the test's own."""
    store = f"sqlite:///{tmp_path / 'mcp.db'}"
    module = "tests.service.mcp_stdio_server"
    return StdioServerParameters(
        command=sys.executable, args=["-m", module, store, str(tmp_path), *options], cwd=str(ROOT)
    )


async def test_a_hook_fired_over_stdio_runs_in_the_servers_engine(tmp_path: Path) -> None:
    async with Client(stdio_server(tmp_path)) as client:
        fired = await client.call_tool("hook_fire", {"name": "check", "input": {"sha": "4f2a"}})
        assert not fired.is_error, fired
        run_id = fired.structured_content["runId"]
        for _ in range(100):
            trace = (await client.call_tool("run_trace", {"id": run_id})).structured_content
            if trace["run"]["status"] != "running":
                break
            await anyio.sleep(0.1)
    assert trace["run"]["status"] == "completed", trace


async def test_a_hook_fired_where_no_turn_runs_is_refused_in_words_an_agent_can_act_on(tmp_path: Path) -> None:
    """Once: the refusal told the calling agent to fire it "through `agentwatch serve`", a command it cannot run."""
    async with Client(stdio_server(tmp_path, "turnless")) as client:
        refused = await client.call_tool("hook_fire", {"name": "check"})
    error = refused.structured_content["error"]
    assert refused.is_error and error["code"] == "conflict"
    assert "agentwatch " not in error["message"], error
    assert error["message"].startswith("hook 'check' cannot fire here: a fire runs in an engine that runs turns")


async def test_a_read_only_stdio_server_runs_no_turn_and_creates_no_store(tmp_path: Path) -> None:
    """Once: `mcp --read-only` ran the store's queued turns (and, with no definitions where it was started,
    failed them for good), and made a store where none was."""
    url = f"sqlite:///{tmp_path / 'queued.db'}"
    async with Engine.open(url, root=tmp_path, runs_turns=False, definitions=[role("helper", "scripted:x")]) as acting:
        queued = await acting.create("helper")
        await acting.enqueue(queued.id, "waits for an engine that runs turns")
    command = [sys.executable, "-m", "agentwatch", "mcp", "--read-only", "--store"]
    server = StdioServerParameters(command=command[0], args=[*command[1:], url], cwd=str(tmp_path))
    async with Client(server) as client:
        created = await client.call_tool("agent_create", {"role": "helper"})
        assert created.is_error and "mcp --read-only" in created.structured_content["error"]["message"]
        for _ in range(10):  # (it continued such a turn at once, and failed it: its roster has no `helper`)
            got = (await client.call_tool("agent_get", {"id": queued.id})).structured_content
            assert (got["status"], got["pendingInputs"]) == ("idle", 1), got
            await anyio.sleep(0.2)

    missing = tmp_path / "nowhere" / "missing.db"
    refused = await anyio.run_process([*command, f"sqlite:///{missing}"], check=False)
    assert refused.returncode == 1 and "no store at" in refused.stderr.decode()
    assert not missing.parent.exists()


def _waiting_in(function: str) -> int:
    """How many tasks of this loop are inside a call of `function` (a coroutine's qualified name) right now."""
    count = 0
    for task in asyncio.all_tasks():
        coro: Any = task.get_coro()
        while coro is not None and hasattr(coro, "cr_code"):
            if coro.cr_code.co_qualname == function:
                count += 1
                break
            coro = coro.cr_await
    return count


async def test_an_mcp_wait_whose_caller_hung_up_ends(open_engine: Any, scripted: Any) -> None:
    """Each `agent_await` over MCP went on for its whole timeout after its client had gone (HTTP's were ended):
    a client with the read token could pile up waits of an hour each."""
    async with busy_agent_served(open_engine, scripted, "mcp-hung-up") as (_, agent_id, port):
        call = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "agent_await", "arguments": {"agentId": agent_id, "timeoutMs": 600_000}},
        }
        body = json.dumps(call).encode()
        request = (
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        for _ in range(10):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            await writer.drain()
            for _ in range(100):  # (the wait has begun)
                if _waiting_in("Engine.wait"):
                    break
                await asyncio.sleep(0.01)
            assert _waiting_in("Engine.wait"), "the wait never began"  # (else the test passed on a refused call)
            writer.close()
        for _ in range(100):
            if not _waiting_in("Engine.wait"):
                break
            await asyncio.sleep(0.02)
        assert not _waiting_in("Engine.wait")


async def test_a_stdio_client_that_closes_its_end_gets_every_answer(tmp_path: Path) -> None:
    """Once the server's run ended with its input: requests piped in, then the pipe closed, got the answer to
    `initialize` alone, the calls still running were dropped."""
    url = f"sqlite:///{tmp_path / 'piped.db'}"
    async with Engine.open(url, root=tmp_path, runs_turns=False, definitions=[role("helper", "scripted:x")]) as acting:
        agent = await acting.create("helper", name="piped")
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "pipe", "version": "1"}}
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "agent_list", "arguments": {}}},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "agent_await", "arguments": {"agentId": agent.id, "timeoutMs": 300}},
        },
    ]
    piped = "".join(json.dumps(line) + "\n" for line in lines).encode()
    command = [sys.executable, "-m", "agentwatch", "mcp", "--read-only", "--store", url]
    done = await anyio.run_process(command, input=piped, check=False, cwd=str(tmp_path))
    answers = {answer["id"]: answer for answer in map(json.loads, done.stdout.decode().splitlines())}
    assert done.returncode == 0 and sorted(answers) == [1, 2, 3], done.stderr.decode()[-2000:]
    assert [a["name"] for a in answers[2]["result"]["structuredContent"]["agents"]] == ["piped"]
    assert answers[3]["result"]["structuredContent"]["status"] == "idle"


async def test_an_unknown_agent_or_run_over_mcp_names_the_tool_to_call(open_engine: Any) -> None:
    """Once: the error an agent got over MCP (and HTTP) said what to do as a CLI command (`agentwatch runs ls`,
    `agentwatch ls -q ...`), which an agent calling tools cannot run; it names the tool call now, and carries it as
    data."""
    async with open_engine() as engine, served(create_app(engine)) as base, Client(f"{base}/mcp") as client:
        refused = {
            call: (await client.call_tool(call[0], dict([call[1:]]))).structured_content["error"]
            for call in (
                ("agent_get", "name", "nobody"),
                ("agent_get", "id", "ses_01m944ebaz6w8fg8jp3nbf9c4y"),
                ("run_trace", "id", "run_nope"),
                ("run_trace", "id", "workflow:report"),
            )
        }
        async with httpx2.AsyncClient() as http:  # (over HTTP the same answer)
            posted = await http.post(f"{base}/api/tools/run_trace", json={"id": "run_nope"})
    assert (posted.status_code, posted.json()["error"]) == (404, refused[("run_trace", "id", "run_nope")])
    suggested = {call: (error["message"], error["details"]["suggestions"]) for call, error in refused.items()}
    assert suggested == {
        ("agent_get", "name", "nobody"): (
            "no agent named 'nobody'; agent_list {q: 'nobody'} finds similar names, and a deleted agent is found by "
            "its id",
            [{"tool": "agent_list", "arguments": {"q": "nobody"}}],
        ),
        ("agent_get", "id", "ses_01m944ebaz6w8fg8jp3nbf9c4y"): (
            "no session with id 'ses_01m944ebaz6w8fg8jp3nbf9c4y' (it may have been reaped); agent_list "
            "{deleted: true} lists the ids",
            [{"tool": "agent_list", "arguments": {"deleted": True}}],
        ),
        ("run_trace", "id", "run_nope"): (
            "no run with id 'run_nope'; run_list lists the runs",
            [{"tool": "run_list", "arguments": {}}],
        ),
        ("run_trace", "id", "workflow:report"): (
            "no run with id 'workflow:report': that is an entity; run_list {entity: 'workflow:report'} lists its "
            "runs' ids",
            [{"tool": "run_list", "arguments": {"entity": "workflow:report"}}],
        ),
    }
