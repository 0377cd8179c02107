"""The observer family: what observer agents said about a session, and their pairing's state."""

from __future__ import annotations

from typing import Literal

from agentwatch.events._base import BasePayload

__all__ = ["ObserverReported", "ObserverStateChanged", "PairingState"]

PairingState = Literal["armed", "denied", "retired", "stopped", "blocked"]


class ObserverReported(BasePayload):
    """An observer agent reported on this session; the report reaches its next turn."""

    type: Literal["observer.report"] = "observer.report"
    observer_type: str
    """The observer's agent type."""
    observer_session_id: str | None = None
    """The observer's own session (none for a rule observer)."""
    report: str
    """What it said."""


class ObserverStateChanged(BasePayload):
    """The pairing of this session with its observer changed state."""

    type: Literal["observer.state"] = "observer.state"
    observer_type: str
    """The observer's agent type."""
    observer_session_id: str | None = None
    """The observer's session, once there is one."""
    state: PairingState
    """The new state."""
    reason: str | None = None
    """Why (a policy denied it, a person stopped it, the observed session ended, ...)."""
