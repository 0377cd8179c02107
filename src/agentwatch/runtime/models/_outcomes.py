"""How the model layer's tool-return outcomes read in our vocabulary."""

from __future__ import annotations

from typing import Any

from agentwatch.events import ToolStatus

__all__ = ["tool_outcome", "tool_status"]

_STATUS: dict[str, ToolStatus] = {
    "success": "ok",
    "failed": "error",
    "retried": "error",  # the arguments did not validate: the model saw an error and may try again
    "denied": "denied",
    "interrupted": "interrupted",
}


def tool_status(outcome: str) -> ToolStatus:
    """The `ToolStatus` of a tool return with this outcome (unknown outcomes read as `error`)."""
    return _STATUS.get(outcome, "error")


_OUTCOME: dict[ToolStatus, Any] = {
    "ok": "success",
    "error": "failed",
    "denied": "denied",
    "interrupted": "interrupted",
}


def tool_outcome(status: ToolStatus) -> Any:
    """The outcome a tool return is given for a stored `tool.result` of this status (`tool_status` read back)."""
    return _OUTCOME[status]
