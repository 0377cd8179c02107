"""What only the memory ring promises: exact trimming, no task switch inside `publish()`, and `publish_now`."""

from __future__ import annotations

import pytest

from agentwatch.errors import InvalidArgument, UserError
from agentwatch.events import StreamCursor
from agentwatch.live import Lagged, connect_live
from agentwatch.live.memory import MemoryRing

from .streams import build_events, durable_events, new_session, read


async def test_connect_live_memory_url_opens_a_memory_ring() -> None:
    ring = await connect_live("memory://", ring_size=7)

    assert isinstance(ring, MemoryRing)
    assert ring.ring_size == 7


async def test_unknown_live_url_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="memory://"):
        await connect_live("kafka://somewhere")


def test_ring_size_below_one_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="ring_size"):
        MemoryRing(ring_size=0)


async def test_ring_keeps_exactly_the_newest_ring_size_events() -> None:
    ring = MemoryRing(ring_size=3)
    sid = new_session()
    events = durable_events(sid, 5)
    for event in events:
        await ring.publish(event)

    assert await ring.recent(sid) == events[2:]


async def test_trimmed_ephemeral_events_do_not_make_a_cursor_lag() -> None:
    ring = MemoryRing(ring_size=3)
    sid = new_session()
    events = build_events(sid, [True, False, False, False, False])
    for event in events:
        await ring.publish(event)

    # (1, 1) was trimmed, but it was ephemeral: the store could not give it back either.
    after_durable = await ring.subscribe(sid, after=StreamCursor(sid, 1))
    # (1, 0) was trimmed and it is durable: the store has it, so resume from there.
    before_durable = await ring.subscribe(sid, after=StreamCursor(sid, 0))

    assert await read(after_durable, 3) == events[2:]
    with pytest.raises(Lagged) as lagged:
        await read(before_durable, 1)
    assert lagged.value.resume_from == StreamCursor(sid, 0)


async def test_publish_hands_the_event_over_without_letting_subscribers_run() -> None:
    ring = MemoryRing()
    sid = new_session()
    subscriptions = [await ring.subscribe(sid) for _ in range(3)]
    event = durable_events(sid, 1)[0]

    publishing = ring.publish(event).__await__()
    # The coroutine finishes on its first step: it never suspends, so it cannot wait on anyone.
    with pytest.raises(StopIteration):
        next(publishing)

    for subscription in subscriptions:
        assert await read(subscription, 1) == [event]


async def test_publish_now_is_publish_as_a_plain_call() -> None:
    ring = MemoryRing()
    sid = new_session()
    subscription = await ring.subscribe(sid)
    events = durable_events(sid, 3)

    for event in events:
        ring.publish_now(event)  # done on return: nothing to await

    assert await read(subscription, 3) == events
    assert await ring.recent(sid) == events
    with pytest.raises(UserError, match="in order"):
        ring.publish_now(events[0])
    await ring.close()
    with pytest.raises(UserError, match="closed"):
        ring.publish_now(durable_events(sid, 4)[3])
