"""What only the SQLite backend does: its URL forms, options and pragmas, and how its writer groups writes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from datetime import datetime
from itertools import groupby, pairwise
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentwatch.errors import Conflict, InvalidArgument, NotFound, StoreError
from agentwatch.events import NewEvent, Usage, UserMessage
from agentwatch.store import (
    SessionDraft,
    SessionFilter,
    SessionPatch,
    SessionRecord,
    Store,
    UsageEntry,
    Write,
    connect_store,
    open_store,
)
from agentwatch.store import sqlite as sqlite_module
from agentwatch.store._appends import apply_appends
from agentwatch.store._sql import Dialect, Tx
from agentwatch.store.sqlite import SqliteStore
from tests.runtime.support import until

from .databases import sqlite_url


@contextlib.contextmanager
def traced(store: SqliteStore, callback: Callable[[str], object]) -> Iterator[None]:
    """`callback` gets every statement run on the writer's connection while the block runs (SQLite's trace)."""
    store._writer_connection.set_trace_callback(callback)
    try:
        yield
    finally:
        store._writer_connection.set_trace_callback(None)


@contextlib.contextmanager
def writer_statements(store: SqliteStore) -> Iterator[list[str]]:
    """The statements the store's writer runs while the block runs."""
    statements: list[str] = []
    with traced(store, statements.append):
        yield statements


async def chats(store: Store, count: int) -> list[SessionRecord]:
    """`count` new chat sessions, `s0`, `s1`, ..."""
    return [await store.create_session(SessionDraft(name=f"s{i}", role="chat")) for i in range(count)]


def _hi() -> list[NewEvent]:
    return [NewEvent(UserMessage(text="hi"))]


def session_updates(statements: list[str]) -> list[str]:
    """The `UPDATE sessions` statements among `statements`, each once: SQLite's trace names a statement again for
    each trigger it fires (the one that keeps a session's tenth of a second of activity, see below)."""
    return [statement for statement, _ in groupby(s for s in statements if s.startswith("UPDATE sessions"))]


async def test_a_relative_url_creates_the_parent_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    async with open_store("sqlite:///.agentwatch/nested/agentwatch.db") as store:
        assert isinstance(store, SqliteStore)
        assert store.path == Path(".agentwatch/nested/agentwatch.db")
        await store.create_session(SessionDraft(name="nova", role="chat"))
        info = await store.info()
    assert info.path_bytes is not None
    assert info.path_bytes > 0


async def test_memory_store_reads_its_own_writes() -> None:
    async with open_store("sqlite://:memory:") as store:
        session = await store.create_session(SessionDraft(name="nova", role="chat"))
        [event] = await store.append(session.id, [NewEvent(UserMessage(text="hi"))])
        assert await store.read_events(session.id) == [event]
        assert (await store.info()).path_bytes is None


async def test_a_sqlite_library_too_old_for_the_stores_sql_is_refused_before_the_file_is_touched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 31, 1))
    monkeypatch.setattr(sqlite3, "sqlite_version", "3.31.1")
    path = tmp_path / "old.db"
    with pytest.raises(StoreError, match=r"3\.31\.1; agentwatch needs 3\.35\.0 or newer.*PostgreSQL"):
        await connect_store(f"sqlite:///{path}")
    assert not path.exists()


@pytest.mark.parametrize(("option", "level"), [("", 2), ("?synchronous=normal", 1), ("?synchronous=FULL", 2)])
async def test_writer_runs_in_wal_mode_with_the_chosen_synchronous_level(
    tmp_path: Path, option: str, level: int
) -> None:
    async with open_store(f"sqlite:///{tmp_path}/a.db{option}") as store:
        assert isinstance(store, SqliteStore)
        # The pragmas are per connection: ask the writer's own.
        assert await store._write(lambda tx: tx.fetch("PRAGMA synchronous")) == [(level,)]
        assert await store._write(lambda tx: tx.fetch("PRAGMA journal_mode")) == [("wal",)]
        assert await store._write(lambda tx: tx.fetch("PRAGMA foreign_keys")) == [(1,)]


async def test_a_new_file_gets_8_kib_pages_and_an_existing_one_keeps_its_own(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path}/new.db") as store:
        assert isinstance(store, SqliteStore)
        assert await store._write(lambda tx: tx.fetch("PRAGMA page_size")) == [(8192,)]
    old = tmp_path / "old.db"
    async with open_store(f"sqlite:///{old}") as store:
        session = await store.create_session(SessionDraft(name="nova", role="chat"))
        await store.append(session.id, [NewEvent(UserMessage(text="kept"))])
    connection = sqlite3.connect(old, isolation_level=None)  # rebuilt with SQLite's 4 KiB pages
    connection.execute("PRAGMA journal_mode = DELETE")
    connection.execute("PRAGMA page_size = 4096")
    connection.execute("VACUUM")
    assert connection.execute("PRAGMA page_size").fetchone() == (4096,)
    connection.close()
    async with open_store(f"sqlite:///{old}") as store:
        assert isinstance(store, SqliteStore)
        assert await store._write(lambda tx: tx.fetch("PRAGMA page_size")) == [(4096,)]
        assert [event.payload for event in await store.read_events(session.id)] == [UserMessage(text="kept")]
        await store.append(session.id, [NewEvent(UserMessage(text="more"))])
        assert (await store.get_session(session.id)).last_seq == 2


