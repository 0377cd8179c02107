"""What only the Redis ring does: carry events between rings and processes, and fail clearly."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import json
import sys
import weakref
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from redis import asyncio as aioredis

from agentwatch.errors import MissingDependency, StoreUnavailable
from agentwatch.events import EVENT_ADAPTER, Event, EventId, SessionId, StreamCursor, ToolProgress, new_id
from agentwatch.live import connect_live
from agentwatch.live.redis import DEFAULT_STREAM_TTL, RedisRing
from agentwatch.reads.tail import project

from .streams import build_events, drop_streams, new_session, read, unique_prefix

pytestmark = pytest.mark.redis

TESTS_DIR = Path(__file__).resolve().parents[1]


@pytest.fixture
async def key_prefix(redis_url: str) -> AsyncIterator[str]:
    """A key prefix unique to the test; its streams are deleted afterwards."""
    prefix = unique_prefix()
    yield prefix
    await drop_streams(redis_url, prefix)


async def test_connect_live_redis_url_opens_a_redis_ring(redis_url: str) -> None:
    ring = await connect_live(redis_url, ring_size=50)
    try:
        assert isinstance(ring, RedisRing)
        assert ring.ring_size == 50
    finally:
        await ring.close()


async def test_events_published_through_another_ring_reach_subscribers(redis_url: str, key_prefix: str) -> None:
    publisher = await RedisRing.open(redis_url, key_prefix=key_prefix)
    watcher = await RedisRing.open(redis_url, key_prefix=key_prefix)
    try:
        sid = new_session()
        events = build_events(sid, [True, False, False, True, False, True])
        await publisher.publish(events[0])
        subscription = await watcher.subscribe(sid)
        for event in events[1:]:
            await publisher.publish(event)

        assert subscription.position == events[0].cursor
        assert await read(subscription, 5) == events[1:]
        assert await watcher.recent(sid) == events
    finally:
        await publisher.close()
        await watcher.close()


PUBLISHER_SCRIPT = """
import asyncio, sys
sys.path.insert(0, sys.argv[1])
from agentwatch.events import EVENT_ADAPTER
from agentwatch.live.redis import RedisRing
from live.streams import build_events

async def main(url, prefix, session_id):
    ring = await RedisRing.open(url, key_prefix=prefix)
    events = build_events(session_id, [True, False, False] * 40 + [True])
    for event in events:
        await ring.publish(event)
    await ring.close()
    print("[" + ",".join(EVENT_ADAPTER.dump_json(event).decode() for event in events) + "]")

