"""The run reads: `run_list`, `run_trace`, `run_compare`, `run_history`.

A run (a workflow run, a heartbeat tick or a hook fire: see `agentwatch.runtime.runs`) is read from what outlives
its agents: its row, its spans and journal, and the spend ledger. What its agents' sessions still hold (their
requests, their events) is added while they exist; `honesty` says what a trace can no longer show.

- `run_list {entity?, kind?, status?}`: runs newest first; an `entity` that has no runs (a typo) gets `entities`,
  the ones that have runs, closest to it first. A `kind` that is none (a typo: `workflw`) is refused, naming the
  kinds closest first: one that agentwatch names (`RUN_KINDS`: `hook` before any fire) or that a run has is one.
- `run_trace {id}`: the spans of the run (phases, tasks and their attempts, back-offs), every request its agents
  waited on (`hitl_wait`) and every turn its agents billed (`turn`; a sub-agent's under the task of the agent
  that spawned it), the turn each agent runs, billed or not yet (`running`, no end), and each turn that ended
  before it billed (failed or cancelled before its model answered once: no tokens). A span's cost is its
  turns' (the run's cost is all of them); a task's cost is the one it recorded when the ledger holds less
  (`costCoverage: "partial"`). A turn's times and outcome come from its agent's events, and once the agent was
  reaped from what its task's span kept of them when it ended.
- `run_compare {id, against?}`: deltas with another run, by default the previous finished run of the same entity;
  the spans aligned by their label path (`Research / Collect sources`), the inputs leaf by leaf, the brain sha.
  `stillRunning` names a side whose run has not ended: its figures are so far.
- `run_history {id, source?, agentId?, q?, cursor?, limit}`: the run's log, newest page first and each page
  oldest first: its agents' events (as `agent_tail` shows them), its pipeline (the run and its spans starting
  and ending; the run's end has its error as detail) and its journal (retries, notes), in one order. A journal
  line names a call it suggests as the tool call (`run_trace {id: ...}`), and gives it as `suggestions`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from difflib import SequenceMatcher
from typing import Any, Literal

from pydantic import Field, JsonValue

from agentwatch.errors import InvalidArgument, InvalidCursor, Suggestion
from agentwatch.events import Event, PageCursor, TurnEnded, TurnStarted, Usage, query_digest
from agentwatch.reads._args import cursor_moment, field_named
from agentwatch.reads._view import EngineView
from agentwatch.reads.tail import project
from agentwatch.store import (
    RUN_ENDINGS,
    RUN_KINDS,
    RunFilter,
    RunRecord,
    SessionFilter,
    SessionRecord,
    SpanRecord,
    Store,
    TurnUsage,
    descendants,
    every_session,
)
from agentwatch.tools import MAX_SEQ, Answer, Args, Caller, Count, Cursor, Id, Name

__all__ = [
    "CompareAnswer",
    "CompareArgs",
    "HistoryArgs",
    "RunHistoryAnswer",
    "RunListAnswer",
    "RunListArgs",
    "TraceAnswer",
    "TraceArgs",
    "run_compare",
    "run_history",
    "run_list",
    "run_trace",
    "turn_marks",
]


MAX_TURNS = 1000
"""Turn spans a trace draws at most (`honesty.truncated` beyond)."""
_TURNS = "turns"
"""The key of a task span's ref that keeps its agents' turns (`turn_marks`), shown in no answer."""
MAX_EVENTS = 20_000
"""Events of a run's agents that `run_history` reads at most (`truncated` beyond)."""
_PAGE_EVENTS = 9_999
"""Events of one agent that `run_history` reads at most, its newest (`truncated` beyond: one more is asked for,
within the store's 10,000 a read)."""
_SOURCES = ("agent", "pipeline", "journal")
_SOURCE_ORDER = {source: index for index, source in enumerate(_SOURCES)}
_COMPARABLE = tuple(status for status in RUN_ENDINGS if status != "skipped")
"""The runs `run_compare` takes as "the previous finished run": a skipped one did no work to compare with."""
_ALIGNED = ("phase", "task", "step")
"""The spans `run_compare` aligns (turns, waits and back-offs differ from run to run by nature)."""
_SUGGESTED = 20
"""Entities (or kinds) `run_list` suggests at most when its `entity` has no runs (its `kind` is none)."""
_BY_NATURE: dict[str, frozenset[str]] = {"heartbeat": frozenset({"tick", "dueAt"})}
"""The input fields every run of a kind changes by nature (a heartbeat tick's number and due time: see
`agentwatch.runtime.heartbeats.tick`), which `run_compare` leaves out of the inputs it says changed: listed at every
tick, they told of no change anyone made. Each side's `input` still has them."""

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""An input's key that a path shows bare (`a.b`); any other is quoted (`a["odd key"]`)."""


# -- answers ------------------------------------------------------------------------------------------


class RunSummary(Answer):
    """A run as every run read shows it."""

    id: str
    kind: str
    entity: str | None
    status: str
    status_reason: str | None
    started_at: str
    ended_at: str | None = Field(description="Null while it runs.")
    duration_ms: int | None
    cost_usd: float | None = Field(description="What its turns billed, from the spend ledger; null: no price known.")
    tokens: int
    input: JsonValue
    error: JsonValue
    parent_run_id: str | None
    brain_sha: str | None


RunStatus = Literal["running", "completed", "failed", "cancelled", "skipped", "timed_out", "interrupted"]
"""A run's status: `running`, then one of `RUN_ENDINGS`."""


class RunListArgs(Args):
    """Arguments of `run_list`."""

    entity: Name | None = Field(default=None, description="Runs of one entity: 'workflow:report', 'heartbeat:digest'.")
    kind: Name | None = Field(
        default=None,
        description="workflow, pipeline, heartbeat, hook, or a kind a run has; any other is refused (naming them).",
    )
    status: list[RunStatus] | None = Field(default=None, max_length=50, description="Statuses to include.")
    limit: Count = Field(default=20, ge=1, le=100, description="Runs per page, 1..100.")
    cursor: Cursor | None = Field(default=None, description="nextCursor of the previous page (same filters).")


