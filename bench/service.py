"""Service figures: `agent_list` over HTTP, events to 100 WebSocket clients, and attach to a long session.

The service is the real app of `create_app` on uvicorn on a loopback port, with its engine on a SQLite file
and the memory live ring.

- `service.agent_list.p50`: `POST /api/tools/agent_list` on a keep-alive connection (a minimal HTTP/1.1
  client, so httpx's own overhead is left out), against the same
  `engine.call_tool("agent_list", {})` in process.
- `service.publish_ws.p99`: an event emitted to a session (the live ring and the broadcaster, as the
  session's emitter does) until each of 100 attached WebSocket clients (in a process of their own) has
  received it, in lock step, against the same publish to an in-process ring subscriber (no client attached).
- `service.attach_1000.p50`: a WebSocket connect that receives the snapshot of a session with 1,000 events,
  against reading those 1,000 events from the store in process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from agentwatch.events import Event, EventId, NewEvent, SessionId, new_id
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.roster import AgentDefinition
from agentwatch.store import Write
from bench._harness import Context, Result, Target, percentile, sample_payload

__all__ = ["service_figures"]

_LIST_SESSIONS: Final = 50
_CLIENTS: Final = 100
_ATTACH_EVENTS: Final = 1000
_WARM_UP: Final = 10
_WAIT_S: Final = 10.0


@contextlib.asynccontextmanager
async def _served(engine: Engine) -> AsyncIterator[tuple[str, Any]]:
    import uvicorn

    from agentwatch.service import create_app
    from agentwatch.service.server import _Server, bound_port

    app = create_app(engine)
    server = _Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            lifespan="on",
            log_level="warning",
            ws_max_size=2**24,
            ws_per_message_deflate=False,
        )
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("uvicorn did not start")
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{bound_port(server)}", app.state.service
    finally:
        app.state.service.stopping.set()
        server.should_exit = True
        await asyncio.wait_for(task, 15)


def _role() -> AgentDefinition:
    return AgentDefinition(name="bench", model="scripted:bench-service", instructions="You wait.")


async def service_figures(ctx: Context) -> list[Result]:
    """The three service figures on one served engine."""
    root: Path = ctx.workdir
    async with Engine.open(
        f"sqlite:///{root / 'service.db'}", root=root, agents_dir=root / "none", definitions=[_role()], extensions=[]
    ) as engine:
        for _ in range(_LIST_SESSIONS):
            await engine.create("bench")
        async with _served(engine) as (base, state):
            results = await _agent_list(ctx, engine, base)
            results += await _publish(ctx, engine, state, base)
            results += await _attach(ctx, engine, base)
    return results


class _Connection:
    """A minimal HTTP/1.1 keep-alive client on one loopback connection, so the figure is the service's time
    rather than a client library's."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str) -> None:
        self.reader, self.writer, self.host = reader, writer, host

    @classmethod
    async def open(cls, base: str) -> _Connection:
        host, _, port = base.removeprefix("http://").partition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        return cls(reader, writer, f"{host}:{port}")

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        length = next(int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length:"))
        return status, await self.reader.readexactly(length)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()


async def _agent_list(ctx: Context, engine: Engine, base: str) -> list[Result]:
    list_samples = max(20, min(300, ctx.sizes.live_samples // 5))
    ctx.say(f"service: agent_list over HTTP and in process, {list_samples} calls each")
    http_ms: list[float] = []
    local_ms: list[float] = []
    connection = await _Connection.open(base)
    try:
        for index in range(list_samples + _WARM_UP):
            start = time.perf_counter()
            status, body = await connection.post("/api/tools/agent_list", b"{}")
            middle = time.perf_counter()
            local = await engine.call_tool("agent_list", {})
            end = time.perf_counter()
            if status != 200 or "error" in local:
                raise RuntimeError(f"agent_list failed: {body[:200]!r} / {local}")
            if index >= _WARM_UP:
                http_ms.append((middle - start) * 1000)
                local_ms.append((end - middle) * 1000)
    finally:
        await connection.close()
    note = (
        f"{list_samples} calls, {_LIST_SESSIONS} sessions, one keep-alive connection (a minimal client); "
        "baseline: engine.call_tool"
    )
    return [
        Result(
            "service.agent_list.p50",
            "ms",
            percentile(http_ms, 50),
            percentile(local_ms, 50),
            "lower",
            Target("ratio", "<=", 1.5),
            note,
        )
    ]


_CLIENTS_PROCESS: Final = """
import asyncio, json, sys, time
from websockets.asyncio.client import connect

async def main(url, count):
    arrivals = {}
    async def client(ready):
        async with connect(url, max_size=2**24) as connection:
            json.loads(await connection.recv())  # the snapshot
            ready.append(1)
            if len(ready) == count:
                print("ready", flush=True)
            async for message in connection:
                at = time.perf_counter()
                seq = json.loads(message)["event"]["seq"]
                times = arrivals.setdefault(seq, [])
                times.append(at)
                if len(times) == count:
                    print(seq, *arrivals.pop(seq), flush=True)
    ready = []
    await asyncio.gather(*(client(ready) for _ in range(count)))

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""
"""The WebSocket clients, in a process of their own: prints `ready` once all are attached, then per event
its seq and each client's arrival time (`time.perf_counter`, the same monotonic clock in every process)."""


async def _publish(ctx: Context, engine: Engine, state: Any, base: str) -> list[Result]:
    publish_samples = max(20, min(200, ctx.sizes.live_samples // 10))
    ctx.say(f"service: {publish_samples} events to {_CLIENTS} WebSocket clients (another process) in lock step")
    session = await engine.create("bench")
    url = base.replace("http://", "ws://") + f"/api/agents/{session.id}/events"
    now = datetime.now(UTC)

    def event(seq: int) -> Event:
        return Event(
            id=EventId(new_id("evt")), session_id=SessionId(session.id), seq=seq, at=now, payload=sample_payload(seq)
        )

    # The baseline first: the same publish to an in-process ring subscriber, with no client attached.
    rounds = publish_samples + _WARM_UP
    sub_ms: list[float] = []
    subscription = await engine.ring.subscribe(session.id)
    try:
        for seq in range(1, rounds + 1):
            published = event(seq)
            start = time.perf_counter()
            await engine.ring.publish(published)
            received = await asyncio.wait_for(anext(aiter(subscription)), _WAIT_S)
            if received.seq != seq:
                raise RuntimeError(f"event {seq} arrived out of step")
            if seq > _WARM_UP:
                sub_ms.append((time.perf_counter() - start) * 1000)
    finally:
        await subscription.close()
    clients = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _CLIENTS_PROCESS,
        url,
        str(_CLIENTS),
        stdout=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )
    assert clients.stdout is not None
    observer = state.broadcaster.observer(session.id)
    ws_ms: list[float] = []
    try:
        line = await asyncio.wait_for(clients.stdout.readline(), 60)
        if line.strip() != b"ready":
            raise RuntimeError(f"the WebSocket clients did not attach: {line!r}")
        for seq in range(rounds + 1, 2 * rounds + 1):
            published = event(seq)
            start = time.perf_counter()
            await engine.ring.publish(published)  # what the session's emitter does with each event
            observer.on_event(session.id, published)
            fields = (await asyncio.wait_for(clients.stdout.readline(), _WAIT_S)).split()
            if int(fields[0]) != seq:
                raise RuntimeError(f"event {seq} arrived out of step")
            if seq > rounds + _WARM_UP:
                ws_ms.extend((float(at) - start) * 1000 for at in fields[1:])
    finally:
        if clients.returncode is None:
            clients.kill()
        await clients.wait()
    note = (
        f"{publish_samples} events x {_CLIENTS} clients (in another process) in lock step; "
        "baseline: the same publish to an in-process ring subscriber, no client attached"
    )
    return [
        Result(
            "service.publish_ws.p99",
            "ms",
            percentile(ws_ms, 99),
            percentile(sub_ms, 99),
            "lower",
            Target("value", "<=", 5.0),
            note,
        ),
        Result("service.publish_ws.p50", "ms", percentile(ws_ms, 50), percentile(sub_ms, 50), "lower", None, note),
    ]


async def _attach(ctx: Context, engine: Engine, base: str) -> list[Result]:
    from websockets.asyncio.client import connect

    attach_samples = max(5, min(40, ctx.sizes.live_samples // 50))

    ctx.say(f"service: attach to a session of {_ATTACH_EVENTS} events, {attach_samples} times")
    session = await engine.create("bench")
    for first in range(0, _ATTACH_EVENTS, 100):
        events = [NewEvent(sample_payload(first + i)) for i in range(100)]
        await engine.store.write(Write(session.id, events=events))
    url = base.replace("http://", "ws://") + f"/api/agents/{session.id}/events"
    attach_ms: list[float] = []
    read_ms: list[float] = []
    for index in range(attach_samples + 3):
        start = time.perf_counter()
        async with connect(url, max_size=2**26) as connection:
            frame = json.loads(await connection.recv())
            middle = time.perf_counter()
        if frame.get("kind") != "snapshot" or len(frame["history"]) != _ATTACH_EVENTS:
            raise RuntimeError(f"the snapshot is not the session's {_ATTACH_EVENTS} events")
        began = time.perf_counter()
        read = await engine.store.read_events(session.id, limit=_ATTACH_EVENTS)
        end = time.perf_counter()
        if len(read) != _ATTACH_EVENTS:
            raise RuntimeError("the store read returned the wrong events")
        if index >= 3:
            attach_ms.append((middle - start) * 1000)
            read_ms.append((end - began) * 1000)
    note = f"{attach_samples} WebSocket attaches (connect to snapshot); baseline: the same events read in process"
    return [
        Result(
            "service.attach_1000.p50",
            "ms",
            percentile(attach_ms, 50),
            percentile(read_ms, 50),
            "lower",
            Target("value", "<=", 20.0),
            note,
        )
    ]
