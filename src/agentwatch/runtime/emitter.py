"""The session emitter: everything between a session's payloads and the outside world.

One `SessionEmitter` per session in an engine is the only writer of that session's events in this process,
and the one emission point:

    commit (durable events) -> live ring -> every ThreadObserver's on_event -> subscribers (through the ring)

- **Ordered, pipelined commits.** Writes are applied one after another, in the order they are submitted.
  `submit` returns at once (the caller goes on while the store writes); `commit` waits. Writes of the running
  turn that are waiting their turn together are applied as one store write (group commit within a session):
  they were going to be written back to back anyway, and the turn treats its writes as one chain.
- **The turn's first failure, in one place.** A write of the turn (`turn=True`) that fails is remembered;
  every later write of the turn is then skipped and fails with that same error, until the turn reads it
  (`end_turn`). So a pipelined commit that failed surfaces at the turn's next waiting commit, and nothing the
  turn did after it reaches the log.
- **The durability barrier.** `barrier()` returns once every write submitted before it is durable (raising
  the turn's failure); a waiting `commit` is a barrier too. The turn waits at these points before a tool
  runs, never for dispatch, so a slow watcher cannot slow the watched.
- **Stream order.** Ephemeral payloads (`stream`: deltas, tool progress) are never stored; one streamed while
  a write is in flight is handed out right after that write's events, because it was emitted after it. So
  watchers see every event in the order it was emitted, and every durable event only once it is stored.
- **The conversation, as written.** The emitter sees every write of the session in this engine, so it keeps
  the current conversation's model messages once a turn has read them (`history`), and a turn does not read
  the whole conversation back from the store each time. It trusts what it keeps only while nothing else wrote
  to the session (the session's `last_seq` is the one it knows); otherwise the turn reads the store again.
- **Attach.** Events are handed out in order, by one dispatcher task; an attach (`subscribe`) is a command in
  the same queue, so its snapshot is taken between two dispatched events, which makes delivery exactly-once
  relative to attach. On an in-memory ring, an event with nothing queued ahead of it is handed out at once by
  whoever emitted it (no task switch per delta); while anything is queued or an attach is served, events
  queue behind it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

from pydantic import JsonValue

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
from agentwatch.live import LiveRing
from agentwatch.live.memory import MemoryRing
from agentwatch.runtime.thread_observer import ObserverFactory, PartialTurn, ReplaySnapshot, ThreadObserver
from agentwatch.store import SessionPatch, SessionRecord, Store, Write

__all__ = [
    "GROUP_COMMIT_SECONDS",
    "SLOW_OBSERVER_SECONDS",
    "STREAM_TOUCH_SECONDS",
    "SessionEmitter",
    "stream_touch_seconds",
]

log = logging.getLogger(__name__)

GROUP_COMMIT_SECONDS = 0.02
"""How long the turn defers the opening of a model request (with the results of the tools that just ran) for
the response to share its commit. A model that answers within it costs one commit per request instead of
two; a slower one sees its request stored this much later, before any of its streamed pieces are handed out
(they wait behind the write). At 10 ms, a fast model's responses on a busy machine (its loop's thread
waiting for a CPU) missed it one request in six: each miss costs a commit, and the response's own commit
then waits behind the opening's."""
SLOW_OBSERVER_SECONDS = 0.1
"""An on_event call slower than this is recorded as a warning (at most once a minute per observer)."""
_WARNING_INTERVAL = 60.0
STREAM_TOUCH_SECONDS = 5.0
"""While only ephemeral events flow (a long streamed answer or thinking), the session's activity time is
moved on at most this often, or more often under a short stuck threshold (`stream_touch_seconds`): a session
that streams is active, so it never reads `stuck`."""
_TOUCHES_PER_THRESHOLD = 4


