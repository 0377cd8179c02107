"""The model-layer side of a `ScriptedModel`: a pydantic-ai `FunctionModel` that plays its script.

Imported the first time a scripted model is resolved, so defining scripts never loads the model layer.

A request must not cost more as the conversation grows, yet a script is told how many responses came before
(its step), the last prompt and the usage numbers count the whole context. So each conversation's messages
are read once: a `_Reading` keeps, after each message, the running totals a request needs. The model layer
hands every request the conversation as a list holding the very message objects of the previous request (and,
when the models adapter keeps a conversation's parsed history between turns, of the previous turns), so a
request reads only the messages it has not seen. A conversation is recognised by its first message object.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from pydantic_ai.exceptions import ModelHTTPError
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
from pydantic_ai.models import ModelRequestParameters, StreamedResponse
from pydantic_ai.models.function import AgentInfo, DeltaThinkingPart, DeltaToolCall, FunctionModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import RequestUsage

from agentwatch.runtime.models._outcomes import tool_status
from agentwatch.runtime.models._visible import stream_through
from agentwatch.runtime.models.scripted import (
    CallTool,
    Fail,
    Reply,
    ScriptContext,
    ScriptedModel,
    ScriptedModelError,
    Think,
    ToolOutcome,
    TranscriptEntry,
    _chunks,
    _tokens,
)

__all__ = ["ScriptPlayer"]

READINGS_KEPT = 64
"""How many conversations a scripted model keeps running totals for (the least recently used are dropped and
read again in full if they come back)."""


class ScriptPlayer(FunctionModel):
    """Plays a `ScriptedModel`. FunctionModel counts every request as 50 input tokens; a scripted model counts
    its context instead, so context-fill numbers grow over a conversation as they do with a provider. (Its
    `request_stream`, `_request_stream` below, is set after the class: see `stream_through`.)"""

    def __init__(self, script: ScriptedModel) -> None:
        super().__init__(stream_function=self._stream, model_name=script.name)
        self._script = script
        # Whether the step a request plays calls a tool, by the request's message list (its `id`), from the
        # moment the step is known until the request's stream ends.
        self._calls: dict[int, bool] = {}

    async def _stream(
        self, messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | dict[int, DeltaThinkingPart] | dict[int, DeltaToolCall]]:
        script = self._script
        context = _context(_read(script, messages), messages, info)
        script._requests.append(context)
        items = await script._step(context)
        self._calls[id(messages)] = any(isinstance(item, CallTool) for item in items)
        delay = script.chunk_delay
        index = 0  # each thinking block and tool call is its own part
        calls = 0
        for item in items:
            if isinstance(item, Think):
                for chunk in _chunks(item.text):
                    yield {index: DeltaThinkingPart(content=chunk)}
                    if delay:
                        await asyncio.sleep(delay)
                index += 1
            elif isinstance(item, Reply):
                for chunk in _chunks(item.text):
                    yield chunk
                    if delay:
                        await asyncio.sleep(delay)
            elif isinstance(item, CallTool):
                call_id = item.id or f"call_{context.request_index}_{calls}"
                calls += 1
                yield {
                    index: DeltaToolCall(name=item.name, json_args=json.dumps(dict(item.args)), tool_call_id=call_id)
                }
                if delay:
                    await asyncio.sleep(delay)
                index += 1
            elif isinstance(item, Fail):
                if item.status is not None:
                    raise ModelHTTPError(item.status, self.model_name, {"message": item.message})
                raise ScriptedModelError(item.message)
            else:
                await asyncio.Event().wait()  # Hang: only cancellation ends it


@asynccontextmanager
async def _request_stream(
    self: ScriptPlayer,
    messages: list[ModelMessage],
    model_settings: ModelSettings | None,
    model_request_parameters: ModelRequestParameters,
    run_context: RunContext[Any] | None = None,
) -> AsyncIterator[StreamedResponse]:
    """`ScriptPlayer.request_stream`: `FunctionModel`'s stream, with the usage and finish reason a provider gives."""
    try:
        async with FunctionModel.request_stream(
            self, messages, model_settings, model_request_parameters, run_context
        ) as stream:
            # Opening the stream read the script's first item, so the step is chosen and the conversation read.
            reading = _read(self._script, messages)
            stream._usage = RequestUsage(input_tokens=12 + _tokens(reading.instructions[-1] or "") + reading.tokens[-1])
            yield stream
            # Providers say why they stopped; FunctionModel leaves it unset.
            stream.finish_reason = "tool_call" if self._calls.get(id(messages)) else "stop"
    finally:
        self._calls.pop(id(messages), None)


