"""Invariants of the live ring under random schedules, on every backend.

(a) Attaching at random moments while a producer publishes: every subscriber receives exactly the events
after its `position`, each once, in order. The checker is first shown to catch the naive order (read the
head, yield, then subscribe), which loses the events published in between.

(b) Disconnecting anywhere and resuming from the last cursor received (falling back to the store on
`Lagged`) receives exactly the rest: nothing missed, nothing twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentwatch.events import Event, StreamCursor
from agentwatch.live import Lagged, LiveRing, Subscription

from .streams import build_events, drop_streams, new_session, open_ring, position, read_through, unique_prefix

PROPERTY_SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

T = TypeVar("T")

Attach = Callable[[LiveRing, str], Awaitable[tuple[StreamCursor, Subscription]]]


async def attach_in_one_step(ring: LiveRing, session_id: str) -> tuple[StreamCursor, Subscription]:
    """The ring's own attach: the position is fixed in the same step as the registration."""
    subscription = await ring.subscribe(session_id)
    return subscription.position, subscription


async def attach_naively(ring: LiveRing, session_id: str) -> tuple[StreamCursor, Subscription]:
    """Snapshot, then subscribe: treats the head read beforehand as the position (the measured trap)."""
    snapshot = await ring.head(session_id) or StreamCursor(session_id, 0)
    await asyncio.sleep(0)
    return snapshot, await ring.subscribe(session_id)


@dataclass
class Attachment:
    """What one subscriber was promised and what it got."""

    position: StreamCursor
    received: list[Event]

    def expected(self, published: list[Event]) -> list[Event]:
        return [event for event in published if position(event) > position(self.position)]


async def attach_while_publishing(
    ring: LiveRing, pattern: list[bool], attach_after: list[int], attach: Attach
) -> tuple[list[Event], list[Attachment]]:
    """Publish `pattern` (yielding after every event) while subscribers attach after the given yield counts.

    The last event, durable, is published once every subscriber has attached, so each can read up to it.
    """
    sid = new_session()
    events = build_events(sid, [*pattern, True])
    final = events[-1]
    attached = 0
    all_attached = asyncio.Event()

    async def produce() -> None:
        for event in events[:-1]:
            await ring.publish(event)
            await asyncio.sleep(0)
        await all_attached.wait()
        await ring.publish(final)

    async def subscriber(delay: int) -> Attachment:
        nonlocal attached
        for _ in range(delay):
            await asyncio.sleep(0)
        claimed, subscription = await attach(ring, sid)
        attached += 1
        if attached == len(attach_after):
            all_attached.set()
        received = await read_through(subscription, final)
        await subscription.close()
        return Attachment(claimed, received)

    producer = asyncio.create_task(produce())
    attachments = await asyncio.gather(*(subscriber(delay) for delay in attach_after))
    await producer
    return events, list(attachments)


async def with_ring(
    backend: str, redis_url: str | None, scenario: Callable[[LiveRing], Awaitable[T]], *, ring_size: int = 2000
) -> T:
    prefix = unique_prefix()
    ring = await open_ring(backend, redis_url, ring_size=ring_size, key_prefix=prefix)
    try:
        return await scenario(ring)
    finally:
        await ring.close()
        if redis_url is not None:
            await drop_streams(redis_url, prefix)


def test_naive_attach_is_caught_missing_events(backend: str, backend_url: str | None) -> None:
    async def scenario(ring: LiveRing) -> tuple[list[Event], list[Attachment]]:
        return await attach_while_publishing(ring, [True, False] * 60, list(range(0, 120, 4)), attach_naively)

    events, attachments = asyncio.run(with_ring(backend, backend_url, scenario))

    missed = [a for a in attachments if a.received != a.expected(events)]
    assert missed, "the checker must be able to fail: the naive attach was expected to miss events"
    # What goes wrong is always loss of what was published between the snapshot and the subscription.
    for attachment in missed:
        expected = attachment.expected(events)
        assert attachment.received == expected[len(expected) - len(attachment.received) :]


