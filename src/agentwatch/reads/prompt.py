"""`agent_prompt`: the exact system prompt (with its hash) and user text a turn was dispatched with.

The system prompt is stored on a `turn.started` event only when its hash changed, so the prompt of a turn is
the one on the newest `turn.started` at or before it that carries one. `against: "previous"` diffs it with
the dispatch before; `against: "definition"` with what the role composes now (through a `compose` callable,
so this module needs no runtime). A role that no longer resolves is refused (`invalid`).

A turn continued (after a restart, or after an answer) has one dispatch per `turn.started`: each shows the turn's
user text as far as it went then, and a message's `eventId` names the dispatch that handed it over.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Literal

from pydantic import Field

from agentwatch.errors import InvalidArgument, NotFound
from agentwatch.events import Event, TurnStarted, UserMessage
from agentwatch.reads._view import EngineView, iso, role_prompt_composer
from agentwatch.reads.answers import AgainstDefinition, AgainstPrevious, PromptAnswer, SystemPrompt
from agentwatch.store import SessionRecord, Store
from agentwatch.tools import Args, Caller, Id

__all__ = ["PromptArgs", "agent_prompt", "prompt_hunks", "read_prompt"]

_SCAN = 100


class PromptArgs(Args):
    """Arguments of `agent_prompt`."""

    id: Id = Field(description="The agent's id (ses_...).")
    event_id: Id | None = Field(default=None, description="A user message's event id: that turn instead of the newest.")
    against: Literal["previous", "definition"] | None = Field(
        default=None,
        description="previous: diff with the dispatch before; definition: with what the role composes now.",
    )


def prompt_hunks(before: str, after: str, *, from_name: str, to_name: str) -> list[str]:
    """Unified-diff hunks (each starting `@@`) from `before` to `after`; [] when they are equal."""
    import difflib

    lines = list(difflib.unified_diff(before.splitlines(), after.splitlines(), from_name, to_name, lineterm=""))
    hunks: list[str] = []
    for line in lines[2:]:  # the two file header lines
        if line.startswith("@@"):
            hunks.append(line)
        else:
            hunks[-1] += "\n" + line
    return hunks


async def _turn_start(store: Store, session: SessionRecord, event_id: str | None) -> Event:
    if event_id is None:
        newest = await store.read_events_backward(session.id, limit=1, types=["turn.started"])
        if not newest:
            raise NotFound(f"agent {session.id!r} has run no turn yet; there is no prompt to show")
        return newest[0]
    try:
        message = await store.get_event(session.id, event_id)
    except NotFound:
        raise NotFound(
            f"eventId: agent {session.id!r} has no event {event_id!r}; pass the id of one of its user messages "
            "(message.user in agent_history), or leave eventId out for its newest turn",
            fields=["eventId"],
        ) from None
    if not isinstance(message.payload, UserMessage) or message.turn_id is None:
        raise InvalidArgument(f"eventId {event_id!r} is a {message.type} event; pass the id of a user message")
    # The dispatch that handed it over: the newest start of its turn before it (a note of the engine's that a
    # continued turn opens with belongs to that continuation, not to the turn's first dispatch).
    starts = await store.read_events_backward(
        session.id, before_seq=message.seq, limit=1, types=["turn.started"], turn_id=message.turn_id
    )
    if not starts:
        raise NotFound(f"the turn of event {event_id!r} has no start recorded")
    return starts[0]


async def _system_prompt(store: Store, session_id: str, start: Event) -> str | None:
    """The prompt in force at `start`: its own, else the newest earlier one that has the same hash."""
    assert isinstance(start.payload, TurnStarted)
    if start.payload.system_prompt is not None:
        return start.payload.system_prompt
    before = start.seq
    while before > 1:
        page = await store.read_events_backward(session_id, before_seq=before, limit=_SCAN, types=["turn.started"])
        for event in page:
            payload = event.payload
            if isinstance(payload, TurnStarted) and payload.system_prompt is not None:
                if payload.system_prompt_hash == start.payload.system_prompt_hash:
                    return payload.system_prompt
                return None  # the stored prompt changed in between: this turn's text was never recorded
        if len(page) < _SCAN:
            break
        before = page[-1].seq
    return None


async def _user_text(store: Store, session_id: str, start: Event) -> tuple[str | None, str | None]:
    """The turn's user text as of the dispatch `start` (its messages up to that dispatch, joined: a continued
    turn's note is not part of the dispatches before it) and the first message's event id."""
    events = await store.read_events(session_id, limit=1000, types=["message.user"], turn_id=start.turn_id)
    later = await store.read_events(
        session_id, after_seq=start.seq, limit=1, types=["turn.started"], turn_id=start.turn_id
    )
    until = later[0].seq if later else None
    messages = [e for e in events if isinstance(e.payload, UserMessage) and (until is None or e.seq < until)]
    if not messages:
        return None, None
    return "\n\n".join(e.payload.text for e in messages if isinstance(e.payload, UserMessage)), messages[0].id


async def _dispatch(store: Store, session: SessionRecord, start: Event) -> PromptAnswer:
    assert isinstance(start.payload, TurnStarted)
    system = await _system_prompt(store, session.id, start)
    user, message_id = await _user_text(store, session.id, start)
    return PromptAnswer(
        id=session.id,
        turn_id=start.turn_id,
        event_id=message_id,
        at=iso(start.at),
        model=start.payload.model,
        trigger=start.payload.trigger,
        system=SystemPrompt(text=system, hash=start.payload.system_prompt_hash),
        user=user,
    )


async def read_prompt(
    store: Store, session: SessionRecord, args: PromptArgs, *, compose: Callable[[str], str]
) -> PromptAnswer:
    """The `agent_prompt` answer; `compose(role)` gives the role's current system prompt (or raises `Invalid`)."""
    start = await _turn_start(store, session, args.event_id)
    answer = await _dispatch(store, session, start)
    text = answer.system.text or ""
    if args.against == "definition":
        now = compose(session.role)
        answer.against = AgainstDefinition(
            role=session.role,
            hash=hashlib.sha256(now.encode()).hexdigest(),
            diff=prompt_hunks(text, now, from_name="turn", to_name=f"role {session.role} now"),
        )
    elif args.against == "previous":
        earlier = await store.read_events_backward(session.id, before_seq=start.seq, limit=1, types=["turn.started"])
        previous = await _dispatch(store, session, earlier[0]) if earlier else None
        answer.against = AgainstPrevious(
            turn_id=previous.turn_id if previous else None,
            hash=previous.system.hash if previous else None,
            diff=prompt_hunks(previous.system.text or "", text, from_name="previous", to_name="turn")
            if previous
            else [],
        )
    return answer


async def agent_prompt(engine: EngineView, caller: Caller, args: PromptArgs) -> PromptAnswer:
    """The `agent_prompt` tool."""
    session = await engine.store.get_session(args.id)
    return await read_prompt(engine.store, session, args, compose=role_prompt_composer(engine))
