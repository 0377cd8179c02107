"""`ask_user`: an agent asks a person (or first its parent agent) a question; the answer is the tool's result."""

from __future__ import annotations

from pydantic import Field, RootModel

from agentwatch.errors import InvalidArgument
from agentwatch.runtime.services import Runtime
from agentwatch.tools import MAX_LIST_ITEMS, Args, BoundedJson, Caller, Text, Tool, typed_tool

__all__ = ["AskArgs", "UserAnswer", "ask_user_tool"]


class AskArgs(Args):
    """Arguments of `ask_user`."""

    question: Text = Field(description="The question, complete enough to answer without context.")
    options: list[Text] | None = Field(
        None, max_length=MAX_LIST_ITEMS, description="Answers to choose from, when there are a few."
    )


class UserAnswer(RootModel[BoundedJson]):
    """The answer a person (or the parent agent) gave: text for a question."""


async def _outside_a_turn(engine: Runtime, caller: Caller, args: AskArgs) -> UserAnswer:
    raise InvalidArgument("ask_user opens a request from inside an agent's turn; only an agent can call it")


def ask_user_tool() -> Tool:
    """The `ask_user` tool: the turn pauses on a request (word `needs_you`) until `agent_answer`."""
    return typed_tool(
        "ask_user",
        "Ask the user a question and wait for the answer. Use it when you cannot go on without a decision "
        "or a fact only they have.",
        _outside_a_turn,
        args=AskArgs,
        answer=UserAnswer,
        asks_user=True,
    )
