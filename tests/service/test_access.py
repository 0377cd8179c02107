"""Who may connect: tokens, the read-only token, origins, host names, body sizes; each refusal tested."""

from __future__ import annotations

import json
import socket
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from agentwatch.config import load_config
from agentwatch.errors import InvalidArgument
from agentwatch.runtime.models import ScriptedModel
from agentwatch.service import ServiceSettings, create_app
from agentwatch.service.server import serve, settings_from_env
from tests.service.clients import ws_url
from tests.service.support import role, served

TOKENS = ServiceSettings(token="full-secret", read_token="read-secret")


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def test_with_a_token_every_request_must_carry_it(open_engine: Any) -> None:
    async with (
        open_engine() as engine,
        served(create_app(engine, TOKENS)) as base,
        httpx.AsyncClient(base_url=base) as http,
    ):
        missing = await http.post("/api/tools/agent_list", json={})
        wrong = await http.post("/api/tools/agent_list", json={}, headers=bearer("guess"))
        listed = await http.get("/api/tools")
        query_on_post = await http.post("/api/tools/agent_list?token=full-secret", json={})
        good = await http.post("/api/tools/agent_list", json={}, headers=bearer("full-secret"))
        query_on_get = await http.get("/api/tools?token=full-secret")
        health = await http.get("/api/health")
    for refused in (missing, wrong, listed, query_on_post):
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthenticated"
        assert refused.headers["www-authenticate"] == "Bearer"
    assert good.status_code == 200 and "agents" in good.json()
    assert query_on_get.status_code == 200
    assert health.status_code == 200  # the one open path: it says only ok or draining


async def test_a_socket_without_the_token_is_told_and_closed(open_engine: Any) -> None:
    async with open_engine() as engine, served(create_app(engine, TOKENS)) as base:
        async with connect(ws_url(base, "ses_any")) as ws:
            frame = json.loads(await ws.recv())
            await ws.wait_closed()
        assert frame == {"kind": "error", "error": frame["error"]} and frame["error"]["code"] == "unauthenticated"
        assert "?token=<token>" in frame["error"]["message"]  # what a socket (or an EventSource) can send
        assert ws.close_code == 4401
        async with connect(ws_url(base, "ses_any", token="full-secret")) as ws:
            frame = json.loads(await ws.recv())
        assert frame["error"]["code"] == "not_found"  # past the guard: the agent does not exist


async def test_a_read_only_token_calls_only_the_read_tools(open_engine: Any, scripted: Any) -> None:
    """Once: "grant-free" stood for "read", so a read-only token could call the project's own tools (which have
    no grant), including one that writes."""
    model = scripted("reader-role", ScriptedModel.replying("ok"))
    notes: list[str] = []

    def write_note(text: str) -> str:
        """Write a note (the project's own tool, with no grant)."""
        notes.append(text)
        return "written"

    async with (
        open_engine(role("helper", model), tools=[write_note]) as engine,
        served(create_app(engine, TOKENS)) as base,
        httpx.AsyncClient(base_url=base, headers=bearer("read-secret")) as http,
    ):
        task = await http.post("/api/tools/agent_task", json={"role": "helper", "prompt": "go"})
        note = await http.post("/api/tools/write_note", json={"text": "x"})
        listed = await http.post("/api/tools/agent_list", json={})
        tools = (await http.get("/api/tools")).json()["tools"]
        sessions = await engine.call_tool("agent_list", {})
        full = await http.post("/api/tools/write_note", json={"text": "y"}, headers=bearer("full-secret"))
    for refused in (task, note):
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert sessions["agents"] == [] and notes == ["y"]  # the refused calls wrote nothing
    assert listed.status_code == 200 and full.status_code == 200
    callable_by_name = {t["name"]: t["callable"] for t in tools}
    assert callable_by_name["agent_task"] is False and callable_by_name["agent_list"] is True
    assert callable_by_name["write_note"] is False
    assert {name for name, ok in callable_by_name.items() if ok} == {
        "agent_await",
        "agent_export",
        "agent_get",
        "agent_history",
        "agent_list",
        "agent_prompt",
        "agent_roles",
        "agent_summary",
        "agent_tail",
        "run_compare",
        "run_history",
        "run_list",
        "run_trace",
    }


