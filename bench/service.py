"""Service figures: `agent_list` over HTTP, events to 100 WebSocket clients, attach to a long session, and
200 sessions in turns with 10 watchers each.

The service is the real app of `create_app` on uvicorn on a loopback port, with its engine on a SQLite file
and the memory live ring. The WebSocket clients run in a process of their own (`bench._watchers`, raw
sockets on one selector loop), so they neither share the server's CPU time nor weigh on its figures.

- `service.agent_list.p50`: `POST /api/tools/agent_list` on a keep-alive connection (a minimal HTTP/1.1
  client, so httpx's own overhead is left out), against the same `engine.call_tool("agent_list", {})` in
  process; beside it its floor (`.floor.p50`): the same call behind a bare Starlette route on uvicorn (no
  guard, no error middleware, no argument parsing), its answer encoded as the service encodes it.
- `service.publish_ws.p99`, `.p50`, `.cpu_per_event`: an event emitted to a session (the live ring and the
  broadcaster, as the session's emitter does) until each of 100 attached WebSocket clients has received it,
  in lock step, against the same publish to an in-process ring subscriber of a session nobody watches.
- `service.attach_1000.p50`, `.cpu_p50`: a WebSocket connect until the whole snapshot of a session with
  1,000 events has arrived, against reading those 1,000 events from the store in process.
- `service.load.events_per_s`, `.memory_per_watcher`: 200 sessions in scripted turns with 10 watchers each,
  against the same turns unwatched; the heap each watcher costs, against a bare WebSocket's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from agentwatch.events import Event, EventId, NewEvent, SessionId, new_id
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import ScriptContext, ScriptedModel, ScriptStep
from agentwatch.runtime.roster import AgentDefinition
from agentwatch.store import Write
from bench._harness import Context, Result, Target, percentile, sample_payload
from bench._turns import INSTRUCTIONS, PROMPT, TurnWatcher, lookup, one_tool_turn
from bench.engine import _HeapGrowth

__all__ = ["service_figures"]

_LIST_SESSIONS: Final = 50
_CLIENTS: Final = 100
_ATTACH_EVENTS: Final = 1000
_WARM_UP: Final = 10
_WAIT_S: Final = 10.0
_LOAD_SESSIONS: Final = 200
_LOAD_WATCHERS: Final = 10
_LOAD_TURN_WAIT_S: Final = 120.0
_REPOSITORY: Final = Path(__file__).resolve().parent.parent


@contextlib.asynccontextmanager
async def _served(engine: Engine) -> AsyncIterator[tuple[str, Any]]:
    """The service's app over `engine`, served; yields its base URL and its `ServiceState`."""
    from agentwatch.service import create_app

    app = create_app(engine)
    async with _uvicorn(app) as base:
        try:
            yield base, app.state.service
        finally:
            app.state.service.stopping.set()  # open attach streams end, so uvicorn can stop


@contextlib.asynccontextmanager
async def _uvicorn(app: Any) -> AsyncIterator[str]:
    """`app` on uvicorn on a loopback port, configured as `agentwatch serve` does; yields the base URL."""
    import uvicorn

    from agentwatch.service.server import _Server, bound_port

    server = _Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            lifespan="on",
            log_level="warning",
            ws_max_size=2**24,
            ws_per_message_deflate=False,
            backlog=4096,
        )
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("uvicorn did not start")
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{bound_port(server)}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)


def _role() -> AgentDefinition:
    return AgentDefinition(name="bench", model="scripted:bench-service", instructions="You wait.")


async def service_figures(ctx: Context) -> list[Result]:
    """The three service figures on one served engine."""
    root: Path = ctx.workdir
    async with Engine.open(
        f"sqlite:///{root / 'service.db'}",
        root=root,
        agents_dir=root / "none",
        definitions=[_role()],
        models={"bench-service": ScriptedModel.replying("ok")},  # never asked: no turn runs
        extensions=[],
    ) as engine:
        for _ in range(_LIST_SESSIONS):
            await engine.create("bench")
        async with _served(engine) as (base, state):
            results = await _agent_list(ctx, engine, base)
            results += await _publish(ctx, engine, state, base)
            results += await _attach(ctx, engine, base)
    results += await _load(ctx)
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


