"""`agent_export`: the whole record of one agent as one JSON document.

The `agent_get` record, every event of every conversation (as `agent_history` speaks them, oldest first),
the conversations, every request it opened (any status), and its lifetime usage from the ledger. The events
are those it had when the export began, up to about `MAX_EXPORT_CHARS` characters; a cut export says so in
`truncated`: how many events after which seq it left out, and the cursor `agent_tail` reads on from
(`agent_history` reads them in full). An event over `MAX_ANSWER_CHARS` by itself is sent as a preview marked
`truncated`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import Field

from agentwatch.events import StreamCursor
from agentwatch.reads._events import event_entry, event_size, preview
from agentwatch.reads._view import EngineView, iso
from agentwatch.reads.answers import EventEntry, ExportAnswer, Truncation
from agentwatch.reads.get import agent_record
from agentwatch.reads.history import conversations
from agentwatch.store import SessionRecord
from agentwatch.tools import MAX_ANSWER_CHARS, Args, Caller, Id, dump

__all__ = ["MAX_EXPORT_CHARS", "ExportArgs", "agent_export", "export_agent", "export_answer"]

_PAGE = 1000
_REQUESTS = 10_000
MAX_EXPORT_CHARS = 8_000_000
"""About how many characters of events an export holds before it is cut."""


class ExportArgs(Args):
    """Arguments of `agent_export`."""

    id: Id = Field(description="The agent's id (ses_...); soft-deleted ones too.")


async def export_answer(view: EngineView, session_id: str) -> ExportAnswer:
    """The export document."""
    store = view.store
    session = await store.get_session(session_id)
    history: list[EventEntry] = []
    budget, cut = MAX_EXPORT_CHARS, False
    after = 0
    while not cut and after < session.last_seq:  # (what is written once the export began is not in it)
        page = await store.read_events(session.id, after_seq=after, limit=min(_PAGE, session.last_seq - after))
        if not page:
            break
        for event in page:
            entry = event_entry(event)
            size = event_size(entry)
            if size > MAX_ANSWER_CHARS:  # one giant event is sent as a preview of itself
                entry = preview(entry)
                size = event_size(entry)
            if size > budget:
                cut = True
                break
            history.append(entry)
            budget -= size
        after = page[-1].seq
    requests = await store.list_requests(session_id=session.id, status=None, limit=_REQUESTS)
    usage = (await store.usage_totals([session.id]))[session.id]
    return ExportAnswer(
        exported_at=iso(datetime.now(UTC)),
        agent=await agent_record(view, session),
        conversations=conversations(session, await store.list_conversations(session.id)),
        history=history,
        requests=[request.model_dump(mode="json") for request in requests],
        usage=usage.model_dump(mode="json") | {"tokens": usage.total_tokens},
        truncated=_truncation(session, history) if cut else None,
    )


def _truncation(session: SessionRecord, history: list[EventEntry]) -> Truncation:
    """What a cut export left out (the events after its last one: seqs have no gaps) and where to read them."""
    last_seq = history[-1].seq if history else 0
    left_out = session.last_seq - last_seq
    return Truncation(
        history_events=len(history),
        last_seq=last_seq,
        left_out=left_out,
        cursor=StreamCursor(session.id, last_seq).encode(),
        reason=f"the events stop at about {MAX_EXPORT_CHARS:,} characters: the {left_out} after seq {last_seq} are "
        "left out; agent_history reads them in full (newest page first, an archived conversation by its "
        "conversationId), agent_tail with afterId set to this cursor reads them on as compact rows",
    )


async def export_agent(view: EngineView, session_id: str) -> dict[str, Any]:
    """`export_answer` as the JSON object the tool returns."""
    return dump(await export_answer(view, session_id))


async def agent_export(engine: EngineView, caller: Caller, args: ExportArgs) -> ExportAnswer:
    """The `agent_export` tool."""
    return await export_answer(engine, args.id)
