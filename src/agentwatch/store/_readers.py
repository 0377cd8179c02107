"""The SQLite store's readers: connections that WAL lets read while the writer writes.

A read runs in one transaction of its own (so a read made of several queries sees one snapshot). Most reads
are small (a page, a tail: bounded by their LIMIT) and cost less than handing them to a thread and back, so a
read first runs on the caller's own thread, on a connection kept for that, within a budget of CPU time (and a
larger one of wall time, for a read that waits on the disk): SQLite's progress handler interrupts it once a
budget is spent, and it then runs again on a reader thread, whose outcome goes back through the caller's
loop's `Mailbox` like a write's (so a burst of finished reads wakes its callers a few per loop turn too). A
read that overran its budget sends the next reads made by the same code straight to the threads for a while
(until one of them takes less than the budget there). A caller whose read ran on its thread still yields to
its loop once, as it would have waiting for a thread, so a task reading page after page does not hold the
loop.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import CodeType
from typing import Any, Final, TypeVar, cast

from agentwatch.pacing import Mailbox
from agentwatch.store._jobs import Job
from agentwatch.store._sql import Tx
from agentwatch.store._sqlite_connection import SqliteTx, as_store_error, connect, drive

__all__ = ["Readers"]

T = TypeVar("T")

_READERS: Final = 2
_INLINE_BUDGET_S: Final = 0.002
"""The CPU time a read may take on its caller's thread (the event loop's) before it moves to a reader thread
(counted once it has taken as much wall time: see `_progress`).
CPU time: on a busy machine a read is often descheduled for longer than it runs, which does not make it a
read to send elsewhere."""
_INLINE_WALL_S: Final = 0.020
"""The wall time a read may hold its caller's thread, whatever its CPU time (it may be waiting on the disk)."""
_PROGRESS_STEPS: Final = 2000
"""SQLite virtual-machine steps between two looks at the clock during a read on the caller's thread."""
_OVERRUN_SKIPS: Final = 32
"""Reads of the same code sent straight to the threads after one overran its budget on the caller's thread."""
_NEVER: Final = float("inf")


