"""Turns: what a session's turn loop runs when the session has work.

A plan (`agentwatch.runtime.plan`) says why a turn runs. `run_plan` records the start, runs the model through
the models adapter with a sink that writes every durable step through the session's emitter, and records how
the turn ended. The emitter does the ordering, pipelining and the durability barrier (the adapter commits a
response and its tool calls, waiting, before any tool runs); this module only says what each step writes.

The turn takes the engine's narrow `Runtime` (config, store, roster, tools, policy, models, other sessions'
channels) and its session's `SessionEmitter`, never the `Engine`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from pydantic import JsonValue

from agentwatch.errors import AgentwatchError, NotFound
from agentwatch.events import (
    AssistantMessage,
    AuthRequired,
    CompactionApplied,
    CompletionFinished,
    Event,
    NewEvent,
    Origin,
    Payload,
    RequestDismissed,
    RequestOpened,
    RuntimeNotice,
    SubtaskEnded,
    ToolCall,
    ToolResult,
    TurnEnded,
    TurnId,
    TurnStarted,
    Usage,
    UserMessage,
    new_id,
)
from agentwatch.events.truncate import displayable
from agentwatch.reads.current import turn_spent
from agentwatch.runtime.compaction import ContextFill
from agentwatch.runtime.emitter import GROUP_COMMIT_SECONDS, SessionEmitter, stream_touch_seconds
from agentwatch.runtime.leases import LeaseLost, check_held, ensure_held, leases_of
from agentwatch.runtime.models import (
    PendingCall,
    ToolAnswer,
    ToolContext,
    ToolSpec,
    TurnInput,
    TurnResult,
    close_open_calls,
    run_turn,
)
from agentwatch.runtime.plan import Plan, lives_on, next_plan
from agentwatch.runtime.policy import ToolRequest
from agentwatch.runtime.requests import release_held
from agentwatch.runtime.roster import AgentDefinition
from agentwatch.runtime.runs import billed_run
from agentwatch.runtime.services import Runtime, TurnPart
from agentwatch.runtime.tools.ask import choices_of, read_approval
from agentwatch.runtime.tools.base import Caller, Tool
from agentwatch.runtime.toolservers import read_oauth_answer, tool_servers
from agentwatch.store import (
    TERMINAL_STATUSES,
    RequestClose,
    RequestDraft,
    RequestRecord,
    SessionPatch,
    SessionRecord,
    SessionStatus,
    UsageEntry,
    Write,
)

__all__ = ["Plan", "ToolRefused", "end_stopped_turn", "next_plan", "restart_note", "run_plan"]

log = logging.getLogger(__name__)


class ToolRefused(AgentwatchError):
    """The policy chain did not allow a tool call; the model is told why."""

    code = "denied"


class _Committer(Protocol):
    async def commit(self, write: Write) -> list[Event]: ...


@dataclass
class _Turn:
    runtime: Runtime
    emitter: SessionEmitter
    session: SessionRecord
    definition: AgentDefinition
    turn_id: str
    run_id: str | None
    """The run the turn works for and bills (`billed_run`)."""
    usage: Usage = field(default_factory=Usage)
    owed: bool = False
    """A response without tool calls was submitted and not waited for: the turn's end commits with it."""
    spent_before: Usage = field(default_factory=Usage)
    """What the turn's earlier parts used (a turn continued after a pause or a restart)."""
    stopped: str | None = None
    """Why the turn was stopped at a limit of its role (its error), once it was."""
    unpriced_told: bool = False
    """The turn said that a spend limit of its role cannot stop it (`unpriced`)."""
    take: int | None = None
    """The take of the session's lease the turn runs under (`Leases.take`; None without leases): it writes only
    while that one stands."""

    @property
    def session_id(self) -> str:
        return self.session.id

    def over_limit(self) -> str | None:
        """The limit of the turn's role that what it used so far has reached, in words that say what to do (None:
        none has): no more model requests may follow."""
        limits, role = self.definition.limits, repr(self.session.role)
        used = self.spent_before + self.usage
        go_on = "send the agent a new input to go on, or raise the limit"
        if used.requests >= limits.requests:
            made = "1 model request" if used.requests == 1 else f"{used.requests} model requests"
            return f"the turn made {made}, the limit of role {role} (limits.requests); {go_on}"
        if limits.tokens is not None and used.total_tokens >= limits.tokens:
            return (
                f"the turn used {used.total_tokens:,} tokens, reaching the limit of {limits.tokens:,} of role {role} "
                f"(limits.tokens); {go_on}"
            )
        spent = used.cost_usd or 0.0
        if limits.cost_usd is not None and spent >= limits.cost_usd:
            return (
                f"the turn spent {spent:.4f} USD, reaching the limit of {limits.cost_usd:g} USD of role {role} "
                f"(limits.cost_usd); {go_on}"
            )
        # (the session's total counts the earlier parts of this turn already)
        spent = self.session.cost_usd + (self.usage.cost_usd or 0.0)
        if limits.agent_cost_usd is not None and spent >= limits.agent_cost_usd:
            return (
                f"the agent has spent {spent:.4f} USD, reaching the limit of {limits.agent_cost_usd:g} USD of role "
                f"{role} (limits.agent_cost_usd); raise the limit to let it go on"
            )
        return None

    def unpriced(self, finished: CompletionFinished) -> RuntimeNotice | None:
        """The warning, once a turn, that the spend limits of its role cannot stop it: the price of the model
        that gave the response `finished` ends is not known, so its spend is not counted (None: nothing to say)."""
        limits = self.definition.limits
        named = [f"limits.{key}" for key in ("cost_usd", "agent_cost_usd") if getattr(limits, key) is not None]
        if self.unpriced_told or finished.usage.cost_usd is not None or not named:
            return None
        self.unpriced_told = True
        message = (
            f"{' and '.join(named)} of role {self.session.role!r} cannot stop this turn: the price of model "
            f"{finished.model!r} is not known, so its spend is not counted; limits.tokens and limits.requests "
            "bound a turn on such a model"
        )
        return RuntimeNotice(type="runtime.warning", message=message, source="limits")

    def write(
        self,
        payloads: Sequence[Payload],
        *,
        messages: Sequence[JsonValue] = (),
        patch: SessionPatch | None = None,
        **changes: Any,
    ) -> Write:
        check_held(self.runtime, self.session_id, self.take)  # leases: a turn whose lease was lost writes no more
        turn_id = TurnId(self.turn_id)
        return Write(
            self.session_id,
            events=[NewEvent(p, turn_id) for p in payloads],
            messages=messages,
            session=patch,
            **changes,
        )

    async def begin(
        self, started: TurnStarted, payloads: Sequence[Payload], *, patch: SessionPatch, **changes: Any
    ) -> None:
        """Record the start (`started`, then `payloads`), deferred: it goes to the store with the turn's next write
        (the opening of the first model request, normally), in one commit. A failure surfaces at the turn's first
        waiting commit, before any tool runs. `started` keeps the trace context the engine's turn tracers give."""
        started = await self.traced(started)
        self.emitter.submit(self.write([started, *payloads], patch=patch, **changes), turn=True, defer=math.inf)

    async def traced(self, started: TurnStarted) -> TurnStarted:
        """`started` with the trace context of this part's span, from the first turn tracer that gives one (a
        tracer that fails is logged and passed over: watching never fails the turn)."""
        tracers = self.runtime.turn_tracers
        if not tracers:
            return started
        earlier = None
        if started.trigger != "input":  # the part before, stored by whichever engine ran it
            found = await self.runtime.store.read_events_backward(
                self.session_id, limit=1, types=["turn.started"], turn_id=self.turn_id
            )
            if found and isinstance(found[0].payload, TurnStarted):
                earlier = found[0].payload.trace_context
        part = TurnPart(self.session_id, self.turn_id, started, earlier)
        for tracer in tracers:
            try:
                context = tracer(part)
            except Exception:
                log.exception("a turn tracer failed on turn %s of %s", self.turn_id, self.session_id)
                continue
            if context is not None:
                return started.model_copy(update={"trace_context": context})
        return started

    async def commit(self, payloads: Sequence[Payload], *, patch: SessionPatch | None = None, **changes: Any) -> None:
        """Write and wait (not as part of the turn's chain: an end is recorded even after a failed step)."""
        await self.emitter.commit(self.write(payloads, patch=patch, **changes))


