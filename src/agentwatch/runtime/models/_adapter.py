"""The models adapter: runs one turn on a model with tools, and reports every step as our own payloads.

This module (with `refs` and `scripted`) is the only place that knows pydantic-ai. A turn is a loop of its own
over pydantic-ai's model layer (a `Model`'s `request_stream`), not an agent run: pydantic-ai's agent graph cost
several times what the rest of a durable turn costs (about nine tenths of a bare `Agent.iter` turn on a scripted
model). The loop keeps the rules of an agent run that a stored conversation depends on (the message history made
valid for the provider before each request, the parts and outcomes of tool returns, a retry for a call whose
tool is unknown or whose arguments do not parse, the request limit), and commits at the points the engine relies
on:

1. before a model request: `CompletionStarted`, with the request message (and, when the request carries tool
   returns, a `ToolResult` per return: the results of the tools that just ran). This commit is pipelined
   (`wait=False`): nothing outside depends on it before the response's commit, which waits for it;
2. while it streams: `ContentDelta` for every piece of text and thinking (ephemeral);
3. when it ends: `ThinkingBlock` / `AssistantMessage` per part, `CompletionFinished`, a `ToolCall` per call, with
   the response message, all in one commit, waited for. Only then may the tools run (the turn-durability
   barrier).

So a request makes two commits: its start, pipelined, carrying the results of the tools that ran since the
previous response; and its response with the calls it makes, waited for. A call that ends while calls the
model made beside it still run commits its `ToolResult` at once, on its own: a crash before the others end
must not lose it (a turn continued after one gives the model back the results stored, and `interrupted` only
for the calls that have none). A cancelled or failed run commits what it recovered first; a run never leaves a
stored tool call without a result (calls that never finished get an `interrupted` return).

Importing this module loads pydantic-ai (about a second); `agentwatch.runtime.models.run_turn` imports it the
first time a turn runs. pydantic-ai's first-run banner is turned off: an engine's users own their terminal.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal, cast

import pydantic_ai
from pydantic import ConfigDict, JsonValue, TypeAdapter, ValidationError
from pydantic_ai import ModelMessagesTypeAdapter, ToolDenied
from pydantic_ai._genai_prices import fill_response_cost  # what an agent run does to price a response
from pydantic_ai.exceptions import UnexpectedModelBehavior, UsageLimitExceeded
from pydantic_ai.messages import (
    INTERRUPTED_TOOL_RETURN_CONTENT,
    InstructionPart,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponseStreamEvent,
    PartDeltaEvent,
    PartStartEvent,
    RetryFeedbackPart,
    RetryInfo,
    TextPart,
    TextPartDelta,
    ThinkingPart,
    ThinkingPartDelta,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
    repair_messages,
)
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.usage import RequestUsage

from agentwatch.errors import Invalid
from agentwatch.events import (
    AssistantMessage,
    CompletionFinished,
    CompletionStarted,
    ContentDelta,
    Payload,
    RuntimeNotice,
    ThinkingBlock,
    ToolCall,
    ToolProgress,
    ToolResult,
    ToolStatus,
    Usage,
)
from agentwatch.runtime.models._outcomes import tool_outcome, tool_status
from agentwatch.runtime.models._types import (
    PendingCall,
    ToolAnswer,
    ToolContext,
    ToolWaits,
    TurnInput,
    TurnResult,
    TurnSink,
)
from agentwatch.runtime.models._visible import ModelTrail, error_text
from agentwatch.runtime.models.refs import ModelResolver, split_chain

__all__ = ["run_turn"]

logger = logging.getLogger(__name__)

pydantic_ai.BANNER_ENABLED = False


def run_turn(
    turn: TurnInput, sink: TurnSink, *, models: ModelResolver | None = None
) -> Coroutine[Any, Any, TurnResult]:
    """Run one turn (or the continuation of one) on its model, committing every durable step through `sink`.

    Returns how the run ended: `completed` with the final text, `paused` with the calls that wait on a person,
    or `failed` with the error (a provider error, a model that raised, the request limit). A provider error worth
    retrying is retried first as the resolver's `RetryPolicy` says, each retry committed as `runtime.retry`; a
    chain of refs moves on to its next model with a `model.reroute`; a run its model(s) or its tool layer
    failed commits a `runtime.error` (for the models: each one tried, its provider and URL, as the error says). Raises
    `InvalidArgument` for a model ref that does not resolve and `Invalid` for a history that does not load,
    both before anything is committed. Cancelling the task commits what was recovered and re-raises.

    It returns the run's own coroutine rather than one that awaits it: every time the turn resumes (each
    streamed piece, each commit, each tool) the event loop passes through one frame less.
    """
    return _TurnRun(turn, sink).run(models)


def _history(turn: TurnInput, resolver: ModelResolver) -> list[ModelMessage]:
    """The turn's history as model messages: parsed once per message of a conversation, kept by the resolver."""
    if turn.conversation_id is None:
        return _load_history(turn.history)
    histories = resolver._histories
    parsed = histories.get(turn.conversation_id)
    stored = len(turn.history)
    if parsed is None or len(parsed) > stored:
        # Never seen (or the store holds fewer than were parsed: a write that failed) - read it all.
        parsed = _load_history(turn.history)
    elif len(parsed) < stored:
        # A conversation's stored messages never change, so only the ones added since need parsing.
        parsed = parsed + _load_history(turn.history[len(parsed) :])
    histories.put(turn.conversation_id, parsed)
    # The run gets its own list (the messages themselves are shared: the model layer does not change them).
    return list(parsed)


