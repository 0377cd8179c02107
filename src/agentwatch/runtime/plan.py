"""Plans: why a session's next turn runs, read from the store.

A plan says why a turn runs: new `input` in the inbox, an `answer` to the requests that paused it, or a
`continue` after a restart (or a dead owner) cut it off. It sits below the turn loop and the leases, which
both ask for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from agentwatch.store import InputRecord, RequestRecord, SessionRecord

if TYPE_CHECKING:
    from agentwatch.runtime.services import Runtime

__all__ = ["Plan", "next_plan"]


@dataclass(frozen=True)
class Plan:
    """Why a turn runs now."""

    kind: Literal["input", "answer", "continue"]
    inputs: Sequence[InputRecord] = ()
    """For `input`: the inbox inputs the turn takes."""
    requests: Sequence[RequestRecord] = ()
    """For `answer`: the (closed) requests of the paused turn."""


async def next_plan(runtime: Runtime, session: SessionRecord) -> Plan | None:
    """The work waiting for `session`, or None."""
    store = runtime.store
    if session.deleted_at is not None:
        return None
    if session.status == "running":
        return Plan("continue")
    if session.status == "awaiting_input" and session.current_turn_id is not None:
        requests = await store.list_requests(session_id=session.id, status=None, limit=1000)
        mine = [r for r in requests if r.turn_id == session.current_turn_id]
        if any(r.status == "pending" for r in mine):
            return None
        return Plan("answer", requests=mine)
    if session.interception is not None:
        return None  # a person holds the session: its inputs wait until it is handed back
    inputs = await store.list_inputs(session.id)
    return Plan("input", inputs=inputs) if inputs else None
