"""The live ring contract, run unchanged against every backend (see `agentwatch.live.base`)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from agentwatch.errors import InvalidCursor, UserError
from agentwatch.events import (
    CompletionStarted,
    ContentDelta,
    Event,
    EventId,
    SessionId,
    StreamCursor,
    ToolCall,
    ToolProgress,
    ToolResult,
    TurnStarted,
    new_id,
)
from agentwatch.live import Lagged, LiveRing, Subscription

from .conftest import RingFactory
from .streams import build_events, durable_events, event_at, new_session, read


async def test_publish_keeps_recent_events_and_head(ring: LiveRing) -> None:
    sid = new_session()
    events = build_events(sid, [True, False, False, True, False])
    for event in events:
        await ring.publish(event)

    assert await ring.head(sid) == StreamCursor(sid, 2, 1)
    assert await ring.recent(sid) == events
    assert await ring.recent(sid, limit=2) == events[-2:]
    assert await ring.recent(sid, after=events[1].cursor) == events[2:]
    assert await ring.recent(sid, after=events[1].cursor, limit=2) == events[2:4]
    assert await ring.recent(sid, after=events[-1].cursor) == []


async def test_unknown_session_has_no_head_and_no_recent_events(ring: LiveRing) -> None:
    sid = new_session()

    assert await ring.head(sid) is None
    assert await ring.recent(sid) == []


async def test_a_reaped_session_is_dropped_and_its_neighbours_kept(ring: LiveRing) -> None:
    """Once a long-running engine kept every session it had published for (memory) or their streams stayed a
    day after their reap (Redis), a deleted agent's events with them."""
    reaped, kept = new_session(), new_session()
    for seq in (1, 2):
        await ring.publish(event_at(reaped, seq))
        await ring.publish(event_at(kept, seq))
    await ring.drop([reaped])
    assert (await ring.head(reaped), await ring.recent(reaped)) == (None, [])
    assert [e.seq for e in await ring.recent(kept)] == [1, 2]
    await ring.drop([])  # (nothing to do)
    await ring.publish(event_at(reaped, 1))  # a reaped id never comes back; were it to, it starts anew


async def test_sessions_are_kept_apart(ring: LiveRing) -> None:
    first, second = new_session(), new_session()
    subscription = await ring.subscribe(second)
    await ring.publish(event_at(first, 1))
    only = event_at(second, 1)
    await ring.publish(only)

    assert await read(subscription, 1) == [only]
    assert await ring.recent(first) != await ring.recent(second)


async def test_subscribe_sees_only_later_events_in_order_once(ring: LiveRing) -> None:
    sid = new_session()
    events = build_events(sid, [True, True, False, True, False, False, True])
    for event in events[:2]:
        await ring.publish(event)

    subscription = await ring.subscribe(sid)
    for event in events[2:]:
        await ring.publish(event)

    assert subscription.session_id == sid
    assert subscription.position == StreamCursor(sid, 2, 0)
    assert await read(subscription, 5) == events[2:]
    # A later event comes next: nothing was delivered twice in between.
    later = event_at(sid, 5)
    await ring.publish(later)
    assert await read(subscription, 1) == [later]


async def test_subscribe_to_a_session_with_no_events_starts_at_zero(ring: LiveRing) -> None:
    sid = new_session()
    subscription = await ring.subscribe(sid)
    events = build_events(sid, [True, False, True])
    for event in events:
        await ring.publish(event)

    assert subscription.position == StreamCursor(sid, 0, 0)
    assert await read(subscription, 3) == events


async def test_subscribe_after_cursor_replays_the_rest_then_live_events(ring: LiveRing) -> None:
    sid = new_session()
    events = build_events(sid, [True, False, False, True, True, False, True])
    for event in events[:5]:
        await ring.publish(event)

    subscription = await ring.subscribe(sid, after=events[1].cursor)
    for event in events[5:]:
        await ring.publish(event)

    assert subscription.position == events[1].cursor
    assert await read(subscription, 5) == events[2:]


async def test_subscribe_after_an_ephemeral_cursor_resumes_between_deltas(ring: LiveRing) -> None:
    sid = new_session()
    events = build_events(sid, [True, False, False, False, True, False])
    for event in events:
        await ring.publish(event)

    subscription = await ring.subscribe(sid, after=StreamCursor(sid, 1, 2))

    assert await read(subscription, 3) == events[3:]


async def test_subscribe_after_the_newest_event_waits_for_the_next(ring: LiveRing) -> None:
    sid = new_session()
    events = durable_events(sid, 3)
    for event in events[:2]:
        await ring.publish(event)

    subscription = await ring.subscribe(sid, after=events[1].cursor)
    await ring.publish(events[2])

    assert await read(subscription, 1) == [events[2]]


