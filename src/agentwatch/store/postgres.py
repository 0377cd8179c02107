"""The PostgreSQL backend (`postgresql://user@host:5432/dbname`), for many processes on many machines.

psycopg 3 with an async connection pool; every `write()` is one transaction. A session's seqs come from
its row, read `FOR UPDATE` and written back in the same transaction, so they stay contiguous whatever the
number of writer processes (a bigserial would follow allocation order, not commit order, and readers
following it would skip events).

Appends (`appends_only` writes) of concurrent callers are grouped: while one group commits, the next one
queues, and one transaction applies it with one statement per table (`_appends`, the same rows SQLite's
group commit writes). A process runs one session's writes in the order they were made, one at a time.

Needs the `agentwatch[postgres]` extra. libpq URL parameters work as usual, for example
`?options=-csearch_path%3Dmyschema` to keep agentwatch's tables in their own schema.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Awaitable, Callable, Sequence
from functools import lru_cache, partial
from typing import TYPE_CHECKING, Any, Final, TypeVar

from agentwatch.errors import (
    AgentwatchError,
    Conflict,
    InvalidArgument,
    MissingDependency,
    NotADatabase,
    NotFound,
    StoreUnavailable,
)
from agentwatch.events import Event
from agentwatch.store import hide_password
from agentwatch.store._appends import apply_appends
from agentwatch.store._migrations import migrate, recorded_version
from agentwatch.store._sql import Dialect, Row, Tx, aware, check_params, tenth_of
from agentwatch.store._sqlbase import utc_now
from agentwatch.store._sqlstore import SqlStore
from agentwatch.store.records import Write

try:
    import psycopg
    from psycopg.types.json import set_json_loads
    from psycopg_pool import AsyncConnectionPool, PoolTimeout
except ImportError:  # the extra is not installed; `open` says how to get it
    _HAVE_PSYCOPG = False
else:
    _HAVE_PSYCOPG = True

if TYPE_CHECKING:
    from psycopg import AsyncConnection

__all__ = ["PostgresStore"]

T = TypeVar("T")

_CONNECT_TIMEOUT_S: Final = 5
_CONNECTION_OPTIONS: Final[dict[str, Any]] = {
    "connect_timeout": _CONNECT_TIMEOUT_S,
    # A server that stops answering (a network that drops packets rather than refusing them) is found out in
    # seconds, not when the kernel gives up: an idle connection is probed, and one whose sent bytes go
    # unacknowledged for 5 s is closed, so the call fails (and an engine cut off from its store learns it
    # before its leases can pass to another engine: see `agentwatch.runtime.leases`).
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 2,
    "tcp_user_timeout": 5_000,
}
_POOL_MAX: Final = 10
_MAX_GROUP: Final = 512
"""Append-only writes per transaction, at most."""
# One advisory lock key for "migrating agentwatch's schema", whatever the schema's name.
_MIGRATION_LOCK: Final = int.from_bytes(hashlib.blake2b(b"agentwatch.migrate", digest_size=8).digest(), signed=True)


def _json_text(text: str) -> str:
    return text  # JSON documents are text columns (see migration 3): kept exactly as written


DIALECT = Dialect(
    name="postgres",
    for_update=" FOR UPDATE",
    time_param=aware,
    json_param=_json_text,
    tenth_param=tenth_of,
    ascii_case=' COLLATE "C"',
)


@lru_cache(maxsize=512)
def _pg(sql: str) -> str:
    # Shared queries use `?`; psycopg wants `%s`. Our SQL holds no literal `?` or `%` (values are parameters).
    return sql.replace("?", "%s")


class _Tx:
    """A `Tx` over a psycopg async connection."""

    def __init__(self, connection: AsyncConnection[Row]) -> None:
        self._connection = connection

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        check_params(params)
        cursor = await self._connection.execute(_pg(sql), params)
        return await cursor.fetchall()

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        check_params(params)
        cursor = await self._connection.execute(_pg(sql), params)
        return cursor.rowcount

    async def execute_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        async with self._connection.cursor() as cursor:
            await cursor.executemany(_pg(sql), rows)


async def _apply_group(tx: Tx, *, writes: Sequence[Write]) -> list[Any]:
    return await apply_appends(tx, DIALECT, writes, utc_now())


class _Appended(asyncio.Future[list[Event]]):
    """The outcome of an append queued for the next group. While it is pending it also marks its session's
    latest write (`_last`): a later append of the session queues behind it with no wait, the queue keeping
    their order; any other write waits for it."""


def _raw_json(text: str | bytes) -> str | bytes:
    return text  # records and payloads decode JSON themselves, through their own models


async def _configure(connection: AsyncConnection[Row]) -> None:
    """Set up a new connection: autocommit (writes open their own transactions), UTC, JSON kept as text."""
    await connection.set_autocommit(True)
    await connection.execute("SET TIME ZONE 'UTC'")
    set_json_loads(_raw_json, connection)


def _address(url: str) -> tuple[str, str, str]:
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as error:
        raise InvalidArgument(f"{hide_password(url)!r} is not a valid PostgreSQL URL ({error})") from None
    host = str(info.get("host") or "localhost")
    if not info.get("dbname") and not os.environ.get("PGDATABASE"):
        # libpq would take the user's name, so the schema would go into a database such as the server's own
        # `postgres`, without a word.
        raise InvalidArgument(
            f"the store URL {hide_password(url)!r} names no database; name one, as in "
            "postgresql://user@host:5432/agentwatch (create it first: createdb agentwatch)"
        )
    return host, str(info.get("port") or 5432), str(info.get("dbname") or os.environ["PGDATABASE"])


async def _check_unmade(tx: Tx, where: str, *, create: bool) -> None:
    """Before anything is written to a database with no agentwatch schema yet: refuse it when its schema holds
    tables (a database of another program, as a SQLite file of another program is refused: once, agentwatch's
    tables went in beside that program's, by a command that only reads too, or a name both use failed the
    migration as "relation ... already exists"), or when the caller only reads (`create` False)."""
    rows = await tx.fetch(
        "SELECT current_schema(), count(*) FROM pg_tables WHERE schemaname = current_schema() GROUP BY 1"
    )
    if rows:
        schema, count = rows[0]
        raise NotADatabase(
            f"{where} is a database of another program (schema {schema!r} has {count} table(s) but no agentwatch "
            "schema); point the store URL at a new database (createdb), or at a schema of its own "
            "(?options=-csearch_path%3Dagentwatch, once CREATE SCHEMA agentwatch)"
        )
    if not create:
        raise NotFound(
            f"no agentwatch store in {where}: nothing has been run with it yet; point the store URL at the "
            "database your agents run on"
        )


class PostgresStore(SqlStore):
    """The store on PostgreSQL: a connection pool, one transaction per write, seqs from the session row."""

    _dialect = DIALECT

    def __init__(self, url: str, pool: AsyncConnectionPool[AsyncConnection[Row]], where: str) -> None:
        self.url = hide_password(url)
        self._pool = pool
        self._where = where
        self._queued: list[tuple[Write, _Appended]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._last: dict[str, asyncio.Future[Any]] = {}
        """Each session's latest write in flight: the next one waits for it (see `_in_order`, `_Appended`)."""
        self._group_counts = [0, 0]
        """Append groups committed, and the writes in them (for the benchmarks)."""

    @classmethod
    async def open(cls, url: str, *, create: bool = True) -> PostgresStore:
        """Connect (within about 5 s, or raise `StoreUnavailable`), migrate when needed, open a pool. With
        `create` False, a database with no store in it is refused (`NotFound`), and nothing is written."""
        if not _HAVE_PSYCOPG:
            raise MissingDependency(
                "the PostgreSQL store needs psycopg 3; install it with `pip install 'agentwatch[postgres]'`"
            )
        host, port, dbname = _address(url)
        where = f"PostgreSQL database {dbname!r} at {host}:{port}"
        try:
            connection = await psycopg.AsyncConnection.connect(url, **_CONNECTION_OPTIONS)
        except psycopg.OperationalError as error:
            # libpq's last line, one line and untabbed; its own "Is the server running ...?" hint is ours below.
            said = str(error).strip().splitlines()[-1].strip() if str(error).strip() else type(error).__name__
            reason = said if not said.startswith("Is the server running") else "connection refused"
            if f'database "{dbname}" does not exist' in said:  # the server answered: the database is missing
                raise StoreUnavailable(
                    f"{where} does not exist; create it (createdb -h {host} -p {port} {dbname}, or CREATE DATABASE "
                    f"on that server), or point the store URL at another one"
                ) from None
            raise StoreUnavailable(
                f"cannot reach {where} ({reason}); is the server running and accepting connections there, "
                f"and is the store URL {hide_password(url)!r} right?"
            ) from None
        async with connection:
            await _configure(connection)
            tx = _Tx(connection)
            # The advisory lock makes a second process opening a fresh database wait, then find nothing to do.
            async with connection.transaction():
                await connection.execute("SELECT pg_advisory_xact_lock(%s)", [_MIGRATION_LOCK])
                if await recorded_version(tx, DIALECT, where=where) is None:
                    await _check_unmade(tx, where, create=create)
                await migrate(tx, DIALECT, where=where)
        pool: AsyncConnectionPool[AsyncConnection[Row]] = AsyncConnectionPool(
            url,
            min_size=1,
            max_size=_POOL_MAX,
            kwargs=dict(_CONNECTION_OPTIONS),
            configure=_configure,
            open=False,
            name="agentwatch",
        )
        try:
            await pool.open(wait=True, timeout=2 * _CONNECT_TIMEOUT_S)
        except PoolTimeout:
            await pool.close()
            raise StoreUnavailable(
                f"{where} stopped answering while the store opened; is the server running?"
            ) from None
        return cls(url, pool, where)

    async def _transact(self, fn: Callable[[Tx], Awaitable[T]], *, write: bool, pipeline: bool = False) -> T:
        """Run `fn` on a pooled connection, in a transaction when it writes. With `pipeline`, the statements
        whose results `fn` does not read go to the server together with the next one it reads, or with the
        COMMIT (an append group: BEGIN with the counters' SELECT, then the updates, inserts and COMMIT, two
        round trips instead of five)."""
        task = asyncio.current_task()
        cancelling = task.cancelling() if task is not None else 0
        try:
            async with self._pool.connection(timeout=2 * _CONNECT_TIMEOUT_S) as connection:
                if task is not None and task.cancelling() > cancelling:
                    # Cancelled while it waited for the connection, and the pool's wait took the cancellation in
                    # (Python 3.11's `asyncio.wait_for` returns a result that comes with it): ended here, as asked.
                    raise asyncio.CancelledError
                if not write:
                    return await fn(_Tx(connection))
                if pipeline:
                    async with connection.pipeline(), connection.transaction():
                        return await fn(_Tx(connection))
                async with connection.transaction():
                    return await fn(_Tx(connection))
        except AgentwatchError:
            raise
        except psycopg.IntegrityError as error:
            raise Conflict(f"the change clashes with stored data ({error}); read the current state and retry") from None
        except (psycopg.DataError, UnicodeEncodeError) as error:  # text no earlier check caught
            raise InvalidArgument(f"a value cannot be stored ({error}); check it for NUL characters") from None
        except (psycopg.OperationalError, PoolTimeout) as error:
            raise StoreUnavailable(f"lost {self._where} ({error}); is the server running?") from None

    async def _read(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        return await self._transact(fn, write=False)

    async def _write(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        return await self._transact(fn, write=True)

    # -- one session's writes in order; concurrent appends grouped ---------------------------------------

    async def _in_order(self, session_id: str, run: Callable[[], Awaitable[T]]) -> T:
        """Run a write of `session_id` once this process's previous write of it finished, so a session's
        writes commit in the order they were made even when their callers do not wait for each other."""
        previous = self._last.get(session_id)
        mine: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._last[session_id] = mine
        try:
            if previous is not None and not previous.done():
                await asyncio.wait([previous])
            return await run()
        finally:
            mine.set_result(None)
            if self._last.get(session_id) is mine:
                del self._last[session_id]

    async def _write_session(self, session_id: str, fn: Callable[[Tx], Awaitable[T]]) -> T:
        return await self._in_order(session_id, lambda: self._write(fn))

    def _write_appends(self, write: Write) -> Awaitable[list[Event]]:
        previous = self._last.get(write.session_id)
        if previous is None or previous.done() or type(previous) is _Appended:
            # Nothing of the session in flight, or only queued appends, which this one follows in the queue.
            return self._enqueue(write)
        return self._in_order(write.session_id, lambda: self._enqueue(write))

    def _enqueue(self, write: Write) -> _Appended:
        """Queue an append-only write for the next group: while one group commits, the appends of the other
        sessions queue up, and the next transaction takes them all (one statement per table, one commit).
        The write marks its session's latest one until its group committed (see `_Appended`). Its outcome
        comes as the future itself (awaited by the caller: no coroutine of its own to start and finish)."""
        loop = asyncio.get_running_loop()
        future = _Appended(loop=loop)
        self._queued.append((write, future))
        self._last[write.session_id] = future
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush())
        return future

    async def _flush(self) -> None:
        while self._queued:
            group, self._queued = self._queued[:_MAX_GROUP], self._queued[_MAX_GROUP:]
            writes = [write for write, _ in group]
            outcomes: list[Any]
            try:
                outcomes = await self._transact(partial(_apply_group, writes=writes), write=True, pipeline=True)
                self._group_counts[0] += 1
                self._group_counts[1] += len(writes)
            except AgentwatchError as error:
                # The database refused a statement of the group (a session reaped meanwhile, ...): each
                # write again on its own, so the failure stays with the write that caused it.
                outcomes = [error] if len(writes) == 1 else [await self._alone(write) for write in writes]
            except BaseException as error:
                outcomes = [error] * len(writes)
            last = self._last
            for (write, future), outcome in zip(group, outcomes, strict=True):
                if last.get(write.session_id) is future:
                    del last[write.session_id]
                if future.done():
                    continue  # its caller stopped waiting; the write stands
                if isinstance(outcome, BaseException):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)

    async def _alone(self, write: Write) -> list[Event] | BaseException:
        try:
            return await self._write(lambda tx: self._append_only(tx, write, utc_now()))
        except AgentwatchError as error:
            return error

    async def close(self) -> None:
        """Close the pool (queued writes and writes in progress finish first)."""
        if self._flusher is not None:
            await asyncio.wait([self._flusher])
        await self._pool.close()