def stream_touch_seconds(stuck_after: float) -> float:
    """How often a streaming session's activity time is moved on under the stuck threshold `stuck_after`:
    `STREAM_TOUCH_SECONDS`, or a quarter of the threshold when that is shorter. The activity time lags the
    stream by this much, plus the gap between two streamed events and the write, so at 5 s a threshold of 5 s
    or less read a healthy streaming session `stuck`."""
    return min(STREAM_TOUCH_SECONDS, stuck_after / _TOUCHES_PER_THRESHOLD)


_OBSERVER_SOURCE = "thread_observer"
_OBSERVER_FAILURES = (Exception, asyncio.CancelledError)
"""What an observer's hook (or its factory) may raise and have recorded, the session going on: its hooks are
plain calls, which no cancellation reaches, so a `CancelledError` out of one is its own (the `result()` of a
cancelled future), not the session's, and must not end the turn or the dispatcher as a cancellation would."""

_Ephemeral = tuple[Payload, TurnId | None, datetime]


@dataclass(slots=True, eq=False)
class _Pending:
    """A submitted write, until its events are handed to the dispatcher."""

    write: Write | None
    """None for a barrier's marker: nothing to write, resolved once every write before it is over."""
    done: asyncio.Future[list[Event]]
    turn: bool
    turn_no: int = 0
    """Which turn of this emitter a `turn` write belongs to (its failure is that turn's only)."""
    held: list[_Ephemeral] = field(default_factory=list)
    """Ephemeral payloads streamed after this write was submitted (and before the next one was)."""
    rides: bool = False
    """A note that is not the turn's work but may share the store write of the writes after it."""


@dataclass(slots=True)
class _Attach:
    request: Any
    done: asyncio.Future[ReplaySnapshot]


@dataclass(slots=True)
class _Gap:
    """Events another engine wrote to the session between two of this emitter's (seq in `after`..`before`,
    both left out): handed out from the store before the next of its own (see `_fill`)."""

    after: int
    before: int


@dataclass(slots=True)
class _ObserverSlot:
    observer: ThreadObserver[Any]
    last_warning: float = -_WARNING_INTERVAL
    others: bool = True
    """It is given the events other engines wrote too (not when it says `own_events_only`)."""

    def __post_init__(self) -> None:
        self.others = not getattr(self.observer, "own_events_only", False)