class _Sink:
    """What the models adapter commits through: durable steps with their usage and context fill, written as
    writes of the turn by the session's emitter (which orders, pipelines and remembers the first failure)."""

    def __init__(self, turn: _Turn) -> None:
        self._turn = turn

    def commit(
        self, payloads: Sequence[Payload], messages: Sequence[JsonValue] = (), *, wait: bool = True
    ) -> Awaitable[object]:
        # Not a coroutine: the write is submitted here, and what is returned is the emitter's own future of it
        # (or one that is done), which the adapter awaits without a task of its own.
        emitter = self._turn.emitter
        if not payloads and not messages:
            return emitter.barrier() if wait else _done()
        turn = self._turn
        usage: list[UsageEntry] = []
        fields: dict[str, Any] = {}
        said: list[Payload] = []
        for payload in payloads:
            if isinstance(payload, CompletionFinished):
                turn.usage = turn.usage + payload.usage
                if (unpriced := turn.unpriced(payload)) is not None:
                    said.append(unpriced)
                usage.append(
                    UsageEntry(
                        turn_id=turn.turn_id,
                        run_id=turn.run_id,
                        role=turn.session.role,
                        model=payload.model,
                        usage=payload.usage,
                    )
                )
                fields["context_fill"] = _measured(payload)
            elif isinstance(payload, AssistantMessage) and payload.text:
                fields["last_text"] = displayable(payload.text)
        patch = SessionPatch(**fields) if fields else None
        write = turn.write([*payloads, *said], messages=messages, patch=patch, usage=usage)
        leases = leases_of(turn.runtime)
        if leases is not None and not leases.holds(turn.session_id):
            return self._once_held(write)  # whatever the write: nothing is deferred or pipelined past a lost lease
        if wait and _answers_only(payloads):
            # A response without tool calls: nothing runs on it, so nothing waits for it to be durable. It goes
            # to the store with the turn's next write, which is normally its end (`_end` waits for both and
            # records a failure of either), or the opening of another request.
            emitter.submit(write, turn=True, defer=math.inf)
            turn.owed = True
        elif wait:
            # The write runs to its end whoever waits for it (the adapter shields it: a durable step is all or
            # nothing).
            stored = emitter.submit(write, turn=True)
            if usage and (reason := turn.over_limit()) is not None:
                return _stop(turn, stored, reason)  # a response that calls tools: they do not run
            return stored
        else:  # the opening of a model request: it may share its commit with the response
            emitter.submit(write, turn=True, defer=GROUP_COMMIT_SECONDS)
        return _done()

    async def _once_held(self, write: Write) -> object:
        """Submit the turn's `write` (a response, tool results) once the store says this engine still holds the
        lease: the local view is no longer sure (a long model request or tool, a paused process), and another
        engine may have continued the turn meanwhile, which must then be its only writer (this one is cut off)."""
        turn = self._turn
        await ensure_held(turn.runtime, turn.session_id, turn.take)
        return await turn.emitter.submit(write, turn=True)

    def stream(self, payload: Payload) -> None:
        self._turn.emitter.stream(payload, self._turn.turn_id)


