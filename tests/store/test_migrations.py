"""Upgrades: a database written at schema 1 (built here from the 0001 migration and rows in its layout, as an
older agentwatch left it) opens with this code, migrates, and reads back everything it held."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import pytest

from agentwatch.events import PAYLOAD_ADAPTER, AssistantMessage, NewEvent, UserMessage
from agentwatch.store import SCHEMA_VERSION, SessionFilter, Write, connect_store
from agentwatch.store._migrations import migrations

Execute = Callable[[str, Sequence[Any]], object]

_T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def _write_schema_1(execute: Execute, dialect: Literal["sqlite", "postgres"], time: Callable[[datetime], Any]) -> None:
    """Schema 1 and two sessions in its layout: events, messages, usage, an observer ref, an inbox (an input
    and an observer's report waiting, one input taken)."""
    execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)",
        (),
    )
    for statement in migrations(dialect)[0].statements:
        execute(statement, ())
    execute("INSERT INTO schema_migrations VALUES (?, ?, ?)", (1, "initial", _T0.isoformat()))
    for n in (1, 2):
        session_id, conversation_id = f"ses_old{n}", f"cnv_old{n}"
        execute(
            "INSERT INTO sessions (id, name, role, status, source, created_at, updated_at, last_active_at, "
            "last_seq, conversation_id, tokens, is_observer) VALUES (?, ?, 'chat', 'idle', 'api', ?, ?, ?, ?, ?, 7, ?)",
            (session_id, f"old-{n}", time(_T0), time(_T0), time(_T0), 3, conversation_id, n == 2),
        )
        execute(
            "INSERT INTO conversations (id, session_id, started_at) VALUES (?, ?, ?)",
            (conversation_id, session_id, time(_T0)),
        )
        payloads: list[UserMessage | AssistantMessage] = [
            UserMessage(text=f"hello {n}"),
            AssistantMessage(text="hi\u00e9"),
            UserMessage(text="bye"),
        ]
        for seq, payload in enumerate(payloads, 1):
            execute(
                "INSERT INTO events (session_id, seq, id, type, turn_id, conversation_id, at, payload) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    session_id,
                    seq,
                    f"evt_old{n}_{seq}",
                    payload.type,
                    "trn_1",
                    conversation_id,
                    time(_T0 + timedelta(seconds=seq)),
                    PAYLOAD_ADAPTER.dump_json(payload).decode(),
                ),
            )
        for idx in range(2):
            execute(
                "INSERT INTO messages (conversation_id, idx, body) VALUES (?, ?, ?)",
                (conversation_id, idx, json.dumps({"kind": "request", "n": idx, "session": n})),
            )
        execute(
            "INSERT INTO usage_ledger (id, session_id, role, input_tokens, output_tokens, cache_read_tokens, "
            "cache_write_tokens, reasoning_tokens, requests, at) VALUES (?, ?, 'chat', 5, 2, 0, 0, 0, 1, ?)",
            (f"use_old{n}", session_id, time(_T0)),
        )
    execute(
        "INSERT INTO observer_refs (observed_session_id, observer_type, observer_session_id, updated_at) "
        "VALUES ('ses_old1', 'loop-guard', 'ses_old2', ?)",
        (time(_T0),),
    )
    inbox = [
        ("inp_old1", '{"kind":"api"}', None),
        ("inp_old2", '{"kind":"observer","ref":"observer:loop-guard"}', None),
        ("inp_old3", None, _T0),
    ]
    for input_id, origin, taken_at in inbox:
        execute(
            "INSERT INTO inbox (id, session_id, text, origin, created_at, taken_at) "
            "VALUES (?, 'ses_old1', 'x', ?, ?, ?)",
            (input_id, origin, time(_T0), None if taken_at is None else time(taken_at)),
        )
    execute("UPDATE sessions SET pending_inputs = 2 WHERE id = 'ses_old1'", ())  # schema 1 counted reports in
    execute(  # a person stopped it (kept as the pairing's tombstone from schema 13 on)
        "INSERT INTO observer_refs (observed_session_id, observer_type, observer_session_id, stopped, stopped_at, "
        "updated_at) VALUES ('ses_old2', 'critic', 'ses_gone', ?, ?, ?)",
        (True, time(_T0), time(_T0)),
    )


