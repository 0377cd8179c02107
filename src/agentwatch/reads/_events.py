"""Events as the read tools speak them: the envelope in the tools' camelCase, the payload as stored."""

from __future__ import annotations

from pydantic import JsonValue

from agentwatch.events import Event
from agentwatch.reads._view import iso

__all__ = ["event_json"]


def event_json(event: Event) -> dict[str, JsonValue]:
    """One event: `id`, `seq`, `at`, `type`, `turnId`, `conversationId`, `cursor` and its `payload`."""
    return {
        "id": event.id,
        "seq": event.seq,
        "at": iso(event.at),
        "type": event.type,
        "turnId": event.turn_id,
        "conversationId": event.conversation_id,
        "cursor": event.cursor.encode(),
        "payload": event.payload.model_dump(mode="json"),
    }
