"""`agent_tail`: a cursor-based read of a session's stream, projected to compact rows.

```
{id, at, type, itemType, title, toolName, detail, status, truncated}
```

`PROJECTION` is the one table from our log types to the tail's names. `types` accepts either spelling, and
globs (`turn.*`, `hitl.*`, `runtime.*`). Without `afterId` the answer is the newest events up to the
session's head, and `cursor` is exactly `agent_get`'s `current.cursor`; with `afterId` it is a forward scan
strictly after it. Durable events come from the store; the ephemeral ones (`content.delta`,
`tool.progress`) only from the live ring, and only when `types` asks for them.
"""

from __future__ import annotations

import fnmatch
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field, JsonValue

from agentwatch.errors import AgentwatchError, InvalidArgument, InvalidCursor, NotFound
from agentwatch.events import (
    PAYLOAD_TYPES,
    AssistantMessage,
    CompactionApplied,
    CompletionFinished,
    CompletionStarted,
    ContentDelta,
    ConversationCleared,
    Event,
    ModelReroute,
    ObserverReported,
    ObserverStateChanged,
    Payload,
    RequestDismissed,
    RequestOpened,
    RequestResolved,
    RuntimeNotice,
    RuntimeRetry,
    StreamCursor,
    SubtaskEnded,
    SubtaskStarted,
    ThinkingBlock,
    ToolCall,
    ToolProgress,
    ToolResult,
    TurnEnded,
    TurnStarted,
    UserMessage,
    is_durable_type,
    truncate,
)
from agentwatch.reads._args import field_named
from agentwatch.reads._view import EngineView
from agentwatch.store import EventValues
from agentwatch.tools import MAX_LIST_ITEMS, MAX_SEQ, Args, Caller, Count, Cursor, Id, Name

__all__ = [
    "DEFAULT_TYPES",
    "PROJECTION",
    "Projection",
    "TailArgs",
    "agent_tail",
    "project",
    "read_tail",
]

log = logging.getLogger(__name__)

_RING_SCAN = 1000


@dataclass(frozen=True, slots=True)
class Projection:
    """How one log type reads in the tail."""

    tail_type: str
    """The tail's name for it (`item.started`, `hitl.requested`, ...)."""
    item_type: str | None
    """For items: what kind (`tool_call`, `agent_message`, `user_message`, `reasoning`)."""
    default: bool
    """Part of the default event set."""


PROJECTION: dict[str, Projection] = {
    "turn.started": Projection("turn.started", None, True),
    "turn.ended": Projection("turn.ended", None, True),
    "message.user": Projection("item.completed", "user_message", True),
    "message.assistant": Projection("item.completed", "agent_message", True),
    "thinking.completed": Projection("item.completed", "reasoning", True),
    "tool.call": Projection("item.started", "tool_call", True),
    "tool.result": Projection("item.completed", "tool_call", True),
    "tool.progress": Projection("tool.progress", "tool_call", True),
    "content.delta": Projection("content.delta", None, False),
    "subtask.started": Projection("subtask.started", None, True),
    "subtask.ended": Projection("subtask.ended", None, True),
    "request.opened": Projection("hitl.requested", None, True),
    "request.resolved": Projection("hitl.resolved", None, True),
    "request.dismissed": Projection("hitl.dismissed", None, True),
    "model.reroute": Projection("model.reroute", None, True),
    "runtime.warning": Projection("runtime.warning", None, True),
    "runtime.error": Projection("runtime.error", None, True),
    "runtime.retry": Projection("runtime.retry", None, True),
    "runtime.info": Projection("runtime.info", None, False),
    "completion.started": Projection("completion.started", None, False),
    "completion.finished": Projection("completion.finished", None, False),
    "compaction.applied": Projection("compaction.applied", None, False),
    "conversation.cleared": Projection("conversation.cleared", None, False),
    "auth.required": Projection("auth.required", None, False),
    "external.event": Projection("external.event", None, False),
    "observer.report": Projection("observer.report", None, True),
    "observer.state": Projection("observer.state", None, False),
}
"""Every log type and how the tail names it. The default set: turns, items, tool progress, sub-tasks, HITL,
model reroutes, runtime warnings, errors and retries, and observer reports; never the per-token `content.delta`."""

assert set(PROJECTION) == set(PAYLOAD_TYPES), "every event type needs a row in the tail projection"

DEFAULT_TYPES: tuple[str, ...] = tuple(name for name, row in PROJECTION.items() if row.default)


