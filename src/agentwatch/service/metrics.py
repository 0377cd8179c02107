"""Prometheus metrics of a service: `GET /metrics`, in the text format Prometheus scrapes.

What this service's engine did, counted from the events it wrote as they are handed out (a ThreadObserver beside
the broadcaster's), and what it holds now, read at each scrape. Every service counts its own: add them up in the
query (`sum by (role) (rate(agentwatch_turns_total[5m]))`). The labels are roles, models, tools and outcomes, names
the agent definitions give, so a service has few series: a call of a tool the engine does not have (a name a model
made up) is counted as tool `other`.

| metric | type | labels |
|---|---|---|
| `agentwatch_turns_total` | counter | `role`, `outcome` (completed, failed, cancelled, interrupted, paused) |
| `agentwatch_turn_seconds` | histogram | `role`: from a turn's start to its end, or to its pause |
| `agentwatch_model_requests_total` | counter | `model`, `finish_reason` |
| `agentwatch_model_request_seconds` | histogram | `model` |
| `agentwatch_tokens_total` | counter | `role`, `model`, `kind` (input, output) |
| `agentwatch_cost_usd_total` | counter | `role`, `model` (requests whose price is known) |
| `agentwatch_tool_calls_total` | counter | `tool` (or `other`), `status` (ok, error, denied, interrupted) |
| `agentwatch_tool_call_seconds` | histogram | `tool` |
| `agentwatch_model_retries_total` | counter | |
| `agentwatch_runtime_errors_total` | counter | `source` (model, tools, ...) |
| `agentwatch_person_requests_total` | counter | `kind`: requests put to a person (a held one once a person has it) |
| `agentwatch_turns_running` | gauge | turns running in this service now |
| `agentwatch_sessions_loaded` | gauge | sessions this service holds in memory (their drivers) |
| `agentwatch_draining` | gauge | 1 once the service was asked to stop |

Durations are between the times the events were stored (a call a person approved, from the start of the turn the
approval resumed, as it runs then): a model request's start is stored with its response when the model answers
within 20 ms, and at most 20 ms after it was sent otherwise (the turn's group commit), so short requests read
shorter than they were, by that much at most.

The path asks for a token as every other one does; a read-only token will do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agentwatch.events import (
    CompletionFinished,
    CompletionStarted,
    Event,
    RuntimeNotice,
    RuntimeRetry,
    ToolCall,
    ToolResult,
    TurnEnded,
    TurnStarted,
    asks_a_person,
)

__all__ = ["CONTENT_TYPE", "ServiceMetrics"]

CONTENT_TYPE: Final = CONTENT_TYPE_LATEST
_UNKNOWN: Final = "unknown"
_OTHER_TOOL: Final = "other"
_TURN_BUCKETS: Final = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, float("inf"))
_STEP_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, float("inf"))


class ServiceMetrics:
    """The service's metrics, in a registry of their own (not the process's: one process may serve several apps)."""

    def __init__(
        self,
        *,
        turns_running: Callable[[], int],
        sessions_loaded: Callable[[], int],
        draining: Callable[[], bool],
        known_tool: Callable[[str], bool] = lambda name: True,
        role_of: Callable[[str], Awaitable[str]] | None = None,
    ) -> None:
        """`known_tool` tells whether the engine has a tool of that name: a call of one it has not is counted as
        tool `other` (each name a model makes up would otherwise be series of its own). `role_of` reads a
        session's role, for a turn that ends where its start was not seen (a paused turn stopped once its
        session's driver was let go, or after a restart)."""
        self.known_tool = known_tool
        self._role_of = role_of
        self._lookups: set[asyncio.Task[None]] = set()
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.turns = Counter(
            "agentwatch_turns", "Turns that ended (or paused), by role and outcome.", ["role", "outcome"], registry=r
        )
        self.turn_seconds = Histogram(
            "agentwatch_turn_seconds",
            "How long turns ran, to their end or pause.",
            ["role"],
            buckets=_TURN_BUCKETS,
            registry=r,
        )
        self.requests = Counter(
            "agentwatch_model_requests",
            "Model requests answered, by model and finish reason.",
            ["model", "finish_reason"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "agentwatch_model_request_seconds",
            "How long model requests took.",
            ["model"],
            buckets=_STEP_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "agentwatch_tokens", "Tokens, by role, model and kind.", ["role", "model", "kind"], registry=r
        )
        self.cost = Counter(
            "agentwatch_cost_usd", "Spend in US dollars, where the price is known.", ["role", "model"], registry=r
        )
        self.tool_calls = Counter(
            "agentwatch_tool_calls", "Tool calls that ended, by tool and status.", ["tool", "status"], registry=r
        )
        self.tool_seconds = Histogram(
            "agentwatch_tool_call_seconds", "How long tool calls took.", ["tool"], buckets=_STEP_BUCKETS, registry=r
        )
        self.retries = Counter("agentwatch_model_retries", "Model requests sent again after a failure.", registry=r)
        self.errors = Counter(
            "agentwatch_runtime_errors", "Errors recorded on sessions, by source.", ["source"], registry=r
        )
        self.person_requests = Counter(
            "agentwatch_person_requests", "Questions and approvals a person was asked, by kind.", ["kind"], registry=r
        )
        r.register(_Now(turns_running, sessions_loaded, draining))

    def observer(self, thread_id: str) -> _SessionMeter:
        """The observer factory: pass `metrics.observer` to `engine.start_with_observer`."""
        return _SessionMeter(self)

    def count_turn_of(self, session_id: str, outcome: str) -> None:
        """Count a turn's end under its session's role, read first (its start was not seen here)."""
        role_of = self._role_of
        if role_of is None:
            self.turns.labels(_UNKNOWN, outcome).inc()
            return

        async def count() -> None:
            try:
                role = await role_of(session_id)
            except Exception:  # (deleted and reaped meanwhile, or the store failing): still counted
                role = _UNKNOWN
            self.turns.labels(role, outcome).inc()

        lookup = asyncio.get_running_loop().create_task(count(), name="agentwatch-metrics-role")
        self._lookups.add(lookup)
        lookup.add_done_callback(self._lookups.discard)

    def exposition(self) -> bytes:
        """Every metric, in the text format."""
        return generate_latest(self.registry)


class _Now(Collector):
    """The gauges, read at each scrape."""

    def __init__(
        self, turns_running: Callable[[], int], sessions_loaded: Callable[[], int], draining: Callable[[], bool]
    ) -> None:
        self._reads = (
            ("agentwatch_turns_running", "Turns running in this service now.", turns_running),
            ("agentwatch_sessions_loaded", "Sessions this service holds in memory now.", sessions_loaded),
            ("agentwatch_draining", "1 once the service was asked to stop.", lambda: int(draining())),
        )

    def collect(self) -> Iterator[Metric]:
        for name, documentation, read in self._reads:
            yield GaugeMetricFamily(name, documentation, value=float(read()))


class _SessionMeter:
    """One session's counts in progress: when its turn, model request and tool calls began."""

    own_events_only = True
    """Another service counts what it wrote."""

    def __init__(self, metrics: ServiceMetrics) -> None:
        self._metrics = metrics
        self._role = _UNKNOWN
        self._started = False  # whether a turn started here: the role is known
        self._answered = False  # whether the turn was resumed by a person's answer (the calls it left run first)
        self._turn_began: datetime | None = None
        self._request_began: datetime | None = None
        self._calls: dict[str, datetime] = {}

    def on_event(self, thread_id: str, event: Event) -> None:
        m, payload, at = self._metrics, event.payload, event.at
        if isinstance(payload, TurnStarted):
            self._role = payload.role or _UNKNOWN
            self._started = True
            self._answered = payload.trigger == "answer"
            self._turn_began, self._request_began = at, None
            self._calls.clear()
        elif isinstance(payload, CompletionStarted):
            self._request_began = at
        elif isinstance(payload, CompletionFinished):
            model = payload.model
            m.requests.labels(model, payload.finish_reason or _UNKNOWN).inc()
            if self._request_began is not None:
                m.request_seconds.labels(model).observe(_seconds(self._request_began, at))
                self._request_began = None
            usage = payload.usage
            m.tokens.labels(self._role, model, "input").inc(usage.input_tokens)
            m.tokens.labels(self._role, model, "output").inc(usage.output_tokens)
            if usage.cost_usd:
                m.cost.labels(self._role, model).inc(usage.cost_usd)
        elif isinstance(payload, ToolCall):
            self._calls[payload.tool_call_id] = at
        elif isinstance(payload, ToolResult):
            tool = payload.tool_name if m.known_tool(payload.tool_name) else _OTHER_TOOL
            m.tool_calls.labels(tool, payload.status).inc()
            began = self._calls.pop(payload.tool_call_id, None)
            if began is None and self._answered:  # a call the paused turn left to a person: run as this one began
                began = self._turn_began
            if began is not None:
                m.tool_seconds.labels(tool).observe(_seconds(began, at))
        elif isinstance(payload, TurnEnded):
            if not self._started:  # a paused turn stopped, its start before this meter: the role is read
                m.count_turn_of(thread_id, payload.outcome)
                return
            m.turns.labels(self._role, payload.outcome).inc()
            if self._turn_began is not None:
                m.turn_seconds.labels(self._role).observe(_seconds(self._turn_began, at))
                self._turn_began = None
        elif isinstance(payload, RuntimeRetry):
            m.retries.inc()
        elif isinstance(payload, RuntimeNotice) and payload.type == "runtime.error":
            m.errors.labels(payload.source or _UNKNOWN).inc()
        elif (asked := asks_a_person(payload)) is not None:
            m.person_requests.labels(asked[1]).inc()

    def on_subscribe(self, thread_id: str, request: Any, snapshot: Any) -> None:
        """Nothing to attach."""


def _seconds(began: datetime, ended: datetime) -> float:
    return max((ended - began).total_seconds(), 0.0)