def _load_history(history: Sequence[JsonValue]) -> list[ModelMessage]:
    # Through JSON text, as the store has it: bytes and dates load the same way they would from disk.
    try:
        return ModelMessagesTypeAdapter.validate_json(json.dumps(list(history)))
    except (ValidationError, TypeError, ValueError) as exc:
        raise Invalid(f"the stored conversation history does not load as model messages: {exc}") from None


_MESSAGE_ADAPTER: TypeAdapter[ModelMessage] = TypeAdapter(
    ModelMessage, config=ConfigDict(defer_build=True, ser_json_bytes="base64", val_json_bytes="base64")
)
"""One message, with `ModelMessagesTypeAdapter`'s config (bytes as base64): the same JSON as an item of that
adapter's list, for about two thirds of the cost (messages are dumped one at a time, as each is committed)."""


def _dump(messages: Sequence[ModelMessage]) -> list[JsonValue]:
    return [_dump_one(message) for message in messages]


def _dump_one(message: ModelMessage) -> JsonValue:
    return cast(JsonValue, _MESSAGE_ADAPTER.dump_python(message, mode="json"))


def _usage(usage: RequestUsage) -> Usage:
    return Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        reasoning_tokens=usage.output_reasoning_tokens,
        requests=1,
        cost_usd=float(usage.cost) if usage.cost is not None else None,
    )


_error_text = error_text