class LimitReached(Exception):
    """A turn reached a limit of its role (`AgentDefinition.limits`): the run stops, and the turn fails."""


async def _stop(turn: _Turn, stored: Awaitable[object], reason: str) -> object:
    """Wait for the response that reached a limit to be stored, then stop the run before its tools run."""
    await stored
    turn.stopped = reason
    raise LimitReached(reason)


def _done() -> asyncio.Future[object]:
    done: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    done.set_result(None)
    return done


def _answers_only(payloads: Sequence[Payload]) -> bool:
    """Whether `payloads` are a model response that ended normally and calls no tool."""
    finished = False
    for payload in payloads:
        if isinstance(payload, ToolCall):
            return False
        if isinstance(payload, CompletionFinished):
            finished = payload.finish_reason not in ("interrupted", "error")
    return finished


def _measured(payload: CompletionFinished) -> dict[str, JsonValue]:
    return ContextFill(
        state="measured",
        tokens=payload.context_tokens if payload.context_tokens is not None else payload.usage.input_tokens,
        model=payload.model,
        window=payload.context_window,
        window_source=payload.window_source,
        at=datetime.now(UTC).isoformat(),
    ).stored()


def restart_note(alive: Sequence[SessionRecord]) -> str:
    """The engine's note to a turn it continues after a restart."""
    if alive:
        children = "; ".join(f"{c.name} ({c.id}, {c.status})" for c in alive)
        subagents = f"These sub-agents of yours are still alive: {children}."
    else:
        subagents = "You have no sub-agents still running."
    return (
        "[agentwatch] The engine running this turn stopped in the middle of it (a restart, a deploy, or its "
        "process died), so the turn was cut off and is now continued, here or by another engine. Tool calls "
        "that were in flight are gone: each is reported to you as interrupted and none "
        f"was run again. {subagents} Check what is already done before redoing anything, then carry on."
    )


