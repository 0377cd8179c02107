"""OpenTelemetry traces of what agents do, projected from the log: each turn, model request and tool call a span.

Off by default. `[tracing] enabled = true` in agentwatch.toml, or `AGENTWATCH_TRACING=1`, turns it on for every
engine opened with the default extensions (`agentwatch serve`, `run`, `mcp`, and `Engine.open()` in Python); in
Python, `Tracing(tracer_provider=...)` among an engine's extensions turns it on with a provider of your own.

The spans follow OpenTelemetry's conventions for generative AI:

- `invoke_agent <role>` for each turn, from its `turn.started` to its `turn.ended`: the role (`gen_ai.agent.name`),
  the session (`gen_ai.agent.id`), the conversation, the turn's trigger, outcome and usage; an error status when
  the turn failed. Retries, reroutes, warnings, errors and requests to a person are events on it. A sub-agent's
  first turn is a child of the tool call that spawned it (`agent_task`, `agent_create`) when its parent runs in
  the same engine: one trace for the work an agent delegated.
- `workflow <name>` (`heartbeat`, `hook`) for each run this engine takes, with its phases (`phase <label>`),
  tasks (`task <label>`) and back-offs as children; a task's agent's first turn is a child of its task, so a
  workflow is one trace down to each model request and tool call. A run that ends other than `completed` or
  `skipped` has an error status.
- `chat <model>` for each model request (the model's name without its provider), a child of its turn, from
  `completion.started` to `completion.finished`, of kind CLIENT: the model and provider, the conversation, the
  finish reason, the tokens.
- `execute_tool <tool>` for each tool call, a child of its turn, from `tool.call` to `tool.result`: the tool and
  the call id; an error status when the call failed, was denied or was cut off. A call that waited on a person is
  two: one of the paused turn (status `waiting`), and one of the turn the answer resumed, from its start to the
  call's result (an approved call runs then).

A span that ended in an error has an error status saying why, and `error.type` saying which: a tool call's status
(`error`, `denied`, `interrupted`), a response's finish reason (`error`, `interrupted`), `failed` for a failed turn,
the turn's outcome for a request or call its turn ended while open, a run's or its span's status (`failed`,
`timed_out`, `cancelled`, `interrupted`), `cut_off` for what was open as the engine closed, and `_OTHER` for what a
later request or turn found open.

What a span says is what the log says, and when: a ThreadObserver makes the spans from the events this engine
wrote, once each is durable, and times them by the events' own times. One exception: a turn's span starts as the
engine begins to record the part's start (a turn tracer, `Runtime.turn_tracers`), so that its `turn.started`
keeps the span's trace context (`trace_context`, a W3C `traceparent`). No text of the conversation (prompts,
answers, tool arguments or results) goes into a span. A turn cut off by a restart and continued by another engine
is two `invoke_agent` spans, each made by the engine that ran that part (the second with trigger `continue`); one
a person's answer resumed has trigger `answer`. Each part links to the part before it (`agentwatch.link`
`resumes`), as that part's stored `turn.started` names it: across restarts and engines too. A turn cut off when
this engine closes ends its span with an error that says so.

Which provider: the one given; else the process's own when an OpenTelemetry SDK set one up (your code, or
`opentelemetry-instrument`); else one made here that exports over OTLP/HTTP as the standard `OTEL_EXPORTER_OTLP_*`
variables say (to `http://localhost:4318` by default), as service `OTEL_SERVICE_NAME` (default `agentwatch`),
flushed when the engine closes (for 3 s at most: what a collector that is down did not take by then is lost). It
needs the SDK and the exporter: `pip install 'agentwatch[tracing]'`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import weakref
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from agentwatch.errors import UserError
from agentwatch.events import (
    CompletionFinished,
    CompletionStarted,
    Event,
    ModelReroute,
    RequestOpened,
    RuntimeNotice,
    RuntimeRetry,
    SubtaskStarted,
    ToolCall,
    ToolResult,
    TurnEnded,
    TurnStarted,
    Usage,
)

if TYPE_CHECKING:
    from opentelemetry.trace import Link, Span, SpanContext, Tracer, TracerProvider

    from agentwatch.runtime.runs import RunMark
    from agentwatch.runtime.services import Runtime, TurnPart

__all__ = ["Tracing"]

log = logging.getLogger(__name__)

INSTRUMENTATION: Final = "agentwatch"
SPAWNS_KEPT: Final = 1000
"""How many spawned sub-agents wait for their first turn to join their spawner's trace (the oldest go first)."""
FLUSH_SECONDS: Final = 3.0
"""How long a closing engine waits for its last spans to be sent."""
_PROVIDER_NAMES: Final = {"openai-chat": "openai", "openai-responses": "openai"}
"""The conventions' names of the ref prefixes that are not (the rest are their own: `openai`, `anthropic`, ...)."""
_OTHER: Final = "_OTHER"
"""`error.type` of what a later request or turn found open (the conventions' word for an error of no other class)."""
CUT_OFF: Final = "the engine closed while this was running; an engine that opens the store continues the turn"


