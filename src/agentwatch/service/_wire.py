"""What the service sends: events and snapshots as JSON, errors and the HTTP status of each error code.

An event's JSON text is made once and kept (`event_text`): the same event goes to every attached client and
into every later snapshot of its session, so a snapshot of 1,000 events is mostly a join of kept texts.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any, Final

from pydantic import JsonValue

from agentwatch.events import Event
from agentwatch.runtime.thread_observer import ReplaySnapshot

__all__ = [
    "STATUS_BY_CODE",
    "EventTexts",
    "error",
    "event_json",
    "event_text",
    "snapshot_json",
    "snapshot_text",
    "status_for",
]

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
    "user_error": 400,
    "missing_dependency": 501,
    "tool_failed": 500,
    "unavailable": 503,
    "store_error": 503,
    "store_unavailable": 503,
    "not_a_database": 503,
    "schema_too_new": 503,
    "damaged_record": 500,
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


def snapshot_json(snapshot: ReplaySnapshot, *, history: bool = True) -> dict[str, JsonValue]:
    """The catch-up message: committed history, the partial turn, in-progress thinking, pending choices
    (`history=False`: an empty history, for `snapshot_text` to fill)."""
    partial = snapshot.partial
    return {
        "agentId": snapshot.thread_id,
        "cursor": snapshot.position.encode(),
        "history": [event_json(e) for e in snapshot.history] if history else [],
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


# ASCII only: SSE readers split lines on more than LF (U+2028 in a text would cut a frame).
_text: Final = json.JSONEncoder(separators=(",", ":")).encode


def _string(value: str | None) -> str:
    return "null" if value is None else _text(value)


def _encode(event: Event, cursor: str | None) -> str:
    """`event_json(event)` as JSON text, its payload serialised by pydantic in one call."""
    payload = event.payload.model_dump_json()
    if not payload.isascii():  # pydantic writes UTF-8; keep every frame ASCII
        payload = _text(json.loads(payload))
    return (
        f'{{"id":{_string(event.id)},"agentId":{_string(event.session_id)},"seq":{event.seq},"sub":{event.sub},'
        f'"at":"{event.at.isoformat()}","type":{_string(event.type)},"turnId":{_string(event.turn_id)},'
        f'"conversationId":{_string(event.conversation_id)},"cursor":"{cursor or event.cursor.encode()}",'
        f'"payload":{payload}}}'
    )


class EventTexts:
    """Events' JSON texts by event id, the least recently used dropped beyond `max_chars` in all.

    An event never changes once it has an id, so a kept text is never stale.
    """

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.chars = 0
        """Characters held now."""
        self._texts: OrderedDict[str, str] = OrderedDict()

    def get(self, event: Event, cursor: str | None = None) -> str:
        """The event's JSON text (as `event_json`), made at most once while it is kept; `cursor`: the
        event's encoded cursor, when the caller has it already."""
        texts = self._texts
        text = texts.get(event.id)
        if text is not None:
            texts.move_to_end(event.id)
            return text
        text = texts[event.id] = _encode(event, cursor)
        self.chars += len(text)
        while self.chars > self.max_chars and len(texts) > 1:
            self.chars -= len(texts.popitem(last=False)[1])
        return text


EVENT_TEXTS: Final = EventTexts(32 * 1024 * 1024)
"""The texts of this process's service (32 M characters: some 50,000 events of a typical size)."""


def event_text(event: Event, cursor: str | None = None) -> str:
    """`event_json(event)` as JSON text, shared by every client and snapshot that sends it (`cursor`: the
    event's encoded cursor, when the caller has it already)."""
    return EVENT_TEXTS.get(event, cursor)


def snapshot_text(snapshot: ReplaySnapshot) -> str:
    """The snapshot frame (`{"kind": "snapshot", **snapshot_json(snapshot)}`) as JSON text, its history
    joined from the events' kept texts."""
    body = snapshot_json(snapshot, history=False)
    history = ",".join([event_text(event) for event in snapshot.history])
    return (
        f'{{"kind":"snapshot","agentId":{_text(body["agentId"])},"cursor":{_text(body["cursor"])},'
        f'"history":[{history}],"partial":{_text(body["partial"])},"pendingChoices":{_text(body["pendingChoices"])}}}'
    )
