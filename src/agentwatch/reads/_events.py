"""Events as the read tools speak them: the envelope in the tools' camelCase, the payload as stored."""

from __future__ import annotations

import json

from agentwatch.events import Event
from agentwatch.reads._view import iso
from agentwatch.reads.answers import EventEntry

__all__ = ["PREVIEW_CHARS", "event_entry", "event_size"]

PREVIEW_CHARS = 2000
"""Characters of a payload kept as its preview when the payload alone is over the answer's size cap."""


def event_entry(event: Event) -> EventEntry:
    """One event: `id`, `seq`, `at`, `type`, `turnId`, `conversationId`, `cursor` and its `payload`."""
    return EventEntry.trusted(
        id=event.id,
        seq=event.seq,
        at=iso(event.at),
        type=event.type,
        turn_id=event.turn_id,
        conversation_id=event.conversation_id,
        cursor=event.cursor.encode(),
        payload=event.payload.model_dump(mode="json"),
    )


def event_size(entry: EventEntry) -> int:
    """About how many characters the entry takes in an answer (its payload as JSON, plus the envelope)."""
    return len(json.dumps(entry.payload, ensure_ascii=False, separators=(",", ":"))) + 300


def preview(entry: EventEntry) -> EventEntry:
    """The entry with its payload replaced by a preview of its JSON, marked `truncated`."""
    text = json.dumps(entry.payload, ensure_ascii=False, separators=(",", ":"))
    cut = {"preview": text[:PREVIEW_CHARS], "chars": len(text)}
    return entry.model_copy(update={"payload": cut, "truncated": True})
