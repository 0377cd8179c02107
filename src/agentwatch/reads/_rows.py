"""The `agent_list` row: the one JSON shape of a session that list, get and export share."""

from __future__ import annotations

from datetime import datetime

from pydantic import JsonValue

from agentwatch.reads._view import EngineView, iso
from agentwatch.reads.words import status_word
from agentwatch.store import SessionRecord

__all__ = ["REQUEST_SCAN", "oldest_request", "recent_entry", "session_row"]

REQUEST_SCAN = 1000
"""Pending requests read to find the oldest one that waits on a person."""


async def oldest_request(view: EngineView, session: SessionRecord) -> dict[str, JsonValue] | None:
    """`{id, summary}` of the oldest pending request that waits on a person (not one held for a parent)."""
    if session.pending_requests == 0:
        return None
    pending = await view.store.list_requests(session_id=session.id, status="pending", limit=REQUEST_SCAN)
    request = next((r for r in pending if r.waits_on == "person"), None)
    return {"id": request.id, "summary": request.summary} if request is not None else None


async def session_row(view: EngineView, session: SessionRecord, *, now: datetime) -> dict[str, JsonValue]:
    """One `agent_list` row. `sessionCount` and `recent` are None here; grouped listings fill them in."""
    origin: JsonValue = session.origin.model_dump(mode="json") if session.origin is not None else None
    return {
        "id": session.id,
        "name": session.name,
        "displayName": session.display_name,
        "role": session.role,
        "feature": session.feature,
        "status": session.status,
        "word": status_word(session, now=now, stuck_after=view.stuck_after(session.role)),
        "source": session.source,
        "modelRef": session.model_override or session.model_ref,
        "groupKey": session.group_key,
        "boss": session.boss,
        "createdAt": iso(session.created_at),
        "lastActiveAt": iso(session.last_active_at),
        "deletedAt": iso(session.deleted_at),
        "usage": {"costUsd": session.cost_usd, "tokens": session.tokens},
        "pendingInputs": session.pending_inputs,
        "pendingRequests": session.pending_requests,
        "oldestRequest": await oldest_request(view, session),
        "interception": session.interception,
        "parentId": session.parent_id,
        "runId": session.run_id,
        "origin": origin,
        "sessionCount": None,
        "recent": None,
    }


def recent_entry(view: EngineView, session: SessionRecord, *, now: datetime) -> dict[str, JsonValue]:
    """A session as one entry of a grouped row's `recent`."""
    return {
        "id": session.id,
        "name": session.name,
        "status": session.status,
        "word": status_word(session, now=now, stuck_after=view.stuck_after(session.role)),
        "createdAt": iso(session.created_at),
        "lastActiveAt": iso(session.last_active_at),
    }
