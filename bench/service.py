"""Service figures: `agent_list` over HTTP, events to 100 WebSocket clients, and attach to a long session.

The service is the real app of `create_app` on uvicorn on a loopback port, with its engine on a SQLite file
and the memory live ring; the clients (httpx, websockets) run in the same process and event loop, so every
figure includes the client's own work too.

- `service.agent_list.p50`: `POST /api/tools/agent_list` on a keep-alive connection, against the same
  `engine.call_tool("agent_list", {})` in process.
- `service.publish_ws.p99`: an event emitted to a session (the live ring and the broadcaster, as the
  session's emitter does) until each of 100 attached WebSocket clients has received it, in lock step,
  against an in-process ring subscriber of the same events.
- `service.attach_1000.p50`: a WebSocket connect that receives the snapshot of a session with 1,000 events,
  against reading those 1,000 events from the store in process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
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
        uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="on", log_level="warning", ws_max_size=2**24)
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


async def _agent_list(ctx: Context, engine: Engine, base: str) -> list[Result]:
    import httpx

    list_samples = max(20, min(300, ctx.sizes.live_samples // 5))

    ctx.say(f"service: agent_list over HTTP and in process, {list_samples} calls each")
    http_ms: list[float] = []
    local_ms: list[float] = []
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        for index in range(list_samples + _WARM_UP):
            start = time.perf_counter()
            answer = await http.post("/api/tools/agent_list", json={})
            middle = time.perf_counter()
            local = await engine.call_tool("agent_list", {})
            end = time.perf_counter()
            if answer.status_code != 200 or "error" in local:
                raise RuntimeError(f"agent_list failed: {answer.text[:200]} / {local}")
            if index >= _WARM_UP:
                http_ms.append((middle - start) * 1000)
                local_ms.append((end - middle) * 1000)
    note = f"{list_samples} calls, {_LIST_SESSIONS} sessions, keep-alive httpx; baseline: engine.call_tool"
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


async def _publish(ctx: Context, engine: Engine, state: Any, base: str) -> list[Result]:
    from websockets.asyncio.client import connect

    publish_samples = max(20, min(200, ctx.sizes.live_samples // 10))

    ctx.say(f"service: {publish_samples} events to {_CLIENTS} WebSocket clients in lock step")
    session = await engine.create("bench")
    url = base.replace("http://", "ws://") + f"/api/agents/{session.id}/events"
    arrivals: dict[int, list[float]] = {}
    everyone: dict[int, asyncio.Event] = {}
    expected = _CLIENTS + 1  # the clients and the in-process subscriber

    def arrived(seq: int, at: float, subscriber: bool) -> None:
        times = arrivals.setdefault(seq, [])
        if subscriber:
            times.insert(0, at)
        else:
            times.append(at)
        if len(times) == expected:
            everyone[seq].set()

    async def client(ready: asyncio.Event, count: list[int]) -> None:
        async with connect(url, max_size=2**24) as connection:
            json.loads(await connection.recv())  # the snapshot
            count[0] += 1
            if count[0] == _CLIENTS:
                ready.set()
            async for message in connection:
                at = time.perf_counter()
                arrived(int(json.loads(message)["event"]["seq"]), at, False)

    ready = asyncio.Event()
    count = [0]
    clients = [asyncio.create_task(client(ready, count)) for _ in range(_CLIENTS)]
    subscription = await engine.ring.subscribe(session.id)

    async def subscriber() -> None:
        async for event in subscription:
            arrived(event.seq, time.perf_counter(), True)

    listening = asyncio.create_task(subscriber())
    observer = state.broadcaster.observer(session.id)
    now = datetime.now(UTC)
    ws_ms: list[float] = []
    sub_ms: list[float] = []
    try:
        await asyncio.wait_for(ready.wait(), 60)
        for seq in range(1, publish_samples + _WARM_UP + 1):
            event = Event(
                id=EventId(new_id("evt")),
                session_id=SessionId(session.id),
                seq=seq,
                at=now,
                payload=sample_payload(seq),
            )
            everyone[seq] = asyncio.Event()
            start = time.perf_counter()
            await engine.ring.publish(event)  # what the session's emitter does with each event
            observer.on_event(session.id, event)
            await asyncio.wait_for(everyone[seq].wait(), _WAIT_S)
            if seq > _WARM_UP:
                times = arrivals.pop(seq)
                sub_ms.append((times[0] - start) * 1000)
                ws_ms.extend((at - start) * 1000 for at in times[1:])
    finally:
        for task in [*clients, listening]:
            task.cancel()
        await asyncio.gather(*clients, listening, return_exceptions=True)
        await subscription.close()
    note = (
        f"{publish_samples} events x {_CLIENTS} clients in lock step, clients in the same process; "
        "baseline: an in-process ring subscriber"
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
