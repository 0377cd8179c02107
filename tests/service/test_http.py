"""The tools over HTTP: the same dict as `engine.call_tool`, the status from the error code."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import httpx

from agentwatch.events import NewEvent, UserMessage
from agentwatch.runtime.models import ScriptedModel
from agentwatch.service import ServiceSettings, create_app
from agentwatch.store import SessionDraft
from agentwatch.tools import MAX_PROMPT_CHARS, function_tool
from tests.service.support import busy_agent_served, role, served
from tests.store.test_damaged import tamper

JSON = {"content-type": "application/json"}


async def test_post_tool_answers_exactly_what_call_tool_answers(open_engine: Any, scripted: Any) -> None:
    model = scripted("helper", ScriptedModel.replying("All done."))
    async with (
        open_engine(role("helper", model)) as engine,
        served(create_app(engine)) as base,
        httpx.AsyncClient(base_url=base) as http,
    ):
        task = await http.post("/api/tools/agent_task", json={"role": "helper", "prompt": "Do it"})
        assert task.status_code == 200, task.text
        answer = task.json()
        assert answer["status"] == "completed" and answer["lastAssistantText"] == "All done."
        listed = await http.post("/api/tools/agent_list", json={})
        assert listed.status_code == 200
        assert listed.json() == await engine.call_tool("agent_list", {})
        tail = await http.post("/api/tools/agent_tail", json={"id": answer["agentId"]})
        assert tail.json() == await engine.call_tool("agent_tail", {"id": answer["agentId"]})
        empty_body = await http.post("/api/tools/agent_list")
        assert empty_body.status_code == 200 and empty_body.json() == listed.json()


def _report(text: str) -> str:
    """An agents-only tool, as `ObserverReport` is (it answers only an observer agent's call in its turn)."""
    return text


async def test_get_tools_lists_every_callable_tool_with_its_schema(open_engine: Any) -> None:
    agents_only = dataclasses.replace(function_tool(_report), agents_only=True)
    async with (
        open_engine(tools=[agents_only]) as engine,
        served(create_app(engine)) as base,
        httpx.AsyncClient(base_url=base) as http,
    ):
        listed = (await http.get("/api/tools")).json()["tools"]
    by_name = {t["name"]: t for t in listed}
    expected = {name for name, tool in engine.tools.items() if not (tool.asks_user or tool.agents_only)}
    assert set(by_name) == expected
    assert "_report" in engine.tools and "_report" not in by_name
    for name in expected:
        assert by_name[name]["parameters"] == engine.tools[name].parameters
        assert by_name[name]["grant"] == engine.tools[name].grant
        assert by_name[name]["callable"] is True


async def test_observer_report_is_not_offered(open_engine: Any) -> None:
    """Once listed (and callable by a read-only token), though it answers only an observer agent's call from
    inside its turn."""
    async with (
        open_engine(extensions=None) as engine,  # the default extensions: observer agents, and their tool
        served(create_app(engine, TOKENS_FOR_REPORT)) as base,
        httpx.AsyncClient(base_url=base) as http,
    ):
        listed = {t["name"] for t in (await http.get("/api/tools", headers=_bearer("full"))).json()["tools"]}
        called = await http.post("/api/tools/ObserverReport", json={"report": "x"}, headers=_bearer("reads"))
    assert "ObserverReport" in engine.tools and "ObserverReport" not in listed and "agent_list" in listed
    assert called.status_code == 403


TOKENS_FOR_REPORT = ServiceSettings(token="full", read_token="reads")


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def test_refused_calls_are_structured_errors_with_their_status(open_engine: Any) -> None:
    settings = ServiceSettings(max_body_bytes=10_000)
    async with (
        open_engine() as engine,
        served(create_app(engine, settings)) as base,
        httpx.AsyncClient(base_url=base) as http,
    ):
        cases: list[tuple[int, str, httpx.Response]] = [
            (404, "not_found", await http.post("/api/tools/no_such_tool", json={})),
            (400, "invalid_argument", await http.post("/api/tools/agent_list", json={"bogus": 1})),
            (400, "invalid_argument", await http.post("/api/tools/agent_list", content=b"{nope", headers=JSON)),
            (400, "invalid_argument", await http.post("/api/tools/agent_list", content=b"[1, 2]", headers=JSON)),
            # Once a 500 and two tracebacks: nesting deeper than the JSON decoder recurses.
            (400, "invalid_argument", await http.post("/api/tools/agent_list", content=DEEP, headers=JSON)),
            (400, "invalid_argument", await http.post("/api/tools/agent_list", json={"cursor": "p1.zz"})),
            (400, "invalid_argument", await http.post("/api/tools/run_list", json={"kind": "workflw"})),
            (404, "not_found", await http.post("/api/tools/agent_get", json={"id": "ses_nobody"})),
            (415, "unsupported_media_type", await http.post("/api/tools/agent_list", content=b"{}")),
            (413, "too_large", await http.post("/api/tools/agent_list", json={"x": "a" * 20_000})),
            (404, "not_found", await http.get("/api/nothing/here")),
            (405, "method_not_allowed", await http.get("/api/tools/agent_list")),
            (400, "invalid_argument", await http.post("/api/tools/ask_user", json={"question": "?"})),
        ]
        chunked = await http.post(
            "/api/tools/agent_list", content=_chunks(b"a" * 30_000), headers={"content-type": "application/json"}
        )
        cases.append((413, "too_large", chunked))
    for status, code, response in cases:
        assert response.status_code == status, (status, code, response.text)
        body = response.json()
        assert set(body) == {"error"} and body["error"]["code"] == code and body["error"]["message"], body
        assert response.headers["content-type"].startswith("application/json")
        if status == 405:  # Once the structured error dropped it.
            assert response.headers["allow"] == "POST", response.headers


DEEP = b"[" * 3000 + b"]" * 3000
"""JSON nested deeper than Python's decoder goes (it raises RecursionError, not ValueError)."""


async def _chunks(data: bytes) -> Any:
    for start in range(0, len(data), 4096):
        yield data[start : start + 4096]


async def test_the_longest_prompt_a_tool_takes_fits_in_a_body_however_it_is_escaped(
    open_engine: Any, scripted: Any
) -> None:
    """Once refused as too large: 100,000 characters outside the BMP, `\\u`-escaped as `json.dumps` writes them by
    default, are 1.2 MB, above the 1 MB a body could be."""
    body = json.dumps({"role": "helper", "prompt": "\N{GRINNING FACE}" * MAX_PROMPT_CHARS}).encode()
    assert len(body) > 1_200_000
    model = scripted("http-long", ScriptedModel.replying("read it"))
    async with (
        open_engine(role("helper", model)) as engine,
        served(create_app(engine, ServiceSettings())) as base,
        httpx.AsyncClient(base_url=base) as http,
    ):
        response = await http.post("/api/tools/agent_create", content=body, headers=JSON)
        assert response.status_code == 200, response.text[:300]
        too_long = json.dumps({"role": "helper", "prompt": "x" * (MAX_PROMPT_CHARS + 1)}).encode()
        refused = await http.post("/api/tools/agent_create", content=too_long, headers=JSON)
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_argument"


async def test_openapi_document_is_served(open_engine: Any) -> None:
    async with (
        open_engine() as engine,
        served(create_app(engine)) as base,
        httpx.AsyncClient(base_url=base) as http,
    ):
        document = (await http.get("/api/openapi.json")).json()
    assert "/api/tools/agent_list" in document["paths"]
    assert json.loads(json.dumps(document)) == document


async def test_a_wait_whose_caller_hung_up_ends(open_engine: Any, scripted: Any) -> None:
    """Once each `agent_await` went on for its whole timeout (up to an hour) after its caller had gone: a client,
    with the read token too, could pile up waits until the service stopped answering."""
    async with busy_agent_served(open_engine, scripted, "http-hung-up") as (_, agent_id, port):
        body = json.dumps({"agentId": agent_id, "timeoutMs": 600_000}).encode()
        request = (
            f"POST /api/tools/agent_await HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body

        def waits() -> int:  # (a request's task, uvicorn's, lives as long as its call)
            return sum("run_asgi" in repr(task.get_coro()) for task in asyncio.all_tasks())

        for _ in range(20):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            await writer.drain()
            await asyncio.sleep(0.05)  # (the wait has begun)
            writer.close()
        for _ in range(100):
            if waits() <= 0:
                break
            await asyncio.sleep(0.02)
        assert waits() <= 0


async def test_a_damaged_row_is_a_structured_store_error_and_the_rest_reads_on(
    open_engine: Any, store_url: str
) -> None:
    """A row edited behind the store's back: the tool that cannot read it answers `damaged_record` (500), naming
    the row, as `call_tool` does; a damaged event reads as the store's notice in the history."""
    async with (
        open_engine() as engine,
        served(create_app(engine)) as base,
        httpx.AsyncClient(base_url=base) as http,
    ):
        alpha = await engine.store.create_session(SessionDraft(name="alpha", role="coder"))
        beta = await engine.store.create_session(SessionDraft(name="beta", role="coder"))
        await engine.store.append(beta.id, [NewEvent(UserMessage(text=f"m{i}")) for i in range(3)])
        tamper(store_url, "UPDATE sessions SET settings = ? WHERE id = ?", ["garbage", alpha.id])
        call = '{"type":"tool.call"}'
        tamper(
            store_url,
            "UPDATE events SET payload = ?, type = 'tool.call' WHERE session_id = ? AND seq = 2",
            [call, beta.id],
        )

        got = await http.post("/api/tools/agent_get", json={"name": "alpha"})
        assert got.status_code == 500, got.text
        assert got.json() == await engine.call_tool("agent_get", {"name": "alpha"})
        error = got.json()["error"]
        details = dict(error["details"])
        suggested = details.pop("suggestions")  # (the call that gets rid of it: its deletion, by its id)
        assert error["code"] == "damaged_record" and details == {"session_id": alpha.id, "column": "settings"}
        assert suggested == [{"tool": "agent_delete", "arguments": {"id": alpha.id}}]
        assert error["message"].startswith(f"the stored session {alpha.id!r} (alpha) is damaged: its settings value")
        assert "restore the store from a backup" in error["message"]

        history = await http.post("/api/tools/agent_history", json={"id": beta.id})
        assert history.status_code == 200, history.text
        events = history.json()["events"]
        assert [event["seq"] for event in events] == [1, 2, 3]
        assert events[1]["type"] == "runtime.error" and "event 2 (tool.call)" in events[1]["payload"]["message"]
        scan = await http.post("/api/tools/agent_get", json={"id": beta.id})  # (it scans the tool calls)
        assert scan.status_code == 500 and scan.json()["error"]["details"]["seq"] == 2, scan.text
