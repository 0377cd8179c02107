"""Live attach over real sockets: a snapshot then every later event, exactly once, across reconnects."""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from agentwatch.events import Event, StreamCursor
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel, Think
from agentwatch.runtime.thread_observer import EventCollector
from agentwatch.service import ServiceSettings, create_app
from tests.events.support import forged
from tests.service.clients import attach, unread_ws, ws_url
from tests.service.support import role, served


def lookup(key: str) -> str:
    return f"value of {key}"


def streaming_script(words: int = 30, chunk_delay: float = 0.001) -> ScriptedModel:
    text = " ".join(f"word{i}" for i in range(words))
    return ScriptedModel(
        [
            [Think("Let me look at it first."), CallTool("lookup", {"key": "a"})],
            [Reply(f"Found it: {text}."), CallTool("lookup", {"key": "b"})],
            Reply(f"Done: {text}."),
        ],
        chunk_delay=chunk_delay,
    )


@dataclass
class Watcher:
    """One client's plan: when it attaches, how it reads, when it drops and reconnects."""

    kind: str
    delay: float
    drops: list[int]
    """After how many events it disconnects, each time (then reconnects with its last cursor)."""
    slow: bool
    history: list[str] = field(default_factory=list)
    received: list[dict[str, Any]] = field(default_factory=list)


async def watch(base: str, agent_id: str, watcher: Watcher, final: asyncio.Future[str]) -> None:
    await asyncio.sleep(watcher.delay)
    after: str | None = None
    drops = list(watcher.drops)
    while True:
        budget = drops.pop(0) if drops else None
        async with attach(watcher.kind, base, agent_id, after) as stream:
            if after is None:
                snapshot = await asyncio.wait_for(stream.next(), 10)
                assert snapshot["kind"] == "snapshot", snapshot
                after = snapshot["cursor"]
                watcher.history = [e["id"] for e in snapshot["history"]]
            count = 0
            while budget is None or count < budget:
                if final.done() and after == final.result():
                    return
                try:
                    frame = await asyncio.wait_for(stream.next(), 0.2)
                except TimeoutError:
                    continue
                assert frame["kind"] == "event", frame
                watcher.received.append(frame["event"])
                after = frame["event"]["cursor"]
                count += 1
                if watcher.slow:
                    await asyncio.sleep(0.003)


def problems(watcher: Watcher, reference: list[Event]) -> list[str]:
    """Why the watcher's view is not exactly the reference stream (empty when it is)."""
    by_id = {e.id: e for e in reference}
    found: list[str] = []
    received_ids = [e["id"] for e in watcher.received]
    if len(set(received_ids)) != len(received_ids):
        found.append(f"{watcher.kind}: {len(received_ids) - len(set(received_ids))} duplicates")
    if watcher.received:
        first = by_id[watcher.received[0]["id"]]
        start = reference.index(first)
    else:
        start = len(reference)
    # Everything before the first live event is in the snapshot's history (durable) or its partial turn.
    expected_history = [e.id for e in reference[:start] if e.durable]
    if watcher.history != expected_history:
        found.append(f"{watcher.kind}: history of {len(watcher.history)} != {len(expected_history)} durable events")
    if received_ids != [e.id for e in reference[start:]]:
        missing = {e.id for e in reference[start:]} - set(received_ids)
        found.append(f"{watcher.kind}: {len(missing)} missing after the snapshot")
    return found


async def run_watchers(open_engine: Any, model_ref: str, watchers: list[Watcher], backlog: int) -> list[str]:
    reference: EventCollector[Any] = EventCollector()
    settings = ServiceSettings(client_backlog=backlog)
    async with open_engine(role("streamer", model_ref, tools=("lookup",)), tools=[lookup]) as engine:
        engine.start_with_observer(lambda _thread_id: reference)
        app = create_app(engine, settings)
        async with served(app) as base:
            session = await engine.create("streamer")
            final: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            tasks = [asyncio.create_task(watch(base, session.id, w, final)) for w in watchers]
            await engine.enqueue(session.id, "go")
            await engine.wait(session.id, 30)
            await engine.enqueue(session.id, "again")
            await engine.wait(session.id, 30)
            await asyncio.sleep(0.05)
            # Everything up to here is what the watchers must see (a late warning may follow; not compared).
            events = [e for _, e in reference.events]
            final.set_result(events[-1].cursor.encode())
            await asyncio.wait_for(asyncio.gather(*tasks), 30)
            await until_detached(app)
    return [p for w in watchers for p in problems(w, events)]