async def run_plan(
    runtime: Runtime,
    emitter: SessionEmitter,
    session: SessionRecord,
    plan: Plan,
    *,
    cut_off: Callable[[], bool] = lambda: False,
) -> bool:
    """Run one turn (or one continuation of it). Returns True when the turn was stopped by someone.

    A cancellation is a stop (recorded: the turn ends `cancelled`) unless `cut_off()` says the turn was cut
    off (a shutdown, a lost lease): then nothing is recorded and the cancellation goes on, so the turn stays
    `running` and is continued by whichever engine owns the session next.
    """
    definition = runtime.roster.get(session.role)  # (the driver runs only sessions whose role resolves)
    turn_id = session.current_turn_id if plan.kind != "input" and session.current_turn_id else new_id("trn")
    run_id = await billed_run(runtime, session, trigger=plan.kind, turn_id=turn_id, inputs=plan.inputs)
    turn = _Turn(runtime, emitter, session, definition, turn_id, run_id, take=_take(runtime, session.id))
    emitter.touch_seconds = stream_touch_seconds(runtime.stuck_after(session.role))  # (its role's, as read now)
    try:
        try:
            # Read once, before the start is recorded (which adds no messages): the compaction check needs it.
            history = emitter.history(session)
            if history is None:
                # Model messages are only ever written with the events of a turn: a session without events yet
                # has none (a new session's first turn reads nothing).
                history = [] if session.last_seq == 0 else await runtime.store.read_messages(session.conversation_id)
                emitter.remember_history(session, history)
            prompt = await _begin(turn, plan, history)
            if prompt is _INTERRUPTED:
                return False
            if plan.kind != "input":
                turn.spent_before = await turn_spent(runtime.store, session.id, turn_id)  # (its earlier parts)
            answers = _answers(plan.requests)
            results = await _results_left(runtime, session.id, turn_id) if plan.kind == "continue" else []
            turn.stopped = turn.over_limit()
            if turn.stopped is not None:
                await _refuse(turn, history, answers, results)
                return False
            turn_input = TurnInput(
                model=session.model_override or definition.model or "",
                instructions=definition.instructions,
                history=history,
                prompt=prompt if isinstance(prompt, str) else None,
                tools=[*_tool_specs(turn), *await _server_tool_specs(turn)],
                answers=answers,
                results=results,
                max_requests=definition.limits.requests - turn.spent_before.requests,
                conversation_id=session.conversation_id,
            )
            result = await run_turn(turn_input, _Sink(turn), models=runtime.models)
            if turn.stopped is not None:
                result = replace(result, error=turn.stopped)
        except asyncio.CancelledError:
            if cut_off():
                raise  # a shutdown or a lost lease, not a stop: the turn stays running and is continued
            await _end_stopped(turn, runtime.stop_reason(session.id))
            return True
        except LeaseLost:
            raise  # cut off: the engine holding the lease now continues the turn, and nothing more is written here
        except Exception as exc:  # a fault outside the model: the turn fails, the engine goes on
            result = TurnResult(outcome="failed", output=None, usage=turn.usage, error=f"{type(exc).__name__}: {exc}")
        await _finish(turn, result)
        return False
    finally:
        emitter.end_turn()


_INTERRUPTED = object()


def _take(runtime: Runtime, session_id: str) -> int | None:
    """The take of the session's lease a turn starting now runs under (0, which no take is, when the engine
    holds none: the turn then writes nothing); None for a runtime without leases."""
    leases = leases_of(runtime)
    return None if leases is None else leases.take(session_id) or 0


async def _refuse(
    turn: _Turn, history: Sequence[JsonValue], answers: Sequence[ToolAnswer], stored: Sequence[ToolResult]
) -> None:
    """End a turn that reached a limit of its role before its first model request. The calls a continued turn
    finds open get their results first, so its record ends with no call unanswered: a person's answer to a
    question (or a denial) is kept as the call's result, which the agent reads when it goes on with a new input;
    a call that ended before a restart keeps its `stored` result; the rest (approved calls, calls a restart cut
    off) are `interrupted`, as a run stopped at a limit writes them."""
    results, closing = close_open_calls(history, answers=answers, results=stored)
    if closing:
        await turn.commit(results, messages=closing)
    assert turn.stopped is not None
    await _finish(turn, TurnResult(outcome="failed", output=None, usage=turn.usage, error=turn.stopped))


async def _results_left(runtime: Runtime, session_id: str, turn_id: str) -> list[ToolResult]:
    """The `tool.result`s a turn that was cut off stored since its last model response: those of the calls that
    ended beside calls still running (each is stored as it ends), which the continued turn gives back to the
    model rather than `interrupted`."""
    kinds = ["tool.result", "completion.finished"]
    newest_first = await runtime.store.read_events_backward(session_id, limit=1000, types=kinds, turn_id=turn_id)
    results: list[ToolResult] = []
    for event in newest_first:
        if not isinstance(event.payload, ToolResult):
            break  # the response that made the calls
        results.append(event.payload)
    return results[::-1]


