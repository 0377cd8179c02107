"""The answers of the read tools as models: what `agent_list`, `agent_get`, ... return, field by field.

Each is a `Wire` answer (camelCase on the wire, dumped once by the tool's handler). Timestamps are ISO 8601
text exactly as stored (`+00:00`, not `Z`). Three parts are stored state passed through as they are stored,
snake_case and open-ended, so they are typed as JSON objects rather than modelled field by field: an event's
`payload` (its shape per `type` is the event model of `agentwatch.events`), a session's `contextFill` and
`interception`, and `agent_export`'s `requests` and `usage`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, JsonValue

from agentwatch.tools import Answer, omitted

__all__ = [
    "Against",
    "AgainstDefinition",
    "AgainstPrevious",
    "AgentRecord",
    "ConversationEntry",
    "CountsAnswer",
    "CurrentItem",
    "CurrentSnapshot",
    "EventEntry",
    "ExportAnswer",
    "HistoryAnswer",
    "ListAnswer",
    "MailboxEntry",
    "ObserverEntry",
    "ObserverReportEntry",
    "OldestRequest",
    "OwnerEntry",
    "PartialUsage",
    "PendingHitl",
    "PromptAnswer",
    "RecentEntry",
    "RoleEntry",
    "SessionRow",
    "SessionUsage",
    "Spend",
    "StatusSnapshot",
    "SubagentUsage",
    "SummaryAnswer",
    "SystemPrompt",
    "TailAnswer",
    "TailRow",
    "Truncation",
    "WindowCounts",
]

Timestamp = str
"""An aware moment as ISO 8601 text."""


class SessionUsage(Answer):
    """What a session spent in its lifetime."""

    cost_usd: float
    tokens: int


class OldestRequest(Answer):
    """The oldest pending request that waits on a person."""

    id: str
    summary: str


class RecentEntry(Answer):
    """A session as one entry of a grouped row's `recent`."""

    id: str
    name: str
    status: str
    word: str
    created_at: Timestamp | None
    last_active_at: Timestamp | None


class CurrentItem(Answer):
    """What a running session is doing now."""

    type: Literal["message", "tool"]
    tool_name: str | None
    title: str = Field(
        description="The running call's tool (`crawl +1 more` while more run beside it), or what the model does: "
        "`thinking`, `writing`, or `waiting for the model` (asked, nothing streamed yet)."
    )


class SessionRow(Answer):
    """One `agent_list` row: the one shape of a session that list, get and export share."""

    id: str
    name: str
    display_name: str | None
    role: str
    feature: str | None
    status: str
    word: str
    source: str
    model_ref: str | None
    group_key: str | None
    boss: bool
    created_at: Timestamp | None
    last_active_at: Timestamp | None
    deleted_at: Timestamp | None
    usage: SessionUsage
    pending_inputs: int = Field(
        description="Inputs queued for it (by a person, an agent, a schedule or a hook) that no turn took yet: "
        "work waiting. Its observer's reports are not among them (`pendingReports`)."
    )
    pending_reports: int = Field(
        description="Reports of its observer waiting for a turn of it to read them (a finished task reads them at "
        "the next turn it is given): news for it, not work given to it."
    )
    pending_requests: int
    held_requests: int = Field(
        description="Questions it asked that wait on its parent agent first (they come to a person at their "
        "`deliverAt`, or at once with agent_escalate)."
    )
    oldest_request: OldestRequest | None
    interception: dict[str, JsonValue] | None = Field(description="Who took the session over (stored form).")
    parent_id: str | None
    run_id: str | None
    origin: dict[str, JsonValue] | None = Field(description="What started it: `{kind, ref}`.")
    session_count: int | None = Field(default=None, description="Grouped listings: sessions in the lineage or run.")
    recent: list[RecentEntry] | None = Field(default=None, description="Grouped listings: its newest sessions.")
    current_item: CurrentItem | None = Field(
        default=None,
        description="What a working agent does now (as `current.currentItem` of agent_get), as the live ring "
        "says it: null for the others, and for one whose turn runs where this service's ring does not reach.",
    )


class CountsAnswer(Answer):
    """`counts` of `agent_list`: rows per word, the total, and the moment they were judged at."""

    words: dict[str, int]
    total: int
    at: Timestamp | None


class ListAnswer(Answer):
    """The `agent_list` answer."""

    agents: list[SessionRow]
    next_cursor: str | None
    counts: CountsAnswer | None = omitted("Per-word counts and the total; only on a first page asked with counts.")