async def until_detached(app: Any) -> None:
    """Wait until the server has noticed that every client went away (it must, within seconds)."""
    for _ in range(200):
        if app.state.service.broadcaster.client_count() == 0:
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"{app.state.service.broadcaster.client_count()} clients still attached")


watcher_plans = st.builds(
    Watcher,
    kind=st.sampled_from(["ws", "sse"]),
    delay=st.floats(min_value=0.0, max_value=0.4),
    drops=st.lists(st.integers(min_value=1, max_value=60), max_size=3),
    slow=st.booleans(),
)


@pytest.mark.slow
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(watchers=st.lists(watcher_plans, min_size=1, max_size=5), backlog=st.sampled_from([3, 1000]))
# Found by the search: a slow client that leaves three times with unread frames queued (each of its closing
# handshakes once took the websockets library's 10 s default, and the run its 30 s).
@example(
    watchers=[
        Watcher(kind="ws", delay=0.0, drops=[22, 3, 22], slow=True),
        Watcher(kind="ws", delay=0.345, drops=[56], slow=True),
    ],
    backlog=3,
)
async def test_watchers_that_attach_drop_and_reconnect_see_every_event_once(
    open_engine: Any, scripted: Any, watchers: list[Watcher], backlog: int
) -> None:
    model_ref = scripted(f"stream-{random.randrange(10**9)}", streaming_script())
    assert await run_watchers(open_engine, model_ref, watchers, backlog) == []


async def test_snapshot_carries_history_and_pending_choices(open_engine: Any, scripted: Any) -> None:
    model_ref = scripted("asker", ScriptedModel([CallTool("ask_user", {"question": "Which one?"}), Reply("ok")]))
    async with open_engine(role("asker", model_ref, tools=("ask_user",))) as engine, served(create_app(engine)) as base:
        session = await engine.create("asker")
        await engine.enqueue(session.id, "go")
        await engine.wait(session.id, 10)
        for kind in ("ws", "sse"):
            async with attach(kind, base, session.id) as stream:
                snapshot = await asyncio.wait_for(stream.next(), 10)
            assert snapshot["kind"] == "snapshot"
            assert snapshot["agentId"] == session.id
            types = [e["type"] for e in snapshot["history"]]
            assert types[0] == "turn.started" and "request.opened" in types
            assert [c["request_id"] for c in snapshot["pendingChoices"]] == [
                e["payload"]["request_id"] for e in snapshot["history"] if e["type"] == "request.opened"
            ]
            assert snapshot["cursor"] == snapshot["history"][-1]["cursor"]


async def test_bad_attach_requests_get_a_structured_error_and_a_clean_close(open_engine: Any) -> None:
    async with open_engine() as engine, served(create_app(engine, ServiceSettings(max_message_bytes=1000))) as base:
        cases = [("ses_nobody", None, 4404, "not_found"), ("ses_nobody", "c1.garbage", 4400, "invalid_argument")]
        for agent_id, after, code, error_code in cases:
            async with connect(ws_url(base, agent_id, after)) as ws:
                frame = json.loads(await ws.recv())
                assert frame["kind"] == "error" and frame["error"]["code"] == error_code
                with pytest.raises(ConnectionClosed) as closed:
                    await ws.recv()
                assert closed.value.rcvd is not None and closed.value.rcvd.code == code
        async with httpx.AsyncClient(base_url=base) as http:
            missing = await http.get("/api/agents/ses_nobody/events")
            assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
            garbage = await http.get("/api/agents/ses_nobody/events", headers={"last-event-id": "%%%"})
            assert garbage.status_code == 400 and garbage.json()["error"]["code"] == "invalid_argument"
            # Forged (the checksum is no secret): nested past the decoder's limit (once a 500), and a position no
            # stream reaches (once a stream that never sent a frame).
            for after in (forged("c1.", b"[" * 1530 + b"]" * 1530), StreamCursor("ses_nobody", 10**30).encode()):
                refused = await http.get("/api/agents/ses_nobody/events", params={"after": after})
                assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_argument"