class TailArgs(Args):
    """Arguments of `agent_tail`."""

    id: Id = Field(description="The agent's id (ses_...).")
    after_id: Cursor | None = Field(
        default=None,
        description="A cursor (current.cursor, or a previous tail's cursor) or an event id: read strictly after it.",
    )
    before_id: Cursor | None = Field(
        default=None,
        description="An event id or a cursor: read back, the stored events before it (a cursor's own event too), "
        "oldest first; hasMore then says older ones remain (pass the first row's id as beforeId). Not with afterId.",
    )
    max_chars: Count = Field(default=500, ge=1, le=4000, description="Cap on each detail, 1..4000.")
    max_events: Count = Field(default=50, ge=1, le=200, description="Events per answer, 1..200.")
    types: list[Name] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_LIST_ITEMS,
        description="Event types to include, as log types (tool.call) or tail names (item.started, hitl.*, turn.*).",
    )


_DEFAULT_TYPES: list[str] = list(DEFAULT_TYPES)
_DEFAULT_DURABLE: list[str] = [name for name in DEFAULT_TYPES if is_durable_type(name)]
_DEFAULT_EPHEMERAL: frozenset[str] = frozenset(name for name in DEFAULT_TYPES if not is_durable_type(name))


def resolve_types(patterns: Sequence[str] | None) -> list[str]:
    """The log types `patterns` name (either spelling, globs allowed); the default set for None."""
    if patterns is None:
        return list(DEFAULT_TYPES)
    chosen: list[str] = []
    for pattern in patterns:
        matched = [
            name
            for name, row in PROJECTION.items()
            if fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(row.tail_type, pattern)
        ]
        if not matched:
            names = sorted({*PROJECTION, *(row.tail_type for row in PROJECTION.values())})
            raise InvalidArgument(
                f"types: {pattern!r} names no event type; the types are {', '.join(names)}", fields=["types"]
            )
        chosen += [name for name in matched if name not in chosen]
    return chosen


def _text(value: JsonValue) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _answer_text(answer: JsonValue) -> str:
    """An answer in words: an approval's verdict (and its note) as such, anything else as its text."""
    if isinstance(answer, bool):
        return "approved" if answer else "denied"
    if isinstance(answer, dict) and isinstance(answer.get("approved"), bool) and set(answer) <= {"approved", "message"}:
        verdict = "approved" if answer["approved"] else "denied"
        note = answer.get("message")
        return f"{verdict}: {_text(note)}" if note else verdict
    return _text(answer)


# (title, toolName, detail, status) of a payload; one function per payload family keeps the table flat.
_Facts = tuple[str | None, str | None, str | None, str | None]


_TITLES = {"message.user": "user", "message.assistant": "assistant", "thinking.completed": "thinking"}


def _message_facts(payload: UserMessage | AssistantMessage | ThinkingBlock) -> _Facts:
    return _TITLES[payload.type], None, payload.text, None


_FACTS: dict[type[Any], Callable[[Any], _Facts]] = {
    TurnStarted: lambda p: (f"turn started ({p.trigger}, attempt {p.attempt})", None, None, "running"),
    TurnEnded: lambda p: (f"turn {p.outcome}", None, p.error or p.reason, p.outcome),
    UserMessage: _message_facts,
    AssistantMessage: _message_facts,
    ThinkingBlock: _message_facts,
    ToolCall: lambda p: (p.display_as or p.tool_name, p.tool_name, _text(p.input), "running"),
    ToolResult: lambda p: (p.tool_name, p.tool_name, p.output, p.status),
    ToolProgress: lambda p: (p.tool_name or p.message, p.tool_name, p.message, p.status or "running"),
    ContentDelta: lambda p: (p.part, None, p.delta, None),
    SubtaskStarted: lambda p: (f"spawned {p.name} ({p.role})", None, p.child_session_id, "running"),
    SubtaskEnded: lambda p: (f"sub-agent {p.status}", None, p.child_session_id, p.status),
    RequestOpened: lambda p: (p.summary, None, "\n".join(p.questions or []) or p.summary, "pending"),
    RequestResolved: lambda p: ("answered", None, _answer_text(p.answer), "resolved"),
    RequestDismissed: lambda p: ("dismissed", None, p.reason, "dismissed"),
    ModelReroute: lambda p: (f"{p.from_model} → {p.to_model}", None, p.reason, None),
    RuntimeNotice: lambda p: (p.message, None, p.message, None),
    RuntimeRetry: lambda p: (p.message, None, p.message, None),
    CompletionStarted: lambda p: (f"model request {p.request_index}", None, p.model, "running"),
    CompletionFinished: lambda p: (f"model request {p.request_index}", None, p.finish_reason, p.finish_reason),
    CompactionApplied: lambda p: ("compacted", None, p.summary, None),
    ConversationCleared: lambda p: ("cleared", None, p.archived_conversation_id, None),
    ObserverReported: lambda p: (f"report from {p.observer_type}", None, p.report, "queued"),
    ObserverStateChanged: lambda p: (f"observer {p.observer_type} {p.state}", None, p.reason, p.state),
}
"""(title, toolName, detail, status) by payload class; a class not named here shows its type and its JSON."""


