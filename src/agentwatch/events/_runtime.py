"""The runtime family: what the engine itself says about a session, and out-of-band facts."""

from __future__ import annotations

from typing import Literal

from pydantic import JsonValue

from agentwatch.events._base import BasePayload
from agentwatch.events._request import RequestOpened

__all__ = [
    "DELETION_SOURCE",
    "AuthRequired",
    "ExternalEvent",
    "ModelReroute",
    "RuntimeNotice",
    "RuntimeRetry",
    "SubtaskEnded",
    "SubtaskStarted",
    "asks_a_person",
    "escalation_notice",
    "is_deletion_notice",
]


DELETION_SOURCE = "deletion"
"""The `source` of the notice a deletion writes, a session's last event: an attach stream ends with it."""


class RuntimeNotice(BasePayload):
    """What the engine says about a session: a diagnostic (`runtime.info`), something that went wrong beside
    the turn without hurting it (`runtime.warning`: an observer raised, a report was dropped), or something
    that went wrong in the turn (`runtime.error`)."""

    type: Literal["runtime.info", "runtime.warning", "runtime.error"]
    message: str
    """What happened, in a sentence."""
    source: str | None = None
    """The part that said it (`observer:<name>`, `model`, `store`, ...)."""
    detail: JsonValue = None
    """Structured facts, when there are any."""


def is_deletion_notice(payload: object) -> bool:
    """Whether `payload` is the notice a deletion writes: a session's last event, with which its stream ends."""
    return isinstance(payload, RuntimeNotice) and payload.source == DELETION_SOURCE


_ESCALATION_SOURCE = "requests"
"""The `source` of the notice that a request held for a parent agent now waits on a person."""


def escalation_notice(request_id: str, kind: str, reason: str) -> RuntimeNotice:
    """The notice that request `request_id` (of `kind`), held for a parent agent, now waits on a person."""
    return RuntimeNotice(
        type="runtime.info",
        message=f"request {request_id} now waits on a person ({reason})",
        source=_ESCALATION_SOURCE,
        detail={"request_id": request_id, "kind": kind},
    )


def asks_a_person(payload: object) -> tuple[str, str] | None:
    """The request id and kind when `payload` is the moment a request starts waiting on a person: one opened for
    a person, or one held for a parent agent handed over (`escalation_notice`); None for any other payload."""
    if isinstance(payload, RequestOpened):
        return (payload.request_id, payload.kind) if payload.waits_on == "person" else None
    if not isinstance(payload, RuntimeNotice) or payload.source != _ESCALATION_SOURCE:
        return None
    detail = payload.detail if isinstance(payload.detail, dict) else {}
    request_id, kind = detail.get("request_id"), detail.get("kind")
    if not isinstance(request_id, str):
        return None
    return request_id, kind if isinstance(kind, str) else "unknown"


class RuntimeRetry(BasePayload):
    """A model request or tool is tried again."""

    type: Literal["runtime.retry"] = "runtime.retry"
    message: str
    """Why it is retried."""
    attempt: int
    """The attempt about to start (2 for the first retry)."""
    delay_seconds: float = 0.0
    """The wait before it."""


class ModelReroute(BasePayload):
    """The turn moved to another model."""

    type: Literal["model.reroute"] = "model.reroute"
    from_model: str
    """The model ref it left."""
    to_model: str
    """The model ref it moved to."""
    reason: str
    """Why."""


class SubtaskStarted(BasePayload):
    """The session spawned a sub-agent."""

    type: Literal["subtask.started"] = "subtask.started"
    child_session_id: str
    """The new session."""
    role: str
    """Its role."""
    name: str
    """Its name."""
    tool_call_id: str | None = None
    """The tool call that spawned it."""


class SubtaskEnded(BasePayload):
    """A sub-agent this session spawned reached a terminal status."""

    type: Literal["subtask.ended"] = "subtask.ended"
    child_session_id: str
    """The sub-agent's session."""
    status: str
    """Its final status."""


class AuthRequired(BasePayload):
    """A tool server needs the user to sign in before it can go on."""

    type: Literal["auth.required"] = "auth.required"
    provider: str
    """Who asks."""
    url: str | None = None
    """Where to sign in."""
    message: str = ""
    """What to tell the user."""


class ExternalEvent(BasePayload):
    """Something outside the conversation the session subscribed to happened."""

    type: Literal["external.event"] = "external.event"
    source: str
    """The subscription or resource it came from."""
    name: str
    """What happened."""
    body: JsonValue = None
    """Its content."""
