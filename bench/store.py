"""Store figures: durable append throughput (SQLite, PostgreSQL), tail reads and keyset listings (SQLite).

Every figure runs beside a raw baseline on the same data in the same run: plain `sqlite3` or psycopg doing
the same inserts in the same transaction sizes, or the same query written by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import random
import socket
import sqlite3
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from itertools import chain
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote, urlsplit

from agentwatch.events import (
    PAYLOAD_ADAPTER,
    AssistantMessage,
    CompletionFinished,
    CompletionStarted,
    NewEvent,
    ToolCall,
    ToolResult,
    TurnEnded,
    TurnId,
    TurnStarted,
    Usage,
    UserMessage,
    new_id,
)
from agentwatch.store import (
    SCHEMA_VERSION,
    TERMINAL_STATUSES,
    SessionDraft,
    SessionFilter,
    SessionRecord,
    SessionStatus,
    Store,
    Write,
    connect_store,
)
from agentwatch.store._appends import _rows_update
from bench._harness import Context, Result, Skip, Target, percentile, rotations, sample_payload

__all__ = ["append_postgres", "append_sqlite", "list_sqlite", "tail_sqlite"]

_EVENT_INSERT: Final = (
    "INSERT INTO events (id, session_id, seq, at, turn_id, conversation_id, payload, type) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_PG_COUNTERS_UPDATE: Final = (
    "UPDATE sessions SET last_seq = v.seq, updated_at = %s, last_active_at = %s "
    "FROM unnest(%s::text[], %s::bigint[]) AS v (id, seq) WHERE sessions.id = v.id"
)
"""PostgreSQL: the floor's update of its sessions' rows after a batch, one statement (parameters: the time twice,
the ids, their last seqs); measured cheaper than one statement per row."""


def _last_seqs(rows: Sequence[tuple[Any, ...]]) -> dict[str, int]:
    """Each session's last seq among event `rows` (id, session id, seq, ...)."""
    return {row[1]: row[2] for row in rows}


_PAYLOAD_TYPE: Final = "tool.result"
_TAIL_LIMIT: Final = 50
_PAGE_SIZE: Final = 20


def _utc_text(moment: datetime) -> str:
    # The SQLite schema keeps times as fixed-width UTC text (see its first migration).
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")


def _per_second(events: int, seconds: float) -> float:
    return events / seconds if seconds > 0 else 0.0


def _concurrent_append(
    backend: str,
    sessions_n: int,
    events: int,
    totals: dict[str, float],
    note: str,
    *,
    side: str = "store",
    variant: str = "",
) -> Result:
    """`sessions_n` sessions appending at once: the events per second of `side` against the raw driver's; the
    store's (new sessions: held to half the raw speed), or the floor's (see `_RawSqliteAppender.insert`'s
    `counters`: the raw inserts plus the session rows' update any store keeping per-session counters makes).
    `variant` names a variant of the set-up (`history`: sessions holding events before)."""
    store = side == "store"
    name = ".".join(part for part in (f"store.append.{backend}.{sessions_n}_sessions", variant) if part)
    return Result(
        name=name if store else f"{name}.{side}",
        unit="events/s",
        value=_per_second(events, totals[side]),
        baseline=_per_second(events, totals["raw"]),
        better="higher",
        target=Target("ratio", ">=", 0.5) if store and not variant else None,
        note=note,
    )


def _events_per_commit(backend: str, sessions_n: int, achieved: float) -> Result:
    """How full the store's groups were while `sessions_n` sessions appended at once."""
    return Result(
        name=f"store.append.{backend}.{sessions_n}_sessions.events_per_commit",
        unit="events/commit",
        value=achieved,
        baseline=float(sessions_n),
        better="higher",
        note=f"how full the groups were; baseline: {sessions_n}, every session's append in one commit",
    )


async def _interleaved(rounds: int, *samples: Callable[[], Awaitable[float]]) -> None:
    """Run each of `samples` `rounds` times, in `rotations` order.

    Before each sample, untimed, a full collection: the garbage of everything the process did before (its
    imports, the set-up, the other figures) otherwise lands in whichever sample happens to cross the
    collector's threshold (measured: one full collection of ~60 ms inside the first 100-session SQLite
    sample, about as long as the whole sample without it)."""
    for order in rotations(rounds, samples):
        for sample in order:
            gc.collect()
            await sample()


# -- durable append: SQLite -------------------------------------------------------------------------------


