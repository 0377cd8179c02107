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

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any, Final, cast

from pydantic import JsonValue

from agentwatch.errors import Conflict
from agentwatch.events import CompletionFinished, Event, ToolResult, Usage, new_id
from agentwatch.store._sql import (
    EVENT_INSERT,
    SESSION_JSON,
    Dialect,
    Tx,
    has_surrogate,
    in_list,
    json_text,
    payload_json,
    to_params,
)
from agentwatch.store._sqlbase import no_session, unexpected_status
from agentwatch.store.records import Write

__all__ = ["Appends", "Counters", "apply_appends", "read_counters"]

_IN_LIST_MAX: Final = 500
"""Ids per `IN (...)` list (well under SQLite's limit on parameters)."""
_ROWS_MAX: Final = 256
"""Session rows per statement of `_rows_update`, at most (4 parameters each: well under SQLite's limit)."""
_COUNTERS: Final = "SELECT id, last_seq, conversation_id, role, status, tokens, cost_usd FROM sessions"


_PG_COUNTERS: Final = f"{_COUNTERS} WHERE id = ANY(?::text[]) ORDER BY id FOR UPDATE"
# PostgreSQL's statements for many rows at once take them as one JSON array of arrays (`_rows_json`), parsed
# once by the server as `jsonb` and read by position: the driver would build array parameters value by value in
# Python (measured several times slower than one JSON text), and objects read by `json_to_recordset` cost the
# client an object per row and the server a key per value (measured: the events of a group of 100 appends
# inserted in about an eighth less time as arrays). A string comes back as the text it was (a payload too).
_PG_SESSION_UPDATE: Final = (
    "UPDATE sessions SET last_seq = (v->>1)::bigint, updated_at = ?, "
    "last_active_at = CASE WHEN (v->>4)::boolean THEN ? ELSE sessions.last_active_at END, "
    "tokens = (v->>2)::bigint, cost_usd = (v->>3)::float8 "
    "FROM jsonb_array_elements(?::jsonb) AS v WHERE sessions.id = v->>0"
)
"""Rows: id, last_seq, tokens, cost (as text, so that any float, an infinity too, goes through), touched."""
_PG_EVENT_INSERT: Final = (
    "INSERT INTO events (id, session_id, seq, at, turn_id, conversation_id, payload, type) "
    "SELECT r->>0, r->>1, (r->>2)::bigint, ?, r->>3, r->>4, r->>5, r->>6 FROM jsonb_array_elements(?::jsonb) AS r"
)
"""Rows: id, session_id, seq, turn_id, conversation_id, payload, type (every event the transaction's time)."""
_PG_CLAIM: Final = (
    "UPDATE sessions SET last_seq = sessions.last_seq + (v->>1)::bigint, updated_at = ?, "
    "last_active_at = CASE WHEN (v->>2)::boolean THEN ? ELSE sessions.last_active_at END "
    "FROM jsonb_array_elements(?::jsonb) AS v WHERE sessions.id = v->>0 "
    "RETURNING sessions.id, sessions.last_seq - (v->>1)::bigint, sessions.conversation_id, sessions.role, "
    "sessions.status, sessions.tokens, sessions.cost_usd"
)
"""The counters of many sessions in one statement. Rows: id, the number of events to claim, touched."""
_USAGE_COLUMNS: Final = ("id", "session_id", "turn_id", "run_id", "role", "model", "at", *Usage.model_fields)
_USAGE_INSERT: Final = (
    f"INSERT INTO usage_ledger ({', '.join(_USAGE_COLUMNS)}) VALUES ({', '.join('?' * len(_USAGE_COLUMNS))})"
)
_MESSAGE_INSERT: Final = (
    "INSERT INTO message_rows (conversation_id, idx, body, event_seq, event_path) VALUES (?, ?, ?, ?, ?)"
)
_CONTENT: Final = "content"


_trusted = cast(Callable[..., Event], Event.trusted)
"""`Event.trusted`, called with the plain strings the store made (the ids' `NewType`s are only for checkers)."""


def _session_update(touched: bool, priced: bool, assignments: str = "") -> str:
    """The update of a session's row: its counters (parameters: last_seq, updated_at, then tokens and cost_usd
    when `priced`), its activity time when `touched` (one more), other `assignments` (their values next),
    then the id. A column the write does not change is left out: SQLite rewrites every index holding a
    column the statement sets, changed or not."""
    return (
        "UPDATE sessions SET last_seq = ?, updated_at = ?"
        + (", tokens = ?, cost_usd = ?" if priced else "")
        + (", last_active_at = ?" if touched else "")
        + assignments
        + " WHERE id = ?"
    )


