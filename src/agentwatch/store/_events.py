"""The events aggregate of `SqlStore`: writes (events with the state they describe), reading the log,
conversations and their messages."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from pydantic import JsonValue, ValidationError

from agentwatch.errors import (
    Conflict,
    DamagedRecord,
    InvalidArgument,
    NotFound,
    StoreError,
    StoreUnavailable,
    Suggestion,
)
from agentwatch.events import PAYLOAD_TYPES, Event, NewEvent, Origin, RuntimeNotice, new_id
from agentwatch.store._appends import Appends, apply_appends, read_counters
from agentwatch.store._leases import claim_lease
from agentwatch.store._sessions import GET_SESSION, session_from_row, session_value, stored_iso
from agentwatch.store._sql import (
    DAMAGE,
    SESSION_COLUMNS,
    Row,
    Tx,
    check_limit,
    damage_reason,
    damaged_row,
    from_row,
    in_list,
    stored_time,
)
from agentwatch.store._sqlbase import (
    CONVERSATION_COLUMNS,
    EVENT_LIMIT,
    EVENT_READ,
    INPUT_JSON,
    REQUEST_COLUMNS,
    REQUEST_JSON,
    SESSION_NOT_NULL,
    SqlBase,
    appends_only,
    check_durable,
    decode_payload,
    no_session,
    select,
    unexpected_status,
    utc_now,
)
from agentwatch.store.base import EventValues
from agentwatch.store.records import (
    ConversationRecord,
    RequestRecord,
    SessionRecord,
    Write,
)

__all__ = ["DAMAGED_SOURCE", "EventMethods", "damaged_event", "damaged_notice", "event_from_row", "events_from_rows"]

_SEQ_MAX = 2**63 - 1
_LAST_SEQ = SESSION_COLUMNS.index("last_seq")

T = TypeVar("T")


_VALIDATE_JSON: dict[str, Callable[[str], Any]] = {}
"""Per event type, its model's own JSON validator, once `decode_payload` has used (and so built) it."""


def _payload(type_name: str, payload: Any) -> Any:
    """`decode_payload`, calling the type's validator straight (most of its cost was the calls around it)."""
    validate = _VALIDATE_JSON.get(type_name)
    if validate is not None and type(payload) is str:
        try:
            return validate(payload)
        except ValidationError:
            pass  # decode_payload says what is wrong, or reads the escape pydantic refuses
    decoded = decode_payload(type_name, payload)
    model = PAYLOAD_TYPES.get(type_name)
    if model is not None and type_name not in _VALIDATE_JSON:
        _VALIDATE_JSON[type_name] = model.__pydantic_validator__.validate_json
    return decoded


def event_from_row(row: Row) -> Event:
    """An event from a row selected as `EVENT_READ`. The store wrote the envelope, so it is read back as it
    is (its time decoded); the payload is validated by its own type's model (the row's `type` names it).
    Raises what decoding raises (`DAMAGE`) for a damaged row: `events_from_rows` says what to do with it."""
    event_id, session_id, seq, at, turn_id, conversation_id, payload, type_name = row
    return Event.trusted(
        event_id, session_id, seq, 0, stored_time(at), turn_id, _payload(type_name, payload), conversation_id
    )


# -- damaged events -----------------------------------------------------------------------------------------
#
# One damaged event must not make the rest of its session unreadable: a read of the log as it is (every type,
# or types that include `runtime.error`: a tail, the history, an export, a follower, an observer's feed) gets a
# `runtime.error` notice from the store in the damaged event's place, with its id, seq, time and turn, which
# says what is damaged; the seqs stay whole, so cursors and followers go on past it. A read of other types only
# (the runtime's `turn.started`, a `tool.call` scan) cannot be answered without it, and raises `DamagedRecord`.

DAMAGED_SOURCE = "store"
"""The `source` of the notice read in a damaged event's place."""