asyncio.run(main(*sys.argv[2:]))
"""


async def test_events_published_by_another_process_arrive_in_order(redis_url: str, key_prefix: str) -> None:
    ring = await RedisRing.open(redis_url, key_prefix=key_prefix)
    try:
        sid = new_session()
        subscription = await ring.subscribe(sid)
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            PUBLISHER_SCRIPT,
            str(TESTS_DIR),
            redis_url,
            key_prefix,
            sid,
            stdout=asyncio.subprocess.PIPE,
        )
        async with asyncio.timeout(60):
            received = await read(subscription, 121, timeout=60)
            stdout, _ = await process.communicate()
        published = [EVENT_ADAPTER.validate_python(item) for item in json.loads(stdout)]

        assert process.returncode == 0
        assert len(published) == 121
        assert received == published
    finally:
        await ring.close()


async def test_stream_entry_ids_are_event_positions_and_streams_expire(redis_url: str, key_prefix: str) -> None:
    ring = await RedisRing.open(redis_url, key_prefix=key_prefix)
    client = aioredis.Redis.from_url(redis_url)
    try:
        sid = new_session()
        for event in build_events(sid, [True, False, True]):
            await ring.publish(event)

        entries = await client.xrange(f"{key_prefix}{sid}")
        ttl = await client.ttl(f"{key_prefix}{sid}")
    finally:
        await client.aclose()
        await ring.close()
    assert [entry_id for entry_id, _ in entries] == [b"1-0", b"1-1", b"2-0"]
    assert 0 < ttl <= DEFAULT_STREAM_TTL


async def test_unreachable_server_raises_store_unavailable_naming_the_address() -> None:
    async with asyncio.timeout(10):
        with pytest.raises(StoreUnavailable, match=r"127\.0\.0\.1:1 .*start the Redis server") as caught:
            await RedisRing.open("redis://127.0.0.1:1/0")
    # Where the URL is set (once: "pass the redis:// URL of a running one", though no command takes it as a flag).
    assert "(AGENTWATCH_LIVE, or live in agentwatch.toml)" in caught.value.message


async def test_silent_server_raises_store_unavailable_in_time() -> None:
    # Accepts connections and never answers, like a server that hangs.
    accepted: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with asyncio.timeout(10):
            with pytest.raises(StoreUnavailable, match=f"127.0.0.1:{port}"):
                await RedisRing.open(f"redis://127.0.0.1:{port}/0", connect_timeout=1)
    finally:
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_missing_redis_package_names_the_extra(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> None:
    for name in [name for name in sys.modules if name == "redis" or name.startswith("redis.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "redis", None)
    monkeypatch.delitem(sys.modules, "agentwatch.live.redis")

    with pytest.raises(MissingDependency, match=r"agentwatch\[redis\]"):
        await connect_live(redis_url)


async def test_close_leaves_no_reader_running(redis_url: str, key_prefix: str) -> None:
    ring = await RedisRing.open(redis_url, key_prefix=key_prefix)
    sid = new_session()
    for _ in range(5):
        await ring.subscribe(sid, after=StreamCursor(sid, 0))
    await ring.subscribe(sid)

    await ring.close()

    readers = [task for task in asyncio.all_tasks() if task.get_name().startswith("agentwatch live reader")]
    assert readers == []


@pytest.mark.parametrize("call", ["head", "recent", "subscribe"])
async def test_a_cancellation_the_redis_client_swallows_still_cancels_the_caller(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    """redis-py sends commands through `asyncio.wait_for`, which on Python 3.11 returns the command's result when
    a cancellation lands as the command completes. Once, the caller then went on as if never cancelled: an
    attach stream whose client had left stayed attached (its task, its queue, the session's relay and its XREAD
    connection) for as long as the service ran, and a service stopping waited on it."""
    ring = await RedisRing.open(redis_url, key_prefix=key_prefix)
    sid = new_session()
    inside = asyncio.Event()

    async def swallowing(*args: object, **kwargs: object) -> list[object]:
        inside.set()
        # What wait_for does when the command is done by the time the cancellation is delivered:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(10)
        return []

    monkeypatch.setattr(ring._client, "xrevrange", swallowing)
    monkeypatch.setattr(ring._client, "xrange", swallowing)
    try:
        if call == "head":
            task: asyncio.Task[object] = asyncio.create_task(ring.head(sid))
        elif call == "recent":
            task = asyncio.create_task(ring.recent(sid, after=StreamCursor(sid, 1)))
        else:
            task = asyncio.create_task(ring.subscribe(sid))
        await asyncio.wait_for(inside.wait(), 5)
        task.cancel()
        await asyncio.wait([task], timeout=5)
        assert task.cancelled()
    finally:
        await ring.close()


async def test_a_tool_progress_published_before_it_named_its_tool_still_loads(redis_url: str, key_prefix: str) -> None:
    """`tool.progress` named its tool only in its message before it had `tool_name`: such an entry, still in a
    stream when a newer engine reads it, loads with no tool name, and its tail row names the tool as before."""
    ring = await RedisRing.open(redis_url, key_prefix=key_prefix)
    client = aioredis.from_url(redis_url)
    try:
        sid = new_session()
        progress = ToolProgress(tool_call_id="call_1", tool_name="lookup", message="finished", status="ok")
        event = Event(
            id=EventId(new_id("evt")), session_id=SessionId(sid), seq=1, sub=1, at=datetime.now(UTC), payload=progress
        )
        old = json.loads(EVENT_ADAPTER.dump_json(event))
        del old["payload"]["tool_name"]
        old["payload"]["message"] = "lookup finished"
        await client.xadd(f"{key_prefix}{sid}", {"event": json.dumps(old)}, id="1-1")

        [loaded] = await ring.recent(sid)
        assert isinstance(loaded.payload, ToolProgress)
        assert (loaded.payload.tool_name, loaded.payload.message) == (None, "lookup finished")
        row = project(loaded, max_chars=100)
        assert (row["title"], row["toolName"], row["status"]) == ("lookup finished", None, "ok")
    finally:
        await client.aclose()
        await ring.close()


async def test_recent_each_picks_entries_written_without_their_type(redis_url: str, key_prefix: str) -> None:
    """A stream entry keeps its event's type beside it, so a page's reads pick events in Redis and decode only
    those; an entry written before it kept its type is still picked, or left out, by its event's type."""
    ring = await RedisRing.open(redis_url, key_prefix=key_prefix)
    client = aioredis.from_url(redis_url)
    try:
        sid = new_session()
        events = build_events(sid, [True, False, True, True])  # message, delta, message, message
        for event in events[:2]:  # as an older version wrote them: the event alone
            entry = {"event": EVENT_ADAPTER.dump_json(event)}
            await client.xadd(f"{key_prefix}{sid}", entry, id=f"{event.seq}-{event.sub}")
        for event in events[2:]:
            await ring.publish(event)
        assert (await client.xrange(f"{key_prefix}{sid}"))[-1][1][b"type"] == b"message.assistant"

        messages = ("message.assistant",)
        assert await ring.recent_each([sid], limit=10, types=messages) == [[events[0], events[2], events[3]]]
        assert await ring.recent_each([sid], limit=10, types=messages, back_to="content.delta") == [events[2:]]
        assert await ring.recent_each([sid], limit=3, types=("content.delta",)) == [[events[1], events[3]]]
    finally:
        await client.aclose()
        await ring.close()


