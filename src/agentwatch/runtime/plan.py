"""Plans: why a session's next turn runs, read from the store.

A plan says why a turn runs: new `input` in the inbox, an `answer` to the requests that paused it, or a
`continue` after a restart (or a dead owner) cut it off. It sits below the turn loop and the leases, which
both ask for it.

**Observer reports alone** (inputs from `observer:<type>`, see `agentwatch.watchers.report`) are always kept in
the inbox, but they start a turn by themselves only when the session would take one from them:

- a chat, the boss or an observer lives on between turns, so reports start a turn of it when it is idle;
- a report that reached a session while it was working (its turn running or waiting on a request) is read by
  the turn that follows at once, as a message to a running task is;
- a task whose turn was over when the report came (made by `engine.task`, `agent_task`, `agent_create` or the
  API) reads it at the next turn it is given: the report starts none;
- nor does a report start a turn of a session a person stopped (its last turn ended `cancelled`), a chat or the
  boss included: it is read at the next turn the session is given;
- never right after a turn that reports alone started: at most one turn in a row is caused by reports (a
  report starts a turn, whose digest goes to the observer, which could report again, and so on).

Reports held back are read together with the next other input: none is lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from agentwatch.events import TurnStarted, UserMessage
from agentwatch.reads.current import is_settled
from agentwatch.store import InputRecord, RequestRecord, SessionRecord, SessionStatus, Store

__all__ = [
    "WORKING",
    "Plan",
    "ReportsHeld",
    "is_report",
    "last_turn_by_reports",
    "lives_on",
    "new_report_held",
    "next_plan",
    "reports_held",
    "settled",
]

WORKING: tuple[SessionStatus, ...] = ("running", "awaiting_input")
"""The statuses of a session at work: its turn running, or waiting on a request."""
ReportsHeld = Literal["loop", "turn_over"]
"""Why reports alone start no turn: `loop`, the last turn was started by reports alone; `turn_over`, a task whose
turn was over when they came, or a session a person stopped."""


@dataclass(frozen=True)
class Plan:
    """Why a turn runs now."""

    kind: Literal["input", "answer", "continue"]
    inputs: Sequence[InputRecord] = ()
    """For `input`: the inbox inputs the turn takes."""
    requests: Sequence[RequestRecord] = ()
    """For `answer`: the (closed) requests of the paused turn."""


async def settled(store: Store, session: SessionRecord) -> bool:
    """Whether a wait on `session` is over: no turn runs and none would start now. Inputs no turn takes yet
    (observer reports kept for the next turn the session is given, inputs waiting while a person holds the
    session) do not keep a wait going, as they do not keep the session from settling. A turn paused on requests
    that are all answered is not settled: it goes on once an engine takes the answers up (its status word says
    `working` meanwhile). Nor do inputs queued before a person stopped the session's turn: they wait for its next
    input, which starts a turn with them (a stop starts none)."""
    if is_settled(session) and not (session.status == "awaiting_input" and session.deleted_at is None):
        return True
    if session.status == "cancelled" and await _queued_before_the_stop(store, session):
        return True
    return session.status != "running" and await next_plan(store, session) is None


async def _queued_before_the_stop(store: Store, session: SessionRecord) -> bool:
    """Whether every input waiting for `session`, whose turn a person stopped, came before the stop (given since,
    one starts a turn)."""
    ended = await store.read_events_backward(session.id, limit=1, types=["turn.ended"])
    return bool(ended) and all(item.created_at <= ended[0].at for item in await store.list_inputs(session.id))


async def next_plan(store: Store, session: SessionRecord) -> Plan | None:
    """The work waiting for `session`, or None."""
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
    if not inputs:
        return None
    if all(is_report(i) for i in inputs) and await reports_held(store, session, arrived=inputs[0].created_at):
        return None  # kept for the next turn the session is given
    return Plan("input", inputs=inputs)


def is_report(item: InputRecord) -> bool:
    """Whether an inbox input is an observer's report (or news of one about a sub-agent)."""
    return item.is_report


def lives_on(session: SessionRecord) -> bool:
    """Whether `session` lives on between turns (a chat, the boss, an observer), so reports alone start a turn
    of it when it is idle."""
    return session.source == "chat" or session.boss or session.is_observer


async def reports_held(store: Store, session: SessionRecord, *, arrived: datetime | None) -> ReportsHeld | None:
    """Why reports alone in the inbox of `session` start no turn of it now (None when they start one).

    `arrived` is when the first of them was queued; None for a report about to be queued now, so the answer
    reads the session as it is (its status) rather than the time its last turn ended.
    """
    if await last_turn_by_reports(store, session):
        return "loop"
    if session.status in WORKING:
        return None
    if session.status == "cancelled":
        return "turn_over"  # a person stopped its turn: a report does not start it again
    if lives_on(session):
        return None
    if arrived is not None:
        ended = await store.read_events_backward(session.id, limit=1, types=["turn.ended"])
        if ended and arrived < ended[0].at:
            return None  # it came while the session was working: the turn that follows reads it
    return "turn_over"


async def new_report_held(store: Store, session: SessionRecord) -> ReportsHeld | None:
    """What `next_plan` will make of a report queued for `session` now: why it is held, or None when a turn
    reads it next (other input waits too, or reports start a turn of the session)."""
    if any(not is_report(i) for i in await store.list_inputs(session.id)):
        return None
    return await reports_held(store, session, arrived=None)


async def last_turn_by_reports(store: Store, session: SessionRecord) -> bool:
    """Whether the latest turn of `session` was started by observer reports alone (the inputs it took when it
    started; a continuation's restart note does not count)."""
    starts = await store.read_events_backward(session.id, limit=20, types=["turn.started"])
    start = next((e for e in starts if isinstance(e.payload, TurnStarted) and e.payload.trigger == "input"), None)
    if start is None or start.turn_id is None:
        return False
    found = await store.read_events(
        session.id, after_seq=start.seq, limit=1000, types=["message.user", "turn.started"], turn_id=start.turn_id
    )
    taken: list[UserMessage] = []
    for event in found:
        if not isinstance(event.payload, UserMessage):
            break  # a continuation: the inputs the turn started with are behind
        taken.append(event.payload)
    return bool(taken) and all(m.origin is not None and m.origin.kind == "observer" for m in taken)
