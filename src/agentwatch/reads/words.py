"""The status word: what a session's machine status means to a person, derived when read."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from agentwatch.store import SessionRecord

__all__ = ["WORDS", "Word", "status_word"]

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