class SessionEmitter:
    """Commits, orders and hands out one session's events; see the module docs."""

    def __init__(
        self,
        session_id: str,
        last_seq: int,
        *,
        store: Store,
        ring: LiveRing,
        observers: Iterable[ThreadObserver[Any]] = (),
        on_settling: Callable[[], None] | None = None,
    ) -> None:
        self.session_id = session_id
        self._sid = SessionId(session_id)
        self._store = store
        self._ring = ring
        self._observers = [_ObserverSlot(o) for o in observers]
        self._on_settling = on_settling
        # Writes submitted and not yet applied, oldest first; the writer task applies them while any wait.
        self._writes: deque[_Pending] = deque()
        self._writer: asyncio.Task[None] | None = None
        # The newest submitted write whose events are not handed out yet: ephemeral payloads wait behind it.
        self._tail: _Pending | None = None
        self._failure: BaseException | None = None
        self._turn_no = 0  # counts `end_turn` calls: a write of an ended turn neither meets nor sets a failure
        self._timer: asyncio.TimerHandle | None = None  # starts the writer for a deferred write
        # How many of the last submitted writes are deferred and wait for their companion: the writer leaves
        # them queued, even when it is running, until a write that is not deferred, the timer, a barrier or a
        # flush lets them go.
        self._held = 0
        # The newest durable seq this emitter wrote (or the session's when it was made), and the messages of
        # the current conversation as far as this emitter knows them (None: unknown, read the store).
        self._last_seq = last_seq
        self._messages: list[JsonValue] | None = None
        self._messages_of: str | None = None
        # Events and attaches waiting to be handed out, and the task that hands them out (only while any wait).
        self._queue: deque[Event | _Attach | _Gap] = deque()
        self._dispatcher: asyncio.Task[None] | None = None
        self._enqueued = (last_seq, 0)  # (seq, sub) of the last event queued for dispatch
        self._dispatched = self._enqueued  # ... and of the last one dispatched
        self._partial = _Partial()
        # An in-memory ring publishes with a plain call (`publish_now`), at once; other rings are awaited.
        self._inline = ring if isinstance(ring, MemoryRing) else None
        self._busy = False  # an event or an attach is being handed out right now
        self._touched = time.monotonic()  # when a write last moved the session's activity time on
        self.touch_seconds = STREAM_TOUCH_SECONDS
        """How often streaming moves the session's activity time on (each turn sets it from its role's stuck
        threshold: `stream_touch_seconds`)."""
        self._ring_trouble = _trouble_of(ring)

    def add_observer(self, observer: ThreadObserver[Any]) -> None:
        """Attach one more observer instance; it receives events from the next one dispatched."""
        self._observers.append(_ObserverSlot(observer))

    def add_observer_from(self, factory: ObserverFactory) -> None:
        """Attach the observer `factory` makes for this session. A factory that raises leaves the session
        without that observer, and says so on the session (a `runtime.warning`), as an observer that raises
        does: the session goes on."""
        try:
            observer = factory(self.session_id)
        except _OBSERVER_FAILURES as exc:
            name = getattr(factory, "__qualname__", type(factory).__name__)
            self._warn(
                f"thread observer factory {name} raised {_raised(exc)}; the session went on without its observer",
                None,
                {"factory": name},
            )
            return
        self.add_observer(observer)

    # -- writing --------------------------------------------------------------------------------------

    def submit(
        self, write: Write, *, turn: bool = False, defer: float = 0.0, rides: bool = False
    ) -> asyncio.Future[list[Event]]:
        """Start committing `write` after every write submitted before it; returns at once.

        The future resolves with the stored events once they are durable and queued for dispatch, or fails
        with the store's error; the write runs to its end whoever awaits it, and `close` waits for it. With
        `turn`, the write belongs to the running turn: once a write of the turn failed, it is skipped and
        fails with that first failure (see `end_turn`). With `defer` seconds (`math.inf`: no limit), the write
        waits that long at most for the next write submitted without `defer` (or a barrier), even while earlier
        writes are being written, and goes to the store with it, in one commit; a write deferred without a
        limit takes the deferred writes before it along (they wait for the same next write, so they all share
        its commit).
        """
        done: asyncio.Future[list[Event]] = asyncio.get_running_loop().create_future()
        if write.touch:
            self._touched = time.monotonic()
        pending = _Pending(write, done, turn, self._turn_no, rides=rides)
        self._writes.append(pending)
        self._tail = pending
        if defer <= 0:
            self._start_writer()
            return done
        self._held += 1
        if defer == math.inf:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(defer, self._start_writer)
        return done

    async def commit(self, write: Write, *, turn: bool = False, rides: bool = False) -> list[Event]:
        """Make `write` durable after every earlier write, then hand its events out; returns them as stored.

        The write runs to its end even when the caller is cancelled (a stop): a write that reached the store
        must also reach the watchers, or they would miss events the log has. With `turn`, as `submit`; its
        success means every earlier write of the turn is durable too. With `rides`, a note beside the turn's
        work (an observer's state): it waits up to `GROUP_COMMIT_SECONDS` for the next write and shares its
        commit, as long as the running turn has not failed (see `_write_loop`).
        """
        if rides:
            return await asyncio.shield(self.submit(write, defer=GROUP_COMMIT_SECONDS, rides=True))
        return await asyncio.shield(self.submit(write, turn=turn))

    async def barrier(self) -> None:
        """Wait until every write submitted so far is over; raise the turn's first failure, if any."""
        if self._writes or self._writer is not None:
            marker: asyncio.Future[list[Event]] = asyncio.get_running_loop().create_future()
            self._writes.append(_Pending(None, marker, turn=False))
            self._start_writer()
            await asyncio.shield(marker)
        if self._failure is not None:
            raise self._failure

    def end_turn(self) -> BaseException | None:
        """The turn is over: send any deferred write on its way, forget (and return) the turn's first failure,
        so the next turn's writes go through."""
        self.flush()
        failure, self._failure = self._failure, None
        self._turn_no += 1
        return failure

    def _start_writer(self) -> None:
        self._held = 0  # every write queued may go now
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._writer is None:
            self._writer = asyncio.create_task(self._write_loop(), name=f"agentwatch-writes-{self.session_id}")

    async def _write_loop(self) -> None:
        writes = self._writes
        try:
            while len(writes) > self._held:
                batch = [writes.popleft()]
                if batch[0].write is None:  # a barrier: every write before it is over
                    if not batch[0].done.done():
                        batch[0].done.set_result([])
                    continue
                if self._note_joins(batch[0]):
                    # A note takes the notes after it along, then the next write; the turn's writes that follow
                    # that one join below.
                    while len(writes) > self._held and self._note_joins(writes[0]):
                        batch.append(writes.popleft())
                    if len(writes) > self._held and _rides_along(writes[0]):
                        batch.append(writes.popleft())
                if _mergeable(batch[-1]):
                    turn_no = batch[-1].turn_no
                    while len(writes) > self._held and (
                        (_mergeable(writes[0]) and writes[0].turn_no == turn_no) or self._note_joins(writes[0])
                    ):
                        # A note made while the turn's writes queue (an observer's state between a model
                        # request's opening and its response) joins them instead of splitting their commit.
                        batch.append(writes.popleft())
                await self._apply(batch)
        finally:
            self._writer = None

    def _note_joins(self, pending: _Pending) -> bool:
        """Whether `pending` is a note that may share the commit of the writes around it: not into a turn that
        already failed, which would fail the note with it."""
        return pending.rides and self._failure is None and _rides_along(pending)

    async def _apply(self, batch: list[_Pending]) -> None:
        turn = any(p.turn and p.turn_no == self._turn_no for p in batch)
        try:
            if turn and self._failure is not None:
                raise self._failure
            writes = [p.write for p in batch if p.write is not None]
            events = await self._store.write(writes[0] if len(writes) == 1 else _merged(writes))
        except BaseException as error:
            if turn and self._failure is None:
                self._failure = error
            for pending in batch:
                self._hand_out(pending, (), error)
            if not isinstance(error, Exception):
                self._abandon(error)
                raise
            return
        self._track_messages(writes, events)
        start = 0
        settling = False
        for pending in batch:
            assert pending.write is not None
            count = len(pending.write.events)
            self._hand_out(pending, events[start : start + count], None)
            start += count
            settling = settling or _changes_settling(pending.write)
        if settling and self._on_settling is not None:
            self._on_settling()

    def _track_messages(self, writes: Sequence[Write], events: Sequence[Event]) -> None:
        if events:
            if events[0].seq != self._last_seq + 1:
                self._messages = None  # someone else wrote in between: what is kept may miss their messages
            self._last_seq = events[-1].seq
        if self._messages is None:
            return
        for write in writes:
            if write.new_conversation is not None:
                self._messages = None  # a new conversation (its id is the store's): read it when needed
                return
            self._messages.extend(write.messages)

    def history(self, session: SessionRecord) -> list[JsonValue] | None:
        """The messages of `session`'s current conversation (a copy), when this emitter knows them for sure:
        it read or wrote all of them and nothing else wrote to the session since `session` was read. None
        when the turn must read them from the store (then `remember_history`)."""
        if self._messages is None or self._messages_of != session.conversation_id or self._writes:
            return None
        if self._writer is not None or session.last_seq != self._last_seq:
            return None
        return list(self._messages)

    def remember_history(self, session: SessionRecord, messages: Sequence[JsonValue]) -> None:
        """Keep the messages a turn read from the store for `session` (read after `session` was)."""
        self._messages = list(messages)
        self._messages_of = session.conversation_id
        self._last_seq = session.last_seq

    def _hand_out(self, pending: _Pending, events: Sequence[Event], error: BaseException | None) -> None:
        if events and events[0].seq > self._enqueued[0] + 1 and self._wants_others:  # another engine wrote between
            self._queue_up(_Gap(self._enqueued[0], events[0].seq))
        for event in events:
            self._enqueued = (event.seq, event.sub)
            self._deliver(event)
        for payload, turn_id, at in pending.held:
            self._enqueue_ephemeral(payload, turn_id, at)
        if self._tail is pending:
            self._tail = None
        done = pending.done
        if done.done():
            return
        if error is None:
            done.set_result(list(events))
        elif isinstance(error, asyncio.CancelledError):
            done.cancel()
        else:
            done.set_exception(error)
            done.exception()  # retrieved here: a pipelined write's failure is reported by the turn, not lost

    def _abandon(self, error: BaseException) -> None:
        # The writer itself was cancelled (the loop is going away): nothing queued will be written.
        self._held = 0
        while self._writes:
            self._hand_out(self._writes.popleft(), (), error)

    # -- ephemeral events -----------------------------------------------------------------------------

    def stream(self, payload: Payload, turn_id: str | None) -> None:
        """Emit an ephemeral event (a delta, tool progress): never stored, never waits (but for the activity
        time it moves on now and then: `touch_seconds`)."""
        if time.monotonic() - self._touched > self.touch_seconds:
            tail = self._tail
            self.submit(Write(self.session_id, touch=True)).add_done_callback(partial(_log_failure, "its activity"))
            self._tail = tail  # it holds no event: what streams next need not wait for it
        tid = TurnId(turn_id) if turn_id else None
        tail = self._tail
        if tail is not None:
            tail.held.append((payload, tid, datetime.now(UTC)))
        else:
            self._enqueue_ephemeral(payload, tid, datetime.now(UTC))

    def _enqueue_ephemeral(self, payload: Payload, turn_id: TurnId | None, at: datetime) -> None:
        seq, sub = self._enqueued
        sub += 1
        event = Event.trusted(EventId(new_id("evt")), self._sid, seq, sub, at, turn_id, payload)
        self._enqueued = (seq, sub)
        self._deliver(event)

    # -- dispatch -------------------------------------------------------------------------------------

    def _deliver(self, event: Event) -> None:
        # On an in-memory ring, with nothing waiting ahead of it (no queued event, no attach being served),
        # the event is handed out right here: the same order, without a task switch per event.
        inline = self._inline
        if inline is not None and not self._busy and not self._queue:
            self._busy = True
            try:
                self._publish_now(inline, event)
                self._after_publish(event)
            finally:
                self._busy = False
        else:
            self._queue_up(event)

    def _queue_up(self, item: Event | _Attach | _Gap) -> None:
        self._queue.append(item)
        if self._dispatcher is None:
            self._dispatcher = asyncio.create_task(self._dispatch_loop(), name=f"agentwatch-dispatch-{self.session_id}")

    def _publish_now(self, ring: MemoryRing, event: Event) -> None:
        try:
            ring.publish_now(event)
        except Exception as exc:  # the ring is a view; losing it must not stop the session
            self._ring_trouble.report(self.session_id, exc)

    def _after_publish(self, event: Event, *, other: bool = False) -> None:
        self._partial.track(event)
        self._dispatched = (event.seq, event.sub)
        for slot in self._observers:
            if slot.others or not other:
                self._call_observer(slot, event)

    @property
    def _wants_others(self) -> bool:
        """Whether an observer is to be given what other engines wrote (else nothing is read back for it)."""
        return any(slot.others for slot in self._observers)

    async def _fill(self, before: int) -> None:
        """Hand the observers, from the store, the events other engines wrote after the last one dispatched and
        before seq `before` (an answer given through another process, a turn another engine ran): each event
        of the session reaches them once, in order. Not to the ring: their writer published them there."""
        after = self._dispatched[0]
        try:
            while after < before - 1:
                page = await self._store.read_events(self.session_id, after_seq=after, limit=1000)
                for event in page:
                    if event.seq >= before:
                        return
                    self._after_publish(event, other=True)
                if len(page) < 1000:
                    return
                after = page[-1].seq
        except Exception as exc:  # the observers miss them; the session goes on
            log.warning("could not hand out the events another engine wrote to %s: %s", self.session_id, exc)

    async def _dispatch_loop(self) -> None:
        queue = self._queue
        try:
            while queue:
                item = queue.popleft()
                self._busy = True
                try:
                    if isinstance(item, _Attach):
                        await self._attach(item)
                        continue
                    if isinstance(item, _Gap):
                        await self._fill(item.before)
                        continue
                    if self._inline is not None:
                        self._publish_now(self._inline, item)
                    else:
                        try:
                            await self._ring.publish(item)
                        except Exception as exc:  # the ring is a view; losing it must not stop the session
                            self._ring_trouble.report(self.session_id, exc)
                    self._after_publish(item)
                finally:
                    self._busy = False
        finally:
            self._dispatcher = None

    def _call_observer(self, slot: _ObserverSlot, event: Event) -> None:
        started = time.perf_counter()
        try:
            slot.observer.on_event(self.session_id, event)
        except _OBSERVER_FAILURES as exc:
            self._observer_trouble(slot, event, f"raised {_raised(exc)}")
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
        self._warn(
            f"thread observer {name} {what}{about}; the session went on",
            event.turn_id if event is not None else None,
            {"observer": name, "event_id": event.id if event else None},
        )

    def _warn(self, message: str, turn_id: TurnId | None, detail: dict[str, JsonValue]) -> None:
        """Record a `runtime.warning` about an observer on the session (without waiting for it)."""
        notice = RuntimeNotice(type="runtime.warning", message=message, source=_OBSERVER_SOURCE, detail=detail)
        written = self.submit(Write(self.session_id, events=[NewEvent(notice, turn_id)], touch=False))
        written.add_done_callback(partial(_log_failure, "a thread observer's trouble"))

    # -- attach ---------------------------------------------------------------------------------------

    async def subscribe(self, request: Any) -> ReplaySnapshot:
        """Attach a client: each observer's on_subscribe gets a snapshot; resolves once they ran."""
        done: asyncio.Future[ReplaySnapshot] = asyncio.get_running_loop().create_future()
        self._queue_up(_Attach(request, done))
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
            except _OBSERVER_FAILURES as exc:
                self._observer_trouble(slot, None, f"raised {_raised(exc)} in on_subscribe")
        if not attach.done.done():
            attach.done.set_result(snapshot)

    async def _snapshot(self) -> ReplaySnapshot:
        # Runs on the dispatcher between two events: everything up to `position` has been dispatched and
        # nothing after it has, so the snapshot plus later on_event calls cover each event exactly once.
        position = StreamCursor(self.session_id, *self._dispatched)
        store = self._store
        session = await store.get_session(self.session_id)
        if session.last_seq > position.seq and not (self._queue or self._writes or self._writer):
            # Written elsewhere (a turn another engine runs), and nothing of this emitter is on its way (looked at
            # after the read, so no write of its own committed meanwhile): the observers are given those events,
            # and the snapshot is of the store as it is.
            if self._wants_others:
                await self._fill(session.last_seq + 1)
            self._dispatched = max(self._dispatched, (session.last_seq, 0))
            self._enqueued = max(self._enqueued, self._dispatched)
            position = StreamCursor(self.session_id, *self._dispatched)
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

    # -- lifetime -------------------------------------------------------------------------------------

    def flush(self) -> None:
        """Send a deferred write on its way now."""
        if self._writes:
            self._start_writer()

    @property
    def idle(self) -> bool:
        """Whether nothing is submitted, written, deferred, queued for dispatch or being handed out."""
        return not (self._writes or self._writer or self._timer or self._queue or self._dispatcher or self._busy)

    async def drain(self) -> None:
        """Wait until every submitted write is over (a write may submit one more: an observer's warning)."""
        self.flush()
        while self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)

    async def close(self) -> None:
        """Write what was submitted and hand out every event (handing one out may record a warning)."""
        await self.drain()
        while self._dispatcher is not None:
            await asyncio.gather(self._dispatcher, return_exceptions=True)
            await self.drain()


