"""The conversation family: what was said, by whom, and the model requests that said it."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import JsonValue

from agentwatch.events._base import BasePayload, Origin, Usage

__all__ = [
    "AssistantMessage",
    "CompactionApplied",
    "CompletionFinished",
    "CompletionStarted",
    "ContentDelta",
    "ConversationCleared",
    "ThinkingBlock",
    "UserMessage",
]


class UserMessage(BasePayload):
    """Input that started or steered a turn: a person's prompt, a parent's task, an engine note, a report."""

    type: Literal["message.user"] = "message.user"
    text: str
    """The text as the model receives it."""
    origin: Origin | None = None
    """Who sent it; `observer:<type>` for an observer's report."""
    meta: bool = False
    """True for text the runtime added (engine notes, observer reports) rather than a person typed."""


class AssistantMessage(BasePayload):
    """A complete piece of text the model wrote (the text deltas add up to it)."""

    type: Literal["message.assistant"] = "message.assistant"
    text: str
    """The whole text."""


class ThinkingBlock(BasePayload):
    """A complete block of the model's reasoning (the thinking deltas add up to it)."""

    type: Literal["thinking.completed"] = "thinking.completed"
    text: str
    """The whole reasoning text, as the provider returned it."""


class CompletionStarted(BasePayload):
    """A model request was sent."""

    type: Literal["completion.started"] = "completion.started"
    request_index: int
    """0 for the first request of the turn, then 1, 2, ..."""
    model: str
    """The model ref the request went to."""


class CompletionFinished(BasePayload):
    """A model request finished, with what it cost and how full the context was."""

    type: Literal["completion.finished"] = "completion.finished"
    request_index: int
    """Which request of the turn this was."""
    model: str
    """The model that answered."""
    usage: Usage
    """Tokens and cost of this request."""
    finish_reason: str | None = None
    """Why the model stopped (`stop`, `tool_call`, `length`, ...)."""
    response: JsonValue = None
    """The model layer's full response, stored as an opaque document."""
    context_tokens: int | None = None
    """Tokens in the context window for this request (its input tokens)."""
    context_window: int | None = None
    """Size of the model's context window, when known."""
    window_source: Literal["observed", "registry"] | None = None
    """Where `context_window` came from: reported for the model, or the model registry."""


class ContentDelta(BasePayload):
    """A streamed piece of text or reasoning (ephemeral)."""

    durable: ClassVar[bool] = False

    type: Literal["content.delta"] = "content.delta"
    part: Literal["text", "thinking"]
    """Which kind of content the piece belongs to."""
    index: int
    """The part's index within the model response, to keep interleaved parts apart."""
    request_index: int = 0
    """The model request within the turn."""
    delta: str
    """The new characters."""


class CompactionApplied(BasePayload):
    """The conversation was compacted: old messages archived and replaced by a summary."""

    type: Literal["compaction.applied"] = "compaction.applied"
    archived_conversation_id: str
    """The conversation the old messages were set aside in."""
    pre_tokens: int | None = None
    """How many context tokens the last measurement before compaction said."""
    summary: str
    """The summary that replaces the archived messages."""


class ConversationCleared(BasePayload):
    """The conversation was cleared; the old one is archived and a new one begins."""

    type: Literal["conversation.cleared"] = "conversation.cleared"
    archived_conversation_id: str
    """The conversation that ended."""
