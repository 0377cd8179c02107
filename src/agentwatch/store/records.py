"""What the store keeps, as typed records: sessions, conversations, inbox inputs, requests, the usage
ledger, runs with spans and a journal, and observer refs. Plus the drafts and patches that change them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

from pydantic import AwareDatetime, BaseModel, ConfigDict, JsonValue

from agentwatch.events import NewEvent, Origin, RequestKind, Usage, WaitsOn

__all__ = [
    "RUN_ENDINGS",
    "RUN_KINDS",
    "TERMINAL_STATUSES",
    "ConversationEndReason",
    "ConversationRecord",
    "InputDraft",
    "InputRecord",
    "JournalEntry",
    "LeaseClaim",
    "LeaseRecord",
    "ObserverRef",
    "Page",
    "RequestClose",
    "RequestDraft",
    "RequestRecord",
    "RequestStatus",
    "RunDraft",
    "RunFilter",
    "RunPatch",
    "RunRecord",
    "SessionClause",
    "SessionDraft",
    "SessionFilter",
    "SessionGroup",
    "SessionGroupBy",
    "SessionPatch",
    "SessionRecord",
    "SessionSort",
    "SessionStatus",
    "SpanDraft",
    "SpanPatch",
    "SpanRecord",
    "StateCount",
    "StoreInfo",
    "TurnUsage",
    "UsageEntry",
    "Write",
]

SessionStatus = Literal["idle", "running", "awaiting_input", "completed", "failed", "cancelled", "interrupted"]
"""The stored (machine) status. The status *word* (`working`, `needs_you`, `stuck`, ...) is derived on read."""

TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled", "interrupted"})
"""Statuses after which a session takes no more turns unless given new input."""

SessionSort = Literal["newest", "oldest", "name", "status"]
"""List orders. Every order puts the boss session first, then live sessions, then the rest."""

ConversationEndReason = Literal["clear", "compact"]
RequestStatus = Literal["pending", "resolved", "dismissed"]

_FROZEN = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class SessionRecord(BaseModel):
    """One session (agent, thread) as stored: everything an `agent_list` row is derived from."""

    model_config = _FROZEN

    id: str
    """`ses_...`"""
    name: str
    """Unique among live sessions of the same scope."""
    display_name: str | None = None
    """A friendlier name to show, when set."""
    role: str
    """The agent definition it runs."""
    feature: str | None = None
    """The feature that ships its role (`engine` for the system's own roles)."""
    scope: str | None = None
    """The chat it belongs to (a chat key such as `42:bot1`), or None for a global session."""
    status: SessionStatus = "idle"
    """The machine status."""
    source: str = "api"
    """How it was started: `chat`, `task`, `spawn`, `heartbeat`, `hook`, `run`, `observer`, `cli`, `api`."""
    model_ref: str | None = None
    """The model its role gives it."""
    model_override: str | None = None
    """Its own model override, when set."""
    group_key: str | None = None
    """Its lineage: every session of one logical agent over time shares it (`hb:digest`)."""
    boss: bool = False
    """True for the one boss session, which leads every listing."""
    parent_id: str | None = None
    """The session that spawned it."""
    run_id: str | None = None
    """The run that started it."""
    origin: Origin | None = None
    """Where it came from."""
    is_observer: bool = False
    """The observer marker: True for a session running as an observer agent."""
    created_at: AwareDatetime
    updated_at: AwareDatetime
    """Last write to this row."""
    last_active_at: AwareDatetime
    """Last stream event or row write."""
    deleted_at: AwareDatetime | None = None
    """Set by a soft delete."""
    reap_at: AwareDatetime | None = None
    """When the row (and its transcript) is hard-deleted."""
    last_seq: int = 0
    """The seq of its newest durable event."""
    conversation_id: str
    """Its current conversation."""
    current_turn_id: str | None = None
    """The turn in progress, if any."""
    turn_attempts: int = 0
    """How many times the current turn was started (1 + its continuations after restarts)."""
    pending_inputs: int = 0
    """Inputs queued in its inbox by someone who gives it work (a person, an agent, a schedule, a hook): its
    observer's reports are not among them."""
    pending_reports: int = 0
    """Reports of its observer queued in its inbox for a turn to read (kept apart: a report is no work given)."""
    pending_requests: int = 0
    """Its pending requests that wait on a person."""
    held_requests: int = 0
    """Its pending requests held for its parent agent first."""
    tokens: int = 0
    """Lifetime tokens, from the usage ledger."""
    cost_usd: float = 0.0
    """Lifetime cost, from the usage ledger."""
    last_text: str | None = None
    """The last assistant text."""
    error: str | None = None
    """The error of its last failed turn."""
    context_fill: dict[str, JsonValue] | None = None
    """The newest context measurement (`{"state": "measured", ...}` or `{"state": "compacted", ...}`)."""
    interception: dict[str, JsonValue] | None = None
    """Who holds it, when a person took it over."""
    settings: dict[str, JsonValue] = {}
    """Runtime-owned facts with no column of their own (grant, repo, run-in, ...)."""

    @property
    def inbox_size(self) -> int:
        """Everything queued in its inbox that no turn took yet: its pending inputs and its observer's reports."""
        return self.pending_inputs + self.pending_reports


class SessionDraft(BaseModel):
    """A session to create. The store assigns the id (unless given), times and first conversation."""

    model_config = _FROZEN

    id: str | None = None
    name: str
    role: str
    display_name: str | None = None
    feature: str | None = None
    scope: str | None = None
    status: SessionStatus = "idle"
    source: str = "api"
    model_ref: str | None = None
    group_key: str | None = None
    boss: bool = False
    parent_id: str | None = None
    run_id: str | None = None
    origin: Origin | None = None
    is_observer: bool = False
    settings: dict[str, JsonValue] = {}


class SessionPatch(BaseModel):
    """Changes to a session row; only the fields given are written (`model_fields_set`)."""

    model_config = _FROZEN

    status: SessionStatus | None = None
    display_name: str | None = None
    model_ref: str | None = None
    model_override: str | None = None
    current_turn_id: str | None = None
    turn_attempts: int | None = None
    last_text: str | None = None
    error: str | None = None
    context_fill: dict[str, JsonValue] | None = None
    interception: dict[str, JsonValue] | None = None
    settings: dict[str, JsonValue] | None = None
    is_observer: bool | None = None

    def changes(self) -> dict[str, Any]:
        """The fields to write, by column name."""
        return {name: getattr(self, name) for name in self.model_fields_set}


SessionGroupBy = Literal["role", "status", "source", "feature"]
"""Columns `Store.group_sessions` can count by."""


class SessionClause(BaseModel):
    """One alternative of `SessionFilter.any_of`; every condition given must hold (AND).

    Together they can state a status word (`stuck` = running, no request waiting on a person, quiet) without
    the store knowing the words: the reads translate each word into a clause.
    """

    model_config = _FROZEN

    status: Sequence[SessionStatus] | None = None
    waits_on_person: bool | None = None
    """True: at least one pending request waits on a person (`pending_requests > 0`); False: none does."""
    quiet: bool | None = None
    """True: no activity since the session's quiet cutoff (`SessionFilter.quiet_before`, per role); False: some."""


class SessionFilter(BaseModel):
    """Which sessions a listing or count covers; every condition given must hold (AND)."""

    model_config = _FROZEN

    ids: Sequence[str] | None = None
    status: Sequence[SessionStatus] | None = None
    source: Sequence[str] | None = None
    role: Sequence[str] | None = None
    feature: Sequence[str] | None = None
    group_key: str | None = None
    q: str | None = None
    """A part of the name or the display name, as written; A-Z in any case (as lower() folds on every backend)."""
    name: str | None = None
    """The exact name."""
    scope: str | None = None
    run_id: str | None = None
    parent_id: str | None = None
    is_observer: bool | None = None
    intercepted: bool | None = None
    active_from: AwareDatetime | None = None
    """Last activity at or after this moment."""
    active_to: AwareDatetime | None = None
    """Last activity before this moment."""
    deleted: bool = False
    """True includes soft-deleted sessions."""
    any_of: Sequence[SessionClause] | None = None
    """At least one of these clauses holds (an empty list matches nothing)."""
    quiet_before: AwareDatetime | None = None
    """The quiet cutoff for `SessionClause.quiet`: last activity before this moment. Required when a clause
    asks about quiet sessions."""
    quiet_before_by_role: Mapping[str, AwareDatetime] = {}
    """Per-role quiet cutoffs that replace `quiet_before` for the roles named (their own stuck thresholds)."""
    run_entity: str | None = None
    """Sessions started by a run of this entity (`heartbeat:digest`)."""
    created_from: AwareDatetime | None = None
    """Created at or after this moment."""
    created_to: AwareDatetime | None = None
    """Created before this moment."""
    heads_of: Literal["group_key", "run_id"] | None = None
    """Keep only the newest matching session (by last activity, then id) of each lineage (`group_key`) or run
    (`run_id`); a session without one is its own. Listings and counts then have one row per lineage or run."""


class StateCount(BaseModel):
    """How many sessions share one state that status words derive from."""

    model_config = _FROZEN

    status: str
    waits_on_person: bool
    """At least one pending request of theirs waits on a person."""
    quiet: bool
    """No activity since the filter's `quiet_before` (or their role's cutoff); False when none was given."""
    sessions: int


class SessionGroup(BaseModel):
    """How many sessions share one value of a column, and the newest activity among them."""

    model_config = _FROZEN

    key: str | None
    sessions: int
    last_active_at: AwareDatetime


class ConversationRecord(BaseModel):
    """One conversation of a session; archived ones say why they ended."""

    model_config = _FROZEN

    id: str
    session_id: str
    started_at: AwareDatetime
    ended_at: AwareDatetime | None = None
    end_reason: ConversationEndReason | None = None
    """`clear` (a clear began a new one) or `compact` (a compaction set its messages aside)."""


class InputDraft(BaseModel):
    """An input to queue in a session's inbox."""

    model_config = _FROZEN

    text: str
    origin: Origin | None = None
    meta: bool = False
    """True for text the runtime adds (engine notes, observer reports)."""
    id: str | None = None
    """Its id when the caller chose one (a keyed input: see `Engine.enqueue`); a write adding an input whose id
    is taken is refused (`Conflict`) and adds nothing. None: the store makes one."""
    run_id: str | None = None
    """The run whose work it is: the run the turn that sent it billed (an agent's `agent_enqueue`, say), or whose
    task it is. A turn of an agent of that run begun on it bills the run even after the run ended
    (`runtime.runs.billed_run`). None: the input asks for no run's work (a person's, or sent before inputs said
    so)."""

    @property
    def is_report(self) -> bool:
        """Whether it is an observer's report (or news of one about a sub-agent): counted in the session's
        `pending_reports`, not its `pending_inputs`."""
        return self.origin is not None and self.origin.kind == "observer"


class InputRecord(InputDraft):
    """A queued input."""

    id: str
    session_id: str
    created_at: AwareDatetime
    taken_at: AwareDatetime | None = None
    """When a turn took it (None while pending)."""


class RequestDraft(BaseModel):
    """A request (question, grant, approval, choice) to open."""

    model_config = _FROZEN

    id: str | None = None
    kind: RequestKind
    summary: str
    questions: list[str] | None = None
    options: list[str] | None = None
    tool_call_id: str | None = None
    turn_id: str | None = None
    waits_on: WaitsOn = "person"
    deliver_at: AwareDatetime | None = None
    body: dict[str, JsonValue] = {}
    """Whatever the runtime needs to continue once answered (the deferred tool call, ...)."""


class RequestRecord(RequestDraft):
    """A stored request."""

    id: str
    session_id: str
    status: RequestStatus = "pending"
    created_at: AwareDatetime
    closed_at: AwareDatetime | None = None
    answer: JsonValue = None
    answered_by: str | None = None


class RequestClose(BaseModel):
    """Resolve (with an answer) or dismiss a pending request."""

    model_config = _FROZEN

    request_id: str
    status: Literal["resolved", "dismissed"]
    answer: JsonValue = None
    by: str | None = None


class UsageEntry(BaseModel):
    """One line of the spend ledger; it outlives the session it names."""

    model_config = _FROZEN

    turn_id: str | None = None
    run_id: str | None = None
    role: str | None = None
    model: str | None = None
    usage: Usage
    at: AwareDatetime | None = None
    """Defaults to the write's time."""


@dataclass(frozen=True, slots=True)
class LeaseClaim:
    """An owner's claim of a session's lease, carried by the write that queues work for the session (see
    `Write.claim`)."""

    owner: str
    ttl: float
    """Seconds the lease lasts when the write takes it."""


@dataclass(slots=True)
class Write:
    """One atomic change to one session: durable events plus the state they describe.

    Everything in a `Write` commits together or not at all, so an event is never visible before the state
    it describes is durable. Order inside the transaction: a new conversation (if asked), the session
    patch, inbox, requests, ledger, messages, then the events.

    Treat it as a value: nothing changes a write once made. (It is not a frozen dataclass, whose `__init__`
    sets each of these fields through `object.__setattr__`: about 8x the cost of plain ones, measured, and
    every write of every turn pays it.)
    """

    session_id: str
    events: Sequence[NewEvent] = ()
    session: SessionPatch | None = None
    new_conversation: ConversationEndReason | None = None
    """Archive the current conversation with this reason and start a new one; the events go to the new one."""
    inputs_add: Sequence[InputDraft] = ()
    inputs_take: Sequence[str] = ()
    """Inbox input ids a turn consumed."""
    requests_open: Sequence[RequestDraft] = ()
    requests_close: Sequence[RequestClose] = ()
    requests_escalate: Sequence[str] = ()
    """Held request ids that go to a person now."""
    usage: Sequence[UsageEntry] = ()
    messages: Sequence[JsonValue] = ()
    """Model-layer messages (opaque JSON documents) appended to the session's current conversation, in order.
    History is append-only, so a turn costs the same on turn 1 and turn 200."""
    touch: bool = True
    """Count the write as activity (`last_active_at`)."""
    expect_status: Sequence[SessionStatus] | None = field(default=None)
    """When given, the write fails with `Conflict` unless the session is in one of these statuses."""
    expect_unheld: bool = False
    """When True, the write fails with `Conflict` if someone holds the session (its `interception` is set): a
    take-over, so that of two at once exactly one wins, in any number of engines."""
    delete_until: datetime | None = None
    """When given, soft-delete the session with the write: it stays readable by its id until this time, then it
    is reaped. The write fails with `Conflict` when the session is deleted already, so that of two deletions
    at once exactly one writes (its events are the deleted session's last)."""
    claim: LeaseClaim | None = None
    """When given, the write takes the session's lease for `claim.owner` if nobody holds one, and leaves one
    that stands (anyone's, expired or not) as it is, held so that it cannot be let go before the write commits.
    Work queued while another owner holds the lease is so never stored without one: if that owner lets the
    lease go first, the write takes it; if after, the owner's look once it let go finds the work."""


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a keyset-paginated listing."""

    items: list[T]
    next_cursor: str | None
    """Pass back to read the next page; None on the last one."""


RUN_ENDINGS = ("completed", "failed", "cancelled", "skipped", "timed_out", "interrupted")
"""The statuses a run ends with (before: `running`)."""

RUN_KINDS = ("workflow", "pipeline", "heartbeat", "hook")
"""The kinds of run agentwatch names: `engine.run`'s (`workflow` unless told), a heartbeat's tick, a hook's fire.
A run may have a kind of its own (`engine.run(..., kind="etl")`): it is as much a kind once a run has it."""


class RunDraft(BaseModel):
    """A run to record: a workflow or pipeline run, heartbeat tick or hook fire."""

    model_config = _FROZEN

    id: str | None = None
    kind: str
    """`workflow`, `pipeline`, `heartbeat`, `hook`, ..."""
    entity: str | None = None
    """What it is a run of (`heartbeat:digest`); comparisons go to the previous run of the same entity."""
    status: str = "running"
    input: JsonValue = None
    parent_run_id: str | None = None
    brain_sha: str | None = None
    expires_at: AwareDatetime | None = None
    """While it runs: when it lapses unless its process renews it (`renew_runs`); a lapsed run is ended
    `interrupted` (`end_lapsed_runs`). None: it never lapses."""


class RunRecord(RunDraft):
    """A stored run."""

    id: str
    started_at: AwareDatetime
    ended_at: AwareDatetime | None = None
    status_reason: str | None = None
    error: JsonValue = None


class RunPatch(BaseModel):
    """Changes to a run; only the fields given are written."""

    model_config = _FROZEN

    status: str | None = None
    status_reason: str | None = None
    ended_at: AwareDatetime | None = None
    error: JsonValue = None


class SpanDraft(BaseModel):
    """A span of a run: a phase, task, step, turn, wait or back-off."""

    model_config = _FROZEN

    id: str | None = None
    run_id: str
    parent_span_id: str | None = None
    kind: str
    label: str
    status: str = "running"
    attempt: int = 1
    attempt_of: str | None = None
    ref: dict[str, JsonValue] | None = None
    started_at: AwareDatetime | None = None


class SpanRecord(SpanDraft):
    """A stored span."""

    id: str
    started_at: AwareDatetime
    ended_at: AwareDatetime | None = None
    cost_usd: float = 0.0
    tokens: int = 0


class SpanPatch(BaseModel):
    """Changes to a span; only the fields given are written."""

    model_config = _FROZEN

    status: str | None = None
    ended_at: AwareDatetime | None = None
    cost_usd: float | None = None
    tokens: int | None = None
    ref: dict[str, JsonValue] | None = None
    """What to open, replacing the one it had (a task adds the sub-agents its agent spawned)."""


class RunFilter(BaseModel):
    """Which runs to list (every field ANDed; None: any)."""

    model_config = _FROZEN

    entity: str | None = None
    kind: str | None = None
    status: tuple[str, ...] | None = None
    started_before: AwareDatetime | None = None
    """Only runs that started before this moment (the runs before another one of the same entity)."""


class TurnUsage(BaseModel):
    """What one turn of one session billed to a run, from the spend ledger (it outlives the session)."""

    model_config = _FROZEN

    session_id: str
    turn_id: str | None
    role: str | None
    model: str | None
    first_at: AwareDatetime
    """When its first model request was billed."""
    last_at: AwareDatetime
    """When its last one was."""
    usage: Usage


class JournalEntry(BaseModel):
    """A line of a run's journal (retries, pauses, lifecycle)."""

    model_config = _FROZEN

    id: str | None = None
    run_id: str
    at: AwareDatetime | None = None
    kind: str
    message: str
    detail: JsonValue = None


class ObserverRef(BaseModel):
    """The observer paired with an observed session, kept with it so a restart can reattach."""

    model_config = _FROZEN

    observed_session_id: str
    observer_type: str
    observer_session_id: str | None = None
    stopped: bool = False
    """The stopped-by-user tombstone: a stopped observer is never silently brought back."""
    stopped_at: AwareDatetime | None = None
    updated_at: AwareDatetime | None = None


class LeaseRecord(BaseModel):
    """Who owns a session's turns, and until when (see `Store.acquire_lease`)."""

    model_config = _FROZEN

    session_id: str
    owner: str
    """The owner's process identity, as it gave it to `acquire_lease`."""
    expires_at: AwareDatetime
    """When the lease lapses unless renewed first, by the store's one clock."""
    expired: bool
    """Whether `expires_at` had passed when the store read the lease (by the same clock)."""


class StoreInfo(BaseModel):
    """What `agentwatch db info` shows."""

    model_config = _FROZEN

    backend: Literal["sqlite", "postgres"]
    url: str
    """The store URL with any password hidden."""
    schema_version: int
    code_schema_version: int
    sessions: int
    events: int
    path_bytes: int | None = None
    """Size on disk (SQLite)."""
