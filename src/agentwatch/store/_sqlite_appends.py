"""Many append-only writes at once, for the SQLite writer: one statement per table for a whole group.

An append-only `Write` (events, usage, messages; see `appends_only`) changes its session only by counters:
the seqs it takes, its tokens and cost, its activity time. Applied one by one, each needs an UPDATE that
hands out its seqs and an INSERT per table, every statement a trip through sqlite3 (and a hand-over of the
GIL). Here the whole run of them is applied with one SELECT of the sessions they name, the seqs and totals
worked out in Python, then one `executemany` per table.

That is only correct because the writer holds SQLite's write lock (BEGIN IMMEDIATE) for the whole group: no
other connection, in this process or another, can change a session row between the SELECT and the UPDATE,
so the `last_seq` read is the one to count up from. A write that cannot be applied (unknown session, status
not the one expected) fails alone, with the error the one-by-one path gives; anything the database itself
refuses makes the caller fall back to applying the writes one by one, each in its own SAVEPOINT.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

from agentwatch.errors import Conflict, NotFound
from agentwatch.events import Usage, new_id
from agentwatch.store._sql import EVENT_INSERT, Dialect, event_row, in_list, stored_events, utc_text
from agentwatch.store._sqlstore import no_session, unexpected_status
from agentwatch.store.records import Write

__all__ = ["apply_appends"]

_IN_LIST_MAX: Final = 500
"""Session ids per SELECT (well under SQLite's limit on parameters)."""
_SESSION_UPDATE: Final = (
    "UPDATE sessions SET last_seq = ?, updated_at = ?, last_active_at = COALESCE(?, last_active_at), "
    "tokens = ?, cost_usd = ? WHERE id = ?"
)
_USAGE_COLUMNS: Final = ("id", "session_id", "turn_id", "run_id", "role", "model", "at", *Usage.model_fields)
_USAGE_INSERT: Final = (
    f"INSERT INTO usage_ledger ({', '.join(_USAGE_COLUMNS)}) VALUES ({', '.join('?' * len(_USAGE_COLUMNS))})"
)
_MESSAGE_INSERT: Final = "INSERT INTO messages (conversation_id, idx, body) VALUES (?, ?, ?)"


class _Session:
    """A session's row as the group leaves it: the counters grow write by write, in the group's order."""

    __slots__ = ("conversation_id", "cost", "last_seq", "role", "status", "tokens", "touched", "written")

    def __init__(self, row: tuple[Any, ...]) -> None:
        _, self.last_seq, self.conversation_id, self.role, self.status, self.tokens, self.cost = row
        self.touched = False
        self.written = False


def apply_appends(
    connection: sqlite3.Connection, writes: Sequence[Write], now: datetime, dialect: Dialect
) -> list[Any]:
    """Apply append-only `writes` in order, inside the caller's transaction; per write, its stored events or
    the error that failed it alone (nothing of it is written).

    Raises when the database refuses a statement: then part of the group may be written, and the caller
    rolls back to before the call.
    """
    sessions = _read_sessions(connection, list(dict.fromkeys(write.session_id for write in writes)))
    at = utc_text(now)
    outcomes: list[Any] = []
    event_rows: list[tuple[Any, ...]] = []
    usage_rows: list[tuple[Any, ...]] = []
    messages: dict[str, list[Any]] = {}
    for write in writes:
        session_id = write.session_id
        session = sessions.get(session_id)
        if session is None:
            outcomes.append(NotFound(no_session(session_id)))
            continue
        if write.expect_status is not None and session.status not in write.expect_status:
            outcomes.append(Conflict(unexpected_status(session_id, session.status, write.expect_status)))
            continue
        session.written = True
        session.touched = session.touched or write.touch
        conversation_id = session.conversation_id
        if write.usage:
            cost = 0.0
            for entry in write.usage:
                usage = entry.usage
                usage_rows.append(
                    (
                        new_id("use"),
                        session_id,
                        entry.turn_id,
                        entry.run_id,
                        entry.role or session.role,
                        entry.model,
                        utc_text(entry.at or now),
                        *usage.model_dump().values(),
                    )
                )
                session.tokens += usage.total_tokens
                cost += usage.cost_usd or 0.0
            if cost:
                session.cost += cost  # one addition per write, as the one-by-one path adds it
        if write.messages:
            messages.setdefault(conversation_id, []).extend(write.messages)
        first_seq = session.last_seq + 1
        session.last_seq += len(write.events)
        events = stored_events(write, conversation_id, first_seq, now)
        event_rows.extend(event_row(dialect, event, at) for event in events)
        outcomes.append(events)

    connection.executemany(
        _SESSION_UPDATE,
        [
            (session.last_seq, at, at if session.touched else None, session.tokens, session.cost, session_id)
            for session_id, session in sessions.items()
            if session.written
        ],
    )
    if usage_rows:
        connection.executemany(_USAGE_INSERT, usage_rows)
    if messages:
        _insert_messages(connection, messages)
    if event_rows:
        connection.executemany(EVENT_INSERT, event_rows)
    return outcomes


def _read_sessions(connection: sqlite3.Connection, session_ids: list[str]) -> dict[str, _Session]:
    sessions: dict[str, _Session] = {}
    for start in range(0, len(session_ids), _IN_LIST_MAX):
        condition, params = in_list("id", session_ids[start : start + _IN_LIST_MAX])
        sql = f"SELECT id, last_seq, conversation_id, role, status, tokens, cost_usd FROM sessions WHERE {condition}"
        for row in connection.execute(sql, params):
            sessions[row[0]] = _Session(row)
    return sessions


def _insert_messages(connection: sqlite3.Connection, messages: dict[str, list[Any]]) -> None:
    """Append each conversation's messages after its last one, in the group's order."""
    conversation_ids = list(messages)
    last: dict[str, int] = {}
    for start in range(0, len(conversation_ids), _IN_LIST_MAX):
        condition, params = in_list("conversation_id", conversation_ids[start : start + _IN_LIST_MAX])
        sql = f"SELECT conversation_id, MAX(idx) FROM messages WHERE {condition} GROUP BY conversation_id"
        last.update((row[0], int(row[1])) for row in connection.execute(sql, params))
    rows = [
        (conversation_id, last.get(conversation_id, -1) + 1 + index, json.dumps(message))
        for conversation_id, bodies in messages.items()
        for index, message in enumerate(bodies)
    ]
    connection.executemany(_MESSAGE_INSERT, rows)
