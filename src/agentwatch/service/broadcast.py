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
- With a live ring shared by several processes (Redis), a session's turns may run in another service
  process, whose events never pass through this process's drivers. Then the broadcaster also relays the
  ring: one ring subscription per session with clients attached here, its events pushed to the same
  queues. A client is given each event once (by cursor), whichever way it came first; the attach stream
  (`agentwatch.service.attach`) fills any hole from the ring or the store. While the ring cannot be relayed
  (Redis down), clients still attach: this process's own events reach them as ever, and their stream looks
  in the store for the others' (`relaying`), asking for the relay again (`ensure_relayed`) until it is back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any, Protocol

from agentwatch.events import Event, StreamCursor
from agentwatch.live import Lagged, LiveRing
from agentwatch.live.memory import MemoryRing
from agentwatch.runtime.thread_observer import ReplaySnapshot

__all__ = ["DEFAULT_CLIENT_BACKLOG", "Broadcaster", "LiveClient", "SessionBroadcast", "shared_ring"]

log = logging.getLogger(__name__)

DEFAULT_CLIENT_BACKLOG = 1000
"""Events a client may have waiting before it is cut loose (and resumes from the store)."""
RELAY_RETRY_SECONDS = 1.0
"""How long after a relay failed to start the next one is tried, at most once per that time for every session."""


class _Subscribing(Protocol):
    async def subscribe(self, thread_id: str, request: Any) -> ReplaySnapshot: ...


class LiveClient:
    """One attachment of one client to one session: its snapshot and a bounded queue of later events."""

    __slots__ = (
        "_last",
        "_queue",
        "_waiter",
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
        self._waiter: asyncio.Future[object] | None = None
        # (seq, sub) of the last event queued (or of the snapshot): tuples, as this runs per client per event.
        self._last = (0, 0)
        self.abandoned = False
        """The attach was given up before the driver got to it: never register it."""

    def offer(self, event: Event) -> bool:
        """Queue an event without waiting; False (and the client cut loose) when its queue is full. An event
        at or before the last one queued (the same event relayed from the ring) is skipped."""
        if self.lagged is not None:
            return False
        position = (event.seq, event.sub)
        if position <= self._last:
            return True
        if len(self._queue) >= self.backlog:
            self.cut_loose()
            return False
        self._queue.append(event)
        self._last = position
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)
        return True

    def cut_loose(self) -> None:
        """Make the client resume from the store after what it was given (as when its queue fills)."""
        if self.lagged is None:
            self.lagged = StreamCursor(self.session_id, *self._last)
            waiter = self._waiter
            if waiter is not None:
                self._waiter = None
                if not waiter.done():
                    waiter.set_result(None)

    def attached(self, snapshot: ReplaySnapshot) -> None:
        self.snapshot = snapshot
        self._last = (snapshot.position.seq, snapshot.position.sub)

    async def next(self, timeout: float | None = None) -> Event | None:
        """The next queued event, or None once `timeout` seconds passed with none queued; raises `Lagged` once
        the queue is drained after the client was cut loose."""
        queue = self._queue
        while not queue:
            if self.lagged is not None:
                raise Lagged(self.session_id, self.lagged)
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            timer = loop.call_later(timeout, _time_out, waiter) if timeout is not None else None
            try:
                await waiter
            finally:
                if timer is not None:
                    timer.cancel()
                if self._waiter is waiter:
                    self._waiter = None
            if not queue and waiter.result() is _TIMED_OUT and self.lagged is None:
                return None
        return queue.popleft()

    @property
    def queued(self) -> int:
        """Events waiting to be sent."""
        return len(self._queue)


_TIMED_OUT = object()


def _time_out(waiter: asyncio.Future[object]) -> None:
    if not waiter.done():
        waiter.set_result(_TIMED_OUT)


def shared_ring(ring: LiveRing) -> LiveRing | None:
    """`ring` when other processes publish to it too (Redis), else None (the memory ring of this process)."""
    return None if isinstance(ring, MemoryRing) else ring


