"""The `agent_list` row: the one shape of a session that list, get and export share."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from agentwatch.reads._view import EngineView, iso
from agentwatch.reads.answers import OldestRequest, RecentEntry, SessionUsage
from agentwatch.reads.current import doing_now
from agentwatch.reads.words import status_word, word_of
from agentwatch.store import SessionRecord
from agentwatch.tools import dump

__all__ = [
    "LISTED_FIELDS",
    "REQUEST_SCAN",
    "listed_rows",
    "oldest_request",
    "recent_entry",
    "row_fields",
]

REQUEST_SCAN = 1000
"""Pending requests read to find the oldest one that waits on a person."""


async def oldest_request(view: EngineView, session: SessionRecord) -> OldestRequest | None:
    """`{id, summary}` of the oldest pending request that waits on a person (not one held for a parent)."""
    if session.pending_requests == 0:
        return None
    return await _oldest(view, session.id)


def row_fields(
    session: SessionRecord, *, now: datetime, oldest: OldestRequest | None, stuck_after: float
) -> dict[str, Any]:
    """The fields of a `SessionRow` (for the answers that extend it), given the session's `oldest_request`
    and its role's stuck threshold."""
    origin, deleted_at = session.origin, session.deleted_at
    return {
        "id": session.id,
        "name": session.name,
        "display_name": session.display_name,
        "role": session.role,
        "feature": session.feature,
        "status": session.status,
        "word": status_word(session, now=now, stuck_after=stuck_after),
        "source": session.source,
        "model_ref": session.model_override or session.model_ref,
        "group_key": session.group_key,
        "boss": session.boss,
        "created_at": session.created_at.isoformat(),
        "last_active_at": session.last_active_at.isoformat(),
        "deleted_at": deleted_at.isoformat() if deleted_at is not None else None,
        "usage": SessionUsage.trusted(cost_usd=session.cost_usd, tokens=session.tokens),
        "pending_inputs": session.pending_inputs,
        "pending_reports": session.pending_reports,
        "pending_requests": session.pending_requests,
        "held_requests": session.held_requests,
        "oldest_request": oldest,
        "interception": session.interception,
        "parent_id": session.parent_id,
        "run_id": session.run_id,
        "origin": origin.model_dump(mode="json") if origin is not None else None,
    }


LISTED_FIELDS = (
    "id",
    "name",
    "display_name",
    "role",
    "feature",
    "status",
    "source",
    "model_ref",
    "model_override",
    "group_key",
    "boss",
    "created_at",
    "last_active_at",
    "deleted_at",
    "cost_usd",
    "tokens",
    "pending_inputs",
    "pending_requests",
    "interception",
    "parent_id",
    "run_id",
    "origin",
    "held_requests",
    "pending_reports",
)
"""The session fields a listing row is made of, in the order `listed_rows` takes their values
(`Store.list_session_values`)."""


async def listed_rows(view: EngineView, sessions: Sequence[Sequence[Any]], *, now: datetime) -> list[dict[str, Any]]:
    """The `agent_list` rows of sessions given as the values of `LISTED_FIELDS`, in order, as the JSON objects
    the rows are on the wire (a `SessionRow` of `row_fields`, dumped, field for field), made straight from
    those values: a listing page does not build a record and a row model per session only to dump them.
    `sessionCount` and `recent` are null (grouped listings set them). Only the sessions with a pending
    request cost a read of the store (their `oldestRequest`); the working ones' `currentItem` are read from the
    live ring, in one read for the page."""
    waiting = [values[0] for values in sessions if values[17] > 0]  # id, pending_requests
    working = [values[0] for values in sessions if values[5] == "running" and values[17] == 0]  # id, status
    oldest = {}
    if waiting:
        found = await asyncio.gather(*(_oldest(view, session_id) for session_id in waiting))
        oldest = {
            session_id: {"id": request.id, "summary": request.summary}
            for session_id, request in zip(waiting, found, strict=True)
            if request is not None
        }
    doing = {session_id: dump(item) for session_id, item in (await doing_now(view.ring, working)).items()}
    # Only a running session not waiting on a person is judged by its role's threshold (`quiet` below): a page
    # without one reads no agent definition.
    stuck_after = {
        role: view.stuck_after(role)
        for role in {values[3] for values in sessions if values[5] == "running" and values[17] == 0}
    }
    rows: list[dict[str, Any]] = []
    for (
        session_id,
        name,
        display_name,
        role,
        feature,
        status,
        source,
        model_ref,
        model_override,
        group_key,
        boss,
        created_at,
        last_active_at,
        deleted_at,
        cost_usd,
        tokens,
        pending_inputs,
        pending_requests,
        interception,
        parent_id,
        run_id,
        origin,
        held_requests,
        pending_reports,
    ) in sessions:
        # `status_word`, reading the time only where it matters: running, and not waiting on a person.
        waits = pending_requests > 0
        quiet = (
            status == "running"
            and not waits
            and (now - datetime.fromisoformat(last_active_at)).total_seconds() > stuck_after[role]
        )
        rows.append(
            {
                "id": session_id,
                "name": name,
                "displayName": display_name,
                "role": role,
                "feature": feature,
                "status": status,
                "word": word_of(status, waits_on_person=waits, quiet=quiet),
                "source": source,
                "modelRef": model_override or model_ref,
                "groupKey": group_key,
                "boss": boss,
                "createdAt": created_at,
                "lastActiveAt": last_active_at,
                "deletedAt": deleted_at,
                "usage": {"costUsd": cost_usd, "tokens": tokens},
                "pendingInputs": pending_inputs,
                "pendingReports": pending_reports,
                "pendingRequests": pending_requests,
                "heldRequests": held_requests,
                "oldestRequest": oldest.get(session_id) if waits else None,
                "interception": interception,
                "parentId": parent_id,
                "runId": run_id,
                "origin": origin,
                "sessionCount": None,
                "recent": None,
                "currentItem": doing.get(session_id),
            }
        )
    return rows


async def _oldest(view: EngineView, session_id: str) -> OldestRequest | None:
    pending = await view.store.list_requests(session_id=session_id, status="pending", limit=REQUEST_SCAN)
    request = next((r for r in pending if r.waits_on == "person"), None)
    return OldestRequest(id=request.id, summary=request.summary) if request is not None else None


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
