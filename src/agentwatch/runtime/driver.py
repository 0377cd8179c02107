"""Session drivers: the one owner of a session inside an engine.

A driver is the only writer of its session's events in this process, and the emission point:

    commit (durable events) -> live ring -> every ThreadObserver's on_event, in order

Commits are serialized per session in the order they are submitted (each waits for the one before it), so
the order events reach the dispatch queue is their stream order. A commit may be submitted without waiting
for it (`submit`): the turn goes on while the store writes, and ephemeral events streamed meanwhile are held
back and queued right after that commit's events, so watchers still see every event in the order it was
emitted and every durable event only once it is stored. One dispatcher task per driver drains the queue; a
turn waits for the commits that precede a tool call (the durability barrier), never for dispatch, so a slow
watcher cannot slow the watched. An attach (`subscribe`) is a command on the same queue: its snapshot is
taken between two dispatched events, which is what makes delivery exactly-once relative to attach.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from agentwatch.events import (
    AssistantMessage,
    CompletionStarted,
    ContentDelta,
    Event,
    EventId,
    NewEvent,
    Payload,
    RequestDismissed,
    RequestOpened,
    RequestResolved,
    RuntimeNotice,
    SessionId,
    StreamCursor,
    ThinkingBlock,
    TurnEnded,
    TurnId,
    TurnStarted,
    new_id,
)
from agentwatch.runtime.thread_observer import PartialTurn, ReplaySnapshot, ThreadObserver
from agentwatch.store import Write

if TYPE_CHECKING:
    from agentwatch.runtime.engine import Engine

__all__ = ["SessionDriver"]

log = logging.getLogger(__name__)

SLOW_OBSERVER_SECONDS = 0.1
"""An on_event call slower than this is recorded as a warning (at most once a minute per observer)."""
_WARNING_INTERVAL = 60.0
_OBSERVER_SOURCE = "thread_observer"


@dataclass
class _Attach:
    request: Any
    done: asyncio.Future[ReplaySnapshot]


@dataclass
class _ObserverSlot:
    observer: ThreadObserver[Any]
    last_warning: float = field(default=-_WARNING_INTERVAL)


_STOP = object()


class SessionDriver:
    """Owns one session in this engine: its emission pipeline, its observers and its turn loop."""

    def __init__(self, engine: Engine, session_id: str, last_seq: int, observers: list[ThreadObserver[Any]]):
        self.engine = engine
        self.session_id = session_id
        self._observers = [_ObserverSlot(o) for o in observers]
        self._sid = SessionId(session_id)
        # The last submitted commit's ticket: resolved (never failed) once that commit is over.
        self._tail: asyncio.Future[None] | None = None
        # Ephemeral events streamed while a commit submitted with `hold` is in flight: (payload, turn, time).
        self._held: list[tuple[Payload, TurnId | None, datetime]] | None = None
        self._queue: asyncio.Queue[Event | _Attach | object] = asyncio.Queue()
        self._enqueued = (last_seq, 0)  # (seq, sub) of the last event queued for dispatch
        self._dispatched = self._enqueued  # ... and of the last one dispatched
        self._partial = _Partial()
        self._changed = asyncio.Event()
        self._background: set[asyncio.Task[Any]] = set()
        self._dispatcher = asyncio.create_task(self._dispatch_loop(), name=f"agentwatch-dispatch-{session_id}")
        self._loop_task: asyncio.Task[None] | None = None
        self._pending_kick = False
        self.closing = False
        """True while the engine shuts down: a turn cut off now is continued after the restart."""

    def add_observer(self, observer: ThreadObserver[Any]) -> None:
        """Attach one more observer instance; it receives events from the next one dispatched."""
        self._observers.append(_ObserverSlot(observer))

    # -- emission -------------------------------------------------------------------------------------

    async def commit(self, write: Write) -> list[Event]:
        """Make `write` durable, then hand its events to the ring and the observers (in stream order).

        The commit runs to its end even when the caller is cancelled (a stop): a write that reached the store
        must also reach the watchers, or they would miss events the log has.
        """
        return await asyncio.shield(self.submit(write))

    def submit(
        self, write: Write, *, guard: Callable[[], None] | None = None, hold: bool = False
    ) -> asyncio.Future[list[Event]]:
        """Start committing `write` after every commit submitted before it; returns at once.

        The future resolves with the stored events once they are durable and queued for dispatch (it fails
        with the store's error). The write itself runs to its end whoever awaits it, and `close` waits for it.
        `guard` runs when the write's turn comes, after every earlier commit is over: if it raises, nothing is
        written and the future fails with its error. With `hold`, ephemeral events streamed while the write is
        in flight are queued right after its events (they were emitted after it), not before.
        """
        previous = self._tail
        ticket: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._tail = ticket
        held: list[tuple[Payload, TurnId | None, datetime]] | None = None
        if hold:
            held = self._held = []
        task = asyncio.ensure_future(self._commit(write, previous, ticket, guard, held))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _commit(
        self,
        write: Write,
        previous: asyncio.Future[None] | None,
        ticket: asyncio.Future[None],
        guard: Callable[[], None] | None,
        held: list[tuple[Payload, TurnId | None, datetime]] | None,
    ) -> list[Event]:
        try:
            if previous is not None and not previous.done():
                await previous
            if guard is not None:
                guard()
            events = await self.engine.store.write(write)
            for event in events:
                self._enqueue(event)
        finally:
            if held is not None:
                if self._held is held:
                    self._held = None
                for payload, turn_id, at in held:
                    self._enqueue_ephemeral(payload, turn_id, at)
            ticket.set_result(None)
            if self._tail is ticket:
                self._tail = None
        if _changes_settling(write):
            self._notify_changed()
        return events

    def stream(self, payload: Payload, turn_id: str | None) -> None:
        """Emit an ephemeral event (a delta, tool progress): never stored, never waits."""
        tid = TurnId(turn_id) if turn_id else None
        if self._held is not None:
            self._held.append((payload, tid, datetime.now(UTC)))
        else:
            self._enqueue_ephemeral(payload, tid, datetime.now(UTC))

    def _enqueue_ephemeral(self, payload: Payload, turn_id: TurnId | None, at: datetime) -> None:
        seq, sub = self._enqueued
        sub += 1
        event = Event.trusted(EventId(new_id("evt")), self._sid, seq, sub, at, turn_id, payload)
        self._enqueued = (seq, sub)
        self._queue.put_nowait(event)

    def _enqueue(self, event: Event) -> None:
        self._enqueued = (event.seq, event.sub)
        self._queue.put_nowait(event)

    async def _dispatch_loop(self) -> None:
        while True:
            item = await self._queue.get()
            if item is _STOP:
                return
            if isinstance(item, _Attach):
                await self._attach(item)
                continue
            assert isinstance(item, Event)
            try:
                await self.engine.ring.publish(item)
            except Exception as exc:  # the ring is a view; losing it must not stop the session
                log.warning("live ring publish failed for %s: %s", self.session_id, exc)
            self._partial.track(item)
            self._dispatched = (item.seq, item.sub)
            for slot in self._observers:
                self._call_observer(slot, item)

    def _call_observer(self, slot: _ObserverSlot, event: Event) -> None:
        started = time.perf_counter()
        try:
            slot.observer.on_event(self.session_id, event)
        except Exception as exc:
            self._observer_trouble(slot, event, f"raised {type(exc).__name__}: {exc}")
            return
        elapsed = time.perf_counter() - started
        if elapsed > SLOW_OBSERVER_SECONDS:
            self._observer_trouble(slot, event, f"took {elapsed * 1000:.0f} ms in on_event (keep it fast)")

    def _observer_trouble(self, slot: _ObserverSlot, event: Event | None, what: str) -> None:
        # A warning caused by an observer is itself dispatched to that observer; never record trouble
        # about one of those, or a failing observer would feed itself forever.
        if event is not None and isinstance(event.payload, RuntimeNotice) and event.payload.source == _OBSERVER_SOURCE:
            return
        now = time.monotonic()
        if now - slot.last_warning < _WARNING_INTERVAL:
            return
        slot.last_warning = now
        name = type(slot.observer).__name__
        about = f" on a {event.type} event" if event is not None else ""
        notice = RuntimeNotice(
            type="runtime.warning",
            message=f"thread observer {name} {what}{about}; the session went on",
            source=_OBSERVER_SOURCE,
            detail={"observer": name, "event_id": event.id if event else None},
        )
        turn_id = event.turn_id if event is not None else None
        self.spawn(self.commit(Write(self.session_id, events=[NewEvent(notice, turn_id)], touch=False)))

    # -- attach ---------------------------------------------------------------------------------------

    async def subscribe(self, request: Any) -> ReplaySnapshot:
        """Attach a client: each observer's on_subscribe gets a snapshot; resolves once they ran."""
        done: asyncio.Future[ReplaySnapshot] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Attach(request, done))
        return await done

    async def _attach(self, attach: _Attach) -> None:
        try:
            snapshot = await self._snapshot()
        except Exception as exc:
            if not attach.done.done():
                attach.done.set_exception(exc)
            return
        for slot in self._observers:
            try:
                slot.observer.on_subscribe(self.session_id, attach.request, snapshot)
            except Exception as exc:
                self._observer_trouble(slot, None, f"raised {type(exc).__name__} in on_subscribe: {exc}")
        if not attach.done.done():
            attach.done.set_result(snapshot)

    async def _snapshot(self) -> ReplaySnapshot:
        # Runs on the dispatcher between two events: everything up to `position` has been dispatched and
        # nothing after it has, so the snapshot plus later on_event calls cover each event exactly once.
        position = StreamCursor(self.session_id, *self._dispatched)
        store = self.engine.store
        session = await store.get_session(self.session_id)
        history: list[Event] = []
        after = 0
        while after < position.seq:
            page = await store.read_events(
                self.session_id, after_seq=after, limit=1000, conversation_id=session.conversation_id
            )
            history.extend(e for e in page if e.seq <= position.seq)
            if len(page) < 1000:
                break
            after = page[-1].seq
        pending: dict[str, RequestOpened] = {}
        after = 0
        while after < position.seq:
            page = await store.read_events(
                self.session_id,
                after_seq=after,
                limit=1000,
                types=["request.opened", "request.resolved", "request.dismissed"],
            )
            for event in page:
                if event.seq > position.seq:
                    break
                match event.payload:
                    case RequestOpened():
                        pending[event.payload.request_id] = event.payload
                    case RequestResolved() | RequestDismissed():
                        pending.pop(event.payload.request_id, None)
            if len(page) < 1000:
                break
            after = page[-1].seq
        return ReplaySnapshot(
            thread_id=self.session_id,
            position=position,
            history=tuple(history),
            partial=self._partial.snapshot(),
            pending_choices=tuple(pending.values()),
        )

    # -- changes, waiting -----------------------------------------------------------------------------

    def _notify_changed(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_changed(self, timeout: float) -> bool:
        """Wait until a write in this process may have settled the session or unsettled it (its status or its
        inbox changed), or its turn loop ended (or `timeout` seconds); False on timeout."""
        changed = self._changed
        try:
            await asyncio.wait_for(changed.wait(), timeout)
        except TimeoutError:
            return False
        return True

    # -- the turn loop --------------------------------------------------------------------------------

    def kick(self) -> None:
        """Make the driver look for work (new input, answered requests, a turn to continue)."""
        if self.closing:
            return
        self._pending_kick = True
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.create_task(self._turn_loop(), name=f"agentwatch-turns-{self.session_id}")
            self._loop_task.add_done_callback(self._loop_ended)

    async def _turn_loop(self) -> None:
        from agentwatch.runtime.turn import next_plan, run_plan

        while self._pending_kick and not self.closing:
            self._pending_kick = False
            while not self.closing:
                session = await self.engine.store.get_session(self.session_id)
                plan = await next_plan(self.engine, session)
                if plan is None:
                    break
                stopped = await run_plan(self.engine, self, session, plan)
                if stopped:
                    return

    def _loop_ended(self, task: asyncio.Task[None]) -> None:
        self._notify_changed()  # `Engine.wait` also waits for the turn loop

    @property
    def turn_running(self) -> bool:
        """Whether a turn is in progress in this process."""
        return self._loop_task is not None and not self._loop_task.done()

    async def stop_turn(self) -> bool:
        """Cancel the running turn (someone's stop); returns whether there was one."""
        task = self._loop_task
        if task is None or task.done():
            return False
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return True

    # -- lifetime -------------------------------------------------------------------------------------

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run a side job of the driver (a warning to record, ...) that nobody awaits."""
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def close(self) -> None:
        """Cut off the turn without recording a stop (it is continued after the restart), then drain."""
        self.closing = True
        if self._loop_task is not None and not self._loop_task.done():
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._loop_task
        while self._background:  # side jobs and submitted commits (a side job may submit one more)
            await asyncio.gather(*self._background, return_exceptions=True)
        self._queue.put_nowait(_STOP)
        await self._dispatcher


def _changes_settling(write: Write) -> bool:
    """Whether `write` may change what `Engine.wait` waits for: the status or the inbox."""
    if write.inputs_add or write.inputs_take or write.requests_open or write.requests_close:
        return True
    patch = write.session
    return patch is not None and not patch.model_fields_set.isdisjoint(_SETTLING_FIELDS)


_SETTLING_FIELDS = frozenset({"status", "current_turn_id"})


class _Partial:
    """The turn being streamed, as the dispatcher has seen it: pieces are kept in lists (a delta appends one),
    and the `PartialTurn` of a snapshot is built only when one is taken."""

    __slots__ = ("request_index", "text", "thinking", "turn_id")

    def __init__(self) -> None:
        self.turn_id: str | None = None  # None between turns
        self.request_index = 0
        self.text: list[str] = []
        self.thinking: list[str] = []

    def track(self, event: Event) -> None:
        payload = event.payload
        if isinstance(payload, ContentDelta):
            if self.turn_id is not None:
                (self.text if payload.part == "text" else self.thinking).append(payload.delta)
            return
        match payload:
            case TurnStarted():
                self.turn_id = event.turn_id or ""
                self.request_index = 0
                self.text = []
                self.thinking = []
            case TurnEnded():
                self.turn_id = None
                self.text = []
                self.thinking = []
            case CompletionStarted() if self.turn_id is not None:
                self.request_index = payload.request_index
                self.text = []
                self.thinking = []
            case AssistantMessage() if self.turn_id is not None:
                self.text = []
            case ThinkingBlock() if self.turn_id is not None:
                self.thinking = []
            case _:
                pass

    def snapshot(self) -> PartialTurn | None:
        if self.turn_id is None:
            return None
        return PartialTurn(self.turn_id, "".join(self.text), "".join(self.thinking), self.request_index)
