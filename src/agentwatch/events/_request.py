"""The request family: questions, grants and approvals that wait on a person (or on a parent agent)."""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, JsonValue

from agentwatch.events._base import BasePayload

__all__ = ["RequestDismissed", "RequestKind", "RequestOpened", "RequestResolved", "WaitsOn"]

RequestKind = Literal["question", "grant", "approval", "choice", "oauth"]
WaitsOn = Literal["person", "parent"]


class RequestOpened(BasePayload):
    """The session asked for something and waits; the request is stored before this is seen."""

    type: Literal["request.opened"] = "request.opened"
    request_id: str
    """The request, for `agent_answer`."""
    kind: RequestKind
    """`question`, `grant`, `approval` (of a tool call), `choice` (among options) or `oauth` (a tool server
    needs authorization before the call can run)."""
    summary: str
    """One line saying what is asked."""
    questions: list[str] | None = None
    """The questions asked, for `question`."""
    options: list[str] | None = None
    """The options offered, for `choice`."""
    multiple: bool = False
    """For `choice`: several options may be chosen (the answer is a list of them)."""
    tool_call_id: str | None = None
    """The tool call that opened it."""
    waits_on: WaitsOn = "person"
    """Who answers: a person, or first the parent agent that spawned the session."""
    deliver_at: AwareDatetime | None = None
    """For one held for the parent: the latest moment it reaches a person."""


class RequestResolved(BasePayload):
    """A request was answered; the answer is stored before this is seen."""

    type: Literal["request.resolved"] = "request.resolved"
    request_id: str
    """The request that was answered."""
    answer: JsonValue
    """The answer as given."""
    by: str | None = None
    """Who answered: a person, or the id of the parent session."""


class RequestDismissed(BasePayload):
    """A request became moot (its tool call was interrupted); it is removed before this is seen."""

    type: Literal["request.dismissed"] = "request.dismissed"
    request_id: str
    """The request that no longer waits."""
    reason: str
    """Why it is moot."""