# It opens FunctionModel's stream, which brings pydantic-ai's boundary wrappers along itself.
stream_through(ScriptPlayer, _request_stream)


class _Reading:
    """Running totals over a conversation's messages, one entry per message read (the first entry is before
    any message)."""

    __slots__ = ("instructions", "messages", "prompts", "read", "responses", "tokens")

    def __init__(self) -> None:
        self.messages: list[ModelMessage] = []
        """The messages read, in order. Only ever appended to; a tail read again is a new list, so a
        `ScriptContext` can keep `(messages, count)` for its transcript."""
        self.tokens = [0]
        """Tokens of the transcript up to each message."""
        self.responses = [0]
        """Model responses up to each message."""
        self.prompts: list[str | None] = [None]
        """The last user prompt up to each message."""
        self.read = 0
        """Messages read in all (a tail read again counts again): what a request costs."""
        self.instructions: list[str | None] = [None]
        """The instructions of the last request that has any, up to each message."""

    def update(self, messages: Sequence[ModelMessage]) -> None:
        """Catch up with `messages`: keep the prefix already read (the same objects), read the rest."""
        known = self.messages
        same = min(len(known), len(messages))
        # The model layer may rebuild a conversation's last messages (merging trailing requests, say); the
        # rest of it is the very objects of the previous request.
        while same and messages[same - 1] is not known[same - 1]:
            same -= 1
        if same < len(known):
            self.messages = known[:same]
            del self.tokens[same + 1 :], self.responses[same + 1 :], self.prompts[same + 1 :]
            del self.instructions[same + 1 :]
        for message in messages[same:]:
            self._add(message)

    def _add(self, message: ModelMessage) -> None:
        tokens, responses, prompt = self.tokens[-1], self.responses[-1], self.prompts[-1]
        for entry in _entries(message):
            tokens += _tokens(entry.text)
            if entry.kind == "prompt":
                prompt = entry.text
        instructions = self.instructions[-1]
        if isinstance(message, ModelResponse):
            responses += 1
        elif message.instructions:
            instructions = message.instructions
        self.messages.append(message)
        self.instructions.append(instructions)
        self.tokens.append(tokens)
        self.responses.append(responses)
        self.prompts.append(prompt)
        self.read += 1


def _read(script: ScriptedModel, messages: Sequence[ModelMessage]) -> _Reading:
    """The script's reading of this conversation, caught up with `messages`."""
    readings: Any = script._readings
    key = id(messages[0]) if messages else 0
    reading: _Reading | None = readings.get(key)
    # The reading holds its first message, so its id cannot be reused by another conversation meanwhile.
    if reading is None or (messages and (not reading.messages or reading.messages[0] is not messages[0])):
        reading = _Reading()
    readings[key] = reading
    readings.move_to_end(key)
    while len(readings) > READINGS_KEPT:
        readings.popitem(last=False)
    reading.update(messages)
    return reading


def _context(reading: _Reading, messages: Sequence[ModelMessage], info: AgentInfo) -> ScriptContext:
    held, count = reading.messages, len(messages)
    return ScriptContext(
        request_index=reading.responses[-1],
        prompt=reading.prompts[-1],
        tool_results=_last_results(messages),
        instructions=info.instructions,
        tools=tuple(t.name for t in info.function_tools),
        _read_transcript=lambda: tuple(entry for message in held[:count] for entry in _entries(message)),
    )


def _last_results(messages: Sequence[ModelMessage]) -> tuple[ToolOutcome, ...]:
    """The tool results since the model last said or called anything (a walk back over the last few
    messages)."""
    results: list[ToolOutcome] = []
    for message in reversed(messages):
        if isinstance(message, ModelResponse):
            if any(isinstance(part, ThinkingPart | TextPart | ToolCallPart) for part in message.parts):
                break
            continue
        found = [
            ToolOutcome(
                part.tool_call_id,
                part.tool_name,
                part.model_response_str(wrap_if_error=False),
                tool_status(part.outcome),
            )
            for part in message.parts
            if isinstance(part, ToolReturnPart)
        ]
        results[:0] = found
    return tuple(results)


def _entries(message: ModelMessage) -> list[TranscriptEntry]:
    entries: list[TranscriptEntry] = []
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
