"""The SQLite store's readers: threads with a connection each, which WAL lets read while the writer writes.

A read runs on a reader thread in one transaction of its own (so a read made of several queries sees one
snapshot); its outcome goes back through the caller's loop's `Mailbox`, like a write's, so a burst of
finished reads wakes its callers a few per loop turn too.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final, TypeVar, cast

from agentwatch.store._mailbox import Job, Mailbox
from agentwatch.store._sql import Tx
from agentwatch.store._sqlite_connection import SqliteTx, as_store_error, connect, drive

__all__ = ["Readers"]

T = TypeVar("T")

_READERS: Final = 2


class Readers:
    """The reader threads of one database file, and their connections."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pool = ThreadPoolExecutor(_READERS, thread_name_prefix="agentwatch-sqlite-reader")
        self._connections: list[sqlite3.Connection] = []
        self._local = threading.local()
        self._lock = threading.Lock()

    async def read(self, fn: Callable[[Tx], Awaitable[T]], mailbox: Mailbox) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        job = Job(cast(Callable[[Tx], Coroutine[Any, Any, Any]], fn), mailbox, future, write=False)
        self._pool.submit(self._run, job)
        return await future

    def _run(self, job: Job) -> None:
        try:
            job.outcome = (self._read(job.fn), None)
        except BaseException as error:
            job.outcome = (None, error)
        job.mailbox.post((job,))

    def _read(self, fn: Callable[[Tx], Coroutine[Any, Any, T]]) -> T:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = connect(str(self.path))
            # A reader never writes; refusing it makes a stray write fail loudly.
            connection.execute("PRAGMA query_only = ON")
            self._local.connection = connection
            with self._lock:
                self._connections.append(connection)
        # One transaction per read, so a read made of several queries sees one snapshot.
        connection.execute("BEGIN")
        try:
            return drive(fn(SqliteTx(connection)))
        except BaseException as error:
            raise as_store_error(error) from error
        finally:
            connection.execute("COMMIT")

    def close(self) -> None:
        """Wait for the reads under way, then close every connection (blocking: run it on a thread)."""
        self._pool.shutdown(wait=True)
        with self._lock:
            for connection in self._connections:
                connection.close()
            self._connections.clear()