def _bare_route(engine: Engine) -> Any:
    """The least an HTTP surface over `agent_list` can be: one Starlette route on the engine's call, its answer
    encoded as the service encodes it."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from agentwatch.service.api import _json

    async def agent_list(request: Request) -> Response:
        await request.body()
        return _json(await engine.call_tool("agent_list", {}))

    return Starlette(routes=[Route("/api/tools/agent_list", agent_list, methods=["POST"])])


async def _agent_list(ctx: Context, engine: Engine, base: str) -> list[Result]:
    list_samples = max(20, min(300, ctx.sizes.live_samples // 5))
    ctx.say(f"service: agent_list over HTTP, over a bare route and in process, {list_samples} calls each")
    http_ms: list[float] = []
    floor_ms: list[float] = []
    local_ms: list[float] = []
    async with _uvicorn(_bare_route(engine)) as floor_base:
        connection, bare = await _Connection.open(base), await _Connection.open(floor_base)
        try:
            for index in range(list_samples + _WARM_UP):
                start = time.perf_counter()
                status, body = await connection.post("/api/tools/agent_list", b"{}")
                middle = time.perf_counter()
                local = await engine.call_tool("agent_list", {})
                end = time.perf_counter()
                floor_status, _ = await bare.post("/api/tools/agent_list", b"{}")
                last = time.perf_counter()
                if status != 200 or floor_status != 200 or "error" in local:
                    raise RuntimeError(f"agent_list failed: {body[:200]!r} / {local}")
                if index >= _WARM_UP:
                    http_ms.append((middle - start) * 1000)
                    local_ms.append((end - middle) * 1000)
                    floor_ms.append((last - end) * 1000)
        finally:
            await connection.close()
            await bare.close()
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
        ),
        Result(
            "service.agent_list.floor.p50",
            "ms",
            percentile(floor_ms, 50),
            percentile(local_ms, 50),
            "lower",
            None,
            "the floor: the same call behind a bare Starlette route on uvicorn (no guard, no error middleware, no "
            f"argument parsing), its answer encoded by the service's own encoder; {note}",
        ),
    ]


async def _watchers(mode: str, each: int, urls: list[str]) -> asyncio.subprocess.Process:
    """The watchers' process (`bench._watchers`), started with its URLs."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench._watchers",
        mode,
        str(each),
        stdout=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.PIPE,
        cwd=_REPOSITORY,
    )
    assert process.stdin is not None
    process.stdin.write("".join(f"{url}\n" for url in urls).encode() + b"\n")
    await process.stdin.drain()
    return process