def _schema_1_database(store_url: str, backend: str) -> None:
    if backend == "sqlite":
        connection = sqlite3.connect(Path(store_url.removeprefix("sqlite:///")), isolation_level=None)
        connection.execute("BEGIN")
        _write_schema_1(
            connection.execute,
            "sqlite",
            lambda moment: moment.isoformat(timespec="microseconds"),
        )
        connection.execute("COMMIT")
        connection.close()
        return
    import psycopg

    with psycopg.connect(store_url) as pg:
        _write_schema_1(
            lambda sql, params: pg.execute(sql.replace("?", "%s"), params),
            "postgres",
            lambda moment: moment,
        )


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_a_schema_1_database_upgrades_and_reads_back_whole(store_url: str, backend: str) -> None:
    _schema_1_database(store_url, backend)

    store = await connect_store(store_url)
    try:
        info = await store.info()
        assert (info.schema_version, info.sessions, info.events) == (SCHEMA_VERSION, 2, 6)
        for n in (1, 2):
            session = await store.get_session(f"ses_old{n}")
            assert (session.name, session.last_seq, session.tokens, session.is_observer) == (f"old-{n}", 3, 7, n == 2)
            events = await store.read_events(session.id)
            assert [(event.id, event.seq, event.at) for event in events] == [
                (f"evt_old{n}_{seq}", seq, _T0 + timedelta(seconds=seq)) for seq in (1, 2, 3)
            ]
            assert [event.payload for event in events] == [
                UserMessage(text=f"hello {n}"),
                AssistantMessage(text="hi\u00e9"),
                UserMessage(text="bye"),
            ]
            assert await store.read_messages(f"cnv_old{n}") == [
                {"kind": "request", "n": 0, "session": n},
                {"kind": "request", "n": 1, "session": n},
            ]
            assert (await store.usage_totals([session.id]))[session.id].input_tokens == 5
            in_conversation = await store.read_events(session.id, conversation_id=f"cnv_old{n}", after_seq=1)
            assert [event.seq for event in in_conversation] == [2, 3]
            newer = await store.read_events_backward(session.id, limit=2, types=["message.user"])
            assert [event.seq for event in newer] == [3, 1]
        # From schema 14 on, a report waiting in the inbox is counted apart from the inputs.
        upgraded = await store.get_session("ses_old1")
        assert (upgraded.pending_inputs, upgraded.pending_reports) == (1, 1)
        assert (await store.get_session("ses_old2")).pending_reports == 0
        # From schema 15 on, an input says which run's work it is: the old ones say none.
        taken = await store.get_input("ses_old1", "inp_old3")
        assert (taken.run_id, taken.taken_at) == (None, _T0)
        ref = await store.get_observer_ref("ses_old1")
        assert ref is not None and ref.observer_session_id == "ses_old2"
        assert await store.get_observer_tombstone("ses_old1", "loop-guard") is None
        stone = await store.get_observer_tombstone("ses_old2", "critic")
        assert stone is not None and (stone.observer_session_id, stone.stopped, stone.stopped_at) == (
            "ses_gone",
            True,
            _T0,
        )
        # The activity listings page through the upgraded rows, by the tenth of a second the upgrade computed.
        first = await store.list_sessions(SessionFilter(), sort="newest", limit=1)
        second = await store.list_sessions(SessionFilter(), sort="newest", limit=1, cursor=first.next_cursor)
        assert [s.id for s in first.items + second.items] == ["ses_old2", "ses_old1"]
        assert second.next_cursor is None

        # And the upgraded database takes new writes where the old ones stopped.
        appended = await store.append("ses_old1", [NewEvent(UserMessage(text="again"))])
        assert [event.seq for event in appended] == [4]
        assert await store.acquire_lease("ses_old1", "engine-a", 60)
        # A new conversation after the upgrade: each conversation reads its own events.
        [cleared] = await store.write(
            Write("ses_old1", [NewEvent(UserMessage(text="fresh"))], new_conversation="clear")
        )
        assert cleared.seq == 5 and cleared.conversation_id != "cnv_old1"
        assert [e.seq for e in await store.read_events("ses_old1", conversation_id="cnv_old1")] == [1, 2, 3, 4]
        assert await store.read_events("ses_old1", conversation_id=cleared.conversation_id) == [cleared]
    finally:
        await store.close()


async def test_on_sqlite_schema_7_computes_live_without_a_list_and_the_indexes_still_agree(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _schema_1_database(f"sqlite:///{path}", "sqlite")
    statuses = ["idle", "running", "awaiting_input", "paused", "cancelled", "completed", "failed", "interrupted"]
    connection = sqlite3.connect(path, isolation_level=None)
    for n, (status, deleted) in enumerate((s, d) for s in statuses for d in (False, True)):
        connection.execute(
            "INSERT INTO sessions (id, name, role, status, source, created_at, updated_at, last_active_at, "
            "last_seq, conversation_id, tokens, is_observer, deleted_at) "
            "VALUES (?, ?, 'chat', ?, 'api', ?, ?, ?, 0, ?, 0, 0, ?)",
            (
                f"ses_{n}",
                f"s-{n}",
                status,
                _T0.isoformat(),
                _T0.isoformat(),
                _T0.isoformat(),
                f"cnv_{n}",
                _T0.isoformat() if deleted else None,
            ),
        )
    connection.close()

    store = await connect_store(f"sqlite:///{path}")
    await store.close()

    connection = sqlite3.connect(path)
    try:
        [(schema,)] = connection.execute("SELECT sql FROM sqlite_master WHERE name = 'sessions'").fetchall()
        assert "NOT IN" not in schema and "status <> 'interrupted'" in schema
        # The listing indexes were built with the old expression: they must hold what the new one computes.
        assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        live = dict(
            connection.execute(
                "SELECT status || (deleted_at IS NOT NULL), live FROM sessions WHERE name LIKE 's-%'"
            ).fetchall()
        )
        assert live == {f"{s}{int(d)}": int(s in statuses[:4] and not d) for s in statuses for d in (False, True)}
        by_index = connection.execute(
            "SELECT count(*) FROM sessions INDEXED BY sessions_by_status WHERE boss = 0 AND live = 1"
        ).fetchone()
        assert by_index == (4 + 2,)  # the four open statuses, and the two idle sessions of schema 1
    finally:
        connection.close()