class PendingHitl(Answer):
    """The oldest pending request of a session."""

    hitl_id: str
    kind: str
    questions: list[str] | None
    options: list[str] | None
    """For a `choice`: the options to choose from (answer with one of them; `agent_answer` refuses others)."""
    multiple: bool | None
    """For a `choice`: whether several options may be chosen (the answer is then a list); null otherwise."""
    deliver_at: Timestamp | None


class PartialUsage(Answer):
    """What the session's last finished turn spent, and how long it took: a turn continued after a restart or
    resumed after a request counts all its parts."""

    tokens: int = Field(description="Input and output tokens of every part of the turn.")
    cost_usd: float | None = Field(description="What every part of the turn cost, when the price is known.")
    duration_ms: int | None = Field(
        description="How long its parts ran, each from its start to its end (or to the last thing it did before a "
        "restart cut it off): the time the engine was down or a person took to answer is not counted."
    )


class CurrentSnapshot(Answer):
    """`current`: the monitoring snapshot of one session."""

    last_activity_at: Timestamp | None
    current_item: CurrentItem | None
    last_assistant_text: str | None
    pending_hitl: PendingHitl | None
    last_tool_name: str | None
    partial_usage: PartialUsage | None
    cursor: str


class StatusSnapshot(Answer):
    """What `agent_await` and `agent_task` return: `current` with the agent's id, status and word, and
    whether the wait timed out or the agent was deleted."""

    agent_id: str
    name: str
    status: str
    word: str
    error: str | None
    last_activity_at: Timestamp | None
    current_item: CurrentItem | None
    last_assistant_text: str | None
    pending_hitl: PendingHitl | None
    last_tool_name: str | None
    partial_usage: PartialUsage | None
    cursor: str
    timed_out: bool
    deleted: bool
    role_problem: str | None = Field(
        description="Set when the wait timed out and the engine answering cannot run the agent's role (its roster "
        "lacks it): why, and what to do. The agent's work waits, nothing lost, for an engine that has the role; "
        "null otherwise."
    )


class SubagentUsage(Answer):
    """The usage of a session and every sub-agent it spawned."""

    tokens: int
    cost_usd: float
    subagents: int


class MailboxEntry(Answer):
    """An input waiting in the session's inbox."""

    id: str
    text: str
    created_at: Timestamp | None
    meta: bool


class ObserverReportEntry(Answer):
    """One report an observer delivered."""

    at: Timestamp
    observer_type: str
    observer_session_id: str | None
    """None for a rule observer, which reports without a session of its own."""
    report: str
    delivery: Literal["queued", "read"]
    """`queued` while the report waits in the agent's inbox for its next turn; `read` once a turn took it."""


class ObserverEntry(Answer):
    """The observer of a session: its type and session, the pairing state and the latest reports."""

    observer_type: str | None
    observer_session_id: str | None
    state: str = Field(
        description="The pairing's state: armed, denied, retired, stopped or blocked; `failing` when it is armed but "
        "the observer's latest turn failed (the reason gives the error; each new batch is still tried, and the "
        "agent it watches never waits on it)."
    )
    reason: str | None
    since: Timestamp | None
    stopped: bool
    reports: list[ObserverReportEntry]


class OwnerEntry(Answer):
    """The engine that owns a session's turns (its lease), as `agent_get` shows it."""

    owner: str = Field(description="The engine's identity (own_<host>_<pid>_<random>).")
    expires_at: Timestamp
    expired: bool = Field(
        description="Nobody renewed the lease in time (its engine stopped or lost the store): the next engine to "
        "sweep the store continues the turn (a running `agentwatch serve` does within about a second)."
    )


class AgentRecord(SessionRow):
    """The `agent_get` answer: the list row plus model, grant, prompt, output, fill, mailbox and `current`.

    Fields other agent-watching products carry that have no meaning here yet (a CLI harness, a planner, a
    repository or working directory, per-session grants, schedules, watches) are left out rather than sent
    always empty; docs/fields.md lists them and why.
    """

    session_count: int | None = omitted("Only on grouped `agent_list` rows; never on a record.")
    recent: list[RecentEntry] | None = omitted("Only on grouped `agent_list` rows; never on a record.")
    current_item: CurrentItem | None = omitted("Only on `agent_list` rows; a record has `current.currentItem`.")
    scope: str | None
    usage_with_subagents: SubagentUsage
    role_model_ref: str | None
    role_problem: str | None = Field(
        description="Why the engine answering cannot run the agent's role (its roster lacks it), and what to do; "
        "null when it can. Its work waits, nothing lost, for an engine that has the role."
    )
    model_override: str | None
    capabilities: list[str]
    system_prompt: str | None
    text_output: str | None
    error: str | None
    context_fill: dict[str, JsonValue] = Field(
        description="How full the context is: `state` (measured or compacted), `tokens`, `model`, `window`, "
        "`windowSource`, `preTokens`, `at`."
    )
    reap_at: Timestamp | None
    mailbox: list[MailboxEntry]
    observer: ObserverEntry | None
    lease: OwnerEntry | None = Field(description="Which engine owns its turns, while one does.")
    current: CurrentSnapshot


