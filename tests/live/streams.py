"""Helpers the live ring tests share: building a session's events and opening rings on either backend."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

from agentwatch.events import AssistantMessage, ContentDelta, Event, EventId, SessionId, StreamCursor, new_id
from agentwatch.live import LiveRing, Subscription
from agentwatch.live.memory import MemoryRing
from agentwatch.live.redis import RedisRing

BACKENDS = ("memory", "redis")


def new_session() -> SessionId:
    """A fresh session id, so tests never see each other's streams."""
    return SessionId(new_id("ses"))


def event_at(session_id: str, seq: int, sub: int = 0) -> Event:
    """A durable assistant message at (seq, 0), or an ephemeral text delta at (seq, sub > 0)."""
    payload: AssistantMessage | ContentDelta
    if sub == 0:
        payload = AssistantMessage(text=f"message {seq}")
    else:
        payload = ContentDelta(part="text", index=0, delta=f"piece {seq}.{sub}")
    return Event(
        id=EventId(new_id("evt")),
        session_id=SessionId(session_id),
        seq=seq,
        sub=sub,
        at=datetime.now(UTC),
        payload=payload,
    )


def build_events(session_id: str, pattern: Sequence[bool], *, after: tuple[int, int] = (0, 0)) -> list[Event]:
    """Events following position `after`: True makes the next durable event, False the next ephemeral one."""
    seq, sub = after
    events = []
    for durable in pattern:
        if durable:
            seq, sub = seq + 1, 0
        else:
            sub += 1
        events.append(event_at(session_id, seq, sub))
    return events


def durable_events(session_id: str, count: int) -> list[Event]:
    """Durable events seq 1..count."""
    return build_events(session_id, [True] * count)


def position(item: Event | StreamCursor) -> tuple[int, int]:
    """The comparable (seq, sub) of an event or cursor."""
    return (item.seq, item.sub)


async def read(subscription: Subscription, count: int, *, timeout: float = 10.0) -> list[Event]:
    """The next `count` events of a subscription (fails the test if they do not come in time)."""
    async with asyncio.timeout(timeout):
        return [await anext(subscription) for _ in range(count)]


async def read_through(subscription: Subscription, last: Event, *, timeout: float = 10.0) -> list[Event]:
    """Events of a subscription up to and including `last`."""
    received: list[Event] = []
    async with asyncio.timeout(timeout):
        async for event in subscription:
            received.append(event)
            if position(event) >= position(last):
                break
    return received


async def open_ring(backend: str, redis_url: str | None, *, ring_size: int, key_prefix: str) -> LiveRing:
    """A ring of `backend`; Redis rings of one `key_prefix` share their streams."""
    if backend == "memory":
        return MemoryRing(ring_size=ring_size)
    assert redis_url is not None
    return await RedisRing.open(redis_url, ring_size=ring_size, key_prefix=key_prefix)


def unique_prefix() -> str:
    """A key prefix no other test uses."""
    return f"agentwatch:test:{uuid.uuid4().hex}:"


async def drop_streams(redis_url: str, key_prefix: str) -> None:
    """Delete every stream under `key_prefix`."""
    from redis import asyncio as aioredis

    client = aioredis.Redis.from_url(redis_url)
    try:
        keys = [key async for key in client.scan_iter(match=f"{key_prefix}*")]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()
