"""`ask_user`: an agent asks a person (or first its parent agent) a question; the answer is the tool's result."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field, JsonValue

from agentwatch.errors import InvalidArgument
from agentwatch.runtime.tools.base import Args, Caller, Tool

if TYPE_CHECKING:
    from agentwatch.runtime.engine import Engine

__all__ = ["ask_user_tool"]


class AskArgs(Args):
    question: str = Field(min_length=1, description="The question, complete enough to answer without context.")
    options: list[str] | None = Field(None, description="Answers to choose from, when there are a few.")


async def _outside_a_turn(engine: Engine, caller: Caller, raw: dict[str, Any]) -> JsonValue:
    raise InvalidArgument("ask_user opens a request from inside an agent's turn; only an agent can call it")


def ask_user_tool() -> Tool:
    """The `ask_user` tool: the turn pauses on a request (word `needs_you`) until `agent_answer`."""
    schema = AskArgs.model_json_schema(by_alias=True)
    schema.pop("title", None)
    return Tool(
        "ask_user",
        "Ask the user a question and wait for the answer. Use it when you cannot go on without a decision "
        "or a fact only they have.",
        schema,
        _outside_a_turn,
        asks_user=True,
    )
