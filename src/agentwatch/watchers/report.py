"""ObserverReport: the one channel from an observer to the agent it watches, and it runs one way only.

The tool is always in an observer session's tool set (its role's tools minus the messaging and spawning
tools and `ask_user`, plus this one). A call delivers nothing, and says why, when:

| condition | error |
|---|---|
| the caller is not an observer session | `not_delivered`: only an observer can report |
| its pairing is missing, denied, retired, stopped or blocked | `not_delivered`: the pairing is not armed |
| the observed agent is gone, deleted or a stopped task (`cancelled`) | `not_delivered`: not running; pairing retires |

Otherwise the report is always recorded (an `observer.report` event on the observed session) and queued in its
inbox as a meta input from `observer:<type>`, and the call returns at once: it never waits on the observed
agent. Reports are never part of the next digest. Whether a queued report starts a turn by itself is decided
where turns are planned (`agentwatch.runtime.plan`), and the answer says what the decision will be:

- a working session (its turn running, or waiting on a request) reads it in the turn that follows;
- an idle chat, boss or observer session starts that turn at once;
- a task whose turn is over (`completed`, `failed`, `interrupted`: made by `engine.task`, `agent_task`,
  `agent_create` or the API) keeps its pairing armed and reads the report at the next turn it is given: the
  report starts none by itself;
- the boss (the main conversation) or a chat whose turn a person stopped lives on: it too keeps its pairing
  armed and reads the report at the next turn it is given, which the report does not start (it does not undo
  the stop);
- **loop guard**: a report can start a turn of the observed agent, whose digest goes back to the observer,
  which could report again, and so on. So while the observed agent's latest turn was started by observer
  reports alone, a report starts no turn (it is read at the next turn the agent is given, with that turn's
  other input): at most one turn in a row is ever caused by reports, and no report made is lost.

When the observed agent was spawned by another agent that is still working (running or waiting on a request),
the report also reaches that parent as a meta input from `observer:<type>@<child session id>`, worded as news
about its sub-agent (read in the parent's turn that follows, under the same rules).

**One way.** An observer cannot message, spawn, answer, stop or take over anyone (every tool of the `spawn`
grant is withheld, and the policy refuses them all the same). No agent can `agent_enqueue` to an observer
session, nor act on one in any other way (stop, delete, take over, hand back, await, answer or escalate its
requests): a person does that, through the API or the CLI, and only a person's stop is a tombstone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import Field, JsonValue, field_validator

from agentwatch.errors import AgentwatchError, Conflict, NotFound
from agentwatch.events import NewEvent, ObserverReported, Origin
from agentwatch.runtime.leases import claimed_commit
from agentwatch.runtime.plan import WORKING, lives_on, new_report_held
from agentwatch.runtime.policy import Policy, ToolRequest, Verdict
from agentwatch.runtime.roster import GRANTS
from agentwatch.runtime.tools import Args, Caller, Tool, parse_args
from agentwatch.store import InputDraft, SessionRecord, Store, Write
from agentwatch.watchers.pairing import Pairing, PairingRegistry, observed_alive, observer_source

if TYPE_CHECKING:
    from agentwatch.runtime.services import Runtime

__all__ = [
    "AGENT_TOOLS",
    "REPORT_TOOL",
    "ReportHub",
    "ReportNotDelivered",
    "observer_report_tool",
    "observer_tool_set",
    "one_way_policy",
    "send_report",
]

REPORT_TOOL = "ObserverReport"
AGENT_TOOLS = GRANTS["spawn"]
"""Tools that talk to, start or act on other agents (all that the `spawn` grant allows: a message, a task, an
answer, a stop, a take-over, ...): never available to an observer."""
_WITHHELD = AGENT_TOOLS | {"ask_user"}  # an observer holds no consent: it opens no requests either
_TARGET_KEYS = ("agentId", "agent_id", "id")
"""Where a call of one of `AGENT_TOOLS` names the agent it acts on (the others name a request)."""

DESCRIPTION = (
    "Pass a report to the agent you observe; it reaches that agent alone, so there is no recipient to name. "
    "Use it only for something that truly helps: a mistake about to compound, a constraint it missed, "
    "something it should see. Most of the time there is nothing to report: then end your turn without "
    "calling this."
)


class ReportNotDelivered(AgentwatchError):
    """An ObserverReport call that delivered nothing; the message says why."""

    code = "not_delivered"


class ReportArgs(Args):
    report: str = Field(min_length=1, description="What the observed agent should know: short and concrete.")

    @field_validator("report")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the report is blank; write what the observed agent should know")
        return value.strip()


class ReportHub(Protocol):
    """What the report tool needs of the observer subsystem (`ObserverAgents` is the one in an engine)."""

    @property
    def registry(self) -> PairingRegistry:
        """The engine's pairings."""

    async def pairing_of_observer(self, observer: SessionRecord) -> Pairing | None:
        """The pairing an observer session serves, if any."""


