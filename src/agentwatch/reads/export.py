"""`agent_export`: the whole record of one agent as one JSON document.

The `agent_get` record, every event of every conversation (as `agent_history` speaks them, oldest first),
the conversations, every request it opened (any status), and its lifetime usage from the ledger.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import Field, JsonValue

from agentwatch.reads._events import event_json
from agentwatch.reads._view import EngineView, iso
from agentwatch.reads.get import agent_record
from agentwatch.reads.history import conversations_json
from agentwatch.tools import Args, Caller, parse_args

__all__ = ["ExportArgs", "agent_export", "export_agent"]

_PAGE = 1000
_REQUESTS = 10_000


class ExportArgs(Args):
    """Arguments of `agent_export`."""

    id: str = Field(min_length=1, description="The agent's id (ses_...); soft-deleted ones too.")


async def export_agent(view: EngineView, session_id: str) -> dict[str, JsonValue]:
    """The export document."""
    store = view.store
    session = await store.get_session(session_id)
    history: list[JsonValue] = []
    after = 0
    while True:
        page = await store.read_events(session.id, after_seq=after, limit=_PAGE)
        history += [event_json(event) for event in page]
        if len(page) < _PAGE:
            break
        after = page[-1].seq
    requests = await store.list_requests(session_id=session.id, status=None, limit=_REQUESTS)
    usage = (await store.usage_totals([session.id]))[session.id]
    return {
        "exportedAt": iso(datetime.now(UTC)),
        "agent": await agent_record(view, session),
        "conversations": conversations_json(session, await store.list_conversations(session.id)),
        "history": history,
        "requests": [request.model_dump(mode="json") for request in requests],
        "usage": usage.model_dump(mode="json") | {"tokens": usage.total_tokens},
    }


async def agent_export(engine: EngineView, caller: Caller, raw: dict[str, Any]) -> JsonValue:
    """The `agent_export` tool."""
    return await export_agent(engine, parse_args(ExportArgs, "agent_export", raw).id)
