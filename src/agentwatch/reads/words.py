"""The status word: what a session's machine status means to a person, derived when read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Literal

from agentwatch.store import SessionClause, SessionFilter, SessionRecord, Store

__all__ = ["WORDS", "Word", "count_words", "status_word", "with_cutoffs", "word_filter", "word_of"]

Word = Literal["idle", "working", "needs_you", "stuck", "failed", "done"]
WORDS: tuple[Word, ...] = ("idle", "working", "needs_you", "stuck", "failed", "done")


def word_of(status: str, *, waits_on_person: bool, quiet: bool) -> Word:
    """The word for a session in this state: `needs_you` while a request it opened waits on a person (never
    `stuck`; an idle session too, as while a tool server's sign-in waits between turns); `stuck` when running
    and quiet for longer than its threshold; otherwise by status."""
    match status:
        case "running":
            return "needs_you" if waits_on_person else "stuck" if quiet else "working"
        case "awaiting_input":
            # Waiting on a person is needs_you; a request held for its parent agent is still the agents' work.
            return "needs_you" if waits_on_person else "working"
        case "idle":
            return "needs_you" if waits_on_person else "idle"
        case "failed" | "interrupted":
            return "failed"
        case _:
            return "done"


def status_word(session: SessionRecord, *, now: datetime, stuck_after: float) -> Word:
    """The word `session` says at `now`, quiet meaning no stream event and no row write for longer than
    `stuck_after` seconds."""
    quiet = (now - session.last_active_at).total_seconds() > stuck_after
    return word_of(session.status, waits_on_person=session.pending_requests > 0, quiet=quiet)


def with_cutoffs(
    where: SessionFilter, *, now: datetime, stuck_after: float, by_role: Mapping[str, float]
) -> SessionFilter:
    """`where` with the quiet cutoffs at `now`: the default threshold and the roles whose own one differs."""
    cutoffs = {role: now - timedelta(seconds=seconds) for role, seconds in by_role.items()}
    return where.model_copy(
        update={"quiet_before": now - timedelta(seconds=stuck_after), "quiet_before_by_role": cutoffs}
    )


async def count_words(
    store: Store, where: SessionFilter, *, now: datetime, stuck_after: float, by_role: Mapping[str, float]
) -> tuple[dict[str, int], dict[str, int]]:
    """How many sessions matching `where` there are per status and per word, from one grouped query."""
    statuses: dict[str, int] = {}
    words: dict[str, int] = dict.fromkeys(WORDS, 0)
    for state in await store.count_by_state(with_cutoffs(where, now=now, stuck_after=stuck_after, by_role=by_role)):
        statuses[state.status] = statuses.get(state.status, 0) + state.sessions
        words[word_of(state.status, waits_on_person=state.waits_on_person, quiet=state.quiet)] += state.sessions
    return statuses, words


_CLAUSES: dict[str, SessionClause] = {
    # Each clause states exactly when `status_word` says the word; keep the two in step.
    "idle": SessionClause(status=["idle"], waits_on_person=False),
    "needs_you": SessionClause(status=["running", "awaiting_input", "idle"], waits_on_person=True),
    "stuck": SessionClause(status=["running"], waits_on_person=False, quiet=True),
    "failed": SessionClause(status=["failed", "interrupted"]),
    "done": SessionClause(status=["completed", "cancelled"]),
}


def word_filter(
    where: SessionFilter, words: Sequence[Word], *, now: datetime, stuck_after: float, by_role: Mapping[str, float]
) -> SessionFilter:
    """`where` narrowed to the sessions that say one of `words` at `now`, as store conditions.

    `stuck_after` is the default threshold in seconds and `by_role` the roles whose own threshold differs.
    """
    clauses: list[SessionClause] = []
    for word in words:
        if word == "working":
            # Running and not quiet, or waiting on a request held for the parent (never quiet-dependent).
            clauses += [
                SessionClause(status=["running"], waits_on_person=False, quiet=False),
                SessionClause(status=["awaiting_input"], waits_on_person=False),
            ]
        else:
            clauses.append(_CLAUSES[word])
    narrowed = where.model_copy(update={"any_of": clauses})
    return with_cutoffs(narrowed, now=now, stuck_after=stuck_after, by_role=by_role)