class _RingTrouble:
    """Warns that publishing to a live ring failed, at most once per `_WARNING_INTERVAL`: a ring that is down
    fails every event (every delta) of every session, and one line a minute says as much as thousands."""

    def __init__(self) -> None:
        self._last = -math.inf
        self._quiet = 0

    def report(self, session_id: str, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._last < _WARNING_INTERVAL:
            self._quiet += 1
            return
        more = f" ({self._quiet} more failure(s) since the last warning)" if self._quiet else ""
        log.warning(
            "live ring publish failed for %s: %s%s; watchers miss live events until it is back (the store has the "
            "durable ones)",
            session_id,
            exc,
            more,
        )
        self._last, self._quiet = now, 0


_RING_TROUBLE: weakref.WeakKeyDictionary[LiveRing, _RingTrouble] = weakref.WeakKeyDictionary()
"""One `_RingTrouble` per live ring (an engine's): the sessions of one engine share its warnings."""


def _trouble_of(ring: LiveRing) -> _RingTrouble:
    trouble = _RING_TROUBLE.get(ring)
    if trouble is None:
        trouble = _RING_TROUBLE[ring] = _RingTrouble()
    return trouble


def _raised(exc: BaseException) -> str:
    """What an observer raised, as a warning names it: its class, and its message when it has one."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _log_failure(what: str, future: asyncio.Future[list[Event]]) -> None:
    if not future.cancelled() and (error := future.exception()) is not None:
        log.warning("could not record %s: %s", what, error)


def _mergeable(pending: _Pending) -> bool:
    """Whether a write may share one store write with the writes of the turn around it."""
    return pending.turn and _rides_along(pending)


def _rides_along(pending: _Pending) -> bool:
    """Whether a write may share one store write with a note before it: a write (not a barrier) that
    neither expects a status or an unheld session, deletes the session, starts a conversation, nor claims the
    lease (the store checks those against its own state)."""
    write = pending.write
    return (
        write is not None
        and write.expect_status is None
        and not write.expect_unheld
        and write.delete_until is None
        and write.new_conversation is None
        and write.claim is None
    )


_MERGED_APART = frozenset(
    {"session_id", "session", "touch", "expect_status", "expect_unheld", "delete_until", "new_conversation", "claim"}
)
_CONCATENATED = tuple(f.name for f in dataclasses.fields(Write) if f.name not in _MERGED_APART)


def _merged(writes: Sequence[Write]) -> Write:
    """Writes of one turn, back to back, as one write: the same rows, in the same order, committed at once.
    (Only writes without `expect_status`, `expect_unheld`, `delete_until`, `new_conversation` and `claim` are
    merged; every other field is a list.)"""
    patch: dict[str, Any] = {}
    for write in writes:
        if write.session is not None:
            patch.update(write.session.changes())
    lists: dict[str, Any] = {name: [item for w in writes for item in getattr(w, name)] for name in _CONCATENATED}
    return Write(
        writes[0].session_id,
        session=SessionPatch.model_construct(**patch) if patch else None,
        touch=any(w.touch for w in writes),
        **lists,
    )


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
