"""The vocabulary of one turn on a model: what the engine hands the adapter, and what it gets back.

Nothing here knows the model layer; `run_turn` (in `_adapter`) turns these into its calls.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import JsonValue

from agentwatch.events import Payload, ToolProgress, ToolResult, Usage

__all__ = [
    "PendingCall",
    "RetryPolicy",
    "ToolAnswer",
    "ToolChecker",
    "ToolContext",
    "ToolRunner",
    "ToolSpec",
    "ToolWaits",
    "TurnInput",
    "TurnResult",
    "TurnSink",
]


class ToolContext:
    """What a running tool knows about its call, and how it reports progress."""

    __slots__ = ("_emit", "tool_call_id", "tool_name")

    def __init__(self, tool_call_id: str, tool_name: str, emit: Callable[[Payload], None]) -> None:
        self.tool_call_id = tool_call_id
        """The id that pairs the call with its result."""
        self.tool_name = tool_name
        """The tool's name."""
        self._emit = emit

    def progress(self, message: str, fraction: float | None = None) -> None:
        """Tell watchers what the tool is doing (an ephemeral `ToolProgress`; never stored, never blocks)."""
        self._emit(
            ToolProgress(tool_call_id=self.tool_call_id, tool_name=self.tool_name, message=message, fraction=fraction)
        )

    def __repr__(self) -> str:
        return f"ToolContext(tool_call_id={self.tool_call_id!r}, tool_name={self.tool_name!r})"


ToolRunner = Callable[[ToolContext, dict[str, Any]], Awaitable[JsonValue]]
"""Runs one call of a tool: gets the context and the arguments the model sent, returns text or JSON."""
ToolChecker = Callable[[ToolContext, dict[str, Any]], Awaitable[None]]
"""Decides whether a call could run, without running it: raises as its `ToolRunner` would, returns otherwise."""


class ToolWaits(Exception):
    """Raised by a tool's `run` when the call cannot go on until a person acts (a tool server that needs
    authorization): the turn pauses with a pending call of this `kind`, and an approving answer runs the call
    again."""

    def __init__(self, kind: Literal["oauth"], summary: str, detail: dict[str, JsonValue]) -> None:
        super().__init__(summary)
        self.kind: Literal["oauth"] = kind
        """What the call waits for: `oauth`, a sign-in."""
        self.summary = summary
        """One line saying what is needed."""
        self.detail = detail
        """Structured facts for the request (for `oauth`: `server`, `url`, `challenge`, `resource_metadata`)."""


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call during a turn."""

    name: str
    """The name the model sees."""
    description: str
    """What the tool does, for the model."""
    parameters: dict[str, JsonValue]
    """JSON schema of the arguments object."""
    run: ToolRunner
    """Runs a call. An exception it raises becomes a failed result the model sees (`ToolResult(status="error")`);
    the turn goes on."""
    requires_approval: bool = False
    """A person must approve each call before it runs: the turn pauses with a pending `approval` call."""
    check: ToolChecker | None = None
    """For a call a person is to approve: decides first whether it could run at all (its arguments, the
    policies), raising as `run` would. A call it refuses is refused at once, as a failed result the model can
    correct, and nobody is asked."""
    asks_user: bool = False
    """The call itself is a question (ask_user): the turn pauses with a pending `question` call and the answer
    becomes the call's result. `run` is never called for such a tool."""


@dataclass(frozen=True)
class ToolAnswer:
    """The answer to a call that paused the turn (or that a restart cut off)."""

    tool_call_id: str
    """The call it answers."""
    approved: bool | None = None
    """For approval calls: True runs the tool, False denies it. Set on any call, False denies it too."""
    message: str | None = None
    """The denial reason the model sees (when `approved` is False)."""
    value: JsonValue = None
    """For question calls: the person's answer, which becomes the tool result (when `approved` is None)."""


class TurnSink(Protocol):
    """Where a turn reports what happens; the engine implements it."""

    def commit(
        self, payloads: Sequence[Payload], messages: Sequence[JsonValue] = (), *, wait: bool = True
    ) -> Awaitable[object]:
        """Durable step: append these durable payloads AND these new model-layer messages (opaque JSON, in order)
        in one atomic write. `payloads` may be empty when only messages are new (a request that failed before
        any response). Commits are applied in the order they are made. An `async def`, or a function that takes
        the write and returns an awaitable of it (a future: the adapter then awaits it without a task of its
        own).

        - `wait=True` (a waiting commit): returns only once this commit and every earlier one are durable. If an
          earlier pipelined commit failed, it writes nothing and raises that failure.
        - `wait=False` (a pipelined commit, for a step that no external effect depends on): may return before
          the write is durable, and must take the write before it first suspends (the adapter does not shield
          it from a cancellation). The write still lands after every earlier commit and before every later one;
          if it fails, no later commit is written and the next waiting commit raises the failure. Payloads
          streamed after it reach watchers after its payloads, as if it had been waited for.
        - A waiting commit with no payloads and no messages writes nothing: it only waits for the earlier ones
          (raising as above).

        A sink may treat every commit as a waiting one. `run_turn` pipelines only the commit that opens a model
        request; the commit of a response (with its tool calls) waits, so no tool runs before everything up
        to its call is durable, and `run_turn` returns or raises only once every commit it made is over."""
        ...

    def stream(self, payload: Payload) -> None:
        """Ephemeral payload (`ContentDelta`, `ToolProgress`): published live, never stored; must not block."""
        ...