class EventEntry(Answer):
    """One event as `agent_history` speaks it: the envelope, and the payload as stored."""

    id: str
    seq: int
    at: Timestamp | None
    type: str
    turn_id: str | None
    conversation_id: str | None
    cursor: str
    payload: dict[str, JsonValue] = Field(description="The event's fields as stored (snake_case, per `type`).")
    truncated: bool | None = omitted("true when the payload was too large to send; it holds a preview instead.")


class ConversationEntry(Answer):
    """One conversation of a session, with why it ended."""

    id: str
    started_at: Timestamp | None
    ended_at: Timestamp | None
    end_reason: str | None
    current: bool


class HistoryAnswer(Answer):
    """The `agent_history` answer."""

    id: str
    conversation_id: str | None
    episode_id: str | None
    events: list[EventEntry]
    next_cursor: str | None
    conversations: list[ConversationEntry]


class TailRow(Answer):
    """One event as a compact tail row."""

    id: str
    at: Timestamp | None
    type: str
    item_type: str | None
    title: str | None
    tool_name: str | None
    detail: str | None
    status: str | None
    truncated: bool


class TailAnswer(Answer):
    """The `agent_tail` answer."""

    events: list[TailRow]
    cursor: str
    has_more: bool


class SystemPrompt(Answer):
    """A system prompt and its hash (the text is None when it was never recorded)."""

    text: str | None
    hash: str | None


class AgainstDefinition(Answer):
    """The diff of a prompt against what its role composes now."""

    kind: Literal["definition"] = "definition"
    role: str
    hash: str
    diff: list[str]


class AgainstPrevious(Answer):
    """The diff of a prompt against the dispatch before it (none: `turnId` null and no hunks)."""

    kind: Literal["previous"] = "previous"
    turn_id: str | None
    hash: str | None
    diff: list[str]


Against = AgainstDefinition | AgainstPrevious


class PromptAnswer(Answer):
    """The `agent_prompt` answer."""

    id: str
    turn_id: str | None
    event_id: str | None
    at: Timestamp | None
    model: str | None
    trigger: str
    system: SystemPrompt
    user: str | None
    against: Against | None = omitted("Only when `against` was asked.")


class Spend(Answer):
    """What agents spent."""

    cost_usd: float
    tokens: int


class WindowCounts(Answer):
    """Sessions started, failed and waiting in a stretch of time, and what was spent."""

    from_: Timestamp | None = Field(alias="from")
    to: Timestamp | None
    started: int
    failed: int
    waiting: int
    spend: Spend
    previous: WindowCounts | None = omitted("The same stretch just before.")


class RoleEntry(Answer):
    """One role's sessions and newest activity."""

    role: str | None
    sessions: int
    last_active_at: Timestamp | None


class SummaryAnswer(Answer):
    """The `agent_summary` answer."""

    at: Timestamp | None
    statuses: dict[str, int]
    total: int
    working: int
    lineages: int
    intercepted: int
    words: dict[str, int] | None = omitted("With `words: true`: the lineages by the word they say now.")
    window: WindowCounts
    by_role: list[RoleEntry] | None = omitted('With `by: "role"`.')


class Truncation(Answer):
    """Where an answer was cut to stay within its size cap, what it left out and how to read that."""

    history_events: int
    """Events the answer holds."""
    last_seq: int
    """The seq of the last event it holds (0: none); the events after it were left out."""
    left_out: int
    """How many events after `lastSeq` were left out (every one the agent had when it was exported)."""
    cursor: str
    """The stream position after the last event it holds: `agent_tail {afterId: cursor}` reads on from there."""
    reason: str


class ExportAnswer(Answer):
    """The `agent_export` answer."""

    exported_at: Timestamp | None
    agent: AgentRecord
    conversations: list[ConversationEntry]
    history: list[EventEntry]
    requests: list[dict[str, JsonValue]] = Field(description="Every request it opened, as stored (snake_case).")
    usage: dict[str, JsonValue] = Field(description="Its lifetime usage from the ledger, as stored, plus `tokens`.")
    truncated: Truncation | None = omitted("Present when `history` was cut at the size cap.")