class _RawSqliteAppender:
    """The baseline: plain sqlite3 `executemany` into the store's own events table, in fixed batches."""

    def __init__(self, path: Path, payload_json: str, synchronous: str) -> None:
        self._connection = sqlite3.connect(path, isolation_level=None)
        self._connection.execute("PRAGMA journal_mode = WAL")
        self._connection.execute(f"PRAGMA synchronous = {synchronous}")
        self._payload_json = payload_json
        self._seqs: dict[str, int] = {}

    def rows(self, sessions: Sequence[SessionRecord], per_session: int) -> list[tuple[Any, ...]]:
        """Rows for `per_session` events of each session, interleaved as concurrent appends would be."""
        at = _utc_text(datetime.now(UTC))
        rows: list[tuple[Any, ...]] = []
        for _ in range(per_session):
            for session in sessions:
                seq = self._seqs[session.id] = self._seqs.get(session.id, 0) + 1
                event_id = new_id("evt")
                rows.append(
                    (event_id, session.id, seq, at, None, session.conversation_id, self._payload_json, _PAYLOAD_TYPE)
                )
        return rows

    def insert(self, rows: Sequence[tuple[Any, ...]], batch: int, *, counters: bool = False) -> float:
        """Insert `rows`, one transaction per `batch` of them; the seconds it took. With `counters`, each
        transaction also moves its sessions' rows on (the last seq and the activity time), as any store keeping
        per-session counters must."""
        execute, execute_many = self._connection.execute, self._connection.executemany
        start = time.perf_counter()
        for index in range(0, len(rows), batch):
            chunk = rows[index : index + batch]
            execute("BEGIN")
            execute_many(_EVENT_INSERT, chunk)
            if counters:
                last = _last_seqs(chunk)
                # The store's own statement for its sessions' rows (one statement for many rows, the cheaper form).
                execute(_rows_update(True, False, len(last)), [chunk[0][3], chunk[0][3], *chain(*last.items())])
            execute("COMMIT")
        return time.perf_counter() - start

    def close(self) -> None:
        self._connection.close()


