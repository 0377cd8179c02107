"""Live figures: how long an event takes from `publish()` to the subscriber that receives it.

Each sample is one round trip in lock step: the producer publishes one event and waits until the
subscriber task has it, so a sample is pure latency with no queue behind it. Baselines move the same event
through the plain mechanism underneath: an `asyncio.Queue` for the memory ring, redis-py `XADD`/`XREAD`
on two connections for the Redis ring.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

from agentwatch.events import EVENT_ADAPTER, Event, EventId, SessionId, new_id
from agentwatch.live import connect_live
from bench._harness import Context, Result, Skip, Target, bench_redis_ring, percentile, sample_payload

__all__ = ["memory_latency", "redis_latency"]

T = TypeVar("T")

_WARM_UP: Final = 50
_WAIT_S: Final = 10.0  # a delivery that takes longer than this is a failure, not a sample


class _Arrival:
    """The subscriber task notes here when the event arrived; the producer waits on it."""

    def __init__(self) -> None:
        self.at = 0.0
        self.event = asyncio.Event()

    def mark(self) -> None:
        self.at = time.perf_counter()
        self.event.set()


async def _round_trips(
    items: Sequence[T],
    send: Callable[[T], Awaitable[object]],
    receive: Callable[[_Arrival], Coroutine[Any, Any, None]],
) -> list[float]:
    """Milliseconds from just before `send(item)` to the moment `receive` marked its arrival, per item after
    the warm-up."""
    arrival = _Arrival()
    receiver: asyncio.Task[None] = asyncio.create_task(receive(arrival))
    latencies: list[float] = []
    try:
        for index, item in enumerate(items):
            arrival.event.clear()
            start = time.perf_counter()
            await send(item)
            await asyncio.wait_for(arrival.event.wait(), _WAIT_S)
            if index >= _WARM_UP:
                latencies.append((arrival.at - start) * 1000)
    finally:
        # Cancel until it is done: on Python 3.11 redis-py's blocking read can swallow one cancellation.
        while not receiver.done():
            receiver.cancel()
            await asyncio.wait([receiver], timeout=0.1)
        if not receiver.cancelled() and receiver.exception() is not None:
            raise RuntimeError("the subscriber task failed") from receiver.exception()
    return latencies


def _events(session_id: str, count: int) -> list[Event]:
    """Durable events seq 1..count of one session, each with a ~300-byte payload (built before timing)."""
    now = datetime.now(UTC)
    return [
        Event(
            id=EventId(new_id("evt")),
            session_id=SessionId(session_id),
            seq=seq,
            at=now,
            payload=sample_payload(seq),
        )
        for seq in range(1, count + 1)
    ]


def _results(area: str, ring_ms: list[float], base_ms: list[float], limit_ms: float, note: str) -> list[Result]:
    return [
        Result(f"live.{area}.p50", "ms", percentile(ring_ms, 50), percentile(base_ms, 50), "lower", None, note),
        Result(
            f"live.{area}.p99",
            "ms",
            percentile(ring_ms, 99),
            percentile(base_ms, 99),
            "lower",
            Target("value", "<=", limit_ms),
            note,
        ),
    ]


async def memory_latency(ctx: Context) -> list[Result]:
    """The memory ring against an `asyncio.Queue` put/get."""
    count = ctx.sizes.live_samples + _WARM_UP
    ctx.say(f"live memory: {ctx.sizes.live_samples} round trips each way")
    session_id = new_id("ses")
    events = _events(session_id, count)

    ring = await connect_live("memory://")
    try:
        subscription = await ring.subscribe(session_id)

        async def ring_receive(arrival: _Arrival) -> None:
            async for _ in subscription:
                arrival.mark()

        ring_ms = await _round_trips(events, ring.publish, ring_receive)
    finally:
        await ring.close()

    queue: asyncio.Queue[Event] = asyncio.Queue()

    async def queue_receive(arrival: _Arrival) -> None:
        while True:
            await queue.get()
            arrival.mark()

    queue_ms = await _round_trips(events, queue.put, queue_receive)
    note = f"{len(ring_ms)} round trips in lock step, one subscriber; baseline: asyncio.Queue put/get"
    return _results("memory", ring_ms, queue_ms, 5.0, note)


async def redis_latency(ctx: Context) -> list[Result]:
    """The Redis ring against plain redis-py `XADD` and a blocking `XREAD` on another connection."""
    try:
        from redis import asyncio as aioredis
    except ImportError:
        raise Skip("redis is not installed (pip install 'agentwatch[redis]')") from None
    ring, prefix = await bench_redis_ring(ctx.redis_url)
    count = ctx.sizes.live_samples + _WARM_UP
    ctx.say(f"live Redis: {ctx.sizes.live_samples} round trips each way")
    session_id = new_id("ses")
    events = _events(session_id, count)
    producer = aioredis.Redis.from_url(ctx.redis_url)
    consumer = aioredis.Redis.from_url(ctx.redis_url)
    try:
        subscription = await ring.subscribe(session_id)

        async def ring_receive(arrival: _Arrival) -> None:
            async for _ in subscription:
                arrival.mark()

        ring_ms = await _round_trips(events, ring.publish, ring_receive)
        await ring.close()

        # The same bytes the ring stores, serialized before timing: the baseline moves bytes, nothing more.
        key = f"{prefix}raw"
        entries = [EVENT_ADAPTER.dump_json(event) for event in events]

        async def raw_send(entry: bytes) -> None:
            await producer.xadd(key, {b"event": entry})

        async def raw_receive(arrival: _Arrival) -> None:
            last: bytes | str = "0-0"
            while True:
                response = await consumer.xread({key: last}, count=500, block=5000)
                for _, stream_entries in response:
                    for entry_id, _ in stream_entries:
                        last = entry_id
                        arrival.mark()

        raw_ms = await _round_trips(entries, raw_send, raw_receive)
    finally:
        await ring.close()
        async for stale in producer.scan_iter(match=f"{prefix}*"):
            await producer.delete(stale)
        await producer.aclose()
        await consumer.aclose()
    note = (
        f"{len(ring_ms)} round trips in lock step over loopback, one subscriber; baseline: redis-py XADD and "
        "a blocking XREAD on a second connection, same bytes"
    )
    return _results("redis", ring_ms, raw_ms, 20.0, note)
