"""Real attach clients over real sockets: a WebSocket one and an SSE one, speaking the service's frames, and a
raw one that upgrades and then does not read."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol

import httpx
from websockets.asyncio.client import ClientConnection, connect


class Stream(Protocol):
    async def next(self) -> dict[str, Any]: ...


class WebSocketStream:
    def __init__(self, connection: ClientConnection) -> None:
        self.connection = connection

    async def next(self) -> dict[str, Any]:
        frame: dict[str, Any] = json.loads(await self.connection.recv())
        return frame


class SSEStream:
    """Frames of an SSE response, parsed by a reader task (so a timed-out `next()` leaves the stream intact)."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.last_id: str | None = None
        self.frames: asyncio.Queue[dict[str, Any] | BaseException] = asyncio.Queue()
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        data: list[str] = []
        try:
            async for line in self.response.aiter_lines():
                if line == "":
                    if data:
                        self.frames.put_nowait(json.loads("\n".join(data)))
                        data = []
                    continue
                field, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if field == "data":
                    data.append(value)
                elif field == "id":
                    self.last_id = value
            self.frames.put_nowait(EOFError(f"the stream ended (last id {self.last_id!r})"))
        except Exception as exc:
            self.frames.put_nowait(exc)

    async def next(self) -> dict[str, Any]:
        item = await self.frames.get()
        if isinstance(item, BaseException):
            raise item
        return item

    async def close(self) -> None:
        self.reader.cancel()
        await asyncio.gather(self.reader, return_exceptions=True)


def ws_url(base: str, agent_id: str, after: str | None = None, token: str | None = None) -> str:
    url = base.replace("http://", "ws://") + f"/api/agents/{agent_id}/events"
    query = [f"after={after}"] if after else []
    if token:
        query.append(f"token={token}")
    return url + ("?" + "&".join(query) if query else "")


@asynccontextmanager
async def attach(kind: str, base: str, agent_id: str, after: str | None = None) -> AsyncIterator[Stream]:
    """Attach over `kind` ("ws" or "sse"); SSE resumes with `Last-Event-ID`, a WebSocket with `?after=`."""
    if kind == "ws":
        # A client that leaves while frames it has not read fill its queue has stopped reading from the socket,
        # so the server's closing frame, queued behind them, never reaches it: the websockets library then
        # gives up the closing handshake after `close_timeout` (by design, its maintainers say), 10 s by
        # default. A client here leaves to reconnect at once; it waits half a second at most.
        async with connect(ws_url(base, agent_id, after), max_size=2**24, close_timeout=0.5) as connection:
            yield WebSocketStream(connection)
        return
    headers = {"last-event-id": after} if after else {}
    async with (
        httpx.AsyncClient(base_url=base, timeout=30) as http,
        http.stream("GET", f"/api/agents/{agent_id}/events", headers=headers) as response,
    ):
        assert response.status_code == 200, await response.aread()
        stream = SSEStream(response)
        try:
            yield stream
        finally:
            await stream.close()


def unread_ws(base: str, agent_id: str) -> socket.socket:
    """A raw socket with a small receive buffer that asks for the WebSocket upgrade and then reads nothing."""
    host, port = base.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    sock.sendall(
        (
            f"GET /api/agents/{agent_id}/events HTTP/1.1\r\nHost: {host}:{port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        ).encode()
    )
    return sock
