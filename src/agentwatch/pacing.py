"""Outcomes handed back to an event loop a few callers per loop turn (`Mailbox`), one mailbox per loop and
source (`Mailboxes`).

Work done on other threads (the SQLite store's writer and readers, sync tools) finishes in bursts: a group
commit settles a hundred writes at once, and a hundred tools that finished while the loop was busy wake
together. Set on the loop all at once, their callers would take their next steps in the same loop turn and
keep the loop from everything else (timers, other tasks) for the sum of them. A thread posts its finished
outcomes to a `Mailbox` of the loop instead; the mailbox hands them out a chunk per loop turn.

A base utility, below the store and the tools that use it: it imports nothing of agentwatch.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Final, Protocol, TypeVar

__all__ = ["Mailbox", "Mailboxes", "Outcome"]

T = TypeVar("T")

_FIRST_CHUNK: Final = 8
"""Callers woken per loop turn before anything is known about what a woken caller costs."""
_MAX_CHUNK: Final = 16
_TURN_BUDGET_S: Final = 0.005
"""CPU time of the loop's thread the callers woken in one loop turn should cost, at most (a target, not a
bound: one caller's step takes what it takes). What a woken caller costs shows only over the turns after
its chunk, while more chunks go out: at 10 ms, with 1,000 turns at once, the chunks grew on callers whose
work had not shown yet, and a wave of loop turns of 10-20 ms followed."""
_SMOOTHING: Final = 0.125
"""Weight of the newest loop turn in the running averages the chunk is sized from (about the last eight)."""
_UP: Final = 0.5
"""Weight of a loop turn dearer than the average: the chunk shrinks faster than it grows."""
_INLINE_BUDGET_S: Final = 0.003
"""Time of the loop's thread that work done for callers on the loop itself (the SQLite store's small reads, and
its writes that nothing else would share a commit with) may take in one loop turn; past it, their work goes to
the threads."""


_bookkeeping: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, int] = weakref.WeakKeyDictionary()
"""Per event loop: the mailboxes' own callbacks waiting among its ready ones (measuring a loop turn, starting the
next turn's budget: see `Mailbox.nothing_else_ready`)."""


