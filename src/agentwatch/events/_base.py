"""The envelope every event shares, and the small value types payloads are built from."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["BasePayload", "Origin", "OriginKind", "Usage"]


class BasePayload(BaseModel):
    """The typed fact an event carries; subclasses set `type` and say whether they are durable."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    durable: ClassVar[bool] = True
    """Durable payloads are committed to the store before anyone sees them; ephemeral ones (deltas,
    progress) live only in the live ring and add up to a durable event."""


OriginKind = Literal["person", "chat", "session", "run", "heartbeat", "hook", "cycle", "observer", "engine"]


class Origin(BaseModel):
    """Where something came from: who started a session, or who sent a message."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    kind: OriginKind
    """What sort of source it is."""
    ref: str | None = None
    """Its identifier: a session or run id, a chat key, or `observer:<type>` for an observer's report."""


class Usage(BaseModel):
    """Tokens and cost of one model request, or a sum of them."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    input_tokens: int = 0
    """Prompt tokens, cached ones included."""
    output_tokens: int = 0
    """Completion tokens, reasoning included."""
    cache_read_tokens: int = 0
    """Prompt tokens read from the provider's cache."""
    cache_write_tokens: int = 0
    """Prompt tokens written to the provider's cache."""
    reasoning_tokens: int = 0
    """Output tokens spent on reasoning."""
    requests: int = 0
    """Model requests counted in this sum."""
    cost_usd: float | None = None
    """Cost in US dollars, when the price is known."""

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        cost = (
            None
            if self.cost_usd is None and other.cost_usd is None
            else ((self.cost_usd or 0.0) + (other.cost_usd or 0.0))
        )
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            requests=self.requests + other.requests,
            cost_usd=cost,
        )
