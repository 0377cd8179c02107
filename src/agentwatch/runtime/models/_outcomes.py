"""How the model layer's tool-return outcomes read in our vocabulary."""

from __future__ import annotations

from agentwatch.events import ToolStatus

__all__ = ["tool_status"]

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
