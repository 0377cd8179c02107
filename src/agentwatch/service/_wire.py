"""What the service sends: events and snapshots as JSON, errors and the HTTP status of each error code."""

from __future__ import annotations

from typing import Any

from pydantic import JsonValue

from agentwatch.events import Event
from agentwatch.runtime.thread_observer import ReplaySnapshot

__all__ = ["STATUS_BY_CODE", "error", "event_json", "snapshot_json", "status_for"]

STATUS_BY_CODE: dict[str, int] = {
    "invalid_argument": 400,
    "bad_request": 400,
    "unauthenticated": 401,
    "denied": 403,
    "forbidden": 403,
    "not_found": 404,
    "method_not_allowed": 405,
    "conflict": 409,
    "ambiguous": 409,
    "too_large": 413,
    "unsupported_media_type": 415,
    "invalid": 422,
    "not_delivered": 422,
    "rate_limited": 429,
    "user_error": 400,
    "missing_dependency": 501,
    "unavailable": 503,
    "store_error": 503,
    "store_unavailable": 503,
    "not_a_database": 503,
    "schema_too_new": 503,
}
"""The HTTP status of each structured error code (an unknown code of a refused call is a 400)."""


def status_for(answer: dict[str, Any]) -> int:
    """200 for an answer, the code's status for `{"error": {...}}`."""
    err = answer.get("error") if len(answer) == 1 else None
    if not isinstance(err, dict) or "code" not in err:
        return 200
    return STATUS_BY_CODE.get(str(err["code"]), 400)


def error(code: str, message: str) -> dict[str, JsonValue]:
    """A structured error, as every tool returns them."""
    return {"error": {"code": code, "message": message}}


def event_json(event: Event) -> dict[str, JsonValue]:
    """One event as clients receive it; `cursor` is what a reconnect passes back as `after`."""
    return {
        "id": event.id,
        "agentId": event.session_id,
        "seq": event.seq,
        "sub": event.sub,
        "at": event.at.isoformat(),
        "type": event.type,
        "turnId": event.turn_id,
        "conversationId": event.conversation_id,
        "cursor": event.cursor.encode(),
        "payload": event.payload.model_dump(mode="json"),
    }


def snapshot_json(snapshot: ReplaySnapshot) -> dict[str, JsonValue]:
    """The catch-up message: committed history, the partial turn, in-progress thinking, pending choices."""
    partial = snapshot.partial
    return {
        "agentId": snapshot.thread_id,
        "cursor": snapshot.position.encode(),
        "history": [event_json(e) for e in snapshot.history],
        "partial": None
        if partial is None
        else {
            "turnId": partial.turn_id,
            "text": partial.text,
            "thinking": partial.thinking,
            "requestIndex": partial.request_index,
        },
        "pendingChoices": [p.model_dump(mode="json") for p in snapshot.pending_choices],
    }
