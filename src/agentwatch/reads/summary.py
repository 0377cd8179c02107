"""`agent_summary`: counts without the rows.

Per status, the working ones, the lineages (with `words: true` the lineages by the word their newest session
says now), how many a person holds (intercepted), and for a `window` (default 7d) the sessions started,
failed and waiting plus what agents spent, beside the same stretch before it (`previous`). `by: "role"` adds
each role's sessions and newest activity. Soft-deleted sessions are left out.

Within a window: `started` counts sessions created in it; `failed` those whose status is failed or
interrupted and whose last activity falls in it; `waiting` those waiting on a person now whose last activity
falls in it; `spend` sums the ledger entries written in it.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import Field

from agentwatch.reads._args import Window
from agentwatch.reads._view import EngineView, iso, stuck_thresholds
from agentwatch.reads.answers import RoleEntry, Spend, SummaryAnswer, WindowCounts
from agentwatch.reads.words import Word, count_words, word_filter
from agentwatch.store import SessionFilter
from agentwatch.tools import Args, Caller, dump

__all__ = ["SummaryArgs", "agent_summary", "summarize", "summary_answer"]


class SummaryArgs(Args):
    """Arguments of `agent_summary`."""

    window: Window = Field(
        default="7d",  # (validated: its schema shows it as a caller writes it)
        validate_default=True,
        description="The stretch of time for started/failed/waiting/spend (at most 3650d).",
    )
    words: bool = Field(default=False, description="Add the lineages by the word they say now.")
    by: Literal["role"] | None = Field(default=None, description='"role": each role\'s sessions and newest activity.')


async def _nothing() -> None:
    """What a read that is not asked for gives (a place among the reads run at once)."""


async def _count(view: EngineView, where: SessionFilter) -> int:
    return sum((await view.store.count_sessions(where)).values())


async def _window(view: EngineView, start: datetime, end: datetime, waiting: SessionFilter) -> WindowCounts:
    started, failed, waits, spend = await asyncio.gather(
        _count(view, SessionFilter(created_from=start, created_to=end)),
        _count(view, SessionFilter(status=["failed", "interrupted"], active_from=start, active_to=end)),
        _count(view, waiting.model_copy(update={"active_from": start, "active_to": end})),
        view.store.usage_between(start, end),
    )
    return WindowCounts(
        from_=iso(start),
        to=iso(end),
        started=started,
        failed=failed,
        waiting=waits,
        spend=Spend(cost_usd=spend.cost_usd or 0.0, tokens=spend.total_tokens),
    )


async def summary_answer(view: EngineView, args: SummaryArgs, *, now: datetime | None = None) -> SummaryAnswer:
    """The `agent_summary` answer."""
    now = now or datetime.now(UTC)
    default, by_role = stuck_thresholds(view)

    def saying(word: Word) -> SessionFilter:
        return word_filter(SessionFilter(), [word], now=now, stuck_after=default, by_role=by_role)

    # Two grouped queries give every count of sessions and of lineages (their newest sessions) by word. The
    # reads are independent of one another: they run at once (each was its own read already, not one snapshot),
    # on as many of the store's reader threads or connections as it has.
    heads = SessionFilter(heads_of="group_key")
    (statuses, words), (_, lineage_words), window, previous, intercepted, groups = await asyncio.gather(
        count_words(view.store, SessionFilter(), now=now, stuck_after=default, by_role=by_role),
        count_words(view.store, heads, now=now, stuck_after=default, by_role=by_role),
        _window(view, now - args.window, now, saying("needs_you")),
        _window(view, now - 2 * args.window, now - args.window, saying("needs_you")),
        _count(view, SessionFilter(intercepted=True)),
        view.store.group_sessions(SessionFilter(), "role") if args.by == "role" else _nothing(),
    )
    window.previous = previous
    roles = None
    if groups is not None:
        roles = [RoleEntry(role=g.key, sessions=g.sessions, last_active_at=iso(g.last_active_at)) for g in groups]
    return SummaryAnswer(
        at=iso(now),
        statuses=dict(sorted(statuses.items())),
        total=sum(statuses.values()),
        working=words["working"],
        lineages=sum(lineage_words.values()),
        intercepted=intercepted,
        words=dict(lineage_words) if args.words else None,
        window=window,
        by_role=roles,
    )


async def summarize(view: EngineView, args: SummaryArgs, *, now: datetime | None = None) -> dict[str, Any]:
    """`summary_answer` as the JSON object the tool returns."""
    return dump(await summary_answer(view, args, now=now))


async def agent_summary(engine: EngineView, caller: Caller, args: SummaryArgs) -> SummaryAnswer:
    """The `agent_summary` tool."""
    return await summary_answer(engine, args)
