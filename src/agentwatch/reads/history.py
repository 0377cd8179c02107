"""`agent_history`: the transcript as the live stream speaks it, newest page first, each page oldest first.

Without `conversationId` it reads the session's current conversation; `conversations` lists every one with
why each ended (`clear`, `compact`). `episodeId` reads one episode: the events of one turn (a turn id,
`trn_...`), since a turn is the unit a chat episode is dispatched as.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, JsonValue

from agentwatch.errors import InvalidCursor, NotFound
from agentwatch.events import PageCursor, query_digest
from agentwatch.reads._events import event_json
from agentwatch.reads._view import EngineView, iso
from agentwatch.store import ConversationRecord, SessionRecord
from agentwatch.tools import Args, Caller, parse_args

__all__ = ["HistoryArgs", "agent_history", "conversations_json", "read_history"]


class HistoryArgs(Args):
    """Arguments of `agent_history`."""

    id: str = Field(min_length=1, description="The agent's id (ses_...); soft-deleted ones too.")
    limit: int = Field(50, ge=1, le=100, description="Events per page, 1..100.")
    cursor: str | None = Field(None, description="nextCursor of the previous page: reads further back.")
    conversation_id: str | None = Field(
        None, alias="conversationId", description="An archived conversation (from `conversations`) to read."
    )
    episode_id: str | None = Field(None, alias="episodeId", description="One episode: the turn id (trn_...).")


def conversations_json(session: SessionRecord, records: list[ConversationRecord]) -> list[JsonValue]:
    """Every conversation, oldest first, with why each ended; the current one says `current: true`."""
    return [
        {
            "id": c.id,
            "startedAt": iso(c.started_at),
            "endedAt": iso(c.ended_at),
            "endReason": c.end_reason,
            "current": c.id == session.conversation_id,
        }
        for c in records
    ]


def _before_seq(args: HistoryArgs) -> int | None:
    if args.cursor is None:
        return None
    digest = query_digest({"history": args.model_dump(mode="json", exclude={"cursor", "limit"})})
    cursor = PageCursor.decode(args.cursor, query=digest)
    match cursor.key:
        case (int(seq),) if seq >= 1:
            return seq
    raise InvalidCursor("the cursor does not hold an agent_history position; drop it to start from the newest")


async def read_history(view: EngineView, args: HistoryArgs) -> dict[str, JsonValue]:
    """The `agent_history` answer: `events`, `nextCursor`, `conversations`, `conversationId`."""
    session = await view.store.get_session(args.id)
    records = await view.store.list_conversations(session.id)
    conversation_id = args.conversation_id
    if args.episode_id is None:
        conversation_id = conversation_id or session.conversation_id
    if conversation_id is not None and conversation_id not in {c.id for c in records}:
        raise NotFound(f"agent {session.id!r} has no conversation {conversation_id!r}; `conversations` lists them")
    newest_first = await view.store.read_events_backward(
        session.id,
        before_seq=_before_seq(args),
        limit=args.limit + 1,
        conversation_id=conversation_id,
        turn_id=args.episode_id,
    )
    page = list(reversed(newest_first[: args.limit]))
    next_cursor = None
    if len(newest_first) > args.limit:
        digest = query_digest({"history": args.model_dump(mode="json", exclude={"cursor", "limit"})})
        next_cursor = PageCursor(digest, (page[0].seq,)).encode()
    return {
        "id": session.id,
        "conversationId": conversation_id,
        "episodeId": args.episode_id,
        "events": [event_json(event) for event in page],
        "nextCursor": next_cursor,
        "conversations": conversations_json(session, records),
    }


async def agent_history(engine: EngineView, caller: Caller, raw: dict[str, Any]) -> JsonValue:
    """The `agent_history` tool."""
    return await read_history(engine, parse_args(HistoryArgs, "agent_history", raw))
