"""Read-tool figures: `agent_list`, `agent_tail` and `agent_summary` called as tools, beside hand-written SQL.

Each tool is called through its handler from `read_tools()`, `async (view, caller, args) -> dict`, with the
view the CLI reads through (a store, a memory live ring and an empty roster, no engine). The baseline is the
same answer written by hand with plain `sqlite3`, on the same cached databases as the store figures (built
by `bench.store`), and is checked to return the same rows (or counts) once before anything is timed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote, urlsplit

from agentwatch.cli._common import Reader, open_reader
from agentwatch.config import Config
from agentwatch.events import (
    CompletionStarted,
    ContentDelta,
    Event,
    EventId,
    SessionId,
    StreamCursor,
    ToolCall,
    ToolProgress,
    TurnStarted,
    new_id,
)
from agentwatch.live.memory import MemoryRing
from agentwatch.reads.tools import read_tools
from agentwatch.store import SCHEMA_VERSION, SessionDraft, Store, connect_store
from agentwatch.store._sql import tenth_of
from agentwatch.tools import Caller, Tool
from bench._harness import Context, Result, Skip, Target, bench_redis_ring, percentile, sample_payload
from bench.store import (
    _SESSION_COLUMNS,
    _build_sessions,
    _build_tail,
    _cached_database,
    _hand_key,
    _tenth_key,
    _unreachable,
    _utc_text,
)

__all__ = ["list_tool", "postgres_tools", "summary_tool", "tail_tool", "working_rows"]

_CALLER: Final = Caller()
_PAGE_SIZE: Final = 20
_TAIL_EVENTS: Final = 50
_WARM_UP: Final = 10
_WITHIN_2X: Final = Target("ratio", "<=", 2.0)
_SUMMARY_BUDGET_S: Final = 20.0
"""The longest one `agent_summary` call may take before the benchmark stops it and projects the rest."""
_SUMMARY_TIMED_S: Final = 15.0
"""Time spent on timed summary calls (both sides); at least `_SUMMARY_MIN_SAMPLES` calls each way are made."""
_SUMMARY_MIN_SAMPLES: Final = 3
_HEADS_PAGE: Final = 100
"""Rows per page with which `agent_summary` walks the lineage heads."""


def _tool(name: str) -> Tool:
    return next(tool for tool in read_tools() if tool.name == name)


async def _call(tool: Tool, view: Reader, args: dict[str, Any]) -> dict[str, Any]:
    """The tool's answer, a JSON object for every read tool."""
    answer = await tool.handler(view, _CALLER, args)
    if not isinstance(answer, dict):
        raise RuntimeError(f"{tool.name} answered {type(answer).__name__}, not an object")
    return answer


@contextlib.asynccontextmanager
async def _view(ctx: Context, store: Path | str) -> AsyncIterator[Reader]:
    # The CLI's reader: the store (a SQLite file, or a URL), a memory live ring, and the roster of an empty
    # agents directory.
    url = f"sqlite:///{store}" if isinstance(store, Path) else store
    config = Config(root=ctx.workdir, store=url, agents_dir=ctx.workdir / "no-agents")
    async with open_reader(config) as view:
        yield view


