"""The limits of a real `agentwatch serve` (the server's own uvicorn settings, not a test server's): a WebSocket
message past the service's limit gets an error frame before the close, and an attach to an id past the tools'
bound is refused as a bad id."""

from __future__ import annotations

import json
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
