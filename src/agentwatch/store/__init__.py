"""Durable state: the `Store` contract and its backends (SQLite embedded default, PostgreSQL).

```python
async with open_store("sqlite:///.agentwatch/agentwatch.db") as store:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    await store.append(session.id, [NewEvent(UserMessage(text="hello"))])
```
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from agentwatch.errors import InvalidArgument, NotFound
from agentwatch.store.base import SCHEMA_VERSION, EventValues, RunStore, Store
from agentwatch.store.records import (
    RUN_ENDINGS,
    RUN_KINDS,
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
    "RUN_KINDS",
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
    "refuse_missing_file",
    "store_url",
]


def hide_password(url: str) -> str:
    """The store URL with any password replaced by `***` (for messages, logs and files)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def refuse_missing_file(url: str) -> None:
    """Refuse (`NotFound`) a SQLite store URL whose file does not exist, or is empty: a reader must not create
    one (SQLite would take an empty file for a new database). Any other URL passes."""
    scheme, _, rest = url.partition("://")
    target = rest.partition("?")[0]
    if scheme != "sqlite" or target == ":memory:" or not target.startswith("/") or target == "/":
        return  # not a file (the store itself refuses a malformed URL)
    path = Path(target[1:])
    if not path.exists() or (path.is_file() and path.stat().st_size == 0):
        state = "no store at" if not path.exists() else "an empty file, not a store, at"
        raise NotFound(f"{state} {str(path)!r}: nothing has been run with it yet")


async def connect_store(url: str, *, create: bool = True) -> Store:
    """Open the store at `url` (migrating it when needed); the caller must `await store.close()`.

    `sqlite:///relative/path.db`, `sqlite:////absolute/path.db` and `sqlite://:memory:` open the embedded
    backend; `postgresql://user@host:5432/db` (or `postgres://`) opens PostgreSQL. With `create` False (a
    reader), a store that does not exist yet is refused (`NotFound`) and nothing is made: a SQLite file that is
    missing or empty, a PostgreSQL database with no agentwatch schema.
    """
    scheme, sep, _ = url.partition("://")
    if not sep:
        raise InvalidArgument(
            f"store URL {url!r} has no scheme; use sqlite:///path/to/agentwatch.db or "
            "postgresql://user@host:5432/dbname"
        )
    if scheme not in _SCHEMES:
        raise _unknown_scheme(scheme, url)
    if not create:
        refuse_missing_file(url)
    if scheme == "sqlite":
        from agentwatch.store.sqlite import SqliteStore

        return await SqliteStore.open(url)
    from agentwatch.store.postgres import PostgresStore  # (postgresql:// or postgres://)

    return await PostgresStore.open(url, create=create)


_SCHEMES = ("sqlite", "postgresql", "postgres")
_LOOKS_LIKE_A_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def _unknown_scheme(scheme: str, url: str) -> InvalidArgument:
    return InvalidArgument(
        f"unknown store URL scheme {scheme!r} in {url!r}; agentwatch stores live in sqlite:///path.db "
        "(embedded, the default) or postgresql://user@host:5432/dbname"
    )


def store_url(value: str, base: Path | None = None) -> str:
    """The store URL `value` names, as a person may give it (`--store`, `AGENTWATCH_STORE`, `store` in
    agentwatch.toml): a URL (`scheme://...`) of a known scheme as it is, and the path of a SQLite file (no
    scheme: `/abs/agentwatch.db`, `store.db`, relative to `base`, by default the working directory) as the
    `sqlite:///` URL of its absolute path. Refused (`InvalidArgument`): an unknown scheme, a value that is neither
    (`postgresql:/host/db`, a scheme without `//`), and a path a URL cannot carry (`?` starts a URL's options)."""
    scheme, sep, _ = value.partition("://")
    if sep:
        if scheme not in _SCHEMES:
            raise _unknown_scheme(scheme, value)
        return value
    if value == ":memory:":
        return "sqlite://:memory:"
    if not value.strip():
        raise InvalidArgument(f"{value!r} names no store; give a store URL or the path of a SQLite file")
    if _LOOKS_LIKE_A_SCHEME.match(value.partition("/")[0]):
        raise InvalidArgument(
            f"{value!r} is neither a store URL nor a file path; use sqlite:///path/to/agentwatch.db, "
            "postgresql://user@host:5432/dbname, or the path of a SQLite file (/path/to/agentwatch.db)"
        )
    try:
        given = Path(value).expanduser()
    except RuntimeError:  # `~name` of a user this system does not know (or no home directory to find)
        raise InvalidArgument(
            f"cannot find the home directory {value.partition('/')[0]!r} names in {value!r}; give the path "
            "without it (an absolute path, or one relative to the working directory)"
        ) from None
    path = ((base or Path(".")) / given).absolute()
    if "?" in str(path):
        raise InvalidArgument(
            f"the file path {str(path)!r} holds a '?', which a store URL reads as its options; move or rename it"
        )
    return f"sqlite:///{path}"


@asynccontextmanager
async def open_store(url: str, *, create: bool = True) -> AsyncIterator[Store]:
    """`async with open_store(url) as store:` opens (and migrates) a store and closes it after (`create`: as
    `connect_store`'s)."""
    store = await connect_store(url, create=create)
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