async def test_a_write_alone_in_its_transaction_needs_no_savepoint_and_a_failed_one_leaves_nothing(
    tmp_path: Path,
) -> None:
    async with open_store(f"sqlite:///{tmp_path}/a.db") as store:
        assert isinstance(store, SqliteStore)
        session = await store.create_session(SessionDraft(name="nova", role="chat"))
        with writer_statements(store) as statements:
            await store.write(Write(session.id, [NewEvent(UserMessage(text="1"))], session=SessionPatch(last_text="1")))
            with pytest.raises(Conflict):
                await store.write(
                    Write(session.id, [NewEvent(UserMessage(text="2"))], expect_status=["failed"], messages=[{"a": 1}])
                )
        assert not [s for s in statements if s.startswith(("SAVEPOINT", "RELEASE"))]
        assert not [s for s in statements if s.startswith("SELECT id, name")]  # the patched row is not read back
        assert [s for s in statements if s in ("BEGIN IMMEDIATE", "COMMIT", "ROLLBACK")] == [
            "BEGIN IMMEDIATE",
            "COMMIT",
            "BEGIN IMMEDIATE",
            "ROLLBACK",
        ]
        [event] = await store.read_events(session.id)
        assert event.payload == UserMessage(text="1")
        after = await store.get_session(session.id)
        assert (after.last_seq, after.last_text) == (1, "1")
        assert await store.read_messages(after.conversation_id) == []


async def test_a_write_that_does_not_touch_its_session_leaves_the_activity_time_out_of_its_update(
    tmp_path: Path,
) -> None:
    async with open_store(f"sqlite:///{tmp_path}/a.db") as store:
        assert isinstance(store, SqliteStore)
        session = await store.create_session(SessionDraft(name="nova", role="chat"))
        with writer_statements(store) as statements:
            await store.write(Write(session.id, [NewEvent(UserMessage(text="quiet"))], touch=False))
            quiet = await store.get_session(session.id)
            await store.write(Write(session.id, [NewEvent(UserMessage(text="loud"))]))
        loud = await store.get_session(session.id)
        assert (quiet.last_seq, quiet.last_active_at) == (1, session.last_active_at)
        assert loud.last_seq == 2 and loud.last_active_at > session.last_active_at
        updates = session_updates(statements)
        assert ["last_active_at" in s for s in updates] == [False, True]


async def _count_tenth_moves(store: SqliteStore) -> None:
    """Count, on the writer's connection, each time a session's `active_tenth` is set (`_tenth_moves`)."""

    async def install(tx: Tx) -> None:
        await tx.execute("CREATE TEMP TABLE tenth_moves (session_id TEXT)")
        await tx.execute(
            "CREATE TEMP TRIGGER tenth_moved AFTER UPDATE OF active_tenth ON sessions "
            "BEGIN INSERT INTO tenth_moves VALUES (NEW.id); END"
        )

    await store._write(install)


async def _tenth_moves(store: SqliteStore) -> int:
    async def count(tx: Tx) -> int:
        [(moves,)] = await tx.fetch("SELECT count(*) FROM tenth_moves")
        return int(moves)

    return await store._write(count)


def _tenths_kept(path: Path) -> list[tuple[str, str]]:
    """Each session's `active_tenth` and its `last_active_at`, read with plain sqlite3."""
    connection = sqlite3.connect(path)
    try:
        return connection.execute("SELECT active_tenth, last_active_at FROM sessions ORDER BY id").fetchall()
    finally:
        connection.close()


async def test_appends_within_a_tenth_of_a_second_leave_the_activity_listings_indexes_alone(tmp_path: Path) -> None:
    # The listings' indexes hold the tenth of a second of the activity: an append whose time stays in its
    # session's tenth sets no indexed column, so SQLite leaves both indexes alone; one in a new tenth moves it.
    path = tmp_path / "a.db"
    async with open_store(f"sqlite:///{path}") as store:
        assert isinstance(store, SqliteStore)
        session = await store.create_session(SessionDraft(name="nova", role="chat"))
        await _count_tenth_moves(store)
        for n in range(20):
            await store.append(session.id, [NewEvent(UserMessage(text=str(n)))])
        times = [session.last_active_at] + [event.at for event in await store.read_events(session.id)]
        moves = await _tenth_moves(store)
    tenths = [moment.isoformat(timespec="microseconds")[:21] for moment in times]
    moved = sum(before != after for before, after in pairwise(tenths))
    assert moved < 20, "20 appends in a row spanned 20 tenths of a second: this machine is too slow"
    assert moves == moved
    assert _tenths_kept(path) == [(tenths[-1], times[-1].isoformat(timespec="microseconds"))]