async def test_a_cursor_past_the_agents_newest_event_is_refused(open_engine: Any, scripted: Any) -> None:
    """Once: a forged cursor (the checksum is no secret) past the newest event was taken, and the stream then
    sent nothing, ever: every later event was at or before it."""
    model_ref = scripted("attach-past", ScriptedModel.replying("hi"))
    async with open_engine(role("quiet", model_ref)) as engine, served(create_app(engine)) as base:
        session = await engine.create("quiet")
        past = StreamCursor(session.id, 2**62).encode()
        async with httpx.AsyncClient(base_url=base) as http:
            refused = await http.get(f"/api/agents/{session.id}/events", params={"after": past})
        assert refused.status_code == 400 and refused.json()["error"]["details"]["fields"] == ["after"]
        async with connect(ws_url(base, session.id, past)) as ws:
            frame = json.loads(await ws.recv())
            assert frame["kind"] == "error" and "past the agent's newest event" in frame["error"]["message"]
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4400
        # A position at the newest event, past deltas after it (they are not stored), still resumes.
        newest = StreamCursor(session.id, (await engine.store.get_session(session.id)).last_seq, 3).encode()
        async with (
            httpx.AsyncClient(base_url=base) as http,
            http.stream("GET", f"/api/agents/{session.id}/events", params={"after": newest}) as resumed,
        ):
            assert resumed.status_code == 200


async def test_a_socket_that_sends_garbage_is_told_and_closed(open_engine: Any, scripted: Any) -> None:
    model_ref = scripted("quiet", ScriptedModel.replying("hi"))
    settings = ServiceSettings(max_message_bytes=6000)
    async with open_engine(role("quiet", model_ref)) as engine, served(create_app(engine, settings)) as base:
        session = await engine.create("quiet")
        # (Nesting deeper than the JSON decoder recurses once ended the socket with no frame and no close code.)
        for garbage in ("not json", json.dumps({"type": "subscribe"}), "[" * 2500 + "]" * 2500, "x" * 7000):
            async with connect(ws_url(base, session.id)) as ws:
                assert json.loads(await ws.recv())["kind"] == "snapshot"
                await ws.send(json.dumps({"type": "ping"}))  # the one message the server reads
                await ws.send(garbage)
                frames, code = await read_until_closed(ws)
                assert all(frame["kind"] == "error" for frame in frames) and code in (1008, 1009)
        async with httpx.AsyncClient(base_url=base) as http:
            assert (await http.get("/api/health")).json() == {"status": "ok", "store": "ok", "live": "ok"}


async def read_until_closed(ws: Any) -> tuple[list[dict[str, Any]], int | None]:
    """Every frame until the server closes, and its close code."""
    frames = []
    try:
        while True:
            frames.append(json.loads(await ws.recv()))
    except ConnectionClosed as closed:
        return frames, closed.rcvd.code if closed.rcvd is not None else None


async def test_a_client_that_never_reads_does_not_slow_the_session(open_engine: Any, scripted: Any) -> None:
    model_ref = scripted("talker", streaming_script(words=3000, chunk_delay=0))
    async with open_engine(role("talker", model_ref, tools=("lookup",)), tools=[lookup]) as engine:
        app = create_app(engine, ServiceSettings(client_backlog=50, send_timeout=0.5))
        async with served(app) as base:
            session = await engine.create("talker")
            sock = unread_ws(base, session.id)
            try:
                await asyncio.sleep(0.2)
                assert app.state.service.broadcaster.client_count(session.id) == 1
                await engine.enqueue(session.id, "talk")
                finished, timed_out = await engine.wait(session.id, 30)
                assert not timed_out and finished.status == "completed"
                async with httpx.AsyncClient(base_url=base) as http:
                    assert (await http.get("/api/health")).status_code == 200
            finally:
                sock.close()
            await until_detached(app)


async def test_a_deleted_agents_streams_end_with_the_notice_of_its_deletion(open_engine: Any, scripted: Any) -> None:
    """Once: a stream attached to an agent that was deleted stayed open for good, with nothing to say so (and a
    browser's EventSource, reconnecting whenever a stream ends, would have asked again and again)."""
    model_ref = scripted("deleted-quiet", ScriptedModel.replying("hi"))
    async with open_engine(role("quiet", model_ref)) as engine, served(create_app(engine)) as base:
        snapshot = await engine.task("quiet", "hello")
        agent_id = snapshot["agentId"]
        async with connect(ws_url(base, agent_id)) as ws, attach("sse", base, agent_id) as sse:
            assert json.loads(await ws.recv())["kind"] == "snapshot"
            assert (await sse.next())["kind"] == "snapshot"
            await engine.delete(agent_id, by="ada")
            ws_frames, code = await read_until_closed(ws)
            last = await sse.next()
            with pytest.raises(EOFError):
                await asyncio.wait_for(sse.next(), 10)  # the SSE response ended
        assert code == 1000
        for frame in (ws_frames[-1], last):
            assert frame["event"]["type"] == "runtime.info" and frame["event"]["payload"]["source"] == "deletion"
            assert frame["event"]["payload"]["message"].startswith("deleted by ada; readable by its id until ")
        async with httpx.AsyncClient(base_url=base) as http:
            again = await http.get(f"/api/agents/{agent_id}/events", headers={"last-event-id": last["event"]["cursor"]})
        assert again.status_code == 204  # an EventSource stops reconnecting
        async with connect(ws_url(base, agent_id)) as ws:  # a deleted agent is still readable: its snapshot
            frames, code = await read_until_closed(ws)
        assert [frame["kind"] for frame in frames] == ["snapshot"] and code == 1000


