"""The sessions aggregate of `SqlStore`: sessions, their listings and counts, soft delete and reap, and the
observer refs kept with them."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from datetime import datetime
from types import UnionType
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import AwareDatetime, BaseModel

from agentwatch.errors import Conflict, InvalidArgument
from agentwatch.events import PageCursor, new_id
from agentwatch.store._sql import (
    DAMAGE,
    SESSION_COLUMNS,
    SESSION_JSON,
    Row,
    Tx,
    check_limit,
    damaged_session,
    from_row,
    in_list,
    keyset_page,
    quiet_expression,
    session_where,
    stored_time,
)
from agentwatch.store._sqlbase import (
    GROUP_BY,
    LIST_LIMIT,
    OBSERVER_COLUMNS,
    SqlBase,
    check_durable,
    name_taken,
    no_session,
    select,
    utc_now,
)
from agentwatch.store.records import (
    ObserverRef,
    Page,
    SessionDraft,
    SessionFilter,
    SessionGroup,
    SessionGroupBy,
    SessionPatch,
    SessionRecord,
    SessionSort,
    StateCount,
    Write,
)

__all__ = ["GET_SESSION", "SessionMethods", "session_from_row", "session_value", "stored_iso"]

T = TypeVar("T")


# -- rows to records --------------------------------------------------------------------------------------
#
# A session row was written by the store from a validated draft or patch, so reading it back needs its
# column codecs (time text, JSON text, SQLite's 0/1 booleans), not pydantic's validation of all 35 fields
# again: a listing page reads 21 rows and a tail starts with one, and validation was half their cost. Each
# field's codec is chosen from its annotation once, at import; a field of a kind not listed here is a
# mistake caught at import, and a test holds the records equal to `model_validate` on both backends.


def _json(value: Any) -> Any:
    if value == "{}":
        return {}  # most settings are empty
    document = json.loads(value)
    if type(document) is not dict:  # (valid JSON, but not what the field holds: damaged)
        raise TypeError(f"a JSON {type(document).__name__}, not an object")
    return document


def _codec(annotation: Any) -> Callable[[Any], Any] | None:
    """How a stored value becomes the field's value (None: as it is), from the field's annotation."""
    kinds = set(get_args(annotation) if get_origin(annotation) in (Union, UnionType) else (annotation,))
    kinds.discard(type(None))
    if kinds <= {str, int} or all(get_origin(kind) is Literal for kind in kinds):
        return None
    if kinds == {bool}:
        return bool
    if kinds == {float}:
        return float
    if kinds == {AwareDatetime}:
        return stored_time
    if all(get_origin(kind) is dict for kind in kinds):
        return _json
    if len(kinds) == 1 and isinstance(model := kinds.pop(), type) and issubclass(model, BaseModel):
        return lambda value: model.model_validate(json.loads(value) if isinstance(value, str) else value)
    raise TypeError(f"no stored-row codec for a field annotated {annotation!r}")


def stored_iso(value: Any) -> str:
    """A stored moment as the ISO 8601 text `stored_time(value).isoformat()` gives, without the round trip
    where the stored text already is it: SQLite's fixed-width UTC text, but for a whole second (whose
    `isoformat` leaves the microseconds out)."""
    if type(value) is str and len(value) == 32 and value[10] == "T" and value[19] == "." and value[26:] == "+00:00":
        return value if value[19:26] != ".000000" else value[:19] + "+00:00"
    return stored_time(value).isoformat()


def _json_codec(annotation: Any) -> Callable[[Any], Any] | None:
    """How a stored value becomes the field's value in JSON form (a time as its `isoformat` text, a model as
    its `model_dump(mode="json")`, other values as the record holds them), from the field's annotation (None:
    as it is)."""
    codec = _codec(annotation)
    if codec is stored_time:
        return stored_iso
    kinds = set(get_args(annotation) if get_origin(annotation) in (Union, UnionType) else (annotation,))
    kinds.discard(type(None))
    if len(kinds) == 1 and isinstance(model := kinds.pop(), type) and issubclass(model, BaseModel):
        return lambda value: model.model_validate(json.loads(value) if isinstance(value, str) else value).model_dump(
            mode="json"
        )
    return codec


_VALUE_CODECS: dict[str, Callable[[Any], Any] | None] = {
    column: _json_codec(SessionRecord.model_fields[column].annotation) for column in SESSION_COLUMNS
}
"""Per session column, how `list_session_values` decodes it."""

_SESSION_CODECS: list[tuple[int, Callable[[Any], Any]]] = [
    (index, codec)
    for index, codec in enumerate(_codec(SessionRecord.model_fields[column].annotation) for column in SESSION_COLUMNS)
    if codec is not None
]
_SESSION_FIELDS = set(SESSION_COLUMNS)
_ID, _NAME = SESSION_COLUMNS.index("id"), SESSION_COLUMNS.index("name")
GET_SESSION = f"{select(SESSION_COLUMNS, 'sessions')} WHERE id = ?"


def session_from_row(row: Row) -> SessionRecord:
    """A session from a row selected as `SESSION_COLUMNS`, decoded by its columns' codecs (no validation).

    A NULL stays None: every field whose default is not None has a NOT NULL column on both backends.
    """
    values = list(row)
    try:
        for index, codec in _SESSION_CODECS:
            value = values[index]
            if value is not None:
                values[index] = codec(value)
    except DAMAGE as error:
        session_id, name = row[_ID], row[_NAME]
        raise damaged_session(session_id, name, SESSION_COLUMNS[index], error) from None
    record = object.__new__(SessionRecord)
    object.__setattr__(record, "__dict__", dict(zip(SESSION_COLUMNS, values, strict=True)))
    object.__setattr__(record, "__pydantic_fields_set__", _SESSION_FIELDS)  # shared: all names, never fewer
    object.__setattr__(record, "__pydantic_extra__", None)
    object.__setattr__(record, "__pydantic_private__", None)
    return record


_CODEC_OF: dict[str, Callable[[Any], Any]] = {SESSION_COLUMNS[index]: codec for index, codec in _SESSION_CODECS}


def session_value(session_id: str, name: str | None, column: str, value: Any) -> Any:
    """One stored `column` of session `session_id` (`name`, when known) decoded as `session_from_row` decodes
    it, for a write that reads that column alone; `DamagedRecord` for a damaged value."""
    codec = _CODEC_OF.get(column)
    if value is None or codec is None:
        return value
    try:
        return codec(value)
    except DAMAGE as error:
        raise damaged_session(session_id, name, column, error) from None


@functools.cache
def _value_codecs(fields: tuple[str, ...]) -> tuple[tuple[int, ...], tuple[tuple[int, Callable[[Any], Any]], ...]]:
    """For `list_session_values` of `fields`: the indexes of the moments (`stored_iso`), and every other codec
    with its index."""
    codecs = [(index, codec) for index, name in enumerate(fields) if (codec := _VALUE_CODECS[name]) is not None]
    moments = tuple(index for index, codec in codecs if codec is stored_iso)
    return moments, tuple((index, codec) for index, codec in codecs if codec is not stored_iso)


def _keep_tombstones(where: str) -> str:
    """SQL that keeps the stopped observer refs `where` selects as their pairings' tombstones; a pairing stopped
    before keeps its first one."""
    return (
        "INSERT INTO observer_tombstones (observed_session_id, observer_type, observer_session_id, stopped_at) "
        "SELECT observed_session_id, observer_type, observer_session_id, COALESCE(stopped_at, updated_at) "
        f"FROM observer_refs WHERE stopped AND {where} ON CONFLICT (observed_session_id, observer_type) DO NOTHING"
    )


class SessionMethods(SqlBase):
    """Sessions and observer refs over `Tx`."""

    # -- sessions -------------------------------------------------------------------------------------

    async def create_session(self, draft: SessionDraft, *, observer_ref: ObserverRef | None = None) -> SessionRecord:
        """Create a session with its first conversation; `Conflict` when the name is taken in its scope.

        With `observer_ref`, the new session is that pairing's observer: the ref is recorded, naming it, in
        the same transaction (see `Store.create_session`).
        """
        now = utc_now()
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
                raise Conflict(name_taken(draft.name, draft.scope, taken[0][0]))
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
                {"id": conversation_id, "session_id": session_id, "started_at": now, "first_seq": 1},
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
            raise no_session(ref.observed_session_id)
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
        rows = await self._read(lambda tx: tx.fetch(GET_SESSION, [session_id]))
        if not rows:
            raise no_session(session_id)
        return session_from_row(rows[0])

    async def update_session(self, session_id: str, patch: SessionPatch) -> SessionRecord:
        """Write the fields set on `patch`; same as `write(Write(session_id, session=patch))`."""
        write = Write(session_id, session=patch)
        check_durable(write)
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
        items = [session_from_row(row) for row in rows[:limit]]
        next_cursor = cursor_after(rows[limit - 1]) if len(rows) > limit else None
        return Page(items, next_cursor)

    async def list_session_values(
        self,
        where: SessionFilter,
        fields: Sequence[str],
        *,
        sort: SessionSort = "newest",
        limit: int = 20,
        cursor: str | PageCursor | None = None,
    ) -> Page[list[Any]]:
        """`list_sessions` (the same rows and cursors), each session as the values of `fields` in JSON form."""
        unknown = [name for name in fields if name not in _VALUE_CODECS]
        if unknown:
            raise InvalidArgument(f"sessions have no field {unknown[0]!r}; the fields are {', '.join(SESSION_COLUMNS)}")
        sql, params, cursor_after = keyset_page(self._dialect, where, sort, limit, cursor, fields)
        rows = await self._read(lambda tx: tx.fetch(sql, params))
        moments, codecs = _value_codecs(tuple(fields))
        items: list[list[Any]] = []
        width = len(fields)  # the sort key's columns that `fields` lacks come after them
        try:
            for row in rows[:limit]:
                values = list(row[:width])
                for index in moments:
                    value = values[index]
                    # `stored_iso` inlined: SQLite's fixed-width UTC text is already the ISO text, but for a whole
                    # second.
                    if value is not None and not (
                        type(value) is str
                        and len(value) == 32
                        and value[26:] == "+00:00"
                        and value[10] == "T"
                        and value[19] == "."
                        and value[19:26] != ".000000"
                    ):
                        values[index] = stored_iso(value)
                for index, codec in codecs:
                    value = values[index]
                    if value is not None:
                        values[index] = codec(value)
                items.append(values)
        except DAMAGE as error:
            # The id is among `fields`, else the last column the listing added (see `keyset_page`).
            session_id = row[fields.index("id")] if "id" in fields else row[-1]
            name = row[fields.index("name")] if "name" in fields else None
            raise damaged_session(session_id, name, fields[index], error) from None
        next_cursor = cursor_after(rows[limit - 1]) if len(rows) > limit else None
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
        if by not in GROUP_BY:
            raise InvalidArgument(f"sessions can be grouped by {', '.join(GROUP_BY)}, not {by!r}")
        conditions, params = session_where(self._dialect, where)
        sql = f"SELECT {by}, count(*), MAX(last_active_at) FROM sessions"
        if conditions:
            sql += " WHERE " + " AND ".join(conditions)
        rows = await self._read(lambda tx: tx.fetch(sql + f" GROUP BY {by}", params))
        groups = [
            SessionGroup(
                key=key,
                sessions=int(n),
                last_active_at=stored_time(newest),
            )
            for key, n, newest in rows
        ]
        return sorted(groups, key=lambda group: (group.key is None, group.key or ""))

    async def soft_delete(self, session_id: str, *, reap_at: datetime) -> SessionRecord:
        """Mark a session deleted; it stays readable by id until `reap_at`."""
        now = utc_now()

        async def delete(tx: Tx) -> SessionRecord:
            await self._session(tx, session_id, lock=True)
            values = {"deleted_at": now, "reap_at": reap_at, "updated_at": now}
            await self._update(tx, "sessions", ("id", session_id), values, frozenset())
            return await self._session(tx, session_id)

        return await self._write(delete)

    async def reap(self, session_ids: Sequence[str]) -> int:
        """Hard-delete sessions with their transcript (conversations, events, messages, inbox, requests); an
        observer ref that names a deleted session among them becomes its tombstone (`stopped`)."""
        if not session_ids:
            return 0
        condition, params = in_list("id", sorted(set(session_ids)))
        # A deleted observer session is one a person stopped for good; once it is gone, its ref is all that says
        # so (else the pairing would read it as a lost context and start a fresh observer).
        tombstone = (
            "UPDATE observer_refs SET stopped = ?, updated_at = ?, stopped_at = COALESCE(stopped_at, "
            "(SELECT deleted_at FROM sessions WHERE sessions.id = observer_refs.observer_session_id)) "
            f"WHERE NOT stopped AND observer_session_id IN (SELECT id FROM sessions WHERE {condition} "
            "AND deleted_at IS NOT NULL)"
        )
        now = self._dialect.time_param(utc_now())

        async def reap(tx: Tx) -> int:
            await tx.execute(tombstone, [True, now, *params])
            await tx.execute(
                _keep_tombstones(f"observer_session_id IN (SELECT id FROM sessions WHERE {condition})"), params
            )
            # Foreign keys cascade to everything the session owns; the usage ledger has none, so it stays.
            return await tx.execute(f"DELETE FROM sessions WHERE {condition}", params)

        return await self._write(reap)

    async def due_for_reap(
        self, now: datetime, *, after: tuple[datetime, str] | None = None, limit: int = 100
    ) -> list[str]:
        """Ids of sessions whose `reap_at` has passed, by `reap_at` then id; with `after`, only those past it."""
        check_limit(limit, LIST_LIMIT)
        time = self._dialect.time_param
        past, params = "", [time(now)]
        if after is not None:
            past = " AND (reap_at > ? OR (reap_at = ? AND id > ?))"
            params += [time(after[0]), time(after[0]), after[1]]
        sql = f"SELECT id FROM sessions WHERE reap_at IS NOT NULL AND reap_at <= ?{past} ORDER BY reap_at, id LIMIT ?"
        rows = await self._read(lambda tx: tx.fetch(sql, [*params, limit]))
        return [row[0] for row in rows]

    # -- observer refs --------------------------------------------------------------------------------

    async def set_observer_ref(self, ref: ObserverRef) -> ObserverRef:
        """Record (or replace) the observer paired with `ref.observed_session_id`."""
        stored = self._stored_ref(ref, utc_now())

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
        """Record the ref; a stopped one is kept as its pairing's tombstone too (the first stop's, when the pairing
        was stopped before), which outlives the ref naming another observer type later."""
        params = self._params(stored.model_dump(), frozenset())
        columns = list(params)
        updates = ", ".join(f"{column} = excluded.{column}" for column in columns[1:])
        sql = (
            f"INSERT INTO observer_refs ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))}) "
            f"ON CONFLICT (observed_session_id) DO UPDATE SET {updates}"
        )
        await tx.execute(sql, list(params.values()))
        if stored.stopped:
            await tx.execute(_keep_tombstones("observed_session_id = ?"), [stored.observed_session_id])

    async def get_observer_ref(self, observed_session_id: str) -> ObserverRef | None:
        """The observer ref kept with a session, if any."""
        sql = f"{select(OBSERVER_COLUMNS, 'observer_refs')} WHERE observed_session_id = ?"
        rows = await self._read(lambda tx: tx.fetch(sql, [observed_session_id]))
        return from_row(ObserverRef, OBSERVER_COLUMNS, rows[0], frozenset()) if rows else None

    async def get_observer_tombstone(self, observed_session_id: str, observer_type: str) -> ObserverRef | None:
        """The tombstone a person's stop of the session's `observer_type` observer left, if any (see `Store`)."""
        sql = (
            "SELECT observed_session_id, observer_type, observer_session_id, stopped_at FROM observer_tombstones "
            "WHERE observed_session_id = ? AND observer_type = ?"
        )
        rows = await self._read(lambda tx: tx.fetch(sql, [observed_session_id, observer_type]))
        if not rows:
            return None
        columns = ("observed_session_id", "observer_type", "observer_session_id", "stopped_at")
        return from_row(ObserverRef, columns, rows[0], frozenset()).model_copy(update={"stopped": True})
