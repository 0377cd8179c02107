"""The status word: what a session's machine status means to a person, derived when read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Literal

from agentwatch.store import SessionClause, SessionFilter, SessionRecord

__all__ = ["WORDS", "Word", "status_word", "word_filter"]

Word = Literal["idle", "working", "needs_you", "stuck", "failed", "done"]
WORDS: tuple[Word, ...] = ("idle", "working", "needs_you", "stuck", "failed", "done")


def status_word(session: SessionRecord, *, now: datetime, stuck_after: float) -> Word:
    """`needs_you` while a request it opened waits on a person (never `stuck`); `stuck` when running with no
    stream event and no row write for longer than `stuck_after` seconds; otherwise by status."""
    match session.status:
        case "running":
            if session.pending_requests > 0:
                return "needs_you"
            quiet = (now - session.last_active_at).total_seconds()
            return "stuck" if quiet > stuck_after else "working"
        case "awaiting_input":
            # Waiting on a person is needs_you; a request held for its parent agent is still the agents' work.
            return "needs_you" if session.pending_requests > 0 else "working"
        case "idle":
            return "idle"
        case "failed" | "interrupted":
            return "failed"
        case _:
            return "done"


_CLAUSES: dict[str, SessionClause] = {
    # Each clause states exactly when `status_word` says the word; keep the two in step.
    "idle": SessionClause(status=["idle"]),
    "needs_you": SessionClause(status=["running", "awaiting_input"], waits_on_person=True),
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
    cutoffs = {role: now - timedelta(seconds=seconds) for role, seconds in by_role.items()}
    return where.model_copy(
        update={
            "any_of": clauses,
            "quiet_before": now - timedelta(seconds=stuck_after),
            "quiet_before_by_role": cutoffs,
        }
    )
