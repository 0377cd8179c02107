"""A scripted model: a test double that plays a script instead of calling a provider.

Tests and the offline demo hand it to the engine, as pydantic-ai's `FunctionModel` is handed to an `Agent`,
and roles name it by the model ref `scripted:<name>`. Each model request plays one step of the script; a step
is one item or a list of items, streamed in the order given:

```python
from agentwatch import Engine
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel, Think

coder = ScriptedModel(
    steps=[
        Think("The user wants the file."),          # request 0: thinking, then a tool call
        CallTool("read_file", {"path": "a.py"}),
        Reply("It prints hello."),                   # request 1: the final answer
    ]
)
async with Engine.open(models={"coder": coder}) as engine:   # a role's `model: scripted:coder` plays it
    ...
```

`register_scripted_model("coder", coder)` makes the name known process-wide instead (older tests use it; an
engine's own `models=` come first).

A flat list is cut into requests after a `Reply` (the model's answer ends the request) and after a run of
`CallTool` items (the model waits for their results). To put anything else in one request, such as text
before a tool call or two answers, give the step as a list: `[Reply("Let me look."), CallTool("ls")]`.

The step played is chosen by how many model responses the conversation already holds, so a conversation
loaded back from storage (in a new process, say) goes on with the right step. A function can decide instead:

```python
def answer(ctx: ScriptContext) -> ScriptStep:
    if not ctx.tool_results:
        return CallTool("get_weather", {"city": "Paris"})
    return Reply(f"It is {ctx.tool_results[0].output}.")

ScriptedModel(function=answer)
```

Text and thinking stream word by word (so watchers see deltas), with usage numbers estimated from the text
the way a provider would count it. `Fail("...")` makes the request fail with `ScriptedModelError`; `Hang()`
makes it wait forever (until the turn is cancelled); items before them in the step stream first.

A request costs the same at the thousandth turn of a conversation as at the tenth: the model reads each
message of a conversation once and keeps running totals (`ScriptContext.transcript` is built only when a
script function asks for it).
"""

from __future__ import annotations

import inspect
import re
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from pydantic import JsonValue

from agentwatch.events import ToolStatus

if TYPE_CHECKING:
    from pydantic_ai.models import Model

_REQUESTS_KEPT = 100
"""Requests a scripted model remembers for `ScriptedModel.requests` (each holds its conversation's messages, so
a model serving many sessions for a long time must not keep them all)."""

__all__ = [
    "CallTool",
    "Fail",
    "Hang",
    "Reply",
    "ScriptContext",
    "ScriptItem",
    "ScriptStep",
    "ScriptedModel",
    "ScriptedModelError",
    "Think",
    "ToolOutcome",
    "TranscriptEntry",
    "register_scripted_model",
    "registered_scripted_model",
    "unregister_scripted_model",
]


@dataclass(frozen=True)
class Think:
    """The model reasons (streamed as thinking deltas, completed as a `ThinkingBlock`)."""

    text: str
    """The reasoning text."""


@dataclass(frozen=True)
class Reply:
    """The model writes text (streamed as text deltas, completed as an `AssistantMessage`)."""

    text: str
    """The text."""


@dataclass(frozen=True)
class CallTool:
    """The model calls a tool."""

    name: str
    """The tool's name."""
    args: Mapping[str, JsonValue] = field(default_factory=dict)
    """The arguments."""
    id: str | None = None
    """The tool call id; by default `call_<request>_<n>`, so runs are reproducible."""


@dataclass(frozen=True)
class Fail:
    """The model request fails with `ScriptedModelError(message)`, as a provider error would; with `status`, as a
    provider's HTTP error with that status does (a 429 or 5xx before anything streamed is retried, and a
    fallback chain moves on when the model keeps failing)."""

    message: str = "the scripted model failed"
    """The error message."""
    status: int | None = None
    """The HTTP status the provider would have answered with; None for a failure of the script's own."""


@dataclass(frozen=True)
class Hang:
    """The model request never finishes: it waits until the turn is cancelled."""


ScriptItem: TypeAlias = Think | Reply | CallTool | Fail | Hang
"""One thing the model does within a request."""

ScriptStep: TypeAlias = ScriptItem | Sequence[ScriptItem]
"""What the model does in one request: one item, or several in order."""


class ScriptedModelError(Exception):
    """Raised by a scripted model request: a `Fail` step, or a script that has no step for the request."""


@dataclass(frozen=True)
class ToolOutcome:
    """The result of a tool call, as the model was given it."""

    tool_call_id: str
    """The call."""
    name: str
    """The tool's name."""
    output: str
    """What the model was given back, as text."""
    status: ToolStatus
    """`ok`, `error`, `denied` or `interrupted`."""


@dataclass(frozen=True)
class TranscriptEntry:
    """One item of the conversation as the model sees it."""

    kind: Literal["instructions", "prompt", "thinking", "text", "tool_call", "tool_result"]
    """What it is."""
    text: str
    """Its text; for a tool call, the arguments as JSON."""
    tool_name: str | None = None
    """For tool calls and results: the tool."""
    tool_call_id: str | None = None
    """For tool calls and results: the call."""
    status: ToolStatus | None = None
    """For tool results: how the call ended."""


