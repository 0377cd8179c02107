"""The live ring contract: a bounded recent stream per session, ephemeral events included, and
subscriptions that see every later event exactly once.

One contract suite (`tests/live/test_contract.py`) runs unchanged against every backend.

Promises every backend keeps:

- `publish()` takes events of a session in strictly increasing (`seq`, `sub`) order and never waits on a
  subscriber: each subscriber has a bounded backlog, and one that falls behind is ended with
  `Lagged(resume_from=...)` instead of slowing the producer.
- `subscribe(session_id, after=None)` fixes its `position` at the newest published event, in the same step
  as it registers, and then yields every event published after that position, exactly once, in order.
- `subscribe(session_id, after=cursor)` yields every retained event after `cursor`, then every later one.
  When the ring no longer holds what follows `cursor`, the first read raises `Lagged` with the cursor to
  resume from the store, so nothing is skipped silently.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

from agentwatch.events import Event, StreamCursor

__all__ = [
    "DEFAULT_BACKLOG",
    "DEFAULT_RING_SIZE",
    "Lagged",
    "LiveRing",
    "Subscription",
    "cancel_and_wait",
    "pick_recent",
]

DEFAULT_RING_SIZE = 2000
"""Events kept per session."""
DEFAULT_BACKLOG = 1000
"""Events a subscriber may have waiting before it is cut loose."""


class Lagged(Exception):
    """The subscriber fell behind (or asked for events the ring no longer holds).

    Read durable events after `resume_from` from the store, then subscribe again with the cursor of the
    last event read: nothing is missed.
    """

    def __init__(self, session_id: str, resume_from: StreamCursor) -> None:
        super().__init__(f"subscriber of session {session_id!r} lagged; resume from cursor {resume_from.encode()!r}")
        self.session_id = session_id
        self.resume_from = resume_from
        """The position after the last event this subscriber received."""


@runtime_checkable
class Subscription(Protocol):
    """Events of one session after `position`, as an async iterator; `Lagged` ends it early."""

    session_id: str
    position: StreamCursor
    """Everything at or before this position is not delivered; everything after it is, once."""

    def __aiter__(self) -> AsyncIterator[Event]: ...

    async def __anext__(self) -> Event: ...

    async def close(self) -> None:
        """Stop receiving; idempotent."""


@runtime_checkable
class LiveRing(Protocol):
    """Recent events of every session, and subscriptions to them."""

    async def publish(self, event: Event) -> None:
        """Append an event to its session's ring and hand it to the session's subscribers."""

    async def subscribe(
        self, session_id: str, *, after: StreamCursor | None = None, backlog: int = DEFAULT_BACKLOG
    ) -> Subscription:
        """Start receiving the session's events after `after` (or after the newest, when None)."""

    async def recent(self, session_id: str, *, after: StreamCursor | None = None, limit: int = 100) -> list[Event]:
        """Retained events after `after` (or the newest `limit`), oldest first."""

    async def recent_each(
        self, session_ids: Sequence[str], *, limit: int, types: Collection[str], back_to: str | None = None
    ) -> list[list[Event]]:
        """For each of `session_ids`, in order, what `pick_recent` picks of its newest `limit` retained events:
        the newest one and those of `types`, read back no further than the newest of type `back_to`; oldest first.
        One read for a page of sessions (one round trip, on a shared ring), of only the events asked for."""

    async def head(self, session_id: str) -> StreamCursor | None:
        """The position of the newest retained event, or None when the ring holds none."""

    async def drop(self, session_ids: Sequence[str]) -> None:
        """Let go of everything kept of sessions that were reaped (they never publish again): their retained
        events and positions."""

    async def close(self) -> None:
        """Close every subscription and release connections."""


def pick_recent(newest_first: Iterable[Event], types: Collection[str], back_to: str | None) -> list[Event]:
    """Of events given newest first, read back no further than the newest of type `back_to` (through all of them
    without one): the newest, and those whose payload is of `types`; oldest first."""
    picked: list[Event] = []
    for index, event in enumerate(newest_first):
        kind = event.payload.type
        if index == 0 or kind in types:
            picked.append(event)
        if kind == back_to:
            break
    picked.reverse()
    return picked


async def cancel_and_wait(tasks: Sequence[asyncio.Task[Any]]) -> None:
    """Cancel `tasks` (readers of a ring, the pumps of an attach) and wait until they have finished.

    Each is cancelled again while it still runs: Python 3.11's `asyncio.wait_for`, which redis-py sends commands
    through, can swallow a cancellation that arrives just as a command completes, and the task would then go on
    (block in XREAD, or pump an attach whose client left). `asyncio.wait` (unlike awaiting the tasks) lets the
    caller's own cancellation through."""
    pending = [task for task in tasks if not task.done()]
    while pending:
        for task in pending:
            task.cancel()
        await asyncio.wait(pending, timeout=0.1)
        pending = [task for task in pending if not task.done()]
    for task in tasks:  # (their outcomes are theirs: retrieved, so none is reported as never retrieved)
        if not task.cancelled():
            task.exception()
