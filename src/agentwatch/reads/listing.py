"""`agent_list`: one row per session (or per lineage, or per run), filtered, sorted and paged by keyset.

Every filter is a store condition, the status word included (`words.word_filter`), so paging never uses
OFFSET and `counts` come from the same conditions as the rows. A `nextCursor` pins the moment the first page
was read: the words of later pages (which depend on time through the stuck thresholds) are judged at that
same moment, so a listing does not shift under its reader.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from pydantic import Field

from agentwatch.errors import InvalidArgument, InvalidCursor
from agentwatch.events import PageCursor, query_digest
from agentwatch.reads._args import Moment, Window, cursor_moment, field_named
from agentwatch.reads._rows import LISTED_FIELDS, listed_rows, recent_entry
from agentwatch.reads._view import EngineView, iso, stuck_thresholds
from agentwatch.reads.answers import CountsAnswer
from agentwatch.reads.words import WORDS, Word, word_filter
from agentwatch.store import SessionFilter, SessionSort, SessionStatus
from agentwatch.tools import MAX_LIST_ITEMS, MAX_NAME_CHARS, Args, Caller, Count, Cursor, Id, Name, check_text, dump

__all__ = ["RECENT_LIMIT", "ListArgs", "agent_list", "list_agents", "listing_filter"]

RECENT_LIMIT = 24
"""Sessions a grouped row shows in `recent`."""

Group = Literal["none", "lineage", "run"]
_HEADS: dict[str, Literal["group_key", "run_id"]] = {"lineage": "group_key", "run": "run_id"}


class ListArgs(Args):
    """Arguments of `agent_list`; every filter given must hold (AND)."""

    status: list[SessionStatus] | None = Field(
        default=None, max_length=MAX_LIST_ITEMS, description="Machine statuses to include."
    )
    word: list[Word] | None = Field(
        default=None,
        max_length=MAX_LIST_ITEMS,
        description="Status words: idle, working, needs_you, stuck, failed, done.",
    )
    source: list[Name] | None = Field(
        default=None,
        max_length=MAX_LIST_ITEMS,
        description="How sessions were started: chat, task, heartbeat, hook, ...",
    )
    role: Name | None = Field(default=None, description="The agent type.")
    feature: Name | None = Field(
        default=None, description="The feature whose roles to include ('engine' = the system's)."
    )
    group_key: Name | None = Field(default=None, description="A lineage, e.g. 'hb:digest'.")
    q: Name | None = Field(
        default=None, description="A part of the name or display name, as written (A-Z in any case)."
    )
    run: Id | None = Field(default=None, description="The sessions one run started (its run id).")
    entity: Name | None = Field(default=None, description="The sessions started by runs of this entity.")
    parent_id: Id | None = Field(default=None, description="The sessions this agent spawned.")
    intercepted: bool | None = Field(default=None, description="true: only sessions a person took over.")
    window: Window | None = Field(
        default=None, description="Activity within this long before now: 24h, 7d, ... (at most 10 years)."
    )
    from_: Moment | None = Field(default=None, alias="from", description="Activity at or after this moment (ISO).")
    to: Moment | None = Field(default=None, description="Activity before this moment (ISO).")
    deleted: bool = Field(default=False, description="true also lists soft-deleted sessions.")
    group: Group = Field(default="none", description="none (a row per session), lineage (per groupKey) or run.")
    sort: SessionSort = Field(default="newest", description="newest, oldest (by last activity), name or status.")
    limit: Count = Field(default=20, ge=1, le=100, description="Rows per page, 1..100.")
    cursor: Cursor | None = Field(
        default=None, description="nextCursor of the previous page (same filters, group, sort)."
    )
    counts: bool = Field(default=False, description="On the first page, add per-word counts and the total.")


def listing_filter(view: EngineView, args: ListArgs, *, now: datetime) -> SessionFilter:
    """The store filter for `args` at `now` (the word filter depends on time through the stuck thresholds)."""
    if args.window is not None and args.from_ is not None:
        raise InvalidArgument("window, from: pass either window or from/to, not both", fields=["from", "window"])
    active_from = now - args.window if args.window is not None else args.from_
    if active_from is not None and args.to is not None and active_from >= args.to:
        start = "window" if args.window is not None else "from"
        raise InvalidArgument(
            f"{start}, to: the range starts at {active_from.isoformat()}, not before its end {args.to.isoformat()}",
            fields=[start, "to"],
        )
    where = SessionFilter(
        status=args.status,
        source=args.source,
        role=[args.role] if args.role is not None else None,
        feature=[args.feature] if args.feature is not None else None,
        group_key=args.group_key,
        q=args.q,
        run_id=args.run,
        run_entity=args.entity,
        parent_id=args.parent_id,
        intercepted=args.intercepted,
        active_from=active_from,
        active_to=args.to,
        deleted=args.deleted,
        heads_of=_HEADS.get(args.group),
    )
    if args.word is None:
        return where
    default, by_role = stuck_thresholds(view)
    return word_filter(where, args.word, now=now, stuck_after=default, by_role=by_role)


T = TypeVar("T")

_UNBOUND = frozenset({"cursor", "limit", "counts"})
"""The arguments that may change between the pages of one listing: the page size and the counts switch."""
_Key = tuple[Any, ...]
_DIGESTS: dict[_Key, str] = {}
"""`_digest` by the values of the arguments it covers (a client pages through a few listings at a time)."""
_FILTERS: dict[_Key, SessionFilter] = {}
"""`listing_filter` by the same values, for the listings whose filter does not depend on the time (no `window`,
no `word`). A filter is frozen: one may serve every call."""
_KEPT = 512


def _key(args: ListArgs) -> _Key:
    """The values of the arguments a listing's pages share. A moment is keyed by its text: two moments equal
    as instants but in other offsets dump differently."""
    return tuple(
        tuple(value) if type(value) is list else value.isoformat() if isinstance(value, datetime) else value
        for name, value in args.__dict__.items()
        if name not in _UNBOUND
    )


def _kept(cache: dict[_Key, T], key: _Key, make: Callable[[], T]) -> T:
    """`cache[key]`, made first when missing (a full cache starts again empty)."""
    value = cache.get(key)
    if value is None:
        value = make()
        if len(cache) >= _KEPT:
            cache.clear()
        cache[key] = value
    return value


def _digest(args: ListArgs, key: _Key | None = None) -> str:
    return _kept(
        _DIGESTS,
        _key(args) if key is None else key,
        lambda: query_digest(args.model_dump(mode="json", exclude=set(_UNBOUND))),
    )


def _filter(view: EngineView, args: ListArgs, key: _Key, now: datetime) -> SessionFilter:
    """`listing_filter`, kept when it does not depend on `now`."""
    if args.window is not None or args.word is not None:
        return listing_filter(view, args, now=now)
    return _kept(_FILTERS, key, lambda: listing_filter(view, args, now=now))


def _open_cursor(args: ListArgs, digest: str) -> tuple[PageCursor | None, datetime]:
    if args.cursor is None:
        return None, datetime.now(UTC)
    with field_named("cursor"):
        cursor = PageCursor.decode(args.cursor, query=digest)
        match cursor.key:
            case (str(store_text), str(moment)):
                store_cursor = _check_store_cursor(store_text)
                now = cursor_moment(moment)
                if now is not None:
                    return store_cursor, now
        raise InvalidCursor("the cursor does not hold an agent_list position; drop it to start from the first page")


def _check_store_cursor(text: str) -> PageCursor:
    """The store position `text` names (decoded once: the store takes it so); refused when its fields could
    not have come from a listing (cursors can be forged: the checksum is not a secret): text too long or not
    storable, or a moment without an offset."""
    cursor = PageCursor.decode(text)
    for value in cursor.key:
        if isinstance(value, str):
            check_text(value)
            if len(value) > MAX_NAME_CHARS:
                raise InvalidCursor("the cursor holds a position no listing returns")
            if value[:1] not in "0123456789":
                continue  # not a moment (an id, a name): every ISO 8601 text starts with a digit
            try:
                datetime.fromisoformat(value)
            except ValueError:
                continue
            if cursor_moment(value) is None:
                raise InvalidCursor("the cursor holds a position no listing returns")
        elif not isinstance(value, bool | None):
            raise InvalidCursor("the cursor holds a position no listing returns")
    return cursor


async def list_agents(view: EngineView, args: ListArgs) -> dict[str, Any]:
    """The `agent_list` answer as the JSON object the tool returns: `agents` (rows), `nextCursor`, and
    `counts` when asked on the first page. The rows are made straight from the sessions' listed fields
    (`listed_rows`), never as records and models to dump: a page is mostly this work."""
    key = _key(args)
    digest = _digest(args, key)
    store_cursor, now = _open_cursor(args, digest)
    where = _filter(view, args, key, now)
    page = await view.store.list_session_values(
        where, LISTED_FIELDS, sort=args.sort, limit=args.limit, cursor=store_cursor
    )
    rows = await listed_rows(view, page.items, now=now)
    if args.group != "none":
        await asyncio.gather(*(_fill_group(view, args, row, now) for row in rows))
    next_cursor = (
        PageCursor(digest, (page.next_cursor, now.isoformat())).encode() if page.next_cursor is not None else None
    )
    answer: dict[str, Any] = {"agents": rows, "nextCursor": next_cursor}
    if args.counts and args.cursor is None:
        answer["counts"] = dump(await _counts(view, args, now))
    return answer


async def _fill_group(view: EngineView, args: ListArgs, row: dict[str, Any], now: datetime) -> None:
    """A grouped row's `sessionCount` and `recent`: the sessions of the head's lineage or run."""
    members = _members(args, row)
    count = sum((await view.store.count_sessions(members)).values())
    recent = await view.store.list_sessions(members, limit=RECENT_LIMIT)
    row["sessionCount"] = count
    row["recent"] = [dump(recent_entry(view, member, now=now)) for member in recent.items]


def _members(args: ListArgs, head: dict[str, Any]) -> SessionFilter:
    """Every session of the lineage or run of the head (its row) (soft-deleted ones only when the listing
    includes them)."""
    key = head["groupKey"] if args.group == "lineage" else head["runId"]
    if key is None:
        return SessionFilter(ids=[head["id"]], deleted=args.deleted)
    if args.group == "lineage":
        return SessionFilter(group_key=key, deleted=args.deleted)
    return SessionFilter(run_id=key, deleted=args.deleted)


async def _counts(view: EngineView, args: ListArgs, now: datetime) -> CountsAnswer:
    """Per word, how many rows the same call narrowed to that word lists; and how many it lists in all."""

    async def rows_of(narrowed: ListArgs) -> int:
        return sum((await view.store.count_sessions(listing_filter(view, narrowed, now=now))).values())

    async def per_word(word: Word) -> int:
        if args.word is not None and word not in args.word:
            return 0  # the call's own word filter and this one cannot both hold
        return await rows_of(args.model_copy(update={"word": [word]}))

    totals = await asyncio.gather(rows_of(args), *(per_word(word) for word in WORDS))
    return CountsAnswer(words=dict(zip(WORDS, totals[1:], strict=True)), total=totals[0], at=iso(now))


async def agent_list(engine: EngineView, caller: Caller, args: ListArgs) -> dict[str, Any]:
    """The `agent_list` tool: its answer as JSON (`ListAnswer` is its model)."""
    return await list_agents(engine, args)