def _raw(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA query_only = ON")
    return connection


async def _sessions_database(ctx: Context) -> Path:
    count = ctx.sizes.list_sessions
    # The same cached database as `store.list.sqlite` (same name, same builder).
    return await _cached_database(
        ctx,
        f"sessions-v{SCHEMA_VERSION}-{count}.db",
        f"the {count:,}-session database",
        lambda scratch: _build_sessions(scratch, count),
    )


def _pair(
    name: str, unit_ms: tuple[list[float], list[float]], note: str, p50: Target | None, p99: Target | None = None
) -> list[Result]:
    tool_ms, hand_ms = unit_ms
    return [
        Result(f"{name}.p50", "ms", percentile(tool_ms, 50), percentile(hand_ms, 50), "lower", p50, note),
        Result(f"{name}.p99", "ms", percentile(tool_ms, 99), percentile(hand_ms, 99), "lower", p99, note),
    ]


async def _timed(call: Awaitable[Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    answer = await call
    return (time.perf_counter() - start) * 1000, answer


def _timed_sync(call: Callable[..., Any], *args: Any, **kwargs: Any) -> float:
    start = time.perf_counter()
    call(*args, **kwargs)
    return (time.perf_counter() - start) * 1000


# -- agent_list -------------------------------------------------------------------------------------------

_LIST_STATUSES: Final = ("running", "awaiting_input", "failed")
_LIST_ROLE: Final = "coder"
_LIST_ARGS: Final[dict[str, Any]] = {"status": list(_LIST_STATUSES), "role": _LIST_ROLE, "limit": _PAGE_SIZE}
_HAND_WHERE: Final = "status IN (?, ?, ?) AND role = ? AND deleted_at IS NULL"


def _hand_listing(*keys: str) -> tuple[str, str]:
    """The listing by hand, ordered by `keys` (all descending): its first page, and the page after a key."""
    select = f"SELECT {', '.join(_SESSION_COLUMNS)} FROM sessions WHERE {_HAND_WHERE}"
    order = f"ORDER BY {' DESC, '.join(keys)} DESC LIMIT ?"
    return f"{select} {order}", f"{select} AND ({', '.join(keys)}) < ({', '.join('?' * len(keys))}) {order}"


_HAND_FIRST, _HAND_AFTER = _hand_listing("boss", "live", "active_tenth", "last_active_at", "id")
"""In the order the index holds: the tenth of a second of the activity, then the exact time within it."""

Rows = list[tuple[Any, ...]]
HandList = Callable[[tuple[Any, ...] | None], Rows]
"""The hand-written listing: the rows of the page after a sort key (the first page for None), one past it."""
HandTail = Callable[[str, int], Rows]
"""The hand-written tail: the next events of a session after a seq."""


def _hand_list(connection: sqlite3.Connection) -> HandList:
    def page(after: tuple[Any, ...] | None) -> Rows:
        # One row past the page, as the store reads, to know whether another page follows.
        params = (*_LIST_STATUSES, _LIST_ROLE)
        if after is None:
            return connection.execute(_HAND_FIRST, (*params, _PAGE_SIZE + 1)).fetchall()
        return connection.execute(_HAND_AFTER, (*params, *_tenth_key(after), _PAGE_SIZE + 1)).fetchall()

    return page


def _list_dicts(hand: HandList, after: tuple[Any, ...] | None) -> list[dict[str, Any]]:
    """The timed baseline: the page's rows by hand, each as a dict of its columns."""
    return [dict(zip(_SESSION_COLUMNS, row, strict=True)) for row in hand(after)]


async def _list_figures(
    ctx: Context, view: Reader, hand: HandList, name: str, note: str, targets: tuple[Target | None, Target | None]
) -> list[Result]:
    """The first page and a later one of `agent_list`, each call beside the same page by hand."""
    sizes = ctx.sizes
    tool = _tool("agent_list")
    # Walk to the later page once each way (tool cursors, hand keys), checking every page on the way.
    cursor: str | None = None
    key: tuple[Any, ...] | None = None
    later = 1
    for number in range(1, sizes.list_later_page):
        answer = await _call(tool, view, {**_LIST_ARGS, "cursor": cursor})
        rows = hand(key)[:_PAGE_SIZE]
        if [row["id"] for row in answer["agents"]] != [row[0] for row in rows]:
            raise RuntimeError(f"agent_list and the hand-written query disagree on page {number}")
        if answer["nextCursor"] is None:
            break
        cursor, key, later = answer["nextCursor"], _hand_key(rows[-1]), number + 1
    ctx.say(f"agent_list: {sizes.list_samples} calls of pages 1 and {later} each way")

    timings: dict[str, list[float]] = {"tool-first": [], "hand-first": [], "tool-later": [], "hand-later": []}
    for index in range(sizes.list_samples + _WARM_UP):
        keep = index >= _WARM_UP
        # Alternate which goes first, so neither always finds the pages the other just read in cache.
        for turn in (index % 2, 1 - index % 2):
            if turn == 0:
                first, _ = await _timed(tool.handler(view, _CALLER, dict(_LIST_ARGS)))
                later_ms, _ = await _timed(tool.handler(view, _CALLER, {**_LIST_ARGS, "cursor": cursor}))
                side = "tool"
            else:
                first = _timed_sync(_list_dicts, hand, None)
                later_ms = _timed_sync(_list_dicts, hand, key)
                side = "hand"
            if keep:
                timings[f"{side}-first"].append(first)
                timings[f"{side}-later"].append(later_ms)
    note = (
        f"{sizes.list_sessions:,} sessions, status in 3 of 7 and role 1 of 10, {_PAGE_SIZE} per page, "
        f"{sizes.list_samples} calls; baseline: the keyset query by hand with {note}, each row made a dict of its "
        "columns"
    )
    results: list[Result] = []
    for page, label in (("first", "first_page"), ("later", f"page_{later}")):
        results += _pair(
            f"{name}.{label}", (timings[f"tool-{page}"], timings[f"hand-{page}"]), note, targets[0], targets[1]
        )
    return results


async def list_tool(ctx: Context) -> list[Result]:
    """`agent_list {status: [3 of 7], role}` over the sessions database: the first page and a later one."""
    path = await _sessions_database(ctx)
    raw = _raw(path)
    try:
        async with _view(ctx, path) as view:
            return await _list_figures(
                ctx,
                view,
                _hand_list(raw),
                "reads.list",
                "sqlite3; the p99 target (20 ms) bounds the p50 too",
                (_WITHIN_2X, Target("value", "<=", 20.0)),
            )
    finally:
        raw.close()


# -- agent_tail -------------------------------------------------------------------------------------------

_HAND_TAIL: Final = (
    "SELECT id, session_id, seq, at, turn_id, conversation_id, payload FROM events "
    "WHERE session_id = ? AND seq > ? ORDER BY seq ASC LIMIT ?"
)


_TAIL_COLUMNS: Final = ("id", "session_id", "seq", "at", "turn_id", "conversation_id", "payload")


def _hand_tail(connection: sqlite3.Connection) -> HandTail:
    def tail(session_id: str, after_seq: int) -> Rows:
        return connection.execute(_HAND_TAIL, (session_id, after_seq, _TAIL_EVENTS)).fetchall()

    return tail


def _tail_dicts(hand: HandTail, session_id: str, after_seq: int) -> list[dict[str, Any]]:
    """The timed baseline: the events by hand, each a dict of its columns with its payload JSON decoded."""
    rows = []
    for row in hand(session_id, after_seq):
        event = dict(zip(_TAIL_COLUMNS, row, strict=True))
        event["payload"] = json.loads(event["payload"])
        rows.append(event)
    return rows


async def _tail_figures(
    ctx: Context, view: Reader, hand: HandTail, sessions: list[str], per_session: int, name: str, note: str
) -> list[Result]:
    """`agent_tail` after a cursor at a random seq of a random session, each call beside the same read by hand."""
    sizes = ctx.sizes
    tool = _tool("agent_tail")
    rng = random.Random(42)
    # Room for 50 events and one more after the cursor, so every answer is full and says hasMore.
    picks = [
        (session, StreamCursor(session, seq).encode(), seq)
        for session, seq in (
            (rng.choice(sessions), rng.randint(0, max(per_session - _TAIL_EVENTS - 1, 0)))
            for _ in range(sizes.tail_samples + _WARM_UP)
        )
    ]
    for session, after_id, seq in picks[:_WARM_UP]:
        answer = await _call(tool, view, {"id": session, "afterId": after_id, "maxEvents": 50})
        rows = hand(session, seq)
        if [event["id"] for event in answer["events"]] != [row[0] for row in rows] or len(rows) != 50:
            raise RuntimeError(f"agent_tail and the hand-written query disagree after seq {seq}")
    ctx.say(f"agent_tail: {sizes.tail_samples} calls of {_TAIL_EVENTS} events each way")
    tool_ms: list[float] = []
    hand_ms: list[float] = []
    for index, (session, after_id, seq) in enumerate(picks):
        for turn in (index % 2, 1 - index % 2):
            if turn == 0:
                args = {"id": session, "afterId": after_id, "maxEvents": _TAIL_EVENTS}
                elapsed, _ = await _timed(tool.handler(view, _CALLER, args))
                samples = tool_ms
            else:
                elapsed = _timed_sync(_tail_dicts, hand, session, seq)
                samples = hand_ms
            if index >= _WARM_UP:
                samples.append(elapsed)
    note = (
        f"{note}, afterId a cursor at a random seq, {len(tool_ms)} calls; baseline: SELECT of the next "
        f"{_TAIL_EVENTS} events by hand, each row made a dict of its columns with its payload JSON decoded"
    )
    return _pair(name, (tool_ms, hand_ms), note, _WITHIN_2X if name == "reads.tail" else None)


async def tail_tool(ctx: Context) -> list[Result]:
    """`agent_tail {id, afterId: <cursor at a random seq>, maxEvents: 50}` in the events database."""
    sizes = ctx.sizes
    per_session = sizes.tail_events // sizes.tail_sessions
    path = await _tail_database(ctx)
    raw = _raw(path)
    try:
        sessions = [row[0] for row in raw.execute("SELECT id FROM sessions WHERE last_seq > 0 ORDER BY id")]
        async with _view(ctx, path) as view:
            note = f"{sizes.tail_events:,} events over {sizes.tail_sessions} sessions, sqlite3"
            return await _tail_figures(ctx, view, _hand_tail(raw), sessions, per_session, "reads.tail", note)
    finally:
        raw.close()


async def _tail_database(ctx: Context) -> Path:
    sizes = ctx.sizes
    per_session = sizes.tail_events // sizes.tail_sessions
    # The same cached database as `store.tail.sqlite` (same name, same builder).
    return await _cached_database(
        ctx,
        f"tail-v{SCHEMA_VERSION}-{sizes.tail_events}-{sizes.tail_sessions}.db",
        f"the {sizes.tail_events:,}-event database",
        lambda scratch: _build_tail(scratch, sizes.tail_sessions, per_session),
    )


# -- both on PostgreSQL -----------------------------------------------------------------------------------

_PG_TAIL_EVENTS: Final = 1000
"""Events of each tail session copied into the PostgreSQL store (all of them would be a million rows to copy
into a fresh schema, most of the run)."""


async def postgres_tools(ctx: Context) -> list[Result]:
    """`agent_list` and `agent_tail` on a PostgreSQL store holding the same rows, beside psycopg by hand."""
    if ctx.postgres_url is None:
        raise Skip("no PostgreSQL URL given")
    reason = _unreachable(ctx.postgres_url, 5432)
    if reason is not None:
        raise Skip(reason)
    try:
        import psycopg
        from psycopg import sql
    except ImportError:
        raise Skip("psycopg is not installed (pip install 'agentwatch[postgres]')") from None
    sizes = ctx.sizes
    per_session = min(sizes.tail_events // sizes.tail_sessions, _PG_TAIL_EVENTS)
    sessions_path, tail_path = await _sessions_database(ctx), await _tail_database(ctx)
    base_url = ctx.postgres_url
    schema = f"aw_bench_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(base_url, autocommit=True, connect_timeout=5) as admin:
            admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    except psycopg.OperationalError as error:
        raise Skip(f"cannot use PostgreSQL at {urlsplit(base_url).netloc} ({str(error).strip()})") from None
    url = f"{base_url}{'&' if '?' in base_url else '?'}options={quote(f'-csearch_path={schema}')}"
    try:
        await (await connect_store(url)).close()  # the store makes its schema
        ctx.say(f"copying the sessions and {per_session:,} events of each tail session into PostgreSQL")
        await asyncio.to_thread(_copy_to_postgres, url, sessions_path, tail_path, per_session)
        with psycopg.connect(url, autocommit=True) as raw:
            tail_sessions = [row[0] for row in raw.execute("SELECT id FROM sessions WHERE last_seq > 0 ORDER BY id")]
            async with _view(ctx, url) as view:
                results = await _list_figures(
                    ctx,
                    view,
                    _pg_hand_list(raw),
                    "reads.postgres.list",
                    "psycopg (the store's pool beside one plain connection)",
                    (None, None),
                )
                note = f"{per_session * sizes.tail_sessions:,} events over {sizes.tail_sessions} sessions, psycopg"
                results += await _tail_figures(
                    ctx, view, _pg_hand_tail(raw), tail_sessions, per_session, "reads.postgres.tail", note
                )
                return results
    finally:
        with psycopg.connect(base_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def _pg(query: str) -> str:
    return query.replace("?", "%s")


def _pg_hand_list(connection: Any) -> HandList:
    def page(after: tuple[Any, ...] | None) -> Rows:
        params = (*_LIST_STATUSES, _LIST_ROLE)
        if after is None:
            return connection.execute(_pg(_HAND_FIRST), (*params, _PAGE_SIZE + 1)).fetchall()  # type: ignore[no-any-return]
        boss, live, moment, session_id = after
        key = (bool(boss), bool(live), tenth_of(moment), moment, session_id)  # booleans, not SQLite's 0/1
        return connection.execute(_pg(_HAND_AFTER), (*params, *key, _PAGE_SIZE + 1)).fetchall()  # type: ignore[no-any-return]

    return page


def _pg_hand_tail(connection: Any) -> HandTail:
    def tail(session_id: str, after_seq: int) -> Rows:
        return connection.execute(_pg(_HAND_TAIL), (session_id, after_seq, _TAIL_EVENTS)).fetchall()  # type: ignore[no-any-return]

    return tail


def _copy_to_postgres(url: str, sessions_path: Path, tail_path: Path, per_session: int) -> None:
    """The rows of both cached SQLite databases into the PostgreSQL store's tables (the tail sessions' first
    `per_session` events only), as they are stored there."""
    import psycopg

    tables = {"sessions": ("boss", "is_observer"), "conversations": ()}
    computed = {"active_tenth"}  # PostgreSQL computes it (SQLite's triggers keep it): COPY cannot name it
    with psycopg.connect(url) as target:
        for path in (sessions_path, tail_path):
            source = _raw(path)
            try:
                for table, booleans in tables.items():
                    columns = [
                        row[1] for row in source.execute(f"PRAGMA table_info({table})") if row[1] not in computed
                    ]
                    flags = [columns.index(column) for column in booleans]
                    with target.cursor().copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                        for row in source.execute(f"SELECT {', '.join(columns)} FROM {table}"):
                            values = list(row)
                            for index in flags:
                                values[index] = bool(values[index])
                            copy.write_row(values)
                events = "session_id, seq, id, type, turn_id, conversation_id, at, payload"
                with target.cursor().copy(f"COPY events ({events}) FROM STDIN") as copy:
                    for row in source.execute(f"SELECT {events} FROM events WHERE seq <= ?", (per_session,)):
                        copy.write_row(row)
            finally:
                source.close()
        target.execute("UPDATE sessions SET last_seq = %s WHERE last_seq > %s", (per_session, per_session))
        target.commit()
        target.autocommit = True
        target.execute("ANALYZE")


# -- agent_summary ----------------------------------------------------------------------------------------

# One pass over the sessions: per status, the window counts beside it (summed in Python).
_HAND_SUMMARY: Final = """
SELECT status, count(*),
       SUM(status = 'running' AND pending_requests = 0 AND last_active_at >= :quiet
           OR status = 'awaiting_input' AND pending_requests = 0),
       SUM(interception IS NOT NULL),
       SUM(created_at >= :start AND created_at < :end),
       SUM(status IN ('failed', 'interrupted') AND last_active_at >= :start AND last_active_at < :end),
       SUM(status IN ('running', 'awaiting_input') AND pending_requests > 0
           AND last_active_at >= :start AND last_active_at < :end),
       SUM(created_at >= :before AND created_at < :start),
       SUM(status IN ('failed', 'interrupted') AND last_active_at >= :before AND last_active_at < :start),
       SUM(status IN ('running', 'awaiting_input') AND pending_requests > 0
           AND last_active_at >= :before AND last_active_at < :start)
FROM sessions WHERE deleted_at IS NULL GROUP BY status
"""
_HAND_LINEAGES: Final = "SELECT count(DISTINCT COALESCE(group_key, id)) FROM sessions WHERE deleted_at IS NULL"
# The word of each lineage's newest session, as `status_word` gives it (one stuck threshold: no roster).
_HAND_WORDS: Final = """
SELECT CASE
         WHEN status = 'running' AND pending_requests > 0 THEN 'needs_you'
         WHEN status = 'running' AND last_active_at < :quiet THEN 'stuck'
         WHEN status = 'running' THEN 'working'
         WHEN status = 'awaiting_input' AND pending_requests > 0 THEN 'needs_you'
         WHEN status = 'awaiting_input' THEN 'working'
         WHEN status = 'idle' THEN 'idle'
         WHEN status IN ('failed', 'interrupted') THEN 'failed'
         ELSE 'done'
       END, count(*)
FROM (SELECT status, pending_requests, last_active_at,
             ROW_NUMBER() OVER (PARTITION BY COALESCE(group_key, id) ORDER BY last_active_at DESC, id DESC) AS head
      FROM sessions WHERE deleted_at IS NULL)
WHERE head = 1 GROUP BY 1
"""
_HAND_SPEND: Final = (
    "SELECT SUM(cost_usd), COUNT(cost_usd), SUM(input_tokens) + SUM(output_tokens) FROM usage_ledger "
    "WHERE at >= ? AND at < ?"
)


def _hand_summary(
    connection: sqlite3.Connection, now: datetime, window: timedelta, stuck_after: float, *, words: bool
) -> dict[str, Any]:
    """What `agent_summary` answers (but `at`), from hand-written SQL."""
    start, before = now - window, now - 2 * window
    times = {
        "quiet": _utc_text(now - timedelta(seconds=stuck_after)),
        "start": _utc_text(start),
        "end": _utc_text(now),
        "before": _utc_text(before),
    }
    rows = connection.execute(_HAND_SUMMARY, times).fetchall()
    sums = [sum(row[column] or 0 for row in rows) for column in range(2, 10)]
    working, intercepted, started, failed, waiting, started_before, failed_before, waiting_before = sums

    def spend(low: datetime, high: datetime) -> dict[str, Any]:
        cost, priced, tokens = connection.execute(_HAND_SPEND, (_utc_text(low), _utc_text(high))).fetchone()
        return {"costUsd": float(cost) if priced else 0.0, "tokens": int(tokens or 0)}

    answer: dict[str, Any] = {
        "statuses": {status: count for status, count, *_ in sorted(rows)},
        "total": sum(row[1] for row in rows),
        "working": working,
        "lineages": connection.execute(_HAND_LINEAGES).fetchone()[0],
        "intercepted": intercepted,
    }
    if words:
        counts = dict.fromkeys(("idle", "working", "needs_you", "stuck", "failed", "done"), 0)
        counts.update(connection.execute(_HAND_WORDS, {"quiet": times["quiet"]}).fetchall())
        answer["words"] = counts
    answer["window"] = {
        "started": started,
        "failed": failed,
        "waiting": waiting,
        "spend": spend(start, now),
        "previous": {
            "started": started_before,
            "failed": failed_before,
            "waiting": waiting_before,
            "spend": spend(before, start),
        },
    }
    return answer


def _comparable(answer: dict[str, Any]) -> dict[str, Any]:
    """The tool's answer without its moments (`at`, `from`, `to`), to set beside the hand-written one."""
    window = {key: value for key, value in answer["window"].items() if key not in ("from", "to")}
    window["previous"] = {key: value for key, value in window["previous"].items() if key not in ("from", "to")}
    return {key: value for key, value in answer.items() if key != "at"} | {"window": window}


class _PageCounter:
    """A store that counts the pages of lineage heads read through it (to project a call cut short)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.pages = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def list_sessions(self, where: Any, **kwargs: Any) -> Any:
        page = await self._store.list_sessions(where, **kwargs)
        if where.heads_of is not None:
            self.pages += 1
        return page


async def summary_tool(ctx: Context) -> list[Result]:
    """`agent_summary` (default arguments, then `words: true`) over the sessions database."""
    sizes = ctx.sizes
    path = await _sessions_database(ctx)
    tool = _tool("agent_summary")
    window = timedelta(days=7)
    raw = _raw(path)
    results: list[Result] = []
    try:
        async with _view(ctx, path) as view:
            stuck_after = view.config.sessions.stuck_after_seconds
            lineages = raw.execute(_HAND_LINEAGES).fetchone()[0]
            pages = max(math.ceil(lineages / _HEADS_PAGE), 1)
            for label, args in (("default", {}), ("words", {"words": True})):
                words = bool(args)
                # One call first, within a budget: it warms the caches and is checked against the hand SQL.
                counted = _PageCounter(view.store)
                counting = Reader(view.config, counted, view.ring, view.roster)
                call = asyncio.ensure_future(tool.handler(counting, _CALLER, args))
                began = time.perf_counter()
                done, _ = await asyncio.wait({call}, timeout=_SUMMARY_BUDGET_S)
                if not done:
                    elapsed_ms = (time.perf_counter() - began) * 1000
                    call.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await call
                    await asyncio.sleep(1.0)  # let the page being read on a reader thread finish
                    hand_ms = [
                        _timed_sync(_hand_summary, raw, datetime.now(UTC), window, stuck_after, words=words)
                        for _ in range(_SUMMARY_MIN_SAMPLES)
                    ]
                    read = max(counted.pages, 1)
                    ctx.say(
                        f"agent_summary ({label}): stopped after {elapsed_ms / 1000:.0f} s, {counted.pages} of "
                        f"{pages} pages of lineage heads read; projecting"
                    )
                    results.append(
                        Result(
                            f"reads.summary.{label}.projected",
                            "ms",
                            elapsed_ms * pages / read,
                            percentile(hand_ms, 50),
                            "lower",
                            _WITHIN_2X,
                            f"{sizes.list_sessions:,} sessions, {lineages:,} lineages; one call did not finish "
                            f"within {_SUMMARY_BUDGET_S:.0f} s: projected from its first {counted.pages} of {pages} "
                            f"pages of {_HEADS_PAGE} lineage heads; baseline: p50 of the same counts by hand",
                        )
                    )
                    if not words:
                        ctx.say("agent_summary (words: true) walks the same lineage heads: not run")
                    break
                answer: Any = call.result()
                now = datetime.fromisoformat(answer["at"])
                if _comparable(answer) != _hand_summary(raw, now, window, stuck_after, words=words):
                    raise RuntimeError(f"agent_summary ({label}) and the hand-written queries disagree")
                tool_ms: list[float] = []
                hand_ms = []
                spent = 0.0
                index = 0
                while index < sizes.list_samples and (spent < _SUMMARY_TIMED_S * 1000 or index < _SUMMARY_MIN_SAMPLES):
                    for turn in (index % 2, 1 - index % 2):
                        if turn == 0:
                            elapsed, _ = await _timed(tool.handler(view, _CALLER, args))
                            tool_ms.append(elapsed)
                        else:
                            moment = datetime.now(UTC)
                            elapsed = _timed_sync(_hand_summary, raw, moment, window, stuck_after, words=words)
                            hand_ms.append(elapsed)
                        spent += elapsed
                    index += 1
                ctx.say(f"agent_summary ({label}): {index} calls each way")
                note = (
                    f"{sizes.list_sessions:,} sessions, {lineages:,} lineages, {index} calls; baseline: the same "
                    "counts by hand with sqlite3 (one pass over the sessions, "
                    + ("the lineage heads by a window function, " if words else "a count of distinct lineages, ")
                    + "the ledger twice), one query after another on one connection; the store runs its reads at "
                    "once, on its two reader threads"
                )
                results += _pair(f"reads.summary.{label}", (tool_ms, hand_ms), note, _WITHIN_2X)
    finally:
        raw.close()
    return results


# -- agent_list of working agents, on a shared (Redis) live ring --------------------------------------------

_WORKING_ROWS: Final = (20, 100)
"""Working agents on a listing page (a page holds 100 at most)."""
_WORKING_ROUNDS: Final = 4
"""Model requests of each working agent's turn so far (its newest one's two calls still run)."""
_WORKING_DELTAS: Final = 60
"""Text deltas each model request streams (the bulk of a working turn's events in the ring)."""


def _working_turn(session_id: str) -> list[Event]:
    """A working agent's turn as its engine publishes it: each model request streams its text, then makes two calls
    that report progress and return; the newest request's calls still run."""
    now = datetime.now(UTC)
    events: list[Event] = []
    seq = sub = 0

    def add(payload: Any, *, durable: bool = True) -> None:
        nonlocal seq, sub
        seq, sub = (seq + 1, 0) if durable else (seq, sub + 1)
        event_id, session = EventId(new_id("evt")), SessionId(session_id)
        events.append(Event(id=event_id, session_id=session, seq=seq, sub=sub, at=now, payload=payload))

    add(TurnStarted(model="bench:model", role=_LIST_ROLE))
    for request in range(_WORKING_ROUNDS):
        add(CompletionStarted(request_index=request, model="bench:model"))
        for index in range(_WORKING_DELTAS):
            delta = ContentDelta(part="text", index=0, request_index=request, delta=f"step {index} of the plan, ")
            add(delta, durable=False)
        calls = [f"call_{request}_{name}" for name in ("read", "grep")]
        for call in calls:
            add(ToolCall(tool_call_id=call, tool_name=call.rsplit("_", 1)[1], input={"path": f"src/{call}.py"}))
        for index in range(6):
            add(ToolProgress(tool_call_id=calls[index % 2], message=f"{index} files"), durable=False)
        if request < _WORKING_ROUNDS - 1:
            for tag, call in enumerate(calls):
                add(sample_payload(tag).model_copy(update={"tool_call_id": call}))
    return events


async def working_rows(ctx: Context) -> list[Result]:
    """`agent_list {status: [running]}` of 20 and 100 working agents, each `currentItem` read from a Redis live
    ring, beside the same listing with a memory ring holding the same events."""
    shared, _ = await bench_redis_ring(ctx.redis_url)
    url = f"sqlite:///{ctx.workdir / 'working.db'}"
    store = await connect_store(url)
    local = MemoryRing()
    try:
        sessions = [
            (await store.create_session(SessionDraft(name=f"worker-{n}", role=_LIST_ROLE, status="running"))).id
            for n in range(max(_WORKING_ROWS))
        ]
        published = 0
        for session_id in sessions:
            for event in _working_turn(session_id):
                await shared.publish(event)
                local.publish_now(event)
                published += 1
        config = Config(root=ctx.workdir, store=url, agents_dir=ctx.workdir / "no-agents")
        views = {"redis": Reader(config, store, shared), "memory": Reader(config, store, local)}
        tool = _tool("agent_list")
        results: list[Result] = []
        for rows in _WORKING_ROWS:
            args = {"status": ["running"], "limit": rows}
            answers = [await _call(tool, view, dict(args)) for view in views.values()]
            items = {str(row["currentItem"]) for answer in answers for row in answer["agents"]}
            expected = {str({"type": "tool", "toolName": "read", "title": "read +1 more"})}
            if answers[0]["agents"] != answers[1]["agents"] or items != expected:
                raise RuntimeError(f"agent_list of {rows} working agents differs between the rings, or says {items}")
            ctx.say(f"agent_list of {rows} working agents: {ctx.sizes.list_samples} calls with each ring")
            timings: dict[str, list[float]] = {"redis": [], "memory": []}
            for index in range(ctx.sizes.list_samples + _WARM_UP):
                for name in ("redis", "memory") if index % 2 == 0 else ("memory", "redis"):
                    elapsed, _ = await _timed(tool.handler(views[name], _CALLER, dict(args)))
                    if index >= _WARM_UP:
                        timings[name].append(elapsed)
            note = (
                f"{rows} running sessions of {published // len(sessions)} events each in the ring (a turn of "
                f"{_WORKING_ROUNDS} model requests, each streaming {_WORKING_DELTAS} deltas and making 2 calls with "
                f"progress; the newest two still run), {ctx.sizes.list_samples} calls, alternating; Redis on "
                "loopback; baseline: the same listing with a memory ring holding the same events"
            )
            results += _pair(f"reads.working.redis.{rows}_rows", (timings["redis"], timings["memory"]), note, None)
        return results
    finally:
        await shared.drop(sessions)
        await shared.close()
        await local.close()
        await store.close()