async def _append_one_by_one(store: Store, session_id: str, events: list[NewEvent], count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        await store.append(session_id, events)
    return time.perf_counter() - start


async def _append_concurrently(store: Store, session_ids: Sequence[str], events: list[NewEvent], each: int) -> float:
    async def one_session(session_id: str) -> None:
        for _ in range(each):
            await store.append(session_id, events)

    start = time.perf_counter()
    await asyncio.gather(*(one_session(session_id) for session_id in session_ids))
    return time.perf_counter() - start


async def _sessions(store: Store, prefix: str, count: int) -> list[SessionRecord]:
    return [await store.create_session(SessionDraft(name=f"{prefix}-{index}", role="bench")) for index in range(count)]


async def append_sqlite(ctx: Context) -> list[Result]:
    """Durable appends on SQLite (WAL, synchronous=FULL): one session in sequence, then many at once, new
    sessions and sessions with a history."""
    sizes = ctx.sizes
    path = ctx.workdir / "append.db"
    store = await connect_store(f"sqlite:///{path}?synchronous=full")
    payload = sample_payload()
    events = [NewEvent(payload)]
    raw = _RawSqliteAppender(path, PAYLOAD_ADAPTER.dump_json(payload).decode(), "FULL")
    totals = {"store": 0.0, "raw": 0.0}
    try:
        store_one, raw_one = await _sessions(store, "sequential-store", 1), await _sessions(store, "sequential-raw", 1)

        # (a) One session, sequential: each append is acknowledged after its own commit, so the baseline
        # commits every row on its own too (batch size 1).
        ctx.say(f"SQLite: {sizes.sqlite_sequential} sequential appends x {sizes.rounds} rounds, each way")
        await _append_one_by_one(store, store_one[0].id, events, 10)  # warm-up
        raw.insert(raw.rows(raw_one, 10), 1)

        async def store_sequential() -> float:
            seconds = await _append_one_by_one(store, store_one[0].id, events, sizes.sqlite_sequential)
            totals["store"] += seconds
            return seconds

        async def raw_sequential() -> float:
            seconds = raw.insert(raw.rows(raw_one, sizes.sqlite_sequential), 1)
            totals["raw"] += seconds
            return seconds

        await _interleaved(sizes.rounds, raw_sequential, store_sequential)
        sequential_events = sizes.sqlite_sequential * sizes.rounds
        results = [
            Result(
                name="store.append.sqlite.1_session",
                unit="events/s",
                value=_per_second(sequential_events, totals["store"]),
                baseline=_per_second(sequential_events, totals["raw"]),
                better="higher",
                note="1 event per append, acknowledged after its commit; baseline: sqlite3 executemany, 1 row "
                "per transaction, WAL, synchronous=FULL, same payload",
            )
        ]
        results += await _append_sqlite_concurrently(ctx, store, raw, events, history=0)
        results.append(await _growth_sqlite(ctx))
        results += await _append_sqlite_concurrently(ctx, store, raw, events, history=sizes.sqlite_history)
        return results
    finally:
        raw.close()
        await store.close()


async def _append_sqlite_concurrently(
    ctx: Context, store: Store, raw: _RawSqliteAppender, events: list[NewEvent], *, history: int
) -> list[Result]:
    """(b) Many sessions at once, one asyncio task each: the store's writer commits whatever queued up as one
    group. The baseline inserts in batches of the size the group commit actually achieved (counted from the
    writer's COMMITs), not a fixed 100: 100 is only the upper bound (every session with one append in flight),
    and comparing with it would mix up two questions, how much each event costs the store and how well the
    groups fill. The second one has its own figure.

    `history`: the events each session holds before the appends are timed (0: new sessions). What SQLite does
    per event depends on it: the events of new sessions share the pages of the events' indexes, which a
    commit then writes once for all of them; once each session holds a page or more of its own, every event
    of a group changes pages of its own. The store's own work per event is the same either way."""
    sizes = ctx.sizes
    sessions_n, per_session = sizes.concurrent_sessions, sizes.sqlite_per_session
    prefix = f"concurrent-{history}"
    store_many = await _sessions(store, f"{prefix}-store", sessions_n)
    raw_many = await _sessions(store, f"{prefix}-raw", sessions_n)
    floor_many = await _sessions(store, f"{prefix}-floor", sessions_n)
    if history:
        ctx.say(f"SQLite: {sessions_n} x 3 sessions are given {history} events each")
        for session in store_many:
            await store.append(session.id, events * history)
        raw.insert(raw.rows([*raw_many, *floor_many], history), sessions_n)
    held = f"sessions holding {history} events each" if history else "new sessions"
    ctx.say(f"SQLite: {sessions_n} {held} x {per_session} concurrent appends x {sizes.rounds} rounds, each way")
    totals = {"store": 0.0, "raw": 0.0, "floor": 0.0}
    grouped = {"events": 0, "commits": 0}
    batch = [sessions_n]
    # The writer's own count of its commits (a statement tracer on its connection would run Python code
    # for every row of every statement, on the writer's thread, and slow down what it measures).
    counts: list[int] | None = getattr(store, "_group_counts", None)

    async def store_concurrent(*, warm_up: bool = False) -> float:
        each = 2 if warm_up else per_session
        before = list(counts) if counts is not None else None
        seconds = await _append_concurrently(store, [s.id for s in store_many], events, each)
        commits = counts[0] - before[0] if counts is not None and before is not None else 0
        if commits:
            batch[0] = max(1, round(sessions_n * each / commits))
            if not warm_up:
                grouped["events"] += sessions_n * each
                grouped["commits"] += commits
        if not warm_up:
            totals["store"] += seconds
        return seconds

    async def raw_concurrent() -> float:
        seconds = raw.insert(raw.rows(raw_many, per_session), batch[0])
        totals["raw"] += seconds
        return seconds

    async def floor_concurrent() -> float:
        seconds = raw.insert(raw.rows(floor_many, per_session), batch[0], counters=True)
        totals["floor"] += seconds
        return seconds

    await store_concurrent(warm_up=True)
    await _interleaved(sizes.rounds, raw_concurrent, store_concurrent, floor_concurrent)
    concurrent_events = sessions_n * per_session * sizes.rounds
    if grouped["commits"]:
        achieved = grouped["events"] / grouped["commits"]
        batch_note = f"group commit averaged {achieved:.1f} events/commit; baseline: executemany in batches of it"
    else:
        achieved = float(sessions_n)
        batch_note = f"commits not countable; baseline: executemany in batches of {sessions_n} (upper bound)"
    variant = "history" if history else ""
    note = f"{sessions_n} asyncio tasks, {held}, 1 event per append; {batch_note}; WAL, synchronous=FULL"
    floor_note = (
        f"the floor: executemany of the events in batches of the store's groups, each with one UPDATE of its "
        f"sessions' rows (last seq, activity time), {held}, WAL, synchronous=FULL; baseline: the events alone"
    )
    results = [
        _concurrent_append("sqlite", sessions_n, concurrent_events, totals, note, variant=variant),
        _concurrent_append("sqlite", sessions_n, concurrent_events, totals, floor_note, side="floor", variant=variant),
    ]
    if grouped["commits"] and not history:
        results.append(_events_per_commit("sqlite", sessions_n, achieved))
    return results


# -- database growth: SQLite --------------------------------------------------------------------------------

_NOTES = "The file holds the agent's notes for the next step of the plan; it lists what was tried and what failed. "


def _ten_tool_turn(n: int, rnd: random.Random) -> list[Write]:
    """The writes of one 10-tool turn as the runtime commits them (one per model response, one per tool
    result), with their events and model-layer messages; tool results of 0.3-1.6 KB."""
    turn_id = TurnId(new_id("trn"))
    stamp = "2026-12-01T07:00:00Z"

    def write(events: list[Any], messages: list[dict[str, Any]]) -> Write:
        return Write("", [NewEvent(event, turn_id=turn_id) for event in events], messages=messages)

    prompt = f"please do step {n}"
    writes = [
        write(
            [TurnStarted(trigger="input", attempt=1, model="test:model"), UserMessage(text=prompt)],
            [{"kind": "request", "parts": [{"part_kind": "user-prompt", "content": prompt, "timestamp": stamp}]}],
        )
    ]
    for i in range(10):
        output = _NOTES * rnd.randint(3, 15)
        args = {"path": f"notes/{n}/{i}.md", "limit": 200}
        call_id = f"call_{n}_{i}"
        usage = Usage(input_tokens=1000 + i, output_tokens=50, requests=1)
        writes.append(
            write(
                [
                    CompletionStarted(request_index=i, model="test:model"),
                    CompletionFinished(request_index=i, model="test:model", usage=usage, finish_reason="tool_call"),
                    ToolCall(tool_call_id=call_id, tool_name="read_file", input=args),
                ],
                [
                    {
                        "kind": "response",
                        "parts": [
                            {"part_kind": "tool-call", "tool_name": "read_file", "args": args, "tool_call_id": call_id}
                        ],
                        "usage": {"input_tokens": 1000 + i, "output_tokens": 50},
                        "model_name": "test:model",
                        "timestamp": stamp,
                    }
                ],
            )
        )
        writes.append(
            write(
                [ToolResult(tool_call_id=call_id, tool_name="read_file", output=output)],
                [
                    {
                        "kind": "request",
                        "parts": [
                            {
                                "part_kind": "tool-return",
                                "tool_name": "read_file",
                                "content": output,
                                "tool_call_id": call_id,
                                "timestamp": stamp,
                            }
                        ],
                    }
                ],
            )
        )
    answer = _NOTES * 3
    usage = Usage(input_tokens=2000, output_tokens=80, requests=1)
    writes.append(
        write(
            [
                CompletionFinished(request_index=10, model="test:model", usage=usage, finish_reason="stop"),
                AssistantMessage(text=answer),
                TurnEnded(outcome="completed"),
            ],
            [
                {
                    "kind": "response",
                    "parts": [{"part_kind": "text", "content": answer}],
                    "model_name": "test:model",
                    "timestamp": stamp,
                }
            ],
        )
    )
    return writes


def _file_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, path.with_name(path.name + "-wal")) if p.exists())


