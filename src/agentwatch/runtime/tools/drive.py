"""Spawn and drive tools: agent_create, agent_enqueue, agent_await, agent_task, agent_answer, agent_escalate,
agent_stop, agent_take_over, agent_hand_back, agent_delete.

An agent needs the `spawn` grant to call them (`roster.GRANTS` is the one table of what each grant allows).
A session an agent creates records the agent as its parent (`parentId`), inherits its run (`runId`) and names
it as its origin.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AliasChoices, Field, JsonValue

from agentwatch.errors import Conflict
from agentwatch.events import NewEvent, Origin, RuntimeNotice
from agentwatch.reads.answers import StatusSnapshot
from agentwatch.reads.current import snapshot_answer
from agentwatch.runtime.leases import claimed_commit
from agentwatch.runtime.roster import capability_for
from agentwatch.runtime.services import Runtime
from agentwatch.store import SessionPatch, SessionRecord, Write
from agentwatch.tools import (
    AgentName,
    Answer,
    Args,
    BoundedJson,
    Caller,
    Count,
    Id,
    Name,
    Prompt,
    Tool,
    TypedName,
    typed_tool,
)

__all__ = [
    "AnswerArgs",
    "AnswerResult",
    "AwaitArgs",
    "CreateArgs",
    "Created",
    "DeleteArgs",
    "Deleted",
    "EnqueueArgs",
    "Enqueued",
    "EscalateArgs",
    "Escalated",
    "HandBackArgs",
    "Held",
    "StopArgs",
    "Stopped",
    "TakeOverArgs",
    "TaskArgs",
    "drive_tools",
]

MAX_TIMEOUT_MS = 3_600_000


AgentId = Annotated[
    Id,
    Field(
        description="The agent's id (ses_...); `id` is taken too, as the other tools name it.",
        validation_alias=AliasChoices("agentId", "agent_id", "id"),
    ),
]
"""The agent a tool acts on, as `agentId` (also spelled `agent_id`, or `id` as in the other tools)."""


class CreateArgs(Args):
    """Arguments of `agent_create`."""

    role: Name = Field(description="The agent type (role) to run.")
    name: AgentName | None = Field(
        default=None, description="A name unique among live agents of its scope; made up when absent."
    )
    scope: Name | None = Field(
        default=None, description="The chat the agent belongs to (e.g. '42:bot1'); global when absent."
    )
    prompt: Prompt | None = Field(default=None, description="A first input to queue right away.")
    display_name: TypedName | None = Field(default=None, description="A friendlier name to show.")
    group_key: Name | None = Field(default=None, description="Its lineage key (e.g. 'hb:digest').")


class EnqueueArgs(Args):
    """Arguments of `agent_enqueue` (`agentId` may be spelled `agent_id` or `id`)."""

    agent_id: AgentId
    prompt: Prompt = Field(description="The input for its next turn.")
    key: Name | None = Field(
        default=None,
        description="Queue once per key: an input with a key this agent was sent before queues nothing and answers "
        "duplicate: true, so a scheduler may send it again safely; the same key with other text is refused.",
    )


class AwaitArgs(Args):
    """Arguments of `agent_await` (`agentId` may be spelled `agent_id` or `id`)."""

    agent_id: AgentId
    timeout_ms: Count = Field(default=60_000, ge=0, le=MAX_TIMEOUT_MS, description="How long to wait, in milliseconds.")


class TaskArgs(Args):
    """Arguments of `agent_task`."""

    role: Name = Field(description="The agent type (role) to run.")
    prompt: Prompt = Field(description="The task.")
    name: AgentName | None = Field(default=None, description="A name for the new agent; made up when absent.")
    timeout_ms: Count = Field(
        default=600_000, ge=0, le=MAX_TIMEOUT_MS, description="How long to wait, in milliseconds."
    )


class AnswerArgs(Args):
    """Arguments of `agent_answer`."""

    hitl_id: Id = Field(description="The request to answer (current.pendingHitl.hitlId).")
    answer: BoundedJson = Field(
        description="The answer: text for a question; true/false, {approved, message} or yes/no for an approval "
        "(JSON at most 16 deep, 10,000 values, 100,000 characters of text)."
    )


class FireArgs(Args):
    """Arguments of `hook_fire`."""

    name: Name = Field(description="The hook to fire ([hooks.<name>] in agentwatch.toml).")
    input: BoundedJson = Field(
        default=None, description="JSON for this fire: the run's input, given to the agent after the hook's prompt."
    )
    key: Name | None = Field(
        default=None,
        description="Fire once per key: a fire with a key that fired before starts nothing and answers that run "
        "(duplicate: true), so a scheduler may send it again safely; the same key with another input is refused.",
    )


class Fired(Answer):
    """The `hook_fire` answer."""

    run_id: str
    hook: str
    duplicate: bool


class EscalateArgs(Args):
    """Arguments of `agent_escalate`."""

    hitl_id: Id = Field(description="The request held for the parent agent (current.pendingHitl.hitlId).")


class StopArgs(Args):
    """Arguments of `agent_stop`."""

    id: Id = Field(description="The agent's id (ses_...).")


class TakeOverArgs(Args):
    """Arguments of `agent_take_over`."""

    id: Id = Field(description="The agent's id (ses_...).")
    by: TypedName | None = Field(
        default=None, description="Who takes it over (a person's name); 'a person' when absent."
    )


class HandBackArgs(Args):
    """Arguments of `agent_hand_back`."""

    id: Id = Field(description="The agent's id (ses_...).")


class DeleteArgs(Args):
    """Arguments of `agent_delete`."""

    id: Id = Field(description="The agent's id (ses_...).")


class Created(Answer):
    """The `agent_create` answer."""

    agent_id: str
    name: str
    status: str
    pending_inputs: int


class Enqueued(Answer):
    """The `agent_enqueue` answer (`duplicate`: its key was sent before, and nothing was queued)."""

    agent_id: str
    pending_inputs: int
    duplicate: bool


class AnswerResult(Answer):
    """The `agent_answer` answer."""

    hitl_id: str
    agent_id: str
    status: str


class Escalated(Answer):
    """The `agent_escalate` answer: the request now waits on a person (`waitsOn`)."""

    hitl_id: str
    agent_id: str
    status: str
    waits_on: str


class Stopped(Answer):
    """The `agent_stop` answer: whether a turn was stopped (it ended `cancelled`), and by whom."""

    id: str
    stopped: bool
    status: str
    by: str


class Held(Answer):
    """The `agent_take_over` and `agent_hand_back` answer: who holds the session now (null: nobody), and the
    inputs waiting for it."""

    id: str
    interception: dict[str, JsonValue] | None
    pending_inputs: int


class Deleted(Answer):
    """The `agent_delete` answer."""

    id: str
    deleted_at: str | None
    reap_at: str | None


async def _create_child(engine: Runtime, caller: Caller, args: CreateArgs | TaskArgs, source: str) -> SessionRecord:
    parent = await engine.store.get_session(caller.session_id) if caller.session_id else None
    scope = args.scope if isinstance(args, CreateArgs) else None
    session = await engine.create(
        args.role,
        name=args.name,
        scope=scope,
        parent_id=parent.id if parent else None,
        run_id=parent.run_id if parent else None,
        origin=_origin(caller),
        source=source,
        display_name=args.display_name if isinstance(args, CreateArgs) else None,
        group_key=args.group_key if isinstance(args, CreateArgs) else None,
    )
    if parent is not None:
        await engine.note_spawn(parent.id, session, caller.tool_call_id)
    return session


def _origin(caller: Caller) -> Origin:
    """Who sends or starts something: the calling session, or else a person (a call from outside a turn: the
    service's HTTP, WebSocket or MCP callers, the CLI, Python), as `by` says elsewhere."""
    return Origin(kind="session", ref=caller.session_id) if caller.session_id else Origin(kind="person")


async def _snapshot(engine: Runtime, session: SessionRecord, timed_out: bool) -> StatusSnapshot:
    return await snapshot_answer(
        engine.store,
        session,
        stuck_after=engine.stuck_after(session.role),
        timed_out=timed_out,
        ring=engine.ring,
        roster=engine.roster,
    )


async def agent_create(engine: Runtime, caller: Caller, args: CreateArgs) -> Created:
    session = await _create_child(engine, caller, args, "spawn")
    pending = 0
    if args.prompt:
        pending = await engine.enqueue(session.id, args.prompt, origin=_origin(caller), run_id=caller.run_id)
    return Created(agent_id=session.id, name=session.name, status=session.status, pending_inputs=pending)


async def agent_enqueue(engine: Runtime, caller: Caller, args: EnqueueArgs) -> Enqueued:
    origin = _origin(caller)
    if caller.session_id is None:  # a person's message to a session they hold is recorded as theirs
        held = (await engine.store.get_session(args.agent_id)).interception
        if held is not None:
            origin = Origin(kind="person", ref=str(held.get("by")))
    queued = await engine.queue_input(args.agent_id, args.prompt, origin=origin, key=args.key, run_id=caller.run_id)
    return Enqueued(agent_id=args.agent_id, pending_inputs=queued.pending_inputs, duplicate=queued.duplicate)


async def agent_await(engine: Runtime, caller: Caller, args: AwaitArgs) -> StatusSnapshot:
    session, timed_out = await engine.wait(args.agent_id, args.timeout_ms / 1000)
    return await _snapshot(engine, session, timed_out)


async def agent_task(engine: Runtime, caller: Caller, args: TaskArgs) -> StatusSnapshot:
    session = await _create_child(engine, caller, args, "task")
    await engine.enqueue(session.id, args.prompt, origin=_origin(caller), run_id=caller.run_id)
    session, timed_out = await engine.wait(session.id, args.timeout_ms / 1000)
    return await _snapshot(engine, session, timed_out)


async def agent_answer(engine: Runtime, caller: Caller, args: AnswerArgs) -> AnswerResult:
    by = caller.session_id or "a person"
    request = await engine.answer(args.hitl_id, args.answer, by=by)
    return AnswerResult(hitl_id=request.id, agent_id=request.session_id, status=request.status)


async def hook_fire(engine: Runtime, caller: Caller, args: FireArgs) -> Fired:
    fired = await engine.fire_hook(args.name, args.input, key=args.key)
    return Fired(run_id=fired.run_id, hook=args.name, duplicate=fired.duplicate)


async def agent_escalate(engine: Runtime, caller: Caller, args: EscalateArgs) -> Escalated:
    request = await engine.store.get_request(args.hitl_id)
    if request.status != "pending":
        raise Conflict(f"request {args.hitl_id!r} is already {request.status}; nothing to escalate")
    if request.waits_on != "parent":
        raise Conflict(f"request {args.hitl_id!r} already waits on a person; answer it with agent_answer")
    by = caller.session_id or "a person"
    request = await engine.escalate(args.hitl_id, reason=f"escalated by {by}")
    return Escalated(hitl_id=request.id, agent_id=request.session_id, status=request.status, waits_on=request.waits_on)


async def _undeleted(engine: Runtime, session_id: str, action: str) -> SessionRecord:
    """The session, refused as a conflict when it was deleted (nothing is left to `action`)."""
    session = await engine.store.get_session(session_id)
    if session.deleted_at is not None:
        raise Conflict(f"session {session_id!r} was deleted; there is nothing to {action}")
    return session


async def agent_stop(engine: Runtime, caller: Caller, args: StopArgs) -> Stopped:
    by = caller.session_id or "a person"
    await _undeleted(engine, args.id, "stop")
    stopped = await engine.stop(args.id, by=by)
    session = await engine.store.get_session(args.id)
    return Stopped(id=session.id, stopped=stopped, status=session.status, by=by)


async def agent_take_over(engine: Runtime, caller: Caller, args: TakeOverArgs) -> Held:
    await _undeleted(engine, args.id, "take over")
    by = args.by or caller.session_id or "a person"
    interception: dict[str, JsonValue] = {"by": by, "since": datetime.now(UTC).isoformat()}
    notice = RuntimeNotice(
        type="runtime.info",
        message=f"{by} took this session over: its inputs wait until it is handed back",
        source="interception",
        detail=interception,
    )
    channel = await engine.driver(args.id)
    held = SessionPatch(interception=interception)
    await channel.commit(Write(args.id, events=[NewEvent(notice)], session=held, expect_unheld=True))
    session = await engine.store.get_session(args.id)
    return Held(id=session.id, interception=session.interception, pending_inputs=session.pending_inputs)


async def agent_hand_back(engine: Runtime, caller: Caller, args: HandBackArgs) -> Held:
    session = await _undeleted(engine, args.id, "hand back: its inputs will not run")
    if session.interception is None:
        raise Conflict(f"session {args.id!r} is not held by anyone; nothing to hand back")
    by = session.interception.get("by")
    notice = RuntimeNotice(
        type="runtime.info",
        message=f"{by} handed this session back: its inputs run again",
        source="interception",
        detail={"by": by},
    )
    channel = await engine.driver(args.id)
    handed_back = Write(args.id, events=[NewEvent(notice)], session=SessionPatch(interception=None))
    await claimed_commit(engine, channel, handed_back)  # leases: the inputs that waited get an owner to run them
    session = await engine.store.get_session(args.id)
    return Held(id=session.id, interception=session.interception, pending_inputs=session.pending_inputs)


async def agent_delete(engine: Runtime, caller: Caller, args: DeleteArgs) -> Deleted:
    deletion = await engine.delete(args.id, by=caller.session_id or "a person")
    return Deleted(
        id=deletion.session_id, deleted_at=deletion.deleted_at.isoformat(), reap_at=deletion.reap_at.isoformat()
    )


def _tool(
    name: str,
    description: str,
    run: Callable[[Runtime, Caller, Any], Awaitable[Answer]],
    args: type[Args],
    answer: type[Answer],
    *,
    reads_only: bool = False,
) -> Tool:
    grant = capability_for(name)
    return typed_tool(name, description, run, args=args, answer=answer, grant=grant, reads_only=reads_only)


def drive_tools() -> list[Tool]:
    """The spawn and drive tools, each behind the grant `roster.GRANTS` names for it."""
    return [
        _tool(
            "agent_create",
            "Create a sub-agent of a role; optionally queue a first prompt.",
            agent_create,
            CreateArgs,
            Created,
        ),
        _tool("agent_enqueue", "Queue input for an agent's next turn.", agent_enqueue, EnqueueArgs, Enqueued),
        _tool(
            "agent_await",
            "Wait until an agent settles (done, failed, waiting on a request, idle); returns its status snapshot "
            "with timedOut and deleted.",
            agent_await,
            AwaitArgs,
            StatusSnapshot,
            reads_only=True,  # it waits and reads: a read-only token may, and it answers while the service drains
        ),
        _tool(
            "agent_task",
            "Run a sub-agent on a task and wait for it: create + enqueue + await. Returns its status snapshot.",
            agent_task,
            TaskArgs,
            StatusSnapshot,
        ),
        _tool(
            "agent_answer",
            "Answer a request (question or approval) an agent opened.",
            agent_answer,
            AnswerArgs,
            AnswerResult,
        ),
        _tool(
            "agent_escalate",
            "Hand a request held for the parent agent (waitsOn parent) over to a person now.",
            agent_escalate,
            EscalateArgs,
            Escalated,
        ),
        _tool(
            "agent_stop",
            "Stop an agent's turn: it ends cancelled (its pending requests are dismissed); says who stopped it. "
            "An observer agent is stopped for good, between its turns too.",
            agent_stop,
            StopArgs,
            Stopped,
        ),
        _tool(
            "agent_take_over",
            "A person takes an agent over: its queued and new inputs wait (the person's messages are recorded as "
            "theirs) until agent_hand_back.",
            agent_take_over,
            TakeOverArgs,
            Held,
        ),
        _tool(
            "agent_hand_back",
            "Hand an agent a person took over back: its waiting inputs run.",
            agent_hand_back,
            HandBackArgs,
            Held,
        ),
        _tool(
            "agent_delete",
            "Soft-delete an agent; it stays readable by id until reaped.",
            agent_delete,
            DeleteArgs,
            Deleted,
        ),
        _tool(
            "hook_fire",
            "Fire a hook: start a run of its role on its prompt and this input; answers at once with the run's id "
            "(follow it with run_trace). With a key, a fire runs once however often it is sent.",
            hook_fire,
            FireArgs,
            Fired,
        ),
    ]