def _other_facts(payload: Payload) -> _Facts:
    return payload.type, None, _text(payload.model_dump(mode="json")), None


def _facts(payload: Payload) -> _Facts:
    facts = _FACTS.get(type(payload))
    if facts is None:  # a subclass of one of them, or a payload without a row of its own
        facts = next((row for kind, row in _FACTS.items() if isinstance(payload, kind)), _other_facts)
    return facts(payload)


def project(event: Event, *, max_chars: int) -> dict[str, Any]:
    """One event as the JSON object a tail answer holds (`TailRow` dumped, field for field), its detail capped
    at `max_chars` with the truncation marker; made without the model, since a tail answer is mostly these."""
    return _row(event.id, event.at.isoformat(), event.payload, max_chars)


def _row(event_id: str, at: str, payload: Payload, max_chars: int) -> dict[str, Any]:
    row = PROJECTION[payload.type]
    title, tool_name, detail, status = _facts(payload)
    truncated = False
    if detail is not None and len(detail) > max_chars:
        detail, truncated = truncate(detail, max_chars).text, True
    return {
        "id": event_id,
        "at": at,
        "type": row.tail_type,
        "itemType": row.item_type,
        "title": title,
        "toolName": tool_name,
        "detail": detail,
        "status": status,
        "truncated": truncated,
    }


async def _ephemeral(
    view: EngineView, session_id: str, types: list[str], after: StreamCursor | None, *, up_to_seq: int | None = None
) -> list[Event]:
    """Ephemeral events of `types` the live ring still holds after `after` (and not past durable `up_to_seq`)."""
    wanted = _DEFAULT_EPHEMERAL if types is _DEFAULT_TYPES else {name for name in types if not is_durable_type(name)}
    if not wanted:
        return []
    recent = await _held(view, session_id, after)
    return [e for e in recent if e.type in wanted and (up_to_seq is None or e.seq <= up_to_seq)]


async def _held(view: EngineView, session_id: str, after: StreamCursor | None = None) -> list[Event]:
    """What the live ring holds of the session after `after`; nothing when the ring fails (it is a view: the
    stored events still answer)."""
    try:
        return await view.ring.recent(session_id, after=after, limit=_RING_SCAN)
    except AgentwatchError as exc:
        log.warning("agent_tail of %s without the live ring's events: %s", session_id, exc)
        return []