@lru_cache(maxsize=64)
def _rows_update(touched: bool, priced: bool, rows: int) -> str:
    """SQLite: the update of `rows` sessions' rows in one statement, each row's values from a VALUES list
    (parameters: updated_at, last_active_at when `touched`, then per row its id, last_seq, and tokens and
    cost_usd when `priced`). Leaves out the same columns as `_session_update`. (`rows` is a power of two, so
    the texts stay few: see `_row_chunks`.)"""
    row = "(" + ", ".join("?" * (4 if priced else 2)) + ")"
    return (
        "UPDATE sessions SET last_seq = v.column2, updated_at = ?"
        + (", tokens = v.column3, cost_usd = v.column4" if priced else "")
        + (", last_active_at = ?" if touched else "")
        + f" FROM (VALUES {', '.join([row] * rows)}) AS v WHERE sessions.id = v.column1"
    )


def _rows_json(rows: Sequence[Sequence[Any]]) -> str:
    """PostgreSQL: `rows` as the one JSON document a statement for many rows takes (see `_PG_SESSION_UPDATE`)."""
    return json.dumps(rows, ensure_ascii=False)


def _row_chunks(count: int) -> list[int]:
    """`count` rows as chunks of powers of two, largest first, each at most `_ROWS_MAX` (100: 64, 32, 4)."""
    chunks: list[int] = []
    while count:
        chunk = min(_ROWS_MAX, 1 << (count.bit_length() - 1))
        chunks.append(chunk)
        count -= chunk
    return chunks