def events_from_rows(rows: list[Row], types: Sequence[str] | None) -> list[Event]:
    """The events of rows selected as `EVENT_READ` by a read of `types` (None: every type), a damaged one as the
    store's notice in its place or `DamagedRecord` (see above). Rows are decoded without a look at each: only a
    page with a damaged row is gone over again, row by row."""
    try:
        return [event_from_row(row) for row in rows]
    except DAMAGE:
        return [_event_or_notice(row, types) for row in rows]


def _event_or_notice(row: Row, types: Sequence[str] | None) -> Event:
    try:
        return event_from_row(row)
    except DAMAGE as error:
        event_id, session_id, seq, at, turn_id, conversation_id, _, type_name = row
        moment = _stored_at(at, session_id, seq)  # (first: a damaged time is not the payload's fault)
        notice = damaged_notice(seq, type_name, error, types, session_id)
        return Event.trusted(event_id, session_id, seq, 0, moment, turn_id, notice, conversation_id)


def damaged_event(seq: int, type_name: str, error: BaseException, session_id: str) -> DamagedRecord:
    """The error for event `seq` (of type `type_name`) of session `session_id`, whose payload raised `error`."""
    return damaged_row(
        f"event {seq} ({type_name}) of session {session_id!r}",
        "payload",
        error,
        advice="restore the store from a backup, correct that value by hand, or delete the agent",
        session_id=session_id,
        seq=seq,
        type=type_name,
    )


def damaged_notice(
    seq: int, type_name: str, error: BaseException, types: Sequence[str] | None, session_id: str
) -> RuntimeNotice:
    """The notice read in place of event `seq` (of type `type_name`), whose payload raised `error`; or, for a read
    of `types` that leaves notices out, `DamagedRecord`."""
    damaged = damaged_event(seq, type_name, error, session_id)
    if types is not None and "runtime.error" not in types:
        raise damaged
    return RuntimeNotice(
        type="runtime.error",
        message=f"{damaged.message.removeprefix('the stored ')}; it is read as this notice, the events around it "
        "as they are",
        source=DAMAGED_SOURCE,
        detail={"damaged": {"seq": seq, "type": type_name, "reason": damage_reason(error)}},
    )


def _stored_at(at: Any, session_id: str, seq: int) -> datetime:
    """The time of a damaged event's row, or `DamagedRecord` when that is damaged too (no notice can stand in)."""
    try:
        return stored_time(at)
    except DAMAGE as error:
        raise damaged_row(
            f"event {seq} of session {session_id!r}", "at", error, session_id=session_id, seq=seq
        ) from None


_VALUES_READ = "id, seq, at, payload, type"
"""The columns `read_event_values` selects."""


def _event_values(rows: list[Row], session_id: str, types: Sequence[str] | None) -> list[EventValues]:
    """Rows selected as `_VALUES_READ` as `EventValues` (`_payload` inlined, and each tuple made without the
    named tuple's Python-level constructor: a tail reads a few hundred events); a damaged event as
    `events_from_rows` reads it."""
    validators = _VALIDATE_JSON
    make = tuple.__new__
    values: list[EventValues] = []
    try:
        for event_id, seq, at, payload, type_name in rows:
            validate = validators.get(type_name)
            try:
                decoded = validate(payload) if validate is not None and type(payload) is str else None
            except ValidationError:
                decoded = None
            if decoded is None:
                decoded = _payload(type_name, payload)
            values.append(make(EventValues, (event_id, seq, stored_iso(at), decoded)))
    except DAMAGE:
        return [_values_or_notice(row, session_id, types) for row in rows]
    return values


def _values_or_notice(row: Row, session_id: str, types: Sequence[str] | None) -> EventValues:
    event_id, seq, at, payload, type_name = row
    try:
        return EventValues(event_id, seq, stored_iso(at), _payload(type_name, payload))
    except DAMAGE as error:
        moment = _stored_at(at, session_id, seq)
        return EventValues(event_id, seq, moment.isoformat(), damaged_notice(seq, type_name, error, types, session_id))


