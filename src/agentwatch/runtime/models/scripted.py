"""A scripted model: a test double that plays a script instead of calling a provider.

Tests and the offline demo use it through the model ref `scripted:<name>`. Each model request plays one
step of the script; a step is one item or a list of items, streamed in the order given:

```python
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel, Think, register_scripted_model

coder = ScriptedModel(
    steps=[
        Think("The user wants the file."),          # request 0: thinking, then a tool call
        CallTool("read_file", {"path": "a.py"}),
        Reply("It prints hello."),                   # request 1: the final answer
    ]
)
register_scripted_model("coder", coder)              # now `scripted:coder` resolves to it
```

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
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from pydantic import JsonValue
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.function import AgentInfo, DeltaThinkingPart, DeltaToolCall, FunctionModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import RequestUsage

from agentwatch.events import ToolStatus
from agentwatch.runtime.models._outcomes import tool_status

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
    """The model request fails with `ScriptedModelError(message)`, as a provider error would."""

    message: str = "the scripted model failed"
    """The error message."""


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


@dataclass(frozen=True)
class ScriptContext:
    """What a scripted model knows when it answers a request."""

    request_index: int
    """How many model responses the conversation holds before this request (0 for the first ever)."""
    prompt: str | None
    """The last user prompt of the conversation."""
    tool_results: tuple[ToolOutcome, ...]
    """The results of the tool calls of the previous response (empty when the request carries none)."""
    transcript: tuple[TranscriptEntry, ...]
    """The whole conversation, oldest first."""
    instructions: str | None
    """The system prompt of the request."""
    tools: tuple[str, ...]
    """The names of the tools the model may call."""


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
        self._requests: list[ScriptContext] = []

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
        """Every request this model answered, oldest first (for assertions in tests)."""
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

    async def _stream(
        self, messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | dict[int, DeltaThinkingPart] | dict[int, DeltaToolCall]]:
        context = _context(messages, info)
        self._requests.append(context)
        items = await self._step(context)
        index = 0  # each thinking block and tool call is its own part
        calls = 0
        for item in items:
            if isinstance(item, Think):
                for chunk in _chunks(item.text):
                    yield {index: DeltaThinkingPart(content=chunk)}
                    await self._pause()
                index += 1
            elif isinstance(item, Reply):
                for chunk in _chunks(item.text):
                    yield chunk
                    await self._pause()
            elif isinstance(item, CallTool):
                call_id = item.id or f"call_{context.request_index}_{calls}"
                calls += 1
                yield {
                    index: DeltaToolCall(name=item.name, json_args=json.dumps(dict(item.args)), tool_call_id=call_id)
                }
                await self._pause()
                index += 1
            elif isinstance(item, Fail):
                raise ScriptedModelError(item.message)
            else:
                await asyncio.Event().wait()  # Hang: only cancellation ends it

    async def _pause(self) -> None:
        if self.chunk_delay:
            await asyncio.sleep(self.chunk_delay)

    def model(self) -> Model:
        """The model-layer object that plays this script (for the models adapter)."""
        return _ScriptedFunctionModel(stream_function=self._stream, model_name=self.name)

    def __repr__(self) -> str:
        source = "function" if self._function is not None else f"{len(self._steps)} steps"
        return f"ScriptedModel({source}, name={self.name!r})"


class _ScriptedFunctionModel(FunctionModel):
    """FunctionModel counts every request as 50 input tokens; a scripted model counts its context instead, so
    context-fill numbers grow over a conversation as they do with a provider."""

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        async with super().request_stream(messages, model_settings, model_request_parameters, run_context) as stream:
            instructions = next(
                (m.instructions for m in reversed(messages) if isinstance(m, ModelRequest) and m.instructions), None
            )
            stream._usage = RequestUsage(input_tokens=_input_tokens(messages, instructions))
            yield stream
            # Providers say why they stopped; FunctionModel leaves it unset.
            calls = any(isinstance(part, ToolCallPart) for part in stream.get().parts)
            stream.finish_reason = "tool_call" if calls else "stop"


_WORD = re.compile(r"\s*\S+\s*")


def _chunks(text: str) -> list[str]:
    """The text cut into words (each with its surrounding spaces), so it streams in several deltas."""
    return _WORD.findall(text) or ([text] if text else [])


def _tokens(text: str) -> int:
    return max(1, round(len(text) / 4)) if text else 0


def _input_tokens(messages: Sequence[ModelMessage], instructions: str | None) -> int:
    # A flat overhead for the chat template plus about four characters per token, as providers count.
    return 12 + _tokens(instructions or "") + sum(_tokens(entry.text) for entry in _transcript(messages))


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


def _transcript(messages: Sequence[ModelMessage]) -> list[TranscriptEntry]:
    entries: list[TranscriptEntry] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            for request_part in message.parts:
                if isinstance(request_part, SystemPromptPart):
                    entries.append(TranscriptEntry("instructions", request_part.content))
                elif isinstance(request_part, UserPromptPart):
                    content = request_part.content
                    text = content if isinstance(content, str) else " ".join(c for c in content if isinstance(c, str))
                    entries.append(TranscriptEntry("prompt", text))
                elif isinstance(request_part, ToolReturnPart):
                    entries.append(
                        TranscriptEntry(
                            "tool_result",
                            request_part.model_response_str(wrap_if_error=False),
                            tool_name=request_part.tool_name,
                            tool_call_id=request_part.tool_call_id,
                            status=tool_status(request_part.outcome),
                        )
                    )
        else:
            for response_part in message.parts:
                if isinstance(response_part, ThinkingPart):
                    entries.append(TranscriptEntry("thinking", response_part.content))
                elif isinstance(response_part, TextPart):
                    entries.append(TranscriptEntry("text", response_part.content))
                elif isinstance(response_part, ToolCallPart):
                    entries.append(
                        TranscriptEntry(
                            "tool_call",
                            response_part.args_as_json_str(),
                            tool_name=response_part.tool_name,
                            tool_call_id=response_part.tool_call_id,
                        )
                    )
    return entries


def _context(messages: Sequence[ModelMessage], info: AgentInfo) -> ScriptContext:
    transcript = _transcript(messages)
    responses = sum(isinstance(m, ModelResponse) for m in messages)
    prompt = next((e.text for e in reversed(transcript) if e.kind == "prompt"), None)
    last_call = max((i for i, e in enumerate(transcript) if e.kind in ("tool_call", "text", "thinking")), default=-1)
    results = tuple(
        ToolOutcome(e.tool_call_id or "", e.tool_name or "", e.text, e.status or "ok")
        for e in transcript[last_call + 1 :]
        if e.kind == "tool_result"
    )
    return ScriptContext(
        request_index=responses,
        prompt=prompt,
        tool_results=results,
        transcript=tuple(transcript),
        instructions=info.instructions,
        tools=tuple(t.name for t in info.function_tools),
    )


_REGISTRY: dict[str, ScriptedModel] = {}


def register_scripted_model(name: str, model: ScriptedModel) -> None:
    """Make `scripted:<name>` resolve to `model` (replacing any model registered under that name)."""
    _REGISTRY[name] = model


def unregister_scripted_model(name: str) -> None:
    """Forget the model registered as `name` (no error when there is none)."""
    _REGISTRY.pop(name, None)


def registered_scripted_model(name: str) -> ScriptedModel | None:
    """The model registered as `name`, if any."""
    return _REGISTRY.get(name)