async def read_tail(view: EngineView, args: TailArgs) -> dict[str, Any]:
    """The `agent_tail` answer as the JSON object the tool returns: `events`, `cursor`, `hasMore`.

    Stored events are read as `EventValues` (no `Event` per row: the rows only show them); the ephemeral ones
    the live ring holds, when `types` asks for them, are merged in by position."""
    if args.types is None:
        types, durable = _DEFAULT_TYPES, _DEFAULT_DURABLE  # (neither is changed)
    else:
        types = resolve_types(args.types)
        durable = [name for name in types if is_durable_type(name)]
    limit = args.max_events
    if args.before_id is not None:
        return await _read_back(view, args, durable)
    if args.after_id is None:
        # The session's last_seq and the newest events up to it, in one read: the head cursor promises them.
        last_seq, newest = await view.store.read_event_values(args.id, limit=limit, types=durable)
        head = StreamCursor(args.id, last_seq)
        live = await _ephemeral(view, args.id, types, None, up_to_seq=last_seq)
        items = _stored(reversed(newest))
        if live:
            items = sorted([*items, *_live(live)], key=_position)[-limit:]
        # With durable types only this is exactly the head, agent_get's current.cursor.
        end = max([head, *(StreamCursor(args.id, seq, sub) for seq, sub, _ in items)])
        return _answer(items, end, has_more=False, max_chars=args.max_chars)
    after = await _position_of(view, args.id, args.after_id, "afterId")
    # The session's last_seq first, then the events after the cursor, in one read.
    last_seq, stored = await view.store.read_event_values(args.id, after_seq=after.seq, limit=limit + 1, types=durable)
    if after.seq > last_seq:
        # No answer for this agent gave such a cursor (the checksum is no secret; a store restored from a backup
        # is behind its readers): every later event would be at or before it, and never shown.
        raise InvalidCursor(
            f"afterId: the cursor is past the agent's newest event (seq {last_seq}); pass back a cursor an answer "
            "for this agent gave (agent_get's current.cursor), or leave afterId out for its newest events",
            fields=["afterId"],
        )
    head = StreamCursor(args.id, last_seq)
    live = await _ephemeral(view, args.id, types, after)
    merged = _stored(stored)
    if live:
        merged = sorted([*merged, *_live(live)], key=_position)
    items = merged[:limit]
    has_more = len(merged) > limit
    # When everything up to the head was seen, the cursor moves to the head even past events left out by
    # `types`, so the next call does not scan them again.
    if has_more:
        end = StreamCursor(args.id, items[-1][0], items[-1][1])
    else:
        end = max([after, head, *(StreamCursor(args.id, seq, sub) for seq, sub, _ in items)])
    return _answer(items, end, has_more=has_more, max_chars=args.max_chars)


async def _read_back(view: EngineView, args: TailArgs, durable: list[str]) -> dict[str, Any]:
    """`agent_tail` with `beforeId`: the stored events before it, oldest first; its cursor is the last one's."""
    if args.after_id is not None:
        raise InvalidArgument("pass afterId or beforeId, not both", fields=["afterId", "beforeId"])
    assert args.before_id is not None
    before = await _position_of(view, args.id, args.before_id, "beforeId")
    # A stored event is not before itself; a cursor stands just after the event it names, which is before it,
    # and an ephemeral event comes after the stored one of its seq.
    before_seq = before.seq if args.before_id.startswith("evt_") and not before.sub else min(before.seq + 1, MAX_SEQ)
    await view.store.get_session(args.id)  # an unknown agent is not_found, not an empty page
    limit = args.max_events
    found = await view.store.read_events_backward(args.id, before_seq=before_seq, limit=limit + 1, types=durable)
    items = _live(list(reversed(found[:limit])))
    end = StreamCursor(args.id, items[-1][0]) if items else before
    return _answer(items, end, has_more=len(found) > limit, max_chars=args.max_chars)


async def _position_of(view: EngineView, session_id: str, given: str, field: str) -> StreamCursor:
    """The stream position an event id (stored, or ephemeral while the live ring holds it: a row's id) or a
    cursor (`field`'s value) names."""
    if given.startswith("evt_"):
        try:
            return (await view.store.get_event(session_id, given)).cursor
        except NotFound:
            held = [e for e in await _held(view, session_id) if e.id == given]
            if not held:
                raise NotFound(
                    f"{field}: agent {session_id!r} has no event {given!r}: the id is another agent's, or a live-only "
                    "event's (a delta, tool progress) the live ring no longer holds; pass the `cursor` of the answer "
                    "it came in, or agent_get's current.cursor",
                    fields=[field],
                ) from None
            return held[0].cursor
    with field_named(field):
        return StreamCursor.decode(given, session_id=session_id)


_Item = tuple[int, int, EventValues]
"""An event of the answer: its position (seq, sub) and what its row shows."""


def _stored(events: Iterable[EventValues]) -> list[_Item]:
    return [(event.seq, 0, event) for event in events]


def _live(events: list[Event]) -> list[_Item]:
    return [(e.seq, e.sub, EventValues(e.id, e.seq, e.at.isoformat(), e.payload)) for e in events]


def _position(item: _Item) -> tuple[int, int]:
    return item[0], item[1]


def _answer(items: list[_Item], cursor: StreamCursor, *, has_more: bool, max_chars: int) -> dict[str, Any]:
    return {
        "events": [_row(event_id, at, payload, max_chars) for _, _, (event_id, _, at, payload) in items],
        "cursor": cursor.encode(),
        "hasMore": has_more,
    }


async def agent_tail(engine: EngineView, caller: Caller, args: TailArgs) -> dict[str, Any]:
    """The `agent_tail` tool: its answer as JSON (`TailAnswer` is its model)."""
    return await read_tail(engine, args)
