"""`ask_user`: an agent asks a person (or first its parent agent) a question; the answer is the tool's result.

With `options` the question is a choice (request kind `choice`): the request is stored with its options (and
whether several may be chosen) before `request.opened` shows them, and an answer must name one of them (a
list of them with `multiple`); anything else is refused (`check_choice`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from pydantic import Field, JsonValue, RootModel

from agentwatch.errors import InvalidArgument
from agentwatch.runtime.services import Runtime
from agentwatch.tools import MAX_LIST_ITEMS, MAX_TEXT_CHARS, Args, BoundedJson, Caller, Text, Tool, typed_tool

__all__ = [
    "AskArgs",
    "Choices",
    "UserAnswer",
    "ask_user_tool",
    "check_answer",
    "check_approval",
    "check_choice",
    "choices_of",
    "read_approval",
]


class AskArgs(Args):
    """Arguments of `ask_user`."""

    question: Text = Field(description="The question, complete enough to answer without context.")
    options: list[Text] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_LIST_ITEMS,
        description="Answers to choose from, when there are a few (at most 50); the answer is one of them.",
    )
    multiple: bool = Field(
        default=False, description="With options: several may be chosen (the answer is a list of them)."
    )


class UserAnswer(RootModel[BoundedJson]):
    """The answer a person (or the parent agent) gave: text for a question, the option(s) chosen for a choice."""


Choices = tuple[list[str], bool]
"""The options of a choice and whether several may be chosen."""


def choices_of(args: Mapping[str, JsonValue]) -> Choices | None:
    """The options an `ask_user` call offers (as the model sent them: non-text, blank and repeated ones are
    left out, at most 50, each at most 10,000 characters), or None for a plain question."""
    raw = args.get("options")
    if not isinstance(raw, list):
        return None
    options: list[str] = []
    for item in raw:
        if isinstance(item, str) and item.strip() and item not in options and len(item) <= MAX_TEXT_CHARS:
            options.append(item)
    if not options:
        return None
    return options[:MAX_LIST_ITEMS], args.get("multiple") is True


def check_choice(options: Sequence[str], multiple: bool, answer: JsonValue) -> JsonValue:
    """`answer` when it names one of `options` (a non-empty list of distinct ones with `multiple`); an
    `InvalidArgument` that lists the options otherwise."""
    # Numbered for the CLI's `--choice N`; the answer itself is the option's text.
    listed = "; ".join(f"{n}. {o!r}" for n, o in enumerate(options, 1)) + " (each by its text, not its number)"
    if multiple:
        given = answer if isinstance(answer, list) else [answer]
        chosen = [c for c in given if isinstance(c, str) and c in options]
        if chosen and len(chosen) == len(given) == len(set(chosen)):
            return list[JsonValue](chosen)
        raise InvalidArgument(f"the answer must be a list of distinct options among: {listed}", fields=["answer"])
    if isinstance(answer, str) and answer in options:
        return answer
    raise InvalidArgument(f"the answer must be one of the options: {listed}", fields=["answer"])


_APPROVING: frozenset[str] = frozenset({"yes", "y", "approve", "approved", "allow", "ok", "true"})
_DENYING: frozenset[str] = frozenset({"no", "n", "deny", "denied", "reject", "rejected", "false"})


def read_approval(answer: JsonValue) -> tuple[bool, str | None] | None:
    """The verdict an approval's answer gives, and its note for the agent: from `true`/`false`,
    `{"approved": true|false, "message": "..."}` or a yes/no word (`yes`, `approve`, `no`, `deny`, ...); None for
    anything else, which gives no verdict."""
    if isinstance(answer, bool):
        return answer, None
    if isinstance(answer, str):
        word = answer.strip().lower()
        return (True, None) if word in _APPROVING else (False, None) if word in _DENYING else None
    if isinstance(answer, dict) and isinstance(answer.get("approved"), bool) and set(answer) <= {"approved", "message"}:
        message = answer.get("message")
        if message is None or isinstance(message, str):
            return bool(answer["approved"]), message
    return None


def check_approval(answer: JsonValue) -> JsonValue:
    """`answer` when it gives an approval's verdict (see `read_approval`); an `InvalidArgument` saying what to
    send otherwise: a verdict is never guessed (once, `{"approved": "false"}` approved the call)."""
    if read_approval(answer) is None:
        raise InvalidArgument(
            'an approval is answered with true or false, {"approved": true|false, "message": "a note"}, or yes/no; '
            f"got {json.dumps(answer, ensure_ascii=False)[:200]}",
            fields=["answer"],
        )
    return answer


def check_answer(answer: JsonValue) -> JsonValue:
    """`answer` when it says something (a question's reply, a sign-in's token); an `InvalidArgument` for one
    that says nothing (null, blank text, an empty list or object), which would end the wait with nothing."""
    empty = answer is None or (isinstance(answer, str | list | dict) and not answer)
    if empty or (isinstance(answer, str) and not answer.strip()):
        raise InvalidArgument("the answer is empty; give the reply itself", fields=["answer"])
    return answer


async def _outside_a_turn(engine: Runtime, caller: Caller, args: AskArgs) -> UserAnswer:
    raise InvalidArgument("ask_user opens a request from inside an agent's turn; only an agent can call it")


def ask_user_tool() -> Tool:
    """The `ask_user` tool: the turn pauses on a request (word `needs_you`) until `agent_answer`."""
    return typed_tool(
        "ask_user",
        "Ask the user a question and wait for the answer. Use it when you cannot go on without a decision "
        "or a fact only they have. Give `options` when the answer is one of a few (and `multiple` when "
        "several may be chosen): the answer is then the option(s) chosen.",
        _outside_a_turn,
        args=AskArgs,
        answer=UserAnswer,
        asks_user=True,
    )