async def test_slow_subscriber_is_cut_loose_with_its_resume_cursor(ring: LiveRing) -> None:
    sid = new_session()
    events = build_events(sid, [True, False] * 25)
    slow = await ring.subscribe(sid, backlog=5)
    fast = await ring.subscribe(sid)

    # The producer never waits on the slow subscriber, which reads nothing meanwhile.
    async with asyncio.timeout(10):
        for event in events:
            await ring.publish(event)
    assert await read(fast, 50) == events
    await asyncio.sleep(0.2)  # a Redis reader task needs a moment to notice the overflow

    received: list[Event] = []

    async def read_all() -> None:
        async for event in slow:
            received.append(event)

    with pytest.raises(Lagged) as lagged:
        await asyncio.wait_for(read_all(), 10)
    assert received == events[:5]
    assert (lagged.value.session_id, lagged.value.resume_from) == (sid, events[4].cursor)

    # The fast subscriber keeps receiving.
    later = event_at(sid, 26)
    await ring.publish(later)
    assert await read(fast, 1) == [later]


async def test_subscriber_cut_before_reading_anything_resumes_from_its_position(ring: LiveRing) -> None:
    sid = new_session()
    events = durable_events(sid, 4)
    await ring.publish(events[0])
    slow = await ring.subscribe(sid, backlog=1)
    for event in events[1:]:
        await ring.publish(event)
    await asyncio.sleep(0.2)

    assert await read(slow, 1) == [events[1]]
    with pytest.raises(Lagged) as lagged:
        await read(slow, 1)
    assert lagged.value.resume_from == events[1].cursor


async def test_cursor_older_than_the_ring_raises_lagged_on_first_read(open_rings: RingFactory) -> None:
    ring = await open_rings(ring_size=10)
    sid = new_session()
    # Many more than the ring keeps: Redis trims whole nodes, so it keeps a little more than ring_size.
    events = durable_events(sid, 400)
    for event in events:
        await ring.publish(event)
    old = StreamCursor(sid, 1)

    subscription = await ring.subscribe(sid, after=old)

    with pytest.raises(Lagged) as lagged:
        await read(subscription, 1)
    assert (lagged.value.session_id, lagged.value.resume_from) == (sid, old)


async def test_cursor_right_before_the_oldest_retained_event_is_served(open_rings: RingFactory) -> None:
    ring = await open_rings(ring_size=10)
    sid = new_session()
    events = durable_events(sid, 400)
    for event in events:
        await ring.publish(event)
    retained = await ring.recent(sid, limit=1000)
    oldest = retained[0]

    at_oldest = await ring.subscribe(sid, after=oldest.cursor)
    before_oldest = await ring.subscribe(sid, after=StreamCursor(sid, oldest.seq - 1))

    assert oldest.seq > 1
    assert retained == events[oldest.seq - 1 :]
    assert await read(at_oldest, len(retained) - 1) == retained[1:]
    assert await read(before_oldest, len(retained)) == retained


async def test_out_of_order_publish_is_refused(ring: LiveRing) -> None:
    sid = new_session()
    await ring.publish(event_at(sid, 1))
    await ring.publish(event_at(sid, 2))

    with pytest.raises(UserError, match="not after"):
        await ring.publish(event_at(sid, 2))
    with pytest.raises(UserError, match="not after"):
        await ring.publish(event_at(sid, 1, 5))
    await ring.publish(event_at(sid, 2, 1))
    assert await ring.head(sid) == StreamCursor(sid, 2, 1)


async def test_cursor_of_another_session_is_refused(ring: LiveRing) -> None:
    with pytest.raises(InvalidCursor):
        await ring.subscribe(new_session(), after=StreamCursor(new_session(), 1))


async def test_subscription_close_stops_delivery_and_is_idempotent(ring: LiveRing) -> None:
    sid = new_session()
    subscription = await ring.subscribe(sid)
    await ring.publish(event_at(sid, 1))

    await subscription.close()
    await subscription.close()
    await ring.publish(event_at(sid, 2))

    assert [event async for event in subscription] == []


async def test_ring_close_ends_subscriptions(ring: LiveRing) -> None:
    sid = new_session()
    waiting = await ring.subscribe(sid)
    idle = await ring.subscribe(sid, after=StreamCursor(sid, 0))

    async def drain(subscription: Subscription) -> list[object]:
        return [event async for event in subscription]

    reader = asyncio.create_task(drain(waiting))
    await asyncio.sleep(0.05)
    await ring.close()

    async with asyncio.timeout(5):
        assert await reader == []
        assert await drain(idle) == []
    with pytest.raises(UserError):
        await ring.publish(event_at(sid, 1))
    with pytest.raises(UserError):
        await ring.subscribe(sid)
    await ring.close()