class Readers:
    """The reader connections of one database file: one for reads on the caller's thread, one per thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pool = ThreadPoolExecutor(_READERS, thread_name_prefix="agentwatch-sqlite-reader")
        self._connections: list[sqlite3.Connection] = []
        self._local = threading.local()
        self._lock = threading.Lock()
        self._inline: sqlite3.Connection | None = None
        self._inline_lock = threading.Lock()
        """Held while a read runs on its caller's thread; a caller finding it taken reads on a thread."""
        self._deadline = _NEVER
        """When the read under way on the caller's thread may have spent its CPU budget (wall time: CPU time
        never runs ahead of it, so the clock of the thread is read only past this)."""
        self._cpu_deadline = _NEVER
        """The thread's CPU time past which that read has spent its budget (set once its wall time has)."""
        self._wall_deadline = _NEVER
        self._overran = False
        self._skips: dict[CodeType | None, int] = {}
        self._closed = False

    async def read(self, fn: Callable[[Tx], Awaitable[T]], mailbox: Mailbox) -> T:
        code: CodeType | None = getattr(fn, "__code__", None)
        skips = self._skips.get(code)
        if skips:
            self._skips[code] = skips - 1
        elif mailbox.inline_room() and self._inline_lock.acquire(blocking=False):
            started = time.perf_counter()
            try:
                done, value = self._read_inline(cast(Callable[[Tx], Coroutine[Any, Any, T]], fn), code)
            finally:
                self._inline_lock.release()
                mailbox.spent_inline(time.perf_counter() - started)
            if done:
                return await mailbox.hand_back(value)  # resumed among the chunks, as a thread's read would be
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        job = Job(cast(Callable[[Tx], Coroutine[Any, Any, Any]], fn), mailbox, future, write=False)
        self._pool.submit(self._run, job)
        return await future

    def _read_inline(self, fn: Callable[[Tx], Coroutine[Any, Any, T]], code: CodeType | None) -> tuple[bool, T]:
        """(True, the outcome) of `fn` read on this thread, or (False, None) when it must go to a thread: it
        overran the budget, or the database was busy (a reader on this thread never waits for a lock)."""
        connection = self._inline
        if connection is None:
            if self._closed:
                return False, cast(T, None)
            connection = self._inline = self._connect(busy_timeout_ms=0)
            connection.set_progress_handler(self._progress, _PROGRESS_STEPS)
        self._overran = False
        start = time.perf_counter()
        self._deadline = start + min(_INLINE_BUDGET_S, _INLINE_WALL_S)
        self._wall_deadline = start + _INLINE_WALL_S
        self._cpu_deadline = _NEVER
        try:
            connection.execute("BEGIN")
            try:
                value = drive(fn(SqliteTx(connection)))
            finally:
                self._deadline = _NEVER
                if connection.in_transaction:
                    connection.execute("COMMIT")
        except BaseException as error:
            if self._overran or _busy(error):
                if self._overran:
                    self._skips[code] = _OVERRUN_SKIPS
                return False, cast(T, None)
            raise as_store_error(error) from error
        if self._overran:  # interrupted, and the code went on as if nothing had been read
            self._skips[code] = _OVERRUN_SKIPS
            return False, cast(T, None)
        return True, value

    def _progress(self) -> int:
        now = time.perf_counter()
        if now <= self._deadline:
            return 0  # within the budget in wall time, so in CPU time too
        if now <= self._wall_deadline:
            # Reading the thread's clock is a system call, so a read is not timed from its start: its CPU time
            # is counted from here (it is not over budget before: the budget in wall time is not spent), and it
            # may take the budget again from here, two budgets in all at most.
            cpu = time.thread_time()
            if self._cpu_deadline == _NEVER:
                self._cpu_deadline = cpu + _INLINE_BUDGET_S
                return 0
            if cpu <= self._cpu_deadline:
                return 0
        self._overran = True
        return 1  # interrupt the statement

    def _run(self, job: Job) -> None:
        start = time.thread_time()
        try:
            job.outcome = (self._read(job.fn), None)
        except BaseException as error:
            job.outcome = (None, error)
        if time.thread_time() - start < _INLINE_BUDGET_S:
            # It fits the budget after all (the overrun was the machine's, or the data changed): read its code
            # on the caller's thread again.
            self._skips.pop(getattr(job.fn, "__code__", None), None)
        job.mailbox.post((job,))

    def _read(self, fn: Callable[[Tx], Coroutine[Any, Any, T]]) -> T:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._connect()
            self._local.connection = connection
        # One transaction per read, so a read made of several queries sees one snapshot.
        connection.execute("BEGIN")
        try:
            return drive(fn(SqliteTx(connection)))
        except BaseException as error:
            raise as_store_error(error) from error
        finally:
            connection.execute("COMMIT")

    def _connect(self, *, busy_timeout_ms: int | None = None) -> sqlite3.Connection:
        connection = connect(str(self.path))
        # A reader never writes; refusing it makes a stray write fail loudly.
        connection.execute("PRAGMA query_only = ON")
        if busy_timeout_ms is not None:
            connection.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
        with self._lock:
            self._connections.append(connection)
        return connection

    def close(self) -> None:
        """Wait for the reads under way, then close every connection (blocking: run it on a thread)."""
        self._pool.shutdown(wait=True)
        with self._inline_lock:
            self._closed = True
            self._inline = None
        with self._lock:
            for connection in self._connections:
                connection.close()
            self._connections.clear()


def _busy(error: BaseException) -> bool:
    """Whether SQLite refused the read for a lock another connection holds (it may wait for it on a thread)."""
    code = getattr(error, "sqlite_errorcode", None)
    return isinstance(error, sqlite3.OperationalError) and code is not None and code & 0xFF == sqlite3.SQLITE_BUSY