def report_text(observer_type: str, report: str) -> str:
    """The input the observed agent reads."""
    return (
        f"[agentwatch] A report from your observer {observer_type!r}, which watches your work in the "
        f"background and cannot read replies:\n\n{report}"
    )


async def send_report(registry: PairingRegistry, pairing: Pairing, report: str) -> str:
    """Record `report` on the observed agent and queue it for its next turn; raises `ReportNotDelivered`.

    Never waits on the observed agent: whether the report starts a turn by itself is decided where the turn
    is planned (`agentwatch.runtime.plan`), and the answer says what that decision will be. A pairing being
    (re-)armed is waited for, so a report that races the arming is not refused.
    """
    engine = registry.engine
    if pairing.state is None and pairing.arming is not None:
        await asyncio.wait({pairing.arming}, timeout=ARMING_WAIT)
    if pairing.state != "armed":
        state = pairing.state or "not armed yet"
        raise ReportNotDelivered(f"your observer pairing is {state} (not armed), so the report was not delivered")
    try:
        observed = await engine.store.get_session(pairing.observed_session_id)
    except NotFound:
        observed = None
    if observed is None or not observed_alive(observed):
        status = "gone" if observed is None else ("deleted" if observed.deleted_at else observed.status)
        if observed is not None:
            retired = f"the observed agent was {status}"
            await registry.set_state(pairing, "retired", retired, record=observed.deleted_at is None)
        raise ReportNotDelivered(
            f"the observed agent {pairing.observed_name!r} is not running ({status}); the report was not delivered"
        )
    held = await new_report_held(engine.store, observed)  # read before the report is in the inbox
    source = observer_source(pairing.observer_type)
    reported = ObserverReported(
        observer_type=pairing.observer_type, observer_session_id=pairing.observer_session_id, report=report
    )
    draft = InputDraft(
        text=report_text(pairing.observer_type, report), origin=Origin(kind="observer", ref=source), meta=True
    )
    write = Write(observed.id, inputs_add=[draft], events=[NewEvent(reported)], touch=False)
    try:
        # Told "it reads it at its next turn" because it is working: queued only while it still is, so the
        # plan (which sees the report came before the turn ended) starts the turn that follows, as promised.
        working = held is None and not lives_on(observed) and observed.status in WORKING
        await _queue(engine, observed.id, replace(write, expect_status=WORKING) if working else write)
    except Conflict:  # its turn ended meanwhile: the report waits for the next turn it is given
        observed = await engine.store.get_session(observed.id)
        held = await new_report_held(engine.store, observed)
        await _queue(engine, observed.id, write)
    parent = await _working_parent(engine.store, observed)
    if parent is not None:
        about = InputDraft(
            text=parent_report_text(pairing.observer_type, observed, report),
            origin=Origin(kind="observer", ref=f"{source}@{observed.id}"),
            meta=True,
        )
        try:  # only for a parent still working, which reads it in the turn that follows
            await _queue(engine, parent.id, Write(parent.id, inputs_add=[about], touch=False, expect_status=WORKING))
        except Conflict:
            parent = None  # its work ended meanwhile
    also = f" (and to its parent {parent.name!r}, which is still working)" if parent is not None else ""
    if held == "loop":
        return (
            f"Report queued for {pairing.target}{also}; its last turn was started by observer reports alone, so "
            "this one starts none: it reads it at the next turn it is given."
        )
    if held == "turn_over":
        return (
            f"Report queued for {pairing.target}{also}; its turn is over ({observed.status}), so it reads it at "
            "the next turn it is given."
        )
    return f"Report queued for {pairing.target}{also}; it reads it at its next turn."


ARMING_WAIT = 10.0
"""Seconds a report waits for its pairing to finish (re-)arming."""


async def _queue(engine: Runtime, session_id: str, write: Write) -> None:
    """Commit `write` (which queues input) and let the session's turn loop plan: the plan, not the sender,
    decides whether the input starts a turn now."""
    # never left without an owner to read it (see runtime.leases)
    await claimed_commit(engine, await engine.driver(session_id), write)


