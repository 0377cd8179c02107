"""`agent_history`: the transcript as the live stream speaks it, newest page first, each page oldest first.

Without `conversationId` it reads the session's current conversation; `conversations` lists every one with
why each ended (`clear`, `compact`). `episodeId` reads one episode: the events of one turn (a turn id,
`trn_...`), since a turn is the unit a chat episode is dispatched as. A `nextCursor` keeps the conversation its
page was read from, so paging back goes on in it after a clear or a compaction started a new one.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from agentwatch.errors import InvalidCursor, NotFound, Suggestion
from agentwatch.events import PageCursor, query_digest
from agentwatch.reads._args import field_named
from agentwatch.reads._events import event_entry, event_size, preview
from agentwatch.reads._view import EngineView, iso
from agentwatch.reads.answers import ConversationEntry, EventEntry, HistoryAnswer
from agentwatch.store import ConversationRecord, SessionRecord
from agentwatch.tools import MAX_ANSWER_CHARS, MAX_SEQ, Args, Caller, Count, Cursor, Id, dump

__all__ = ["HistoryArgs", "agent_history", "conversations", "read_history"]


class HistoryArgs(Args):
    """Arguments of `agent_history`."""

    id: Id = Field(description="The agent's id (ses_...); soft-deleted ones too.")
    limit: Count = Field(default=50, ge=1, le=100, description="Events per page, 1..100.")
    cursor: Cursor | None = Field(default=None, description="nextCursor of the previous page: reads further back.")
    conversation_id: Id | None = Field(
        default=None, alias="conversationId", description="An archived conversation (from `conversations`) to read."
    )
    episode_id: Id | None = Field(default=None, alias="episodeId", description="One episode: the turn id (trn_...).")


def conversations(session: SessionRecord, records: list[ConversationRecord]) -> list[ConversationEntry]:
    """Every conversation, oldest first, with why each ended; the current one says `current: true`."""
    return [
        ConversationEntry(
            id=c.id,
            started_at=iso(c.started_at),
            ended_at=iso(c.ended_at),
            end_reason=c.end_reason,
            current=c.id == session.conversation_id,
        )
        for c in records
    ]


def _digest(args: HistoryArgs) -> str:
    return query_digest({"history": args.model_dump(mode="json", exclude={"cursor", "limit"})})


def _position(args: HistoryArgs) -> tuple[int | None, str | None]:
    """Where the cursor's page stopped (the seq to read before) and the conversation it was reading: a page
    goes on in the conversation the first one read, even once a clear or a compaction started a new one."""
    if args.cursor is None:
        return None, None
    with field_named("cursor"):
        cursor = PageCursor.decode(args.cursor, query=_digest(args))
        match cursor.key:
            case (int(seq),) if 1 <= seq <= MAX_SEQ:  # (a cursor of an earlier version: no conversation)
                return seq, None
            case (int(seq), str() | None as conversation_id) if 1 <= seq <= MAX_SEQ:
                return seq, conversation_id
        raise InvalidCursor("the cursor does not hold an agent_history position; drop it to start from the newest")


async def history_answer(view: EngineView, args: HistoryArgs) -> HistoryAnswer:
    """The `agent_history` answer: `events`, `nextCursor`, `conversations`, `conversationId`.

    A page holds at most `limit` events and about `MAX_ANSWER_CHARS` characters: when its newest events
    fill that, the older ones are left for the next page (`nextCursor`); an event too large by itself is
    sent alone with a preview of its payload and `truncated: true`.
    """
    session = await view.store.get_session(args.id)
    records = await view.store.list_conversations(session.id)
    before_seq, paged = _position(args)
    conversation_id = args.conversation_id
    if args.episode_id is None:
        conversation_id = conversation_id or paged or session.conversation_id
    if conversation_id is not None and conversation_id not in {c.id for c in records}:
        listed = Suggestion("agent_history", {"id": session.id})
        raise NotFound(
            f"agent {session.id!r} has no conversation {conversation_id!r}; the `conversations` of the answer of "
            f"{listed} list them",
            suggest=[listed],
        )
    newest_first = await view.store.read_events_backward(
        session.id,
        before_seq=before_seq,
        limit=args.limit + 1,
        conversation_id=conversation_id,
        turn_id=args.episode_id,
    )
    if args.episode_id is not None and args.cursor is None and not newest_first:
        raise NotFound(
            f"agent {session.id!r} has no episode {args.episode_id!r}; an episode is one of its turns (the "
            "`turnId` of its events, trn_...)"
        )
    kept: list[tuple[int, EventEntry]] = []
    budget = MAX_ANSWER_CHARS
    for event in newest_first[: args.limit]:
        entry = event_entry(event)
        size = event_size(entry)
        if size > budget:
            if not kept:
                kept.append((event.seq, preview(entry)))
            break
        kept.append((event.seq, entry))
        budget -= size
    page = list(reversed(kept))
    next_cursor = None
    if len(newest_first) > len(kept):
        next_cursor = PageCursor(_digest(args), (page[0][0], conversation_id)).encode()
    return HistoryAnswer(
        id=session.id,
        conversation_id=conversation_id,
        episode_id=args.episode_id,
        events=[entry for _, entry in page],
        next_cursor=next_cursor,
        conversations=conversations(session, records),
    )


async def read_history(view: EngineView, args: HistoryArgs) -> dict[str, Any]:
    """`history_answer` as the JSON object the tool returns."""
    return dump(await history_answer(view, args))


async def agent_history(engine: EngineView, caller: Caller, args: HistoryArgs) -> HistoryAnswer:
    """The `agent_history` tool."""
    return await history_answer(engine, args)