async def _begin(turn: _Turn, plan: Plan, history: Sequence[JsonValue]) -> str | object | None:
    """Record the start of the turn; returns the prompt to add (None for none), or _INTERRUPTED."""
    session, definition = turn.session, turn.definition
    instructions = definition.instructions
    prompt_hash = hashlib.sha256(instructions.encode()).hexdigest()
    stored_hash = session.settings.get("system_prompt_hash")
    started = TurnStarted(
        trigger=plan.kind,
        attempt=1,
        model=session.model_override or definition.model,
        role=session.role,
        system_prompt_hash=prompt_hash,
        system_prompt=None if stored_hash == prompt_hash else instructions,
        run_id=turn.run_id,
    )
    settings = {**session.settings, "system_prompt_hash": prompt_hash}
    if plan.kind == "input":
        text = "\n\n".join(i.text for i in plan.inputs)
        summary = await _compaction_summary(turn, history)
        messages = [UserMessage(text=i.text, origin=i.origin, meta=i.meta) for i in plan.inputs]
        await turn.begin(
            started,
            messages,
            patch=SessionPatch(
                status="running", current_turn_id=turn.turn_id, turn_attempts=1, error=None, settings=settings
            ),
            inputs_take=[i.id for i in plan.inputs],
        )
        return f"{summary}\n\n{text}" if summary else text
    if plan.kind == "answer":
        await turn.begin(
            started.model_copy(update={"attempt": max(session.turn_attempts, 1)}),
            [],
            patch=SessionPatch(status="running", settings=settings),
        )
        return None
    # continue after a restart: its tool calls in flight are reported interrupted, so requests they opened are moot
    await _dismiss_interrupted(turn)
    limit = definition.resolved_sessions(turn.runtime.config.sessions).continue_after_restart
    continued = max(session.turn_attempts, 1) - 1
    if continued >= limit:
        reason = (
            "cut off by a restart; continuing is turned off for this role"
            if limit == 0
            else f"cut off by a restart {continued + 1} times (continue_after_restart is {limit})"
        )
        said = None
        if session.source == "chat":  # a person is talking to it: the chat itself says what became of the turn
            said = f"[agentwatch] This turn was not continued: it was {reason}. Send your message again to go on."
            notice = RuntimeNotice(type="runtime.warning", message=said, source="restart")
            await turn.commit([notice])
        ended = TurnEnded(outcome="interrupted", reason=reason)
        await _end(turn, "interrupted", ended, error="Interrupted", last_text=said)
        return _INTERRUPTED
    alive = await turn.runtime.live_children(session.id)
    note = restart_note(alive)
    attempt = continued + 2
    await turn.begin(
        started.model_copy(update={"trigger": "continue", "attempt": attempt}),
        [UserMessage(text=note, origin=Origin(kind="engine"), meta=True)],
        patch=SessionPatch(status="running", turn_attempts=attempt, settings=settings),
    )
    return note


async def _dismiss_interrupted(turn: _Turn) -> None:
    """Dismiss the requests still pending of a turn that was cut off (their tool calls were interrupted)."""
    requests = await turn.runtime.store.list_requests(session_id=turn.session_id, status="pending", limit=1000)
    pending = [r for r in requests if r.turn_id == turn.turn_id]
    if pending:
        reason = "its tool call was interrupted when the turn was cut off"
        await turn.commit(
            [RequestDismissed(request_id=r.id, reason=reason) for r in pending],
            requests_close=[RequestClose(request_id=r.id, status="dismissed", by="agentwatch") for r in pending],
        )


async def _compaction_summary(turn: _Turn, history: Sequence[JsonValue]) -> str | None:
    """When the conversation was just compacted, the summary that opens the next prompt."""
    store = turn.runtime.store
    # Compacting marks the session's context fill `compacted`, and only a model response of a later turn
    # marks it otherwise, after that turn stored its first message: an empty history with any other mark
    # (or none) is a conversation that was never compacted, and there is no summary to look for.
    fill = ContextFill.read(turn.session.context_fill)
    if history or fill is None or fill.state != "compacted":
        return None
    events = await store.read_events(
        turn.session_id, types=["compaction.applied"], conversation_id=turn.session.conversation_id, limit=1
    )
    if not events or not isinstance(events[0].payload, CompactionApplied):
        return None
    summary = events[0].payload.summary
    return f"[agentwatch] Summary of the conversation so far (earlier messages were compacted):\n{summary}"


def _tool_specs(turn: _Turn) -> list[ToolSpec]:
    specs = []
    approval = set(turn.definition.approval_tools)
    for name in turn.runtime.tools_for(turn.session, turn.definition):
        tool = turn.runtime.tools.get(name)
        if tool is None:
            continue  # the roster already reported it; the model simply does not get it
        if turn.session.is_observer and (tool.asks_user or tool.requires_approval or name in approval):
            continue  # an observer holds no consent: it is given no tool that waits on a person
        specs.append(
            ToolSpec(
                name=tool.name,
                description=tool.description,
                parameters=tool.parameters,
                run=_runner(turn, tool),
                check=_checker(turn, tool.name, tool.check_args),
                requires_approval=tool.requires_approval or name in approval,
                asks_user=tool.asks_user,
            )
        )
    return specs


