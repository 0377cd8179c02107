"""Following a session: live events after a cursor, across lags and reconnects, with no gap or repeat."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from agentwatch.events import ContentDelta, Event, EventId, NewEvent, SessionId, StreamCursor, UserMessage, new_id
from agentwatch.live import connect_live
from agentwatch.reads.follow import follow
from agentwatch.store import SessionDraft, Store, open_store


async def emit(store: Store, ring: object, session_id: str, index: int) -> list[Event]:
    """What a driver does: commit a durable event, publish it, then a few ephemeral ones after it."""
    (durable,) = await store.append(session_id, [NewEvent(UserMessage(text=f"message {index}"))])
    events = [durable]
    for sub in range(1, 3):
        events.append(
            Event(
                id=EventId(new_id("evt")),
                session_id=SessionId(session_id),
                seq=durable.seq,
                sub=sub,
                at=datetime.now(UTC),
                payload=ContentDelta(part="text", index=0, delta=f"d{index}.{sub}"),
            )
        )
    for event in events:
        await ring.publish(event)  # type: ignore[attr-defined]
    return events


async def test_following_across_a_lag_and_a_reconnect_misses_and_repeats_nothing(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path / 'follow.db'}") as store:
        ring = await connect_live("memory://", ring_size=6)  # tiny: readers fall off it and must catch up
        session = await store.create_session(SessionDraft(name="s", role="r"))
        emitted: list[Event] = []
        received: list[Event] = []

        async def writer() -> None:
            for index in range(60):
                emitted.extend(await emit(store, ring, session.id, index))
                if index % 7 == 0:
                    await asyncio.sleep(0.005)

        async def reader(after: StreamCursor | None, count: int, *, until_seq: int = 0) -> StreamCursor | None:
            seen = 0
            async for event in follow(store, ring, session.id, after=after):
                received.append(event)
                seen += 1
                if seen == count or (until_seq and event.seq == until_seq and event.sub == 2):
                    return event.cursor
            return None

        writing = asyncio.create_task(writer())
        cursor = await reader(None, 25)  # then the reader "disconnects"...
        await asyncio.sleep(0.01)
        cursor = await reader(cursor, 30)  # ...and reconnects with its cursor
        await writing
        await asyncio.wait_for(reader(cursor, 0, until_seq=60), timeout=5)
        await ring.close()

    durable = [e for e in received if e.durable]
    assert [e.seq for e in durable] == list(range(1, 61)), "a durable event was missed or repeated"
    positions = [(e.seq, e.sub) for e in received]
    assert positions == sorted(set(positions)), "events out of order or repeated"
    assert {e.id for e in received} <= {e.id for e in emitted}


async def test_without_a_shared_ring_following_polls_the_store(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path / 'poll.db'}") as store:
        session = await store.create_session(SessionDraft(name="s", role="r"))
        await store.append(session.id, [NewEvent(UserMessage(text="before"))])
        received: list[str] = []

        async def read() -> None:
            async for event in follow(store, None, session.id, poll_seconds=0.01):
                assert isinstance(event.payload, UserMessage)
                received.append(event.payload.text)
                if len(received) == 3:
                    return

        reading = asyncio.create_task(read())
        for text in ("one", "two"):
            await asyncio.sleep(0.02)
            await store.append(session.id, [NewEvent(UserMessage(text=text))])
        await asyncio.wait_for(reading, timeout=5)
    assert received == ["before", "one", "two"]