class Tracing:
    """The engine extension that makes the spans (see the module docs)."""

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self._given = tracer_provider
        self._made: Any = None  # the SDK provider made here (flushed and shut down at close)
        self._provider: Any = None
        self._tracer: Tracer | None = None
        self._sessions: weakref.WeakSet[_SessionSpans] = weakref.WeakSet()  # (a driver let go drops its own)
        self._spawned: dict[str, SpanContext] = {}  # sub-agent session -> the span of the call that spawned it
        # session -> the span of its turn's part whose start is being recorded, and the trace context that names it
        self._opening: dict[str, tuple[Span, str | None]] = {}
        self._runs: dict[str, Span] = {}  # the open spans of runs: a run's by its id, its spans' by theirs
        self.destination: str | None = None
        """Where the spans go, in words (None while off)."""

    @property
    def on(self) -> bool:
        """Whether this extension makes spans (it was given a provider, or the switch is on)."""
        return self._tracer is not None

    def install(self, engine: Runtime) -> None:
        if self._given is None and not engine.config.tracing.enabled:
            return  # off: nothing of OpenTelemetry is imported
        from importlib.metadata import version

        self._provider = self._given or self._process_provider()
        if self._given is not None:
            self.destination = "the tracer provider given"
        self._tracer = self._provider.get_tracer(INSTRUMENTATION, version("agentwatch"))
        engine.start_with_observer(self._observer)
        engine.run_listeners.append(self._run_mark)
        engine.turn_tracers.append(self._open_turn)

    def _process_provider(self) -> Any:
        """The process's SDK provider, or one made here that exports over OTLP/HTTP."""
        from opentelemetry import trace

        found = trace.get_tracer_provider()
        if hasattr(found, "force_flush"):  # an SDK's: someone set the process up already
            self.destination = "the OpenTelemetry SDK this process set up"
            return found
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import OTELResourceDetector, Resource
            from opentelemetry.sdk.trace import TracerProvider as SdkProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as exc:
            raise UserError(
                f"tracing is on ([tracing] enabled, AGENTWATCH_TRACING) but {exc.name} is not installed: "
                "pip install 'agentwatch[tracing]', or turn tracing off"
            ) from None
        resource = Resource.create({"service.name": INSTRUMENTATION}).merge(OTELResourceDetector().detect())
        self._made = SdkProvider(resource=resource, shutdown_on_exit=False)  # `close` flushes it, in bounded time
        self._made.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        # Each retry of an export is a warning of the exporter's; what is lost for good stays an error.
        logging.getLogger(OTLPSpanExporter.__module__).setLevel(logging.ERROR)
        self.destination = f"{_otlp_endpoint()} (OTLP/HTTP)"
        return self._made

    def _observer(self, session_id: str) -> _SessionSpans:
        assert self._tracer is not None
        spans = _SessionSpans(self._tracer, session_id, self._spawned, self._opening)
        self._sessions.add(spans)
        return spans

    def _open_turn(self, part: TurnPart) -> str | None:
        """Start the span of a part of a turn as the engine begins to record it, so that its `turn.started` keeps
        the span's trace context: the turn's next part links to it, in whichever engine runs that part."""
        if self._tracer is None:
            return None
        from opentelemetry import trace

        started = part.started
        name = f"invoke_agent {started.role}" if started.role is not None else "invoke_agent"
        spawner = self._spawned.pop(part.session_id, None)
        context = None
        if spawner is not None:  # a sub-agent's first turn: in the trace of the call that spawned it
            context = trace.set_span_in_context(trace.NonRecordingSpan(spawner))
        links: list[Link] = []
        earlier = _span_context(part.earlier) if part.earlier is not None else None
        if earlier is not None:
            links.append(trace.Link(earlier, {"agentwatch.link": "resumes"}))  # the part of the turn before
        span = self._tracer.start_span(name, context=context, links=links)
        traceparent = _traceparent(span)
        self._opening[part.session_id] = (span, traceparent)
        return traceparent

    def _run_mark(self, mark: RunMark) -> None:
        """A run's span (`<kind> <entity>`) and its spans (`<kind> <label>`) as the run takes them; a task's
        agent's first turn goes under its task."""
        tracer = self._tracer
        if tracer is None:
            return
        key = mark.span_id or mark.run_id
        if mark.what == "ended":
            span = self._runs.pop(key, None)
            if span is not None:
                span.set_attribute("agentwatch.run.status", mark.status or "")
                if mark.status not in ("completed", "skipped"):
                    _fail(span, f"it ended {mark.status}", mark.status or _OTHER)
                span.end(_nanoseconds(mark.at) if mark.at is not None else None)
            return
        from opentelemetry import trace

        parent = self._runs.get(mark.parent_span_id or mark.run_id) if mark.what == "opened" else None
        attributes: dict[str, Any] = {"agentwatch.run.id": mark.run_id, "agentwatch.run.kind": mark.kind}
        if mark.agent_id is not None:
            attributes["gen_ai.agent.id"] = mark.agent_id
        name = mark.label if mark.span_id is not None else (mark.label.partition(":")[2] or mark.label)  # (entity)
        span = tracer.start_span(
            f"{mark.kind} {name}",
            context=trace.set_span_in_context(parent) if parent is not None else None,
            start_time=_nanoseconds(mark.at) if mark.at is not None else None,
            attributes=attributes,
        )
        self._runs[key] = span
        if mark.agent_id is not None:
            _spawned_under(self._spawned, mark.agent_id, span)

    async def close(self) -> None:
        if self._tracer is None:
            return
        for spans in list(self._sessions):
            spans.cut_off()
        self._sessions.clear()
        self._opening.clear()  # parts whose start was never recorded: their spans are not exported
        for span in self._runs.values():  # runs cut off: they end `interrupted` (or lapse) in the store
            _fail(span, CUT_OFF, "cut_off")
            span.end()
        self._runs.clear()
        self._tracer = None
        provider = self._made or self._provider
        flush = getattr(provider, "shutdown" if self._made is not None else "force_flush", None)
        if flush is None:
            return
        # The exporter sends what is left (blocking I/O, retried while a collector does not answer): the engine
        # waits for it `FLUSH_SECONDS` at most, and a process that exits then loses the rest.
        done = threading.Event()

        def send() -> None:
            try:
                flush()
            except Exception as exc:
                log.warning("could not send the last spans: %s", exc)
            finally:
                done.set()

        threading.Thread(target=send, name="agentwatch-tracing-flush", daemon=True).start()
        if not await asyncio.to_thread(done.wait, FLUSH_SECONDS):
            log.warning("the last spans were not sent within %.0f s; is the trace collector up?", FLUSH_SECONDS)