async def test_every_write_that_moves_the_activity_keeps_its_tenth(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    async with open_store(f"sqlite:///{path}") as store:
        first = await store.create_session(SessionDraft(name="nova", role="chat"))
        second = await store.create_session(SessionDraft(name="vega", role="chat"))
        await asyncio.sleep(0.1)  # a later tenth for what follows
        await store.write(Write(first.id, [NewEvent(UserMessage(text="hi"))], session=SessionPatch(status="running")))
        await asyncio.gather(*(store.append(s.id, [NewEvent(UserMessage(text="again"))]) for s in (first, second)))
        await store.append(first.id, [NewEvent(UserMessage(text="last"))])
        await store.write(Write(second.id, [NewEvent(UserMessage(text="quiet"))], touch=False))
        newest = await store.list_sessions(SessionFilter(), limit=10)
        oldest = await store.list_sessions(SessionFilter(), sort="oldest", limit=10)
    kept = _tenths_kept(path)
    assert len(kept) == 2 and all(tenth == moment[:21] for tenth, moment in kept)
    assert [s.id for s in newest.items] == [first.id, second.id]
    assert [s.id for s in oldest.items] == [second.id, first.id]


async def test_writes_after_close_are_refused(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path}/a.db") as store:
        pass
    with pytest.raises(StoreError, match="is closed; open it again"):
        await store.create_session(SessionDraft(name="nova", role="chat"))


async def _one_group(store: SqliteStore, calls: list[Coroutine[Any, Any, Any]]) -> tuple[list[Any], list[str]]:
    """Run `calls` so the writer takes them as ONE group: it is held on a gate while they queue up. Returns
    their outcomes (errors included) and the statements the writer ran for them."""
    entered, gate = threading.Event(), threading.Event()

    async def hold(tx: Tx) -> None:
        entered.set()
        gate.wait(10)  # blocks the writer thread itself, so everything below queues behind it

    held = asyncio.ensure_future(store._write(hold))
    # The writer runs `hold` alone: a call queued before it took `hold` would join hold's group.
    assert await asyncio.to_thread(entered.wait, 10)
    tasks = [asyncio.ensure_future(call) for call in calls]
    await until(lambda: store._queue.qsize() >= len(calls))  # every call has queued its write for the writer
    assert store._queue.qsize() == len(calls)
    with writer_statements(store) as statements:
        gate.set()
        await held
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert statements[0] == "COMMIT"  # hold's own (it wrote nothing); then the calls' group
    return outcomes, statements[1:]


async def test_one_group_applies_its_appends_together_and_keeps_failures_apart(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path}/a.db") as store:
        assert isinstance(store, SqliteStore)
        a = await store.create_session(SessionDraft(name="a", role="chat"))
        b = await store.create_session(SessionDraft(name="b", role="chat"))
        quiet = await store.create_session(SessionDraft(name="quiet", role="chat"))
        gone = await store.create_session(SessionDraft(name="gone", role="chat"))
        await store.reap([gone.id])
        usage = UsageEntry(usage=Usage(input_tokens=5, output_tokens=2, cost_usd=0.25))

        def text(label: str) -> list[NewEvent]:
            return [NewEvent(UserMessage(text=label))]

        outcomes, statements = await _one_group(
            store,
            [
                store.append(a.id, text("a1")),
                store.write(Write(b.id, events=text("b1"), usage=[usage], messages=[{"m": 1}])),
                store.append(gone.id, text("lost")),  # reaped: fails alone
                store.write(Write(a.id, events=text("a2"), expect_status=["running"])),  # idle: fails alone
                store.write(Write(b.id, events=text("b2"), session=SessionPatch(last_text="b2"))),  # one by one
                store.write(Write(b.id, events=[*text("b3"), *text("b4")], usage=[usage], messages=[{"m": 2}])),
                store.append("ses_unknown", text("lost")),  # unknown: fails alone
                store.append(a.id, text("a3")),
                store.write(Write(quiet.id, events=text("q1"), touch=False)),
            ],
        )
        assert sum(statement == "COMMIT" for statement in statements) == 1  # one group, one commit
        assert any(statement.startswith("INSERT INTO events") for statement in statements)
        a1, b1, lost, a2, b2, b34, unknown, a3, q1 = outcomes
        assert isinstance(lost, NotFound) and gone.id in str(lost)
        assert isinstance(unknown, NotFound) and "ses_unknown" in str(unknown)
        assert isinstance(a2, Conflict) and "'idle'" in str(a2)
        assert [event.seq for event in a1 + a3] == [1, 2]
        assert [event.seq for event in b1 + b2 + b34] == [1, 2, 3, 4]  # the patch kept its place in b's order
        assert await store.read_events(a.id) == a1 + a3
        assert await store.read_events(b.id) == b1 + b2 + b34
        stored_b = await store.get_session(b.id)
        assert (stored_b.last_seq, stored_b.last_text, stored_b.tokens, stored_b.cost_usd) == (4, "b2", 14, 0.5)
        assert (await store.get_session(a.id)).last_seq == 2
        stored_quiet = await store.get_session(quiet.id)
        assert stored_quiet.last_seq == 1
        assert stored_quiet.last_active_at == quiet.last_active_at  # a write with touch=False is no activity
        assert stored_quiet.updated_at == q1[0].at
        assert await store.read_messages(b1[0].conversation_id or "") == [{"m": 1}, {"m": 2}]
        assert (await store.usage_totals([b.id]))[b.id].cost_usd == 0.5


async def test_a_group_the_database_refuses_is_applied_write_by_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def refuse(tx: Tx, dialect: Dialect, writes: Sequence[Write], now: datetime, *known: Any) -> list[Any]:
        await apply_appends(tx, dialect, writes, now, *known)  # half done, then refused: all must roll back
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(sqlite_module, "apply_appends", refuse)
    async with open_store(f"sqlite:///{tmp_path}/a.db") as store:
        assert isinstance(store, SqliteStore)
        a = await store.create_session(SessionDraft(name="a", role="chat"))
        outcomes, _ = await _one_group(
            store,
            [
                store.append(a.id, [NewEvent(UserMessage(text="1"))]),
                store.append("ses_unknown", [NewEvent(UserMessage(text="lost"))]),
                store.append(a.id, [NewEvent(UserMessage(text="2")), NewEvent(UserMessage(text="3"))]),
            ],
        )
        first, unknown, second = outcomes
        assert isinstance(unknown, NotFound)
        assert [event.seq for event in first + second] == [1, 2, 3]
        assert await store.read_events(a.id) == first + second
        assert (await store.get_session(a.id)).last_seq == 3


async def test_a_group_of_appends_only_takes_no_savepoint(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path}/a.db") as store:
        assert isinstance(store, SqliteStore)
        a = await store.create_session(SessionDraft(name="a", role="chat"))
        b = await store.create_session(SessionDraft(name="b", role="chat"))
        outcomes, statements = await _one_group(
            store, [store.append(session.id, [NewEvent(UserMessage(text="hi"))]) for session in (a, b, a)]
        )
        assert [event.seq for events in outcomes for event in events] == [1, 1, 2]
        assert sum(statement == "COMMIT" for statement in statements) == 1
        assert not [statement for statement in statements if "SAVEPOINT" in statement or "RELEASE" in statement]
        # The totals did not change: the row update leaves them out.
        assert not [statement for statement in statements if statement.startswith("UPDATE") and "tokens" in statement]


async def test_a_group_writes_its_session_rows_a_few_statements_at_a_time(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path}/a.db") as store:
        assert isinstance(store, SqliteStore)
        sessions = await chats(store, 7)
        spent = [UsageEntry(usage=Usage(input_tokens=3, output_tokens=2, cost_usd=0.25))]
        # Rows of four shapes: three touched sessions (one of them written twice), two touched and priced,
        # one neither, one priced only.
        writes = [Write(s.id, [NewEvent(UserMessage(text="hi"))]) for s in sessions[:3]]
        writes.append(Write(sessions[0].id, [NewEvent(UserMessage(text="again"))]))
        writes += [Write(s.id, [NewEvent(UserMessage(text="paid"))], usage=spent) for s in sessions[3:5]]
        writes.append(Write(sessions[5].id, [NewEvent(UserMessage(text="quiet"))], touch=False))
        writes.append(Write(sessions[6].id, [NewEvent(UserMessage(text="quiet"))], usage=spent, touch=False))
        outcomes, statements = await _one_group(store, [store.write(write) for write in writes])
        assert not [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
        assert sum(statement == "COMMIT" for statement in statements) == 1
        updates = session_updates(statements)
        # Three touched rows: a statement of two rows and one of one; two priced: one statement; the lone
        # rows of the other two shapes: one plain statement each. (The trace shows the values in place.)
        assert sorted(statement.count("('ses_") for statement in updates) == [0, 0, 1, 2, 2]
        after = [await store.get_session(s.id) for s in sessions]
        assert [s.last_seq for s in after] == [2, 1, 1, 1, 1, 1, 1]
        assert [(s.tokens, s.cost_usd) for s in after] == [(0, 0.0)] * 3 + [(5, 0.25)] * 2 + [(0, 0.0), (5, 0.25)]
        moved = [later.last_active_at > before.last_active_at for later, before in zip(after, sessions, strict=True)]
        assert moved == [True] * 5 + [False] * 2
        assert [event.seq for event in await store.read_events(sessions[0].id)] == [1, 2]


async def test_the_writer_waits_briefly_for_the_rest_of_a_group(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path}/a.db") as store:
        assert isinstance(store, SqliteStore)
    # The writer has stopped: its queue is driven by hand, and its wait for the rest of a group too. A job that
    # arrives while the writer waits joins the group; a writer whose previous group was a lone job does not wait.
    first, late, closing = object(), object(), None
    waits: list[float] = []

    class Filled:
        """The writer's `_filled`, whose wait is played: the late job comes during the first one."""

        def clear(self) -> None:
            pass

        def wait(self, timeout: float) -> bool:
            waits.append(timeout)
            if len(waits) == 1:
                store._queue.put(late)  # type: ignore[arg-type]
                return True
            time.sleep(timeout)
            return False

    store._filled = Filled()  # type: ignore[assignment]
    store._queue.put(first)  # type: ignore[arg-type]
    assert store._collect(expected=1) == ([first], True)
    assert waits == []
    store._queue.put(first)  # type: ignore[arg-type]
    started = time.monotonic()
    assert store._collect(expected=3) == ([first, late], True)  # the third never came: it gave up
    assert time.monotonic() - started >= sqlite_module._GATHER_S
    assert len(waits) == 2 and all(0 < wait <= sqlite_module._GATHER_S for wait in waits)
    waits.clear()
    store._queue.put(first)  # type: ignore[arg-type]
    assert store._collect(expected=2) == ([first, late], True)  # it came while the writer waited: no more
    assert len(waits) == 1
    store._queue.put(first)  # type: ignore[arg-type]
    store._queue.put(first)  # type: ignore[arg-type]
    assert store._collect(expected=2) == ([first, first], True)  # as many as before: no wait
    store._queue.put(first)  # type: ignore[arg-type]
    store._queue.put(closing)
    assert store._collect(expected=3) == ([first], False)
    assert len(waits) == 1


async def test_the_writer_is_woken_once_the_group_it_waits_for_is_queued() -> None:
    """Once: it looked every 0.2 ms, waking up (and taking the GIL from the callers' loop) several times a
    group, and noticed a full group up to 0.2 ms late."""
    async with open_store("sqlite://:memory:") as store:
        assert isinstance(store, SqliteStore)
        store._queue.put(None)  # the writer stops: what is queued from here on stays queued
        await asyncio.to_thread(store._writer.join)
        store._awaited = 3  # as a writer does that waits for the rest of a group of three
        for _ in range(2):
            store._submit(lambda tx: tx.fetch("SELECT 1"), write=False)  # (an in-memory read queues for it)
            assert not store._filled.is_set()
        store._submit(lambda tx: tx.fetch("SELECT 1"), write=False)
        assert store._filled.is_set()


async def test_many_waiters_are_woken_a_few_per_loop_turn(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path}/a.db") as store:
        assert isinstance(store, SqliteStore)
        sessions = await chats(store, 100)
        done: list[int] = []
        turns: list[int] = []

        async def append(session_id: str) -> None:
            await store.append(session_id, [NewEvent(UserMessage(text="hi"))])
            done.append(len(turns))

        async def count_turns() -> None:
            while len(done) < len(sessions):
                turns.append(len(done))
                await asyncio.sleep(0)

        ticker = asyncio.ensure_future(count_turns())
        outcomes, _ = await _one_group(store, [append(session.id) for session in sessions])
        await ticker
        assert outcomes == [None] * len(sessions)
        # The 100 waiters of the one group did not all resume in the same loop turn: other tasks ran between.
        assert len(set(done)) > 1


async def test_a_new_store_is_private_to_its_owner_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "project" / ".agentwatch" / "agentwatch.db"
    previous = os.umask(0o002)  # the most permissive usual umask: group- and world-readable files
    try:
        async with open_store(sqlite_url(path)) as store:
            session = await store.create_session(SessionDraft(name="nova", role="chat"))
            await store.append(session.id, [NewEvent(UserMessage(text="a secret"))])
            files = {name: path.with_name(path.name + name) for name in ("", "-wal", "-shm")}
            assert all(file.exists() for file in files.values())
            modes = {name: stat.S_IMODE(file.stat().st_mode) for name, file in files.items()}
    finally:
        os.umask(previous)
    assert modes == {"": 0o600, "-wal": 0o600, "-shm": 0o600}
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o700


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_an_existing_folder_keeps_its_mode(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o755)
    async with open_store(sqlite_url(tmp_path / "agentwatch.db")):
        pass
    assert _mode(tmp_path) == 0o755
    assert _mode(tmp_path / "agentwatch.db") == 0o600


async def test_a_path_that_cannot_be_created_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="File name too long"):
        await connect_store(sqlite_url(tmp_path / ("x" * 300) / "agentwatch.db"))
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    with pytest.raises(StoreError, match="cannot open or create the database file"):
        await connect_store(sqlite_url(blocked / "agentwatch.db"))


async def test_the_writer_counts_appends_from_what_its_commits_left_and_rereads_after_any_other_write(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/a.db"
    async with open_store(url) as store, open_store(url) as other:
        assert isinstance(store, SqliteStore)
        session = await store.create_session(SessionDraft(name="nova", role="chat"))

        def text(label: str) -> list[NewEvent]:
            return [NewEvent(UserMessage(text=label))]

        def reads() -> int:
            count = sum(s.startswith("SELECT id, last_seq") for s in statements)
            statements.clear()
            return count

        with writer_statements(store) as statements:
            await store.append(session.id, text("1"))
            assert reads() == 1  # first append: the row is read
            await store.append(session.id, text("2"))
            assert reads() == 0  # the writer's own commit left its counters
            # Another connection (another process's store) appends: this writer reads the row again.
            [third] = await other.append(session.id, text("3"))
            assert third.seq == 3
            [fourth] = await store.append(session.id, text("4"))
            assert (fourth.seq, reads()) == (4, 1)
            # A write that is not append-only (it may change any row) makes the writer read again too.
            [fifth] = await store.write(Write(session.id, text("5"), session=SessionPatch(last_text="5")))
            [sixth] = await store.append(session.id, text("6"))
            assert (fifth.seq, sixth.seq) == (5, 6)
            assert reads() == 2
            # A refused append (its expected status is not the session's) leaves the counters as they were.
            with pytest.raises(Conflict):
                await store.write(Write(session.id, text("lost"), expect_status=["failed"]))
            [seventh] = await store.append(session.id, text("7"))
            assert seventh.seq == 7
            # The usage totals follow the appends that priced them.
            usage = UsageEntry(usage=Usage(input_tokens=5, output_tokens=2, cost_usd=0.25))
            await store.write(Write(session.id, text("8"), usage=[usage]))
            await store.write(Write(session.id, text("9"), usage=[usage]))
        stored = await other.get_session(session.id)
        assert (stored.last_seq, stored.tokens, stored.cost_usd) == (9, 14, 0.5)
        assert [event.seq for event in await other.read_events(session.id)] == list(range(1, 10))


async def test_a_session_reaped_by_another_connection_is_not_appended_to_from_remembered_counters(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/a.db"
    async with open_store(url) as store, open_store(url) as other:
        session = await store.create_session(SessionDraft(name="nova", role="chat"))
        await store.append(session.id, [NewEvent(UserMessage(text="1"))])
        await store.append(session.id, [NewEvent(UserMessage(text="2"))])
        await other.reap([session.id])
        with pytest.raises(NotFound):
            await store.append(session.id, [NewEvent(UserMessage(text="3"))])


async def test_the_writer_keeps_its_temporary_tables_in_memory(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path}/a.db") as store:
        assert isinstance(store, SqliteStore)
        assert await store._write(lambda tx: tx.fetch("PRAGMA temp_store")) == [(2,)]  # 2: MEMORY


async def test_a_group_without_appends_commits_without_looking_for_other_connections_writes(tmp_path: Path) -> None:
    # Such a group forgets every remembered counter anyway: asking SQLite whether another connection wrote
    # would be a statement for nothing at each commit (a turn's writes patch the session: all are such).
    async with open_store(f"sqlite:///{tmp_path}/a.db") as store:
        assert isinstance(store, SqliteStore)
        session = await store.create_session(SessionDraft(name="nova", role="chat"))
        with writer_statements(store) as statements:
            patched = Write(session.id, [NewEvent(UserMessage(text="1"))], session=SessionPatch(last_text="1"))
            [first] = await store.write(patched)
            assert not any(s.startswith("PRAGMA data_version") for s in statements)
            [second] = await store.append(session.id, [NewEvent(UserMessage(text="2"))])
            assert sum(s.startswith("PRAGMA data_version") for s in statements) == 1
        assert (first.seq, second.seq) == (1, 2)


async def test_a_session_patch_with_a_nul_in_the_session_id_is_refused_before_it_is_queued(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path}/a.db") as store:
        with pytest.raises(InvalidArgument, match="NUL"):
            await store.update_session("ses_\x00", SessionPatch(last_text="x"))


# -- a write that nothing could share a commit with: applied on its caller's thread --------------------------


@contextlib.contextmanager
def commit_threads(store: SqliteStore) -> Iterator[list[int]]:
    """The threads the writer's connection commits on while the block runs."""
    threads: list[int] = []

    def trace(statement: str) -> None:
        if statement == "COMMIT":
            threads.append(threading.get_ident())

    with traced(store, trace):
        yield threads


async def test_a_lone_write_commits_on_its_callers_thread_and_is_durable(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/a.db"
    async with open_store(url) as store:
        assert isinstance(store, SqliteStore)
        session = await store.create_session(SessionDraft(name="nova", role="chat"))
        with commit_threads(store) as threads:
            [event] = await store.append(session.id, [NewEvent(UserMessage(text="hi"))])
            patched = Write(session.id, [NewEvent(UserMessage(text="again"))], session=SessionPatch(last_text="x"))
            await store.write(patched)
        assert threads == [threading.get_ident()] * 2
    async with open_store(url) as reopened:  # committed for good, on the writer's connection as always
        assert [e.seq for e in await reopened.read_events(session.id)] == [event.seq, event.seq + 1]


async def test_a_write_that_may_touch_many_sessions_commits_on_the_writer_thread(tmp_path: Path) -> None:
    # Its size is not bounded by one session's: on the loop, a renewal of 1,000 leases held everything else up.
    async with open_store(f"sqlite:///{tmp_path}/a.db") as store:
        assert isinstance(store, SqliteStore)
        sessions = await chats(store, 3)
        ids = [s.id for s in sessions]
        for session_id in ids:
            assert await store.acquire_lease(session_id, "engine-a", 60)
        with commit_threads(store) as threads:
            assert set(await store.renew_leases("engine-a", ids, 60)) == set(ids)
            await store.create_session(SessionDraft(name="later", role="chat"))
            await store.append(sessions[0].id, _hi())  # one session's: at once
        assert len(threads) == 3
        assert threads[0] != threading.get_ident() and threads[1] != threading.get_ident()
        assert threads[2] == threading.get_ident()


async def test_appends_made_together_on_one_loop_share_one_commit_on_the_loop(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/a.db"
    async with open_store(url) as store:
        assert isinstance(store, SqliteStore)
        sessions = await chats(store, 5)
        with commit_threads(store) as threads:
            events = await asyncio.gather(*(store.append(s.id, _hi()) for s in sessions))
        # Each caller saw others ready to run, so each append was held for the loop's group; once the loop had
        # nothing else to run, the group was written there, in one commit.
        assert [e.seq for [e] in events] == [1] * 5
        assert threads == [threading.get_ident()]
    async with open_store(url) as reopened:
        assert [(await reopened.get_session(s.id)).last_seq for s in sessions] == [1] * 5


async def test_a_group_larger_than_the_loop_may_take_goes_to_the_writer_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_store(f"sqlite:///{tmp_path}/a.db") as store:
        assert isinstance(store, SqliteStore)
        sessions = await chats(store, 5)
        monkeypatch.setattr(sqlite_module, "_GROUP_HERE_S", 4 * sqlite_module._FIRST_GUESS_S)  # room for 4 of 5
        with commit_threads(store) as threads:
            events = await asyncio.gather(*(store.append(s.id, _hi()) for s in sessions))
        assert [e.seq for [e] in events] == [1] * 5
        assert len(threads) == 1 and threads[0] != threading.get_ident()


async def test_appends_on_a_loop_that_never_goes_idle_are_written_by_the_writer_thread(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path}/a.db") as store:
        assert isinstance(store, SqliteStore)
        sessions = await chats(store, 5)
        stop = False

        async def spin() -> None:  # always ready to run
            while not stop:
                await asyncio.sleep(0)

        spinner = asyncio.ensure_future(spin())
        try:
            with commit_threads(store) as threads:
                events = await asyncio.wait_for(asyncio.gather(*(store.append(s.id, _hi()) for s in sessions)), 10)
        finally:
            stop = True
            await spinner
        assert [e.seq for [e] in events] == [1] * 5
        assert threads and threading.get_ident() not in threads


async def test_a_write_after_held_appends_of_its_loop_is_applied_after_them(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path}/a.db") as store:
        assert isinstance(store, SqliteStore)
        a, b = await chats(store, 2)
        patched = Write(a.id, [NewEvent(UserMessage(text="patched"))], session=SessionPatch(last_text="patched"))
        with commit_threads(store) as threads:
            held = [asyncio.ensure_future(store.append(s.id, _hi())) for s in (a, b)]
            await asyncio.sleep(0)  # both appends are made (and held: each saw the other ready)
            [after] = await store.write(patched)
            first, _ = await asyncio.gather(*held)
        assert (first[0].seq, after.seq) == (1, 2)
        assert [e.payload.text for e in await store.read_events(a.id)] == ["hi", "patched"]  # type: ignore[union-attr]
        assert threads and threading.get_ident() not in threads  # the held appends went first, to the writer


async def test_closing_the_store_writes_the_appends_held_on_its_loops(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/a.db"
    store = await SqliteStore.open(url)
    sessions = await chats(store, 3)
    appends = [asyncio.ensure_future(store.append(s.id, _hi())) for s in sessions]
    await asyncio.sleep(0)  # made and held; the loop's group is not written yet
    assert store._held
    await store.close()
    assert [e.seq for [e] in await asyncio.gather(*appends)] == [1] * 3
    async with open_store(url) as reopened:
        assert [(await reopened.get_session(s.id)).last_seq for s in sessions] == [1] * 3


async def test_a_write_never_waits_on_the_loop_for_another_connections_lock(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/a.db"
    async with open_store(url) as store:
        assert isinstance(store, SqliteStore)
        session = await store.create_session(SessionDraft(name="nova", role="chat"))
        other = sqlite3.connect(tmp_path / "a.db", isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process's write, say
        try:
            with commit_threads(store) as threads:
                started = time.perf_counter()
                write = asyncio.ensure_future(store.append(session.id, [NewEvent(UserMessage(text="hi"))]))
                ticks = 0
                while time.perf_counter() - started < 0.2:
                    await asyncio.sleep(0.01)
                    ticks += 1
                assert not write.done()  # it waits for the lock, on the writer thread
                assert ticks >= 5  # the loop ran on meanwhile
                other.execute("COMMIT")
                [event] = await write
        finally:
            other.close()
        assert event.seq == 1
        assert len(threads) == 1 and threads[0] != threading.get_ident()
        # The writer's connection still waits for a lock the usual time (the look without waiting is undone).
        assert await store._write(lambda tx: tx.fetch("PRAGMA busy_timeout")) == [(5000,)]


async def test_a_task_writing_one_write_after_another_on_the_loop_still_lets_the_loop_run(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path}/a.db") as store:
        assert isinstance(store, SqliteStore)
        session = await store.create_session(SessionDraft(name="nova", role="chat"))
        ticks = 0
        stop = False

        async def tick() -> None:  # a timer: never ready to run when a write looks, until it is due
            nonlocal ticks
            while not stop:
                ticks += 1
                await asyncio.sleep(0.001)

        ticker = asyncio.ensure_future(tick())
        await asyncio.sleep(0.002)
        with commit_threads(store) as threads:
            started, before = time.perf_counter(), ticks
            for index in range(40):
                await store.append(session.id, [NewEvent(UserMessage(text=str(index)))])
            took, counted = time.perf_counter() - started, ticks - before
        stop = True
        await ticker
        assert threading.get_ident() in threads  # (some) writes ran on the loop
        # Each caller resumed in a later loop turn, where the due timer ran too: had the writes not yielded,
        # the ticker would have stood still for the whole run.
        assert counted >= 1 and counted >= min(5, took / 0.001 / 4)
        assert (await store.get_session(session.id)).last_seq == 40


# What a caller does next: submit a write to session 0 or 1 (patching it or not) without waiting, wait for all
# it submitted, or let the loop turn once.
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(min_value=0, max_value=1), st.booleans()),
        st.just(("wait",)),
        st.just(("yield",)),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=40, deadline=None)
@given(steps=_steps)
def test_writes_are_applied_in_the_order_queued_wherever_they_run(tmp_path_factory: Any, steps: list[Any]) -> None:
    """`writes_in_order`, with some writes applied on the caller's thread and others on the writer thread: each
    session's events are stored in the order their writes were made, with seqs 1, 2, 3, ..."""

    async def play() -> tuple[list[list[str]], list[list[str]]]:
        async with open_store(f"sqlite:///{tmp_path_factory.mktemp('order')}/a.db") as store:
            assert isinstance(store, SqliteStore)
            sessions = await chats(store, 2)
            made: list[list[str]] = [[], []]
            pending: list[asyncio.Future[Any]] = []
            for index, step in enumerate(steps):
                if step[0] == "write":
                    _, which, patched = step
                    text = f"w{index}"
                    made[which].append(text)
                    patch = SessionPatch(last_text=text) if patched else None
                    write = Write(sessions[which].id, [NewEvent(UserMessage(text=text))], session=patch)
                    pending.append(asyncio.ensure_future(store.write(write)))
                elif step[0] == "wait":
                    await asyncio.gather(*pending)
                    pending.clear()
                else:
                    await asyncio.sleep(0)
            await asyncio.gather(*pending)
            stored = [[e.payload.text for e in await store.read_events(s.id)] for s in sessions]  # type: ignore[union-attr]
            seqs = [[e.seq for e in await store.read_events(s.id)] for s in sessions]
            assert all(seq == list(range(1, len(seq) + 1)) for seq in seqs)
            return made, stored

    made, stored = asyncio.run(play())
    assert stored == made