async def _drop_cancelled_timers() -> None:
    """Let the loop drop its cancelled timers now: each keeps the context it was made in until its time comes (a
    command's read timeout, seconds away), unless most of the loop's timers are cancelled ones, which it then drops
    at its next step."""
    loop = asyncio.get_running_loop()
    for timer in [loop.call_later(3600, print) for _ in range(500)]:
        timer.cancel()
    await asyncio.sleep(0)


class _TurnState:
    """What a turn keeps in its context (pydantic-ai's run context: the run's messages, its model, its usage)."""


_TURN: contextvars.ContextVar[_TurnState] = contextvars.ContextVar("turn")


async def test_a_connection_opened_during_a_turn_does_not_keep_the_turns_context(
    redis_url: str, key_prefix: str
) -> None:
    """The client opens a connection when every one it has is busy (a subscription's reader blocks one in XREAD),
    so while some turn publishes: the socket's reader callback kept a copy of that turn's context, its run's
    messages with it, for as long as the connection stayed in the pool (the engine's life)."""
    ring = await RedisRing.open(redis_url, key_prefix=key_prefix)
    try:
        watched, working = new_session(), new_session()
        subscription = await ring.subscribe(watched)
        await asyncio.sleep(0.1)  # (its reader now waits in XREAD on the one connection opened so far)
        state = _TurnState()
        kept = weakref.ref(state)

        async def turn(state: _TurnState) -> None:
            _TURN.set(state)
            for event in build_events(working, [True, True]):
                await ring.publish(event)

        await asyncio.create_task(turn(state))
        del state
        await _drop_cancelled_timers()
        gc.collect()
        assert kept() is None
        assert len(await ring.recent(working)) == 2
        await subscription.close()
    finally:
        await ring.close()


async def test_recent_each_loads_its_script_on_a_server_that_lost_it(redis_url: str, key_prefix: str) -> None:
    """A restarted server (or one whose scripts were flushed) no longer knows the script the page's reads run."""
    ring = await RedisRing.open(redis_url, key_prefix=key_prefix)
    client = aioredis.from_url(redis_url)
    try:
        sid = new_session()
        events = build_events(sid, [True, False])
        for event in events:
            await ring.publish(event)
        await client.script_flush()
        assert await ring.recent_each([sid], limit=10, types=("message.assistant",)) == [events]
        assert await ring.recent_each([sid], limit=10, types=()) == [events[1:]]
    finally:
        await client.aclose()
        await ring.close()