async def test_ring_satisfies_the_protocol(ring: LiveRing) -> None:
    assert isinstance(ring, LiveRing)


async def test_subscription_satisfies_the_protocol(ring: LiveRing) -> None:
    subscription = await ring.subscribe(new_session())

    assert isinstance(subscription, Subscription)
    await subscription.close()


async def test_replayed_events_do_not_count_against_the_backlog(ring: LiveRing) -> None:
    sid = new_session()
    events = durable_events(sid, 30)
    for event in events[:20]:
        await ring.publish(event)

    subscription = await ring.subscribe(sid, after=StreamCursor(sid, 0), backlog=10)
    for event in events[20:]:
        await ring.publish(event)
    await asyncio.sleep(0.2)

    assert await read(subscription, 30) == events


def _turn(session_id: str, after: tuple[int, int] = (0, 0)) -> list[Event]:
    """A turn's events after `after`: its start, a model request that streams, a call, its progress and result."""
    seq, sub = after
    payloads: list[tuple[bool, Any]] = [
        (True, TurnStarted()),
        (True, CompletionStarted(request_index=0, model="m")),
        (False, ContentDelta(part="text", index=0, delta="Let me")),
        (False, ContentDelta(part="text", index=0, delta=" look.")),
        (True, ToolCall(tool_call_id="c1", tool_name="crawl", input={})),
        (False, ToolProgress(tool_call_id="c1", tool_name="crawl", message="page 1")),
        (True, ToolResult(tool_call_id="c1", tool_name="crawl", output="done")),
        (True, CompletionStarted(request_index=1, model="m")),
        (False, ContentDelta(part="thinking", index=0, delta="Hmm")),
    ]
    events = []
    for durable, payload in payloads:
        seq, sub = (seq + 1, 0) if durable else (seq, sub + 1)
        at = datetime.now(UTC)
        events.append(Event(id=EventId(new_id("evt")), session_id=SessionId(session_id), seq=seq, sub=sub, at=at,
                            payload=payload))  # fmt: skip
    return events


_TOOL_TYPES = ("turn.started", "tool.call", "tool.result", "tool.progress")


async def test_recent_each_reads_the_newest_events_of_many_sessions_of_the_types_asked(ring: LiveRing) -> None:
    """One read for a page of sessions (one round trip on Redis): of each session's newest `limit` events, those of
    `types` and the newest one, oldest first, in the order the sessions were asked; nothing of an unknown one."""
    first, second, unknown = new_session(), new_session(), new_session()
    older, newer = _turn(first), _turn(second)
    for event in [*older, *newer]:
        await ring.publish(event)

    each = await ring.recent_each([second, unknown, first], limit=100, types=_TOOL_TYPES)
    assert [[e.payload.type for e in events] for events in each] == [
        ["turn.started", "tool.call", "tool.progress", "tool.result", "content.delta"],
        [],
        ["turn.started", "tool.call", "tool.progress", "tool.result", "content.delta"],
    ]
    assert each[0] == [newer[0], newer[4], newer[5], newer[6], newer[-1]]
    # Among the newest `limit` only; the newest is there whatever its type, once.
    assert await ring.recent_each([first], limit=4, types=_TOOL_TYPES) == [[older[5], older[6], older[-1]]]
    assert await ring.recent_each([first], limit=3, types=("completion.started",)) == [[older[7], older[-1]]]
    assert await ring.recent_each([first], limit=100, types=("content.delta",)) == [[older[2], older[3], older[8]]]
    assert await ring.recent_each([first], limit=1, types=()) == [[older[-1]]]
    assert await ring.recent_each([], limit=100, types=_TOOL_TYPES) == []


async def test_recent_each_reads_back_to_the_newest_event_of_a_type(ring: LiveRing) -> None:
    """`back_to`: the events older than the newest of that type are not read (a finished turn's, for what a
    session does now); with none of that type among the newest `limit`, all of them are."""
    sid = new_session()
    done = _turn(sid)
    now = _turn(sid, after=(done[-1].seq, done[-1].sub))
    for event in [*done, *now]:
        await ring.publish(event)

    [events] = await ring.recent_each([sid], limit=100, types=_TOOL_TYPES, back_to="turn.started")
    assert events == [now[0], now[4], now[5], now[6], now[-1]]
    [events] = await ring.recent_each([sid], limit=4, types=_TOOL_TYPES, back_to="turn.started")
    assert events == [now[5], now[6], now[-1]]
    [events] = await ring.recent_each([sid], limit=100, types=(), back_to="content.delta")
    assert events == [now[-1]]
