"""Session drivers: the one owner of a session inside an engine.

A driver is the only writer of its session's events in this process, and the emission point:

    commit (durable events) -> live ring -> every ThreadObserver's on_event, in order

Commits are serialized per session, so the order events reach the dispatch queue is their stream order.
One dispatcher task per driver drains the queue; a turn waits for its commits (the durability barrier),
never for dispatch, so a slow watcher cannot slow the watched. An attach (`subscribe`) is a command on the
same queue: its snapshot is taken between two dispatched events, which is what makes delivery exactly-once
relative to attach.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field, replace
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
        self._write_lock = asyncio.Lock()
        self._queue: asyncio.Queue[Event | _Attach | object] = asyncio.Queue()
        self._last_enqueued = StreamCursor(session_id, last_seq, 0)
        self._last_dispatched = self._last_enqueued
        self._partial: PartialTurn | None = None
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
        return await asyncio.shield(self._commit(write))

    async def _commit(self, write: Write) -> list[Event]:
        async with self._write_lock:
            events = await self.engine.store.write(write)
            for event in events:
                self._enqueue(event)
        if write.session is not None or write.inputs_add or write.requests_open or write.requests_close:
            self._notify_changed()
        return events

    def stream(self, payload: Payload, turn_id: str | None) -> Event:
        """Emit an ephemeral event (a delta, tool progress): never stored, never waits."""
        position = self._last_enqueued
        event = Event(
            id=EventId(new_id("evt")),
            session_id=SessionId(self.session_id),
            seq=position.seq,
            sub=position.sub + 1,
            at=datetime.now(UTC),
            turn_id=TurnId(turn_id) if turn_id else None,
            payload=payload,
        )
        self._enqueue(event)
        return event

    def _enqueue(self, event: Event) -> None:
        self._last_enqueued = event.cursor
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
            self._track_partial(item)
            self._last_dispatched = item.cursor
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

    def _track_partial(self, event: Event) -> None:
        payload = event.payload
        partial = self._partial
        match payload:
            case TurnStarted():
                self._partial = PartialTurn(turn_id=event.turn_id or "")
            case TurnEnded():
                self._partial = None
            case CompletionStarted() if partial is not None:
                self._partial = PartialTurn(partial.turn_id, request_index=payload.request_index)
            case ContentDelta() if partial is not None:
                if payload.part == "text":
                    self._partial = replace(partial, text=partial.text + payload.delta)
                else:
                    self._partial = replace(partial, thinking=partial.thinking + payload.delta)
            case AssistantMessage() if partial is not None:
                self._partial = replace(partial, text="")
            case ThinkingBlock() if partial is not None:
                self._partial = replace(partial, thinking="")
            case _:
                pass

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
        position = self._last_dispatched
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
            partial=self._partial,
            pending_choices=tuple(pending.values()),
        )

    # -- changes, waiting -----------------------------------------------------------------------------

    def _notify_changed(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_changed(self, timeout: float) -> bool:
        """Wait until the session row changes in this process (or `timeout` seconds); False on timeout."""
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
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        self._queue.put_nowait(_STOP)
        await self._dispatcher
