"""The models adapter: runs one turn on a model with tools, and reports every step as our own payloads.

This module (with `refs` and `scripted`) is the only place that knows pydantic-ai. A turn is driven node by
node through `Agent.iter`, so the adapter commits at the points the engine relies on:

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
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, cast

import pydantic_ai
from pydantic import ConfigDict, JsonValue, TypeAdapter, ValidationError
from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    ModelMessagesTypeAdapter,
    ModelRequestNode,
    ToolDenied,
)
from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ToolFailed, UsageLimitExceeded
from pydantic_ai.messages import (
    INTERRUPTED_TOOL_RETURN_CONTENT,
    AgentStreamEvent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ThinkingPart,
    ThinkingPartDelta,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.run import AgentRun
from pydantic_ai.tools import RunContext, Tool
from pydantic_ai.usage import RequestUsage, UsageLimits

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
    ToolSpec,
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

_Output = str | DeferredToolRequests

_WAITS = "agentwatch_waits"
"""The key of a deferred call's metadata that says it waits on a person (`ToolWaits`), and for what."""


def _detail(metadata: dict[str, Any]) -> dict[str, JsonValue]:
    return {key: value for key, value in metadata.items() if key != _WAITS}


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


class _TurnRun:
    """The state of one `run_turn`: what is committed so far, and the usage of its requests."""

    def __init__(self, turn: TurnInput, sink: TurnSink) -> None:
        self.turn = turn
        self.sink = sink
        self.context_window: int | None = None
        self.request_index = 0
        self.usage = Usage()
        # Messages are tracked by identity: pydantic-ai appends the very objects we committed to its history.
        self._committed: dict[int, ModelMessage] = {}
        self._stored: frozenset[int] = frozenset()  # ids of the history's messages
        # tool call id -> the return the model is given for a call this run does not run (a stored result, or
        # `interrupted`): pydantic-ai builds its part from a `DeferredToolResults` entry, which cannot say
        # `interrupted`; the part is made this one before its request is committed (see `_given_returns`)
        self._given: dict[str, ToolReturnPart] = {}
        self._unended: set[str] = set()  # the ids of the newest response's calls that may still run
        self._waits_on_person = {spec.name for spec in turn.tools if spec.asks_user or spec.requires_approval}
        # tool call id -> its return, for the calls whose `tool.result` is stored already (committed as the call
        # ended beside others still running, or by an earlier run of the turn): never committed again
        self._recorded: dict[str, ToolReturnPart] = {}
        self._inflight: set[asyncio.Future[object]] = set()  # shielded commits a cancellation may catch halfway
        self._run: AgentRun[None, _Output] | None = None
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
        await self._commit([payload], ())

    def _prepare(self, models: ModelResolver | None) -> tuple[ModelTrail, list[ModelMessage]]:
        """The run's chain of models and its history (raising for a ref that does not resolve or a history
        that does not load, before anything is committed)."""
        resolver = models if models is not None else ModelResolver()
        chain = [(ref, resolver._model(ref)) for ref in split_chain(self.turn.model)]
        history = _history(self.turn, resolver)
        self.context_window = resolver.context_window(self.turn.model)
        self._stored = frozenset(map(id, history))
        self._trail = ModelTrail(chain, resolver.retry, self._tell)
        return self._trail, history

    async def run(self, models: ModelResolver | None) -> TurnResult:
        trail, history = self._prepare(models)
        agent: Agent[None, _Output] = Agent(
            trail.model,
            instructions=self.turn.instructions or None,
            tools=[self._tool(spec) for spec in self.turn.tools],
            output_type=[str, DeferredToolRequests],  # lets the run end on calls that wait for a person
        )
        deferred, settled = self._answers(history)
        try:
            if settled:
                # Answered or denied calls beside approved ones that run now: their results are durable before
                # those run (the tools wait for every write of the turn), in the commit of the turn's start.
                await self._commit(settled, (), wait=False)
            async with agent.iter(
                self.turn.prompt,
                message_history=history,
                deferred_tool_results=deferred,
                usage_limits=UsageLimits(request_limit=self.turn.max_requests),
            ) as run:
                self._run = run
                async for node in run:
                    if Agent.is_model_request_node(node):
                        self._phase = "model"
                        await self._model_request(run, node)
                        self._phase = "tools"  # advancing from the response runs its tool calls
                    elif Agent.is_end_node(node):
                        self._phase = "end"
                        result = await self._end(run, node.data.output)
                        await self._settle()
                        return result
                    # A CallToolsNode needs nothing here: its response and calls were committed when the response
                    # ended, and advancing the loop runs its tools.
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
                    await self._commit([notice], ())
                except Exception:
                    logger.exception("could not record the failure of the run")
            return TurnResult(outcome="failed", output=None, usage=self.usage, error=error)
        raise RuntimeError("the model run ended without an end node")  # pragma: no cover

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

    # -- tools -------------------------------------------------------------------------------------------------

    def _tool(self, spec: ToolSpec) -> Tool[None]:
        if spec.asks_user:

            async def ask(ctx: RunContext[None], **args: Any) -> Any:
                raise CallDeferred(kind="question")  # the answer arrives with a later run_turn

            function = ask
        else:
            emit = self._emit

            async def call(ctx: RunContext[None], **args: Any) -> Any:
                context = ToolContext(ctx.tool_call_id or "", spec.name, emit)
                # A call a person is to approve is decided like any first (its arguments, the policies): one
                # refused is refused now, and nobody is asked to approve what could not run.
                asks = spec.requires_approval and not ctx.tool_call_approved
                try:
                    if asks:
                        if spec.check is not None:
                            await spec.check(context, dict(args))
                        output = None
                    else:
                        output = await spec.run(context, dict(args))
                except ToolWaits as exc:
                    # The call waits on a person (a sign-in): the run pauses on it, and an approval runs it again.
                    raise CallDeferred({_WAITS: exc.kind, "summary": exc.summary, **exc.detail}) from exc
                except Exception as exc:
                    text = _error_text(exc)
                    failed = ToolReturnPart(spec.name, text, tool_call_id=context.tool_call_id, outcome="failed")
                    if (result := self._ended(failed)) is not None:
                        await self._commit([result], ())
                    # pydantic-ai would end the run on a plain exception; the model should see it instead.
                    raise ToolFailed(text) from exc
                if asks:
                    raise ApprovalRequired  # the run pauses on it; the approval calls this again, approved
                if (
                    result := self._ended(ToolReturnPart(spec.name, output, tool_call_id=context.tool_call_id))
                ) is not None:
                    await self._commit([result], ())
                return output

            function = call
        tool: Tool[None] = Tool.from_schema(
            function,
            name=spec.name,
            description=spec.description,
            json_schema=dict(spec.parameters),
            takes_ctx=True,
        )
        return tool

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

    def _answers(self, history: list[ModelMessage]) -> tuple[DeferredToolResults | None, list[Payload]]:
        """Results for the open calls the history ends with: the stored results of those that ended before the
        turn was cut off, the answers given, `interrupted` for the rest. And the `tool.result`s to commit at once:
        those of the answered calls, when calls approved beside them run now (see `_ended`)."""
        open_calls = _open_calls(history)
        if not open_calls:
            return None, []  # answers to calls that are no longer open were applied before; nothing to do
        answers = {answer.tool_call_id: answer for answer in self.turn.answers}
        stored = {result.tool_call_id: result for result in self.turn.results}
        results = DeferredToolResults()
        settled: list[ToolReturnPart] = []  # the calls that do not run: their results are known now
        for call in open_calls:
            call_id = call.tool_call_id
            result = stored.get(call_id)
            answer = answers.get(call_id)
            if result is not None:
                # It ended before the turn was cut off: the model gets its result back, stored once, never run again.
                self._recorded[call_id] = self._given[call_id] = part = _stored_return(call, result)
                if result.status == "ok":
                    results.calls[call_id] = part.content
                elif result.status == "denied":
                    results.approvals[call_id] = ToolDenied(result.output)
                else:
                    results.calls[call_id] = ToolFailed(result.output)
            elif answer is None:
                # A restart cut the call off (or nobody answered it): never run it again.
                results.calls[call_id] = ToolFailed(INTERRUPTED_TOOL_RETURN_CONTENT)
                self._given[call_id] = part = _interrupted_return(call)
                settled.append(part)
            elif answer.approved is True:
                results.approvals[call_id] = True
                self._unended.add(call_id)  # it runs now
            elif answer.approved is False:
                results.approvals[call_id] = ToolDenied(answer.message) if answer.message else ToolDenied()
                settled.append(_answered_return(call, answer))
            else:
                results.calls[call_id] = answer.value
                settled.append(_answered_return(call, answer))
        return results, [result for part in settled if (result := self._ended(part)) is not None]

    def _tool_results(self, request: ModelRequest) -> list[Payload]:
        """The `tool.result`s of a request's tool returns not stored yet, each with its return's outcome's status
        (the returns given for calls this run did not run are made the ones `_answers` settled first)."""
        if self._given:
            self._given_returns(request)
        recorded = self._recorded
        return [
            _tool_result(part)
            for part in request.parts
            if isinstance(part, ToolReturnPart) and part.tool_call_id not in recorded
        ]

    def _given_returns(self, request: ModelRequest) -> None:
        """Make the returns pydantic-ai built from `DeferredToolResults` for calls this run does not run the ones
        `_answers` settled: `interrupted` (not `failed`, the nearest a deferred result can say), as the stored
        `tool.result` and a run cut off in its tools have it. Done in place, before the request is committed
        and sent: the model and the stored message see the same return."""
        given = self._given
        parts = request.parts
        if not any(isinstance(part, ToolReturnPart) and part.tool_call_id in given for part in parts):
            return
        request.parts = [
            replace(cast(ToolReturnPart, part), content=settled.content, outcome=settled.outcome)
            if isinstance(part, ToolReturnPart) and (settled := given.pop(part.tool_call_id, None)) is not None
            else part
            for part in parts
        ]

    # -- model requests ----------------------------------------------------------------------------------------

    async def _model_request(self, run: AgentRun[None, _Output], node: ModelRequestNode[None, _Output]) -> None:
        payloads: list[Payload] = []
        messages = self._uncommitted(run)
        request = node.request
        # A request resumed from the history without a prompt is the stored one sent again.
        if (
            not node.is_resuming_without_prompt
            and id(request) not in self._committed
            and id(request) not in self._stored
        ):
            if request.timestamp is None:
                request.timestamp = datetime.now(UTC)  # pydantic-ai stamps it only once it is sent
            # Committed as it leaves, before pydantic-ai sends it: a crash during the request keeps the prompt
            # and the results of the tools that ran.
            messages.append(request)
        for message in messages:
            if isinstance(message, ModelRequest):
                payloads += self._tool_results(message)
        payloads.append(CompletionStarted(request_index=self.request_index, model=self._model_ref))
        await self._commit(payloads, messages, wait=False)

        async with node.stream(run.ctx) as stream:
            async for event in stream:
                self._stream_event(event)

        response_payloads: list[Payload] = []
        new = self._uncommitted(run)
        for message in new:
            if isinstance(message, ModelResponse):
                response_payloads += self._response_payloads(message)
        await self._commit(response_payloads, new)

    def _stream_event(self, event: AgentStreamEvent) -> None:
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
        for part in response.parts:
            if isinstance(part, ThinkingPart) and part.content:
                payloads.append(ThinkingBlock(text=part.content))
            elif isinstance(part, TextPart) and part.content:
                payloads.append(AssistantMessage(text=part.content))
            elif isinstance(part, ToolCallPart):
                calls.append(
                    ToolCall(
                        tool_call_id=part.tool_call_id,
                        tool_name=part.tool_name,
                        input=cast(dict[str, JsonValue], part.args_as_dict()),
                    )
                )
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

    # -- the end -----------------------------------------------------------------------------------------------

    async def _end(self, run: AgentRun[None, _Output], output: _Output) -> TurnResult:
        messages = self._uncommitted(run)
        if messages:
            payloads: list[Payload] = []
            for message in messages:
                if isinstance(message, ModelRequest):
                    payloads += self._tool_results(message)
            await self._commit(payloads, messages)
        if isinstance(output, DeferredToolRequests):
            return TurnResult(outcome="paused", output=None, usage=self.usage, pending=self._pending(run, output))
        return TurnResult(outcome="completed", output=output, usage=self.usage)

    def _pending(self, run: AgentRun[None, _Output], requests: DeferredToolRequests) -> tuple[PendingCall, ...]:
        kinds = {call.tool_call_id: "approval" for call in requests.approvals}
        kinds.update({call.tool_call_id: "question" for call in requests.calls})
        waits = {key: value for key, value in requests.metadata.items() if value.get(_WAITS) == "oauth"}
        kinds.update(dict.fromkeys(waits, "oauth"))
        response = next(m for m in reversed(run.all_messages()) if isinstance(m, ModelResponse))
        pending = []
        for call in response.tool_calls:  # in the order the model made them
            kind = kinds.get(call.tool_call_id)
            if kind is None:
                continue
            args = cast(dict[str, JsonValue], call.args_as_dict())
            question = args.get("question")
            pending.append(
                PendingCall(
                    tool_call_id=call.tool_call_id,
                    tool_name=call.tool_name,
                    input=args,
                    kind="approval" if kind == "approval" else "oauth" if kind == "oauth" else "question",
                    question=question if kind == "question" and isinstance(question, str) else None,
                    detail=_detail(waits[call.tool_call_id]) if kind == "oauth" else None,
                )
            )
        return tuple(pending)

    async def _after_interruption(self, finish_reason: str) -> None:
        """Commit what a cancelled or failed run recovered, leaving no stored tool call without a result."""
        for write in list(self._inflight):
            try:
                await write  # a commit the cancellation caught halfway: it finishes (it is shielded)
            except Exception:
                logger.exception("a commit failed while the run was interrupted")
        run = self._run
        if run is None:
            return  # cut off before the run began: nothing new, and the next run closes any open calls
        new = self._uncommitted(run)
        payloads: list[Payload] = []
        keep: list[ModelMessage] = []
        partial_request: ModelRequest | None = None
        for message in new:
            if isinstance(message, ModelResponse):
                payloads += self._response_payloads(message, finish_reason)
                keep.append(message)
            elif message.state == "interrupted":
                partial_request = message  # the tools that finished before the cut: closed below
            else:
                payloads += self._tool_results(message)
                keep.append(message)
        open_calls = _open_calls([m for m in run.all_messages() if m is not partial_request])
        if partial_request is not None or open_calls:
            finished = partial_request.parts if partial_request is not None else []
            done = {p.tool_call_id for p in finished if isinstance(p, ToolReturnPart)}
            # (a call whose result was committed as it ended is closed with that result)
            recorded = self._recorded
            returns = [
                recorded.get(call.tool_call_id) or _interrupted_return(call)
                for call in open_calls
                if call.tool_call_id not in done
            ]
            closing = (
                replace(partial_request, parts=[*finished, *returns], state="complete")
                if partial_request is not None
                else ModelRequest(parts=list(returns))
            )
            payloads += self._tool_results(closing)
            keep.append(closing)
        if payloads or keep:
            await self._commit(payloads, keep, shield=False)
        await self._settle()

    # -- committing --------------------------------------------------------------------------------------------

    def _uncommitted(self, run: AgentRun[None, _Output]) -> list[ModelMessage]:
        stored, committed = self._stored, self._committed
        return [m for m in run.new_messages() if id(m) not in committed and id(m) not in stored]

    def _dump_response(self, response: ModelResponse) -> JsonValue:
        """The JSON of a response, kept for the commit that stores the message itself."""
        dumped = self._dumped[id(response)] = _dump_one(response)
        return dumped

    def _dump_messages(self, messages: Sequence[ModelMessage]) -> list[JsonValue]:
        dumped = self._dumped
        return [dumped.pop(id(m)) if id(m) in dumped else _dump_one(m) for m in messages]

    async def _commit(
        self, payloads: Sequence[Payload], messages: Sequence[ModelMessage], *, shield: bool = True, wait: bool = True
    ) -> None:
        if not payloads and not messages:
            return
        for message in messages:
            self._committed[id(message)] = message
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
        self._pipelined = not wait

    async def _settle(self) -> None:
        """Wait for the pipelined commits no waiting commit has covered (raising the failure of one)."""
        if self._pipelined:
            await asyncio.shield(asyncio.ensure_future(self.sink.commit((), (), wait=True)))
            self._pipelined = False


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