@PROPERTY_SETTINGS
@given(
    pattern=st.lists(st.booleans(), min_size=1, max_size=80),
    attach_after=st.lists(st.integers(min_value=0, max_value=100), min_size=1, max_size=6),
)
def test_attach_at_random_moments_misses_nothing_and_doubles_nothing(
    backend: str, backend_url: str | None, pattern: list[bool], attach_after: list[int]
) -> None:
    async def scenario(ring: LiveRing) -> tuple[list[Event], list[Attachment]]:
        return await attach_while_publishing(ring, pattern, attach_after, attach_in_one_step)

    events, attachments = asyncio.run(with_ring(backend, backend_url, scenario))

    published_positions = {(0, 0)} | {position(event) for event in events}
    for attachment in attachments:
        assert position(attachment.position) in published_positions
        assert attachment.received == attachment.expected(events)


@PROPERTY_SETTINGS
@given(
    pattern=st.lists(st.booleans(), min_size=1, max_size=80),
    data=st.data(),
    ring_size=st.sampled_from([4, 25, 2000]),
)
def test_resume_after_disconnect_receives_exactly_the_rest(
    backend: str, backend_url: str | None, pattern: list[bool], data: st.DataObject, ring_size: int
) -> None:
    disconnect_at = data.draw(st.integers(min_value=0, max_value=len(pattern)), label="disconnect_at")
    resume_at = data.draw(st.integers(min_value=disconnect_at, max_value=len(pattern)), label="resume_at")

    async def scenario(ring: LiveRing) -> tuple[list[Event], list[Event], bool]:
        sid = new_session()
        events = build_events(sid, [*pattern, True])
        final = events[-1]
        published: list[Event] = []

        async def publish(batch: list[Event]) -> None:
            for event in batch:
                await ring.publish(event)
                published.append(event)
                await asyncio.sleep(0)

        # Connected: read everything up to the disconnect, then drop the connection.
        first = await ring.subscribe(sid)
        await publish(events[:disconnect_at])
        received = [await anext(first) for _ in range(disconnect_at)] if disconnect_at else []
        await first.close()
        cursor = received[-1].cursor if received else first.position

        # Disconnected: the producer goes on.
        await publish(events[disconnect_at:resume_at])

        # Resume with the cursor while the producer finishes; on Lagged, read the durable rest from the
        # store (here: the durable events published so far) and subscribe again after them.
        producer = asyncio.create_task(publish(events[resume_at:]))
        lagged = False
        while not received or received[-1] != final:
            subscription = await ring.subscribe(sid, after=cursor)
            try:
                received += await read_through(subscription, final)
            except Lagged as exc:
                lagged = True
                from_store = [e for e in published if e.durable and position(e) > position(exc.resume_from)]
                received += from_store
                cursor = from_store[-1].cursor if from_store else exc.resume_from
            finally:
                await subscription.close()
        await producer
        return events, received, lagged

    events, received, lagged = asyncio.run(with_ring(backend, backend_url, scenario, ring_size=ring_size))

    positions = [position(event) for event in received]
    assert positions == sorted(set(positions)), "in order, each once"
    assert [e for e in received if e.durable] == [e for e in events if e.durable], "no durable event missed"
    if ring_size >= len(events):
        # Nothing was trimmed, so no ephemeral event could be lost either.
        assert (received, lagged) == (events, False)


def test_the_same_schedule_passes_with_the_rings_own_attach(backend: str, backend_url: str | None) -> None:
    async def scenario(ring: LiveRing) -> tuple[list[Event], list[Attachment]]:
        return await attach_while_publishing(ring, [True, False] * 60, list(range(0, 120, 4)), attach_in_one_step)

    events, attachments = asyncio.run(with_ring(backend, backend_url, scenario))

    assert [a.received for a in attachments] == [a.expected(events) for a in attachments]
