"""Outcomes of the SQLite store's threads handed back to the callers' event loops, a few callers per loop turn.

A writer or reader thread that finished a job posts it to the caller's loop's `Mailbox`; `settle` sorts a
finished group by mailbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from agentwatch.store._sql import Tx
from agentwatch.store.records import Write

__all__ = ["Job", "Mailbox", "settle"]

_FIRST_CHUNK: Final = 16
"""Callers woken per loop turn before the first measurement of what a turn costs."""
_MAX_CHUNK: Final = 32
_TURN_BUDGET_S: Final = 0.010
"""How long the callers woken in one loop turn should keep the loop busy, at most (a target, not a bound:
one caller's step takes what it takes)."""


class Mailbox:
    """Outcomes waiting for the callers on one event loop, handed to them a few at a time.

    A thread that finished work posts the outcomes here; the first post while nothing is pending wakes the
    loop (one `call_soon_threadsafe`, however many outcomes follow: each such wake-up writes to the loop's
    self-pipe and lets the loop's thread take the GIL from the poster). On the loop, the outcomes are then
    handed out in chunks, one chunk per loop turn: each woken caller runs its next step in the turn after its
    chunk, so hundreds of callers woken by one group commit cannot all run in one turn and keep the loop from
    everything else (timers, other tasks) for the sum of their steps. The chunk is sized from the time the
    previous loop turn took, to keep a turn near `_TURN_BUDGET_S`.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)
        self._lock = threading.Lock()
        self._jobs: deque[Job] = deque()
        self._scheduled = False
        self._chunk = _FIRST_CHUNK

    def post(self, jobs: Iterable[Job]) -> None:
        """Queue finished jobs (any thread); wake the loop unless a hand-out is already under way."""
        with self._lock:
            self._jobs.extend(jobs)
            if self._scheduled:
                return
            self._scheduled = True
        loop = self._loop()
        if loop is None:
            return  # the caller's loop is gone: nobody waits
        with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody waits
            loop.call_soon_threadsafe(self._hand_out, None)

    def _hand_out(self, previous_end: float | None) -> None:
        started = time.perf_counter()
        if previous_end is not None:
            # The loop turn since the last chunk: that chunk's callers ran in it, with whatever else was ready
            # (among them, callers of earlier chunks that were woken through another future). Scale the chunk
            # so such a turn takes about the budget, growing it at most twofold per turn.
            turn = started - previous_end
            scale = min(2.0, _TURN_BUDGET_S / turn) if turn > 0 else 2.0
            self._chunk = max(1, min(_MAX_CHUNK, int(self._chunk * scale)))
        jobs = self._jobs
        count = 0
        try:
            while count < self._chunk and jobs:
                jobs.popleft().deliver()
                count += 1
        finally:
            with self._lock:
                more = bool(jobs)
                self._scheduled = more
            if more:
                loop = self._loop()
                if loop is not None:
                    loop.call_soon(self._hand_out, time.perf_counter())


@dataclass(eq=False, slots=True)
class Job:
    fn: Callable[[Tx], Coroutine[Any, Any, Any]]
    mailbox: Mailbox
    future: asyncio.Future[Any]
    write: bool = True
    session_id: str | None = None
    """The one session a write changes (`_write_session`), or None when it may touch anything."""
    appends: Write | None = None
    """An append-only write, which the writer applies together with the others of its group."""
    alone: bool = False
    """Apply it by itself even if it is an append-only write (its group's statement lost the transaction)."""
    outcome: tuple[Any, BaseException | None] = field(default=(None, None))

    def deliver(self) -> None:
        """Set the caller's future (on the caller's event loop)."""
        if self.future.done():
            return  # cancelled by its caller; the write itself stands
        value, error = self.outcome
        if error is None:
            self.future.set_result(value)
        else:
            self.future.set_exception(error)


def settle(jobs: Sequence[Job]) -> None:
    """Hand the outcomes to the callers' event loops (a caller may be gone: then nobody waits)."""
    by_mailbox: dict[Mailbox, list[Job]] = {}
    for job in jobs:
        by_mailbox.setdefault(job.mailbox, []).append(job)
    for mailbox, settled in by_mailbox.items():
        mailbox.post(settled)
