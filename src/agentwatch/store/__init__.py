"""Durable state: the `Store` contract and its backends (SQLite embedded default, PostgreSQL).

```python
async with open_store("sqlite:///.agentwatch/agentwatch.db") as store:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    await store.append(session.id, [NewEvent(UserMessage(text="hello"))])
```
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

from agentwatch.errors import InvalidArgument
from agentwatch.store.base import SCHEMA_VERSION, EventValues, RunStore, Store
from agentwatch.store.records import (
    RUN_ENDINGS,
    TERMINAL_STATUSES,
    ConversationRecord,
    InputDraft,
    InputRecord,
    JournalEntry,
    LeaseClaim,
    LeaseRecord,
    ObserverRef,
    Page,
    RequestClose,
    RequestDraft,
    RequestRecord,
    RunDraft,
    RunFilter,
    RunPatch,
    RunRecord,
    SessionClause,
    SessionDraft,
    SessionFilter,
    SessionGroup,
    SessionGroupBy,
    SessionPatch,
    SessionRecord,
    SessionSort,
    SessionStatus,
    SpanDraft,
    SpanPatch,
    SpanRecord,
    StateCount,
    StoreInfo,
    TurnUsage,
    UsageEntry,
    Write,
)

__all__ = [
    "RUN_ENDINGS",
    "SCHEMA_VERSION",
    "TERMINAL_STATUSES",
    "ConversationRecord",
    "EventValues",
    "InputDraft",
    "InputRecord",
    "JournalEntry",
    "LeaseClaim",
    "LeaseRecord",
    "ObserverRef",
    "Page",
    "RequestClose",
    "RequestDraft",
    "RequestRecord",
    "RunDraft",
    "RunFilter",
    "RunPatch",
    "RunRecord",
    "RunStore",
    "SessionClause",
    "SessionDraft",
    "SessionFilter",
    "SessionGroup",
    "SessionGroupBy",
    "SessionPatch",
    "SessionRecord",
    "SessionSort",
    "SessionStatus",
    "SpanDraft",
    "SpanPatch",
    "SpanRecord",
    "StateCount",
    "Store",
    "StoreInfo",
    "TurnUsage",
    "UsageEntry",
    "Write",
    "connect_store",
    "descendants",
    "every_session",
    "hide_password",
    "open_store",
]


def hide_password(url: str) -> str:
    """The store URL with any password replaced by `***` (for messages, logs and files)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


async def connect_store(url: str) -> Store:
    """Open the store at `url` (migrating it when needed); the caller must `await store.close()`.

    `sqlite:///relative/path.db`, `sqlite:////absolute/path.db` and `sqlite://:memory:` open the embedded
    backend; `postgresql://user@host:5432/db` (or `postgres://`) opens PostgreSQL.
    """
    scheme, sep, _ = url.partition("://")
    if not sep:
        raise InvalidArgument(
            f"store URL {url!r} has no scheme; use sqlite:///path/to/agentwatch.db or "
            "postgresql://user@host:5432/dbname"
        )
    if scheme == "sqlite":
        from agentwatch.store.sqlite import SqliteStore

        return await SqliteStore.open(url)
    if scheme in ("postgresql", "postgres"):
        from agentwatch.store.postgres import PostgresStore

        return await PostgresStore.open(url)
    raise InvalidArgument(
        f"unknown store URL scheme {scheme!r} in {url!r}; agentwatch stores live in sqlite:///path.db "
        "(embedded, the default) or postgresql://user@host:5432/dbname"
    )


@asynccontextmanager
async def open_store(url: str) -> AsyncIterator[Store]:
    """`async with open_store(url) as store:` opens (and migrates) a store and closes it after."""
    store = await connect_store(url)
    try:
        yield store
    finally:
        await store.close()


async def every_session(
    store: Store, where: SessionFilter, *, sort: SessionSort = "oldest"
) -> AsyncIterator[SessionRecord]:
    """Every session `where` matches, page after page (a caller may stop at any one)."""
    cursor: str | None = None
    while True:
        page = await store.list_sessions(where, sort=sort, limit=100, cursor=cursor)
        for session in page.items:
            yield session
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


async def descendants(store: Store, session_id: str, *, limit: int | None = None) -> list[SessionRecord]:
    """The sessions `session_id` spawned, and theirs, and so on (soft-deleted ones too), parents first; with
    `limit`, the first that many."""
    found: list[SessionRecord] = []
    parents = [session_id]
    while parents and (limit is None or len(found) < limit):
        parent = parents.pop(0)
        async for child in every_session(store, SessionFilter(parent_id=parent, deleted=True)):
            found.append(child)
            parents.append(child.id)
    return found if limit is None else found[:limit]
