"""The in-process live ring: recent events per session in a bounded deque, fanned out to subscribers.

Everything here runs on one event loop and no method awaits between reading and changing state, so
`subscribe()` fixes its position and registers in one step, and `publish()` hands an event to every
subscriber before any of them can run.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Sequence
from itertools import islice

from agentwatch.errors import InvalidArgument, UserError
from agentwatch.events import Event, StreamCursor
from agentwatch.live._subscription import BufferedSubscription, check_subscribe
from agentwatch.live.base import DEFAULT_BACKLOG, DEFAULT_RING_SIZE, pick_recent

__all__ = ["MemoryRing"]


class _SessionRing:
    """One session's retained events and live subscribers."""

    __slots__ = ("events", "last", "subscribers")

    def __init__(self, ring_size: int) -> None:
        self.events: deque[Event] = deque(maxlen=ring_size)
        self.last: tuple[int, int] = (0, 0)
        # A dict as an ordered set: O(1) removal when a subscriber closes or is cut loose.
        self.subscribers: dict[BufferedSubscription, None] = {}


class MemoryRing:
    """The live ring of one process: `ring_size` recent events per session, ephemeral ones included.

    `publish()` never waits: each subscriber has a bounded backlog and one that overflows is cut loose
    with `Lagged`. A session's retained events stay in memory until `forget` drops them (its position stays).
    """

    def __init__(self, *, ring_size: int = DEFAULT_RING_SIZE) -> None:
        if ring_size < 1:
            raise InvalidArgument(f"ring_size must be at least 1, not {ring_size!r}")
        self.ring_size = ring_size
        """Events kept per session."""
        self._sessions: dict[str, _SessionRing] = {}
        self._closed = False

    async def publish(self, event: Event) -> None:
        """Append an event to its session's ring and hand it to the session's subscribers."""
        self.publish_now(event)

    def publish_now(self, event: Event) -> None:
        """`publish`, as a plain call: it never waits, so an emitter on the ring's loop hands its events over
        without making a coroutine for each one."""
        if self._closed:
            raise UserError("publish() on a closed live ring; open a new one")
        session = self._sessions.get(event.session_id)
        if session is None:
            session = self._sessions[event.session_id] = _SessionRing(self.ring_size)
        position = (event.seq, event.sub)
        if position <= session.last:
            raise UserError(
                f"event at (seq={event.seq}, sub={event.sub}) of session {event.session_id!r} is not after "
                f"the last published (seq={session.last[0]}, sub={session.last[1]}); publish each session's "
                "events once, in order"
            )
        session.last = position
        session.events.append(event)
        subscribers = session.subscribers
        if subscribers:
            cut: list[BufferedSubscription] | None = None
            for subscriber in subscribers:
                if not subscriber.offer(event):
                    if cut is None:
                        cut = []
                    cut.append(subscriber)
            if cut is not None:
                for subscriber in cut:
                    del subscribers[subscriber]

    async def subscribe(
        self, session_id: str, *, after: StreamCursor | None = None, backlog: int = DEFAULT_BACKLOG
    ) -> BufferedSubscription:
        """Start receiving the session's events after `after` (or after the newest, when None).

        With a cursor older than the ring holds (a durable event after it was trimmed), the first read
        raises `Lagged(resume_from=after)`.
        """
        check_subscribe(closed=self._closed, session_id=session_id, after=after, backlog=backlog)
        session = self._sessions.get(session_id)
        if session is None:
            session = self._sessions[session_id] = _SessionRing(self.ring_size)
        # From here to registration nothing awaits: no event can slip between the position and the
        # first delivery.
        if after is None:
            position = StreamCursor(session_id, *session.last)
            subscription = BufferedSubscription(session_id, position, backlog=backlog, on_close=self._unregister)
        else:
            subscription = BufferedSubscription(session_id, after, backlog=backlog, on_close=self._unregister)
            events = session.events
            # With nothing retained (forgotten), every durable event up to the last position is gone.
            missing = _missing_after(after, events[0]) if events else after.seq < session.last[0]
            if missing:
                subscription.lag()
                return subscription
            for event in _retained_after(events, after):
                subscription.offer_replay(event)
        session.subscribers[subscription] = None
        return subscription

    async def recent(self, session_id: str, *, after: StreamCursor | None = None, limit: int = 100) -> list[Event]:
        """Retained events after `after` (the first `limit` of them), or the newest `limit`; oldest first."""
        session = self._sessions.get(session_id)
        if session is None or limit <= 0:
            return []
        if after is None:
            events = session.events
            return list(islice(events, max(len(events) - limit, 0), None))
        return list(islice(_retained_after(session.events, after), limit))

    async def recent_each(
        self, session_ids: Sequence[str], *, limit: int, types: Collection[str], back_to: str | None = None
    ) -> list[list[Event]]:
        """Of each session's newest `limit` retained events, the newest one and those of `types`, read back no
        further than the newest of type `back_to`; oldest first (see `pick_recent`)."""
        wanted = frozenset(types)
        picked: list[list[Event]] = []
        for session_id in session_ids:
            session = self._sessions.get(session_id)
            if session is None or limit <= 0:
                picked.append([])
            else:
                picked.append(pick_recent(islice(reversed(session.events), limit), wanted, back_to))
        return picked

    async def head(self, session_id: str) -> StreamCursor | None:
        """The position of the newest retained event, or None when the ring holds none."""
        session = self._sessions.get(session_id)
        if session is None or not session.events:
            return None
        return session.events[-1].cursor

    def forget(self, session_id: str) -> None:
        """Drop the session's retained events when nobody is subscribed to it (its driver went idle): the ring
        keeps only its position, so a later `subscribe(after=cursor)` older than that position gets `Lagged`
        (read the store) instead of missing what was dropped."""
        session = self._sessions.get(session_id)
        if session is not None and not session.subscribers and session.events:
            session.events = deque(maxlen=self.ring_size)

    async def drop(self, session_ids: Sequence[str]) -> None:
        """Let go of reaped sessions (a forgotten one kept its position, for good)."""
        for session_id in session_ids:
            session = self._sessions.get(session_id)
            if session is not None and not session.subscribers:
                del self._sessions[session_id]

    async def close(self) -> None:
        """Close every subscription; later reads of them stop, and later publishes are refused."""
        self._closed = True
        for session in self._sessions.values():
            for subscriber in session.subscribers:
                subscriber.end()
            session.subscribers.clear()

    async def _unregister(self, subscription: BufferedSubscription) -> None:
        session = self._sessions.get(subscription.session_id)
        if session is not None:
            session.subscribers.pop(subscription, None)


def _missing_after(cursor: StreamCursor, oldest: Event) -> bool:
    """Whether a durable event right after `cursor` was trimmed, given the oldest retained event.

    Ephemeral events may be missing from any ring (the store never has them), so only the durable event
    that follows the cursor, (seq + 1, 0), decides: if it is older than the ring's start it is gone.
    """
    return (cursor.seq + 1, 0) < (oldest.seq, oldest.sub)


def _retained_after(events: deque[Event], cursor: StreamCursor) -> list[Event]:
    """The retained events strictly after `cursor`, oldest first."""
    position = (cursor.seq, cursor.sub)
    start = len(events)
    # Walk back from the newest: a resuming reader is usually close to the head.
    for event in reversed(events):
        if (event.seq, event.sub) <= position:
            break
        start -= 1
    return list(islice(events, start, None))
