"""SQL shared by the SQL backends: the dialect differences, the `Tx` a query runs in, value codecs, row to
record mapping, session filters and keyset pagination.

Queries are written once with `?` placeholders; a backend's `Tx` translates them when its driver wants
another style. Values always travel as parameters; SQL text is only ever built from the constant fragments
in this package, so there is nothing to escape.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError

from agentwatch.errors import DamagedRecord, InvalidArgument, InvalidCursor, Suggestion
from agentwatch.events import (
    PAYLOAD_ADAPTER,
    PageCursor,
    query_digest,
)
from agentwatch.store.records import (
    TERMINAL_STATUSES,
    SessionClause,
    SessionFilter,
    SessionRecord,
    SessionSort,
)

__all__ = [
    "DAMAGE",
    "EVENT_INSERT",
    "LIVE_SQL",
    "SESSION_COLUMNS",
    "Dialect",
    "Row",
    "Tx",
    "aware",
    "check_limit",
    "check_params",
    "check_text",
    "damage_reason",
    "damaged_row",
    "damaged_session",
    "from_row",
    "has_surrogate",
    "in_list",
    "json_text",
    "keyset_page",
    "payload_json",
    "session_where",
    "to_params",
    "utc_text",
]

Row = tuple[Any, ...]
M = TypeVar("M", bound=BaseModel)


class Tx(Protocol):
    """A connection inside a transaction (or, for reads, a connection)."""

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Run a statement that returns rows, and return them all."""

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run a statement and return how many rows it changed."""

    async def execute_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement once per parameter row."""


@dataclass(frozen=True, slots=True)
class Dialect:
    """What differs between the SQL backends beyond the placeholder style."""

    name: Literal["sqlite", "postgres"]
    for_update: str
    """Suffix that locks the selected row for the transaction ('' where a single writer makes it moot)."""
    time_param: Callable[[datetime], Any]
    """An aware datetime as the driver should receive it."""
    json_param: Callable[[str], Any]
    """A JSON document (as text) as the driver should receive it."""
    tenth_param: Callable[[datetime], Any]
    """The tenth of a second a moment falls in, as the sessions' `active_tenth` holds it: the activity listings'
    indexes hold that tenth instead of the exact time (see the migrations named `activity_by_the_tenth`)."""
    ascii_case: str = ""
    """What makes `lower()` of a column fold A-Z alone, as SQLite's does (PostgreSQL's folds by the column's
    collation: all of Unicode under the database's, none beyond ASCII under "C")."""


def stored_time(value: str | datetime) -> datetime:
    """A stored moment as an aware UTC datetime: SQLite keeps ISO 8601 text with its +00:00 offset, PostgreSQL
    gives an aware datetime. A text without an offset is damage (`ValueError`, as for one that is no time): read
    as a naive datetime, it would be a local time to whatever compared it."""
    if not isinstance(value, str):
        return value.astimezone(UTC)
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is not UTC:  # (the store writes +00:00, which reads as UTC itself)
        if moment.tzinfo is None:
            raise ValueError(f"{value!r} is a time without its offset from UTC")
        moment = moment.astimezone(UTC)
    return moment


def aware(moment: datetime) -> datetime:
    """`moment` in UTC; a naive datetime is refused (its time zone would be a guess)."""
    if not isinstance(moment, datetime) or moment.tzinfo is None or moment.utcoffset() is None:
        raise InvalidArgument(f"{moment!r} is not an aware datetime; the store takes aware datetimes (UTC)")
    return moment.astimezone(UTC)