async def _growth_sqlite(ctx: Context) -> Result:
    """How much the database file grows for the payload it stores: sessions running 10-tool turns at once."""
    sessions_n, turns = max(1, ctx.sizes.concurrent_sessions // 10), max(2, ctx.sizes.sqlite_per_session)
    path = ctx.workdir / "growth.db"
    _remove_database(path)
    url = f"sqlite:///{path}?synchronous=full"
    ctx.say(f"SQLite: file growth over {sessions_n} sessions x {turns} 10-tool turns")
    store = await connect_store(url)
    try:
        ids = [
            (await store.create_session(SessionDraft(name=f"growth-{n}", role="bench"))).id for n in range(sessions_n)
        ]
    finally:
        await store.close()  # checkpoints and removes the WAL: the start is the main file alone
    start = _file_bytes(path)
    payload = 0
    rnd = random.Random(7)
    store = await connect_store(url)
    try:

        async def run(session_id: str, writes: list[Write]) -> None:
            nonlocal payload
            for write in writes:
                await store.write(Write(session_id, write.events, messages=write.messages))
                payload += sum(len(PAYLOAD_ADAPTER.dump_json(new.payload)) for new in write.events)
                payload += sum(len(json.dumps(message, separators=(",", ":"))) for message in write.messages)

        for n in range(turns):
            await asyncio.gather(*(run(session_id, _ten_tool_turn(n, rnd)) for session_id in ids))
    finally:
        await store.close()
    grown = _file_bytes(path) - start
    return Result(
        name="store.growth.sqlite",
        unit="bytes",
        value=float(grown),
        baseline=float(payload),
        better="lower",
        target=Target("ratio", "<=", 1.5),
        note=f"database file growth (main file, WAL checkpointed at close) over {sessions_n} sessions x {turns} "
        "10-tool turns run at once; baseline: the payload it stores (event payload JSON + compact messages JSON)",
    )


# -- durable append: PostgreSQL ---------------------------------------------------------------------------


def _unreachable(url: str, default_port: int) -> str | None:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or default_port
    try:
        with socket.create_connection((host, port), timeout=2):
            return None
    except OSError as error:
        return f"{parts.scheme} at {host}:{port} is not reachable ({error})"


async def append_postgres(ctx: Context) -> list[Result]:
    """Durable appends on PostgreSQL: one session in sequence, then many at once; one transaction per append."""
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

    base_url = ctx.postgres_url
    schema = f"aw_bench_{uuid.uuid4().hex[:12]}"
    try:
        async with await psycopg.AsyncConnection.connect(base_url, autocommit=True, connect_timeout=5) as admin:
            await admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    except psycopg.OperationalError as error:
        raise Skip(f"cannot use PostgreSQL at {urlsplit(base_url).netloc} ({str(error).strip()})") from None
    separator = "&" if "?" in base_url else "?"
    url = f"{base_url}{separator}options={quote(f'-csearch_path={schema}')}"
    insert = _EVENT_INSERT.replace("?", "%s")
    sizes = ctx.sizes
    try:
        store = await connect_store(url)
        try:
            payload = sample_payload()
            payload_json = PAYLOAD_ADAPTER.dump_json(payload).decode()
            events = [NewEvent(payload)]
            seqs: dict[str, int] = {}

            def rows(sessions: Sequence[SessionRecord], per_session: int) -> list[tuple[Any, ...]]:
                now = datetime.now(UTC)
                out: list[tuple[Any, ...]] = []
                for _ in range(per_session):
                    for session in sessions:
                        seq = seqs[session.id] = seqs.get(session.id, 0) + 1
                        out.append(
                            (
                                new_id("evt"),
                                session.id,
                                seq,
                                now,
                                None,
                                session.conversation_id,
                                payload_json,
                                _PAYLOAD_TYPE,
                            )
                        )
                return out

            # (a) One session, sequential: the baseline is one connection, one transaction per row.
            store_one, raw_one = (
                await _sessions(store, "sequential-store", 1),
                await _sessions(store, "sequential-raw", 1),
            )
            ctx.say(f"PostgreSQL: {sizes.postgres_sequential} sequential appends x {sizes.rounds} rounds, each way")
            totals = {"store": 0.0, "raw": 0.0}
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:

                async def raw_sequential(count: int = sizes.postgres_sequential, *, warm_up: bool = False) -> float:
                    todo = rows(raw_one, count)
                    start = time.perf_counter()
                    for row in todo:
                        async with connection.transaction(), connection.cursor() as cursor:
                            await cursor.executemany(insert, [row])
                    seconds = time.perf_counter() - start
                    if not warm_up:
                        totals["raw"] += seconds
                    return seconds

                async def store_sequential() -> float:
                    seconds = await _append_one_by_one(store, store_one[0].id, events, sizes.postgres_sequential)
                    totals["store"] += seconds
                    return seconds

                await raw_sequential(10, warm_up=True)
                await _append_one_by_one(store, store_one[0].id, events, 10)
                await _interleaved(sizes.rounds, raw_sequential, store_sequential)
            sequential_events = sizes.postgres_sequential * sizes.rounds
            results = [
                Result(
                    name="store.append.postgres.1_session",
                    unit="events/s",
                    value=_per_second(sequential_events, totals["store"]),
                    baseline=_per_second(sequential_events, totals["raw"]),
                    better="higher",
                    note="1 event per append and transaction; baseline: psycopg executemany, 1 row per transaction",
                )
            ]

            # (b) Many sessions at once, one asyncio task each: the store groups the appends that queue up
            # while a transaction commits into the next one. The baseline inserts in transactions of the
            # group size the store achieved (counted by the store), one after the other on one connection,
            # as the store's groups are.
            sessions_n, per_session = sizes.concurrent_sessions, sizes.postgres_per_session
            store_many = await _sessions(store, "concurrent-store", sessions_n)
            raw_many = await _sessions(store, "concurrent-raw", sessions_n)
            floor_many = await _sessions(store, "concurrent-floor", sessions_n)
            ctx.say(
                f"PostgreSQL: {sessions_n} sessions x {per_session} concurrent appends x {sizes.rounds} rounds, "
                "each way"
            )
            totals = {"store": 0.0, "raw": 0.0, "floor": 0.0}
            counts: list[int] | None = getattr(store, "_group_counts", None)
            grouped = {"groups": 0, "writes": 0}
            batch = [sessions_n]
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:

                async def raw_concurrent(
                    each: int = per_session, *, warm_up: bool = False, counters: bool = False
                ) -> float:
                    todo = rows(floor_many if counters else raw_many, each)
                    start = time.perf_counter()
                    for index in range(0, len(todo), batch[0]):
                        chunk = todo[index : index + batch[0]]
                        async with connection.transaction(), connection.cursor() as cursor:
                            await cursor.executemany(insert, chunk)
                            if counters:  # the floor: the sessions' rows moved on too
                                last = _last_seqs(chunk)
                                at = chunk[0][3]
                                await cursor.execute(_PG_COUNTERS_UPDATE, [at, at, list(last), list(last.values())])
                    seconds = time.perf_counter() - start
                    if not warm_up:
                        totals["floor" if counters else "raw"] += seconds
                    return seconds

                async def floor_concurrent() -> float:
                    return await raw_concurrent(counters=True)

                async def store_concurrent(each: int = per_session, *, warm_up: bool = False) -> float:
                    before = list(counts) if counts is not None else None
                    seconds = await _append_concurrently(store, [s.id for s in store_many], events, each)
                    if counts is not None and before is not None and counts[0] > before[0]:
                        groups, writes = counts[0] - before[0], counts[1] - before[1]
                        batch[0] = max(1, round(writes / groups))
                        if not warm_up:
                            grouped["groups"] += groups
                            grouped["writes"] += writes
                    if not warm_up:
                        totals["store"] += seconds
                    return seconds

                await store_concurrent(2, warm_up=True)
                await raw_concurrent(2, warm_up=True)
                await _interleaved(sizes.rounds, raw_concurrent, store_concurrent, floor_concurrent)
            if grouped["groups"]:
                achieved = grouped["writes"] / grouped["groups"]
                batch_note = f"the store averaged {achieved:.1f} appends per transaction; baseline: psycopg "
                batch_note += "executemany in transactions of that size, one connection"
            else:
                achieved = 1.0
                batch_note = "groups not countable; baseline: psycopg executemany, 1 row per transaction"
            concurrent_events = sessions_n * per_session * sizes.rounds
            note = f"{sessions_n} asyncio tasks, 1 event per append; {batch_note}"
            results.append(_concurrent_append("postgres", sessions_n, concurrent_events, totals, note))
            results.append(
                _concurrent_append(
                    "postgres",
                    sessions_n,
                    concurrent_events,
                    totals,
                    "the floor: psycopg executemany of the events in transactions of the store's group size, each "
                    "with one UPDATE of its sessions' rows (last seq, activity time); baseline: the events alone",
                    side="floor",
                )
            )
            if grouped["groups"]:
                results.append(_events_per_commit("postgres", sessions_n, achieved))
            return results
        finally:
            await store.close()
    finally:
        async with await psycopg.AsyncConnection.connect(base_url, autocommit=True) as admin:
            await admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


# -- cached read databases --------------------------------------------------------------------------------


def _remove_database(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)


async def _cached_database(ctx: Context, name: str, what: str, build: Callable[[Path], Awaitable[None]]) -> Path:
    """The cached database `name`, built by `build` the first time (into a scratch name, renamed when done,
    so an interrupted build is never taken for a finished one)."""
    ctx.cache_dir.mkdir(parents=True, exist_ok=True)
    path = ctx.cache_dir / name
    if path.exists():
        return path
    ctx.say(f"building {what} once (cached as {path.name})")
    scratch = path.with_name(path.name + ".building")
    _remove_database(scratch)
    start = time.perf_counter()
    await build(scratch)
    scratch.rename(path)
    ctx.say(f"built {path.name} in {time.perf_counter() - start:.1f} s")
    return path


@contextlib.contextmanager
def _bulk_connection(path: Path) -> Iterator[sqlite3.Connection]:
    connection = sqlite3.connect(path, isolation_level=None)
    # A cache that is rebuilt when lost: no need to survive a power cut while it is written.
    connection.execute("PRAGMA synchronous = OFF")
    try:
        yield connection
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()


# -- tail read --------------------------------------------------------------------------------------------


async def _build_tail(path: Path, sessions_n: int, per_session: int) -> None:
    # The store creates the schema and the sessions; the events go straight into its events table, in
    # exactly the form its append writes them (same columns, payload JSON, time text), which is much faster
    # than a million appends and reads back the same.
    store = await connect_store(f"sqlite:///{path}")
    try:
        sessions = await _sessions(store, "tail", sessions_n)
    finally:
        await store.close()
    template = PAYLOAD_ADAPTER.dump_json(sample_payload(0)).decode()
    tag = "call_00000000"
    start = datetime.now(UTC) - timedelta(days=1)

    def fill() -> None:
        with _bulk_connection(path) as connection:
            for session in sessions:
                rows = [
                    (
                        new_id("evt"),
                        session.id,
                        seq,
                        _utc_text(start + timedelta(milliseconds=seq)),
                        None,
                        session.conversation_id,
                        template.replace(tag, f"call_{seq:08d}"),
                        _PAYLOAD_TYPE,
                    )
                    for seq in range(1, per_session + 1)
                ]
                connection.execute("BEGIN")
                connection.executemany(_EVENT_INSERT, rows)
                connection.execute("UPDATE sessions SET last_seq = ? WHERE id = ?", (per_session, session.id))
                connection.execute("COMMIT")

    await asyncio.to_thread(fill)


async def tail_sqlite(ctx: Context) -> list[Result]:
    """`read_events(session, after_seq=random, limit=50)` in a large store, against the same query by hand."""
    sizes = ctx.sizes
    per_session = sizes.tail_events // sizes.tail_sessions
    name = f"tail-v{SCHEMA_VERSION}-{sizes.tail_events}-{sizes.tail_sessions}.db"
    path = await _cached_database(
        ctx,
        name,
        f"the {sizes.tail_events:,}-event database",
        lambda scratch: _build_tail(scratch, sizes.tail_sessions, per_session),
    )
    store = await connect_store(f"sqlite:///{path}")
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("PRAGMA query_only = ON")
    try:
        sessions = [row[0] for row in raw.execute("SELECT id FROM sessions WHERE last_seq > 0 ORDER BY id")]
        rng = random.Random(42)
        picks = [
            (rng.choice(sessions), rng.randint(0, max(per_session - _TAIL_LIMIT, 0)))
            for _ in range(sizes.tail_samples + 50)
        ]
        query = (
            "SELECT id, session_id, seq, at, turn_id, conversation_id, payload FROM events "
            "WHERE session_id = ? AND seq > ? ORDER BY seq ASC LIMIT ?"
        )
        ctx.say(f"tail: {sizes.tail_samples} reads of {_TAIL_LIMIT} events each way, {sizes.tail_events:,} events")
        store_ms: list[float] = []
        raw_ms: list[float] = []
        for index, (session_id, after_seq) in enumerate(picks):
            # Alternate which goes first, so neither always finds the pages the other just read in cache.
            for turn in (index % 2, 1 - index % 2):
                if turn == 0:
                    start = time.perf_counter()
                    events = await store.read_events(session_id, after_seq=after_seq, limit=_TAIL_LIMIT)
                    elapsed = time.perf_counter() - start
                    if len(events) != min(_TAIL_LIMIT, per_session - after_seq):
                        raise RuntimeError(f"read_events returned {len(events)} events after seq {after_seq}")
                    if index >= 50:
                        store_ms.append(elapsed * 1000)
                else:
                    start = time.perf_counter()
                    raw.execute(query, (session_id, after_seq, _TAIL_LIMIT)).fetchall()
                    elapsed = time.perf_counter() - start
                    if index >= 50:
                        raw_ms.append(elapsed * 1000)
    finally:
        raw.close()
        await store.close()
    note = (
        f"{sizes.tail_events:,} events over {sizes.tail_sessions} sessions, random cursor, {len(store_ms)} reads; "
        "baseline: the same SELECT with sqlite3, rows left undecoded"
    )
    return [
        Result(
            "store.tail.sqlite.p50",
            "ms",
            percentile(store_ms, 50),
            percentile(raw_ms, 50),
            "lower",
            Target("value", "<=", 1.0),
            note,
        ),
        Result("store.tail.sqlite.p99", "ms", percentile(store_ms, 99), percentile(raw_ms, 99), "lower", None, note),
    ]


# -- keyset listing ---------------------------------------------------------------------------------------

_STATUS_WEIGHTS: Final[dict[SessionStatus, int]] = {
    "idle": 30,
    "running": 10,
    "awaiting_input": 5,
    "completed": 40,
    "failed": 8,
    "cancelled": 5,
    "interrupted": 2,
}
_ROLES: Final = ("chat", "coder", "reviewer", "researcher", "planner", "digest", "triage", "writer", "ops", "qa")
_LIST_FILTER: Final = SessionFilter(status=["running", "awaiting_input", "failed"], role=["chat", "coder"])
_SESSION_COLUMNS: Final = tuple(SessionRecord.model_fields)
# The listing as one would write it by hand against the schema: newest first after the boss and the live
# sessions (the schema keeps `live` as a column, and the tenth of a second of the activity, with an index in
# this order; the exact time orders the sessions within a tenth), and the keyset as a row-value comparison,
# which the index scan starts from.
_HAND_WHERE: Final = "status IN (?, ?, ?) AND role IN (?, ?) AND deleted_at IS NULL"
_HAND_ORDER: Final = "ORDER BY boss DESC, live DESC, active_tenth DESC, last_active_at DESC, id DESC LIMIT ?"
_HAND_FIRST: Final = f"SELECT {', '.join(_SESSION_COLUMNS)} FROM sessions WHERE {_HAND_WHERE} {_HAND_ORDER}"
_HAND_AFTER: Final = (
    f"SELECT {', '.join(_SESSION_COLUMNS)} FROM sessions WHERE {_HAND_WHERE} "
    f"AND (boss, live, active_tenth, last_active_at, id) < (?, ?, ?, ?, ?) {_HAND_ORDER}"
)
_HAND_PARAMS: Final = ("running", "awaiting_input", "failed", "chat", "coder")


async def _build_sessions(path: Path, count: int) -> None:
    # Sessions go straight into the store's sessions table (with a conversation each), as create_session
    # writes them; the store itself only creates the schema.
    store = await connect_store(f"sqlite:///{path}")
    await store.close()
    rng = random.Random(7)
    statuses = list(_STATUS_WEIGHTS)
    weights = list(_STATUS_WEIGHTS.values())
    now = datetime.now(UTC)

    def fill() -> None:
        sessions: list[tuple[Any, ...]] = []
        conversations: list[tuple[Any, ...]] = []
        for index in range(count):
            role = rng.choice(_ROLES)
            created = now - timedelta(seconds=rng.uniform(3600, 90 * 86400))
            active = created + timedelta(seconds=rng.uniform(0, 3600))
            deleted = _utc_text(active) if rng.random() < 0.05 else None
            session_id, conversation_id = new_id("ses"), new_id("cnv")
            sessions.append(
                (
                    session_id,
                    f"{role}-{index:07d}",
                    role,
                    rng.choices(statuses, weights)[0],
                    "chat",
                    1 if index == 0 else 0,
                    f"{index % 500}:bot",
                    _utc_text(created),
                    _utc_text(active),
                    _utc_text(active),
                    deleted,
                    conversation_id,
                )
            )
            conversations.append((conversation_id, session_id, _utc_text(created)))
        with _bulk_connection(path) as connection:
            connection.execute("BEGIN")
            connection.executemany(
                "INSERT INTO sessions (id, name, role, status, source, boss, scope, created_at, updated_at, "
                "last_active_at, deleted_at, conversation_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                sessions,
            )
            connection.executemany(
                "INSERT INTO conversations (id, session_id, started_at) VALUES (?, ?, ?)", conversations
            )
            connection.execute("COMMIT")
            connection.execute("ANALYZE")  # as a long-lived database would have (`PRAGMA optimize`)

    await asyncio.to_thread(fill)


def _hand_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """The listing's key at a row (boss, live, the activity time, id); `_tenth_key` puts the tenth in."""
    column = _SESSION_COLUMNS.index
    live = row[column("deleted_at")] is None and row[column("status")] not in TERMINAL_STATUSES
    return (row[column("boss")], int(live), row[column("last_active_at")], row[column("id")])


def _tenth_key(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """A SQLite listing's key (`_hand_key`) with the tenth of a second of its time (`active_tenth`) before it."""
    boss, live, moment, session_id = key
    return (boss, live, moment[:21], moment, session_id)


async def list_sqlite(ctx: Context) -> list[Result]:
    """`list_sessions(SessionFilter(status=..., role=...), limit=20)`: the first page and a later one."""
    sizes = ctx.sizes
    path = await _cached_database(
        ctx,
        f"sessions-v{SCHEMA_VERSION}-{sizes.list_sessions}.db",
        f"the {sizes.list_sessions:,}-session database",
        lambda scratch: _build_sessions(scratch, sizes.list_sessions),
    )
    store = await connect_store(f"sqlite:///{path}")
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("PRAGMA query_only = ON")
    try:
        # Walk to the later page once each way, keeping the cursor (store) and the key (by hand) to reach it.
        cursor: str | None = None
        key: tuple[Any, ...] | None = None
        later = 1
        for number in range(1, sizes.list_later_page):
            page = await store.list_sessions(_LIST_FILTER, limit=_PAGE_SIZE, cursor=cursor)
            hand = _hand_page(raw, key)[:_PAGE_SIZE]
            if [s.id for s in page.items] != [row[0] for row in hand]:
                raise RuntimeError(f"list_sessions and the hand-written query disagree on page {number}")
            if page.next_cursor is None:
                break
            cursor, key, later = page.next_cursor, _hand_key(hand[-1]), number + 1
        ctx.say(
            f"list: {sizes.list_samples} listings of pages 1 and {later} each way, {sizes.list_sessions:,} sessions"
        )

        async def store_page(at: str | None) -> float:
            start = time.perf_counter()
            await store.list_sessions(_LIST_FILTER, limit=_PAGE_SIZE, cursor=at)
            return (time.perf_counter() - start) * 1000

        def hand_page(at: tuple[Any, ...] | None) -> float:
            start = time.perf_counter()
            _hand_page(raw, at)
            return (time.perf_counter() - start) * 1000

        timings: dict[str, list[float]] = {"store-first": [], "hand-first": [], "store-later": [], "hand-later": []}
        for index in range(sizes.list_samples + 10):
            keep = index >= 10  # the first few warm the caches
            for turn in (index % 2, 1 - index % 2):
                if turn == 0:
                    first, later_ms = await store_page(None), await store_page(cursor)
                    if keep:
                        timings["store-first"].append(first)
                        timings["store-later"].append(later_ms)
                else:
                    first, later_ms = hand_page(None), hand_page(key)
                    if keep:
                        timings["hand-first"].append(first)
                        timings["hand-later"].append(later_ms)
    finally:
        raw.close()
        await store.close()
    note = (
        f"{sizes.list_sessions:,} sessions, status in 3 of 7 and role in 2 of 10, {_PAGE_SIZE} per page, "
        f"{sizes.list_samples} listings; baseline: the keyset query by hand with sqlite3, rows left undecoded"
    )
    results: list[Result] = []
    for page_name, label in (("first", "first_page"), ("later", f"page_{later}")):
        store_ms, hand_ms = timings[f"store-{page_name}"], timings[f"hand-{page_name}"]
        results.append(
            Result(
                f"store.list.sqlite.{label}.p50",
                "ms",
                percentile(store_ms, 50),
                percentile(hand_ms, 50),
                "lower",
                Target("value", "<=", 20.0),
                note,
            )
        )
        results.append(
            Result(
                f"store.list.sqlite.{label}.p99",
                "ms",
                percentile(store_ms, 99),
                percentile(hand_ms, 99),
                "lower",
                None,
                note,
            )
        )
    return results


def _hand_page(connection: sqlite3.Connection, after: tuple[Any, ...] | None) -> list[tuple[Any, ...]]:
    # One row past the page, as the store reads, to know whether another page follows.
    if after is None:
        return connection.execute(_HAND_FIRST, (*_HAND_PARAMS, _PAGE_SIZE + 1)).fetchall()
    return connection.execute(_HAND_AFTER, (*_HAND_PARAMS, *_tenth_key(after), _PAGE_SIZE + 1)).fetchall()
