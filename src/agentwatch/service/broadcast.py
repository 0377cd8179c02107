"""The service's broadcaster: a ThreadObserver that fans each session's events out to attached clients.

Shaped like seed 003's DaemonObserver. `engine.start_with_observer(broadcaster.observer)` gives every session
driver its own `SessionBroadcast`; the registry of attached clients lives in the `Broadcaster`, outside the
per-session instances, so it outlives any one driver.

- `on_subscribe` (run by the driver between two dispatched events) hands the client its `ReplaySnapshot`
  and registers it in the same step: every event is in the snapshot or pushed to the client afterwards,
  never both, never neither.
- `on_event` (inline at the emission point) appends the event to each client's bounded queue and never
  waits. A client whose queue is full is cut loose: it is removed and remembers the cursor of the last
  event it was given, so its connection can resume from the store with no gap (`Lagged`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Protocol

from agentwatch.events import Event, StreamCursor
from agentwatch.live import Lagged
from agentwatch.runtime.thread_observer import ReplaySnapshot

__all__ = ["DEFAULT_CLIENT_BACKLOG", "Broadcaster", "LiveClient", "SessionBroadcast"]

DEFAULT_CLIENT_BACKLOG = 1000
"""Events a client may have waiting before it is cut loose (and resumes from the store)."""


class _Subscribing(Protocol):
    async def subscribe(self, thread_id: str, request: Any) -> ReplaySnapshot: ...


class LiveClient:
    """One attachment of one client to one session: its snapshot and a bounded queue of later events."""

    __slots__ = (
        "_last",
        "_queue",
        "_wakeup",
        "abandoned",
        "backlog",
        "broadcaster",
        "lagged",
        "session_id",
        "snapshot",
    )

    def __init__(self, broadcaster: Broadcaster, session_id: str, backlog: int) -> None:
        self.broadcaster = broadcaster
        self.session_id = session_id
        self.backlog = backlog
        self.snapshot: ReplaySnapshot | None = None
        """Set by `on_subscribe`, in the step that registers the client."""
        self.lagged: StreamCursor | None = None
        """Set when the client was cut loose: the cursor of the last event it was given."""
        self._queue: deque[Event] = deque()
        self._wakeup = asyncio.Event()
        self._last: StreamCursor | None = None
        self.abandoned = False
        """The attach was given up before the driver got to it: never register it."""

    def offer(self, event: Event) -> bool:
        """Queue an event without waiting; False (and the client cut loose) when its queue is full."""
        if self.lagged is not None:
            return False
        if len(self._queue) >= self.backlog:
            self.lagged = self._last or StreamCursor(self.session_id, 0)
            self._wakeup.set()
            return False
        self._queue.append(event)
        self._last = event.cursor
        self._wakeup.set()
        return True

    def attached(self, snapshot: ReplaySnapshot) -> None:
        self.snapshot = snapshot
        self._last = snapshot.position

    async def next(self) -> Event:
        """The next queued event; raises `Lagged` once the queue is drained after the client was cut loose."""
        while not self._queue:
            if self.lagged is not None:
                raise Lagged(self.session_id, self.lagged)
            self._wakeup.clear()
            await self._wakeup.wait()
        return self._queue.popleft()

    def drain_ready(self, limit: int) -> list[Event]:
        """Up to `limit` events already queued, without waiting (to batch sends)."""
        count = min(limit, len(self._queue))
        return [self._queue.popleft() for _ in range(count)]

    @property
    def queued(self) -> int:
        """Events waiting to be sent."""
        return len(self._queue)


class Broadcaster:
    """The registry of attached clients of every session, and the factory of per-session observers."""

    def __init__(self, *, backlog: int = DEFAULT_CLIENT_BACKLOG) -> None:
        self.backlog = backlog
        self._clients: dict[str, dict[LiveClient, None]] = {}

    def observer(self, thread_id: str) -> SessionBroadcast:
        """The observer factory: pass `broadcaster.observer` to `engine.start_with_observer`."""
        return SessionBroadcast(self, thread_id)

    async def attach(self, engine: _Subscribing, session_id: str) -> LiveClient:
        """Attach a new client to a session; it holds its snapshot and receives every later event."""
        client = LiveClient(self, session_id, self.backlog)
        try:
            await engine.subscribe(session_id, client)
        except BaseException:
            # Cancelled (the connection went away) or failed: the driver may still run on_subscribe later.
            client.abandoned = True
            self.detach(client)
            raise
        if client.snapshot is None:  # the observer was not installed in this engine's drivers
            raise RuntimeError("the broadcaster's observer is not installed; call engine.start_with_observer")
        return client

    def detach(self, client: LiveClient) -> None:
        """Stop pushing events to `client` (idempotent)."""
        clients = self._clients.get(client.session_id)
        if clients is not None:
            clients.pop(client, None)
            if not clients:
                del self._clients[client.session_id]

    def client_count(self, session_id: str | None = None) -> int:
        """Clients attached to one session, or to all of them."""
        if session_id is not None:
            return len(self._clients.get(session_id, ()))
        return sum(len(c) for c in self._clients.values())

    def _register(self, client: LiveClient) -> None:
        self._clients.setdefault(client.session_id, {})[client] = None

    def _push(self, session_id: str, event: Event) -> None:
        clients = self._clients.get(session_id)
        if not clients:
            return
        cut = [client for client in clients if not client.offer(event)]
        for client in cut:
            self.detach(client)


class SessionBroadcast:
    """The broadcaster's observer instance for one session's driver."""

    __slots__ = ("broadcaster", "thread_id")

    def __init__(self, broadcaster: Broadcaster, thread_id: str) -> None:
        self.broadcaster = broadcaster
        self.thread_id = thread_id

    def on_event(self, thread_id: str, event: Event) -> None:
        """Push the event to every client attached to the session (never waits)."""
        self.broadcaster._push(thread_id, event)

    def on_subscribe(self, thread_id: str, request: Any, snapshot: ReplaySnapshot) -> None:
        """Give our own clients their snapshot and register them, in one step; ignore other requests."""
        if isinstance(request, LiveClient) and request.broadcaster is self.broadcaster and not request.abandoned:
            request.attached(snapshot)
            self.broadcaster._register(request)
