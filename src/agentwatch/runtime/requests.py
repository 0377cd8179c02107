"""Human requests: answering the questions and approvals a turn paused on, and escalating held ones.

A choice (a question with options) is answered with one of its options (a list of them when several may
be chosen), an approval with a verdict (`true`/`false`, `{"approved": ..., "message": ...}` or yes/no); any
other answer is refused before anything is written.

A request opened by a sub-agent's turn may first be held for its parent agent (`waits_on="parent"`) for
`hold_for_parent_seconds`; `escalate` (or `escalate_due`, which the engine runs periodically) hands it over
to a person. Every engine on a store runs `escalate_due`: a request that another engine (or a person) got to
first is passed over, so each is handed over once and no pass ends early. `answer` resolves a pending request;
the paused turn continues (in this process, or in the engine that owns the session).
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import JsonValue

from agentwatch.errors import Conflict, NotFound
from agentwatch.events import NewEvent, RequestResolved, TurnId, escalation_notice
from agentwatch.runtime.leases import claimed_commit
from agentwatch.runtime.services import Runtime
from agentwatch.runtime.tools.ask import check_answer, check_approval, check_choice
from agentwatch.runtime.toolservers import shown_answer
from agentwatch.store import RequestClose, RequestRecord, Write

__all__ = ["answer", "escalate", "escalate_due"]


async def answer(runtime: Runtime, request_id: str, answer: JsonValue, *, by: str = "a person") -> RequestRecord:
    """Resolve a pending request; the paused turn continues (in this process or after a restart)."""
    store = runtime.store
    request = await store.get_request(request_id)
    if request.status != "pending":
        raise Conflict(f"request {request_id!r} is already {request.status}; nothing to answer")
    if request.options:  # a choice: the answer names one of its options (several, when it allows that)
        answer = check_choice(request.options, _multiple(request), answer)
    elif request.kind == "approval":  # a verdict, never guessed from an answer that gives none
        answer = check_approval(answer)
    else:  # a reply: one that says nothing would end the wait with nothing
        answer = check_answer(answer)
    # A paused turn waits on it; a tool server's sign-in tied to no call is for the session's next turns.
    for_a_turn = request.tool_call_id is not None or request.kind != "oauth"
    channel = await runtime.driver(request.session_id)
    # An oauth answer's token is kept in the request (the call needs it, even after a restart), never in an event.
    resolved = RequestResolved(request_id=request_id, answer=shown_answer(request.kind, answer), by=by)
    turn_id = TurnId(request.turn_id) if request.turn_id else None
    resolve = Write(
        request.session_id,
        events=[NewEvent(resolved, turn_id)],
        requests_close=[RequestClose(request_id=request_id, status="resolved", answer=answer, by=by)],
        expect_status=["awaiting_input"] if for_a_turn else None,
    )
    await claimed_commit(runtime, channel, resolve)  # leases: the paused turn is never left without an owner
    return await store.get_request(request_id)


async def escalate(runtime: Runtime, request_id: str, *, reason: str = "escalated") -> RequestRecord:
    """Hand a request held for the parent agent over to a person now."""
    await _escalate_held(runtime, await runtime.store.get_request(request_id), reason)
    return await runtime.store.get_request(request_id)


async def escalate_due(runtime: Runtime) -> int:
    """Escalate every held request whose `deliver_at` has passed; returns how many this call handed over."""
    due = await runtime.store.list_requests(waits_on="parent", due_by=datetime.now(UTC), limit=1000)
    escalated = 0
    for request in due:
        escalated += await _escalate_in_pass(runtime, request.id, "its parent did not answer in time")
    return escalated


async def release_held(runtime: Runtime, parent_id: str) -> int:
    """Hand to a person now the requests of `parent_id`'s sub-agents held for it: its turn ended, so nothing
    would answer them before they come due (a sub-agent's question, returned by `agent_task` to a parent that
    then finished, waited unseen for `hold_for_parent_seconds`). Returns how many this call handed over."""
    released = 0
    for child in await runtime.live_children(parent_id):
        if child.held_requests == 0:
            continue
        for request in await runtime.store.list_requests(session_id=child.id, status="pending", limit=100):
            if request.waits_on == "parent":
                released += await _escalate_in_pass(runtime, request.id, "its parent's turn ended without answering")
    return released


async def _escalate_in_pass(runtime: Runtime, request_id: str, reason: str) -> bool:
    """`escalate` for the engine's own passes, which may meet another's (`escalate_due` in every engine on the
    store, `release_held` where the parent's turn ended) or a person's answer: a request one of them got to first
    is passed over, never an error that ends the pass. True when this call handed the request over."""
    try:
        return await _escalate_held(runtime, await runtime.store.get_request(request_id), reason)
    except (Conflict, NotFound):  # escalated or answered since it was read (or its agent reaped)
        return False


async def _escalate_held(runtime: Runtime, request: RequestRecord, reason: str) -> bool:
    """Hand `request` to a person when it is still held for its parent; True when it was."""
    if request.status != "pending" or request.waits_on != "parent":
        return False
    notice = escalation_notice(request.id, request.kind, reason)
    channel = await runtime.driver(request.session_id)
    await channel.commit(
        Write(request.session_id, events=[NewEvent(notice)], requests_escalate=[request.id], touch=False)
    )
    return True


def _multiple(request: RequestRecord) -> bool:
    args = request.body.get("input")
    return isinstance(args, dict) and args.get("multiple") is True
