"""The subscription both backends hand out: a bounded backlog fed by the ring, read as an async iterator.

The feeding side (`offer`, `offer_replay`, `end`) is synchronous and never waits, so a producer that fans
out to many subscriptions costs a few list operations per subscriber. The reading side parks on one future
while the backlog is empty.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Final, Self

from agentwatch.errors import InvalidArgument, InvalidCursor, UserError
from agentwatch.events import Event, StreamCursor
from agentwatch.live.base import Lagged

__all__ = ["BufferedSubscription", "check_subscribe"]

_CLOSED: Final = "closed"
_LAGGED: Final = "lagged"
_FAILED: Final = "failed"


def check_subscribe(*, closed: bool, session_id: str, after: StreamCursor | None, backlog: int) -> None:
    """The argument checks every backend's `subscribe` makes before it registers anything."""
    if closed:
        raise UserError("subscribe() on a closed live ring; open a new one")
    if backlog < 1:
        raise InvalidArgument(f"backlog must be at least 1, not {backlog!r}")
    if after is not None and after.session_id != session_id:
        raise InvalidCursor(
            f"the cursor belongs to session {after.session_id!r}, not {session_id!r}; "
            "use a cursor returned for this session"
        )


class BufferedSubscription:
    """Events of one session after `position`, buffered for one reader.

    Replayed events (retained ones after the cursor the subscription started from) do not count against
    the backlog: they were bounded by the ring already. Live events do: when `backlog` of them wait unread,
    the next one ends the subscription, and once the waiting events are read, `Lagged` says where to resume.
    """

    __slots__ = (
        "_backlog",
        "_end",
        "_error",
        "_limit",
        "_on_close",
        "_received",
        "_replay_pending",
        "_waiter",
        "position",
        "session_id",
    )

    def __init__(
        self,
        session_id: str,
        position: StreamCursor,
        *,
        backlog: int,
        on_close: Callable[[BufferedSubscription], Awaitable[None]] | None = None,
    ) -> None:
        self.session_id = session_id
        """The session whose events this subscription receives."""
        self.position = position
        """Everything at or before this position is not delivered; everything after it is, once."""
        self._limit = backlog
        self._backlog: deque[Event] = deque()
        self._replay_pending = 0  # how many events at the front of `_backlog` are replayed (not counted)
        self._received = position  # the cursor after the last event handed to the reader
        self._waiter: asyncio.Future[None] | None = None
        self._end: str | None = None
        self._error: BaseException | None = None
        self._on_close = on_close

    # -- feeding side: synchronous, never waits -------------------------------------------------------------

    def offer_replay(self, event: Event) -> None:
        """Queue a retained event from before the subscription started; it does not count as backlog."""
        self._backlog.append(event)
        self._replay_pending += 1
        self._wake()

    def offer(self, event: Event) -> bool:
        """Queue a live event; False when the subscription has ended (now, by overflowing, or before)."""
        if self._end is not None:
            return False
        backlog = self._backlog
        if len(backlog) - self._replay_pending >= self._limit:
            # Cut loose rather than slow the producer: the reader resumes from the store.
            self._end = _LAGGED
            self._wake()
            return False
        backlog.append(event)
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)
        return True

    def lag(self) -> None:
        """End the subscription: the reader gets what is queued, then `Lagged` from its last event."""
        if self._end is None:
            self._end = _LAGGED
            self._wake()

    def fail(self, error: BaseException) -> None:
        """End the subscription with `error`, raised to the reader once the queued events are read."""
        if self._end is None:
            self._end = _FAILED
            self._error = error
            self._wake()

    def end(self) -> None:
        """End the subscription now: queued events are dropped and iteration stops."""
        self._end = _CLOSED
        self._backlog.clear()
        self._replay_pending = 0
        self._wake()

    @property
    def ended(self) -> bool:
        """Whether the subscription takes no more events (closed, cut loose or failed)."""
        return self._end is not None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    # -- reading side ---------------------------------------------------------------------------------------

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Event:
        """The next event; `Lagged` when the subscription was cut loose, `StopAsyncIteration` once closed."""
        while True:
            backlog = self._backlog
            if backlog:
                event = backlog.popleft()
                if self._replay_pending:
                    self._replay_pending -= 1
                self._received = event.cursor
                return event
            if self._end == _CLOSED:
                raise StopAsyncIteration
            if self._end == _LAGGED:
                raise Lagged(self.session_id, self._received)
            if self._error is not None:
                raise self._error
            waiter = asyncio.get_running_loop().create_future()
            self._waiter = waiter
            try:
                await waiter
            finally:
                if self._waiter is waiter:
                    self._waiter = None

    async def close(self) -> None:
        """Stop receiving; idempotent."""
        if self._end == _CLOSED:
            return
        self.end()
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            await on_close(self)
