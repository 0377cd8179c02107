"""Compaction and clearing: a session's conversation set aside between turns.

- `clear` archives the current conversation (reason `clear`) and starts a new, empty one.
- `compact` archives it (reason `compact`) behind a summary that opens the next turn; without a summary, the
  session's own model writes one (a side request whose steps are not part of the session's log, though its
  usage is on the ledger).

Both write through the session's channel (its emitter), between turns only. `ContextFill` is the session's
stored measure of how full its context is, which a model response sets and compacting resets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError
from pydantic.alias_generators import to_camel

from agentwatch.errors import Conflict, Invalid
from agentwatch.events import CompactionApplied, CompletionFinished, ConversationCleared, NewEvent, Payload
from agentwatch.runtime.models import TurnInput, run_turn
from agentwatch.runtime.runs import billed_run
from agentwatch.runtime.services import Runtime
from agentwatch.store import SessionPatch, SessionRecord, UsageEntry, Write

__all__ = ["COMPACTION_INSTRUCTIONS", "COMPACTION_PROMPT", "ContextFill", "clear", "compact", "summarize"]

COMPACTION_INSTRUCTIONS = (
    "You compact conversations. Write a summary that lets the same agent continue the work without the "
    "earlier messages: the goal, decisions made, facts learned, files or resources touched, what is done and "
    "what is left. Be complete and concise; no preamble."
)
COMPACTION_PROMPT = "Summarize the conversation so far for your own continuation."


class ContextFill(BaseModel):
    """How full a session's context is, as its row stores it (`SessionRecord.context_fill`): snake_case keys.
    Rows written by earlier versions hold the same keys in camelCase (`windowSource`, `preTokens`); `read`
    takes both. The wire answer (`agent_get`'s `contextFill`) is camelCase."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow", defer_build=True)

    state: Literal["measured", "compacted"]
    """`measured` by a model response; `compacted` once the conversation was compacted (until the next one)."""
    tokens: int | None = None
    """Measured: the tokens of the context the model was given."""
    model: str | None = None
    """Measured: the model that answered."""
    window: int | None = None
    """Measured: the model's context window in tokens, when known."""
    window_source: str | None = None
    """Measured: where `window` comes from (`registry`, ...)."""
    pre_tokens: int | None = None
    """Compacted: the tokens measured before compacting, when known."""
    at: str | None = None
    """When it was set (ISO 8601, UTC)."""

    @classmethod
    def read(cls, stored: Mapping[str, JsonValue] | None) -> ContextFill | None:
        """The stored fill, in either spelling; None when there is none (or it is not one we wrote)."""
        if not stored or stored.get("state") not in ("measured", "compacted"):
            return None
        try:
            return cls.model_validate(stored)
        except ValidationError:  # a row written by hand: as if nothing was measured
            return None

    def stored(self) -> dict[str, JsonValue]:
        """The form kept on the session's row (snake_case keys, only those set)."""
        return self.model_dump(mode="json", exclude_unset=True)


async def clear(runtime: Runtime, session_id: str) -> SessionRecord:
    """Archive the current conversation (reason `clear`) and start a new, empty one."""
    store = runtime.store
    session = await store.get_session(session_id)
    if session.status == "running":
        raise Conflict(f"session {session_id!r} is running a turn; stop it before clearing")
    channel = await runtime.driver(session_id)
    cleared = ConversationCleared(archived_conversation_id=session.conversation_id)
    await channel.commit(
        Write(
            session_id,
            new_conversation="clear",
            events=[NewEvent(cleared)],
            session=SessionPatch(context_fill=None),
        )
    )
    return await store.get_session(session_id)


async def compact(runtime: Runtime, session_id: str, *, summary: str | None = None) -> SessionRecord:
    """Set the conversation's messages aside (archived, reason `compact`) behind a summary that opens the next
    turn. Without `summary`, the session's model writes it."""
    store = runtime.store
    session = await store.get_session(session_id)
    if session.status == "running":
        raise Conflict(f"session {session_id!r} is running a turn; compact it between turns")
    usage: list[UsageEntry] = []
    if summary is None:
        summary, usage = await summarize(runtime, session)
    fill = ContextFill.read(session.context_fill)
    compacted = CompactionApplied(
        archived_conversation_id=session.conversation_id,
        pre_tokens=fill.tokens if fill is not None and fill.state == "measured" else None,
        summary=summary,
    )
    context_fill = ContextFill(state="compacted", pre_tokens=compacted.pre_tokens, at=datetime.now(UTC).isoformat())
    channel = await runtime.driver(session_id)
    await channel.commit(
        Write(
            session_id,
            new_conversation="compact",
            events=[NewEvent(compacted)],
            session=SessionPatch(context_fill=context_fill.stored()),
            usage=usage,
        )
    )
    return await store.get_session(session_id)


async def summarize(runtime: Runtime, session: SessionRecord) -> tuple[str, list[UsageEntry]]:
    """The session's model summarizes its conversation; returns the summary and the usage to put on the
    ledger. Raises `Invalid` when the model gives no text."""
    definition = runtime.roster.get(session.role)
    sink = _CollectingSink()
    result = await run_turn(
        TurnInput(
            model=session.model_override or definition.model or "",
            instructions=COMPACTION_INSTRUCTIONS,
            history=await runtime.store.read_messages(session.conversation_id),
            prompt=COMPACTION_PROMPT,
        ),
        sink,
        models=runtime.models,
    )
    if result.outcome != "completed" or not result.output:
        raise Invalid(f"the model could not summarize session {session.id!r}: {result.error or 'no text'}")
    run_id = await billed_run(runtime, session)  # (after its run ended: other work of the agent's)
    usage = [UsageEntry(role=session.role, run_id=run_id, model=p.model, usage=p.usage) for p in sink.finished]
    return result.output, usage


class _CollectingSink:
    """A sink for side requests (summaries) whose steps are not part of the session's log."""

    def __init__(self) -> None:
        self.finished: list[CompletionFinished] = []

    async def commit(
        self, payloads: Sequence[Payload], messages: Sequence[JsonValue] = (), *, wait: bool = True
    ) -> None:
        self.finished += [p for p in payloads if isinstance(p, CompletionFinished)]

    def stream(self, payload: Payload) -> None:
        pass