@dataclass(frozen=True)
class RetryPolicy:
    """How a failed model request is tried again: on a rate limit (429), a server error (5xx), an overload, a
    timeout or a connection that fails. Each retry is a durable `runtime.retry` on the session, committed before
    its wait; the vendor SDK's own retries are turned off, so these are the only ones.

    The wait before retry `n` (1 for the first) is `first_wait_seconds * 2 ** (n - 1)`, or what the provider
    asked for (`Retry-After`) when longer, never more than `max_wait_seconds`.
    """

    attempts: int = 3
    """Requests sent to one model before it counts as failed (1 = no retry)."""
    first_wait_seconds: float = 1.0
    """The wait before the first retry."""
    max_wait_seconds: float = 20.0
    """The longest wait before a retry."""

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, not {self.attempts}")
        if not (self.first_wait_seconds >= 0 and self.max_wait_seconds >= 0):
            raise ValueError("retry waits must be zero or more seconds")

    def wait(self, retry: int, asked: float | None = None) -> float:
        """The seconds to wait before retry number `retry` (1 for the first), given what the provider asked."""
        wait: float = self.first_wait_seconds * 2.0 ** (retry - 1)
        if asked is not None:
            wait = max(wait, asked)
        return min(wait, self.max_wait_seconds)


@dataclass(frozen=True)
class TurnInput:
    """One run of a turn: the model, the conversation so far, and what to add to it."""

    model: str
    """The model ref (`openai:gpt-4o`, `openai-chat:llama3`, `anthropic:...`, `<provider>:<model>`,
    `scripted:<name>`), or an ordered fallback chain of refs separated by commas (`openai:gpt-4o, anthropic:...`):
    when a model fails after its retries, the next one takes over (`model.reroute`)."""
    instructions: str
    """The system prompt, exactly."""
    history: Sequence[JsonValue]
    """The conversation's stored messages so far: every `messages` item committed earlier, in order."""
    prompt: str | None
    """User text to add; None continues from the history (after answers, or after a restart)."""
    tools: Sequence[ToolSpec] = ()
    """The tools the model may call."""
    answers: Sequence[ToolAnswer] = ()
    """Answers to the calls that paused the previous run of this turn."""
    results: Sequence[ToolResult] = ()
    """The stored `tool.result`s of calls the history leaves open (calls that ended before the turn was cut off,
    beside calls that were still running): the model gets them back as they were, and the calls are neither run
    nor recorded again. Only the open calls with neither a result nor an answer are `interrupted`."""
    max_requests: int = 50
    """Model requests this run may make before it fails."""
    conversation_id: str | None = None
    """The stored conversation `history` is (its messages never change once written). When given, the
    `ModelResolver` keeps the messages it parsed for it between turns and parses only those added since, so a
    turn's cost does not grow with the conversation's length."""


@dataclass(frozen=True)
class PendingCall:
    """A tool call the turn paused on: it waits for a person's approval or answer."""

    tool_call_id: str
    """The call; answer it with `ToolAnswer(tool_call_id, ...)`."""
    tool_name: str
    """The tool the model called."""
    input: dict[str, JsonValue]
    """The arguments the model sent."""
    kind: Literal["approval", "question", "oauth"]
    """`approval` for a `requires_approval` tool, `question` for an `asks_user` tool, `oauth` for a call whose
    tool raised `ToolWaits` (a tool server that needs authorization)."""
    question: str | None = None
    """For a question: the `question` argument when the model sent one as text."""
    detail: dict[str, JsonValue] | None = None
    """For `oauth`: the `ToolWaits` summary and detail (`summary`, `server`, `url`, `challenge`, ...)."""


@dataclass(frozen=True)
class TurnResult:
    """How a run of a turn ended."""

    outcome: Literal["completed", "paused", "failed"]
    """`completed` when the model gave its final answer, `paused` on pending calls, `failed` on an error."""
    output: str | None
    """The final assistant text (`completed` only)."""
    usage: Usage
    """Tokens and cost of every model request of this run."""
    pending: tuple[PendingCall, ...] = ()
    """For `paused`: the calls that wait on a person, in the order the model made them."""
    error: str | None = None
    """For `failed`: what went wrong."""
