"""The `agent_list` row: the one shape of a session that list, get and export share."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agentwatch.reads._view import EngineView, iso
from agentwatch.reads.answers import OldestRequest, RecentEntry, SessionRow, SessionUsage
from agentwatch.reads.words import status_word
from agentwatch.store import SessionRecord

__all__ = ["REQUEST_SCAN", "oldest_request", "recent_entry", "row_fields", "session_row"]

REQUEST_SCAN = 1000
"""Pending requests read to find the oldest one that waits on a person."""


async def oldest_request(view: EngineView, session: SessionRecord) -> OldestRequest | None:
    """`{id, summary}` of the oldest pending request that waits on a person (not one held for a parent)."""
    if session.pending_requests == 0:
        return None
    pending = await view.store.list_requests(session_id=session.id, status="pending", limit=REQUEST_SCAN)
    request = next((r for r in pending if r.waits_on == "person"), None)
    return OldestRequest(id=request.id, summary=request.summary) if request is not None else None


async def row_fields(view: EngineView, session: SessionRecord, *, now: datetime) -> dict[str, Any]:
    """The fields of a `SessionRow` (for the answers that extend it)."""
    origin = session.origin.model_dump(mode="json") if session.origin is not None else None
    return {
        "id": session.id,
        "name": session.name,
        "display_name": session.display_name,
        "role": session.role,
        "feature": session.feature,
        "status": session.status,
        "word": status_word(session, now=now, stuck_after=view.stuck_after(session.role)),
        "source": session.source,
        "model_ref": session.model_override or session.model_ref,
        "group_key": session.group_key,
        "boss": session.boss,
        "created_at": iso(session.created_at),
        "last_active_at": iso(session.last_active_at),
        "deleted_at": iso(session.deleted_at),
        "usage": SessionUsage.trusted(cost_usd=session.cost_usd, tokens=session.tokens),
        "pending_inputs": session.pending_inputs,
        "pending_requests": session.pending_requests,
        "oldest_request": await oldest_request(view, session),
        "interception": session.interception,
        "parent_id": session.parent_id,
        "run_id": session.run_id,
        "origin": origin,
    }


async def session_row(view: EngineView, session: SessionRecord, *, now: datetime) -> SessionRow:
    """One `agent_list` row. `sessionCount` and `recent` are None here; grouped listings fill them in."""
    return SessionRow.trusted(**await row_fields(view, session, now=now), session_count=None, recent=None)


def recent_entry(view: EngineView, session: SessionRecord, *, now: datetime) -> RecentEntry:
    """A session as one entry of a grouped row's `recent`."""
    return RecentEntry.trusted(
        id=session.id,
        name=session.name,
        status=session.status,
        word=status_word(session, now=now, stuck_after=view.stuck_after(session.role)),
        created_at=iso(session.created_at),
        last_active_at=iso(session.last_active_at),
    )