async def test_foreign_origins_are_refused_and_cors_is_closed(open_engine: Any) -> None:
    settings = ServiceSettings(allowed_origins=("https://dash.example.com",))
    async with (
        open_engine() as engine,
        served(create_app(engine, settings)) as base,
        httpx.AsyncClient(base_url=base) as http,
    ):
        foreign = await http.post("/api/tools/agent_list", json={}, headers={"origin": "https://evil.example"})
        preflight = await http.options("/api/tools/agent_list", headers={"origin": "https://evil.example"})
        same = await http.post("/api/tools/agent_list", json={}, headers={"origin": base})
        allowed = await http.post("/api/tools/agent_list", json={}, headers={"origin": "https://dash.example.com"})
        form = await http.post("/api/tools/agent_list", content=b"a=1", headers={"content-type": "text/plain"})
        # Once a listed origin could call only outside a browser: nothing answered a browser's preflight.
        asking = {"access-control-request-method": "POST", "access-control-request-headers": "authorization"}
        listed = await http.options("/api/tools/agent_list", headers={"origin": "https://dash.example.com", **asking})
        unlisted = await http.options("/api/tools/agent_list", headers={"origin": "https://evil.example", **asking})
        async with connect(ws_url(base, "ses_any"), origin="https://evil.example") as ws:  # type: ignore[arg-type]
            frame = json.loads(await ws.recv())
            await ws.wait_closed()
    assert foreign.status_code == 403 and foreign.json()["error"]["code"] == "forbidden"
    assert preflight.status_code == 403 and "access-control-allow-origin" not in preflight.headers
    assert same.status_code == 200 and allowed.status_code == 200
    assert "access-control-allow-origin" not in same.headers
    assert listed.status_code == 200 and listed.headers["access-control-allow-origin"] == "https://dash.example.com"
    assert "authorization" in listed.headers["access-control-allow-headers"].lower()
    assert allowed.headers["access-control-allow-origin"] == "https://dash.example.com"
    assert unlisted.status_code >= 400 and "access-control-allow-origin" not in unlisted.headers
    assert form.status_code == 415  # a cross-site form cannot post JSON without a preflight
    assert frame["error"]["code"] == "forbidden" and ws.close_code == 4403


async def test_without_a_token_only_loopback_host_names_are_served(open_engine: Any) -> None:
    async with (
        open_engine() as engine,
        served(create_app(engine)) as base,
        httpx.AsyncClient(base_url=base) as http,
    ):
        rebound = await http.post("/api/tools/agent_list", json={}, headers={"host": "attacker.example:80"})
        # Once served: a name that merely starts like a loopback address (DNS rebinding), origin to match.
        lookalike = "127.0.0.1.attacker.example:80"
        sneaked = await http.post(
            "/api/tools/agent_list", json={}, headers={"host": lookalike, "origin": f"http://{lookalike}"}
        )
        local = [
            await http.post("/api/tools/agent_list", json={}, headers={"host": host})
            for host in ("localhost:1234", "127.0.0.1:1234", "127.8.9.10", "[::1]:1234")
        ]
    for refused in (rebound, sneaked):
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert [answer.status_code for answer in local] == [200, 200, 200, 200]


async def test_binding_beyond_loopback_needs_a_token(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    said: list[str] = []
    generated = settings_from_env("0.0.0.0", announce=said.append)
    assert generated.token and len(generated.token) >= 24 and generated.token in said[0]
    assert settings_from_env("127.0.0.1", announce=said.append).open and len(said) == 1
    monkeypatch.setenv("AGENTWATCH_TOKEN", "mine")
    monkeypatch.setenv("AGENTWATCH_READ_TOKEN", "theirs")
    assert settings_from_env("0.0.0.0", announce=said.append) == ServiceSettings(token="mine", read_token="theirs")
    with pytest.raises(InvalidArgument, match="needs a token"):
        await serve(host="0.0.0.0", port=0, config=load_config(tmp_path), settings=ServiceSettings())


async def test_a_port_or_host_that_cannot_be_had_is_an_error_that_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """Once: uvicorn logged the bind error and the process exited 3 (the code for a timeout); a bad host was
    told a generated token first."""
    monkeypatch.delenv("AGENTWATCH_TOKEN", raising=False)
    said: list[str] = []
    config = load_config(tmp_path, env={})
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(InvalidArgument, match=rf"cannot listen on 127\.0\.0\.1:{port} \(.+\); pass another"):
            await serve(host="127.0.0.1", port=port, config=config, announce=said.append)
    with pytest.raises(InvalidArgument, match=r"cannot serve on host 'no-such-host\.invalid'"):
        await serve(host="no-such-host.invalid", port=0, config=config, announce=said.append)
    assert said == []  # no token was made, nothing was served
    assert not (tmp_path / ".agentwatch").exists()  # nor a store opened