class RunListAnswer(Answer):
    """The `run_list` answer: runs newest first."""

    runs: list[RunSummary]
    next_cursor: str | None
    entities: list[str] | None = Field(
        description=f"Null unless `entity` names no entity that has runs (a typo, say): then the entities that "
        f"do, closest to it first (at most {_SUGGESTED})."
    )


class TraceArgs(Args):
    """Arguments of `run_trace`."""

    id: Id = Field(description="The run's id (run_...).")


class TraceSpan(Answer):
    """One span of a trace."""

    id: str
    parent_span_id: str | None
    kind: str = Field(description="phase, task, step, backoff, turn, hitl_wait, ...")
    label: str
    status: str
    started_at: str
    ended_at: str | None = Field(description="Null: still running.")
    duration_ms: int | None
    attempt: int
    attempts: int = Field(description="How many attempts its task or step had in all.")
    attempt_of: str | None = Field(description="The first attempt's span, for the later ones.")
    ref: dict[str, JsonValue] | None = Field(description="What to open: {agentId}, {agentId, turnId}, {hitlId}.")
    cost_usd: float | None
    tokens: int


class Honesty(Answer):
    """What the trace cannot show."""

    reaped_agents: list[str] = Field(description="Agents whose spans keep timing and cost; their transcript is gone.")
    cost_coverage: Literal["full", "partial"] = Field(
        description="partial: the ledger no longer holds everything the run billed (recorded costs are shown)."
    )
    truncated: bool = Field(description=f"The run had more turns than a trace draws ({MAX_TURNS}).")


class TraceAnswer(Answer):
    """The `run_trace` answer."""

    run: RunSummary
    spans: list[TraceSpan]
    honesty: Honesty


class CompareArgs(Args):
    """Arguments of `run_compare`."""

    id: Id = Field(description="The run's id (run_...).")
    against: Id | None = Field(
        default=None,
        description="The run to compare with; default: the previous finished (not skipped) run of the same entity.",
    )


class SpanSide(Answer):
    """One run's side of an aligned span (its attempts merged)."""

    status: str
    duration_ms: int | None
    cost_usd: float | None
    attempts: int


class AlignedSpan(Answer):
    """A span path and each run's side of it (null: that run had no such span)."""

    path: str
    this: SpanSide | None
    that: SpanSide | None


class InputChange(Answer):
    """A leaf where the two inputs differ (null: absent on that side)."""

    path: str
    this: JsonValue
    that: JsonValue


class Deltas(Answer):
    """This run minus the other."""

    duration_ms: int | None
    cost_usd: float | None
    tokens: int
    status: str = Field(description="'same', or 'that → this'.")


class BrainSha(Answer):
    """The brain commits the two runs ran on."""

    this: str | None
    that: str | None
    changed: bool


class CompareAnswer(Answer):
    """The `run_compare` answer."""

    run: RunSummary
    against: RunSummary | None = Field(description="Null: there is no earlier finished run of the same entity.")
    deltas: Deltas | None
    spans: list[AlignedSpan]
    input: list[InputChange] = Field(
        description="Where the two inputs differ, leaf by leaf. What every run of the kind changes by nature is left "
        "out: a heartbeat tick's `tick` and `dueAt` (each side's `input` has them)."
    )
    brain_sha: BrainSha | None
    still_running: list[Literal["this", "that"]] = Field(
        description="The runs of the two still going (this, that): their time, tokens, cost and spans are so far, "
        "and so are the deltas with them."
    )


class HistoryArgs(Args):
    """Arguments of `run_history`."""

    id: Id = Field(description="The run's id (run_...).")
    source: list[Literal["agent", "pipeline", "journal"]] | None = Field(
        default=None, max_length=3, description="Only these logs: agent (its agents' events), pipeline, journal."
    )
    agent_id: Id | None = Field(
        default=None, description="Only the events of one of the run's agents, by id or name (and what it spawned)."
    )
    q: Name | None = Field(default=None, description="Only entries whose text or type holds this (any case).")
    cursor: Cursor | None = Field(default=None, description="nextCursor of the previous page: older entries.")
    limit: Count = Field(default=50, ge=1, le=200, description="Entries per page, 1..200.")
    max_chars: Count = Field(default=2000, ge=1, le=4000, description="Cap on each entry's detail, 1..4000.")


class SuggestedCall(Answer):
    """A call a journal line suggests: a tool and its arguments (as an error's `details.suggestions`)."""

    tool: str
    arguments: dict[str, JsonValue]


class HistoryEntry(Answer):
    """One line of a run's log."""

    at: str
    source: Literal["agent", "pipeline", "journal"]
    agent_id: str | None
    type: str
    title: str | None
    detail: str | None
    status: str | None
    suggestions: list[SuggestedCall] | None = Field(
        default=None,
        description="The calls a journal line suggests (`run_trace` of a run it names, say), worded in its title as "
        "the tool call (`run_trace {id: 'run_...'}`); null: none.",
    )


class RunHistoryAnswer(Answer):
    """The `run_history` answer: a page of entries, oldest first; nextCursor reads older ones."""

    entries: list[HistoryEntry]
    next_cursor: str | None
    truncated: bool = Field(
        description=f"Its agents had more events than a history reads ({MAX_EVENTS}; {_PAGE_EVENTS} per agent)."
    )


# -- run_list -----------------------------------------------------------------------------------------