def tenth_of(moment: datetime) -> datetime:
    """The tenth of a second `moment` falls in, as PostgreSQL's `active_tenth` holds it: UTC, without zone."""
    moment = moment.astimezone(UTC)
    return moment.replace(microsecond=moment.microsecond // 100_000 * 100_000, tzinfo=None)


def tenth_text(moment: datetime) -> str:
    """The tenth of a second `moment` falls in, as SQLite's `active_tenth` holds it: its `utc_text` cut after the
    tenths digit."""
    return utc_text(moment)[:21]


def utc_text(moment: datetime) -> str:
    """A fixed-width ISO 8601 UTC text, whose text order is time order (SQLite keeps times as text)."""
    if type(moment) is datetime and moment.tzinfo is UTC and moment.year >= 1000:
        return moment.isoformat(timespec="microseconds")  # the same text, without the checks (every write)
    return aware(moment).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")


def json_text(value: Any) -> str:
    """A JSON-able value (or pydantic model) as compact JSON text that any backend keeps as it is.

    A NUL comes out as the escape `\\u0000`; a lone surrogate (which UTF-8 cannot carry) as its escape
    `\\udXXX`, so such text is stored losslessly (`json.loads` gives it back) instead of failing.
    """
    if isinstance(value, BaseModel):
        try:
            return value.model_dump_json()
        except PydanticSerializationError:  # a lone surrogate: escaped ASCII JSON instead
            return json.dumps(value.model_dump(mode="json"), separators=(",", ":"))
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text if text.isascii() or not has_surrogate(text) else json.dumps(value, separators=(",", ":"))


def payload_json(payload: Any) -> str:
    """An event payload as JSON text (see `json_text` for NUL and lone surrogates). A payload is an instance
    of its own model, whose serializer gives the union's text without the union's dispatch (a third of the
    cost, measured)."""
    if not isinstance(payload, BaseModel):
        return PAYLOAD_ADAPTER.dump_json(payload).decode()
    try:
        return payload.__pydantic_serializer__.to_json(payload).decode()
    except PydanticSerializationError:  # a lone surrogate: escaped ASCII JSON, which json.loads reads back
        return json.dumps(payload.model_dump(mode="json"), separators=(",", ":"))


def has_surrogate(text: str) -> bool:
    """True when `text` holds a lone surrogate (a code point UTF-8 cannot encode)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_text(value: str, what: str) -> None:
    """Refuse text that some backend cannot keep as a plain text column: a NUL character (PostgreSQL refuses
    it) or a lone surrogate (UTF-8 cannot carry it). JSON documents escape both and need no check."""
    if "\x00" in value:
        raise InvalidArgument(f"{what} contains a NUL character (\\x00), which cannot be stored; remove it")
    if not value.isascii() and has_surrogate(value):
        raise InvalidArgument(
            f"{what} contains a lone surrogate (an unpaired \\ud800-\\udfff), which is not valid text; "
            "send it as proper UTF-8"
        )


def check_params(params: Sequence[Any]) -> None:
    """`check_text` on every text parameter of a statement: the last guard, for values no earlier check
    named (the message then cannot say which field it was)."""
    for value in params:
        if type(value) is str and ("\x00" in value or (not value.isascii() and has_surrogate(value))):
            check_text(value, "a text value")


def to_params(dialect: Dialect, values: dict[str, Any], json_columns: frozenset[str]) -> dict[str, Any]:
    """Values by column, encoded for the driver (times, JSON documents); None stays NULL."""
    encoded: dict[str, Any] = {}
    for column, value in values.items():
        if value is None:
            encoded[column] = None
        elif column in json_columns:
            encoded[column] = dialect.json_param(json_text(value))
        elif isinstance(value, datetime):
            encoded[column] = dialect.time_param(value)
        else:
            if isinstance(value, str):
                check_text(value, column)
            encoded[column] = value
    return encoded


# -- damaged rows ------------------------------------------------------------------------------------------
#
# The store reads back what it wrote, so a row that cannot be decoded was changed behind its back (edited by
# hand, a restore gone wrong). Decoding is where that shows, once for every caller: a row is decoded without
# looking (a `try` costs nothing until it raises), and only a failure goes back over the row to name what is
# damaged, as a `DamagedRecord`.

DAMAGE = (ValueError, TypeError)
"""What decoding a damaged row raises: `json.JSONDecodeError` and pydantic's `ValidationError` are
`ValueError`s, as is a time that is not one; a value of the wrong kind (a number where JSON text should be)
is a `TypeError`."""

_RECORD_KINDS: dict[str, tuple[str, str, str]] = {
    # model -> (what a row of it is called, the column that identifies it, that column's name in `details`)
    "ConversationRecord": ("conversation", "id", "conversation_id"),
    "InputRecord": ("inbox input", "id", "input_id"),
    "RequestRecord": ("request", "id", "request_id"),
    "RunRecord": ("run", "id", "run_id"),
    "SpanRecord": ("span", "id", "span_id"),
    "JournalEntry": ("journal entry", "id", "entry_id"),
    "ObserverRef": ("observer ref of session", "observed_session_id", "session_id"),
}

_REPAIR = "restore the store from a backup, or correct that value by hand"
"""What to do about a damaged row (the engine reads the row before it changes it, so it cannot help)."""


def damage_reason(error: BaseException) -> str:
    """What is wrong with a stored value, in a few words, from what decoding it raised."""
    if isinstance(error, json.JSONDecodeError):
        return f"is not valid JSON ({error.msg} at character {error.pos})"
    if isinstance(error, ValidationError):
        problems = error.errors(include_url=False)
        first = problems[0]
        where = ".".join(str(part) for part in first["loc"])
        more = f", and {len(problems) - 1} more problem(s)" if len(problems) > 1 else ""
        return f"does not fit its type ({where + ': ' if where else ''}{first['msg']}{more})"
    return f"cannot be read ({error})"


def damaged_row(
    what: str, column: str, error: BaseException, *, advice: str = _REPAIR, **details: Any
) -> DamagedRecord:
    """The error for a stored row that cannot be read back: `what` names the row (`session 'ses_...'`),
    `column` the part of it that is damaged, `advice` what to do; `details` are the same facts for a program."""
    return DamagedRecord(
        f"the stored {what} is damaged: its {column} value {damage_reason(error)}; {advice}", column=column, **details
    )


def from_row(model: type[M], columns: Sequence[str], row: Row, json_columns: frozenset[str]) -> M:
    """Build a record from a row selected as `columns`; `DamagedRecord` for a row that cannot be one."""
    values: dict[str, Any] = {}
    try:
        for column, value in zip(columns, row, strict=True):
            if value is None:
                continue  # the record's default (None, or {} for settings)
            if column in json_columns:
                value = json.loads(value)
            elif isinstance(value, datetime):
                value = value.astimezone(UTC)
            values[column] = value
        return model.model_validate(values)
    except DAMAGE as error:
        raise _damaged_record(model, columns, row, json_columns, error) from None


def _damaged_record(
    model: type[BaseModel], columns: Sequence[str], row: Row, json_columns: frozenset[str], error: BaseException
) -> DamagedRecord:
    """The `DamagedRecord` for a row `from_row` could not make a `model` of: the column whose JSON does not
    parse, else the first field validation refused."""
    by_column = dict(zip(columns, row, strict=True))
    column = "row"
    for name in columns:
        if name in json_columns and by_column[name] is not None:
            try:
                json.loads(by_column[name])
            except DAMAGE as bad_json:
                column, error = name, bad_json
                break
    else:
        problems = error.errors() if isinstance(error, ValidationError) else []
        if problems and problems[0]["loc"]:
            column = str(problems[0]["loc"][0])
    if model is SessionRecord and "id" in by_column and "name" in by_column:
        return damaged_session(by_column["id"], by_column["name"], column, error)
    what, key, detail = _RECORD_KINDS.get(model.__name__, (model.__name__, "id", "id"))
    if by_column.get(key) is None:
        return damaged_row(what, column, error)
    return damaged_row(f"{what} {by_column[key]!r}", column, error, **{detail: by_column[key]})


def damaged_session(session_id: str, name: str | None, column: str, error: BaseException) -> DamagedRecord:
    """The `DamagedRecord` for the row of session `session_id` (`name`, when known) whose `column` raised `error`."""
    what = f"session {session_id!r}" + (f" ({name})" if name else "")
    delete = Suggestion("agent_delete", {"id": session_id})
    advice = f"{_REPAIR}, or delete the agent by its id ({delete})"
    return damaged_row(what, column, error, advice=advice, suggest=[delete], session_id=session_id)


def in_list(column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
    """`column IN (?, ...)`; an empty list matches nothing."""
    if not values:
        return "1 = 0", []
    return f"{column} IN ({', '.join('?' * len(values))})", list(values)


def check_limit(limit: int, maximum: int, what: str = "limit") -> None:
    """Refuse a page size outside 1..maximum."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= maximum:
        raise InvalidArgument(f"{what} must be an integer from 1 to {maximum}, not {limit!r}")


# -- sessions --------------------------------------------------------------------------------------------

SESSION_COLUMNS: tuple[str, ...] = tuple(SessionRecord.model_fields)
SESSION_JSON: frozenset[str] = frozenset({"origin", "context_fill", "interception", "settings"})

_TERMINAL_SQL = ", ".join(f"'{status}'" for status in sorted(TERMINAL_STATUSES))
LIVE_SQL = f"(deleted_at IS NULL AND status NOT IN ({_TERMINAL_SQL}))"
"""True for a session that is neither finished nor deleted; listings put these first. The sessions table
keeps it as the generated column `live`, which queries use (so indexes can hold it)."""

_SORT: dict[str, tuple[str, bool]] = {
    # sort -> (column, descending); the id tiebreak follows the same direction
    "newest": ("last_active_at", True),
    "oldest": ("last_active_at", False),
    "name": ("name", False),
    "status": ("status", False),
}


_HEAD_KEYS = {"group_key": "COALESCE(group_key, id)", "run_id": "COALESCE(run_id, id)"}


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def session_where(dialect: Dialect, where: SessionFilter) -> tuple[list[str], list[Any]]:
    """The filter as SQL conditions (to be ANDed) and their parameters."""
    if where.heads_of is not None:
        return _heads_where(dialect, where)
    conditions: list[str] = []
    params: list[Any] = []

    def add(sql: str, *values: Any) -> None:
        conditions.append(sql)
        params.extend(values)

    for column in ("ids", "status", "source", "role", "feature"):
        values = getattr(where, column)
        if values is not None:
            sql, more = in_list("id" if column == "ids" else column, list(values))
            add(sql, *more)
    for column in ("group_key", "name", "scope", "run_id", "parent_id"):
        value = getattr(where, column)
        if value is not None:
            add(f"{column} = ?", value)
    if where.q is not None:
        # A-Z fold on both sides, as lower() does on every backend: any part of a name in its own case matches.
        pattern = where.q.translate(_ASCII_LOWER).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        case = dialect.ascii_case
        add(
            f"(lower(name{case}) LIKE ? ESCAPE '\\' OR lower(display_name{case}) LIKE ? ESCAPE '\\')",
            *[f"%{pattern}%"] * 2,
        )
    if where.is_observer is not None:
        add("is_observer = ?", where.is_observer)
    if where.intercepted is not None:
        add("interception IS NOT NULL" if where.intercepted else "interception IS NULL")
    if where.active_from is not None:
        add("last_active_at >= ?", dialect.time_param(where.active_from))
    if where.active_to is not None:
        add("last_active_at < ?", dialect.time_param(where.active_to))
    if where.created_from is not None:
        add("created_at >= ?", dialect.time_param(where.created_from))
    if where.created_to is not None:
        add("created_at < ?", dialect.time_param(where.created_to))
    if where.run_entity is not None:
        add("run_id IN (SELECT runs.id FROM runs WHERE runs.entity = ?)", where.run_entity)
    if where.any_of is not None:
        alternatives: list[str] = []
        for clause in where.any_of:
            sql, more = _clause_where(dialect, where, clause)
            alternatives.append(sql)
            params.extend(more)
        conditions.append("(" + " OR ".join(alternatives) + ")" if alternatives else "1 = 0")
    if not where.deleted:
        add("deleted_at IS NULL")
    return conditions, params


def _clause_where(dialect: Dialect, where: SessionFilter, clause: SessionClause) -> tuple[str, list[Any]]:
    parts: list[str] = []
    params: list[Any] = []
    if clause.status is not None:
        sql, more = in_list("status", list(clause.status))
        parts.append(sql)
        params.extend(more)
    if clause.waits_on_person is not None:
        parts.append("pending_requests > 0" if clause.waits_on_person else "pending_requests = 0")
    if clause.quiet is not None:
        sql, more = _quiet_where(dialect, where)
        parts.append(sql if clause.quiet else f"NOT {sql}")
        params.extend(more)
    return "(" + (" AND ".join(parts) or "1 = 1") + ")", params


def quiet_expression(dialect: Dialect, where: SessionFilter) -> tuple[str, list[Any]]:
    """A boolean SQL expression: quiet by the filter's cutoffs, or false when the filter gives none."""
    if where.quiet_before is None:
        return "1 = 0", []
    return _quiet_where(dialect, where)


def _quiet_where(dialect: Dialect, where: SessionFilter) -> tuple[str, list[Any]]:
    """Last activity before the session's cutoff: its role's own, else the default one."""
    if where.quiet_before is None:
        raise InvalidArgument("a clause asks about quiet sessions, so the filter needs quiet_before")
    by_role = sorted(where.quiet_before_by_role.items())
    parts: list[str] = []
    params: list[Any] = []
    for role, cutoff in by_role:
        parts.append("(role = ? AND last_active_at < ?)")
        params += [role, dialect.time_param(cutoff)]
    if by_role:
        others, roles = in_list("role", [role for role, _ in by_role])
        parts.append(f"(NOT {others} AND last_active_at < ?)")
        params += [*roles, dialect.time_param(where.quiet_before)]
    else:
        parts.append("last_active_at < ?")
        params.append(dialect.time_param(where.quiet_before))
    return "(" + " OR ".join(parts) + ")", params


def _heads_where(dialect: Dialect, where: SessionFilter) -> tuple[list[str], list[Any]]:
    """Only the newest matching session of each lineage or run (a window function: no correlated alias)."""
    assert where.heads_of is not None
    inner, params = session_where(dialect, where.model_copy(update={"heads_of": None}))
    key = _HEAD_KEYS[where.heads_of]
    ranked = (
        f"SELECT id, ROW_NUMBER() OVER (PARTITION BY {key} ORDER BY last_active_at DESC, id DESC) AS head_rank "
        "FROM sessions" + (" WHERE " + " AND ".join(inner) if inner else "")
    )
    return [f"id IN (SELECT heads.id FROM ({ranked}) AS heads WHERE heads.head_rank = 1)"], params


_LISTING_DIGESTS: dict[int, tuple[SessionFilter, SessionSort, str]] = {}
"""`_listing_digest` by the filter object (a caller that keeps its filters, as `agent_list` does, finds it here).
Each entry holds its filter, so the id is not another object's while the entry is kept."""
_LISTING_DIGESTS_KEPT = 512


def _listing_digest(where: SessionFilter, sort: SessionSort) -> str:
    kept = _LISTING_DIGESTS.get(id(where))
    if kept is not None and kept[0] is where and kept[1] == sort:
        return kept[2]
    digest = query_digest({"sessions": where.model_dump(mode="json"), "sort": sort})
    if len(_LISTING_DIGESTS) >= _LISTING_DIGESTS_KEPT:
        _LISTING_DIGESTS.clear()
    _LISTING_DIGESTS[id(where)] = (where, sort, digest)
    return digest


def keyset_page(
    dialect: Dialect,
    where: SessionFilter,
    sort: SessionSort,
    limit: int,
    cursor: str | PageCursor | None,
    columns: Sequence[str] = (),
) -> tuple[str, list[Any], Callable[[Row], str]]:
    """The listing query (fetching one row past `limit`) and how to make the cursor after one of its rows.

    The query selects `columns` (every session column when empty) and, after them, whichever of the sort
    key's columns they lack; the cursor is made from the row as selected (before any decoding)."""
    if sort not in _SORT:
        raise InvalidArgument(f"sort must be one of {sorted(_SORT)}, not {sort!r}")
    check_limit(limit, 100)
    column, descending = _SORT[sort]
    digest = _listing_digest(where, sort)
    conditions, params = session_where(dialect, where)
    # (expression, descending) in ORDER BY order: boss first, then live ones, then the sort, then the id.
    # `live` is the stored form of LIVE_SQL; each order has an index on exactly these keys (see the schema).
    keys = [("boss", True), ("live", True), (column, descending), ("id", descending)]
    if column == "last_active_at":  # the index's order, then the exact time within each tenth (the same order)
        keys.insert(2, ("active_tenth", descending))
    if cursor is not None and all(desc for _, desc in keys):
        # One direction throughout: a row-value comparison, which the index scan can start from.
        conditions.append(f"({', '.join(key for key, _ in keys)}) < ({', '.join('?' * len(keys))})")
        params.extend(_cursor_values(_opened(cursor, digest), column, dialect))
    elif cursor is not None:
        values = _cursor_values(_opened(cursor, digest), column, dialect)
        # Expanded row comparison, since the directions differ: rows strictly after the cursor's row.
        branches: list[str] = []
        for i, (expression, desc) in enumerate(keys):
            parts = [f"{expr} = ?" for expr, _ in keys[:i]] + [f"{expression} {'<' if desc else '>'} ?"]
            branches.append("(" + " AND ".join(parts) + ")")
            params.extend(values[: i + 1])
        conditions.append("(" + " OR ".join(branches) + ")")
    order = ", ".join(f"{expression} {'DESC' if desc else 'ASC'}" for expression, desc in keys)
    selected = list(columns or SESSION_COLUMNS)
    selected += [key for key in ("boss", "deleted_at", "status", column, "id") if key not in selected]
    boss, deleted_at, status, value, session_id = (
        selected.index(key) for key in ("boss", "deleted_at", "status", column, "id")
    )
    sql = f"SELECT {', '.join(selected)} FROM sessions"
    if conditions:
        sql += " WHERE " + " AND ".join(conditions)
    sql += f" ORDER BY {order} LIMIT ?"
    params.append(limit + 1)

    def cursor_after(row: Row) -> str:
        # A stored time is SQLite's fixed-width text already, or PostgreSQL's datetime.
        moment = row[value]
        live = row[deleted_at] is None and row[status] not in TERMINAL_STATUSES
        key = (bool(row[boss]), live, utc_text(moment) if isinstance(moment, datetime) else moment, row[session_id])
        return PageCursor(digest, key).encode()

    return sql, params, cursor_after


def _opened(cursor: str | PageCursor, digest: str) -> PageCursor:
    """The page cursor `cursor` names (its text, or the cursor a caller decoded already), refused when it
    came from a listing of other filters or sort."""
    if isinstance(cursor, str):
        return PageCursor.decode(cursor, query=digest)
    if cursor.query != digest:
        PageCursor.decode(cursor.encode(), query=digest)  # raises the mismatch's InvalidCursor
    return cursor


def _cursor_values(cursor: PageCursor, column: str, dialect: Dialect) -> list[Any]:
    """The values of the listing's keys at the cursor (for the activity, the tenth of its time before it)."""
    match cursor.key:
        case (bool(boss), bool(live), str(value), str(session_id)):
            pass
        case _:
            raise InvalidCursor("the page cursor does not hold a session listing position; drop it to start over")
    if column == "last_active_at":
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidCursor("the page cursor holds no valid time; drop it to start over") from None
        return [boss, live, dialect.tenth_param(moment), dialect.time_param(moment), session_id]
    return [boss, live, value, session_id]


EVENT_INSERT = (
    "INSERT INTO events (id, session_id, seq, at, turn_id, conversation_id, payload, type) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
"""The insert of one stored event."""
