"""`agent_get`: one agent by `id` (soft-deleted included) or by `name`, as its whole record.

A name is unique per chat scope, not globally, so it resolves as: the calling chat's own agent wins; else a
unique live (not deleted) match; several matches are refused with their ids (`ambiguous`).
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import Field, JsonValue, model_validator
from pydantic.alias_generators import to_camel

from agentwatch.errors import Ambiguous, NotFound, Suggestion
from agentwatch.events import TurnStarted
from agentwatch.reads._rows import oldest_request, row_fields
from agentwatch.reads._view import EngineView, iso, role_problem
from agentwatch.reads.answers import AgentRecord, MailboxEntry, ObserverEntry, OwnerEntry, SubagentUsage
from agentwatch.reads.current import current
from agentwatch.reads.observer import observer_entry
from agentwatch.store import SessionFilter, SessionRecord, Store, descendants
from agentwatch.tools import Args, Caller, Id, Name

__all__ = ["GetArgs", "agent_get", "agent_record", "observer_info", "resolve_agent", "resolve_name"]

_CANDIDATES = 100
_PROMPT_SCAN = 100


class GetArgs(Args):
    """Arguments of `agent_get`: exactly one of `id` and `name`."""

    id: Id | None = Field(default=None, description="The agent's id (ses_...); soft-deleted ones too.")
    name: Name | None = Field(default=None, description="Its name; the calling chat's agent wins.")

    @model_validator(mode="after")
    def _one_of(self) -> GetArgs:
        if (self.id is None) == (self.name is None):
            raise ValueError("pass exactly one of id and name")
        return self


async def resolve_agent(view: EngineView, *, id: str | None, name: str | None, caller: Caller) -> SessionRecord:
    """The session `id` names, or the one `name` resolves to for `caller` (see the module docs)."""
    if id is None:
        assert name is not None
        id = await resolve_name(view.store, name, caller=caller)
    return await view.store.get_session(id)


async def resolve_name(store: Store, name: str, *, caller: Caller) -> str:
    """The id of the session `name` resolves to for `caller`: the one of that name in the caller's scope, else
    the only one of that name (several: `Ambiguous`, with the candidates' ids). Reads the id, scope and status
    alone, so that an agent whose row is damaged elsewhere is found too (and can be deleted by its name)."""
    fields = ("id", "scope", "status")
    if caller.scope is not None:
        mine = await store.list_session_values(SessionFilter(name=name, scope=caller.scope), fields, limit=1)
        if mine.items:
            return str(mine.items[0][0])
    page = await store.list_session_values(SessionFilter(name=name), fields, sort="name", limit=_CANDIDATES)
    if not page.items:
        similar = Suggestion("agent_list", {"q": name})
        raise NotFound(
            f"no agent named {name!r}; {similar} finds similar names, and a deleted agent is found by its id",
            suggest=[similar],
        )
    if len(page.items) == 1:
        return str(page.items[0][0])
    listed = "; ".join(f"{agent_id} ({_scope_text(scope)}, {status})" for agent_id, scope, status in page.items)
    count = f"{len(page.items)}{'+' if page.next_cursor else ''}"
    raise Ambiguous(
        f'{count} agents are named "{name}": {listed}. Pass `id` instead.',
        candidates=[{"id": agent_id, "scope": scope, "status": status} for agent_id, scope, status in page.items],
    )


def _scope_text(scope: str | None) -> str:
    return f"chat {scope}" if scope is not None else "global"


async def observer_info(view: EngineView, session: SessionRecord) -> ObserverEntry | None:
    """The `observer` field of the record: its observer's type and session, the pairing state and the latest
    reports (None for a session that has no observer)."""
    return await observer_entry(view.store, session)


async def _system_prompt(view: EngineView, session: SessionRecord) -> str | None:
    """The system prompt its turns are dispatched with: the newest one recorded, else the role's own."""
    started = await view.store.read_events_backward(session.id, limit=_PROMPT_SCAN, types=["turn.started"])
    for event in started:
        if isinstance(event.payload, TurnStarted) and event.payload.system_prompt is not None:
            return event.payload.system_prompt
    try:
        return view.roster.get(session.role).instructions
    except NotFound:
        return None


SUBAGENT_LIMIT = 1000
"""At most this many sub-agents are walked for `usageWithSubagents`."""


async def usage_with_subagents(view: EngineView, session: SessionRecord) -> SubagentUsage:
    """The session's lifetime usage plus that of every sub-agent it spawned, directly or not (soft-deleted
    ones included; reaped ones are gone from the tree, though the ledger keeps what they spent)."""
    spawned = await descendants(view.store, session.id, limit=SUBAGENT_LIMIT)
    tokens = session.tokens + sum(child.tokens for child in spawned)
    cost = session.cost_usd + sum(child.cost_usd for child in spawned)
    return SubagentUsage(tokens=tokens, cost_usd=cost, subagents=len(spawned))


async def agent_record(view: EngineView, session: SessionRecord) -> AgentRecord:
    """The whole record: the list row plus model, grant, prompt, output, context fill, mailbox and `current`."""
    now = datetime.now(UTC)
    oldest = await oldest_request(view, session)
    row = row_fields(session, now=now, oldest=oldest, stuck_after=view.stuck_after(session.role))
    # (a read of the store alone runs no agent: its roster is no reason one waits)
    problem = role_problem(view.roster, session.role) if view.runs_agents else None
    try:
        definition = view.roster.get(session.role)
        role_model, capabilities = definition.model, sorted(definition.grant)
    except NotFound:
        role_model, capabilities = None, []
    inbox = await view.store.list_inputs(session.id)
    return AgentRecord(
        **row,
        session_count=None,
        recent=None,
        scope=session.scope,
        usage_with_subagents=await usage_with_subagents(view, session),
        role_model_ref=role_model,
        role_problem=problem,
        model_override=session.model_override,
        capabilities=list(capabilities),
        system_prompt=await _system_prompt(view, session),
        text_output=session.last_text,
        error=session.error,
        context_fill=_wire_fill(session.context_fill),
        reap_at=iso(session.reap_at),
        mailbox=[MailboxEntry(id=i.id, text=i.text, created_at=iso(i.created_at), meta=i.meta) for i in inbox],
        observer=await observer_info(view, session),
        lease=await _owner(view, session),
        current=await current(view.store, session, view.ring),
    )


async def _owner(view: EngineView, session: SessionRecord) -> OwnerEntry | None:
    lease = await view.store.get_lease(session.id)
    if lease is None:
        return None
    return OwnerEntry(owner=lease.owner, expires_at=iso(lease.expires_at), expired=lease.expired)


def _wire_fill(stored: dict[str, JsonValue] | None) -> dict[str, JsonValue]:
    """The stored context fill (snake_case keys; camelCase in rows of earlier versions) in the wire's spelling."""
    return {to_camel(key): value for key, value in stored.items()} if stored else {"state": "none"}


async def agent_get(engine: EngineView, caller: Caller, args: GetArgs) -> AgentRecord:
    """The `agent_get` tool."""
    session = await resolve_agent(engine, id=args.id, name=args.name, caller=caller)
    return await agent_record(engine, session)
