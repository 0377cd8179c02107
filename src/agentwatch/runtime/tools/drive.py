"""Spawn and drive tools: agent_create, agent_enqueue, agent_await, agent_task, agent_answer, agent_delete.

An agent needs the `spawn` grant to call them (`roster.GRANTS` is the one table of what each grant allows).
A session an agent creates records the agent as its parent (`parentId`), inherits its run (`runId`) and names
it as its origin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field, JsonValue

from agentwatch.events import Origin
from agentwatch.runtime.roster import capability_for
from agentwatch.runtime.tools.base import Args, Caller, Tool, parse_args

if TYPE_CHECKING:
    from agentwatch.runtime.engine import Engine
    from agentwatch.store import SessionRecord

__all__ = ["drive_tools"]

MAX_TIMEOUT_MS = 3_600_000


class CreateArgs(Args):
    role: str = Field(description="The agent type (role) to run.")
    name: str | None = Field(None, description="A name unique among live agents of its scope; made up when absent.")
    scope: str | None = Field(None, description="The chat the agent belongs to (e.g. '42:bot1'); global when absent.")
    prompt: str | None = Field(None, description="A first input to queue right away.")
    display_name: str | None = Field(None, alias="displayName", description="A friendlier name to show.")
    group_key: str | None = Field(None, alias="groupKey", description="Its lineage key (e.g. 'hb:digest').")


class EnqueueArgs(Args):
    agent_id: str = Field(description="The agent's id (ses_...).")
    prompt: str = Field(min_length=1, description="The input for its next turn.")


class AwaitArgs(Args):
    agent_id: str = Field(description="The agent's id (ses_...).")
    timeout_ms: int = Field(
        60_000, alias="timeoutMs", ge=0, le=MAX_TIMEOUT_MS, description="How long to wait, in milliseconds."
    )


class TaskArgs(Args):
    role: str = Field(description="The agent type (role) to run.")
    prompt: str = Field(min_length=1, description="The task.")
    name: str | None = Field(None, description="A name for the new agent; made up when absent.")
    timeout_ms: int = Field(
        600_000, alias="timeoutMs", ge=0, le=MAX_TIMEOUT_MS, description="How long to wait, in milliseconds."
    )


class AnswerArgs(Args):
    hitl_id: str = Field(alias="hitlId", description="The request to answer (current.pendingHitl.hitlId).")
    answer: JsonValue = Field(
        description="The answer: text for a question; true/false or {approved, message} for an approval."
    )


class DeleteArgs(Args):
    id: str = Field(description="The agent's id (ses_...).")


async def _create_child(engine: Engine, caller: Caller, args: CreateArgs | TaskArgs, source: str) -> SessionRecord:
    parent = await engine.store.get_session(caller.session_id) if caller.session_id else None
    scope = args.scope if isinstance(args, CreateArgs) else None
    session = await engine.create(
        args.role,
        name=args.name,
        scope=scope,
        parent_id=parent.id if parent else None,
        run_id=parent.run_id if parent else None,
        origin=Origin(kind="session", ref=parent.id) if parent else None,
        source=source,
        display_name=args.display_name if isinstance(args, CreateArgs) else None,
        group_key=args.group_key if isinstance(args, CreateArgs) else None,
    )
    if parent is not None:
        await engine.note_spawn(parent.id, session, caller.tool_call_id)
    return session


def _origin(caller: Caller) -> Origin | None:
    return Origin(kind="session", ref=caller.session_id) if caller.session_id else None


async def agent_create(engine: Engine, caller: Caller, raw: dict[str, Any]) -> JsonValue:
    args = parse_args(CreateArgs, "agent_create", raw)
    session = await _create_child(engine, caller, args, "spawn")
    pending = 0
    if args.prompt:
        pending = await engine.enqueue(session.id, args.prompt, origin=_origin(caller))
    return {"agentId": session.id, "name": session.name, "status": session.status, "pendingInputs": pending}


async def agent_enqueue(engine: Engine, caller: Caller, raw: dict[str, Any]) -> JsonValue:
    args = parse_args(EnqueueArgs, "agent_enqueue", raw)
    pending = await engine.enqueue(args.agent_id, args.prompt, origin=_origin(caller))
    return {"agentId": args.agent_id, "pendingInputs": pending}


async def agent_await(engine: Engine, caller: Caller, raw: dict[str, Any]) -> JsonValue:
    args = parse_args(AwaitArgs, "agent_await", raw)
    session, timed_out = await engine.wait(args.agent_id, args.timeout_ms / 1000)
    return await engine.snapshot(session, timed_out=timed_out)


async def agent_task(engine: Engine, caller: Caller, raw: dict[str, Any]) -> JsonValue:
    args = parse_args(TaskArgs, "agent_task", raw)
    session = await _create_child(engine, caller, args, "task")
    await engine.enqueue(session.id, args.prompt, origin=_origin(caller))
    session, timed_out = await engine.wait(session.id, args.timeout_ms / 1000)
    return await engine.snapshot(session, timed_out=timed_out)


async def agent_answer(engine: Engine, caller: Caller, raw: dict[str, Any]) -> JsonValue:
    args = parse_args(AnswerArgs, "agent_answer", raw)
    by = caller.session_id or "a person"
    request = await engine.answer(args.hitl_id, args.answer, by=by)
    return {"hitlId": request.id, "agentId": request.session_id, "status": request.status}


async def agent_delete(engine: Engine, caller: Caller, raw: dict[str, Any]) -> JsonValue:
    args = parse_args(DeleteArgs, "agent_delete", raw)
    session = await engine.delete(args.id, by=caller.session_id or "a person")
    return {
        "id": session.id,
        "deletedAt": session.deleted_at.isoformat() if session.deleted_at else None,
        "reapAt": session.reap_at.isoformat() if session.reap_at else None,
    }


def _tool(name: str, model: type[Args], handler: Any, description: str) -> Tool:
    schema = model.model_json_schema(by_alias=True)
    schema.pop("title", None)
    return Tool(name, description, schema, handler, grant=capability_for(name))


def drive_tools() -> list[Tool]:
    """The spawn and drive tools, each behind the grant `roster.GRANTS` names for it."""
    return [
        _tool(
            "agent_create", CreateArgs, agent_create, "Create a sub-agent of a role; optionally queue a first prompt."
        ),
        _tool("agent_enqueue", EnqueueArgs, agent_enqueue, "Queue input for an agent's next turn."),
        _tool(
            "agent_await",
            AwaitArgs,
            agent_await,
            "Wait until an agent settles (done, failed, waiting on a request, idle); returns its status snapshot "
            "with timedOut and deleted.",
        ),
        _tool(
            "agent_task",
            TaskArgs,
            agent_task,
            "Run a sub-agent on a task and wait for it: create + enqueue + await. Returns its status snapshot.",
        ),
        _tool("agent_answer", AnswerArgs, agent_answer, "Answer a request (question or approval) an agent opened."),
        _tool("agent_delete", DeleteArgs, agent_delete, "Soft-delete an agent; it stays readable by id until reaped."),
    ]
