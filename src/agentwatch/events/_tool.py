"""The tool family: calls the model asked for, their results, and progress while they run."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, JsonValue

from agentwatch.events._base import BasePayload

__all__ = ["ToolCall", "ToolProgress", "ToolResult", "ToolStatus"]

ToolStatus = Literal["ok", "error", "denied", "interrupted"]


class ToolCall(BasePayload):
    """The model asked for a tool to be run."""

    type: Literal["tool.call"] = "tool.call"
    tool_call_id: str
    """The id that pairs the call with its result."""
    tool_name: str
    """Name of the tool as the model saw it."""
    input: dict[str, JsonValue]
    """Arguments, as the model sent them."""
    display_as: str | None = None
    """A human rendering of the call, when the tool provides one."""


class ToolResult(BasePayload):
    """A tool call finished (or was denied or cut off)."""

    type: Literal["tool.result"] = "tool.result"
    tool_call_id: str
    """The call this answers."""
    tool_name: str
    """Name of the tool."""
    output: str
    """What the model was given back, as text."""
    status: ToolStatus = "ok"
    """`ok`, `error` (the tool raised; the model saw the failure), `denied`, or `interrupted`."""
    value: JsonValue = Field(default=None, exclude_if=lambda value: value is None)
    """The return itself, when it was not text (an object, a list, a number) and this result is stored ahead of
    the model message that gives it to the model (a call that ended beside calls still running): a turn continued
    after a crash gives the model back this, as it was, rather than its text. Left out otherwise."""
    returned_none: bool = Field(default=False, exclude_if=lambda returned_none: not returned_none)
    """True when the return was None and this result is stored ahead of its model message, as for `value` (which
    cannot say it: a `value` of None says the return was text): a turn continued after a crash gives the model
    back None, rather than its text. Left out otherwise."""


class ToolProgress(BasePayload):
    """A running tool reported progress, or ended beside calls still running (ephemeral)."""

    durable: ClassVar[bool] = False

    type: Literal["tool.progress"] = "tool.progress"
    tool_call_id: str
    """The call that is running."""
    tool_name: str | None = None
    """Name of the tool, as on its `tool.call`. None on events published before the field existed (a Redis ring
    holds them for a while): their message then names the tool."""
    message: str
    """What it is doing (`reading page 3`), or, once it ended, how: `finished`, `failed`, `denied`,
    `interrupted`."""
    fraction: float | None = None
    """How far along, from 0 to 1, when known."""
    status: ToolStatus | None = None
    """Set by the engine when the call ended (or will not run: denied, answered, cut off) while calls the model
    made beside it still run: said live at once, while its `tool.result` (stored then, on its own) is written.
    None while the call runs."""