async def _server_tool_specs(turn: _Turn) -> list[ToolSpec]:
    """The tools of the role's MCP servers (each connected on first use), every call decided like any tool's."""
    servers = turn.definition.mcp_servers
    if not servers:
        return []
    listed = await tool_servers(turn.runtime).tools_for(turn.session, servers, turn.commit)
    approval = set(turn.definition.approval_tools)
    return [
        ToolSpec(
            name=tool.name,
            description=tool.description,
            parameters=tool.parameters,
            run=_gated(turn, tool.name, lambda context, args, call=tool.call: call(args)),
            check=_checker(turn, tool.name, tool.check_args),
            requires_approval=tool.name in approval,
        )
        for tool in listed
        if not (turn.session.is_observer and tool.name in approval)  # (an observer holds no consent)
    ]


def _runner(turn: _Turn, tool: Tool) -> Any:
    async def call(context: ToolContext, args: dict[str, Any]) -> JsonValue:
        caller = Caller(turn.session_id, turn.turn_id, context.tool_call_id, turn.session.scope, turn.run_id)
        return await tool.handler(turn.runtime, caller, args)

    return _gated(turn, tool.name, call)


def _gated(turn: _Turn, name: str, call: Any) -> Any:
    """`call`, run only once this engine holds the session and the policy chain allows the call."""

    async def run(context: ToolContext, args: dict[str, Any]) -> JsonValue:
        # Everything the turn wrote is durable before a tool runs: a call's response was waited for already, but
        # an answer turn's start is deferred, and an approved call ran with nothing durable saying the turn had
        # resumed (a crash then let the next engine run it again, and watchers saw nothing while it ran).
        await turn.emitter.barrier()
        await ensure_held(turn.runtime, turn.session_id, turn.take)  # leases: never run a tool another engine may own
        await _allowed(turn, name, args)
        # (Its result is written through the sink, which confirms the lease first when the local view is no
        # longer sure: a long tool, or a paused process.)
        result: JsonValue = await call(context, args)
        return result

    return run


def _checker(turn: _Turn, name: str, check_args: Callable[[dict[str, Any]], None]) -> Any:
    """What a call a person is to approve goes through first (`ToolSpec.check`): its arguments, checked as the
    tool checks them (`check_args`: by its argument model, or a server's `inputSchema`), then the policy chain.
    A call that could not run fails at once, as any call with bad arguments does, and nobody is asked."""

    async def check(context: ToolContext, args: dict[str, Any]) -> None:
        check_args(args)  # (first: the policies decide on calls that could run)
        await _allowed(turn, name, args)

    return check


async def _allowed(turn: _Turn, name: str, args: dict[str, Any]) -> None:
    """Raise `ToolRefused` unless the policy chain allows the call of `name` with `args`."""
    verdict = await turn.runtime.policy.decide(
        ToolRequest(
            name,
            args,
            session_id=turn.session_id,
            role=turn.session.role,
            grant=frozenset(turn.definition.grant),
        )
    )
    if verdict.decision != "allow":
        raise ToolRefused(f"{name} was not allowed ({verdict.decision}): {verdict.reason or 'by policy'}")


def _answers(requests: Sequence[RequestRecord]) -> list[ToolAnswer]:
    answers = []
    for request in requests:
        if request.tool_call_id is None:
            continue
        if request.status == "dismissed":
            answers.append(ToolAnswer(request.tool_call_id, approved=False, message="The request was dismissed."))
        elif request.kind == "approval":
            approved, message = _approval(request.answer)
            answers.append(ToolAnswer(request.tool_call_id, approved=approved, message=message))
        elif request.kind == "oauth":  # approved: the call runs again (with the token, when one was given)
            declined = None if read_oauth_answer(request.answer).approved else "Authorization was declined."
            answers.append(ToolAnswer(request.tool_call_id, approved=declined is None, message=declined))
        else:
            answers.append(ToolAnswer(request.tool_call_id, value=request.answer))
    return answers


def _approval(answer: JsonValue) -> tuple[bool, str | None]:
    """The verdict of a stored approval answer; one that gives none (only a database written before answers
    were checked holds such) denies the call."""
    return read_approval(answer) or (False, None)


async def _finish(turn: _Turn, result: TurnResult) -> None:
    if result.outcome == "completed":
        session = turn.session
        # Chats, the boss and observer agents live on between turns; a task is done when its turn is.
        status: SessionStatus = "idle" if lives_on(session) else "completed"
        ended = TurnEnded(outcome="completed", usage=result.usage)
        await _end(turn, status, ended, last_text=result.output)
    elif result.outcome == "paused":
        await _pause(turn, result)
    else:
        ended = TurnEnded(outcome="failed", error=result.error, usage=result.usage)
        await _end(turn, "failed", ended, error=result.error or "failed")