async def test_a_turn_no_ring_brings_here_still_reaches_an_attach_from_the_store(
    open_engine: Any, scripted: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two engines on one store, each with its own memory ring (or one whose Redis is down): once, an attach
    to the service of the one that did not run the turn got its snapshot, then nothing, for good."""
    import agentwatch.service.attach as attach_module

    monkeypatch.setattr(attach_module, "_QUIET_FIRST", 0.2)
    model_ref = scripted("elsewhere", ScriptedModel.replying("done over there"))
    async with (
        open_engine(role("worker", model_ref)) as here,
        open_engine(role("worker", model_ref)) as there,
        served(create_app(here)) as base,
    ):
        session = await there.create("worker", name="worker")
        async with attach("sse", base, session.id) as stream:
            assert (await stream.next())["kind"] == "snapshot"
            await there.enqueue(session.id, "go")  # runs there: nothing of it reaches this engine's ring
            seen: list[str] = []
            while "turn.ended" not in seen:
                frame = await asyncio.wait_for(stream.next(), 10)
                seen.append(frame["event"]["type"])
                seen_cursor = frame["event"]["cursor"]
        stored = [e.type for e in await there.store.read_events(session.id)]
        assert seen == stored  # every durable event, once, in order (late, and without deltas)

        # Another turn there, then a note here before the quiet look: the note comes live, and the turn's events
        # before it still come first (once, they were skipped for good).
        monkeypatch.setattr(attach_module, "_QUIET_FIRST", 30.0)
        async with attach("sse", base, session.id, after=seen_cursor) as stream:
            await there.enqueue(session.id, "again")
            await there.wait(session.id, 10)
            await here.call_tool("agent_take_over", {"id": session.id, "by": "ada"})
            again: list[str] = []
            while "runtime.info" not in again:
                frame = await asyncio.wait_for(stream.next(), 10)
                again.append(frame["event"]["type"])
        stored = [e.type for e in await there.store.read_events(session.id)]
        assert seen + again == stored


async def test_a_snapshot_on_an_engine_that_did_not_run_the_turn_is_of_the_store(
    open_engine: Any, scripted: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once: an engine whose driver of the session was made before another engine ran a turn gave a snapshot
    as of then (no history, no pending question), and replayed the turn as events after it."""
    import agentwatch.service.attach as attach_module

    monkeypatch.setattr(attach_module, "_QUIET_FIRST", 0.2)

    def ask(ctx: Any) -> Any:
        return CallTool("ask_user", {"question": "Which database?"}) if not ctx.tool_results else Reply("ok")

    model_ref = scripted("snapshot-elsewhere", ScriptedModel(function=ask))
    asker = role("asker", model_ref, tools=("ask_user",))
    async with (
        open_engine(asker) as here,
        open_engine(asker) as there,
        served(create_app(here)) as base,
    ):
        session = await there.create("asker", name="asker")
        async with attach("sse", base, session.id) as early:  # makes this engine's driver of the session
            assert (await early.next())["kind"] == "snapshot"
        await there.enqueue(session.id, "go")
        settled, _ = await there.wait(session.id, 10)
        assert settled.status == "awaiting_input"
        async with attach("sse", base, session.id) as late:
            snapshot = await late.next()
        stored = await there.store.read_events(session.id)
        assert snapshot["kind"] == "snapshot" and [e["type"] for e in snapshot["history"]] == [e.type for e in stored]
        assert [c["questions"] for c in snapshot["pendingChoices"]] == [["Which database?"]], snapshot["pendingChoices"]