def parent_report_text(observer_type: str, child: SessionRecord, report: str) -> str:
    """The input a still-working parent reads about its child's report."""
    return (
        f"[agentwatch] A report from the observer {observer_type!r} about your sub-agent {child.name!r} "
        f"(id {child.id}); the sub-agent got it too:\n\n{report}"
    )


async def _working_parent(store: Store, child: SessionRecord) -> SessionRecord | None:
    """The agent that spawned `child`, when it is still working (running or waiting on a request)."""
    if child.parent_id is None or child.origin is None or child.origin.kind != "session":
        return None
    try:
        parent = await store.get_session(child.parent_id)
    except NotFound:
        return None
    if parent.deleted_at is not None or parent.is_observer or parent.status not in WORKING:
        return None
    return parent


def observer_report_tool(hub: ReportHub) -> Tool:
    """The `ObserverReport` tool, bound to an engine's observer subsystem."""

    async def handler(engine: Runtime, caller: Caller, raw: dict[str, Any]) -> JsonValue:
        args = parse_args(ReportArgs, REPORT_TOOL, raw)
        if caller.session_id is None:
            raise ReportNotDelivered(f"{REPORT_TOOL} is for observer agents; this call comes from outside any agent")
        session = await engine.store.get_session(caller.session_id)
        if not session.is_observer:
            raise ReportNotDelivered(
                f"{REPORT_TOOL} is only available to an observer agent; session {session.id!r} observes nothing"
            )
        pairing = await hub.pairing_of_observer(session)
        if pairing is None:
            raise ReportNotDelivered(
                "your observer pairing is not armed (never set up, or over); the report was not delivered"
            )
        message = await send_report(hub.registry, pairing, args.report)
        return {"delivered": True, "observedId": pairing.observed_session_id, "message": message}

    schema = ReportArgs.model_json_schema(by_alias=True)
    schema.pop("title", None)
    return Tool(REPORT_TOOL, DESCRIPTION, schema, handler, agents_only=True)


def observer_tool_set(session: SessionRecord, names: Sequence[str]) -> Sequence[str]:
    """A tool-set hook: an observer session gets its role's tools minus the withheld ones, plus the report."""
    if not session.is_observer:
        return names
    return [name for name in names if name not in _WITHHELD and name != REPORT_TOOL] + [REPORT_TOOL]


def one_way_policy(store: Store) -> Policy:
    """Refuse an observer every tool that talks to or acts on an agent; refuse every agent a message to an
    observer, and any other act on one (a stop, a delete, a take-over, an answer to its request): an
    observer's only master is a person, whose stop is its tombstone."""

    def decide(request: ToolRequest) -> Awaitable[Verdict | None] | None:
        if request.purpose != "call" or request.tool_name not in AGENT_TOOLS:
            return None  # at once: the observers' own gates, asked before every batch, wait on nothing here
        return decide_call(request)

    async def decide_call(request: ToolRequest) -> Verdict | None:
        if request.session_id is not None and await _is_observer(store, request.session_id):
            return Verdict(
                "deny",
                f"observers speak only through {REPORT_TOOL}; {request.tool_name} is not available to an observer",
            )
        if request.tool_name != "agent_enqueue" and request.session_id is None:
            return None  # a person (the API, the CLI) acts on any agent
        target = await _target(store, request.input)
        if target is None or not await _is_observer(store, target):
            return None
        if request.tool_name == "agent_enqueue":
            return Verdict(
                "deny",
                "that agent is a background observer and takes no messages: it reads your activity and reports "
                "to you on its own",
            )
        return Verdict(
            "deny",
            f"that agent is a background observer: only a person acts on it, so {request.tool_name} is not "
            "available to an agent; it reads your activity and reports to you on its own",
        )

    return Policy("observer-one-way", decide)


async def _target(store: Store, arguments: Mapping[str, Any]) -> str | None:
    """The session a call acts on: the agent it names, or the one whose request it answers or escalates."""
    for key in _TARGET_KEYS:
        value = arguments.get(key)
        if isinstance(value, str):
            return value
    hitl_id = arguments.get("hitlId", arguments.get("hitl_id"))
    if not isinstance(hitl_id, str):
        return None
    try:
        return (await store.get_request(hitl_id)).session_id
    except NotFound:
        return None


async def _is_observer(store: Store, session_id: str) -> bool:
    try:
        return (await store.get_session(session_id)).is_observer
    except NotFound:
        return False