def text_array(values: Sequence[str]) -> str:
    """A PostgreSQL array literal of `values` (for a `?::text[]` parameter): every element quoted, so any
    text goes through."""
    return "{" + ",".join('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values) + "}"


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
    priced: bool = False
    """Its tokens or cost changed in this transaction."""
    written: bool = False
    claimed: bool = False
    """Its row already holds what the transaction's writes make of it (see `_claim_seqs`)."""
    changes: dict[str, Any] = field(default_factory=dict)
    """Other columns to set (a session patch, inbox and request counts), by the same row update."""


async def read_counters(tx: Tx, dialect: Dialect, session_ids: Sequence[str]) -> dict[str, Counters]:
    """The counters of the sessions that exist among `session_ids`, locked until the commit (PostgreSQL)."""
    wanted = sorted(set(session_ids))  # one lock order for every transaction: no deadlock between two groups
    counters: dict[str, Counters] = {}
    for start in range(0, len(wanted), _IN_LIST_MAX):
        chunk = wanted[start : start + _IN_LIST_MAX]
        if dialect.name == "postgres":  # one fixed text, whatever the number of ids
            sql, params = _PG_COUNTERS, [text_array(chunk)]
        else:
            condition, params = in_list("id", chunk)
            sql = f"{_COUNTERS} WHERE {condition} ORDER BY id{dialect.for_update}"
        for row in await tx.fetch(sql, params):
            counters[row[0]] = Counters(row[0], int(row[1]), row[2], row[3], row[4], int(row[5]), float(row[6]))
    return counters


class Appends:
    """The rows the writes of one transaction append, built write by write, written by `flush`."""

    __slots__ = ("_dialect", "_events", "_messages", "_now", "_sessions", "_usage", "at")

    def __init__(self, dialect: Dialect, now: datetime) -> None:
        self._dialect = dialect
        self._now = now
        self.at = dialect.time_param(now)
        """The time of the transaction's writes, as the dialect stores it."""
        self._events: list[tuple[Any, ...]] = []
        self._usage: list[tuple[Any, ...]] = []
        self._messages: dict[str, list[MessageRow]] = {}
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
            session.priced = True
        events: list[Event] = []
        if write.events:
            # Each event built as stored without validating it again (`Event.trusted`): every field is valid
            # by construction, the payloads and turn ids having been checked with the write (`check_durable`).
            # Its row beside it: the same values, the payload as JSON text.
            session_id, conversation_id, now, at = session.id, session.conversation_id, self._now, self.at
            json_param, event_rows = self._dialect.json_param, self._events
            seq = session.last_seq
            for new in write.events:
                seq += 1
                payload, turn_id, event_id = new.payload, new.turn_id, new_id("evt")
                events.append(_trusted(event_id, session_id, seq, 0, now, turn_id, payload, conversation_id))
                event_rows.append(
                    (
                        event_id,
                        session_id,
                        seq,
                        at,
                        turn_id,
                        conversation_id,
                        json_param(payload_json(payload)),
                        payload.type,
                    )
                )
            session.last_seq = seq
        if write.messages:
            rows = self._messages.setdefault(session.conversation_id, [])
            rows.extend(_message_rows(write.messages, events, tool_results=self._dialect.name == "sqlite"))
        return events

    async def flush(self, tx: Tx) -> None:
        """Write everything added: each session's row once, then the ledger, messages and events."""
        plain: list[Counters] = []
        for session in self._sessions.values():
            if not session.written or session.claimed:
                continue
            if not session.changes:
                plain.append(session)
                continue
            params = to_params(self._dialect, session.changes, SESSION_JSON)
            assignments = "".join(f", {column} = ?" for column in params)
            await tx.execute(
                _session_update(session.touched, True, assignments),
                [*self._counters(session, priced=True), *params.values(), session.id],
            )
        if self._dialect.name == "postgres" and len(plain) > 1:
            # One statement, whatever the number of rows: the server plans it once and the driver sends one
            # fixed text. (PostgreSQL leaves the indexes alone when the indexed values stay the same, so the
            # untouched rows can share the statement.)
            document = [(s.id, s.last_seq, s.tokens, repr(s.cost), s.touched) for s in plain]
            await tx.execute(_PG_SESSION_UPDATE, [self.at, self.at, _rows_json(document)])
        elif plain:
            # SQLite updates every index of a column the statement sets, changed or not: a row whose activity
            # time stays gets a statement that leaves it (and the two listing indexes holding it) alone, and
            # one whose totals stay leaves those out.
            shapes: dict[tuple[bool, bool], list[Counters]] = {}
            for session in plain:
                shapes.setdefault((session.touched, session.priced), []).append(session)
            for (touched, priced), sessions in shapes.items():
                await self._update_rows(tx, sessions, touched=touched, priced=priced)
        if self._usage:
            await tx.execute_many(_USAGE_INSERT, self._usage)
        if self._messages:
            await self._flush_messages(tx)
        if len(self._events) > 1 and self._dialect.name == "postgres":
            # One statement with the rows as one JSON document: the driver sends one text instead of
            # encoding every parameter of every row (most of the client's time in a group, measured). Every
            # row has the transaction's time, sent once.
            events = _rows_json([(r[0], r[1], r[2], r[4], r[5], r[6], r[7]) for r in self._events])
            await tx.execute(_PG_EVENT_INSERT, [self.at, events])
        elif self._events:
            await tx.execute_many(EVENT_INSERT, self._events)

    async def _update_rows(self, tx: Tx, sessions: list[Counters], *, touched: bool, priced: bool) -> None:
        """SQLite: write the rows of `sessions` (all of one shape) with a few statements of many rows each
        (`_rows_update`) rather than one statement per row: a statement goes through its rows without coming
        back to Python and starting again for each (measured: the update of 100 rows ~30 % cheaper). A lone
        row keeps its plain statement."""
        if len(sessions) == 1:
            [session] = sessions
            await tx.execute_many(
                _session_update(touched, priced), [(*self._counters(session, priced=priced), session.id)]
            )
            return
        start = 0
        for count in _row_chunks(len(sessions)):
            params: list[Any] = [self.at, self.at] if touched else [self.at]
            for s in sessions[start : start + count]:
                params += (s.id, s.last_seq, s.tokens, s.cost) if priced else (s.id, s.last_seq)
            await tx.execute(_rows_update(touched, priced, count), params)
            start += count

    def _counters(self, session: Counters, *, priced: bool) -> tuple[Any, ...]:
        """The counter parameters of `_session_update` for `session`."""
        values: tuple[Any, ...] = (session.last_seq, self.at)
        if priced:
            values += (session.tokens, session.cost)
        if session.touched:
            values += (self.at,)
        return values

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
                (conversation_id, last.get(conversation_id, -1) + 1 + index, body and json_param(body), *event)
                for conversation_id, rows in self._messages.items()
                for index, (body, *event) in enumerate(rows)
            ],
        )


MessageRow = tuple[str | None, int | None, str | None]
"""A message row: its body (or the template of it), the seq of the event of the same write that holds (a
part of) it, and the JSON path of that part in the body (None: the whole message)."""


def _message_rows(messages: Sequence[JsonValue], events: Sequence[Event], *, tool_results: bool) -> list[MessageRow]:
    """The rows of a write's model messages (see `MessageRow`): (body, None, None); or (None, seq, None) for a
    message that is the `response` of a completion.finished event of the same write, whose stored payload
    then holds it; or, with `tool_results`, (template, seq, path) for a message with a tool return whose
    content is the `output` of a tool.result event of the same write (the template holds null at the path).
    The `messages` view reads each back as it was. A message with a non-finite number keeps its body: the
    payload's JSON writes such a number as null, and SQLite's JSON functions refuse it."""
    responses = [
        (event.seq, event.payload.response) for event in events if isinstance(event.payload, CompletionFinished)
    ]
    outputs = {
        event.payload.tool_call_id: (event.seq, event.payload.output)
        for event in events
        if isinstance(event.payload, ToolResult)
    }
    rows: list[MessageRow] = []
    for message in messages:
        seq = next((seq for seq, response in responses if response == message), None) if responses else None
        returned = _tool_return(message, outputs) if seq is None and tool_results and outputs else None
        if returned is not None:
            # Only the template is encoded, not the whole message too: the two differ by the output alone, a
            # JSON string, so the template holds a non-finite number only if the message does (a tool turn
            # writes such a message after each call).
            template, output_seq, path = returned
            text = json_text(template)
            if _finite(text):
                rows.append((text, output_seq, path))
                continue
        body = json_text(message)  # compact, once
        rows.append((None, seq, None) if seq is not None and _finite(body) else (body, None, None))
    return rows


