"""The live ring: recent events per session (ephemeral ones included) and exactly-once subscriptions.

Backends: `memory` (one process, the default) and `redis` (Redis Streams; carries events between processes).
"""

from __future__ import annotations

from agentwatch.errors import InvalidArgument
from agentwatch.live.base import DEFAULT_BACKLOG, DEFAULT_RING_SIZE, Lagged, LiveRing, Subscription, cancel_and_wait

__all__ = [
    "DEFAULT_BACKLOG",
    "DEFAULT_RING_SIZE",
    "Lagged",
    "LiveRing",
    "Subscription",
    "cancel_and_wait",
    "connect_live",
]


async def connect_live(url: str = "memory://", *, ring_size: int = DEFAULT_RING_SIZE) -> LiveRing:
    """Open the live ring at `url`: `memory://` or `redis://host:6379/0`."""
    scheme, sep, _ = url.partition("://")
    if sep and scheme == "memory":
        from agentwatch.live.memory import MemoryRing

        return MemoryRing(ring_size=ring_size)
    if sep and scheme in ("redis", "rediss"):
        from agentwatch.live.redis import RedisRing

        return await RedisRing.open(url, ring_size=ring_size)
    raise InvalidArgument(f"unknown live ring URL {url!r}; use memory:// (one process) or redis://host:6379/0")