@dataclass(eq=False)
class _SessionSpans:
    """One session's open spans (a ThreadObserver: `on_event` turns its events into spans)."""

    tracer: Tracer
    session_id: str
    spawned: dict[str, SpanContext]
    """Shared by the engine's sessions: the span a sub-agent's first turn is a child of, by its session."""
    opening: dict[str, tuple[Span, str | None]]
    """Shared by the engine's sessions: the span of the turn's part whose start is being recorded and the trace
    context that names it (as its `turn.started` does), by its session."""
    turn: Span | None = None
    turn_id: str | None = None
    """The id of the turn open here."""
    conversation_id: str | None = None
    """The conversation of the turn open here (its model requests are in it too)."""
    answered_at: int | None = None
    """When the turn open here began, when a person's answer resumed it (the calls it left them run then)."""
    chat: Span | None = None
    tools: dict[str, Span] = field(default_factory=dict)
    _closed: bool = False

    own_events_only = True
    """Another engine makes the spans of what it wrote."""

    def on_event(self, thread_id: str, event: Event) -> None:
        if self._closed:
            return  # what a closing engine still writes (its cut-off turns' ends) is past the last export
        payload = event.payload
        at = _nanoseconds(event.at)
        if isinstance(payload, TurnStarted):
            self._start_turn(event, payload, at)
        elif self.turn is None:
            return  # the rest of a turn this engine did not start here (a continuation makes its own)
        elif isinstance(payload, CompletionStarted):
            self._end_chat("a new model request began", _OTHER, at)
            attributes = {"gen_ai.operation.name": "chat", **_model_attributes(payload.model)}
            if self.conversation_id is not None:
                attributes["gen_ai.conversation.id"] = self.conversation_id
            self.chat = self._child(f"chat {attributes['gen_ai.request.model']}", at, attributes, client=True)
            self.chat.set_attribute("agentwatch.request_index", payload.request_index)
        elif isinstance(payload, CompletionFinished):
            if self.chat is not None:
                self.chat.set_attributes(_usage_attributes(payload.usage))
                if payload.finish_reason is not None:
                    self.chat.set_attribute("gen_ai.response.finish_reasons", [payload.finish_reason])
                if payload.finish_reason in ("interrupted", "error"):
                    _fail(self.chat, f"the response ended: {payload.finish_reason}", payload.finish_reason)
                self.chat.end(at)
                self.chat = None
        elif isinstance(payload, ToolCall):
            self.tools[payload.tool_call_id] = self._tool(payload.tool_name, payload.tool_call_id, at)
        elif isinstance(payload, ToolResult):
            span = self.tools.pop(payload.tool_call_id, None)
            if span is None and self.answered_at is not None:
                # A call its paused turn left to a person: it runs (or is answered) as the resumed turn begins.
                span = self._tool(payload.tool_name, payload.tool_call_id, self.answered_at)
            if span is not None:
                span.set_attribute("agentwatch.tool.status", payload.status)
                if payload.status != "ok":
                    _fail(span, f"the tool call ended {payload.status}", payload.status)
                span.end(at)
        elif isinstance(payload, TurnEnded):
            self._end_turn(payload, at)
        elif isinstance(payload, SubtaskStarted):
            _spawned_under(
                self.spawned, payload.child_session_id, self.tools.get(payload.tool_call_id or "", self.turn)
            )
        else:
            self._note(event, at)

    def on_subscribe(self, thread_id: str, request: Any, snapshot: Any) -> None:
        """Nothing to attach: spans go to the exporter."""

    def _start_turn(self, event: Event, payload: TurnStarted, at: int) -> None:
        if self.turn is not None:  # a turn that never ended here (its end was written elsewhere)
            self._close_all("a new turn started before this one's end reached this engine", _OTHER, at)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.id": self.session_id,
            "agentwatch.turn.id": event.turn_id or "",
            "agentwatch.turn.trigger": payload.trigger,
            "agentwatch.turn.attempt": payload.attempt,
        }
        if payload.role is not None:
            attributes["gen_ai.agent.name"] = payload.role
        self.turn_id, self.conversation_id = event.turn_id, event.conversation_id
        if event.conversation_id is not None:
            attributes["gen_ai.conversation.id"] = event.conversation_id
        if payload.model is not None:
            attributes.update(_model_attributes(payload.model))
        opened, named = self.opening.pop(self.session_id, (None, None))
        if opened is not None and payload.trace_context == named:
            opened.set_attributes(attributes)
            self.turn = opened
        else:  # a start whose span another turn tracer began: this one starts at the event
            name = f"invoke_agent {payload.role}" if payload.role is not None else "invoke_agent"
            self.turn = self.tracer.start_span(name, start_time=at, attributes=attributes)
        # The calls a person's answer lets run begin with the part it resumed (its span says when, on an SDK's).
        began = getattr(self.turn, "start_time", None)
        self.answered_at = (began if isinstance(began, int) else at) if payload.trigger == "answer" else None

    def _tool(self, name: str, tool_call_id: str, at: int) -> Span:
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": tool_call_id,
            "gen_ai.tool.type": "function",
        }
        return self._child(f"execute_tool {name}", at, attributes)

    def _child(self, name: str, at: int, attributes: dict[str, Any], *, client: bool = False) -> Span:
        from opentelemetry import trace

        assert self.turn is not None
        kind = trace.SpanKind.CLIENT if client else trace.SpanKind.INTERNAL
        return self.tracer.start_span(
            name, context=trace.set_span_in_context(self.turn), kind=kind, start_time=at, attributes=attributes
        )

    def _note(self, event: Event, at: int) -> None:
        """Put what the turn was told (a retry, a reroute, a notice, a request to a person) on its span."""
        payload = event.payload
        assert self.turn is not None
        if isinstance(payload, RuntimeRetry):
            attributes: dict[str, Any] = {"message": payload.message, "attempt": payload.attempt}
        elif isinstance(payload, ModelReroute):
            attributes = {"from_model": payload.from_model, "to_model": payload.to_model, "reason": payload.reason}
        elif isinstance(payload, RuntimeNotice):
            attributes = {"message": payload.message, "source": payload.source or ""}
        elif isinstance(payload, RequestOpened):
            attributes = {"request_id": payload.request_id, "kind": payload.kind, "waits_on": payload.waits_on}
        else:
            return
        self.turn.add_event(event.type, attributes, timestamp=at)

    def _end_turn(self, payload: TurnEnded, at: int) -> None:
        assert self.turn is not None
        turn = self.turn
        reason = f"the turn ended {payload.outcome}"
        if payload.outcome == "paused":  # its calls wait on a person: not failed, and not run yet
            self._end_tools(None, at)
        self._end_parts(reason, payload.outcome, at)
        turn.set_attribute("agentwatch.turn.outcome", payload.outcome)
        if payload.reason:
            turn.set_attribute("agentwatch.turn.reason", payload.reason)
        turn.set_attributes(_usage_attributes(payload.usage))
        if payload.outcome == "failed":
            _fail(turn, payload.error or reason, "failed")
        turn.end(at)
        self.turn = None

    def _end_chat(self, why: str, error_type: str, at: int | None) -> None:
        if self.chat is not None:
            _fail(self.chat, why, error_type)
            self.chat.end(at)
            self.chat = None

    def _end_parts(self, why: str, error_type: str, at: int | None) -> None:
        """End the turn's open request and tool calls with an error saying `why` (at `at`; None: now)."""
        self._end_chat(why, error_type, at)
        self._end_tools((why, error_type), at)

    def _end_tools(self, failed: tuple[str, str] | None, at: int | None) -> None:
        """End the open tool calls: failed (why, and `error.type`), or, with None, waiting on a person."""
        for span in self.tools.values():
            if failed is None:
                span.set_attribute("agentwatch.tool.status", "waiting")
            else:
                _fail(span, *failed)
            span.end(at)
        self.tools.clear()

    def _close_all(self, why: str, error_type: str, at: int | None) -> None:
        """End every open span, the turn's too, with an error saying `why`."""
        self._end_parts(why, error_type, at)
        if self.turn is not None:
            _fail(self.turn, why, error_type)
            self.turn.end(at)
            self.turn = None

    def cut_off(self) -> None:
        """The engine closes: end what is open, saying so."""
        self._close_all(CUT_OFF, "cut_off", None)
        self._closed = True