@dataclass(frozen=True, eq=False)
class ScriptContext:
    """What a scripted model knows when it answers a request."""

    request_index: int
    """How many model responses the conversation holds before this request (0 for the first ever)."""
    prompt: str | None
    """The last user prompt of the conversation."""
    tool_results: tuple[ToolOutcome, ...]
    """The results of the tool calls of the previous response (empty when the request carries none)."""
    instructions: str | None
    """The system prompt of the request."""
    tools: tuple[str, ...]
    """The names of the tools the model may call."""
    _read_transcript: Callable[[], tuple[TranscriptEntry, ...]] = field(repr=False)
    """Builds `transcript` (a walk over the whole conversation, so only done when asked for)."""

    @cached_property
    def transcript(self) -> tuple[TranscriptEntry, ...]:
        """The whole conversation, oldest first."""
        return self._read_transcript()

    def _key(self) -> tuple[object, ...]:
        return (self.request_index, self.prompt, self.tool_results, self.transcript, self.instructions, self.tools)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ScriptContext):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


ScriptFunction: TypeAlias = Callable[[ScriptContext], ScriptStep | Awaitable[ScriptStep]]


class ScriptedModel:
    """A model that plays `steps` (or asks `function`), one step per model request; see the module docs."""

    def __init__(
        self,
        steps: Sequence[ScriptStep] = (),
        *,
        function: ScriptFunction | None = None,
        chunk_delay: float = 0.0,
        name: str = "scripted",
    ) -> None:
        """`steps` or `function` says what to do; `chunk_delay` seconds pass between streamed chunks; `name` is
        the model name the responses carry."""
        if function is not None and steps:
            raise ValueError("give a ScriptedModel either steps or a function, not both")
        self._steps = _group(steps)
        self._function = function
        self.chunk_delay = chunk_delay
        """Seconds between streamed chunks (0 streams as fast as the consumer reads)."""
        self.name = name
        """The model name the responses carry."""
        self._requests: deque[ScriptContext] = deque(maxlen=_REQUESTS_KEPT)
        self._model: Model | None = None
        # What each recent conversation's messages add up to, kept by the model layer's player between requests
        # (keyed by the identity of the conversation's first message; see `_scripted_play`).
        self._readings: OrderedDict[int, Any] = OrderedDict()

    @classmethod
    def replying(cls, *texts: str) -> ScriptedModel:
        """A model that answers each request with the next text."""
        return cls(steps=[Reply(text) for text in texts])

    @classmethod
    def hang(cls, *before: ScriptItem) -> ScriptedModel:
        """A model whose first request streams `before` and then never finishes (observer tests need one)."""
        return cls(steps=[[*before, Hang()]])

    @classmethod
    def failing(cls, message: str = "the scripted model failed", *before: ScriptItem) -> ScriptedModel:
        """A model whose first request streams `before` and then fails with `message`."""
        return cls(steps=[[*before, Fail(message)]])

    @property
    def requests(self) -> tuple[ScriptContext, ...]:
        """The requests this model answered, oldest first (for assertions in tests): the last 100 of them."""
        return tuple(self._requests)

    async def _step(self, context: ScriptContext) -> tuple[ScriptItem, ...]:
        if self._function is not None:
            step = self._function(context)
            if inspect.isawaitable(step):
                step = await step
            return _as_items(step)
        if context.request_index >= len(self._steps):
            raise ScriptedModelError(
                f"the script has {len(self._steps)} step(s) and request {context.request_index} asked for "
                f"step {context.request_index + 1}; add steps or use ScriptedModel(function=...)"
            )
        return self._steps[context.request_index]

    def model(self) -> Model:
        """The model-layer object that plays this script (for the models adapter)."""
        if self._model is None:
            from agentwatch.runtime.models._scripted_play import ScriptPlayer

            self._model = ScriptPlayer(self)
        return self._model

    def __repr__(self) -> str:
        source = "function" if self._function is not None else f"{len(self._steps)} steps"
        return f"ScriptedModel({source}, name={self.name!r})"


_WORD = re.compile(r"\s*\S+\s*")


def _chunks(text: str) -> list[str]:
    """The text cut into words (each with its surrounding spaces), so it streams in several deltas."""
    return _WORD.findall(text) or ([text] if text else [])


def _tokens(text: str) -> int:
    return max(1, round(len(text) / 4)) if text else 0


def _group(steps: Sequence[ScriptStep]) -> list[tuple[ScriptItem, ...]]:
    """Cut a flat script into requests (see the module docs); explicit lists stay one request each."""
    grouped: list[tuple[ScriptItem, ...]] = []
    current: list[ScriptItem] = []
    for step in steps:
        if not isinstance(step, Think | Reply | CallTool | Fail | Hang):
            if current:
                grouped.append(tuple(current))
                current = []
            grouped.append(_as_items(step))
            continue
        if current and isinstance(current[-1], CallTool) and not isinstance(step, CallTool):
            grouped.append(tuple(current))
            current = []
        current.append(step)
        if isinstance(step, Reply | Fail | Hang):
            grouped.append(tuple(current))
            current = []
    if current:
        grouped.append(tuple(current))
    return grouped


def _as_items(step: ScriptStep) -> tuple[ScriptItem, ...]:
    if isinstance(step, Think | Reply | CallTool | Fail | Hang):
        return (step,)
    items = tuple(step)
    if not items:
        raise ScriptedModelError("a script step must hold at least one item")
    return items


_REGISTRY: dict[str, ScriptedModel] = {}


def register_scripted_model(name: str, model: ScriptedModel) -> None:
    """Make `scripted:<name>` resolve to `model` in every engine of the process (replacing any model registered
    under that name). Prefer handing the model to the engine that plays it, `Engine.open(models={name:
    model})` (or `ModelResolver(models=...)`): nothing outlives the test, and it comes first."""
    _REGISTRY[name] = model


def unregister_scripted_model(name: str) -> None:
    """Forget the model registered as `name` (no error when there is none)."""
    _REGISTRY.pop(name, None)


def registered_scripted_model(name: str) -> ScriptedModel | None:
    """The model registered as `name`, if any."""
    return _REGISTRY.get(name)
