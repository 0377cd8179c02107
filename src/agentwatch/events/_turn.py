"""The turn family: one dispatch of input to a session, from start to end."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agentwatch.events._base import BasePayload, Usage

__all__ = ["TurnEnded", "TurnOutcome", "TurnStarted"]

TurnOutcome = Literal["completed", "failed", "cancelled", "interrupted", "paused"]


class TurnStarted(BasePayload):
    """A turn began."""

    type: Literal["turn.started"] = "turn.started"
    trigger: Literal["input", "continue", "answer"] = "input"
    """`input` from the inbox, `continue` after a restart cut the turn off, `answer` after a request."""
    attempt: int = 1
    """1 for the first run of the turn, 2 and up for each continuation after a restart."""
    model: str | None = None
    """The model ref the turn runs on."""
    role: str | None = None
    """The session's agent type (None on turns recorded before the field was)."""
    system_prompt_hash: str | None = None
    """Hash (sha256, hex) of the exact system prompt the turn was dispatched with."""
    system_prompt: str | None = None
    """The exact system prompt, stored only when its hash differs from the session's previous turn (it is
    byte-stable by contract, so it is kept once rather than once per turn)."""
    trace_context: str | None = None
    """This part's `invoke_agent` span, as a W3C `traceparent`, when the engine that ran it made spans: the turn's
    next part (continued after a restart, resumed by an answer) links to it, in whichever engine runs it."""
    run_id: str | None = Field(default=None, exclude_if=lambda run_id: run_id is None)
    """The run this part works for and bills (left out: none, or a part recorded before the field was). The
    turn's later parts bill the run its first part did, even when it began after the run ended (on work the run
    sent it)."""


class TurnEnded(BasePayload):
    """A turn ended: the model stopped, someone stopped it, it failed, or it paused on a request."""

    type: Literal["turn.ended"] = "turn.ended"
    outcome: TurnOutcome
    """How it ended; `paused` means it waits on a request and goes on once that is answered."""
    reason: str | None = None
    """Why, in a few words (`stopped by a person`, `cut off by a restart 3 times`, ...)."""
    error: str | None = None
    """The error message, for `failed`."""
    usage: Usage = Usage()
    """Tokens and cost of this part of the turn: a turn paused on a person or cut off by a restart ends each part
    with a `turn.ended` of its own (none for a part a dead process left; its `completion.finished` events say what
    it used). `partialUsage` (`agent_get`'s `current`) adds the parts up."""