async def run_list(engine: EngineView, caller: Caller, args: RunListArgs) -> RunListAnswer:
    """The `run_list` tool."""
    where = RunFilter(entity=args.entity, kind=args.kind, status=tuple(args.status) if args.status else None)
    digest = query_digest(where.model_dump(mode="json"))
    after = None
    if args.cursor is not None:
        with field_named("cursor"):
            after = _list_position(PageCursor.decode(args.cursor, query=digest).key)
    runs = await engine.store.list_runs(where, limit=args.limit + 1, after=after)
    page, more = runs[: args.limit], len(runs) > args.limit
    totals = await engine.store.run_totals([run.id for run in page])
    last = page[-1] if page else None
    cursor = PageCursor(digest, (_iso(last.started_at), last.id)).encode() if more and last else None
    if args.kind and not page and not after:  # (runs of it would show it is a kind)
        await _check_kind(engine.store, args.kind)
    entities = await _entities_like(engine.store, args.entity) if args.entity and not page and not after else None
    summaries = [_summary(run, totals[run.id]) for run in page]
    return RunListAnswer(runs=summaries, next_cursor=cursor, entities=entities)


async def _entities_like(store: Store, entity: str) -> list[str] | None:
    """The entities that have runs, closest to `entity` first (the most alike, then in text order); None when
    `entity` is one of them (its runs were filtered out otherwise)."""
    known = await store.run_entities(limit=1000)
    return None if entity in known else _closest(entity, known)


async def _check_kind(store: Store, kind: str) -> None:
    """Refuse a `kind` that no run has and agentwatch does not name (`RUN_KINDS`): a typo (`workflw`) would
    otherwise list no runs, as if none of that kind had run. The refusal names the kinds, closest first (in its
    message, and as `details.kinds` for a surface that suggests them)."""
    if kind in RUN_KINDS:
        return
    known = sorted({*RUN_KINDS, *await store.run_kinds(limit=1000)})
    if kind not in known:
        kinds = _closest(kind, known)
        raise InvalidArgument(
            f"kind: {kind!r} is no kind of run; the kinds, closest first: {', '.join(kinds)} (or leave `kind` "
            "out: runs of every kind)",
            fields=["kind"],
            kinds=kinds,
        )


def _closest(name: str, known: Sequence[str]) -> list[str]:
    """`known`, the most like `name` first (then in text order), at most `_SUGGESTED`."""
    alike = {other: SequenceMatcher(None, name.casefold(), other.casefold()).ratio() for other in known}
    return sorted(known, key=lambda other: (-alike[other], other))[:_SUGGESTED]


def _list_position(key: tuple[object, ...]) -> tuple[datetime, str]:
    """The run a `run_list` cursor's key names (its start, its id); refused when no page could have ended so."""
    match key:
        case (str(at), str(run_id)):
            started = cursor_moment(at)
            if started is not None:
                return started, run_id
    raise InvalidCursor("the cursor does not hold a run_list position; drop it to start from the first page")


def _summary(run: RunRecord, usage: Usage) -> RunSummary:
    return RunSummary(
        id=run.id,
        kind=run.kind,
        entity=run.entity,
        status=run.status,
        status_reason=run.status_reason or _lapsed(run),
        started_at=_iso(run.started_at),
        ended_at=_iso(run.ended_at) if run.ended_at else None,
        duration_ms=_ms(run.started_at, run.ended_at),
        cost_usd=usage.cost_usd,
        tokens=usage.total_tokens,
        input=run.input,
        error=run.error,
        parent_run_id=run.parent_run_id,
        brain_sha=run.brain_sha,
    )


def _lapsed(run: RunRecord) -> str | None:
    """For a run still `running` whose process stopped renewing it (it died, or it was cut off from the store):
    says so, until an engine's maintenance ends it `interrupted` (none may run on the store)."""
    if run.status != "running" or run.expires_at is None or run.expires_at > datetime.now(UTC):
        return None
    return (
        f"lapsed at {_iso(run.expires_at)}: its process stopped renewing it; an engine on the store ends it "
        "interrupted (`agentwatch serve` does within seconds)"
    )


# -- run_trace ----------------------------------------------------------------------------------------


async def run_trace(engine: EngineView, caller: Caller, args: TraceArgs) -> TraceAnswer:
    """The `run_trace` tool."""
    run = await engine.store.get_run(args.id)
    spans, honesty = await _trace(engine, run)
    total = (await engine.store.run_totals([run.id]))[run.id]
    return TraceAnswer(run=_summary(run, total), spans=spans, honesty=honesty)


async def _trace(engine: EngineView, run: RunRecord) -> tuple[list[TraceSpan], Honesty]:
    """A run's spans, the turns and waits of its agents among them and every cost rolled up, in start order;
    and what the trace cannot show."""
    store = engine.store
    stored = await store.list_spans(run.id)
    turns = await store.run_usage(run.id)
    sessions = await _sessions(engine, run.id)
    attempts = _attempts(stored)
    spans = [_stored_span(span, attempts) for span in stored]
    task_of = _task_spans(stored)
    times, kept_roles = await _turn_times(engine, sessions, stored)
    others = await _others(store, sessions, run)
    billed = {(turn.session_id, turn.turn_id) for turn in turns}
    unbilled = _unbilled_turns(run, sessions, billed, others, times)
    truncated = len(turns) + len(unbilled) > MAX_TURNS
    for turn in turns[:MAX_TURNS]:
        owner = _owner(turn.session_id, sessions, task_of)
        timed = times.get((turn.session_id, turn.turn_id))
        spans.append(_billed_turn(turn, owner, sessions.get(turn.session_id), timed))
    # (a reaped agent's, from what it billed, else from its task's marks)
    roles = kept_roles | {turn.session_id: turn.role for turn in turns if turn.role}
    for agent_id, unbilled_turn in unbilled[: max(0, MAX_TURNS - len(turns))]:
        session = sessions.get(agent_id)
        role = session.role if session else roles.get(agent_id, "agent")
        spans.append(_turn_span(agent_id, unbilled_turn, role, _owner(agent_id, sessions, task_of), Usage()))
    for session in sessions.values():
        other = others[session.id]
        for request in await store.list_requests(session_id=session.id, status=None, limit=1000):
            if request.created_at < run.started_at or (other is not None and request.turn_id in other.turns):
                continue  # asked for other work of the agent's, before the run or after it
            spans.append(
                TraceSpan(
                    id=request.id,
                    parent_span_id=_owner(session.id, sessions, task_of),
                    kind="hitl_wait",
                    label=request.summary,
                    status=request.status,
                    started_at=_iso(request.created_at),
                    ended_at=_iso(request.closed_at) if request.closed_at else None,
                    duration_ms=_ms(request.created_at, request.closed_at),
                    attempt=1,
                    attempts=1,
                    attempt_of=None,
                    ref={"hitlId": request.id, "agentId": session.id},
                    cost_usd=None,
                    tokens=0,
                )
            )
    partial = _roll_up_costs(spans, stored)
    spans.sort(key=lambda span: (span.started_at, span.id))
    reaped = sorted({agent for span in stored for agent in _agents_of(span) if agent not in sessions})
    return spans, Honesty(reaped_agents=reaped, cost_coverage="partial" if partial else "full", truncated=truncated)


