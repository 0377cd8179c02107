"""The limits of a real `agentwatch serve` (the server's own uvicorn settings, not a test server's): a WebSocket
message past the service's limit gets an error frame before the close, an attach to an id past the tools'
bound is refused as a bad id, and a connection that sends no request in time is closed."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
from websockets.asyncio.client import connect

from tests.service.clients import ws_url
from tests.service.test_attach import read_until_closed
from tests.service.test_drain import service


async def test_an_oversized_socket_message_is_told_and_a_too_long_id_is_a_bad_id(tmp_path: Path) -> None:
    async with service(tmp_path, hold_minutes=0, pause_seconds=0.01) as (_, base):
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            created = (await http.post("/api/tools/agent_create", json={"role": "slow"})).json()
            too_long = await http.get(f"/api/agents/{'a' * 5000}/events")
        assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "invalid_argument"
        assert len(too_long.text) < 500  # the 5,000 characters are not echoed back
        async with connect(ws_url(base, created["agentId"]), max_size=None) as ws:
            assert json.loads(await ws.recv())["kind"] == "snapshot"
            await ws.send("x" * 70_000)  # past the service's 64 KiB
            frames, code = await read_until_closed(ws)
        # Once: uvicorn closed the socket itself (1009), with no frame saying why.
        assert [frame["error"]["code"] for frame in frames] == ["too_large"] and code == 1008


async def test_a_connection_that_sends_no_request_in_time_is_closed(tmp_path: Path) -> None:
    """Once a connection that never sent a request (or sent its head a few bytes at a time) stayed open for good,
    each holding a file descriptor of the service, with no token asked: anyone who could reach the port could use
    them all up. A request's head must now arrive within the deadline; a request that is slow to answer is not
    cut by it."""
    async with service(tmp_path, 0, 1.5, "0.5") as (_, base):  # (a request head within 0.5 s)
        host, port = base.removeprefix("http://").rsplit(":", 1)
        silent_reader, silent = await asyncio.open_connection(host, int(port))
        trickle_reader, trickle = await asyncio.open_connection(host, int(port))
        started = time.monotonic()
        for piece in (b"GET /api/", b"tools HTTP/1.1\r\n", b"Host: 127.0.0.1\r\n"):
            trickle.write(piece)
            await asyncio.sleep(0.3)
        for reader in (silent_reader, trickle_reader):
            assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the service
        assert time.monotonic() - started < 3
        silent.close()
        trickle.close()
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            created = (await http.post("/api/tools/agent_create", json={"role": "slow"})).json()
            task = await http.post(
                "/api/tools/agent_task", json={"role": "slow", "prompt": "go", "timeoutMs": 20_000}
            )  # (its tool pauses 1.5 s: past the deadline)
            assert task.status_code == 200 and task.json()["status"] == "completed", task.text
            assert (await http.get("/api/tools")).status_code == 200  # the same connection, kept alive
        assert created["agentId"]
