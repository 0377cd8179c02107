"""Retention: which sessions are reaped, and when.

- A soft-deleted session stays readable by id (and listed with `deleted: true`) until its `reap_at`; its
  observer session (an observer agent's) is reaped with it, once not at work. A heartbeat or hook session's
  `reap_at` is its TTL's moment when that comes first (`deleted_reap_at`), and it goes with what it spawned.
- A heartbeat or hook session (source `heartbeat` / `hook`) that is not running or waiting is reaped once its
  last activity is older than `retention.heartbeat_ttl` / `retention.hook_ttl` (default 24 h), together with
  the sub-agents it spawned (and theirs), once none of them runs or waits.
- A run (a workflow's or a heartbeat tick's) is reaped with its spans and journal once it ended longer ago than
  `retention.run_ttl` (30 days); a skipped tick after `retention.skipped_run_ttl` (24 h). Its sessions follow
  their own rules above; the spend ledger keeps what its turns billed.
- A reap takes the whole transcript (conversations, events, inbox, requests); the spend ledger stays. A
  reaped id answers `not_found`.
- A session that holds a resource watch is kept until the watch ends. There is no watch table yet: whoever
  records watches sets `settings["held_until"]` (ISO 8601, the latest expiry of the session's watches) and
  clears it when they end. `held_until` below reads it; a held session is skipped by every rule above (and
  the reaper reads on past it, once a pass however many batches it reaps: however many are held, the sessions
  behind them are reaped).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing
from datetime import UTC, datetime, timedelta

from agentwatch.config import RetentionConfig
from agentwatch.errors import NotFound
from agentwatch.store import SessionFilter, SessionRecord, Store, descendants, every_session

__all__ = ["HELD_UNTIL", "deleted_reap_at", "held_until", "reap_due", "reap_runs_due", "sessions_due"]

HELD_UNTIL = "held_until"
"""The settings key a watch sets to keep its session until the watch ends."""

_PAGE = 100
_RUN_PAGE = 500
_TTL_SOURCES = ("heartbeat", "hook")


def held_until(session: SessionRecord) -> datetime | None:
    """Until when a watch holds the session (None when nothing holds it, or the value is unreadable)."""
    value = session.settings.get(HELD_UNTIL)
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _ttl(retention: RetentionConfig, source: str) -> timedelta:
    return retention.heartbeat_ttl if source == "heartbeat" else retention.hook_ttl


def deleted_reap_at(session: SessionRecord, retention: RetentionConfig, *, now: datetime) -> datetime:
    """When `session`, soft-deleted at `now`, is reaped: `deleted_ttl` later, or at its TTL's moment (a
    heartbeat's or hook's session, a TTL after its last activity) when that comes first; the `reapAt` its
    readers are told."""
    keep = now + retention.deleted_ttl
    if session.source not in _TTL_SOURCES:
        return keep
    return min(keep, session.last_active_at + _ttl(retention, session.source))


async def _family(
    store: Store, session: SessionRecord, due: list[str], keep: Callable[[SessionRecord], bool]
) -> list[str] | None:
    """A heartbeat or hook session and what it spawned (and theirs) not yet `due`, to reap together; None while
    one of them runs, waits or is held."""
    spawned = await descendants(store, session.id)
    if any(s.status in ("running", "awaiting_input") or keep(s) for s in spawned):
        return None  # reaped with what it spawned, once that has settled
    return [session.id, *(s.id for s in spawned if s.id not in due)]


async def _deleted_due(store: Store, now: datetime, *, limit: int) -> AsyncIterator[SessionRecord]:
    """The soft-deleted sessions past their `reap_at` at `now`, page after page (a caller may stop at any one):
    read on past the ones the caller skips (held by a watch, or with what they spawned at work), so that a page
    of them never hides the sessions behind it."""
    after: tuple[datetime, str] | None = None
    while True:
        page = await store.due_for_reap(now, after=after, limit=limit)
        for session_id in page:
            try:
                session = await store.get_session(session_id)
            except NotFound:
                continue  # reaped since it was listed (by another engine)
            if session.reap_at is not None:  # (listed by it)
                after = (session.reap_at, session.id)
                yield session
        if len(page) < limit:
            return


async def _batches(
    store: Store, retention: RetentionConfig, *, now: datetime, limit: int
) -> AsyncGenerator[list[str], None]:
    """The ids of the sessions to reap at `now` (soft-deleted past `reap_at`, heartbeat/hook past TTL, with what
    they spawned), a batch of about `limit` at a time, more only when one session's family alone is larger.

    One reading of the sessions for every batch: its caller reaps a batch before asking for the next, and the
    listings read on from where they were (their cursors are keys, which a reap leaves valid). A session skipped
    (held by a watch, or with what it spawned at work) is read once a pass, however many batches follow it."""
    due: list[str] = []
    taken: set[str] = set()
    """The ids of the batches handed out before (reaped by now)."""

    def keep(session: SessionRecord) -> bool:
        held = held_until(session)
        return held is not None and held > now

    def known(session: SessionRecord) -> bool:
        return keep(session) or session.id in due or session.id in taken

    async for session in _deleted_due(store, now, limit=limit):
        if len(due) >= limit:
            yield due
            taken.update(due)
            due = []
        if known(session):
            continue
        if session.source in _TTL_SOURCES:
            family = await _family(store, session, due, keep)
            if family is None:
                continue
            due += family
        else:
            due.append(session.id)
        # Its observer goes with it: it watched that agent alone, which will never run again.
        watchers = await store.list_sessions(SessionFilter(parent_id=session.id, is_observer=True), limit=_PAGE)
        due += [s.id for s in watchers.items if s.status not in ("running", "awaiting_input") and not known(s)]
    for source in _TTL_SOURCES:
        where = SessionFilter(
            source=[source],
            status=["idle", "completed", "failed", "cancelled", "interrupted"],
            active_to=now - _ttl(retention, source),
            deleted=True,
        )
        async for session in every_session(store, where):
            if known(session):
                continue
            family = await _family(store, session, due, keep)
            if family is None:
                continue
            if due and len(due) + len(family) > limit:
                yield due  # never a family split over two batches: its parent would go, the rest stay
                taken.update(due)
                due = []
            due += family
    if due:
        yield due


async def sessions_due(store: Store, retention: RetentionConfig, *, now: datetime, limit: int = _PAGE) -> list[str]:
    """Ids of the sessions to reap at `now`: the first batch of a pass (see `_batches`)."""
    async with aclosing(_batches(store, retention, now=now, limit=limit)) as batches:
        async for due in batches:
            return due
    return []


async def reap_due(
    store: Store,
    retention: RetentionConfig,
    *,
    now: datetime | None = None,
    reaped: Callable[[Sequence[str]], Awaitable[None]] | None = None,
) -> int:
    """Reap every session that is due (see the module docs); returns how many were removed. `reaped` is told
    the ids of each batch once the store let them go (the live ring lets go of them too)."""
    now = now or datetime.now(UTC)
    removed = 0
    async with aclosing(_batches(store, retention, now=now, limit=_PAGE)) as batches:
        async for due in batches:
            removed += await store.reap(due)
            if reaped is not None:
                await reaped(due)
    return removed


async def reap_runs_due(store: Store, retention: RetentionConfig, *, now: datetime | None = None) -> int:
    """Reap every run that is due (see the module docs); returns how many were removed."""
    now = now or datetime.now(UTC)
    removed = 0
    while True:
        count = await store.reap_runs(now - retention.run_ttl, now - retention.skipped_run_ttl, limit=_RUN_PAGE)
        removed += count
        if count < _RUN_PAGE:
            return removed