class Mailbox:
    """Outcomes waiting for the callers on one event loop, handed to them a few at a time.

    A thread that finished work posts the outcomes here; the first post while nothing is pending wakes the
    loop (one `call_soon_threadsafe`, however many outcomes follow: each such wake-up writes to the loop's
    self-pipe and lets the loop's thread take the GIL from the poster). On the loop, the outcomes are then
    handed out in chunks, one chunk per loop turn: each woken caller runs its next step in the turn after its
    chunk, so hundreds of callers woken by one group commit cannot all run in one turn and keep the loop from
    everything else (timers, other tasks) for the sum of their steps.

    The chunk is sized from what a woken caller costs the loop: the loop's thread's CPU time of the turn after
    each chunk, over the callers woken in that chunk, both averaged over the last several chunks. A caller's
    work does not all fall in the next turn (a turn's step hands on to other tasks, which run in the turns
    after), so a chunk sized from the last turn alone swung between one caller and the most, and a burst of
    large chunks let hundreds of callers run in step. CPU time rather than wall time: a loop whose thread
    waits for a CPU (a busy machine) is not made late by the callers it woke.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)
        self.sees_ready = hasattr(loop, "_ready")
        """Whether `nothing_else_ready` can tell (asyncio's own loop); on any other loop it never counts as idle."""
        self._lock = threading.Lock()
        self._outcomes: deque[Outcome] = deque()
        self._scheduled = False
        self._chunk = _FIRST_CHUNK
        self._turn_cpu = 0.0  # running average of the loop turn's CPU time between two chunks
        self._woken = 0.0  # running average of the callers woken by the chunk before such a turn
        self._last_turn = 0.0  # the CPU time of the last loop turn measured
        self._per_caller = 0.0  # the running averages' CPU time per woken caller
        self._skipped = False  # whether the last hand-out woke nobody, the last turn having left no room
        self._inline_spent = 0.0  # time spent on callers' work on the loop in this loop turn
        self._inline_turn = False  # whether the loop turn after the spending is to reset it

    def post(self, outcomes: Iterable[Outcome], *, here: bool = False) -> None:
        """Queue finished outcomes (any thread; `here`: the loop's own, which needs no wake-up through the loop's
        self-pipe); wake the loop unless a hand-out is already under way."""
        with self._lock:
            self._outcomes.extend(outcomes)
            if self._scheduled:
                return
            self._scheduled = True
        loop = self._loop()
        if loop is None:
            return  # the caller's loop is gone: nobody waits
        with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody waits
            (loop.call_soon if here else loop.call_soon_threadsafe)(self._hand_out, None)

    def handing_out(self) -> bool:
        """Whether outcomes still wait to be handed out: callers of this mailbox are about to resume."""
        return bool(self._outcomes)

    def hand_back(self, value: T) -> asyncio.Future[T]:
        """A future for an outcome already known on the loop's own thread (a read that ran there, a sync tool's
        result), set among the chunks like an outcome a thread posted: such callers resume a chunk per loop turn
        too, instead of all in the turn after theirs."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            self._outcomes.append(_Known(future, value))
            if self._scheduled:
                return future
            self._scheduled = True
        loop.call_soon(self._hand_out, None)
        return future

    def inline_room(self) -> bool:
        """Whether work for a caller may still run on the loop's thread in this loop turn (`spent_inline`)."""
        return self._inline_spent < _INLINE_BUDGET_S

    def nothing_else_ready(self) -> bool:
        """Whether the loop has nothing else to run in this turn: no other callback or task is ready (asyncio's
        own loop, whose queue of ready callbacks is read; any other loop implementation never counts as idle).
        Work that would otherwise wait for company (a commit others could share) may then run at once."""
        loop = self._loop()
        ready = getattr(loop, "_ready", None)
        # The mailboxes' own callbacks (measuring a loop turn, starting the next turn's budget) are bookkeeping.
        return ready is not None and len(ready) <= _bookkeeping.get(loop, 0)  # type: ignore[arg-type]

    def spent_inline(self, seconds: float) -> None:
        """Count `seconds` spent on a caller's work on the loop in this turn."""
        self._inline_spent += seconds
        if not self._inline_turn:
            self._inline_turn = True
            loop = self._loop()
            if loop is not None:
                _keep_books(loop, self._new_inline_turn)

    def _new_inline_turn(self) -> None:
        self._done_bookkeeping()
        self._inline_spent = 0.0
        self._inline_turn = False

    def _hand_out(self, previous: tuple[float, int] | None) -> None:
        if previous is not None:
            # The loop turn since the last chunk (its CPU time, the callers that chunk woke): those callers ran
            # in it, with whatever else was ready (among them, callers of earlier chunks going on).
            cpu, woken = previous
            self._sized(time.thread_time() - cpu, woken)
        outcomes = self._outcomes
        count = 0
        limit = self._room()
        try:
            while count < limit and outcomes:
                outcomes.popleft().deliver()
                count += 1
        finally:
            with self._lock:
                more = bool(outcomes)
                self._scheduled = more
            loop = self._loop()
            if loop is not None and (more or count):
                # The next loop turn is measured either way: by the next chunk, or, when this one emptied the
                # mailbox, on its own. Groups that each fit in one chunk would otherwise never be measured,
                # and a chunk grown on cheap callers would go on waking dear ones as many at a time.
                measured = (time.thread_time(), count)
                if more:
                    loop.call_soon(self._hand_out, measured)
                else:
                    _keep_books(loop, self._measure, measured)

    def _measure(self, previous: tuple[float, int]) -> None:
        self._done_bookkeeping()
        cpu, woken = previous
        self._sized(time.thread_time() - cpu, woken)

    def _done_bookkeeping(self) -> None:
        loop = self._loop()
        if loop is not None:
            _bookkeeping[loop] -= 1

    def _sized(self, turn_cpu: float, woken: int) -> None:
        """Average in one more loop turn and size the chunk so that a turn costs about the budget."""
        self._last_turn = turn_cpu
        if not woken and self._woken:
            return  # a turn left to the callers in flight says nothing about what a woken caller costs
        if not self._woken:  # the first measurement: nothing to average with
            self._turn_cpu, self._woken = turn_cpu, float(max(woken, 1))
        else:
            # A turn dearer than the average counts at once; a cheaper one only bit by bit. A caller's work spans
            # several turns after it is woken, so a chunk that grew on cheap callers shows its cost only a few
            # turns later: by then too many dear callers (a turn's model step, its tools) may have been woken.
            weight = _UP if turn_cpu > self._turn_cpu else _SMOOTHING
            self._turn_cpu += (turn_cpu - self._turn_cpu) * weight
            self._woken += (woken - self._woken) * _SMOOTHING
        per_caller = self._per_caller = self._turn_cpu / max(self._woken, 1.0)
        fits = int(_TURN_BUDGET_S / per_caller) if per_caller > 0 else _MAX_CHUNK
        # Shrinks at once, grows by one a turn: for the same reason, a larger chunk is tried a little at a time.
        self._chunk = max(1, min(_MAX_CHUNK, fits, self._chunk + 1))

    def _room(self) -> int:
        """The callers to wake in this loop turn: the chunk, or as many as the budget has room for beside what
        the last loop turn cost; none when it has no room, but never in two loop turns in a row.

        The callers woken by earlier chunks go on running in the turns after (a model's stream takes a loop
        turn per event), so a loop turn holds their steps as well as the new chunk's. The averages the chunk is
        sized from follow that load a few turns late: without this look at the last turn, chunks went on while
        the callers already in flight filled the turns, and those turns grew to several times the budget."""
        if self._per_caller <= 0:
            return self._chunk
        room = int((_TURN_BUDGET_S - self._last_turn) / self._per_caller)
        if room <= 0 and not self._skipped:
            self._skipped = True  # the callers in flight take this turn; the next one wakes one at least
            return 0
        self._skipped = False
        return max(1, min(self._chunk, room))


def _keep_books(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: Any) -> None:
    """Schedule a mailbox's own `callback` on `loop`, counted as bookkeeping until it runs (it calls
    `Mailbox._done_bookkeeping` first)."""
    _bookkeeping[loop] = _bookkeeping.get(loop, 0) + 1
    loop.call_soon(callback, *args)


class Outcome(Protocol):
    """A finished piece of work waiting for its caller on the loop."""

    def deliver(self) -> None:
        """Resume the caller (on the loop's thread): set its future."""


class _Known:
    """An outcome known on the loop's own thread (`Mailbox.hand_back`)."""

    __slots__ = ("future", "value")

    def __init__(self, future: asyncio.Future[Any], value: Any) -> None:
        self.future = future
        self.value = value

    def deliver(self) -> None:
        if not self.future.done():  # cancelled by its caller meanwhile
            self.future.set_result(self.value)


class Mailboxes:
    """One `Mailbox` per event loop, for one source of outcomes (a store, the sync tools).

    Each source keeps its own: a mailbox sizes its chunks from what its woken callers cost the loop, which is
    only a good guess for callers of one kind. Shared by the store's writes and the sync tools (whose callers
    go on to a model request), one mailbox averaged cheap and dear callers and woke the dear ones in larger
    chunks: the longest stall of the loop with 1,000 turns at once went from 32-40 ms to 46-67 ms (measured).
    """

    def __init__(self) -> None:
        self._mailboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Mailbox] = weakref.WeakKeyDictionary()
        self._recent: tuple[weakref.ref[asyncio.AbstractEventLoop], Mailbox] | None = None
        """The loop of the latest call and its mailbox (a weak reference: nothing here keeps a loop alive)."""
        self._lock = threading.Lock()

    def of(self, loop: asyncio.AbstractEventLoop) -> Mailbox:
        """The mailbox of `loop`, made at its first use and forgotten with the loop."""
        recent = self._recent
        if recent is not None and recent[0]() is loop:  # the loop of the previous call, nearly always
            return recent[1]
        mailbox = self._mailboxes.get(loop)
        if mailbox is None:
            with self._lock:
                mailbox = self._mailboxes.setdefault(loop, Mailbox(loop))
        self._recent = (weakref.ref(loop), mailbox)
        return mailbox