async def _end(
    turn: _Turn, status: SessionStatus, ended: TurnEnded, *, error: str | None = None, last_text: str | None = None
) -> None:
    fields: dict[str, Any] = {
        "status": status,
        "current_turn_id": None,
        "turn_attempts": 0,
        "error": displayable(error) if error else error,
    }
    if last_text:
        fields["last_text"] = displayable(last_text)
    await _release_held(turn)  # before the end is seen: whoever waits on this turn finds them with a person
    if turn.owed:
        # The last response was not waited for: the end shares its commit, as a write of the turn, so a failure
        # of either is the turn's, and the turn then ends failed.
        turn.owed = False
        try:
            await turn.emitter.commit(turn.write([ended], patch=SessionPatch(**fields)), turn=True)
        except Exception as exc:
            if isinstance(exc, LeaseLost):
                raise
            error = f"{type(exc).__name__}: {exc}"
            status, ended = "failed", TurnEnded(outcome="failed", error=error, usage=ended.usage)
            fields = {"status": status, "current_turn_id": None, "turn_attempts": 0, "error": displayable(error)}
            await turn.commit([ended], patch=SessionPatch(**fields))
    else:
        await turn.commit([ended], patch=SessionPatch(**fields))
    await _tell_parent(turn, status)
    _release_servers(turn, status)


async def _release_held(turn: _Turn) -> None:
    """Hand the requests of this agent's sub-agents held for it to a person: the turn ends without answering
    them (only an agent that may spawn has sub-agents)."""
    if "spawn" not in turn.definition.grant:
        return
    try:
        await release_held(turn.runtime, turn.session_id)
    except AgentwatchError as exc:  # they still reach a person by their deliver_at
        log.warning("handing %s's sub-agents' held requests to a person failed: %s", turn.session_id, exc)


def _release_servers(turn: _Turn, status: SessionStatus) -> None:
    """A session that ended lets its tool servers go (a stdio server's process ends); a later turn reconnects."""
    if status in TERMINAL_STATUSES and turn.definition.mcp_servers:
        tool_servers(turn.runtime).release(turn.session_id)


async def _tell_parent(turn: _Turn, status: SessionStatus) -> None:
    parent_id = turn.session.parent_id
    # An observer agent's parent is the agent it watches, which must not hear about the observer's turns.
    if parent_id is None or status not in TERMINAL_STATUSES or turn.session.is_observer:
        return
    try:
        parent = await turn.runtime.driver(parent_id)
        await parent.commit(
            Write(
                parent_id, events=[NewEvent(SubtaskEnded(child_session_id=turn.session_id, status=status))], touch=False
            )
        )
    except AgentwatchError:
        pass  # the parent was reaped: nobody to tell


async def _parent_in_turn(turn: _Turn) -> bool:
    """Whether the session's parent is in a turn (running, or paused on a request of its own), so it may answer
    a request held for it: a parent between turns has none to answer in (and the end of the turn it is in hands
    the requests held for it to a person, see `_release_held`)."""
    assert turn.session.parent_id is not None
    try:
        parent = await turn.runtime.store.get_session(turn.session.parent_id)
    except NotFound:
        return False  # reaped: nobody to hold it for
    return parent.status in ("running", "awaiting_input")


async def _pause(turn: _Turn, result: TurnResult) -> None:
    session = turn.session
    hold = turn.runtime.config.sessions.hold_for_parent_seconds
    # An observer's parent is the agent it watches, which must never answer for it: its requests go to a person.
    held = session.parent_id is not None and not session.is_observer and hold > 0 and await _parent_in_turn(turn)
    deliver_at = datetime.now(UTC) + timedelta(seconds=hold) if held else None
    drafts: list[RequestDraft] = []
    opened: list[Payload] = []
    for call in result.pending:
        request_id = new_id("req")
        choices = choices_of(call.input) if call.kind == "question" else None
        signal: Payload | None = None
        if call.kind == "question":
            question = call.question or str(call.input)
            summary, questions = question, [question]
        elif call.kind == "oauth":
            summary, questions, signal = _authorization(call)
        else:
            summary, questions = f"approve {call.tool_name}({_brief(call.input)})", None
        draft = RequestDraft(
            id=request_id,
            kind="choice" if choices else call.kind,
            summary=summary[:500],
            questions=questions,
            options=choices[0] if choices else None,
            tool_call_id=call.tool_call_id,
            turn_id=turn.turn_id,
            waits_on="parent" if held else "person",
            deliver_at=deliver_at,
            body={"tool_name": call.tool_name, "input": call.input, **(call.detail or {})},
        )
        drafts.append(draft)
        opened.append(
            RequestOpened(
                request_id=request_id,
                kind=draft.kind,
                summary=draft.summary,
                questions=questions,
                options=draft.options,
                multiple=bool(choices and choices[1]),
                tool_call_id=call.tool_call_id,
                waits_on=draft.waits_on,
                deliver_at=deliver_at,
            )
        )
        if signal is not None:
            opened.append(signal)
    ended = TurnEnded(outcome="paused", reason=f"waiting on {len(drafts)} request(s)", usage=result.usage)
    await turn.commit(
        [*opened, ended],
        patch=SessionPatch(status="awaiting_input", last_text=displayable(result.output))
        if result.output
        else SessionPatch(status="awaiting_input"),
        requests_open=drafts,
    )