class Broadcaster:
    """The registry of attached clients of every session, and the factory of per-session observers.

    `ring`: the live ring when other processes share it (see `shared_ring`); its events are relayed to the
    clients of this process too.
    """

    def __init__(self, *, backlog: int = DEFAULT_CLIENT_BACKLOG, ring: LiveRing | None = None) -> None:
        self.backlog = backlog
        self.ring = ring
        """The shared live ring relayed to clients, or None."""
        self._clients: dict[str, dict[LiveClient, None]] = {}
        self._relays: dict[str, asyncio.Task[None]] = {}
        self._ring_down = False  # a relay failed to start, and none started since (warned once per outage)
        self._retry_at = 0.0  # (monotonic) no relay is tried before then

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
        try:
            await self.ensure_relayed(session_id)
        except BaseException:
            self.detach(client)
            raise
        return client

    def relaying(self, session_id: str) -> bool:
        """Whether every event of the session reaches its clients here live: its ring is relayed, or there is
        no shared ring (then only this process runs its turns, as far as this process can know)."""
        return self.ring is None or session_id in self._relays

    async def ensure_relayed(self, session_id: str) -> bool:
        """Make sure the session's ring is relayed (see `_relay_started`); False when it cannot be now (the ring
        fails, or failed less than `RELAY_RETRY_SECONDS` ago): the clients then get the events of other
        processes from the store (their stream looks there), and ask again."""
        if self.relaying(session_id):
            return True
        if time.monotonic() < self._retry_at:
            return False
        try:
            await self._relay_started(session_id)
        except Exception as exc:
            self._ring_failed(exc)
            return False
        if self._ring_down:
            self._ring_down = False
            log.warning("the live ring is relayed again")
        return True

    def _ring_failed(self, error: Exception) -> None:
        """A relay could not start or broke off: none is tried for a while, and the log says so once per outage
        (not once per session)."""
        self._retry_at = time.monotonic() + RELAY_RETRY_SECONDS
        if not self._ring_down:
            self._ring_down = True
            log.warning(
                "the live ring cannot be relayed (%s): attached clients get the events of other processes from the "
                "store, without their deltas, until it is back",
                error,
            )

    def detach(self, client: LiveClient) -> None:
        """Stop pushing events to `client` (idempotent)."""
        clients = self._clients.get(client.session_id)
        if clients is not None:
            clients.pop(client, None)
            if not clients:
                del self._clients[client.session_id]
                relay = self._relays.pop(client.session_id, None)
                if relay is not None:
                    relay.cancel()

    async def _relay_started(self, session_id: str) -> None:
        """With a shared ring: make sure the session's ring is relayed, its position fixed before this
        returns (every event published later reaches the session's clients)."""
        if self.ring is None or session_id in self._relays:
            return
        started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        relay = asyncio.create_task(self._relay(self.ring, session_id, started), name=f"agentwatch-relay-{session_id}")
        self._relays[session_id] = relay
        try:
            await asyncio.shield(started)
        except BaseException:
            if self._relays.get(session_id) is relay:
                del self._relays[session_id]
            relay.cancel()
            raise

    async def _relay(self, ring: LiveRing, session_id: str, started: asyncio.Future[None]) -> None:
        try:
            subscription = await ring.subscribe(session_id, backlog=self.backlog)
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        started.set_result(None)
        try:
            async for event in subscription:
                self._push(session_id, event)
        except Exception as exc:  # Lagged, or the ring failed: the clients resume from the store
            if not isinstance(exc, Lagged):
                self._ring_failed(exc)
            if self._relays.get(session_id) is asyncio.current_task():
                del self._relays[session_id]
            for client in list(self._clients.get(session_id, ())):
                client.cut_loose()
                self.detach(client)
        finally:
            await subscription.close()
            if self._relays.get(session_id) is asyncio.current_task():
                del self._relays[session_id]

    async def close(self) -> None:
        """Stop relaying the shared ring (the clients' streams end with the service)."""
        relays = list(self._relays.values())
        self._relays.clear()
        for relay in relays:
            relay.cancel()
        await asyncio.gather(*relays, return_exceptions=True)

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
