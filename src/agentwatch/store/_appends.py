"""The one write path of events: the rows an append makes (events, usage, messages, the session's counters),
built by one function for every backend, for a single write and for a group of them.

`Appends` collects what the writes of one transaction add: `add` builds one write's rows against its
session's counters (`Counters`, read once per transaction under the session's lock), and `flush` writes
them, one statement per table, and each session's row once (whatever the number of writes and events it
got). Three callers share it:

- a write that only appends (events, usage, messages: `appends_only`), alone (`apply_appends` with one);
- a group of those, queued by concurrent callers and committed together (`apply_appends` with many: the
  SQLite writer's group commit, PostgreSQL's append queue);
- every other write (`EventMethods._apply`), which first applies its inbox, request and conversation
  changes, then adds its appends to the same `Appends` and the session patch to the same row update.

The counters are read under the session's lock (PostgreSQL: `FOR UPDATE`, sessions in id order so two
groups never deadlock; SQLite: the writer holds the database's write lock), so the seqs handed out are
contiguous whatever the number of writers, and the row is written with absolute values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from pydantic import JsonValue

from agentwatch.errors import Conflict, NotFound
from agentwatch.events import CompletionFinished, Event, Usage, new_id
from agentwatch.store._sql import (
    EVENT_INSERT,
    SESSION_JSON,
    Dialect,
    Tx,
    event_row,
    in_list,
    json_text,
    stored_events,
    to_params,
)
from agentwatch.store._sqlbase import no_session, unexpected_status
from agentwatch.store.records import Write

__all__ = ["Appends", "Counters", "apply_appends", "read_counters"]

_IN_LIST_MAX: Final = 500
"""Ids per `IN (...)` list (well under SQLite's limit on parameters)."""
_COUNTERS: Final = "SELECT id, last_seq, conversation_id, role, status, tokens, cost_usd FROM sessions"


_PG_SESSION_UPDATE: Final = (
    "UPDATE sessions SET last_seq = v.last_seq, updated_at = v.at, "
    "last_active_at = COALESCE(v.touched, sessions.last_active_at), tokens = v.tokens, cost_usd = v.cost "
    "FROM unnest(?::bigint[], ?::timestamptz[], ?::bigint[], ?::float8[], ?::timestamptz[], ?::text[]) "
    "AS v (last_seq, at, tokens, cost, touched, id) WHERE sessions.id = v.id"
)
_USAGE_COLUMNS: Final = ("id", "session_id", "turn_id", "run_id", "role", "model", "at", *Usage.model_fields)
_USAGE_INSERT: Final = (
    f"INSERT INTO usage_ledger ({', '.join(_USAGE_COLUMNS)}) VALUES ({', '.join('?' * len(_USAGE_COLUMNS))})"
)
_MESSAGE_INSERT: Final = "INSERT INTO message_rows (conversation_id, idx, body, event_seq) VALUES (?, ?, ?, ?)"


def _session_update(touched: bool, assignments: str = "") -> str:
    """The update of a session's row: its counters (parameters: last_seq, updated_at, tokens, cost_usd), its
    activity time when `touched` (one more), other `assignments` (their values next), then the id."""
    return (
        "UPDATE sessions SET last_seq = ?, updated_at = ?, tokens = ?, cost_usd = ?"
        + (", last_active_at = ?" if touched else "")
        + assignments
        + " WHERE id = ?"
    )


@dataclass(slots=True)
class Counters:
    """A session's row as the transaction leaves it: the counters grow write by write, in order."""

    id: str
    last_seq: int
    conversation_id: str
    role: str
    status: str
    tokens: int
    cost: float
    touched: bool = False
    written: bool = False
    changes: dict[str, Any] = field(default_factory=dict)
    """Other columns to set (a session patch, inbox and request counts), by the same row update."""


async def read_counters(tx: Tx, dialect: Dialect, session_ids: Sequence[str]) -> dict[str, Counters]:
    """The counters of the sessions that exist among `session_ids`, locked until the commit (PostgreSQL)."""
    wanted = sorted(set(session_ids))  # one lock order for every transaction: no deadlock between two groups
    counters: dict[str, Counters] = {}
    for start in range(0, len(wanted), _IN_LIST_MAX):
        chunk = wanted[start : start + _IN_LIST_MAX]
        if dialect.name == "postgres":  # one fixed text, whatever the number of ids
            condition, params = "id = ANY(?::text[])", [chunk]
        else:
            condition, params = in_list("id", chunk)
        sql = f"{_COUNTERS} WHERE {condition} ORDER BY id{dialect.for_update}"
        for row in await tx.fetch(sql, params):
            counters[row[0]] = Counters(row[0], int(row[1]), row[2], row[3], row[4], int(row[5]), float(row[6]))
    return counters


class Appends:
    """The rows the writes of one transaction append, built write by write, written by `flush`."""

    __slots__ = ("_at", "_dialect", "_events", "_messages", "_now", "_sessions", "_usage")

    def __init__(self, dialect: Dialect, now: datetime) -> None:
        self._dialect = dialect
        self._now = now
        self._at = dialect.time_param(now)
        self._events: list[tuple[Any, ...]] = []
        self._usage: list[tuple[Any, ...]] = []
        self._messages: dict[str, list[tuple[str | None, int | None]]] = {}
        self._sessions: dict[str, Counters] = {}

    def add(self, session: Counters, write: Write) -> list[Event]:
        """Build `write`'s events, ledger entries and messages, counting them into `session`; its events as
        they will be stored."""
        self._sessions[session.id] = session
        session.written = True
        session.touched = session.touched or write.touch
        if write.usage:
            cost = 0.0
            time_param = self._dialect.time_param
            for entry in write.usage:
                usage = entry.usage
                self._usage.append(
                    (
                        new_id("use"),
                        session.id,
                        entry.turn_id,
                        entry.run_id,
                        entry.role or session.role,
                        entry.model,
                        time_param(entry.at or self._now),
                        *usage.model_dump().values(),
                    )
                )
                session.tokens += usage.total_tokens
                cost += usage.cost_usd or 0.0
            if cost:
                session.cost += cost  # one addition per write, whatever the number of entries
        events: list[Event] = []
        if write.events:
            first_seq = session.last_seq + 1
            session.last_seq += len(write.events)
            events = stored_events(write, session.conversation_id, first_seq, self._now)
            self._events.extend(event_row(self._dialect, event, self._at) for event in events)
        if write.messages:
            rows = self._messages.setdefault(session.conversation_id, [])
            rows.extend(_message_rows(write.messages, events))
        return events

    async def flush(self, tx: Tx) -> None:
        """Write everything added: each session's row once, then the ledger, messages and events."""
        plain: dict[bool, list[tuple[Any, ...]]] = {True: [], False: []}
        for session in self._sessions.values():
            if not session.written:
                continue
            counters = (session.last_seq, self._at, session.tokens, session.cost)
            touched = (self._at,) if session.touched else ()
            if not session.changes:
                plain[session.touched].append((*counters, *touched, session.id))
                continue
            params = to_params(self._dialect, session.changes, SESSION_JSON)
            assignments = "".join(f", {column} = ?" for column in params)
            await tx.execute(
                _session_update(session.touched, assignments), [*counters, *touched, *params.values(), session.id]
            )
        if self._dialect.name == "postgres" and len(plain[True]) + len(plain[False]) > 1:
            # One statement with one array per column, whatever the number of rows: the server plans it once
            # and the driver parses one fixed text. (PostgreSQL leaves the indexes alone when the indexed
            # values stay the same, so the untouched rows can share the statement.)
            rows = [(*row[:4], row[4], row[5]) for row in plain[True]]
            rows += [(*row[:4], None, row[4]) for row in plain[False]]
            await tx.execute(_PG_SESSION_UPDATE, [list(column) for column in zip(*rows, strict=True)])
        else:
            # SQLite updates every index of a column the statement sets, changed or not: a row whose activity
            # time stays gets a statement that leaves it (and the two listing indexes holding it) alone.
            for moved, rows in plain.items():
                if rows:
                    await tx.execute_many(_session_update(moved), rows)
        if self._usage:
            await tx.execute_many(_USAGE_INSERT, self._usage)
        if self._messages:
            await self._flush_messages(tx)
        if self._events:
            await tx.execute_many(EVENT_INSERT, self._events)

    async def _flush_messages(self, tx: Tx) -> None:
        """Append each conversation's messages after its last one, in the order added. (One query for the
        last indexes first: an insert that finds its own index reads the table it writes, which SQLite
        answers through a temporary copy, measured slower.)"""
        conversation_ids = list(self._messages)
        last: dict[str, int] = {}
        for start in range(0, len(conversation_ids), _IN_LIST_MAX):
            condition, params = in_list("conversation_id", conversation_ids[start : start + _IN_LIST_MAX])
            sql = f"SELECT conversation_id, MAX(idx) FROM message_rows WHERE {condition} GROUP BY conversation_id"
            last.update((row[0], int(row[1])) for row in await tx.fetch(sql, params))
        json_param = self._dialect.json_param
        await tx.execute_many(
            _MESSAGE_INSERT,
            [
                (conversation_id, last.get(conversation_id, -1) + 1 + index, body and json_param(body), event_seq)
                for conversation_id, rows in self._messages.items()
                for index, (body, event_seq) in enumerate(rows)
            ],
        )


def _message_rows(messages: Sequence[JsonValue], events: Sequence[Event]) -> list[tuple[str | None, int | None]]:
    """The rows of a write's model messages: (body, None), or (None, seq) for a message that is the `response`
    of a completion.finished event of the same write, whose stored payload then holds it (read back through
    the `messages` view). A message with a non-finite number keeps its body: the payload's JSON writes such a
    number as null."""
    responses = [
        (event.seq, event.payload.response) for event in events if isinstance(event.payload, CompletionFinished)
    ]
    rows: list[tuple[str | None, int | None]] = []
    for message in messages:
        body = json_text(message)  # compact, once
        seq = next((seq for seq, response in responses if response == message), None) if responses else None
        if seq is not None and "NaN" not in body and "Infinity" not in body:
            rows.append((None, seq))
        else:
            rows.append((body, None))
    return rows


async def apply_appends(tx: Tx, dialect: Dialect, writes: Sequence[Write], now: datetime) -> list[Any]:
    """Apply append-only `writes` (see `appends_only`) in order, in the caller's transaction; per write, its
    stored events or the error that failed it alone (then nothing of it is written).

    Raises when the database refuses a statement: then part of the group may be written, and the caller
    rolls back (and may apply the writes one by one, each on its own).
    """
    sessions = await read_counters(tx, dialect, [write.session_id for write in writes])
    appends = Appends(dialect, now)
    outcomes: list[Any] = []
    for write in writes:
        session = sessions.get(write.session_id)
        if session is None:
            outcomes.append(NotFound(no_session(write.session_id)))
        elif write.expect_status is not None and session.status not in write.expect_status:
            outcomes.append(Conflict(unexpected_status(write.session_id, session.status, write.expect_status)))
        else:
            outcomes.append(appends.add(session, write))
    await appends.flush(tx)
    return outcomes