async def _publish(ctx: Context, engine: Engine, state: Any, base: str) -> list[Result]:
    publish_samples = max(20, min(200, ctx.sizes.live_samples // 10))
    ctx.say(f"service: {publish_samples} events to {_CLIENTS} WebSocket clients (another process) in lock step")
    watched = await engine.create("bench")
    alone = await engine.create("bench")
    url = base.replace("http://", "ws://") + f"/api/agents/{watched.id}/events"
    now = datetime.now(UTC)

    def event(session_id: str, seq: int) -> Event:
        return Event(
            id=EventId(new_id("evt")), session_id=SessionId(session_id), seq=seq, at=now, payload=sample_payload(seq)
        )

    clients = await _watchers("lockstep", _CLIENTS, [url])
    assert clients.stdout is not None
    observer = state.broadcaster.observer(watched.id)
    # The baseline, round by round beside the figure: the same publish to an in-process ring subscriber of
    # another session, which no client watches.
    subscription = await engine.ring.subscribe(alone.id)
    ws_ms: list[float] = []
    sub_ms: list[float] = []
    ws_cpu = sub_cpu = 0.0
    try:
        line = await asyncio.wait_for(clients.stdout.readline(), 60)
        if line.strip() != b"ready":
            raise RuntimeError(f"the WebSocket clients did not attach: {line!r}")
        for seq in range(1, publish_samples + _WARM_UP + 1):
            published = event(alone.id, seq)
            cpu, start = time.process_time(), time.perf_counter()
            await engine.ring.publish(published)
            received = await asyncio.wait_for(anext(aiter(subscription)), _WAIT_S)
            end, cpu_end = time.perf_counter(), time.process_time()
            if received.seq != seq:
                raise RuntimeError(f"event {seq} arrived out of step")
            if seq > _WARM_UP:
                sub_ms.append((end - start) * 1000)
                sub_cpu += cpu_end - cpu

            published = event(watched.id, seq)
            cpu, start = time.process_time(), time.perf_counter()
            await engine.ring.publish(published)  # what the session's emitter does with each event
            observer.on_event(watched.id, published)
            fields = (await asyncio.wait_for(clients.stdout.readline(), _WAIT_S)).split()
            cpu_end = time.process_time()
            if int(fields[0]) != seq:
                raise RuntimeError(f"event {seq} arrived out of step")
            if seq > _WARM_UP:
                ws_ms.extend((float(at) - start) * 1000 for at in fields[1:])
                ws_cpu += cpu_end - cpu
    finally:
        await subscription.close()
        if clients.returncode is None:
            clients.kill()
        await clients.wait()
    note = (
        f"{publish_samples} events x {_CLIENTS} WebSocket clients (raw sockets on one selector loop, in another "
        "process) in lock step, each event's arrival at every client a sample; baseline, alternating event by "
        "event: the same publish to an in-process ring subscriber of a session no client watches"
    )
    cpu_note = (
        f"the service process's CPU time per event fanned out to {_CLIENTS} WebSocket clients, from publish "
        "until every client had it; baseline: the same for the in-process ring subscriber"
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
        Result(
            "service.publish_ws.cpu_per_event",
            "ms",
            ws_cpu * 1000 / publish_samples,
            sub_cpu * 1000 / publish_samples,
            "lower",
            None,
            cpu_note,
        ),
    ]


async def _attach(ctx: Context, engine: Engine, base: str) -> list[Result]:
    attach_samples = max(5, min(40, ctx.sizes.live_samples // 50))
    ctx.say(f"service: attach to a session of {_ATTACH_EVENTS} events, {attach_samples} times")
    session = await engine.create("bench")
    for first in range(0, _ATTACH_EVENTS, 100):
        events = [NewEvent(sample_payload(first + i)) for i in range(100)]
        await engine.store.write(Write(session.id, events=events))
    url = base.replace("http://", "ws://") + f"/api/agents/{session.id}/events"
    attach_ms: list[float] = []
    attach_cpu: list[float] = []
    read_ms: list[float] = []
    read_cpu: list[float] = []
    client = await _watchers("attach", 1, [url])
    assert client.stdin is not None
    assert client.stdout is not None
    try:
        for _ in range(attach_samples + 1):
            cpu = time.process_time()
            client.stdin.write(b"attach\n")
            elapsed, history = (await asyncio.wait_for(client.stdout.readline(), 60)).split()
            cpu_end = time.process_time()
            if int(history) != _ATTACH_EVENTS:
                raise RuntimeError(f"the snapshot is not the session's {_ATTACH_EVENTS} events: {history!r}")
            attach_ms.append(float(elapsed))
            attach_cpu.append((cpu_end - cpu) * 1000)
            cpu, began = time.process_time(), time.perf_counter()
            read = await engine.store.read_events(session.id, limit=_ATTACH_EVENTS)
            end, cpu_end = time.perf_counter(), time.process_time()
            if len(read) != _ATTACH_EVENTS:
                raise RuntimeError("the store read returned the wrong events")
            read_ms.append((end - began) * 1000)
            read_cpu.append((cpu_end - cpu) * 1000)
    finally:
        if client.returncode is None:
            client.kill()
        await client.wait()
    cold = f"the first attach (before the service kept the events' JSON): {attach_ms[0]:.1f} ms, then"
    note = (
        f"{attach_samples} WebSocket attaches, one at a time, from a client in another process (a raw socket): "
        f"connect to the last byte of the snapshot frame, its JSON parsed afterwards; {cold} the p50 of the "
        "rest. Baseline, alternating: the same 1,000 events read from the store in process"
    )
    cpu_note = "the service process's CPU time per attach (everything but the client); baseline: the store read's"
    return [
        Result(
            "service.attach_1000.p50",
            "ms",
            percentile(attach_ms[1:], 50),
            percentile(read_ms[1:], 50),
            "lower",
            Target("value", "<=", 20.0),
            note,
        ),
        Result(
            "service.attach_1000.cpu_p50",
            "ms",
            percentile(attach_cpu[1:], 50),
            percentile(read_cpu[1:], 50),
            "lower",
            None,
            cpu_note,
        ),
    ]


# -- many sessions, many watchers ---------------------------------------------------------------------------


def _load_step(context: ScriptContext) -> ScriptStep:
    """The load's turn, again at every turn: a sentence and a tool call, then a streamed answer."""
    first, answer = one_tool_turn()
    return answer if context.tool_results else first


class _Turns:
    """Every session of the load runs turn after turn until told to stop."""

    def __init__(self, engine: Engine, watcher: TurnWatcher, session_ids: list[str]) -> None:
        self.engine, self.watcher, self.session_ids = engine, watcher, session_ids

    async def run(self, seconds: float) -> tuple[int, float, float]:
        """Turns on every session for `seconds`: the events emitted, the wall and the CPU seconds of that
        window. Then each session finishes the turn it is in (not counted), so the next run starts idle."""
        stop = asyncio.Event()

        async def session_turns(session_id: str) -> None:
            while not stop.is_set():
                ended = self.watcher.expect_end(session_id)
                await self.engine.enqueue(session_id, PROMPT)
                await asyncio.wait_for(ended, _LOAD_TURN_WAIT_S)

        events, cpu, start = self.watcher.events, time.process_time(), time.perf_counter()
        tasks = [asyncio.create_task(session_turns(session_id)) for session_id in self.session_ids]
        try:
            await asyncio.sleep(seconds)
            window = (self.watcher.events - events, time.perf_counter() - start, time.process_time() - cpu)
        finally:
            stop.set()
            await asyncio.gather(*tasks)
        return window


async def _bare_socket(websocket: Any) -> None:
    """The baseline of a watcher's memory: a WebSocket accepted, sent one frame, and held open."""
    await websocket.accept()
    await websocket.send_text('{"kind":"snapshot"}')
    while (await websocket.receive())["type"] != "websocket.disconnect":
        pass


async def _attached(urls: list[str], each: int) -> tuple[asyncio.subprocess.Process, _HeapGrowth]:
    """`each` watchers on every URL (in another process), and this process's memory growth until all of
    them have their snapshot."""
    with _HeapGrowth() as growth:
        watchers = await _watchers("count", each, urls)
        assert watchers.stdout is not None
        line = await asyncio.wait_for(watchers.stdout.readline(), 300)
        if line.strip() != b"ready":
            raise RuntimeError(f"the watchers did not attach: {line!r}")
    return watchers, growth


async def _stopped(watchers: asyncio.subprocess.Process) -> None:
    if watchers.returncode is None:
        watchers.kill()
    await watchers.wait()


async def _load(ctx: Context) -> list[Result]:
    from starlette.applications import Starlette
    from starlette.routing import WebSocketRoute

    sessions = _LOAD_SESSIONS if ctx.sizes.concurrent_sessions >= 100 else ctx.sizes.concurrent_sessions
    seconds = max(1.0, min(10.0, ctx.sizes.live_samples / 200))
    clients = sessions * _LOAD_WATCHERS
    ctx.say(f"service: {sessions} sessions in turns, {seconds:g} s without and with {_LOAD_WATCHERS} watchers each")
    root = ctx.workdir / "load"
    definition = AgentDefinition(name="notes", model="scripted:load", instructions=INSTRUCTIONS, tools=("lookup",))
    watcher = TurnWatcher()
    async with Engine.open(
        f"sqlite:///{root / 'load.db'}?synchronous=full",
        root=root,
        agents_dir=root / "none",
        definitions=[definition],
        tools=[lookup],
        models={"load": ScriptedModel(function=_load_step)},
        extensions=[],
    ) as engine:
        engine.start_with_observer(lambda thread_id: watcher)
        session_ids = [(await engine.create(definition.name)).id for _ in range(sessions)]
        turns = _Turns(engine, watcher, session_ids)
        await turns.run(min(2.0, seconds))  # warm-up: every session has a history, the caches are full
        before = await turns.run(seconds)

        # What one held WebSocket costs this process, bare (the baseline of the memory per watcher).
        bare = Starlette(routes=[WebSocketRoute("/bare", _bare_socket)])
        async with _uvicorn(bare) as bare_base:
            bare_url = bare_base.replace("http://", "ws://") + "/bare"
            watchers, bare_growth = await _attached([bare_url], clients)
            await _stopped(watchers)

        async with _served(engine) as (base, state):
            urls = [base.replace("http://", "ws://") + f"/api/agents/{sid}/events" for sid in session_ids]
            watchers, growth = await _attached(urls, _LOAD_WATCHERS)
            assert watchers.stdin is not None
            assert watchers.stdout is not None
            try:
                emitted = watcher.events
                during = await turns.run(seconds)
                await asyncio.sleep(0.5)  # the last frames on their way
                emitted = watcher.events - emitted
                watchers.stdin.write(b"report\n")
                report = json.loads(await asyncio.wait_for(watchers.stdout.readline(), 60))
                attached = state.broadcaster.client_count()
            finally:
                await _stopped(watchers)
        after = await turns.run(seconds)

    rate = during[0] / during[1]
    base_rate = (before[0] + after[0]) / (before[1] + after[1])
    cpu_per_event = during[2] / during[0] * 1e6
    base_cpu = (before[2] + after[2]) / (before[0] + after[0]) * 1e6
    watchers_cpu = report["cpu_s"]
    note = (
        f"{sessions} sessions, each in one scripted turn after another (a sentence and a tool call, then a "
        f"streamed answer) on SQLite at synchronous=FULL, for {seconds:g} s with {_LOAD_WATCHERS} WebSocket "
        f"watchers each ({clients}, raw sockets on one selector loop in another process sharing the machine's "
        f"{os.cpu_count()} CPUs); baseline: the same without watchers, before and after (averaged). Watchers got "
        f"{report['frames']} of {emitted * _LOAD_WATCHERS} event frames (fewest per watcher {report['least']}, "
        f"most {report['most']}), {report['problems']} out of order or skipping an event, {report['closed']} "
        f"closed, {attached} still attached at the end; the service's CPU {cpu_per_event:.0f} us per event "
        f"(baseline {base_cpu:.0f}), the watchers' process {watchers_cpu:.1f} s CPU in all"
    )
    memory_note = (
        f"this process's Python heap growth (tracemalloc, after a full collection) per watcher while {clients} "
        f"attached to {sessions} sessions and had their snapshots (RSS growth {growth.rss / clients / 1024:.1f} "
        f"KiB per watcher); baseline: the same for a bare Starlette WebSocket on uvicorn that sends one frame "
        f"(RSS {bare_growth.rss / clients / 1024:.1f} KiB)"
    )
    return [
        Result("service.load.events_per_s", "events/s", rate, base_rate, "higher", None, note),
        Result(
            "service.load.memory_per_watcher",
            "bytes",
            growth.heap / clients,
            bare_growth.heap / clients,
            "lower",
            None,
            memory_note,
        ),
    ]