async def _end_stopped(turn: _Turn, by: str) -> None:
    await _release_held(turn)
    await end_stopped_turn(turn.runtime, turn.emitter, turn.session_id, turn.turn_id, by, usage=turn.usage)
    await _tell_parent(turn, "cancelled")
    _release_servers(turn, "cancelled")


async def end_stopped_turn(
    runtime: Runtime,
    channel: _Committer,
    session_id: str,
    turn_id: str | None,
    by: str,
    *,
    usage: Usage | None = None,
    status: SessionStatus | None = None,
) -> None:
    """Record a stop through the session's `channel` (its driver or emitter): pending requests of the turn
    are dismissed, the turn ends `cancelled`. Without `usage` (the turn was not running here: its owner is
    gone, or it is paused), what the turn left is read back: the tool calls it left open get their
    `interrupted` results, as a run cut off writes them, and its usage is that of its model requests since it
    last paused. With `status` (the session's as the stopper read it), the write fails with `Conflict` when the
    status moved on meanwhile (another stop ended the turn, or it resumed), as it does when a request it closes
    was answered meanwhile: what was read is stale."""
    store = runtime.store
    requests = await store.list_requests(session_id=session_id, limit=1000)
    pending = [r for r in requests if r.turn_id == turn_id]
    reason = f"stopped by {by}"
    events: list[Payload] = [RequestDismissed(request_id=r.id, reason=reason) for r in pending]
    messages: list[JsonValue] = []
    if usage is None and turn_id is not None:
        kinds = ["completion.finished", "tool.call", "tool.result", "turn.ended"]
        left = await store.read_events(session_id, limit=10_000, types=kinds, turn_id=turn_id)
        # What the turn spent since it last paused (a pause's `turn.ended` counted what came before).
        since = max((e.seq for e in left if isinstance(e.payload, TurnEnded)), default=0)
        spent = (e.payload.usage for e in left if isinstance(e.payload, CompletionFinished) and e.seq > since)
        usage = sum(spent, Usage())
        called = {e.payload.tool_call_id for e in left if isinstance(e.payload, ToolCall)}
        if called - {e.payload.tool_call_id for e in left if isinstance(e.payload, ToolResult)}:
            # (only then the model layer: a command that stops a paused turn loads none)
            session = await store.get_session(session_id)
            stored = [e.payload for e in left if isinstance(e.payload, ToolResult)]
            history = await store.read_messages(session.conversation_id)
            results, messages = close_open_calls(history, results=stored)
            events = results + events
    events.append(TurnEnded(outcome="cancelled", reason=reason, usage=usage or Usage()))
    await channel.commit(
        Write(
            session_id,
            events=[NewEvent(e, TurnId(turn_id) if turn_id else None) for e in events],
            session=SessionPatch(status="cancelled", current_turn_id=None, turn_attempts=0),
            requests_close=[RequestClose(request_id=r.id, status="dismissed", by=by) for r in pending],
            messages=messages,
            expect_status=None if status is None else [status],
        )
    )


def _authorization(call: PendingCall) -> tuple[str, list[str], AuthRequired]:
    """What an `oauth` request asks, and the `auth.required` that follows its `request.opened`."""
    detail = call.detail or {}
    server, where = str(detail.get("server")), detail.get("resource_metadata") or detail.get("url")
    url = where if isinstance(where, str) else None
    signal = AuthRequired(provider=f"mcp:{server}", url=url, message=f"{call.tool_name} needs authorization")
    question = (
        f"Tool server {server!r} needs authorization for {call.tool_name}"
        + (f" (see {url})" if url else "")
        + '. Answer {"token": "..."} to send that bearer token, "done" once authorized otherwise, or "no" to give up.'
    )
    return f"authorize tool server {server!r} for {call.tool_name}", [question], signal


def _brief(value: dict[str, JsonValue]) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in value.items())
    return text if len(text) <= 200 else text[:200] + "…"