def _open_calls(messages: Sequence[ModelMessage]) -> list[ToolCallPart]:
    """The tool calls of the last response that no later request answers."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, ModelResponse):
            answered = {
                part.tool_call_id
                for later in messages[index + 1 :]
                if isinstance(later, ModelRequest)
                for part in later.parts
                if isinstance(part, ToolReturnPart)
            }
            return [call for call in message.tool_calls if call.tool_call_id not in answered]
    return []


def _interrupted_return(call: ToolCallPart) -> ToolReturnPart:
    # The same return pydantic-ai itself writes for a call a cancelled run never finished.
    return ToolReturnPart(
        tool_name=call.tool_name,
        content=INTERRUPTED_TOOL_RETURN_CONTENT,
        tool_call_id=call.tool_call_id,
        outcome="interrupted",
    )


def _stored_return(call: ToolCallPart, result: ToolResult) -> ToolReturnPart:
    """The return of a call whose `tool.result` is stored: what the model was given when the call ended."""
    return ToolReturnPart(
        tool_name=call.tool_name,
        content=_stored_content(result),
        tool_call_id=call.tool_call_id,
        outcome=tool_outcome(result.status),
    )


def _stored_content(result: ToolResult) -> JsonValue:
    """What a stored `tool.result` says the model was given: the return itself when it was not text (an object,
    a list, a number, None: stored ahead of its model message), else its text."""
    if result.returned_none:
        return None
    return result.output if result.value is None else result.value


def _answered_return(call: ToolCallPart, answer: ToolAnswer) -> ToolReturnPart:
    """The return a person's answer gives a call that will not run now (its turn ends first): the answer to a
    question, a denial, or `interrupted` for a call approved to run."""
    if answer.approved is True:
        return _interrupted_return(call)
    if answer.approved is False:
        content: JsonValue = answer.message or ToolDenied().message
        return ToolReturnPart(call.tool_name, content, tool_call_id=call.tool_call_id, outcome="denied")
    return ToolReturnPart(call.tool_name, answer.value, tool_call_id=call.tool_call_id)


def close_open_calls(
    history: Sequence[JsonValue], *, answers: Sequence[ToolAnswer] = (), results: Sequence[ToolResult] = ()
) -> tuple[list[Payload], list[JsonValue]]:
    """The `tool.result` payloads and the closing model message for the calls the stored `history` leaves open,
    for a turn that ends without running them (stopped where it was not running, or refused at a limit), so its
    record ends with no call unanswered and the next turn finds none open. A call with a stored result among
    `results` (it ended before the turn was cut off) is closed with it, and needs no payload; one a person
    answered (`answers`) is closed with the answer, which is not lost; the rest are `interrupted`, as a run cut
    off in its tools writes them."""
    open_calls = _open_calls(_load_history(history))
    if not open_calls:
        return [], []
    stored = {result.tool_call_id: result for result in results}
    given = {answer.tool_call_id: answer for answer in answers}
    returns: list[ToolReturnPart] = []
    payloads: list[Payload] = []
    for call in open_calls:
        result = stored.get(call.tool_call_id)
        if result is not None:
            returns.append(_stored_return(call, result))
            continue
        answer = given.get(call.tool_call_id)
        part = _interrupted_return(call) if answer is None else _answered_return(call, answer)
        returns.append(part)
        payloads.append(_tool_result(part))
    return payloads, [_dump_one(ModelRequest(parts=list(returns)))]


def _tool_result(part: ToolReturnPart, *, ahead: bool = False) -> ToolResult:
    """The `tool.result` of a tool return, with its outcome's status. One stored `ahead` of the model message
    holding the return keeps a return that is not text as it is (`ToolResult.value`, `ToolResult.returned_none`)."""
    content = part.content
    return ToolResult(
        tool_call_id=part.tool_call_id,
        tool_name=part.tool_name,
        output=part.model_response_str(wrap_if_error=False),
        status=tool_status(part.outcome),
        value=content if ahead and isinstance(content, dict | list | int | float) else None,
        returned_none=ahead and content is None,
    )


@dataclass(frozen=True)
class _Deferred:
    """A call that waits on a person: the run pauses on it (`kind`), with what the person is to know (`detail`)."""

    kind: Literal["approval", "question", "oauth"]
    detail: dict[str, JsonValue] | None = None


class _TurnRun:
    """The state of one `run_turn`: the conversation as the model sees it, what of it is committed, and the usage
    of its requests.

    The run is its own loop over the model layer (a `Model`'s `request_stream`), not pydantic-ai's agent graph:
    a request, its stream, the response's commit, its tool calls, the next request. It keeps the rules of an agent
    run that a stored conversation depends on (the messages, their parts and outcomes, a call's retry when its
    arguments do not parse or its tool is unknown, the request limit), and costs a fraction of one.
    """

    def __init__(self, turn: TurnInput, sink: TurnSink) -> None:
        self.turn = turn
        self.sink = sink
        self.context_window: int | None = None
        self.request_index = 0
        self.usage = Usage()
        self._specs = {spec.name: spec for spec in turn.tools}
        self._waits_on_person = {spec.name for spec in turn.tools if spec.asks_user or spec.requires_approval}
        self._messages: list[ModelMessage] = []  # the conversation: the stored history, then this run's messages
        self._done = 0  # how many of them are committed (or being committed)
        self._unended: set[str] = set()  # the ids of the newest response's calls that may still run
        # tool call id -> its return, for the calls whose `tool.result` is stored already (committed as the call
        # ended beside others still running, or by an earlier run of the turn): never committed again
        self._recorded: dict[str, ToolReturnPart] = {}
        self._returns: dict[str, ToolReturnPart] = {}  # the returns of the calls that ended since the last response
        self._retries: dict[str, int] = {}  # tool name -> calls in a row whose arguments the model must send again
        self._output_retries = 0
        self._sending = False  # a request was sent and its response has not arrived
        self._stream: StreamedResponse | None = None  # the response streaming now
        self._inflight: set[asyncio.Future[object]] = set()  # shielded commits a cancellation may catch halfway
        self._pipelined = False  # a pipelined commit was made that no waiting commit has covered yet
        self._dumped: dict[int, JsonValue] = {}  # id(message) -> its JSON, when dumped before its commit
        self._emit = _guarded(sink)
        self._trail: ModelTrail | None = None
        self._phase = "model"  # what the run was doing: a model request, its tools, or its end

    @property
    def _model_ref(self) -> str:
        """The ref of the model the run is on (of a chain: the one serving now)."""
        return self._trail.current if self._trail is not None else self.turn.model

    async def _tell(self, payload: Payload) -> None:
        """Commit a fact about the model requests (a retry, a reroute) durably, before acting on it."""
        await self._commit([payload])

    def _prepare(self, models: ModelResolver | None) -> ModelTrail:
        """The run's chain of models, with its history loaded (raising for a ref that does not resolve or a
        history that does not load, before anything is committed)."""
        resolver = models if models is not None else ModelResolver()
        chain = [(ref, resolver._model(ref)) for ref in split_chain(self.turn.model)]
        self._messages = _history(self.turn, resolver)
        self._done = len(self._messages)
        self.context_window = resolver.context_window(self.turn.model)
        self._trail = ModelTrail(chain, resolver.retry, self._tell)
        return self._trail

    async def run(self, models: ModelResolver | None) -> TurnResult:
        trail = self._prepare(models)
        parameters = _parameters(self.turn)
        try:
            request, result = await self._opening()
            requests = 0
            while result is None:
                if requests >= self.turn.max_requests:
                    raise UsageLimitExceeded(
                        f"The next request would exceed the request_limit of {self.turn.max_requests}"
                    )
                requests += 1
                response = await self._model_request(trail.model, parameters, request)
                calls = response.tool_calls
                if calls:
                    request, result = await self._tools(calls, approved=False)
                else:
                    request, result = self._answer(response)
            self._phase = "end"
            await self._end()
            return result
        except asyncio.CancelledError:
            await self._after_interruption("interrupted")
            raise
        except Exception as exc:
            logger.debug("model run failed", exc_info=True)
            try:
                await self._after_interruption("error")
            except Exception:
                logger.exception("could not commit what a failed run recovered")
            error, notice = self._failure(exc)
            if notice is not None:
                try:
                    await self._commit([notice])
                except Exception:
                    logger.exception("could not record the failure of the run")
            return TurnResult(outcome="failed", output=None, usage=self.usage, error=error)

    def _failure(self, exc: Exception) -> tuple[str, RuntimeNotice | None]:
        """The turn's error text, and the `runtime.error` to record for a failure of the model(s) (naming each
        model tried, its provider and URL) or of the tool layer; other failures (a store that failed, the request
        limit, a scripted model's error) are the turn's failure alone."""
        if self._trail is not None:
            failed = self._trail.model_failure(exc)
            if failed is not None:
                return failed
        text = _error_text(exc)
        if self._phase == "tools" and not isinstance(exc, UsageLimitExceeded):
            message = f"the tool layer failed: {text}"
            return text, RuntimeNotice(type="runtime.error", message=message, source="tools")
        return text, None

    def _request(self, parts: list[ModelRequestPart]) -> ModelRequest:
        """A new request of this run (its instructions are given as it is sent: see `_model_request`)."""
        return ModelRequest(parts=parts, timestamp=datetime.now(UTC))

    # -- the turn's start --------------------------------------------------------------------------------------

    async def _opening(self) -> tuple[ModelRequest | None, TurnResult | None]:
        """The first request of the run (None: the stored one the history ends with is sent again), or how the run
        ends before any (paused again on calls that wait on a person).

        The calls the history leaves open are closed first: those that ended before the turn was cut off with
        their stored results, those a person answered with the answers (the approved ones run now), the rest as
        `interrupted`."""
        request: ModelRequest | None = None
        open_calls = _open_calls(self._messages)
        if open_calls:
            request, result = await self._continued(open_calls)
            if result is not None:
                return None, result
        if self.turn.prompt is not None:
            prompt = UserPromptPart(self.turn.prompt)
            request = self._request([prompt]) if request is None else replace(request, parts=[*request.parts, prompt])
        if request is not None or not self._messages:
            return request or self._request([]), None
        last = self._messages[-1]
        if isinstance(last, ModelRequest):
            return None, None  # a request resumed without a prompt is the stored one sent again
        # A conversation that ends on an answer, given nothing new: that answer is the run's.
        return self._answer(last)

    async def _continued(self, open_calls: list[ToolCallPart]) -> tuple[ModelRequest | None, TurnResult | None]:
        """Close the calls a paused or cut-off run left open (see `_opening`): the request that carries their
        returns, or the pause again when an approved call waits on a person once more."""
        answers = {answer.tool_call_id: answer for answer in self.turn.answers}
        stored = {result.tool_call_id: result for result in self.turn.results}
        known: dict[str, ToolReturnPart] = {}
        settled: list[ToolReturnPart] = []  # the calls that do not run: their results are known now
        approved: list[ToolCallPart] = []
        for call in open_calls:
            call_id = call.tool_call_id
            result = stored.get(call_id)
            answer = answers.get(call_id)
            if result is not None:
                # It ended before the turn was cut off: the model gets its result back, stored once, never run again.
                known[call_id] = self._recorded[call_id] = _stored_return(call, result)
            elif answer is None:
                # A restart cut the call off (or nobody answered it): never run it again.
                known[call_id] = _interrupted_return(call)
                settled.append(known[call_id])
            elif answer.approved is True:
                approved.append(call)
            else:
                known[call_id] = _answered_return(call, answer)
                settled.append(known[call_id])
        self._unended = {call.tool_call_id for call in approved}
        # Answered or denied calls beside approved ones that run now: their results are durable before those run
        # (the tools wait for every write of the turn), in the commit of the turn's start.
        early = [result for part in settled if (result := self._ended(part)) is not None]
        if early:
            await self._commit(early, wait=False)
        self._returns = known
        return await self._tools(open_calls, approved=True, only=approved)

    # -- model requests ----------------------------------------------------------------------------------------

    async def _model_request(
        self, model: Model, parameters: ModelRequestParameters, request: ModelRequest | None
    ) -> ModelResponse:
        self._phase = "model"
        if request is not None:
            # Committed as it leaves, before it is sent: a crash during the request keeps the prompt and the
            # results of the tools that ran.
            self._messages.append(request)
        new = self._new()
        payloads: list[Payload] = []
        for message in new:
            if isinstance(message, ModelRequest):
                payloads += self._tool_results(message)
        payloads.append(CompletionStarted(request_index=self.request_index, model=self._model_ref))
        await self._commit(payloads, new, wait=False)
        # Sent with the turn's instructions, as an agent run sends a request; stored without them (the request was
        # dumped as it was committed), as ever: the instructions are the turn's, kept on its `turn.started`.
        sent = self._messages[-1]
        if isinstance(sent, ModelRequest):
            sent.instructions = self.turn.instructions or None

        # As an agent run sends it: the history made valid for a provider, then the model's own preparation.
        outgoing = repair_messages(self._messages)
        prepared = model.prepare_messages(outgoing, parameters)
        if prepared is not outgoing:
            prepared = repair_messages(prepared)
        self._sending = True
        async with model.request_stream(prepared, None, parameters) as stream:
            self._stream = stream
            async for event in stream:
                self._stream_event(event)
        response = stream.get()  # (once the stream is closed: a model may say how it finished only then)
        self._stream, self._sending = None, False
        response.model_id = response.model_id or model.model_id
        fill_response_cost(response)
        self._messages.append(response)
        await self._commit(self._response_payloads(response), self._new())
        return response

    def _stream_event(self, event: ModelResponseStreamEvent) -> None:
        delta: ContentDelta | None = None
        if isinstance(event, PartStartEvent):
            part = event.part
            # The first piece of a part arrives in the part itself, not as a delta.
            if isinstance(part, TextPart | ThinkingPart) and part.content:
                kind = "text" if isinstance(part, TextPart) else "thinking"
                delta = ContentDelta(part=kind, index=event.index, request_index=self.request_index, delta=part.content)
        elif isinstance(event, PartDeltaEvent):
            change = event.delta
            if isinstance(change, TextPartDelta) and change.content_delta:
                delta = ContentDelta(
                    part="text", index=event.index, request_index=self.request_index, delta=change.content_delta
                )
            elif isinstance(change, ThinkingPartDelta) and change.content_delta:
                delta = ContentDelta(
                    part="thinking", index=event.index, request_index=self.request_index, delta=change.content_delta
                )
        if delta is not None:
            self._emit(delta)

    def _response_payloads(self, response: ModelResponse, cut_off: str = "interrupted") -> list[Payload]:
        """What a response says, in our words: its text and thinking, how it finished, and its tool calls."""
        payloads: list[Payload] = []
        calls: list[Payload] = []
        # (not the calls that wait on a person: they do not run in this run, and the others' results go together)
        waits = self._waits_on_person
        self._unended = {call.tool_call_id for call in response.tool_calls if call.tool_name not in waits}
        self._returns = {}
        for part in response.parts:
            if isinstance(part, ThinkingPart) and part.content:
                payloads.append(ThinkingBlock(text=part.content))
            elif isinstance(part, TextPart) and part.content:
                payloads.append(AssistantMessage(text=part.content))
            elif isinstance(part, ToolCallPart):
                calls.append(ToolCall(tool_call_id=part.tool_call_id, tool_name=part.tool_name, input=_arguments(part)))
        usage = _usage(response.usage)
        self.usage = self.usage + usage
        # A response the run was cut off in says why (`interrupted` by a cancellation, `error` by a failure).
        finish_reason = response.finish_reason if response.state == "complete" else cut_off
        payloads.append(
            CompletionFinished.trusted(  # its response is the JSON the model layer dumped: valid as it is
                request_index=self.request_index,
                model=self._model_ref,
                usage=usage,
                finish_reason=finish_reason,
                response=self._dump_response(response),
                context_tokens=response.usage.input_tokens,
                context_window=self.context_window,
                window_source="registry" if self.context_window is not None else None,
            )
        )
        self.request_index += 1
        return payloads + calls

    def _answer(self, response: ModelResponse) -> tuple[ModelRequest | None, TurnResult | None]:
        """A response without tool calls ends the run with its text; one with no text at all is asked again once,
        as an agent run asks it."""
        text = "".join(part.content for part in response.parts if isinstance(part, TextPart))
        if text:
            return None, TurnResult(outcome="completed", output=text, usage=self.usage)
        if response.finish_reason == "length":
            raise UnexpectedModelBehavior("the model reached its output token limit before it gave any answer")
        self._output_retries += 1
        if self._output_retries > _MAX_RETRIES:
            raise UnexpectedModelBehavior(f"Exceeded maximum output retries ({_MAX_RETRIES})")
        feedback = RetryFeedbackPart(content=_NO_OUTPUT, retry=RetryInfo(cause="no_output"))
        return self._request([feedback]), None

    # -- tools -------------------------------------------------------------------------------------------------

    async def _tools(
        self, calls: Sequence[ToolCallPart], *, approved: bool, only: Sequence[ToolCallPart] | None = None
    ) -> tuple[ModelRequest | None, TurnResult | None]:
        """Run the calls of a response (or, continuing a paused turn, the `only` ones a person approved), all at
        once; the next request carries their returns in the order of `calls`. Calls that wait on a person pause
        the run, with the returns of those that ran kept for its continuation."""
        self._phase = "tools"
        deferred: dict[str, _Deferred] = {}
        runs: list[tuple[ToolCallPart, dict[str, Any]]] = []
        for call in calls if only is None else only:
            checked = self._checked(call)
            if isinstance(checked, _Deferred):
                deferred[call.tool_call_id] = checked
            elif checked is not None:
                runs.append((call, checked))
        waits: list[_Deferred | None] = []
        if len(runs) == 1:  # (no task for a lone call)
            call, args = runs[0]
            waits = [await self._call(call, args, approved)]
        elif runs:
            try:
                async with asyncio.TaskGroup() as group:
                    tasks = [group.create_task(self._call(call, args, approved)) for call, args in runs]
            except BaseExceptionGroup as failed:  # the first failure (the others were cancelled)
                raise failed.exceptions[0] from None
            waits = [task.result() for task in tasks]
        for (call, _), wait in zip(runs, waits, strict=True):
            if wait is not None:
                deferred[call.tool_call_id] = wait
        returns = [self._returns[call.tool_call_id] for call in calls if call.tool_call_id in self._returns]
        if not deferred:
            return self._request(list(returns)), None
        if returns:
            self._messages.append(ModelRequest(parts=list(returns), timestamp=datetime.now(UTC)))
        pending = tuple(_pending(call, deferred[call.tool_call_id]) for call in calls if call.tool_call_id in deferred)
        return None, TurnResult(outcome="paused", output=None, usage=self.usage, pending=pending)

    def _checked(self, call: ToolCallPart) -> dict[str, Any] | _Deferred | None:
        """A call's arguments, or what it comes to without running: a question for a person, or None for a retry
        (an unknown tool, arguments that do not parse: the model may send it again; its return is kept)."""
        spec = self._specs.get(call.tool_name)
        if spec is None:
            names = ", ".join(repr(name) for name in self._specs)
            available = f"Available tools: {names}" if names else "No tools available."
            self._retry(call, "unknown_tool", f"Unknown tool name: {call.tool_name!r}. {available}")
            return None
        try:
            args = _parsed_arguments(call)
        except ValidationError as exc:
            self._retry(call, "validation_error", exc.errors(include_url=False, include_context=False))
            return None
        if spec.asks_user:
            return _Deferred("question")  # the answer arrives with a later run_turn
        return args

    def _retry(self, call: ToolCallPart, cause: Literal["unknown_tool", "validation_error"], content: Any) -> None:
        attempt = self._retries.get(call.tool_name, 0) + 1
        if attempt > _MAX_RETRIES:
            raise UnexpectedModelBehavior(f"Tool {call.tool_name!r} exceeded max retries count of {_MAX_RETRIES}")
        self._retries[call.tool_name] = attempt
        retry = RetryInfo(cause=cause, attempt=attempt, max_retries=_MAX_RETRIES)
        part = ToolReturnPart(call.tool_name, content, tool_call_id=call.tool_call_id, outcome="retried", retry=retry)
        self._returns[call.tool_call_id] = part
        self._unended.discard(call.tool_call_id)  # (it never runs: its result goes with the next request)

    async def _call(self, call: ToolCallPart, args: dict[str, Any], approved: bool) -> _Deferred | None:
        """Run one call; its return is kept (`_returns`), or it waits on a person (returned)."""
        spec = self._specs[call.tool_name]
        context = ToolContext(call.tool_call_id, spec.name, self._emit)
        # A call a person is to approve is decided like any first (its arguments, the policies): one refused is
        # refused now, and nobody is asked to approve what could not run.
        asks = spec.requires_approval and not approved
        try:
            if asks:
                if spec.check is not None:
                    await spec.check(context, args)
                output: JsonValue = None
            else:
                output = await spec.run(context, args)
        except ToolWaits as exc:
            # The call waits on a person (a sign-in): the run pauses on it, and an approval runs it again.
            return _Deferred("oauth", {"summary": exc.summary, **exc.detail})
        except Exception as exc:
            # The model sees a tool's failure, and the turn goes on.
            part = ToolReturnPart(spec.name, _error_text(exc), tool_call_id=call.tool_call_id, outcome="failed")
        else:
            if asks:
                return _Deferred("approval")  # the run pauses on it; the approval runs it
            part = ToolReturnPart(spec.name, output, tool_call_id=call.tool_call_id)
            self._retries.pop(spec.name, None)
        self._returns[call.tool_call_id] = part
        if (result := self._ended(part)) is not None:
            await self._commit([result])
        return None

    def _ended(self, part: ToolReturnPart) -> ToolResult | None:
        """A call ended with the return `part`. While calls the model made beside it may still run, its
        `tool.result` is to be committed now, on its own (returned; a `ToolProgress` with its status says live at
        once that it is over): a crash before they end must not lose it. The last of them to end leaves its result
        to the commit that opens the next model request, as a lone call does (None)."""
        tool_call_id = part.tool_call_id
        self._unended.discard(tool_call_id)
        if not self._unended:
            return None
        status = tool_status(part.outcome)
        self._emit(
            ToolProgress(tool_call_id=tool_call_id, tool_name=part.tool_name, message=_ENDED[status], status=status)
        )
        self._recorded[tool_call_id] = part
        return _tool_result(part, ahead=True)

    def _tool_results(self, request: ModelRequest) -> list[Payload]:
        """The `tool.result`s of a request's tool returns not stored yet, each with its return's outcome's status."""
        recorded = self._recorded
        return [
            _tool_result(part)
            for part in request.parts
            if isinstance(part, ToolReturnPart) and part.tool_call_id not in recorded
        ]

    # -- the end -----------------------------------------------------------------------------------------------

    async def _end(self) -> None:
        """Commit what the run added since its last commit (the returns of the calls that ran beside those it paused
        on), and wait for every commit."""
        new = self._new()
        if new:
            payloads: list[Payload] = []
            for message in new:
                if isinstance(message, ModelRequest):
                    payloads += self._tool_results(message)
            await self._commit(payloads, new)
        await self._settle()

    async def _after_interruption(self, finish_reason: str) -> None:
        """Commit what a cancelled or failed run recovered, leaving no stored tool call without a result."""
        for write in list(self._inflight):
            try:
                await write  # a commit the cancellation caught halfway: it finishes (it is shielded)
            except Exception:
                logger.exception("a commit failed while the run was interrupted")
        payloads: list[Payload] = []
        stream, self._stream = self._stream, None
        if stream is not None:
            # Cut off while it streamed: what came of the response so far is the conversation's.
            partial = replace(stream.get(), state="interrupted")
            fill_response_cost(partial)
            self._messages.append(partial)
        elif self._sending and finish_reason == "interrupted":
            # Cancelled before the response began (a retry's wait, say): the request is closed all the same.
            self._messages.append(ModelResponse(parts=[], state="interrupted"))
        self._sending = False
        new = self._new()
        for message in new:
            if isinstance(message, ModelResponse):
                payloads += self._response_payloads(message, finish_reason)
            else:
                payloads += self._tool_results(message)
        open_calls = _open_calls(self._messages)
        if open_calls:
            # (a call that ended before the cut is closed with its return; one whose result was committed as it
            # ended, with that result)
            returns = [
                self._returns.get(call.tool_call_id)
                or self._recorded.get(call.tool_call_id)
                or _interrupted_return(call)
                for call in open_calls
            ]
            closing = ModelRequest(parts=list(returns), timestamp=datetime.now(UTC))
            self._messages.append(closing)
            new.append(closing)
            payloads += self._tool_results(closing)
        if payloads or new:
            await self._commit(payloads, new, shield=False)
        await self._settle()

    # -- committing --------------------------------------------------------------------------------------------

    def _new(self) -> list[ModelMessage]:
        """The messages not committed yet, taken to be committed now."""
        new = self._messages[self._done :]
        self._done = len(self._messages)
        return new

    def _dump_response(self, response: ModelResponse) -> JsonValue:
        """The JSON of a response, kept for the commit that stores the message itself."""
        dumped = self._dumped[id(response)] = _dump_one(response)
        return dumped

    def _dump_messages(self, messages: Sequence[ModelMessage]) -> list[JsonValue]:
        dumped = self._dumped
        return [dumped.pop(id(m)) if id(m) in dumped else _dump_one(m) for m in messages]

    async def _commit(
        self,
        payloads: Sequence[Payload],
        messages: Sequence[ModelMessage] = (),
        *,
        shield: bool = True,
        wait: bool = True,
    ) -> None:
        if not payloads and not messages:
            return
        if not wait:
            # A pipelined commit takes its write before it first suspends (see `TurnSink.commit`): nothing to shield.
            await self.sink.commit(list(payloads), self._dump_messages(messages), wait=False)
            self._pipelined = True
            return
        write = asyncio.ensure_future(self.sink.commit(list(payloads), self._dump_messages(messages), wait=wait))
        if not shield:
            await write
        else:
            # A durable step is all or nothing: a cancellation arriving mid-write lets the write finish.
            self._inflight.add(write)
            await asyncio.shield(write)
            self._inflight.discard(write)
        # A waiting commit covers every pipelined one before it (it raises when one of them failed).
        self._pipelined = False

    async def _settle(self) -> None:
        """Wait for the pipelined commits no waiting commit has covered (raising the failure of one)."""
        if self._pipelined:
            await asyncio.shield(asyncio.ensure_future(self.sink.commit((), (), wait=True)))
            self._pipelined = False


def _parameters(turn: TurnInput) -> ModelRequestParameters:
    """What every request of the turn tells the model besides the messages: its tools (as pydantic-ai defines a
    tool from a JSON schema) and its instructions; the answer is text."""
    tools = [
        ToolDefinition(name=spec.name, description=spec.description, parameters_json_schema=dict(spec.parameters))
        for spec in turn.tools
    ]
    return ModelRequestParameters(
        function_tools=tools,
        tool_visibility={tool.name: "visible" for tool in tools} or None,
        instruction_parts=[InstructionPart(content=turn.instructions)] if turn.instructions else None,
    )


_ARGUMENTS: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])


