"""The embedded backend: one SQLite file in WAL mode, one writer thread with group commit.

```
sqlite:///relative/path.db         a file relative to the working directory
sqlite:////absolute/path.db        an absolute path
sqlite://:memory:                  a private in-memory database (tests, demos)
sqlite:///path.db?synchronous=normal   trade the last commits on power loss for faster commits
```

Every write goes to the one writer thread. It takes everything queued and applies it in ONE transaction:
the append-only writes (events, usage, messages) together, one statement per table for all of them (see
`_appends`: the same rows every backend writes), every other write in its own SAVEPOINT. A write that fails
rolls back alone and only its caller gets the error. Then it commits once: one fsync for the whole group,
however many callers. Each caller's call returns only after that commit. Reads run on separate
connections, which WAL lets proceed while the writer writes (a small read on its caller's own thread, a
larger one on a reader thread: see `_readers`).

A write of one session that nothing could share a commit with is applied on its caller's thread instead, the
same way, on the writer's connection: when nothing is queued for the writer, nothing else is ready to run on
the caller's loop (no other caller could write before the commit is over), the loop turn's budget for such
work is not spent (`Mailbox.inline_room`), and the database's write lock is free (it never waits for another
process).
One session appending alone, or a turn's commit (the only write in flight while its tools wait for it), is
such a write: on its own thread it saves the two hand-overs between threads (measured: one session's appends
~40 % more per second; a ten-tool turn 3-9 % less time). The caller's loop is held for the commit, its fsync
included, which it would have waited for anyway. A write that may touch any number of sessions (a renewal
of every lease an engine holds, a sweep) always goes to the writer thread: its size is not bounded by one
session's, and on the loop it held up everything else (with 1,000 turns at once, the loop's longest stall went
from 52-77 ms to 33-43 ms once the renewal of their leases left it).

Appends (events, usage, messages) made while other work is ready on their loop are held for a moment instead,
and written as one group (`_release`): many sessions appending at once on one loop are callers its mailbox wakes a
few per loop turn, each of which appends again. Once the mailbox has woken them all and the loop has nothing else
to run, the group is applied there, the same way (when it fits the time such a group may take on the loop,
estimated from the groups before; otherwise, and on a loop that never goes idle, the writer thread takes it). A
write of the same loop that is not an append sends the held appends to the writer thread ahead of it, so the
writes of one loop are applied in the order made. Measured with 100 sessions appending at once: about a third
less CPU time per append (no hand-over between threads, no waits for the GIL) and a fifth to a third more
appends per second.

Outcomes go back to the callers' event loops through the store's `Mailbox` of each loop (`agentwatch.pacing`):
one wake-up per group, then a chunk of callers per loop turn, so a large group does not resume hundreds of callers
in one turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal, TypeVar, cast
from urllib.parse import parse_qs

from agentwatch.errors import InvalidArgument, NotADatabase, StoreError
from agentwatch.events import Event
from agentwatch.pacing import Mailbox, Mailboxes
from agentwatch.store._appends import Counters, apply_appends
from agentwatch.store._jobs import Job, settle
from agentwatch.store._migrations import migrate, recorded_version
from agentwatch.store._readers import Readers
from agentwatch.store._sql import Dialect, Tx, tenth_text, utc_text
from agentwatch.store._sqlite_connection import SqliteTx, as_store_error, begin_at_once, cause, connect, drive
from agentwatch.store._sqlstore import SqlStore
from agentwatch.store.records import Write

__all__ = ["SqliteStore"]

T = TypeVar("T")
Synchronous = Literal["full", "normal"]

_HEADER: Final = b"SQLite format 3\x00"
_MAX_GROUP: Final = 512
_GATHER_S: Final = 0.001
"""How long a group waits for the rest of the callers of the previous one, at most (see `_collect`)."""
_PAGE_SIZE: Final = 8192
"""Bytes per page of a new database file (see `_open_database`)."""
_SQLITE_MIN: Final = (3, 35, 0)
"""The oldest SQLite whose SQL the store writes (`RETURNING` came in 3.35)."""
_HOLD_TURNS: Final = 32
"""Loop turns an append is held for its loop's group at most (see `_release`), however slowly its loop's
callers are woken."""
_QUIET_TURNS: Final = 2
"""Loop turns an append is held once its loop's mailbox has woken every caller, while other work is ready
(those callers' next steps, which may append too)."""
_GROUP_HERE_S: Final = 0.010
"""Time a group of appends may take on its loop's thread, at most (estimated from the groups before; see
`_release`); a larger group goes to the writer thread."""
_FIRST_GUESS_S: Final = 0.0001
"""What an append of a group costs on the loop, before any group has been measured."""
_KNOWN_MAX: Final = 10_000
"""Sessions whose counters the writer remembers, at most (see `SqliteStore._known`)."""

Known = tuple[int, str, str, str, int, float]
"""A session's counters as the writer's last commit left them: last_seq, conversation_id, role, status,
tokens, cost_usd (the fields of `Counters` that a row holds)."""

DIALECT = Dialect(
    name="sqlite", for_update="", time_param=utc_text, json_param=lambda text: text, tenth_param=tenth_text
)


def _now() -> datetime:
    return datetime.now(UTC)


class _TransactionLost(Exception):
    """SQLite rolled back the whole transaction when a statement failed (a full disk, an I/O error)."""

    def __init__(self, job: Job | None, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.job = job
        """The write whose statement failed (None: a group statement of several appends)."""


def _rollback(connection: sqlite3.Connection) -> None:
    """Roll back the open transaction, if SQLite has not already (it may have, on a full disk)."""
    if connection.in_transaction:
        with contextlib.suppress(sqlite3.Error):  # the error that brought us here is the one to report
            connection.execute("ROLLBACK")


def _rollback_to(connection: sqlite3.Connection, savepoint: str, job: Job | None, error: BaseException) -> None:
    """Undo a savepoint after `error`; raise `_TransactionLost` when the transaction itself is gone."""
    if connection.in_transaction:
        try:
            connection.execute(f"ROLLBACK TO {savepoint}")
            connection.execute(f"RELEASE {savepoint}")
            return
        except sqlite3.Error:
            _rollback(connection)
    raise _TransactionLost(job, error) from error


class SqliteStore(SqlStore):
    """The embedded store: one SQLite file, one writer thread with group commit, WAL readers."""

    _dialect = DIALECT
    writes_in_order = True  # one writer thread takes the writes from one queue

    def __init__(self, url: str, path: Path | None, writer: sqlite3.Connection) -> None:
        self.url = url
        self.path = path
        """The database file (None in memory)."""
        self._queue: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._unfinished: deque[Job] = deque()
        """The jobs queued for the writer thread that it has not finished (appended before they are queued,
        taken off once applied; deque operations are atomic, so any thread may look)."""
        self._applying = threading.Lock()
        """Held by whoever applies jobs on the writer's connection: the writer thread, or a caller's thread
        applying a write at once (see `_write_here`). Everything below that the writer keeps is theirs alone."""
        self._writer_connection = writer
        self._tx = SqliteTx(writer)
        """The `Tx` over the writer's connection (whoever holds `_applying` uses it)."""
        self._writer = threading.Thread(target=self._writer_main, name="agentwatch-sqlite-writer", daemon=True)
        self._readers = Readers(path) if path is not None else None
        self._mailboxes = Mailboxes()
        self._closed = False
        self._known: dict[str, Known] = {}
        """The counters of the sessions the writer's appends wrote, as its last commits left them (writer
        thread only). An append-only group takes its sessions' counters from here instead of reading their
        rows: the writer holds the database's write lock from its BEGIN to its COMMIT, so nothing else can
        have changed them meanwhile, unless it was another write of this writer (which forgets them all) or
        another connection (`PRAGMA data_version` tells, at each BEGIN; then all are forgotten too)."""
        self._data_version = -1
        self._unsettled: list[dict[str, Counters]] = []
        """The counters the open transaction's appends leave, for `_known` once it commits."""
        self._awaited = 0
        """The size of the group the writer waits for (0: it does not wait; see `_collect`)."""
        self._filled = threading.Event()
        """Set once `_awaited` jobs are unfinished: the group the writer waits for is queued."""
        self._group_counts = [0, 0]
        """Transactions the writer committed, and the writes in them (for the benchmarks)."""
        self._held: dict[Mailbox, list[Job]] = {}
        """Per loop (its mailbox): the appends held for the group its loop applies (see `_release`)."""
        self._holding = threading.Lock()
        """Guards `_held` (`close` takes what every loop holds)."""
        self._here_per_job = _FIRST_GUESS_S
        """Running average of what an append of a group applied on its loop's thread cost (seconds)."""
        self._writer.start()

    @classmethod
    async def open(cls, url: str) -> SqliteStore:
        """Open (creating and migrating when needed) the SQLite database at `url`."""
        target, synchronous = _parse_url(url)
        path = None if target == ":memory:" else Path(target)
        writer = await asyncio.to_thread(_open_database, path, synchronous)
        return cls(url, path, writer)

    # -- the writer -----------------------------------------------------------------------------------

    def _writer_main(self) -> None:
        running = True
        expected = 1
        while running:
            jobs, running = self._collect(expected)
            expected = len(jobs)
            with self._applying:
                self._apply_jobs(jobs)
            for _ in jobs:
                self._unfinished.popleft()
            settle(jobs)
        with self._applying:
            self._writer_connection.close()

    def _apply_jobs(self, jobs: list[Job], *, begun: bool = False) -> None:
        """Apply `jobs`: the writes in one transaction (`_commit_group`; `begun`: its BEGIN is made), then the
        reads. Each job's outcome says how it went."""
        connection, tx = self._writer_connection, self._tx
        try:
            self._commit_group(connection, tx, [j for j in jobs if j.write], begun=begun)
        except BaseException as error:  # the connection itself failed: every write of the group fails
            self._forget()
            _rollback(connection)
            for failed in jobs:
                failed.outcome = (None, as_store_error(error))
        for read in (j for j in jobs if not j.write):
            self._forget()  # (a read changes nothing, but it runs code of its own on this connection)
            try:
                read.outcome = (drive(read.fn(tx)), None)
            except BaseException as error:
                read.outcome = (None, as_store_error(error))

    def _write_here(self, job: Job, loop: asyncio.AbstractEventLoop) -> bool:
        """Apply the write `job` of one session on the caller's thread (`loop`'s), when nothing could share its
        commit (see the module docs); True when it was applied (its caller resumes in the next loop turn, as it
        would from the writer thread, without the mailbox: one outcome is no burst to pace), False when it is for
        the writer thread."""
        if not self._apply_here([job]):
            return False
        loop.call_soon(job.deliver)
        return True

    def _apply_here(self, jobs: list[Job]) -> bool:
        """Apply `jobs` (of one loop) in one transaction on the loop's own thread, on the writer's connection,
        when nothing else is ready on the loop, the loop turn's budget for such work is not spent, nothing is
        queued for the writer thread and the database's write lock is free now; False when they are for the
        writer thread."""
        mailbox = jobs[0].mailbox
        if self._unfinished or not mailbox.nothing_else_ready() or not mailbox.inline_room():
            return False
        if not self._applying.acquire(blocking=False):
            return False  # the writer thread is finishing a group
        started = time.perf_counter()
        try:
            if self._unfinished or self._closed or not begin_at_once(self._writer_connection):
                return False
            self._apply_jobs(jobs, begun=True)
        finally:
            self._applying.release()
            mailbox.spent_inline(time.perf_counter() - started)
        return True

    def _hold(self, job: Job, loop: asyncio.AbstractEventLoop) -> None:
        """Hold the append `job` for its loop's group (see `_release`)."""
        mailbox = job.mailbox
        with self._holding:
            if self._closed:  # `close` took the held appends before this one came: it cannot be written
                job.future.set_exception(StoreError(f"the store {self.url!r} is closed; open it again"))
                return
            held = self._held.setdefault(mailbox, [])
            held.append(job)
            first = len(held) == 1
        if first:
            loop.call_soon(self._release, mailbox, 0, 0)

    def _release(self, mailbox: Mailbox, turns: int, quiet: int) -> None:
        """Apply the appends held on `mailbox`'s loop as one group once no more are coming (see the module docs):
        held while the mailbox still has callers to wake, and for `_QUIET_TURNS` after while other work is ready
        (those callers' next steps); then on the loop's thread if it has nothing else to run and the group fits
        `_GROUP_HERE_S`, otherwise on the writer thread."""
        held = self._held.get(mailbox)
        if not held:
            return  # `close` took them, or a write of the same loop took them to the writer thread first
        handing_out = mailbox.handing_out()
        coming = handing_out or (quiet < _QUIET_TURNS and not mailbox.nothing_else_ready())
        if coming and len(held) < _MAX_GROUP and turns < _HOLD_TURNS:
            loop = asyncio.get_running_loop()
            loop.call_soon(self._release, mailbox, turns + 1, 0 if handing_out else quiet + 1)
            return
        jobs = self._take_held(mailbox)
        if not jobs:
            return
        if len(jobs) * self._here_per_job <= _GROUP_HERE_S:
            started = time.perf_counter()
            if self._apply_here(jobs):
                per_job = (time.perf_counter() - started) / len(jobs)
                self._here_per_job += (per_job - self._here_per_job) * 0.25  # (about the last four groups)
                mailbox.post(jobs, here=True)
                return
        for job in jobs:
            self._enqueue(job)

    def _take_held(self, mailbox: Mailbox | None = None) -> list[Job]:
        """Take the appends held on `mailbox`'s loop (None: on every loop), in the order they were made."""
        with self._holding:
            if mailbox is not None:
                return self._held.pop(mailbox, [])
            jobs = [job for held in self._held.values() for job in held]
            self._held.clear()
            return jobs

    def _to_writer(self, mailbox: Mailbox | None = None) -> None:
        """Queue the appends held on `mailbox`'s loop (None: on every loop) for the writer thread (a write of
        the same loop comes after them: `writes_in_order`)."""
        if self._held:
            for job in self._take_held(mailbox):
                self._enqueue(job)

    def _collect(self, expected: int) -> tuple[list[Job], bool]:
        """The next group, and False once `close` asked to stop (after the jobs queued before it).

        The group is what is queued when the first job arrives, and, when that is fewer jobs than the
        previous group had, what comes in the next `_GATHER_S`, until there are as many: when many callers
        write at once, the previous group's callers are still being woken (a few per loop turn) and are about
        to queue their next write. The writer sleeps meanwhile, until the caller that completes the group
        wakes it (`_awaited`, `_filled`: one wake-up per group, not one per write, nor a look every so often),
        so the callers' loop runs without contending with the writer for the GIL, and the group fills. A lone
        caller (a previous group of one) never waits.
        """
        jobs = [self._queue.get()]
        if self._drain(jobs) and len(jobs) < expected:
            deadline = time.monotonic() + _GATHER_S
            filled = self._filled
            while True:
                filled.clear()
                self._awaited = expected  # (`_submit` sets `filled` once as many jobs are unfinished)
                if not self._drain(jobs) or len(jobs) >= expected:
                    break
                left = deadline - time.monotonic()
                if left <= 0 or not filled.wait(left):
                    self._drain(jobs)
                    break
            self._awaited = 0
        if jobs[-1] is None:
            jobs.pop()
            return cast(list[Job], jobs), False
        return cast(list[Job], jobs), True

    def _drain(self, jobs: list[Job | None]) -> bool:
        """Add the queued jobs to `jobs` (up to `_MAX_GROUP`, or until `close`'s None); True when there may
        be more to come."""
        get = self._queue.get_nowait
        while jobs[-1] is not None and len(jobs) < _MAX_GROUP:
            try:
                jobs.append(get())
            except queue.Empty:
                return True
        return False

    def _commit_group(self, connection: sqlite3.Connection, tx: SqliteTx, jobs: list[Job], *, begun: bool) -> None:
        """Apply `jobs` in one transaction and commit it (`begun`: its BEGIN is made already); each job's
        outcome says how it went.

        SQLite may answer a failed statement (a full disk, an I/O error) by rolling back the whole
        transaction, not just the statement: the writes applied before it in the group are then gone too.
        The group is then applied again without the write that failed (a failed group statement of
        appends: with its writes one by one, to find the one that fails), so no caller hears of success
        for a write that was rolled back, and each pass leaves one write out or splits the appends:
        the loop ends.
        """
        pending = jobs
        while pending:
            self._unsettled.clear()
            try:
                if not begun:
                    connection.execute("BEGIN IMMEDIATE")
                begun = False  # a pass after a lost transaction begins its own
                self._check_known(connection, pending)
            except sqlite3.Error as error:
                _rollback(connection)
                failure = StoreError(f"cannot start a write on {self.url!r} ({error}); another process holds it")
                for job in pending:
                    job.outcome = (None, failure)
                return
            try:
                self._apply_group(connection, tx, pending)
            except _TransactionLost as lost:
                self._forget()
                for job in pending:
                    if job is not lost.job:
                        job.outcome = (None, None)
                pending = [job for job in pending if job is not lost.job]
                continue
            if not connection.in_transaction:
                self._forget()
                return  # the group's one write failed and was rolled back: nothing to commit
            try:
                connection.execute("COMMIT")
            except sqlite3.Error as error:
                self._forget()
                _rollback(connection)
                failure = StoreError(
                    f"could not commit to {self.url!r} ({cause(error)}); nothing of this write was kept"
                )
                for job in pending:
                    if job.outcome[1] is None:
                        job.outcome = (None, failure)
                return
            self._remember()
            self._group_counts[0] += 1
            self._group_counts[1] += len(pending)
            return

    def _check_known(self, connection: sqlite3.Connection, jobs: list[Job]) -> None:
        """Forget the counters `_known` holds when another connection committed since this one last looked:
        it may have written those rows (another process's writer, a maintenance command).

        A group without an append-only write needs no look: its writes forget every counter anyway (see
        `_apply_sole`, `_apply_one`), so no statement is run for it (a turn's writes, which patch the
        session, are such groups: one statement less per commit). The version kept is then older than this
        transaction; the next group that looks may find a change from before, and forgets what is already
        forgotten."""
        if not any(job.grouped for job in jobs):
            return
        version = connection.execute("PRAGMA data_version").fetchone()[0]
        if version != self._data_version:
            self._known.clear()
            self._data_version = version

    def _forget(self) -> None:
        """Forget every session's counters: a write other than an append-only group ran (it may change any
        row), or a transaction failed (what its appends counted was rolled back)."""
        self._known.clear()
        self._unsettled.clear()

    def _remember(self) -> None:
        """Keep the counters the committed transaction's appends left."""
        known = self._known
        if len(known) > _KNOWN_MAX:
            known.clear()
        for sessions in self._unsettled:
            for s in sessions.values():
                known[s.id] = (s.last_seq, s.conversation_id, s.role, s.status, s.tokens, s.cost)
        self._unsettled.clear()

    def _apply_group(self, connection: sqlite3.Connection, tx: SqliteTx, jobs: list[Job]) -> None:
        if len(jobs) == 1:
            # The group's only write (a turn's commit, mostly) needs no SAVEPOINT: should it fail, rolling
            # back the whole transaction undoes it alone.
            self._apply_sole(connection, tx, jobs[0])
            return
        if all(job.grouped for job in jobs):
            # Only appends (many sessions appending at once): nothing else in the transaction to keep should
            # their statements fail, so no SAVEPOINT either; the next pass applies them one by one.
            self._apply_appends(connection, tx, jobs, savepoint=False)
            return
        # Append-only writes wait in `batch` and are applied together. Another write goes first when it
        # changes one session that none of them names (the order of writes to different sessions inside one
        # transaction is invisible); anything else applies them first, so each session sees its writes in
        # the order they were queued.
        batch: list[Job] = []
        named: set[str] = set()
        for job in jobs:
            if job.appends is not None and not job.alone:  # (`job.grouped`, spelt out for the checker)
                batch.append(job)
                named.add(job.appends.session_id)
                continue
            if batch and (job.session_id is None or job.session_id in named):
                self._apply_appends(connection, tx, batch)
                batch, named = [], set()
            self._apply_one(connection, tx, job)
        if batch:
            self._apply_appends(connection, tx, batch)

    def _apply_sole(self, connection: sqlite3.Connection, tx: SqliteTx, job: Job) -> None:
        """Apply the one write of a transaction; if it fails, roll the transaction back."""
        write = job.appends
        try:
            if write is not None and not job.alone:
                sessions = self._known_counters([write])
                [outcome] = drive(apply_appends(tx, DIALECT, [write], _now(), sessions))
                if isinstance(outcome, BaseException):
                    raise outcome
                self._unsettled.append(sessions)
                job.outcome = (outcome, None)
            else:
                self._forget()
                job.outcome = (drive(job.fn(tx)), None)
        except BaseException as error:
            self._forget()
            job.outcome = (None, as_store_error(error))
            _rollback(connection)

    def _known_counters(self, writes: list[Write]) -> dict[str, Counters]:
        """The counters `_known` holds of the sessions `writes` name (fresh objects: the writes count them)."""
        known = self._known
        sessions: dict[str, Counters] = {}
        for write in writes:
            found = known.get(write.session_id)
            if found is not None:
                sessions[write.session_id] = Counters(write.session_id, *found)
        return sessions

    def _apply_one(self, connection: sqlite3.Connection, tx: SqliteTx, job: Job) -> None:
        """Apply one job in its own SAVEPOINT: if it fails, it rolls back alone and only its caller hears.

        Raises `_TransactionLost` when SQLite rolled back the whole transaction on the job's failure.
        """
        self._forget()
        connection.execute("SAVEPOINT write")
        try:
            job.outcome = (drive(job.fn(tx)), None)
        except BaseException as error:
            job.outcome = (None, as_store_error(error))
            _rollback_to(connection, "write", job, error)  # this write alone; the group goes on
            return
        connection.execute("RELEASE write")

    def _apply_appends(
        self, connection: sqlite3.Connection, tx: SqliteTx, jobs: list[Job], *, savepoint: bool = True
    ) -> None:
        """Apply append-only writes with one statement per table; should the database refuse one of those
        statements, roll them back and apply the writes one by one, so the failure stays with its write.
        Without `savepoint` (the transaction holds nothing else), a failure rolls back the transaction and
        raises `_TransactionLost`, and the next pass applies the writes one by one."""
        if savepoint:
            connection.execute("SAVEPOINT appends")
        writes = [job.appends for job in jobs if job.appends is not None]
        sessions = self._known_counters(writes)
        try:
            outcomes = drive(apply_appends(tx, DIALECT, writes, _now(), sessions))
        except BaseException as error:
            self._forget()
            if not savepoint:
                _rollback(connection)
                for job in jobs:
                    job.alone = True
                raise _TransactionLost(None, error) from error
            try:
                _rollback_to(connection, "appends", None, error)
            except _TransactionLost:
                # SQLite dropped the transaction: the next pass applies these writes one by one.
                for job in jobs:
                    job.alone = True
                raise
            for job in jobs:
                self._apply_one(connection, tx, job)
            return
        if savepoint:
            connection.execute("RELEASE appends")
        self._unsettled.append(sessions)
        for job, outcome in zip(jobs, outcomes, strict=True):
            job.outcome = (None, outcome) if isinstance(outcome, BaseException) else (outcome, None)

    def _submit(
        self,
        fn: Callable[[Tx], Awaitable[T]],
        *,
        write: bool,
        session_id: str | None = None,
        appends: Write | None = None,
    ) -> asyncio.Future[T]:
        if self._closed:
            raise StoreError(f"the store {self.url!r} is closed; open it again")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        run = cast("Callable[[Tx], Coroutine[Any, Any, Any]]", fn)  # (as text: the subscript costs a call each time)
        mailbox = self._mailboxes.of(loop)
        job = Job(run, mailbox, future, write, session_id, appends)
        if session_id is not None and mailbox not in self._held and self._write_here(job, loop):
            return future  # one session's write: see the module docs
        if appends is not None and mailbox.sees_ready:
            self._hold(job, loop)  # an append, held for its loop's group (see `_release`)
            return future
        self._to_writer(mailbox)
        self._enqueue(job)
        return future

    def _enqueue(self, job: Job) -> None:
        """Queue `job` for the writer thread."""
        unfinished = self._unfinished
        unfinished.append(job)
        self._queue.put(job)
        if len(unfinished) >= self._awaited > 0:
            self._filled.set()

    async def _write(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        return await self._submit(fn, write=True)

    async def _write_session(self, session_id: str, fn: Callable[[Tx], Awaitable[T]]) -> T:
        return await self._submit(fn, write=True, session_id=session_id)

    def _write_appends(self, write: Write) -> asyncio.Future[list[Event]]:
        # The function is the one-by-one path, for when the group's statements fail.
        fn = lambda tx: self._append_only(tx, write, _now())  # noqa: E731
        return self._submit(fn, write=True, session_id=write.session_id, appends=write)

    # -- readers --------------------------------------------------------------------------------------

    async def _read(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        if self._readers is None:
            # A private in-memory database exists only on the writer's connection.
            return await self._submit(fn, write=False)
        if self._closed:
            raise StoreError(f"the store {self.url!r} is closed; open it again")
        return await self._readers.read(fn, self._mailboxes.of(asyncio.get_running_loop()))

    # -- lifecycle ------------------------------------------------------------------------------------

    async def close(self) -> None:
        """Commit what is queued, stop the writer and close every connection."""
        if self._closed:
            return
        self._closed = True
        self._to_writer()  # the appends held on every loop, before the writer stops
        self._queue.put(None)
        self._filled.set()
        await asyncio.to_thread(self._writer.join)
        if self._readers is not None:
            await asyncio.to_thread(self._readers.close)

    async def _path_bytes(self) -> int | None:
        if self.path is None:
            return None
        paths = [self.path, self.path.with_name(self.path.name + "-wal")]
        return sum(path.stat().st_size for path in paths if path.exists())


def _parse_url(url: str) -> tuple[str, Synchronous]:
    """The database path (or `:memory:`) and the synchronous level a `sqlite://` URL names."""
    if not url.startswith("sqlite://"):
        raise InvalidArgument(f"{url!r} is not a sqlite:// URL")
    rest, _, query = url.removeprefix("sqlite://").partition("?")
    options = {name: values[-1] for name, values in parse_qs(query, keep_blank_values=True).items()}
    synchronous = options.pop("synchronous", "full").lower()
    if synchronous not in ("full", "normal"):
        raise InvalidArgument(f"synchronous={synchronous!r} in {url!r}; use full (the default) or normal")
    if options:
        raise InvalidArgument(f"unknown option(s) {sorted(options)} in {url!r}; the one option is synchronous")
    if rest == ":memory:":
        return ":memory:", cast(Synchronous, synchronous)
    if not rest.startswith("/") or rest == "/":
        raise InvalidArgument(
            f"{url!r} names no file; use sqlite:///relative.db, sqlite:////absolute/path.db or sqlite://:memory:"
        )
    return rest[1:], cast(Synchronous, synchronous)


def _check_file(path: Path) -> None:
    """Refuse, before SQLite touches it, a path that is not a SQLite database (nothing is written to it)."""
    if path.is_dir():
        raise NotADatabase(f"{str(path)!r} is a directory; point the store URL at a database file inside it")
    if path.exists() and path.stat().st_size > 0:
        with path.open("rb") as file:
            header = file.read(len(_HEADER))
        if header != _HEADER:
            raise NotADatabase(
                f"{str(path)!r} is not a SQLite database; point the store URL at an agentwatch database "
                "or at a path where a new one can be created"
            )


def _create_privately(path: Path) -> None:
    """Create what is missing of the database's folder (0700) and the database file itself (0600), so a
    transcript is readable by its owner only, whatever the umask. SQLite gives the -wal and -shm files the
    database file's mode. An existing folder or file is left as it is."""
    missing: list[Path] = []
    folder = path.parent
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for created in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process made it meanwhile
            created.mkdir(mode=0o700)
            created.chmod(0o700)  # mkdir's mode is masked by the umask; this is not
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    try:
        os.fchmod(descriptor, 0o600)
    finally:
        os.close(descriptor)


def _check_sqlite_version() -> None:
    """Refuse a SQLite library older than the statements the store writes (`RETURNING`, `UPDATE ... FROM`)."""
    if sqlite3.sqlite_version_info < _SQLITE_MIN:
        needed = ".".join(map(str, _SQLITE_MIN))
        raise StoreError(
            f"the SQLite library this Python uses is {sqlite3.sqlite_version}; agentwatch needs {needed} or newer. "
            "Use a Python built with a newer SQLite (any CPython 3.11 from python.org, or a current Linux "
            "distribution's), or a PostgreSQL store (postgresql://...)"
        )


def _open_database(path: Path | None, synchronous: Synchronous) -> sqlite3.Connection:
    """Check, configure and migrate the database; return the writer's connection."""
    _check_sqlite_version()
    where = repr(str(path)) if path is not None else "the in-memory database"
    if path is not None:
        try:
            _check_file(path)
            _create_privately(path)
        except OSError as error:
            reason = error.strerror or type(error).__name__
            raise StoreError(f"cannot open or create the database file {str(path)!r} ({reason})") from None
    connection = connect(str(path) if path is not None else ":memory:")
    try:
        tx = SqliteTx(connection)
        # Read-only checks first: a database we must refuse is left exactly as it was.
        tables = drive(tx.fetch("SELECT name FROM sqlite_master WHERE type = 'table'"))
        version = drive(recorded_version(tx, DIALECT, where=where))
        if version is None and tables:
            raise NotADatabase(
                f"{where} is a SQLite database of another program (it has tables but no agentwatch schema); "
                "point the store URL at a new file"
            )
        if not tables:
            # A new file gets larger pages than SQLite's 4 KiB: a tool result or model message of 1-3 KB
            # then shares its page with others instead of leaving a third of a small page empty (measured:
            # the file grows ~15 % less per turn). Only possible before the first table; an existing file
            # keeps the page size it was made with.
            connection.execute(f"PRAGMA page_size = {_PAGE_SIZE}")
        # WAL: readers never block the writer nor the writer them, and a commit appends to one file.
        connection.execute("PRAGMA journal_mode = WAL")
        # FULL fsyncs the WAL at every commit, so an acknowledged write survives power loss, not only a
        # crash; NORMAL (opt-in) survives a process kill but may lose the last commits on power loss.
        connection.execute(f"PRAGMA synchronous = {synchronous.upper()}")
        # IMMEDIATE takes the write lock before reading the version: two processes opening a fresh file
        # at once migrate one after the other, and the second finds nothing left to do.
        connection.execute("BEGIN IMMEDIATE")
        try:
            drive(migrate(tx, DIALECT, where=where))
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        # The writer's temporary tables in memory, not in temporary files. Every update of a session's activity
        # time makes two: SQLite computes the row's `live` (its status NOT IN a list of four) for the listing
        # indexes holding it, before and after, and builds the list as a table each time; in memory, the row's
        # update cost ~15% less (measured). The writer's own statements are small (a migration's copy of a
        # whole table, which may sort much, ran before this).
        connection.execute("PRAGMA temp_store = MEMORY")
    except sqlite3.DatabaseError as error:
        connection.close()
        if getattr(error, "sqlite_errorcode", None) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            raise StoreError(
                f"{where} is locked by another process, which held it past the wait for it ({error}); try again "
                "once it lets go (a long write, or a tool holding the file open)"
            ) from error
        raise NotADatabase(f"{where} cannot be read as a SQLite database ({error}); check the store URL") from error
    except BaseException:
        connection.close()
        raise
    return connection