async def _sessions(engine: EngineView, run_id: str) -> dict[str, SessionRecord]:
    """The run's sessions that still exist (soft-deleted ones too), by id."""
    where = SessionFilter(run_id=run_id, deleted=True)
    return {session.id: session async for session in every_session(engine.store, where)}


def _attempts(spans: Sequence[SpanRecord]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for span in spans:
        first = span.attempt_of or span.id
        counts[first] = counts.get(first, 0) + 1
    return counts


def _stored_span(span: SpanRecord, attempts: dict[str, int]) -> TraceSpan:
    return TraceSpan(
        id=span.id,
        parent_span_id=span.parent_span_id,
        kind=span.kind,
        label=span.label,
        status=span.status,
        started_at=_iso(span.started_at),
        ended_at=_iso(span.ended_at) if span.ended_at else None,
        duration_ms=_ms(span.started_at, span.ended_at),
        attempt=span.attempt,
        attempts=attempts.get(span.attempt_of or span.id, 1),
        attempt_of=span.attempt_of,
        ref={key: value for key, value in span.ref.items() if key != _TURNS} if span.ref else span.ref,
        cost_usd=span.cost_usd,
        tokens=span.tokens,
    )


def _task_spans(spans: Iterable[SpanRecord]) -> dict[str, str]:
    """The span each agent's work belongs under, by agent id: a task's own agent, and the sub-agents it spawned
    (named in its ref once it ended, so that their turns stay under it after they were reaped)."""
    owners: dict[str, str] = {}
    for span in spans:
        for agent in _agents_of(span):
            owners.setdefault(agent, span.id)
    return owners


def _agents_of(span: SpanRecord) -> list[str]:
    """The agents a span names in its ref: its own, then its sub-agents."""
    ref = span.ref or {}
    agent, spawned = ref.get("agentId"), ref.get("subAgents")
    named = [agent] if isinstance(agent, str) else []
    return named + [a for a in spawned if isinstance(a, str)] if isinstance(spawned, list) else named


def _owner(session_id: str, sessions: dict[str, SessionRecord], task_of: dict[str, str]) -> str | None:
    """The task span a session's work belongs under: its own, else the one of the agent that spawned it."""
    seen: set[str] = set()
    current: str | None = session_id
    while current is not None and current not in seen:
        if current in task_of:
            return task_of[current]
        seen.add(current)
        session = sessions.get(current)
        current = session.parent_id if session is not None else None
    return None


_TurnTimes = dict[tuple[str, str | None], tuple[datetime, datetime | None, str | None]]
"""When each turn started and ended, and how (`TurnEnded.outcome`; None while it runs), by (session, turn)."""


async def _times_from_events(store: Store, session_ids: Iterable[str]) -> _TurnTimes:
    """`_TurnTimes` of the sessions' turns, from their events (one read a session)."""
    times: _TurnTimes = {}
    for session_id in session_ids:
        marks = await store.read_events(session_id, types=["turn.started", "turn.ended"], limit=10_000)
        for event in marks:
            key = (session_id, event.turn_id)
            start, _end, _outcome = times.get(key, (event.at, None, None))
            if isinstance(event.payload, TurnEnded):
                times[key] = (start, event.at, event.payload.outcome)
            else:
                times.setdefault(key, (start, None, None))
    return times


async def turn_marks(store: Store, sessions: Sequence[SessionRecord]) -> list[JsonValue]:
    """The turns of a task's sessions as its span keeps them (`ref.turns`), so that a trace still shows when each
    started and ended, how, and whose (its agent's role: an agent that never billed left it nowhere else), once
    the sessions were reaped: `[agentId, turnId, startedAt, endedAt, outcome, role]` each (endedAt and outcome
    null while it runs), at most `MAX_TURNS`. Marks kept before the role was have five items."""
    roles = {session.id: session.role for session in sessions}
    times = await _times_from_events(store, [session.id for session in sessions])
    return [
        [session_id, turn_id, _iso(start), _iso(end) if end else None, outcome, roles[session_id]]
        for (session_id, turn_id), (start, end, outcome) in list(times.items())[:MAX_TURNS]
    ]


def _kept_marks(stored: Iterable[SpanRecord]) -> tuple[_TurnTimes, dict[str, str]]:
    """The turn marks the run's task spans kept (`turn_marks`), and the roles they name by agent id; a mark that
    does not read as one is left out."""
    times: _TurnTimes = {}
    roles: dict[str, str] = {}
    for span in stored:
        marks = (span.ref or {}).get(_TURNS)
        for mark in marks if isinstance(marks, list) else []:
            match mark:
                case [str(session_id), str() | None as turn_id, str(start), str() | None as end, str() | None as how,
                      *rest] if len(rest) <= 1:  # fmt: skip
                    begun, ended = cursor_moment(start), cursor_moment(end) if end else None
                    if begun is not None and (end is None or ended is not None):
                        times[(session_id, turn_id)] = (begun, ended, how)
                        if rest and isinstance(rest[0], str):
                            roles[session_id] = rest[0]
    return times, roles


async def _turn_times(
    engine: EngineView, sessions: dict[str, SessionRecord], stored: Iterable[SpanRecord]
) -> tuple[_TurnTimes, dict[str, str]]:
    """When each turn of the run's agents started and ended, and how: from their events while they exist, else
    as their task's span kept it (a turn neither knows keeps only the ledger's times); and the agents' roles its
    task spans kept."""
    kept, roles = _kept_marks(stored)
    return kept | await _times_from_events(engine.store, sessions), roles


_Turn = tuple[str | None, datetime, datetime | None, str | None]
"""A turn a span is drawn for: its id, when it started and ended, and how (`TurnEnded.outcome`; None while it
runs)."""


def _billed_turn(
    turn: TurnUsage,
    parent: str | None,
    session: SessionRecord | None,
    times: tuple[datetime, datetime | None, str | None] | None,
) -> TraceSpan:
    """The span of a turn the ledger holds: timed by its agent's events (or its task's marks), else by its
    billing."""
    role = turn.role or (session.role if session else "agent")
    start, end, outcome = times or (turn.first_at, turn.last_at, "completed")
    return _turn_span(turn.session_id, (turn.turn_id, start, end, outcome), role, parent, turn.usage)


def _unbilled_turns(
    run: RunRecord,
    sessions: dict[str, SessionRecord],
    billed: set[tuple[str, str | None]],
    others: dict[str, _OtherWork | None],
    times: _TurnTimes,
) -> list[tuple[str, _Turn]]:
    """The turns of the run's agents that the ledger does not hold, by agent id: they billed nothing (their model
    never answered once). Each that ended (failed or cancelled before its first answer: its agent's events, or
    its task's marks once it was reaped, say when and how), and the one each agent runs (`_unbilled_turn`).
    What an agent did that was not the run's stays out: a turn begun before the run, or other work after it
    ended (`_other_work`)."""
    drawn: dict[tuple[str, str], _Turn] = {}
    for (agent_id, turn_id), (start, end, outcome) in times.items():
        other = others.get(agent_id)
        if (
            turn_id is None
            or end is None  # (a turn that did not end is drawn while its agent runs it, below)
            or (agent_id, turn_id) in billed
            or start < run.started_at
            or (other is not None and turn_id in other.turns)
        ):
            continue
        drawn[(agent_id, turn_id)] = (turn_id, start, end, outcome)
    for session in sessions.values():
        going = _unbilled_turn(session, billed, others[session.id], times)
        if going is not None and going[0] is not None:
            drawn.setdefault((session.id, going[0]), going)  # (unless it ended as its session was read)
    return [(agent_id, turn) for (agent_id, _), turn in drawn.items()]


def _unbilled_turn(
    session: SessionRecord, billed: set[tuple[str, str | None]], other: _OtherWork | None, times: _TurnTimes
) -> _Turn | None:
    """The turn `session` runs (its `current_turn_id`) while it has billed nothing yet (its model has not
    answered once): the ledger, which draws the other turns, does not hold it. None when it has none, it billed
    (the ledger draws it), or it is other work of the agent's than the run's."""
    turn_id = session.current_turn_id
    if turn_id is None or (session.id, turn_id) in billed or (other is not None and turn_id in other.turns):
        return None
    start, end, outcome = times.get((session.id, turn_id)) or (session.last_active_at, None, None)
    return turn_id, start, end, outcome


def _turn_span(
    agent_id: str,
    turn: _Turn,
    role: str,
    parent: str | None,
    usage: Usage,
) -> TraceSpan:
    """The span of `turn`, of `agent_id`, which billed `usage`."""
    turn_id, start, end, outcome = turn
    return TraceSpan(
        id=f"turn:{agent_id}:{turn_id or '-'}",
        parent_span_id=parent,
        kind="turn",
        label=f"{role} turn",
        status=outcome or "running",
        started_at=_iso(start),
        ended_at=_iso(end) if end else None,
        duration_ms=_ms(start, end),
        attempt=1,
        attempts=1,
        attempt_of=None,
        ref={"agentId": agent_id, "turnId": turn_id},
        cost_usd=usage.cost_usd,
        tokens=usage.total_tokens,
    )


def _roll_up_costs(spans: list[TraceSpan], stored: Sequence[SpanRecord]) -> bool:
    """Give every stored span the cost and tokens of the turns under it; True when a task recorded more than
    the ledger still holds for it (its recorded cost is kept, and the coverage is partial)."""
    children: dict[str | None, list[TraceSpan]] = {}
    for span in spans:
        children.setdefault(span.parent_span_id, []).append(span)
    recorded = {span.id: (span.cost_usd, span.tokens) for span in stored}
    partial = False

    def total(span: TraceSpan) -> tuple[float | None, int]:
        nonlocal partial
        if span.kind in ("turn", "hitl_wait"):
            return span.cost_usd, span.tokens
        cost: float | None = None
        tokens = 0
        for child in children.get(span.id, []):
            child_cost, child_tokens = total(child)
            cost = child_cost if cost is None else cost + (child_cost or 0.0)
            tokens += child_tokens
        kept_cost, kept_tokens = recorded.get(span.id, (0.0, 0))
        if span.kind == "task" and (kept_tokens > tokens or kept_cost > (cost or 0.0)):
            partial = True
            cost, tokens = kept_cost, kept_tokens
        span.cost_usd, span.tokens = cost, tokens
        return cost, tokens

    for root in children.get(None, []):
        total(root)
    return partial


# -- run_compare --------------------------------------------------------------------------------------


async def run_compare(engine: EngineView, caller: Caller, args: CompareArgs) -> CompareAnswer:
    """The `run_compare` tool."""
    if args.against == args.id:
        raise InvalidArgument(
            f"against: {args.against!r} is the run itself, which differs from itself in nothing; leave it out to "
            "compare with the previous finished run of the same entity, or name another run",
            fields=["against"],
        )
    store = engine.store
    run = await store.get_run(args.id)
    if args.against is not None:
        other: RunRecord | None = await store.get_run(args.against)
    else:
        earlier = await store.list_runs(
            RunFilter(entity=run.entity, status=_COMPARABLE, started_before=run.started_at), limit=1
        )
        other = earlier[0] if earlier and run.entity is not None else None
    totals = await store.run_totals([run.id] + ([other.id] if other else []))
    this = _summary(run, totals[run.id])
    if other is None:
        return CompareAnswer(
            run=this, against=None, deltas=None, spans=[], input=[], brain_sha=None, still_running=_still_running(run)
        )
    that = _summary(other, totals[other.id])
    mine, theirs = _aligned((await _trace(engine, run))[0]), _aligned((await _trace(engine, other))[0])
    paths = list(dict.fromkeys([*mine, *theirs]))
    return CompareAnswer(
        run=this,
        against=that,
        deltas=Deltas(
            duration_ms=_minus(this.duration_ms, that.duration_ms),
            cost_usd=_minus(this.cost_usd, that.cost_usd),
            tokens=this.tokens - that.tokens,
            status="same" if this.status == that.status else f"{that.status} → {this.status}",
        ),
        spans=[AlignedSpan(path=path, this=mine.get(path), that=theirs.get(path)) for path in paths],
        input=[InputChange(path=path, this=a, that=b) for path, (a, b) in _input_changes(run, other).items()],
        brain_sha=BrainSha(this=run.brain_sha, that=other.brain_sha, changed=run.brain_sha != other.brain_sha),
        still_running=_still_running(run, other),
    )


def _still_running(this: RunRecord, that: RunRecord | None = None) -> list[Literal["this", "that"]]:
    """The sides whose run has not ended: what `run_compare` says of them is so far."""
    going: list[Literal["this", "that"]] = ["this"] if this.ended_at is None else []
    return going + (["that"] if that is not None and that.ended_at is None else [])


def _aligned(spans: Sequence[TraceSpan]) -> dict[str, SpanSide]:
    """Each phase, task or step by its label path, the attempts of one merged (the last one's status, the time
    from the first one's start to the last one's end, their costs summed). Two spans of one path that are not
    attempts of each other are told apart as `path #2`, `path #3`, in start order."""
    by_id = {span.id: span for span in spans}

    def path(span: TraceSpan) -> str:
        labels = [span.label]
        parent = by_id.get(span.parent_span_id) if span.parent_span_id else None
        while parent is not None:
            labels.append(parent.label)
            parent = by_id.get(parent.parent_span_id) if parent.parent_span_id else None
        return " / ".join(reversed(labels))

    chains: dict[str, list[TraceSpan]] = {}  # the first attempt's id → its attempts
    for span in spans:
        if span.kind in _ALIGNED:
            chains.setdefault(span.attempt_of or span.id, []).append(span)
    sides: dict[str, SpanSide] = {}
    for attempts in chains.values():  # in start order (the spans are)
        key = base = path(attempts[0])
        repeat = 1
        while key in sides:
            repeat += 1
            key = f"{base} #{repeat}"
        last = max(attempts, key=lambda s: (s.attempt, s.started_at))
        ends = [s.ended_at for s in attempts]
        end = None if any(e is None for e in ends) else max(e for e in ends if e is not None)
        costs = [s.cost_usd for s in attempts if s.cost_usd is not None]
        sides[key] = SpanSide(
            status=last.status,
            duration_ms=_ms(
                datetime.fromisoformat(attempts[0].started_at), datetime.fromisoformat(end) if end else None
            ),
            cost_usd=sum(costs) if costs else None,
            attempts=len(attempts),
        )
    return sides


def _input_changes(this: RunRecord, that: RunRecord) -> dict[str, tuple[JsonValue, JsonValue]]:
    """Where the two runs' inputs differ, but for the fields runs of their kind change by nature (`_BY_NATURE`)."""
    natural = _BY_NATURE.get(this.kind, frozenset()) if this.kind == that.kind else frozenset()
    return _leaf_changes(_without(this.input, natural), _without(that.input, natural))


def _without(value: JsonValue, fields: frozenset[str]) -> JsonValue:
    """An object input without `fields`; any other as it is."""
    return {k: v for k, v in value.items() if k not in fields} if isinstance(value, dict) and fields else value


def _leaf_changes(this: JsonValue, that: JsonValue, path: str = "") -> dict[str, tuple[JsonValue, JsonValue]]:
    """Where two JSON values differ, leaf by leaf: objects by key (`a.b`, `a["odd key"]`) and lists by index
    (`a[0]`), the rest (a leaf, or values of two kinds) as a whole (`$` for the whole input); a key or index one
    side lacks shows as null on that side."""
    if isinstance(this, dict) and isinstance(that, dict):
        changes: dict[str, tuple[JsonValue, JsonValue]] = {}
        for key in dict.fromkeys([*this, *that]):
            where = (f"{path}.{key}" if path else key) if _PLAIN_KEY.match(key) else f"{path}[{json.dumps(key)}]"
            if key in this and key in that:
                changes |= _leaf_changes(this[key], that[key], where)
            else:
                changes[where] = (this.get(key), that.get(key))
        return changes
    if isinstance(this, list) and isinstance(that, list):
        changes = {}
        for index in range(max(len(this), len(that))):
            where = f"{path}[{index}]"
            if index < len(this) and index < len(that):
                changes |= _leaf_changes(this[index], that[index], where)
            else:
                changes[where] = (_item(this, index), _item(that, index))
        return changes
    return {} if _same(this, that) else {path or "$": (this, that)}


def _item(values: list[JsonValue], index: int) -> JsonValue:
    return values[index] if index < len(values) else None


def _same(a: JsonValue, b: JsonValue) -> bool:
    """Equal as JSON values: `true` is not `1` (as Python's `True == 1` says), `1` is `1.0`."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _minus(a: float | int | None, b: float | int | None) -> Any:
    return None if a is None or b is None else a - b


# -- run_history --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _OtherWork:
    """What a session of an ended run did for something else (see `_other_work`)."""

    turns: frozenset[str]
    """Its turns begun on new input after the run ended."""
    since: datetime | None
    """When the first of them began (None: none did)."""

    def leaves_out(self, event: Event) -> bool:
        """Whether `event` was other work: of one of those turns, or between turns once the first began (what
        came between the run's end and then, a report on its last turn say, is still the run's)."""
        if event.turn_id is not None:
            return event.turn_id in self.turns
        return self.since is not None and event.at >= self.since


_Spells = Sequence[tuple[datetime, datetime | None]]
"""When an agent was at turns of a run's: each such turn's start and end (None: it runs)."""


async def _others(
    store: Store, sessions: dict[str, SessionRecord], run: RunRecord, wanted: Iterable[str] | None = None
) -> dict[str, _OtherWork | None]:
    """`_other_work` of the run's sessions (`wanted` of them; all by default) by id, and of their parents: a
    sub-agent's after its parent's, whose turns of the run's keep the sub-agent's turns begun meanwhile the
    run's (as `billed_run` bills them)."""
    found: dict[str, _OtherWork | None] = {}
    spells: dict[str, _Spells] = {}  # (read once a parent)

    async def of(session: SessionRecord) -> _OtherWork | None:
        if session.id not in found:
            found[session.id] = None  # (a parent loop, which no spawn makes, ends here)
            parent = sessions.get(session.parent_id) if session.parent_id else None
            if parent is not None and parent.id not in spells:
                spells[parent.id] = await _run_spells(store, parent, await of(parent), run)
            found[session.id] = await _other_work(store, session, run, spells[parent.id] if parent else ())
        return found[session.id]

    for session_id in sessions if wanted is None else wanted:
        await of(sessions[session_id])
    return found


async def _run_spells(store: Store, session: SessionRecord, other: _OtherWork | None, run: RunRecord) -> _Spells:
    """When `session` was at turns of the run's after the run ended (the only spells its sub-agents' later work
    is the run's in): its turns that went on past the end and were not other work."""
    if run.ended_at is None:
        return ()
    ended = run.ended_at
    times = await _times_from_events(store, [session.id])
    return [
        (start, end)
        for (_, turn_id), (start, end, _outcome) in times.items()
        if start >= run.started_at and (end is None or end > ended) and not (other and turn_id in other.turns)
    ]


async def _other_work(store: Store, session: SessionRecord, run: RunRecord, spells: _Spells = ()) -> _OtherWork | None:
    """What `session` did after `run` ended for something else: the turns begun on new input since (as
    `billed_run` bills them to no run), but for a sub-agent's begun while its parent was at a turn of the run's
    (`spells`). None when there can be none: the run still runs, or the session is an observer, whose every turn
    watches for the run."""
    if run.ended_at is None or session.is_observer:
        return None
    later: set[str] = set()
    since: datetime | None = None
    before: int | None = None
    while True:  # the newest starts first: only those after the run's end are read
        starts = await store.read_events_backward(session.id, before_seq=before, limit=100, types=["turn.started"])
        for event in starts:
            if event.at <= run.ended_at:
                return _OtherWork(frozenset(later), since)
            if (
                isinstance(event.payload, TurnStarted)
                and event.payload.trigger == "input"
                and event.turn_id
                and not any(start <= event.at and (end is None or event.at <= end) for start, end in spells)
            ):
                later.add(event.turn_id)
                since = event.at
        if len(starts) < 100:
            return _OtherWork(frozenset(later), since)
        before = starts[-1].seq


async def _while_it_ran(
    store: Store, session: SessionRecord, run: RunRecord, other: _OtherWork | None, budget: int
) -> tuple[list[Event], bool]:
    """The newest `budget` events of the run's work in `session`, oldest first (a reused or long-lived agent's
    other work, before the run or after it, stays out: `other`, see `_other_work`), and whether older ones were
    left out."""
    kept: list[Event] = []
    before: int | None = None
    while True:
        page = await store.read_events_backward(session.id, before_seq=before, limit=budget + 1)
        for event in page:
            if event.at < run.started_at:
                return kept[::-1], False
            if other is not None and other.leaves_out(event):
                continue
            if len(kept) == budget:
                return kept[::-1], True
            kept.append(event)
        if len(page) <= budget:  # back to the session's first event
            return kept[::-1], False
        before = page[-1].seq


async def run_history(engine: EngineView, caller: Caller, args: HistoryArgs) -> RunHistoryAnswer:
    """The `run_history` tool."""
    store = engine.store
    run = await store.get_run(args.id)
    query = query_digest(args.model_dump(mode="json", exclude={"cursor", "limit", "max_chars"}))
    before: tuple[str, int, str] | None = None
    if args.cursor is not None:
        with field_named("cursor"):
            match PageCursor.decode(args.cursor, query=query).key:
                case (str(at), int(order), str(ref)) if cursor_moment(at) is not None and 0 <= order <= MAX_SEQ:
                    before = (at, order, ref)
                case _:  # (the checksum is no secret: a forged cursor passes it)
                    raise InvalidCursor("the cursor does not hold a run_history position; drop it to start over")
    if args.agent_id is not None and args.source and "agent" not in args.source:
        raise InvalidArgument(
            "agentId narrows the agent log (its events), which `source` leaves out: the pipeline and the journal "
            "belong to no agent; add agent to `source`, or leave agentId out",
            fields=["agentId", "source"],
        )
    sources = set(args.source or _SOURCES) & ({"agent"} if args.agent_id else set(_SOURCES))
    entries: list[tuple[tuple[str, int, str], HistoryEntry]] = []
    truncated = False
    if "pipeline" in sources:
        entries += _pipeline(run, await store.list_spans(run.id))
    if "journal" in sources:
        for line in await store.read_journal(run.id, limit=10_000):
            at = _iso(line.at) if line.at else _iso(run.started_at)
            entry = HistoryEntry(
                at=at,
                source="journal",
                agent_id=None,
                type=line.kind,
                title=line.message,
                detail=None,
                status=None,
                suggestions=_suggested(line.detail),
            )
            entries.append(((at, _SOURCE_ORDER["journal"], line.id or ""), entry))
    if "agent" in sources:
        sessions = await _sessions(engine, run.id)
        wanted = await _with_descendants(store, run.id, args.agent_id, sessions) if args.agent_id else list(sessions)
        read = 0
        others = await _others(store, sessions, run, wanted)
        for session_id in wanted:
            # The newest: a history pages back from the end.
            budget = min(_PAGE_EVENTS, MAX_EVENTS - read)
            events, left_out = await _while_it_ran(store, sessions[session_id], run, others[session_id], budget)
            truncated = truncated or left_out  # this agent had more than is read: its oldest are left out
            read += len(events)
            for event in events:
                row = project(event, max_chars=args.max_chars)
                entry = HistoryEntry(
                    at=_iso(event.at),
                    source="agent",
                    agent_id=session_id,
                    type=row["type"],
                    title=row["title"],
                    detail=row["detail"],
                    status=row["status"],
                )
                entries.append(((entry.at, _SOURCE_ORDER["agent"], event.id), entry))
            if read >= MAX_EVENTS:
                break
    if args.q:
        needle = args.q.casefold()
        entries = [item for item in entries if needle in _text_of(item[1])]
    entries.sort(key=lambda item: item[0])
    if before is not None:
        entries = [item for item in entries if item[0] < before]
    page = entries[-args.limit :]
    more = len(entries) > len(page)
    cursor = PageCursor(query, page[0][0]).encode() if more and page else None
    return RunHistoryAnswer(entries=[entry for _, entry in page], next_cursor=cursor, truncated=truncated)


def _pipeline(run: RunRecord, spans: Sequence[SpanRecord]) -> list[tuple[tuple[str, int, str], HistoryEntry]]:
    order = _SOURCE_ORDER["pipeline"]

    def entry(
        at: datetime, key: str, kind: str, title: str, status: str | None, detail: str | None = None
    ) -> tuple[Any, HistoryEntry]:
        text = _iso(at)
        line = HistoryEntry(
            at=text, source="pipeline", agent_id=None, type=kind, title=title, detail=detail, status=status
        )
        return (text, order, key), line

    called = _run_name(run)
    found = [entry(run.started_at, f"0{run.id}", "run.started", f"{called} started", None)]
    for span in spans:
        name = f"{span.kind} {span.label}" + (f" (attempt {span.attempt})" if span.attempt > 1 else "")
        found.append(entry(span.started_at, f"1{span.id}", "span.started", name, None))
        if span.ended_at is not None:
            found.append(entry(span.ended_at, f"2{span.id}", "span.ended", f"{name} {span.status}", span.status))
    if run.ended_at is not None:
        title = f"{called} {run.status}" + (f": {run.status_reason}" if run.status_reason else "")
        found.append(entry(run.ended_at, f"3{run.id}", "run.ended", title, run.status, _error_text(run.error)))
    return found


def _suggested(detail: JsonValue) -> list[SuggestedCall] | None:
    """The calls a journal line's detail keeps (`{"suggestions": [{tool, arguments}]}`, as a heartbeat's overlap
    does); None when it keeps none (a line stored before, whose text says it all)."""
    kept = detail.get("suggestions") if isinstance(detail, dict) else None
    calls = [Suggestion.from_dict(value) for value in kept] if isinstance(kept, list) else []
    found = [SuggestedCall(tool=call.tool, arguments=dict(call.arguments)) for call in calls if call is not None]
    return found or None


def _run_name(run: RunRecord) -> str:
    """What a title calls a run: its entity, which says its kind (`workflow:report`); else its kind and id."""
    return run.entity or f"{run.kind} {run.id}"


def _error_text(error: JsonValue) -> str | None:
    """What a run's `error` says, as one line (`RuntimeError: the editor rejected it`); None when it has none."""
    if not isinstance(error, dict):
        return None
    kind, message = error.get("class"), error.get("message")
    text = ": ".join(str(part) for part in (kind, message) if part not in (None, ""))
    return text or None


def _text_of(entry: HistoryEntry) -> str:
    return " ".join(filter(None, (entry.type, entry.title, entry.detail))).casefold()


async def _with_descendants(store: Store, run_id: str, agent: str, sessions: dict[str, SessionRecord]) -> list[str]:
    """The agent of run `run_id` that `agent` names (its id, or its name) and every session of the run it spawned,
    directly or not."""
    if agent not in sessions:
        named = sorted(s.id for s in sessions.values() if s.name == agent)
        if len(named) > 1:
            raise InvalidArgument(
                f"agentId: {agent!r} names {len(named)} agents of this run ({', '.join(named)}); pass one id",
                fields=["agentId"],
            )
        if not named:
            trace = Suggestion("run_trace", {"id": run_id})
            raise InvalidArgument(
                f"agentId: {agent!r} is neither the id nor the name of an agent of this run (or it was reaped); "
                f"{trace} shows its agents",
                fields=["agentId"],
                suggest=[trace],
            )
        agent = named[0]
    return [agent, *(child.id for child in await descendants(store, agent) if child.id in sessions)]


def _iso(moment: datetime) -> str:
    """A moment as ISO 8601 text of one width (microseconds always), so that text order is time order."""
    return moment.isoformat(timespec="microseconds")


def _ms(start: datetime, end: datetime | None) -> int | None:
    return None if end is None else max(0, round((end - start).total_seconds() * 1000))