def _spawned_under(spawned: dict[str, SpanContext], session_id: str, span: Span) -> None:
    """Keep `span` as the one the first turn of `session_id` (a sub-agent, a run's task) goes under."""
    spawned[session_id] = span.get_span_context()
    while len(spawned) > SPAWNS_KEPT:  # sessions that never ran a turn here
        del spawned[next(iter(spawned))]


def _traceparent(span: Span) -> str | None:
    """The W3C `traceparent` that names `span` (None: a span of no trace, as a provider that makes none gives)."""
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent")


def _span_context(traceparent: str) -> SpanContext | None:
    """The span a stored W3C `traceparent` names (None: not a valid one)."""
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    context = trace.get_current_span(TraceContextTextMapPropagator().extract({"traceparent": traceparent}))
    found = context.get_span_context()
    return found if found.is_valid else None


def _otlp_endpoint() -> str:
    """Where the OTLP/HTTP exporter sends spans, as the standard variables say (its own default otherwise)."""
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if endpoint is None:
        endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318").rstrip("/") + "/v1/traces"
    return endpoint


def _nanoseconds(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000) * 1000


def _model_attributes(ref: str) -> dict[str, Any]:
    """`provider:model` as the conventions' request model and provider (named as they name it: OpenAI's APIs,
    `openai-chat:` and `openai-responses:`, are `openai`)."""
    provider, _, name = ref.partition(":")
    attributes: dict[str, Any] = {"gen_ai.request.model": name or ref}
    if name:
        attributes["gen_ai.provider.name"] = _PROVIDER_NAMES.get(provider, provider)
    return attributes


def _usage_attributes(usage: Usage) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
    }
    if usage.cost_usd is not None:
        attributes["agentwatch.usage.cost_usd"] = usage.cost_usd
    return attributes


def _fail(span: Span, description: str, error_type: str) -> None:
    """An error status saying `description`, and `error.type` (a few words, listed in the module docs)."""
    from opentelemetry.trace import Status, StatusCode

    span.set_status(Status(StatusCode.ERROR, description))
    span.set_attribute("error.type", error_type)