def _parsed_arguments(call: ToolCallPart) -> dict[str, Any]:
    """A call's arguments as an object, as a tool defined by a JSON schema takes them (raising `ValidationError`
    when they are not JSON, or not an object)."""
    args = call.args
    if args is None or args == "":
        return {}
    if isinstance(args, str):
        return _ARGUMENTS.validate_json(args)
    return _ARGUMENTS.validate_python(args)


def _arguments(call: ToolCallPart) -> dict[str, JsonValue]:
    """A call's arguments as the event says them (what the model sent, as an object when it is not JSON)."""
    return cast(dict[str, JsonValue], call.args_as_dict())


def _pending(call: ToolCallPart, deferred: _Deferred) -> PendingCall:
    args = _arguments(call)
    question = args.get("question")
    return PendingCall(
        tool_call_id=call.tool_call_id,
        tool_name=call.tool_name,
        input=args,
        kind=deferred.kind,
        question=question if deferred.kind == "question" and isinstance(question, str) else None,
        detail=deferred.detail,
    )


_MAX_RETRIES = 1
"""How many times in a row the model may be asked to send a tool call again (an unknown tool, arguments that do not
parse) or to give an answer at all, as an agent run allows by default."""

_NO_OUTPUT = "Your response held no answer and no tool call: answer in text, or call one of the tools."


_ENDED: dict[ToolStatus, str] = {"ok": "finished", "error": "failed", "denied": "denied", "interrupted": "interrupted"}
"""How a `ToolProgress` says that its call ended, by the call's status."""


def _guarded(sink: TurnSink) -> Callable[[Payload], None]:
    """`sink.stream`, made harmless: an ephemeral payload that cannot be published must not hurt the turn."""

    def stream(payload: Payload) -> None:
        try:
            sink.stream(payload)
        except Exception:
            logger.exception("the sink could not stream a %s", payload.type)

    return stream
