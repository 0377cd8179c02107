"""A WebSocket client that stops reading is closed (1008) once a send has waited the send timeout."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from agentwatch.events import NewEvent, ToolResult
from agentwatch.runtime.models import ScriptedModel
from agentwatch.service import ServiceSettings, create_app
from agentwatch.store import Write
from tests.service.clients import unread_ws
from tests.service.support import role, served


def close_code(data: bytes) -> int | None:
    """The code of the close frame among the server's (unmasked) frames after the upgrade, if any."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return None
    data = data[end + 4 :]
    while len(data) >= 2:
        length, start = data[1] & 0x7F, 2
        if length == 126:
            length, start = int.from_bytes(data[2:4], "big"), 4
        elif length == 127:
            length, start = int.from_bytes(data[2:10], "big"), 10
        if data[0] & 0x0F == 8:
            return int.from_bytes(data[start : start + 2], "big")
        data = data[start + length :]
    return None


async def test_a_client_that_stops_reading_is_closed_after_the_send_timeout(open_engine: Any, scripted: Any) -> None:
    model_ref = scripted("chatty", ScriptedModel.replying("Here is one more line."))
    async with open_engine(role("chatty", model_ref)) as engine:
        app = create_app(engine, ServiceSettings(send_timeout=0.5))
        async with served(app, ws_max_size=2**26) as base:
            session = await engine.create("chatty")
            # A snapshot larger than every buffer between the server and a client that does not read: the
            # send after it waits until the client reads.
            big = ToolResult(tool_call_id="call_1", tool_name="lookup", output="x" * 10_000)
            for _ in range(10):
                await engine.store.write(Write(session.id, events=[NewEvent(big) for _ in range(100)]))
            sock = unread_ws(base, session.id)
            try:
                await asyncio.sleep(0.5)
                await engine.enqueue(session.id, "talk")
                finished, timed_out = await engine.wait(session.id, 30)
                assert not timed_out and finished.status == "completed"  # the session was not held up
                await asyncio.sleep(1.5)  # not reading, well past the send timeout
                # Reading now lets the server's sends go on; a close frame comes only if it gave up on us.
                sock.setblocking(False)
                loop = asyncio.get_running_loop()
                received = bytearray()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(10):
                        while close_code(bytes(received)) is None:
                            chunk = await loop.sock_recv(sock, 1 << 20)
                            if not chunk:
                                break
                            received += chunk
            finally:
                sock.close()
    assert close_code(bytes(received)) == 1008, f"{len(received)} bytes received, no close frame"