def _finite(text: str) -> bool:
    """Whether a message's JSON `text` holds no non-finite number (the payload's JSON would write one as null,
    so such a message keeps its own body). Text that merely spells one in a string counts as one too."""
    return "NaN" not in text and "Infinity" not in text


def _tool_return(message: JsonValue, outputs: dict[str, tuple[int, str]]) -> tuple[JsonValue, int, str] | None:
    """The message with the content of its (first) tool return set to null, the seq of the tool.result event
    whose output it is, and the path of that content; None when no part's content is such an output. (An
    output with a NUL or a lone surrogate stays in its message: SQLite's JSON functions would not give it back
    as it was.)"""
    if not isinstance(message, dict):
        return None
    parts = message.get("parts")
    if not isinstance(parts, list):
        return None
    for index, part in enumerate(parts):
        if not isinstance(part, dict) or part.get("part_kind") != "tool-return":
            continue
        found = outputs.get(part.get("tool_call_id"))  # type: ignore[arg-type]
        content = part.get(_CONTENT)
        if found is None or found[1] != content or not isinstance(content, str):
            continue
        if "\x00" in content or (not content.isascii() and has_surrogate(content)):
            return None
        template = {**message, "parts": [*parts[:index], {**part, _CONTENT: None}, *parts[index + 1 :]]}
        return template, found[0], f"$.parts[{index}].{_CONTENT}"
    return None


async def _claim_seqs(tx: Tx, appends: Appends, writes: Sequence[Write]) -> dict[str, Counters]:
    """PostgreSQL: move each session's counters past the group's writes first, in one UPDATE that locks the
    rows and returns them as they were (the seqs to hand out, contiguous: the lock holds until the commit).
    The rows are then written once, instead of locked by a SELECT ... FOR UPDATE and written again. Only for
    writes without usage (whose totals add up in the order of the writes) and without an expected status
    (checked before anything is written); the others read the counters first."""
    counts: dict[str, list[Any]] = {}
    for write in writes:
        count = counts.get(write.session_id)
        if count is None:
            counts[write.session_id] = [write.session_id, len(write.events), write.touch]
        else:
            count[1] += len(write.events)
            count[2] = count[2] or write.touch
    document = _rows_json(list(counts.values()))
    at = appends.at
    claimed: dict[str, Counters] = {}
    for row in await tx.fetch(_PG_CLAIM, [at, at, document]):
        session = Counters(row[0], int(row[1]), row[2], row[3], row[4], int(row[5]), float(row[6]), claimed=True)
        claimed[session.id] = session
    return claimed


async def apply_appends(
    tx: Tx, dialect: Dialect, writes: Sequence[Write], now: datetime, known: dict[str, Counters] | None = None
) -> list[Any]:
    """Apply append-only `writes` (see `appends_only`) in order, in the caller's transaction; per write, its
    stored events or the error that failed it alone (then nothing of it is written).

    `known`: the counters of some of the sessions as this transaction finds them, which the caller knows
    for sure (the SQLite writer keeps those its own commits left, while nothing else wrote); the others are
    read, and added to it. The caller reads each session's counters in it as the writes leave them.

    Raises when the database refuses a statement: then part of the group may be written, and the caller
    rolls back (and may apply the writes one by one, each on its own).
    """
    appends = Appends(dialect, now)
    if dialect.name == "postgres" and len(writes) > 1 and not any(w.expect_status or w.usage for w in writes):
        sessions = await _claim_seqs(tx, appends, writes)
    elif known is None:
        sessions = await read_counters(tx, dialect, [write.session_id for write in writes])
    else:
        missing = [write.session_id for write in writes if write.session_id not in known]
        if missing:
            known.update(await read_counters(tx, dialect, missing))
        sessions = known
    outcomes: list[Any] = []
    for write in writes:
        session = sessions.get(write.session_id)
        if session is None:
            outcomes.append(no_session(write.session_id))
        elif write.expect_status is not None and session.status not in write.expect_status:
            outcomes.append(Conflict(unexpected_status(write.session_id, session.status, write.expect_status)))
        else:
            outcomes.append(appends.add(session, write))
    await appends.flush(tx)
    return outcomes
