"""What every thread of the SQLite store shares: opening a connection, the `Tx` over it, running the shared
store code without an event loop, and SQLite's errors in the store's words."""

from __future__ import annotations

import sqlite3
from collections.abc import Coroutine, Sequence
from typing import Any, Final, TypeVar, cast

from agentwatch.errors import AgentwatchError, Conflict, InvalidArgument, StoreError
from agentwatch.store._sql import Row, check_params

__all__ = ["SqliteTx", "as_store_error", "begin_at_once", "cause", "connect", "drive"]

T = TypeVar("T")

_BUSY_TIMEOUT_MS: Final = 5_000


class SqliteTx:
    """A `Tx` over a blocking sqlite3 connection: its awaits never suspend (see `drive`)."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        check_params(params)
        return self._connection.execute(sql, params).fetchall()

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        check_params(params)
        return self._connection.execute(sql, params).rowcount

    async def execute_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._connection.executemany(sql, rows)


def drive(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run the shared store code to completion on a worker thread, without an event loop.

    The code only awaits `SqliteTx` methods, which call sqlite3 and return without suspending, so the
    coroutine finishes on its first step.
    """
    try:
        coroutine.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    coroutine.close()
    raise RuntimeError("store code suspended on the SQLite thread; it may only await the Tx it is given")


def connect(target: str, *, uri: bool = False) -> sqlite3.Connection:
    # isolation_level=None: we issue BEGIN/SAVEPOINT/COMMIT ourselves (the module's implicit transactions
    # would commit behind our back). check_same_thread=False: a connection is opened on one thread and
    # used on its worker thread, never by two at once.
    connection = sqlite3.connect(target, isolation_level=None, check_same_thread=False, uri=uri)
    # Wait for another process's write lock (a second agentwatch, a `db info`) instead of failing at once.
    connection.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
    # SQLite leaves foreign keys off by default; reap relies on their ON DELETE CASCADE.
    connection.execute("PRAGMA foreign_keys = ON")
    return connection


def begin_at_once(connection: sqlite3.Connection) -> bool:
    """`BEGIN IMMEDIATE` if the database's write lock is free now, without waiting for it: False when another
    connection holds it (or the BEGIN failed otherwise; the caller then takes the way that waits, which reports
    a failure). The connection waits for the lock again afterwards, as `connect` set it to."""
    connection.execute("PRAGMA busy_timeout = 0")
    try:
        connection.execute("BEGIN IMMEDIATE")
    except sqlite3.Error:
        return False
    finally:
        connection.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
    return True


def cause(error: BaseException) -> str:
    """What SQLite said, in words a person can act on (a full disk says so)."""
    code = getattr(error, "sqlite_errorcode", None)
    if code == sqlite3.SQLITE_FULL:
        return f"{error}: free some space (or raise the size limit), then retry"
    return str(error)


def as_store_error(error: BaseException) -> BaseException:
    if isinstance(error, AgentwatchError):
        return error
    if isinstance(error, UnicodeEncodeError):  # a lone surrogate no earlier check caught
        return InvalidArgument("a text value contains a lone surrogate, which is not valid text; send proper UTF-8")
    if isinstance(error, sqlite3.IntegrityError):
        return Conflict(f"the change clashes with stored data ({error}); read the current state and retry")
    if isinstance(error, sqlite3.Error):
        return StoreError(f"SQLite failed: {cause(error)}")
    return error
