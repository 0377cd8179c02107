"""`SqlBase`: what the parts of `SqlStore` share: the transactions a backend provides, its dialect, row
helpers, and the checks and messages of writes."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from agentwatch.errors import DamagedRecord, InvalidArgument, NotFound, Suggestion, UserError
from agentwatch.events import PAYLOAD_ADAPTER, PAYLOAD_TYPES, Event, Usage
from agentwatch.store._sql import (
    SESSION_COLUMNS,
    SESSION_JSON,
    Dialect,
    Row,
    Tx,
    check_text,
    damaged_row,
    from_row,
    in_list,
    to_params,
)
from agentwatch.store.records import (
    ConversationRecord,
    InputRecord,
    JournalEntry,
    ObserverRef,
    RequestRecord,
    RunRecord,
    SessionRecord,
    SpanRecord,
    Write,
)

__all__ = ["SqlBase", "appends_only", "check_durable", "decode_payload", "no_session", "unexpected_status"]


T = TypeVar("T")

GROUP_BY = ("role", "status", "source", "feature")
EVENT_LIMIT = 10_000
LIST_LIMIT = 10_000
SESSION_NOT_NULL = frozenset({"status", "turn_attempts", "is_observer"})

CONVERSATION_COLUMNS = tuple(ConversationRecord.model_fields)
INPUT_COLUMNS = tuple(InputRecord.model_fields)
INPUT_JSON = frozenset({"origin"})
REQUEST_COLUMNS = tuple(RequestRecord.model_fields)
REQUEST_JSON = frozenset({"questions", "options", "body", "answer"})
RUN_COLUMNS = tuple(RunRecord.model_fields)
RUN_JSON = frozenset({"input", "error"})
SPAN_COLUMNS = tuple(SpanRecord.model_fields)
SPAN_JSON = frozenset({"ref"})
JOURNAL_COLUMNS = tuple(JournalEntry.model_fields)
JOURNAL_JSON = frozenset({"detail"})
OBSERVER_COLUMNS = tuple(ObserverRef.model_fields)
EVENT_COLUMNS = "id, session_id, seq, at, turn_id, conversation_id, payload"
EVENT_READ = EVENT_COLUMNS + ", type"
USAGE_SUMS = (
    "SUM(input_tokens), SUM(output_tokens), SUM(cache_read_tokens), SUM(cache_write_tokens), "
    "SUM(reasoning_tokens), SUM(requests), SUM(cost_usd), MAX(cost_usd)"
)
"""The spend ledger's sums. `MAX(cost_usd)` is None when no entry is priced (the cost is then unknown, not zero);
on SQLite it is also how a cost that is no number (text, a row edited by hand) shows, as SQLite orders text and
blobs after every number: in place of a count of the priced entries, so the sums take no further aggregate."""
_COUNTS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens", "requests")
_DAMAGED = " OR ".join(
    [*(f"typeof({column}) != 'integer'" for column in _COUNTS), "typeof(cost_usd) IN ('text', 'blob')"]
)
"""SQLite: a ledger entry with a count that is no whole number (text, a fraction), or a cost that is no number
(text): a row edited by hand."""


def utc_now() -> datetime:
    return datetime.now(UTC)


def select(columns: Sequence[str], table: str) -> str:
    return f"SELECT {', '.join(columns)} FROM {table}"


def usage_from_sums(row: Sequence[Any]) -> Usage:
    tokens = [int(value or 0) for value in row[:6]]
    cost = float(row[6]) if row[7] is not None else None  # no priced entry: the cost is unknown, not zero
    return Usage(
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        cache_read_tokens=tokens[2],
        cache_write_tokens=tokens[3],
        reasoning_tokens=tokens[4],
        requests=tokens[5],
        cost_usd=cost,
    )


def _damaged_sums(sums: Sequence[Any]) -> bool:
    """Whether the `USAGE_SUMS` of some entries show one damaged (see `SqlBase._ledger_sums`)."""
    return any(isinstance(total, float) for total in sums[:6]) or isinstance(sums[7], str | bytes)


def patch_fields(patch: BaseModel) -> dict[str, Any]:
    return {name: getattr(patch, name) for name in patch.model_fields_set}


class SqlBase(ABC):
    """What every part of `SqlStore` builds on: the backend's transactions and dialect, and row helpers."""

    url: str
    """The store URL it was opened with (password hidden)."""

    _dialect: Dialect

    # -- what a backend provides ----------------------------------------------------------------------

    @abstractmethod
    async def _read(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        """Run `fn` on a connection that sees every committed write."""

    @abstractmethod
    async def _write(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        """Run `fn` in a transaction; return once it committed (or raise, with nothing written)."""

    async def _write_session(self, session_id: str, fn: Callable[[Tx], Awaitable[T]]) -> T:
        """`_write` for a change that touches only `session_id`'s rows (a `Write`); a backend that groups
        writes may order it freely against changes to other sessions."""
        return await self._write(fn)

    @abstractmethod
    async def _apply(
        self, tx: Tx, write: Write, *, want_session: bool = True
    ) -> tuple[SessionRecord | None, list[Event]]:
        """Apply `write` in `tx` (see `EventMethods`); the session as it ends up when the write patches it
        (and `want_session`)."""

    @abstractmethod
    async def close(self) -> None:
        """Flush pending writes and release connections."""

    async def _path_bytes(self) -> int | None:
        return None

    # -- helpers --------------------------------------------------------------------------------------

    def _params(self, values: dict[str, Any], json_columns: frozenset[str]) -> dict[str, Any]:
        return to_params(self._dialect, values, json_columns)

    async def _usage_by(self, column: str, keys: Sequence[str]) -> dict[str, Usage]:
        """The spend ledger summed per value of `column` (`session_id`, `run_id`) among `keys`; a key with no
        entry sums to zero."""
        wanted = list(dict.fromkeys(keys))
        condition, params = in_list(column, wanted)
        rows = await self._ledger_sums(column, condition, params, f" GROUP BY {column}")
        totals = {key: Usage() for key in wanted}
        totals.update({row[0]: usage_from_sums(row[1:]) for row in rows})
        return totals

    async def _ledger_sums(self, keys: str, where: str, params: Sequence[Any], grouping: str = "") -> list[Row]:
        """`SELECT keys, USAGE_SUMS FROM usage_ledger WHERE where grouping`: rows that end with the sums
        `usage_from_sums` reads. `DamagedRecord` when an entry summed holds a count that is no whole number, or
        a cost that is no number (SQLite keeps any value in any column, and its SUM reads text as 0): the sums
        themselves tell, as SQLite's SUM of such a count is a REAL where whole numbers give an INTEGER, and the
        MAX of the costs is then text (PostgreSQL's columns hold numbers alone), so the sum stays one query with
        nothing added per row; the entry is looked up only then, to name it."""
        sql = f"SELECT {keys}{', ' if keys else ''}{USAGE_SUMS} FROM usage_ledger WHERE {where}{grouping}"
        rows = await self._read(lambda tx: tx.fetch(sql, params))
        if any(_damaged_sums(row[-8:]) for row in rows):
            raise await self._damaged_spend(where, params)
        return rows

    async def _damaged_spend(self, where: str, params: Sequence[Any]) -> DamagedRecord:
        """The error for the (first) ledger entry among those `where` holds for whose count is no whole number,
        or whose cost is no number."""
        sql = (
            f"SELECT id, session_id, turn_id, cost_usd, {', '.join(_COUNTS)} FROM usage_ledger "
            f"WHERE ({where}) AND ({_DAMAGED}) ORDER BY id LIMIT 1"
        )
        rows = await self._read(lambda tx: tx.fetch(sql, params))
        if not rows:  # (corrected by hand since the sum was read)
            return DamagedRecord("the stored spend ledger was damaged while it was summed; read it again")
        entry_id, session_id, turn_id, cost, *counts = rows[0]
        turn = f" (turn {turn_id!r})" if turn_id is not None else ""
        details = {"entry_id": entry_id, "session_id": session_id} | ({"turn_id": turn_id} if turn_id else {})
        if isinstance(cost, str | bytes):
            column, error = "cost_usd", ValueError(f"{cost!r} is not a number")
        else:
            column, value = next((c, v) for c, v in zip(_COUNTS, counts, strict=True) if type(v) is not int)
            error = ValueError(f"{value!r} is not a whole number")
        return damaged_row(f"spend entry {entry_id!r}{turn} of session {session_id!r}", column, error, **details)

    async def _insert(self, tx: Tx, table: str, values: dict[str, Any], json_columns: frozenset[str]) -> None:
        params = self._params(values, json_columns)
        placeholders = ", ".join("?" * len(params))
        await tx.execute(f"INSERT INTO {table} ({', '.join(params)}) VALUES ({placeholders})", list(params.values()))

    async def _update(
        self, tx: Tx, table: str, key: tuple[str, Any], values: dict[str, Any], json_columns: frozenset[str]
    ) -> None:
        if not values:
            return
        params = self._params(values, json_columns)
        assignments = ", ".join(f"{column} = ?" for column in params)
        await tx.execute(f"UPDATE {table} SET {assignments} WHERE {key[0]} = ?", [*params.values(), key[1]])

    async def _one(
        self,
        tx: Tx,
        model: type[Any],
        table: str,
        columns: Sequence[str],
        json_columns: frozenset[str],
        key: tuple[str, Any],
        missing: NotFound,
        *,
        lock: bool = False,
    ) -> Any:
        sql = f"{select(columns, table)} WHERE {key[0]} = ?" + (self._dialect.for_update if lock else "")
        rows = await tx.fetch(sql, [key[1]])
        if not rows:
            raise missing
        return from_row(model, columns, rows[0], json_columns)

    async def _session(self, tx: Tx, session_id: str, *, lock: bool = False) -> SessionRecord:
        record: SessionRecord = await self._one(
            tx,
            SessionRecord,
            "sessions",
            SESSION_COLUMNS,
            SESSION_JSON,
            ("id", session_id),
            no_session(session_id),
            lock=lock,
        )
        return record

    async def _require_session(self, tx: Tx, session_id: str) -> None:
        if not await tx.fetch("SELECT 1 FROM sessions WHERE id = ?", [session_id]):
            raise NotFound(f"no session with id {session_id!r} (it may have been reaped)")


def decode_payload(type_name: str, payload: Any) -> Any:
    """A stored payload (JSON text) as its model: validated by its own type's model (the row's `type` names
    it), which skips the union's dispatch."""
    model = PAYLOAD_TYPES.get(type_name)
    if not isinstance(payload, bytes | bytearray | str):
        return PAYLOAD_ADAPTER.validate_python(payload) if model is None else model.model_validate(payload)
    try:
        if model is None:  # not a type this code knows: the union's validation says what is wrong
            return PAYLOAD_ADAPTER.validate_json(payload)
        return model.model_validate_json(payload)
    except ValidationError:
        # pydantic's JSON parser refuses the escape of a lone surrogate, which `json_text` writes for
        # text that has one; Python's reads it back. Anything else fails again, with the same error.
        document = json.loads(payload)
        return PAYLOAD_ADAPTER.validate_python(document) if model is None else model.model_validate(document)


def appends_only(write: Write) -> bool:
    """True for a write of events (with usage, messages, maybe an expected status) that changes nothing else of
    its session but the counters: its seqs and totals can be handed out without reading the row first."""
    return (
        write.session is None
        and not write.expect_unheld
        and write.delete_until is None
        and write.new_conversation is None
        and not write.inputs_add
        and not write.inputs_take
        and not write.requests_open
        and not write.requests_close
        and not write.requests_escalate
        and write.claim is None
    )


def check_durable(write: Write) -> None:
    """Refuse, before anything is written, ephemeral events (they go to the live ring only) and text a plain
    column of some backend cannot keep (see `check_text`; payloads and messages are JSON, which escapes it)."""
    check_text(write.session_id, "session_id")
    for new in write.events:
        payload = new.payload
        model = PAYLOAD_TYPES.get(getattr(payload, "type", ""))
        if model is None or not isinstance(payload, model):
            # Checked here, so the store can build the stored event without validating it again.
            raise InvalidArgument(
                f"an event payload must be an instance of its event type's model, not {type(payload).__name__}"
            )
        if not payload.durable:
            raise UserError(f"{payload.type!r} events are ephemeral: they go to the live ring, never to the store")
        if new.turn_id is not None:
            if not isinstance(new.turn_id, str):
                raise InvalidArgument(f"an event's turn_id must be text, not {type(new.turn_id).__name__}")
            check_text(new.turn_id, "turn_id")
    for entry in write.usage:
        for name in ("turn_id", "run_id", "role", "model"):
            value = getattr(entry, name)
            if value is not None:
                check_text(value, f"usage {name}")


def no_session(session_id: str) -> NotFound:
    """There is no session `session_id`: a name where an id goes is told how to find the id."""
    if not session_id.startswith("ses_"):  # a name where an id goes
        by_name = Suggestion("agent_get", {"name": session_id})
        return NotFound(
            f"no session with id {session_id!r}: an agent's id starts with ses_; find one by its name with {by_name}",
            suggest=[by_name],
        )
    listed = Suggestion("agent_list", {"deleted": True})
    message = f"no session with id {session_id!r} (it may have been reaped); {listed} lists the ids"
    return NotFound(message, suggest=[listed])


def unexpected_status(session_id: str, status: str, expected: Sequence[str]) -> str:
    return (
        f"session {session_id!r} is {status!r}, not one of {sorted(expected)}; "
        "read it again and retry if the change still applies"
    )


def name_taken(name: str, scope: str | None, holder: str) -> str:
    where = f"scope {scope!r}" if scope is not None else "the global scope"
    return (
        f"a live session named {name!r} already exists in {where} ({holder}); pick another name, "
        "or delete that session first"
    )