class EventMethods(SqlBase):
    """Writes and the event log over `Tx`."""

    # -- events and the state they describe -----------------------------------------------------------

    async def write(self, write: Write) -> list[Event]:
        """Apply one atomic change and return the events as stored (with ids, seqs and times)."""
        check_durable(write)
        if appends_only(write):
            return await self._write_appends(write)
        _, events = await self._write_session(write.session_id, lambda tx: self._apply(tx, write, want_session=False))
        return events

    def _write_appends(self, write: Write) -> Awaitable[list[Event]]:
        """Apply an append-only `write` (see `appends_only`); a backend that groups the appends of concurrent
        callers into one transaction overrides it (with `apply_appends` over the group)."""
        return self._write_session(write.session_id, lambda tx: self._append_only(tx, write, utc_now()))

    async def append(self, session_id: str, events: Sequence[NewEvent]) -> list[Event]:
        """Append durable events; same as `write(Write(session_id, events))`, which only appends."""
        write = Write(session_id, events)
        check_durable(write)
        return await self._write_appends(write)

    async def _apply(
        self, tx: Tx, write: Write, *, want_session: bool = True
    ) -> tuple[SessionRecord | None, list[Event]]:
        """Apply `write`; the session as it ends up comes back only when the write patches it and
        `want_session` (`write` does not: reading the row back would be work for nothing). The caller checked
        `write` (`check_durable`) before queueing it: on the writer's thread that check would be paid twice."""
        if appends_only(write):
            return None, await self._append_only(tx, write, utc_now())

        session_id = write.session_id
        # Locks the row (PostgreSQL), which serializes every writer of this session until the commit.
        session = (await read_counters(tx, self._dialect, [session_id])).get(session_id)
        if session is None:
            raise no_session(session_id)
        # The time is read once the row is locked, so the writes of a session are timed in the order they commit
        # (read before, an input another process queued just after a stop could be stamped before the stop's
        # `turn.ended`, which `runtime.plan.settled` reads as queued before the stop).
        now = utc_now()
        if write.expect_status is not None and session.status not in write.expect_status:
            raise Conflict(unexpected_status(session_id, session.status, write.expect_status))
        if write.expect_unheld:
            [(held, name)] = await tx.fetch("SELECT interception, name FROM sessions WHERE id = ?", [session_id])
            if held is not None:
                by = session_value(session_id, name, "interception", held).get("by")
                raise Conflict(f"session {session_id!r} is already held by {by}; take it over once it is handed back")
        changes = session.changes
        if write.delete_until is not None:
            [(deleted_at,)] = await tx.fetch("SELECT deleted_at FROM sessions WHERE id = ?", [session_id])
            if deleted_at is not None:
                raise Conflict(f"session {session_id!r} is deleted already")
            changes["deleted_at"] = now
            changes["reap_at"] = write.delete_until
        deltas = {"pending_inputs": 0, "pending_reports": 0, "pending_requests": 0, "held_requests": 0}

        if write.new_conversation is not None:
            ended = {"ended_at": now, "end_reason": write.new_conversation, "end_seq": session.last_seq}
            await self._update(tx, "conversations", ("id", session.conversation_id), ended, frozenset())
            session.conversation_id = new_id("cnv")
            started = {
                "id": session.conversation_id,
                "session_id": session_id,
                "started_at": now,
                "first_seq": session.last_seq + 1,
            }
            await self._insert(tx, "conversations", started, frozenset())
            changes["conversation_id"] = session.conversation_id

        if write.session is not None:
            for column, value in write.session.changes().items():
                if value is None and column in SESSION_NOT_NULL:
                    raise InvalidArgument(f"session field {column!r} cannot be set to None")
                changes[column] = {} if value is None and column == "settings" else value

        for draft in write.inputs_add:
            values = draft.model_dump() | {"id": draft.id or new_id("inp"), "session_id": session_id, "created_at": now}
            await self._insert(tx, "inbox", values, INPUT_JSON)
            deltas["pending_reports" if draft.is_report else "pending_inputs"] += 1
        if write.inputs_take:
            inputs, reports = await self._take_inputs(tx, session_id, write.inputs_take, now)
            deltas["pending_inputs"] -= inputs
            deltas["pending_reports"] -= reports

        for request in write.requests_open:
            values = request.model_dump() | {
                "id": request.id or new_id("req"),
                "session_id": session_id,
                "status": "pending",
                "created_at": now,
            }
            await self._insert(tx, "requests", values, REQUEST_JSON)
            deltas["pending_requests" if request.waits_on == "person" else "held_requests"] += 1
        for close in write.requests_close:
            record = await self._pending_request(tx, session_id, close.request_id)
            closed = {"status": close.status, "closed_at": now, "answer": close.answer, "answered_by": close.by}
            await self._update(tx, "requests", ("id", record.id), closed, REQUEST_JSON)
            deltas["pending_requests" if record.waits_on == "person" else "held_requests"] -= 1
        for request_id in write.requests_escalate:
            record = await self._pending_request(tx, session_id, request_id)
            if record.waits_on != "parent":
                raise Conflict(f"request {request_id!r} already waits on a person; only held requests escalate")
            await self._update(tx, "requests", ("id", request_id), {"waits_on": "person"}, frozenset())
            deltas["held_requests"] -= 1
            deltas["pending_requests"] += 1

        if any(deltas.values()):
            counts = await tx.fetch(
                f"SELECT {', '.join(deltas)} FROM sessions WHERE id = ?", [session_id]
            )  # the row is locked: these are the values to add to
            for (column, delta), current in zip(deltas.items(), counts[0], strict=True):
                if delta:
                    changes[column] = int(current) + delta

        if write.claim is not None:  # (a lease that stands stays locked from here to the commit)
            await claim_lease(tx, self._dialect, session_id, write.claim)

        appends = Appends(self._dialect, now)
        events = appends.add(session, write)  # the same rows as any append, and the row update with them
        await appends.flush(tx)
        if write.session is None or not want_session:
            return None, events
        return await self._session(tx, session_id), events

    async def _append_only(self, tx: Tx, write: Write, now: datetime) -> list[Event]:
        """A write of events (with usage and messages, maybe): the one-write case of `apply_appends`."""
        [outcome] = await apply_appends(tx, self._dialect, [write], now)
        if isinstance(outcome, BaseException):
            raise outcome
        events: list[Event] = outcome
        return events

    async def _take_inputs(self, tx: Tx, session_id: str, input_ids: Sequence[str], now: datetime) -> tuple[int, int]:
        """Mark the inputs taken; returns how many of them were inputs and how many observer reports (each
        counted down from its own counter)."""
        wanted = sorted(set(input_ids))
        condition, params = in_list("id", wanted)
        rows = await tx.fetch(
            f"SELECT id, taken_at, origin FROM inbox WHERE session_id = ? AND {condition}",
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
        reports = sum(1 for row in rows if row[2] is not None and Origin.model_validate_json(row[2]).kind == "observer")
        return len(wanted) - reports, reports

    async def _pending_request(self, tx: Tx, session_id: str, request_id: str) -> RequestRecord:
        rows = await tx.fetch(
            f"{select(REQUEST_COLUMNS, 'requests')} WHERE id = ? AND session_id = ?",
            [
                request_id,
                session_id,
            ],
        )
        if not rows:
            shown = Suggestion("agent_get", {"id": session_id})
            raise NotFound(
                f"session {session_id!r} has no request {request_id!r}; {shown} shows what it waits on", suggest=[shown]
            )
        record = from_row(RequestRecord, REQUEST_COLUMNS, rows[0], REQUEST_JSON)
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

    async def read_session_events(
        self,
        session_id: str,
        *,
        after_seq: int | None = None,
        limit: int = 100,
        types: Sequence[str] | None = None,
    ) -> tuple[SessionRecord, list[Event]]:
        """The session, then its events in the same read: with `after_seq`, those after it, oldest first;
        without, the newest `limit` up to the session's `last_seq`, newest first. Raises `NotFound` for an
        unknown session."""
        _check_read(after_seq, limit, types)

        async def read(tx: Tx) -> tuple[Row, list[Row]]:
            # The row first: every event up to its last_seq is in what follows (a tail's head cursor).
            sessions = await tx.fetch(GET_SESSION, [session_id])
            if not sessions:
                raise no_session(session_id)
            session = sessions[0]
            if after_seq is None:
                head = session[_LAST_SEQ]
                sql, params = _events_query(session_id, head + 1, limit, types, None, None, backward=True)
            else:
                sql, params = _events_query(session_id, after_seq, limit, types, None, None, backward=False)
            return session, await tx.fetch(sql, params)

        session, rows = await self._read(read)
        return session_from_row(session), events_from_rows(rows, types)

    async def read_event_values(
        self,
        session_id: str,
        *,
        after_seq: int | None = None,
        limit: int = 100,
        types: Sequence[str] | None = None,
    ) -> tuple[int, list[EventValues]]:
        """`read_session_events` for a reader that shows events rather than handles them: the session's
        `last_seq`, then the same events in the same order, each as `EventValues`. Raises `NotFound` for an
        unknown session."""
        _check_read(after_seq, limit, types)

        async def read(tx: Tx) -> tuple[int, list[Row]]:
            # The row first: every event up to its last_seq is in what follows (a tail's head cursor).
            sessions = await tx.fetch("SELECT last_seq FROM sessions WHERE id = ?", [session_id])
            if not sessions:
                raise no_session(session_id)
            head: int = sessions[0][0]
            seq = head + 1 if after_seq is None else after_seq
            sql, params = _events_query(
                session_id, seq, limit, types, None, None, backward=after_seq is None, columns=_VALUES_READ
            )
            return head, await tx.fetch(sql, params)

        head, rows = await self._read(read)
        return head, _event_values(rows, session_id, types)

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
        _check_read(seq, limit, types)
        sql, params = _events_query(session_id, seq, limit, types, conversation_id, turn_id, backward=backward)

        async def read(tx: Tx) -> list[Row]:
            rows = await tx.fetch(sql, params)
            if not rows:
                await self._require_session(tx, session_id)  # an unknown session is an error, not an empty log
            return rows

        return events_from_rows(await self._read(read), types)

    async def get_event(self, session_id: str, event_id: str) -> Event:
        """One event by id. Raises `NotFound`."""
        sql = f"SELECT {EVENT_READ} FROM events WHERE id = ? AND session_id = ?"
        rows = await self._read(lambda tx: tx.fetch(sql, [event_id, session_id]))
        if not rows:
            raise NotFound(f"session {session_id!r} has no event {event_id!r}")
        [event] = events_from_rows(rows, None)
        return event

    # -- conversations, inbox, requests, ledger -------------------------------------------------------

    async def list_conversations(self, session_id: str) -> list[ConversationRecord]:
        """Every conversation of the session, oldest first; the last one is current."""
        sql = f"{select(CONVERSATION_COLUMNS, 'conversations')} WHERE session_id = ? ORDER BY started_at, id"

        async def read(tx: Tx) -> list[Row]:
            rows = await tx.fetch(sql, [session_id])
            if not rows:
                await self._require_session(tx, session_id)
            return rows

        return [from_row(ConversationRecord, CONVERSATION_COLUMNS, row, frozenset()) for row in await self._read(read)]

    async def read_messages(self, conversation_id: str) -> list[JsonValue]:
        """The model-layer messages of a conversation, in the order they were written."""
        sql = "SELECT body FROM messages WHERE conversation_id = ? ORDER BY idx"
        try:
            rows = await self._read(lambda tx: tx.fetch(sql, [conversation_id]))
        except (StoreError, InvalidArgument) as failure:
            # The `messages` view decodes the events a message is kept in (SQLite's JSON functions, PostgreSQL's
            # cast to json), so a damaged one fails the query itself: find it, to name it.
            if isinstance(failure, StoreUnavailable):
                raise
            damaged = await self._damaged_message_source(conversation_id)
            if damaged is None:
                raise
            raise damaged from None
        try:
            return [json.loads(row[0]) for row in rows]
        except DAMAGE:
            for index, (body,) in enumerate(rows):
                try:
                    json.loads(body)
                except DAMAGE as error:
                    raise _damaged_message(conversation_id, index, error) from None
            raise

    async def _damaged_message_source(self, conversation_id: str) -> DamagedRecord | None:
        """The error for what the `messages` view of a conversation could not decode: an event a message is kept
        in whose payload is not JSON, or the body of a message that holds a tool's output in its place (SQLite);
        None when neither is damaged. Read without a JSON function, for a read of the view that failed."""
        sql = (
            "SELECT m.idx, m.body, m.event_path, c.session_id, e.seq, e.type, e.payload FROM message_rows m "
            "JOIN conversations c ON c.id = m.conversation_id "
            "LEFT JOIN events e ON e.session_id = c.session_id AND e.seq = m.event_seq "
            "WHERE m.conversation_id = ? AND m.event_seq IS NOT NULL ORDER BY m.idx"
        )
        for index, body, path, session_id, seq, type_name, payload in await self._read(
            lambda tx: tx.fetch(sql, [conversation_id])
        ):
            if payload is not None:
                try:
                    json.loads(payload)
                except DAMAGE as error:
                    return damaged_event(seq, type_name, error, session_id)
            if body is not None and path is not None:
                try:
                    json.loads(body)
                except DAMAGE as error:
                    return _damaged_message(conversation_id, index, error)
        return None


def _damaged_message(conversation_id: str, index: int, error: BaseException) -> DamagedRecord:
    """The error for the model message at `index` of a conversation, whose body raised `error`."""
    what = f"model message {index + 1} of conversation {conversation_id!r}"
    return damaged_row(what, "body", error, conversation_id=conversation_id, index=index)


def _check_read(seq: int | None, limit: int, types: Sequence[str] | None) -> None:
    check_limit(limit, EVENT_LIMIT)
    if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int) or seq < 0):
        raise InvalidArgument(f"a seq must be a whole number from 0, not {seq!r}")
    if isinstance(types, str):
        raise InvalidArgument(f"types must be a list of event types, not the string {types!r}")


def _events_query(
    session_id: str,
    seq: int | None,
    limit: int,
    types: Sequence[str] | None,
    conversation_id: str | None,
    turn_id: str | None,
    *,
    backward: bool,
    columns: str = EVENT_READ,
) -> tuple[str, list[Any]]:
    """The SELECT of `columns` of a session's events after `seq` (or before it, `backward`), and its
    parameters."""
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
        # A conversation's events are a contiguous range of its session's seqs: the range bounds the
        # scan of the session's (session_id, seq) index, the id picks the rows.
        conditions.append(
            "conversation_id = ? AND seq >= (SELECT first_seq FROM conversations WHERE id = ?) "
            f"AND seq <= COALESCE((SELECT end_seq FROM conversations WHERE id = ?), {_SEQ_MAX})"
        )
        params.extend([conversation_id] * 3)
    if turn_id is not None:
        conditions.append("turn_id = ?")
        params.append(turn_id)
    sql = (
        f"SELECT {columns} FROM events WHERE {' AND '.join(conditions)} "
        f"ORDER BY seq {'DESC' if backward else 'ASC'} LIMIT ?"
    )
    return sql, [*params, limit]
