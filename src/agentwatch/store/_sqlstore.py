"""`SqlStore`: the whole `Store` contract written once over `Tx`, for every SQL backend.

A backend only says how to run a function in a read (`_read`) and in a write transaction (`_write`), and
which `Dialect` it speaks. Everything a write does happens inside the function it passes to `_write`, so it
commits together or not at all.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel, JsonValue, ValidationError

from agentwatch.errors import Conflict, InvalidArgument, NotFound, UserError
from agentwatch.events import PAYLOAD_ADAPTER, PAYLOAD_TYPES, Event, NewEvent, Usage, new_id
from agentwatch.store._leases import LeaseMethods
from agentwatch.store._sql import (
    EVENT_INSERT,
    SESSION_COLUMNS,
    SESSION_JSON,
    Dialect,
    Row,
    Tx,
    check_limit,
    check_text,
    event_row,
    from_row,
    in_list,
    keyset_page,
    quiet_expression,
    session_where,
    stored_events,
    to_params,
)
from agentwatch.store.base import SCHEMA_VERSION
from agentwatch.store.records import (
    ConversationRecord,
    InputRecord,
    JournalEntry,
    ObserverRef,
    Page,
    RequestRecord,
    RequestStatus,
    RunDraft,
    RunPatch,
    RunRecord,
    SessionDraft,
    SessionFilter,
    SessionGroup,
    SessionGroupBy,
    SessionPatch,
    SessionRecord,
    SessionSort,
    SpanDraft,
    SpanPatch,
    SpanRecord,
    StateCount,
    StoreInfo,
    UsageEntry,
    Write,
)

__all__ = ["SqlStore", "appends_only", "check_durable", "no_session", "unexpected_status"]

T = TypeVar("T")

_GROUP_BY = ("role", "status", "source", "feature")
_EVENT_LIMIT = 10_000
_LIST_LIMIT = 10_000
_SESSION_NOT_NULL = frozenset({"status", "turn_attempts", "is_observer"})

_CONVERSATION_COLUMNS = tuple(ConversationRecord.model_fields)
_INPUT_COLUMNS = tuple(InputRecord.model_fields)
_INPUT_JSON = frozenset({"origin"})
_REQUEST_COLUMNS = tuple(RequestRecord.model_fields)
_REQUEST_JSON = frozenset({"questions", "options", "body", "answer"})
_RUN_COLUMNS = tuple(RunRecord.model_fields)
_RUN_JSON = frozenset({"input", "error"})
_SPAN_COLUMNS = tuple(SpanRecord.model_fields)
_SPAN_JSON = frozenset({"ref"})
_JOURNAL_COLUMNS = tuple(JournalEntry.model_fields)
_JOURNAL_JSON = frozenset({"detail"})
_OBSERVER_COLUMNS = tuple(ObserverRef.model_fields)
_EVENT_COLUMNS = "id, session_id, seq, at, turn_id, conversation_id, payload"
_EVENT_READ = _EVENT_COLUMNS + ", type"
_USAGE_SUMS = (
    "SUM(input_tokens), SUM(output_tokens), SUM(cache_read_tokens), SUM(cache_write_tokens), "
    "SUM(reasoning_tokens), SUM(requests), SUM(cost_usd), COUNT(cost_usd)"
)


def _now() -> datetime:
    return datetime.now(UTC)


def _select(columns: Sequence[str], table: str) -> str:
    return f"SELECT {', '.join(columns)} FROM {table}"


def _usage_from_sums(row: Sequence[Any]) -> Usage:
    tokens = [int(value or 0) for value in row[:6]]
    cost = float(row[6]) if row[7] else None  # no priced entry: the cost is unknown, not zero
    return Usage(
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        cache_read_tokens=tokens[2],
        cache_write_tokens=tokens[3],
        reasoning_tokens=tokens[4],
        requests=tokens[5],
        cost_usd=cost,
    )


def _patch_fields(patch: BaseModel) -> dict[str, Any]:
    return {name: getattr(patch, name) for name in patch.model_fields_set}


class SqlStore(LeaseMethods, ABC):
    """The `Store` contract over SQL; subclasses provide transactions, the dialect and `open`."""

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

    async def _write_appends(self, write: Write) -> list[Event]:
        """Apply an append-only `write` (see `appends_only`); a backend that can apply many at once in one
        statement per table overrides it."""
        return await self._write_session(write.session_id, lambda tx: self._append_only(tx, write, _now()))

    @abstractmethod
    async def close(self) -> None:
        """Flush pending writes and release connections."""

    async def _path_bytes(self) -> int | None:
        return None

    # -- helpers --------------------------------------------------------------------------------------

    def _params(self, values: dict[str, Any], json_columns: frozenset[str]) -> dict[str, Any]:
        return to_params(self._dialect, values, json_columns)

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
        missing: str,
        *,
        lock: bool = False,
    ) -> Any:
        sql = f"{_select(columns, table)} WHERE {key[0]} = ?" + (self._dialect.for_update if lock else "")
        rows = await tx.fetch(sql, [key[1]])
        if not rows:
            raise NotFound(missing)
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

    def _event(self, row: Row) -> Event:
        """An event from a row selected as `_EVENT_READ`; the payload is validated by its own type's model (the
        row's `type` column names it), which skips the union's dispatch."""
        event_id, session_id, seq, at, turn_id, conversation_id, payload, type_name = row
        payload = decode_payload(type_name, payload)
        return Event(
            id=event_id,
            session_id=session_id,
            seq=seq,
            at=at.astimezone(UTC) if isinstance(at, datetime) else datetime.fromisoformat(at),
            turn_id=turn_id,
            conversation_id=conversation_id,
            payload=payload,
        )

    # -- info -----------------------------------------------------------------------------------------

    async def info(self) -> StoreInfo:
        """Backend, schema version and sizes."""

        async def count(tx: Tx) -> tuple[int, int, int]:
            version = (await tx.fetch("SELECT COALESCE(MAX(version), 0) FROM schema_migrations"))[0][0]
            sessions = (await tx.fetch("SELECT count(*) FROM sessions"))[0][0]
            events = (await tx.fetch("SELECT count(*) FROM events"))[0][0]
            return int(version), int(sessions), int(events)

        version, sessions, events = await self._read(count)
        return StoreInfo(
            backend=self._dialect.name,
            url=self.url,
            schema_version=version,
            code_schema_version=SCHEMA_VERSION,
            sessions=sessions,
            events=events,
            path_bytes=await self._path_bytes(),
        )

    # -- sessions -------------------------------------------------------------------------------------

    async def create_session(self, draft: SessionDraft, *, observer_ref: ObserverRef | None = None) -> SessionRecord:
        """Create a session with its first conversation; `Conflict` when the name is taken in its scope.

        With `observer_ref`, the new session is that pairing's observer: the ref is recorded, naming it, in
        the same transaction (see `Store.create_session`).
        """
        now = _now()
        session_id = draft.id or new_id("ses")
        conversation_id = new_id("cnv")

        async def create(tx: Tx) -> SessionRecord:
            if observer_ref is not None:
                await self._check_observer_slot(tx, observer_ref, session_id)
            if await tx.fetch("SELECT 1 FROM sessions WHERE id = ?", [session_id]):
                raise Conflict(f"a session with id {session_id!r} already exists; leave `id` unset for a new one")
            taken = await tx.fetch(
                "SELECT id FROM sessions WHERE COALESCE(scope, '') = ? AND name = ? AND deleted_at IS NULL",
                [draft.scope or "", draft.name],
            )
            if taken:
                raise Conflict(_name_taken(draft.name, draft.scope, taken[0][0]))
            values = draft.model_dump(exclude={"id"})
            values |= {
                "id": session_id,
                "created_at": now,
                "updated_at": now,
                "last_active_at": now,
                "conversation_id": conversation_id,
            }
            await self._insert(tx, "sessions", values, SESSION_JSON)
            await self._insert(
                tx,
                "conversations",
                {"id": conversation_id, "session_id": session_id, "started_at": now},
                frozenset(),
            )
            if observer_ref is not None:
                ref = observer_ref.model_copy(update={"observer_session_id": session_id})
                await self._upsert_observer_ref(tx, self._stored_ref(ref, now))
            return await self._session(tx, session_id)

        return await self._write(create)

    async def _check_observer_slot(self, tx: Tx, ref: ObserverRef, observer_session_id: str) -> None:
        """Refuse to create a second observer for one pairing: `Conflict` when the observed session's ref
        already names another observer session that is neither stopped, finished nor deleted."""
        # Locks the observed session's row (PostgreSQL) so two processes creating its observer at once
        # take turns: the second sees the first's ref.
        observed = await tx.fetch(
            "SELECT 1 FROM sessions WHERE id = ?" + self._dialect.for_update, [ref.observed_session_id]
        )
        if not observed:
            raise NotFound(no_session(ref.observed_session_id))
        rows = await tx.fetch(
            "SELECT observer_refs.observer_session_id FROM observer_refs JOIN sessions "
            "ON sessions.id = observer_refs.observer_session_id "
            "WHERE observer_refs.observed_session_id = ? AND NOT observer_refs.stopped AND sessions.live",
            [ref.observed_session_id],
        )
        if rows and rows[0][0] != observer_session_id:
            raise Conflict(
                f"session {ref.observed_session_id!r} already has a live observer session ({rows[0][0]}); "
                "stop it before pairing another"
            )

    async def get_session(self, session_id: str) -> SessionRecord:
        """One session by id, soft-deleted ones included. Raises `NotFound` (also once reaped)."""
        return await self._read(lambda tx: self._session(tx, session_id))

    async def update_session(self, session_id: str, patch: SessionPatch) -> SessionRecord:
        """Write the fields set on `patch`; same as `write(Write(session_id, session=patch))`."""
        write = Write(session_id, session=patch)
        session, _ = await self._write_session(session_id, lambda tx: self._apply(tx, write))
        assert session is not None  # a write with a patch returns the patched session
        return session

    async def list_sessions(
        self,
        where: SessionFilter,
        *,
        sort: SessionSort = "newest",
        limit: int = 20,
        cursor: str | None = None,
    ) -> Page[SessionRecord]:
        """A page of sessions: the boss first, then live ones, then by `sort`, then by id."""
        sql, params, cursor_after = keyset_page(self._dialect, where, sort, limit, cursor)
        rows = await self._read(lambda tx: tx.fetch(sql, params))
        items = [from_row(SessionRecord, SESSION_COLUMNS, row, SESSION_JSON) for row in rows[:limit]]
        next_cursor = cursor_after(items[-1]) if len(rows) > limit else None
        return Page(items, next_cursor)

    async def count_sessions(self, where: SessionFilter) -> dict[str, int]:
        """How many sessions match, per status (statuses with none are left out)."""
        conditions, params = session_where(self._dialect, where)
        sql = "SELECT status, count(*) FROM sessions"
        if conditions:
            sql += " WHERE " + " AND ".join(conditions)
        rows = await self._read(lambda tx: tx.fetch(sql + " GROUP BY status", params))
        return {status: int(n) for status, n in sorted(rows)}

    async def count_by_state(self, where: SessionFilter) -> list[StateCount]:
        """How many sessions match per (status, waits on a person, quiet), in one grouped query."""
        conditions, params = session_where(self._dialect, where)
        quiet, quiet_params = quiet_expression(self._dialect, where)
        sql = f"SELECT status, pending_requests > 0, {quiet}, count(*) FROM sessions"
        if conditions:
            sql += " WHERE " + " AND ".join(conditions)
        sql += " GROUP BY 1, 2, 3"
        rows = await self._read(lambda tx: tx.fetch(sql, [*quiet_params, *params]))
        return [
            StateCount(status=status, waits_on_person=bool(waiting), quiet=bool(quiet_now), sessions=int(n))
            for status, waiting, quiet_now, n in rows
        ]

    async def group_sessions(self, where: SessionFilter, by: SessionGroupBy) -> list[SessionGroup]:
        """How many sessions match per value of `by`, with the newest activity of each; ordered by value."""
        if by not in _GROUP_BY:
            raise InvalidArgument(f"sessions can be grouped by {', '.join(_GROUP_BY)}, not {by!r}")
        conditions, params = session_where(self._dialect, where)
        sql = f"SELECT {by}, count(*), MAX(last_active_at) FROM sessions"
        if conditions:
            sql += " WHERE " + " AND ".join(conditions)
        rows = await self._read(lambda tx: tx.fetch(sql + f" GROUP BY {by}", params))
        groups = [
            SessionGroup(
                key=key,
                sessions=int(n),
                last_active_at=newest.astimezone(UTC)
                if isinstance(newest, datetime)
                else datetime.fromisoformat(newest),
            )
            for key, n, newest in rows
        ]
        return sorted(groups, key=lambda group: (group.key is None, group.key or ""))

    async def soft_delete(self, session_id: str, *, reap_at: datetime) -> SessionRecord:
        """Mark a session deleted; it stays readable by id until `reap_at`."""
        now = _now()

        async def delete(tx: Tx) -> SessionRecord:
            await self._session(tx, session_id, lock=True)
            values = {"deleted_at": now, "reap_at": reap_at, "updated_at": now}
            await self._update(tx, "sessions", ("id", session_id), values, frozenset())
            return await self._session(tx, session_id)

        return await self._write(delete)

    async def reap(self, session_ids: Sequence[str]) -> int:
        """Hard-delete sessions with their transcript (conversations, events, messages, inbox, requests)."""
        if not session_ids:
            return 0
        condition, params = in_list("id", sorted(set(session_ids)))
        # Foreign keys cascade to everything the session owns; the usage ledger has none, so it stays.
        return await self._write(lambda tx: tx.execute(f"DELETE FROM sessions WHERE {condition}", params))

    async def due_for_reap(self, now: datetime, *, limit: int = 100) -> list[str]:
        """Ids of sessions whose `reap_at` has passed."""
        check_limit(limit, _LIST_LIMIT)
        sql = "SELECT id FROM sessions WHERE reap_at IS NOT NULL AND reap_at <= ? ORDER BY reap_at, id LIMIT ?"
        rows = await self._read(lambda tx: tx.fetch(sql, [self._dialect.time_param(now), limit]))
        return [row[0] for row in rows]

    # -- events and the state they describe -----------------------------------------------------------

    async def write(self, write: Write) -> list[Event]:
        """Apply one atomic change and return the events as stored (with ids, seqs and times)."""
        check_durable(write)
        if appends_only(write):
            return await self._write_appends(write)
        _, events = await self._write_session(write.session_id, lambda tx: self._apply(tx, write))
        return events

    async def append(self, session_id: str, events: Sequence[NewEvent]) -> list[Event]:
        """Append durable events; same as `write(Write(session_id, events))`."""
        return await self.write(Write(session_id, events))

    async def _apply(self, tx: Tx, write: Write) -> tuple[SessionRecord | None, list[Event]]:
        """Apply `write`; the session as it ends up comes back only when the write patches it."""
        check_durable(write)
        now = _now()
        if appends_only(write):
            return None, await self._append_only(tx, write, now)

        session_id = write.session_id
        # The row lock (PostgreSQL) serializes every writer of this session until the commit.
        rows = await tx.fetch(
            "SELECT status, conversation_id, role FROM sessions WHERE id = ?" + self._dialect.for_update, [session_id]
        )
        if not rows:
            raise NotFound(no_session(session_id))
        status, conversation_id, role = rows[0]
        if write.expect_status is not None and status not in write.expect_status:
            raise Conflict(unexpected_status(session_id, status, write.expect_status))
        changes: dict[str, Any] = {"updated_at": now}
        deltas = {"pending_inputs": 0, "pending_requests": 0, "held_requests": 0, "tokens": 0}

        if write.new_conversation is not None:
            ended = {"ended_at": now, "end_reason": write.new_conversation}
            await self._update(tx, "conversations", ("id", conversation_id), ended, frozenset())
            conversation_id = new_id("cnv")
            started = {"id": conversation_id, "session_id": session_id, "started_at": now}
            await self._insert(tx, "conversations", started, frozenset())
            changes["conversation_id"] = conversation_id

        if write.session is not None:
            for column, value in write.session.changes().items():
                if value is None and column in _SESSION_NOT_NULL:
                    raise InvalidArgument(f"session field {column!r} cannot be set to None")
                changes[column] = {} if value is None and column == "settings" else value

        for draft in write.inputs_add:
            values = draft.model_dump() | {"id": new_id("inp"), "session_id": session_id, "created_at": now}
            await self._insert(tx, "inbox", values, _INPUT_JSON)
            deltas["pending_inputs"] += 1
        if write.inputs_take:
            deltas["pending_inputs"] -= await self._take_inputs(tx, session_id, write.inputs_take, now)

        for request in write.requests_open:
            values = request.model_dump() | {
                "id": request.id or new_id("req"),
                "session_id": session_id,
                "status": "pending",
                "created_at": now,
            }
            await self._insert(tx, "requests", values, _REQUEST_JSON)
            deltas["pending_requests" if request.waits_on == "person" else "held_requests"] += 1
        for close in write.requests_close:
            record = await self._pending_request(tx, session_id, close.request_id)
            closed = {"status": close.status, "closed_at": now, "answer": close.answer, "answered_by": close.by}
            await self._update(tx, "requests", ("id", record.id), closed, _REQUEST_JSON)
            deltas["pending_requests" if record.waits_on == "person" else "held_requests"] -= 1
        for request_id in write.requests_escalate:
            record = await self._pending_request(tx, session_id, request_id)
            if record.waits_on != "parent":
                raise Conflict(f"request {request_id!r} already waits on a person; only held requests escalate")
            await self._update(tx, "requests", ("id", request_id), {"waits_on": "person"}, frozenset())
            deltas["held_requests"] -= 1
            deltas["pending_requests"] += 1

        deltas["tokens"], cost = await self._insert_usage(tx, session_id, role, write.usage, now)
        await self._insert_messages(tx, conversation_id, write.messages)

        if write.touch:
            changes["last_active_at"] = now
        params = self._params(changes, SESSION_JSON)
        assignments = [f"{column} = ?" for column in params]
        values_out: list[Any] = list(params.values())
        for column, delta in deltas.items():
            if delta:
                assignments.append(f"{column} = {column} + ?")
                values_out.append(delta)
        if cost:
            assignments.append("cost_usd = cost_usd + ?")
            values_out.append(cost)
        # Seqs come from the row itself, under its lock: contiguous whatever the number of writers.
        assignments.append("last_seq = last_seq + ?")
        values_out.extend([len(write.events), session_id])
        # Only a patch needs the whole row back (update_session returns it); anything else needs the seq.
        returning = ", ".join(SESSION_COLUMNS) if write.session is not None else "last_seq"
        rows = await tx.fetch(
            f"UPDATE sessions SET {', '.join(assignments)} WHERE id = ? RETURNING {returning}", values_out
        )
        if write.session is None:
            return None, await self._insert_events(tx, write, conversation_id, int(rows[0][0]), now)
        updated = from_row(SessionRecord, SESSION_COLUMNS, rows[0], SESSION_JSON)
        return updated, await self._insert_events(tx, write, conversation_id, updated.last_seq, now)

    async def _append_only(self, tx: Tx, write: Write, now: datetime) -> list[Event]:
        """A write of events (with usage and messages, maybe): one UPDATE hands out the seqs; the session row
        is neither read first nor returned whole."""
        time_param = self._dialect.time_param(now)
        assignments = "last_seq = last_seq + ?, updated_at = ?"
        params: list[Any] = [len(write.events), time_param]
        if write.touch:
            assignments += ", last_active_at = ?"
            params.append(time_param)
        tokens = sum(entry.usage.total_tokens for entry in write.usage)
        cost = sum(entry.usage.cost_usd or 0.0 for entry in write.usage)
        if tokens:
            assignments += ", tokens = tokens + ?"
            params.append(tokens)
        if cost:
            assignments += ", cost_usd = cost_usd + ?"
            params.append(cost)
        sql = f"UPDATE sessions SET {assignments} WHERE id = ?"
        params.append(write.session_id)
        if write.expect_status is not None:
            # Checked by the UPDATE itself, on the row it locks (PostgreSQL re-checks it after waiting).
            condition, statuses = in_list("status", list(write.expect_status))
            sql += f" AND {condition}"
            params.extend(statuses)
        # The UPDATE takes the row lock (PostgreSQL) that serializes the session's writers until the commit,
        # and the seqs come from the row under it: contiguous whatever the number of writers.
        rows = await tx.fetch(sql + " RETURNING last_seq, conversation_id, role", params)
        if not rows:
            found = await tx.fetch("SELECT status FROM sessions WHERE id = ?", [write.session_id])
            if not found:
                raise NotFound(no_session(write.session_id))
            raise Conflict(unexpected_status(write.session_id, found[0][0], write.expect_status or ()))
        last_seq, conversation_id, role = rows[0]
        await self._insert_usage(tx, write.session_id, role, write.usage, now)
        await self._insert_messages(tx, conversation_id, write.messages)
        return await self._insert_events(tx, write, conversation_id, int(last_seq), now)

    async def _insert_usage(
        self, tx: Tx, session_id: str, role: str, usage: Sequence[UsageEntry], now: datetime
    ) -> tuple[int, float]:
        """Add the ledger entries; their total tokens and cost."""
        tokens = 0
        cost = 0.0
        for entry in usage:
            values = {
                "id": new_id("use"),
                "session_id": session_id,
                "turn_id": entry.turn_id,
                "run_id": entry.run_id,
                "role": entry.role or role,
                "model": entry.model,
                "at": entry.at or now,
                **entry.usage.model_dump(),
            }
            await self._insert(tx, "usage_ledger", values, frozenset())
            tokens += entry.usage.total_tokens
            cost += entry.usage.cost_usd or 0.0
        return tokens, cost

    async def _insert_messages(self, tx: Tx, conversation_id: str, messages: Sequence[JsonValue]) -> None:
        if not messages:
            return
        rows = await tx.fetch(
            "SELECT COALESCE(MAX(idx), -1) FROM messages WHERE conversation_id = ?", [conversation_id]
        )
        first = int(rows[0][0]) + 1
        await tx.execute_many(
            "INSERT INTO messages (conversation_id, idx, body) VALUES (?, ?, ?)",
            [
                (conversation_id, first + i, self._dialect.json_param(json.dumps(message)))
                for i, message in enumerate(messages)
            ],
        )

    async def _insert_events(
        self, tx: Tx, write: Write, conversation_id: str, last_seq: int, now: datetime
    ) -> list[Event]:
        """Insert the write's events, numbered up to `last_seq`; return them as stored."""
        if not write.events:
            return []
        events = stored_events(write, conversation_id, last_seq - len(write.events) + 1, now)
        at = self._dialect.time_param(now)
        await tx.execute_many(EVENT_INSERT, [event_row(self._dialect, event, at) for event in events])
        return events

    async def _take_inputs(self, tx: Tx, session_id: str, input_ids: Sequence[str], now: datetime) -> int:
        wanted = sorted(set(input_ids))
        condition, params = in_list("id", wanted)
        rows = await tx.fetch(
            f"SELECT id, taken_at FROM inbox WHERE session_id = ? AND {condition}",
            [
                session_id,
                *params,
            ],
        )
        found = {row[0]: row[1] for row in rows}
        for input_id in wanted:
            if input_id not in found:
                raise NotFound(f"session {session_id!r} has no inbox input {input_id!r}")
            if found[input_id] is not None:
                raise Conflict(f"inbox input {input_id!r} was already taken by a turn")
        await tx.execute(f"UPDATE inbox SET taken_at = ? WHERE {condition}", [self._dialect.time_param(now), *params])
        return len(wanted)

    async def _pending_request(self, tx: Tx, session_id: str, request_id: str) -> RequestRecord:
        rows = await tx.fetch(
            f"{_select(_REQUEST_COLUMNS, 'requests')} WHERE id = ? AND session_id = ?",
            [
                request_id,
                session_id,
            ],
        )
        if not rows:
            raise NotFound(f"session {session_id!r} has no request {request_id!r}; `agentwatch requests` lists them")
        record = from_row(RequestRecord, _REQUEST_COLUMNS, rows[0], _REQUEST_JSON)
        if record.status != "pending":
            raise Conflict(f"request {request_id!r} is already {record.status}; it cannot change again")
        return record

    async def read_events(
        self,
        session_id: str,
        *,
        after_seq: int = 0,
        limit: int = 100,
        types: Sequence[str] | None = None,
        conversation_id: str | None = None,
        turn_id: str | None = None,
    ) -> list[Event]:
        """Events with seq > `after_seq`, oldest first, at most `limit` (1..10000)."""
        return await self._events(session_id, after_seq, limit, types, conversation_id, turn_id, backward=False)

    async def read_events_backward(
        self,
        session_id: str,
        *,
        before_seq: int | None = None,
        limit: int = 100,
        types: Sequence[str] | None = None,
        conversation_id: str | None = None,
        turn_id: str | None = None,
    ) -> list[Event]:
        """Events with seq < `before_seq` (or the newest), newest first, at most `limit` (1..10000)."""
        return await self._events(session_id, before_seq, limit, types, conversation_id, turn_id, backward=True)

    async def _events(
        self,
        session_id: str,
        seq: int | None,
        limit: int,
        types: Sequence[str] | None,
        conversation_id: str | None,
        turn_id: str | None,
        *,
        backward: bool,
    ) -> list[Event]:
        check_limit(limit, _EVENT_LIMIT)
        if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int) or seq < 0):
            raise InvalidArgument(f"a seq must be a whole number from 0, not {seq!r}")
        if isinstance(types, str):
            raise InvalidArgument(f"types must be a list of event types, not the string {types!r}")
        conditions: list[str] = ["session_id = ?"]
        params: list[Any] = [session_id]
        if seq is not None:
            conditions.append("seq < ?" if backward else "seq > ?")
            params.append(seq)
        if types is not None:
            condition, more = in_list("type", list(types))
            conditions.append(condition)
            params.extend(more)
        if conversation_id is not None:
            conditions.append("conversation_id = ?")
            params.append(conversation_id)
        if turn_id is not None:
            conditions.append("turn_id = ?")
            params.append(turn_id)
        sql = (
            f"SELECT {_EVENT_READ} FROM events WHERE {' AND '.join(conditions)} "
            f"ORDER BY seq {'DESC' if backward else 'ASC'} LIMIT ?"
        )

        async def read(tx: Tx) -> list[Row]:
            rows = await tx.fetch(sql, [*params, limit])
            if not rows:
                await self._require_session(tx, session_id)  # an unknown session is an error, not an empty log
            return rows

        return [self._event(row) for row in await self._read(read)]

    async def get_event(self, session_id: str, event_id: str) -> Event:
        """One event by id. Raises `NotFound`."""
        sql = f"SELECT {_EVENT_READ} FROM events WHERE id = ? AND session_id = ?"
        rows = await self._read(lambda tx: tx.fetch(sql, [event_id, session_id]))
        if not rows:
            raise NotFound(f"session {session_id!r} has no event {event_id!r}")
        return self._event(rows[0])

    # -- conversations, inbox, requests, ledger -------------------------------------------------------

    async def list_conversations(self, session_id: str) -> list[ConversationRecord]:
        """Every conversation of the session, oldest first; the last one is current."""
        sql = f"{_select(_CONVERSATION_COLUMNS, 'conversations')} WHERE session_id = ? ORDER BY started_at, id"

        async def read(tx: Tx) -> list[Row]:
            rows = await tx.fetch(sql, [session_id])
            if not rows:
                await self._require_session(tx, session_id)
            return rows

        return [from_row(ConversationRecord, _CONVERSATION_COLUMNS, row, frozenset()) for row in await self._read(read)]

    async def read_messages(self, conversation_id: str) -> list[JsonValue]:
        """The model-layer messages of a conversation, in the order they were written."""
        sql = "SELECT body FROM messages WHERE conversation_id = ? ORDER BY idx"
        rows = await self._read(lambda tx: tx.fetch(sql, [conversation_id]))
        return [json.loads(row[0]) for row in rows]

    async def list_inputs(self, session_id: str, *, pending_only: bool = True) -> list[InputRecord]:
        """Inbox inputs, oldest first."""
        sql = f"{_select(_INPUT_COLUMNS, 'inbox')} WHERE session_id = ?"
        if pending_only:
            sql += " AND taken_at IS NULL"
        rows = await self._read(lambda tx: tx.fetch(sql + " ORDER BY created_at, id", [session_id]))
        return [from_row(InputRecord, _INPUT_COLUMNS, row, _INPUT_JSON) for row in rows]

    async def get_request(self, request_id: str) -> RequestRecord:
        """One request by id. Raises `NotFound`."""
        record: RequestRecord = await self._read(
            lambda tx: self._one(
                tx,
                RequestRecord,
                "requests",
                _REQUEST_COLUMNS,
                _REQUEST_JSON,
                ("id", request_id),
                f"no request with id {request_id!r}",
            )
        )
        return record

    async def list_requests(
        self,
        *,
        session_id: str | None = None,
        status: RequestStatus | None = "pending",
        limit: int = 100,
    ) -> list[RequestRecord]:
        """Requests, oldest first (requests opened by the same write in id order)."""
        check_limit(limit, _LIST_LIMIT)
        conditions: list[str] = []
        params: list[Any] = []
        if session_id is not None:
            conditions.append("session_id = ?")
            params.append(session_id)
        if status is not None:
            conditions.append("status = ?")
            params.append(status)
        sql = _select(_REQUEST_COLUMNS, "requests")
        if conditions:
            sql += " WHERE " + " AND ".join(conditions)
        rows = await self._read(lambda tx: tx.fetch(sql + " ORDER BY created_at, id LIMIT ?", [*params, limit]))
        return [from_row(RequestRecord, _REQUEST_COLUMNS, row, _REQUEST_JSON) for row in rows]

    async def usage_totals(self, session_ids: Sequence[str]) -> dict[str, Usage]:
        """Lifetime usage per session, from the ledger (reaped sessions included)."""
        wanted = list(dict.fromkeys(session_ids))
        condition, params = in_list("session_id", wanted)
        sql = f"SELECT session_id, {_USAGE_SUMS} FROM usage_ledger WHERE {condition} GROUP BY session_id"
        rows = await self._read(lambda tx: tx.fetch(sql, params))
        totals = {session_id: Usage() for session_id in wanted}
        totals.update({row[0]: _usage_from_sums(row[1:]) for row in rows})
        return totals

    async def usage_between(self, start: datetime, end: datetime, *, roles: Sequence[str] | None = None) -> Usage:
        """Total usage of ledger entries with start <= at < end."""
        conditions = ["at >= ?", "at < ?"]
        params: list[Any] = [self._dialect.time_param(start), self._dialect.time_param(end)]
        if roles is not None:
            condition, more = in_list("role", list(roles))
            conditions.append(condition)
            params.extend(more)
        sql = f"SELECT {_USAGE_SUMS} FROM usage_ledger WHERE {' AND '.join(conditions)}"
        rows = await self._read(lambda tx: tx.fetch(sql, params))
        return _usage_from_sums(rows[0])

    # -- runs -----------------------------------------------------------------------------------------

    async def create_run(self, draft: RunDraft) -> RunRecord:
        """Record a new run."""
        values = draft.model_dump() | {"id": draft.id or new_id("run"), "started_at": _now()}

        async def create(tx: Tx) -> RunRecord:
            await self._insert(tx, "runs", values, _RUN_JSON)
            return await self._run(tx, values["id"])

        return await self._write(create)

    async def _run(self, tx: Tx, run_id: str) -> RunRecord:
        record: RunRecord = await self._one(
            tx, RunRecord, "runs", _RUN_COLUMNS, _RUN_JSON, ("id", run_id), f"no run with id {run_id!r}"
        )
        return record

    async def get_run(self, run_id: str) -> RunRecord:
        """One run by id. Raises `NotFound`."""
        return await self._read(lambda tx: self._run(tx, run_id))

    async def update_run(self, run_id: str, patch: RunPatch) -> RunRecord:
        """Change a run."""

        async def update(tx: Tx) -> RunRecord:
            await self._run(tx, run_id)
            await self._update(tx, "runs", ("id", run_id), _patch_fields(patch), _RUN_JSON)
            return await self._run(tx, run_id)

        return await self._write(update)

    async def open_span(self, draft: SpanDraft) -> SpanRecord:
        """Record a span of a run."""
        values = draft.model_dump() | {"id": draft.id or new_id("spn"), "started_at": draft.started_at or _now()}

        async def create(tx: Tx) -> SpanRecord:
            await self._run(tx, draft.run_id)
            await self._insert(tx, "spans", values, _SPAN_JSON)
            return await self._span(tx, values["id"])

        return await self._write(create)

    async def _span(self, tx: Tx, span_id: str) -> SpanRecord:
        record: SpanRecord = await self._one(
            tx, SpanRecord, "spans", _SPAN_COLUMNS, _SPAN_JSON, ("id", span_id), f"no span with id {span_id!r}"
        )
        return record

    async def update_span(self, span_id: str, patch: SpanPatch) -> SpanRecord:
        """Change a span (end it, set its cost)."""

        async def update(tx: Tx) -> SpanRecord:
            await self._span(tx, span_id)
            fields = {name: value for name, value in _patch_fields(patch).items() if value is not None}
            await self._update(tx, "spans", ("id", span_id), fields, _SPAN_JSON)
            return await self._span(tx, span_id)

        return await self._write(update)

    async def list_spans(self, run_id: str) -> list[SpanRecord]:
        """A run's spans in start order."""
        sql = f"{_select(_SPAN_COLUMNS, 'spans')} WHERE run_id = ? ORDER BY started_at, id"
        rows = await self._read(lambda tx: tx.fetch(sql, [run_id]))
        return [from_row(SpanRecord, _SPAN_COLUMNS, row, _SPAN_JSON) for row in rows]

    async def append_journal(self, entry: JournalEntry) -> JournalEntry:
        """Add a line to a run's journal."""
        values = entry.model_dump() | {"id": entry.id or new_id("jrn"), "at": entry.at or _now()}

        async def append(tx: Tx) -> None:
            await self._run(tx, entry.run_id)
            await self._insert(tx, "journal", values, _JOURNAL_JSON)

        await self._write(append)
        return JournalEntry.model_validate(values)

    async def read_journal(self, run_id: str, *, limit: int = 100) -> list[JournalEntry]:
        """A run's journal, oldest first."""
        check_limit(limit, _LIST_LIMIT)
        sql = f"{_select(_JOURNAL_COLUMNS, 'journal')} WHERE run_id = ? ORDER BY at, id LIMIT ?"
        rows = await self._read(lambda tx: tx.fetch(sql, [run_id, limit]))
        return [from_row(JournalEntry, _JOURNAL_COLUMNS, row, _JOURNAL_JSON) for row in rows]

    # -- observer refs --------------------------------------------------------------------------------

    async def set_observer_ref(self, ref: ObserverRef) -> ObserverRef:
        """Record (or replace) the observer paired with `ref.observed_session_id`."""
        stored = self._stored_ref(ref, _now())

        async def upsert(tx: Tx) -> None:
            await self._require_session(tx, ref.observed_session_id)
            await self._upsert_observer_ref(tx, stored)

        await self._write(upsert)
        return stored

    @staticmethod
    def _stored_ref(ref: ObserverRef, now: datetime) -> ObserverRef:
        stopped_at = ref.stopped_at or (now if ref.stopped else None)
        return ref.model_copy(update={"stopped_at": stopped_at, "updated_at": now})

    async def _upsert_observer_ref(self, tx: Tx, stored: ObserverRef) -> None:
        params = self._params(stored.model_dump(), frozenset())
        columns = list(params)
        updates = ", ".join(f"{column} = excluded.{column}" for column in columns[1:])
        sql = (
            f"INSERT INTO observer_refs ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))}) "
            f"ON CONFLICT (observed_session_id) DO UPDATE SET {updates}"
        )
        await tx.execute(sql, list(params.values()))

    async def get_observer_ref(self, observed_session_id: str) -> ObserverRef | None:
        """The observer ref kept with a session, if any."""
        sql = f"{_select(_OBSERVER_COLUMNS, 'observer_refs')} WHERE observed_session_id = ?"
        rows = await self._read(lambda tx: tx.fetch(sql, [observed_session_id]))
        return from_row(ObserverRef, _OBSERVER_COLUMNS, rows[0], frozenset()) if rows else None


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
        and write.new_conversation is None
        and not write.inputs_add
        and not write.inputs_take
        and not write.requests_open
        and not write.requests_close
        and not write.requests_escalate
    )


def check_durable(write: Write) -> None:
    """Refuse, before anything is written, ephemeral events (they go to the live ring only) and text a plain
    column of some backend cannot keep (see `check_text`; payloads and messages are JSON, which escapes it)."""
    check_text(write.session_id, "session_id")
    for new in write.events:
        if not new.payload.durable:
            raise UserError(f"{new.payload.type!r} events are ephemeral: they go to the live ring, never to the store")
        if new.turn_id is not None:
            check_text(new.turn_id, "turn_id")
    for entry in write.usage:
        for name in ("turn_id", "run_id", "role", "model"):
            value = getattr(entry, name)
            if value is not None:
                check_text(value, f"usage {name}")


def no_session(session_id: str) -> str:
    return f"no session with id {session_id!r} (it may have been reaped); `agentwatch ls --all` lists the ids"


def unexpected_status(session_id: str, status: str, expected: Sequence[str]) -> str:
    return (
        f"session {session_id!r} is {status!r}, not one of {sorted(expected)}; "
        "read it again and retry if the change still applies"
    )


def _name_taken(name: str, scope: str | None, holder: str) -> str:
    where = f"scope {scope!r}" if scope is not None else "the global scope"
    return (
        f"a live session named {name!r} already exists in {where} ({holder}); pick another name, "
        "or delete that session first"
    )
