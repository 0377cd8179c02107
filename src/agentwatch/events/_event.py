"""The envelope: one event of one session, numbered in its stream."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Final

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, TypeAdapter

from agentwatch.events._message import (
    AssistantMessage,
    CompactionApplied,
    CompletionFinished,
    CompletionStarted,
    ContentDelta,
    ConversationCleared,
    ThinkingBlock,
    UserMessage,
)
from agentwatch.events._observer import ObserverReported, ObserverStateChanged
from agentwatch.events._request import RequestDismissed, RequestOpened, RequestResolved
from agentwatch.events._runtime import (
    AuthRequired,
    ExternalEvent,
    ModelReroute,
    RuntimeNotice,
    RuntimeRetry,
    SubtaskEnded,
    SubtaskStarted,
)
from agentwatch.events._tool import ToolCall, ToolProgress, ToolResult
from agentwatch.events._turn import TurnEnded, TurnStarted
from agentwatch.events.cursor import StreamCursor
from agentwatch.events.ids import ConversationId, EventId, SessionId, TurnId

__all__ = [
    "EVENT_ADAPTER",
    "PAYLOAD_ADAPTER",
    "PAYLOAD_TYPES",
    "Event",
    "NewEvent",
    "Payload",
    "is_durable_type",
]

Payload = Annotated[
    UserMessage
    | AssistantMessage
    | ThinkingBlock
    | CompletionStarted
    | CompletionFinished
    | ContentDelta
    | CompactionApplied
    | ConversationCleared
    | ToolCall
    | ToolResult
    | ToolProgress
    | TurnStarted
    | TurnEnded
    | RequestOpened
    | RequestResolved
    | RequestDismissed
    | RuntimeNotice
    | RuntimeRetry
    | ModelReroute
    | SubtaskStarted
    | SubtaskEnded
    | AuthRequired
    | ExternalEvent
    | ObserverReported
    | ObserverStateChanged,
    Field(discriminator="type"),
]
"""Every fact an event can carry, told apart by `type`."""

PAYLOAD_ADAPTER: TypeAdapter[Payload] = TypeAdapter(Payload, config=ConfigDict(defer_build=True))


def _payload_types() -> dict[str, type[Any]]:
    types: dict[str, type[Any]] = {}
    for cls in Payload.__origin__.__args__:  # type: ignore[attr-defined]
        for name in cls.model_fields["type"].annotation.__args__:
            types[name] = cls
    return types


PAYLOAD_TYPES: dict[str, type[Any]] = _payload_types()
"""Each `type` string and the payload class that carries it."""


def is_durable_type(type_name: str) -> bool:
    """Whether events of this type are committed to the store (`content.delta` and `tool.progress` are not)."""
    return bool(PAYLOAD_TYPES[type_name].durable)


class Event(BaseModel):
    """One fact about one session, with its place in the session's stream.

    Durable events are numbered `seq` = 1, 2, 3, ... with no gaps and `sub` = 0. Ephemeral events keep the
    `seq` of the durable event before them and count up `sub` from 1, so every event the live ring carries
    has a distinct, ordered position (`seq`, `sub`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    id: EventId
    """Globally unique, sortable (`evt_...`)."""
    session_id: SessionId
    """The session the event belongs to."""
    seq: int
    """Position in the session's durable log (from 1, no gaps)."""
    sub: int = 0
    """0 for a durable event; 1, 2, ... for the ephemeral events after durable event `seq`."""
    at: AwareDatetime
    """When it happened (UTC)."""
    turn_id: TurnId | None = None
    """The turn it happened in, if any."""
    conversation_id: ConversationId | None = None
    """The conversation it belongs to (durable events only)."""
    payload: Payload
    """What happened."""

    @property
    def type(self) -> str:
        """The payload's type, such as `tool.call`."""
        return self.payload.type

    @property
    def durable(self) -> bool:
        """Whether the event is in the store (or will only ever be in the live ring)."""
        return self.payload.durable

    @property
    def cursor(self) -> StreamCursor:
        """The position right after this event."""
        return StreamCursor(self.session_id, self.seq, self.sub)

    @classmethod
    def trusted(
        cls,
        id: EventId,
        session_id: SessionId,
        seq: int,
        sub: int,
        at: datetime,
        turn_id: TurnId | None,
        payload: Payload,
        conversation_id: ConversationId | None = None,
    ) -> Event:
        """An event built without validation, for a hot path whose fields are valid by construction (an
        ephemeral event the session driver numbers: an `evt_` id, an aware UTC time, a payload instance; or a
        durable event the store reads back as it wrote it).

        Equal to `Event(...)` given the same fields (a third of the cost); anything that may be wrong must
        go through `Event(...)`.
        """
        event = _new(cls)
        _set(
            event,
            "__dict__",
            {
                "id": id,
                "session_id": session_id,
                "seq": seq,
                "sub": sub,
                "at": at,
                "turn_id": turn_id,
                "conversation_id": conversation_id,
                "payload": payload,
            },
        )
        _set(event, "__pydantic_fields_set__", _TRUSTED_FIELDS_SET)  # shared: the same names, never changed
        _set(event, "__pydantic_extra__", None)
        _set(event, "__pydantic_private__", None)
        return event


_new = object.__new__
_set = object.__setattr__
_TRUSTED_FIELDS: Final = frozenset({"id", "session_id", "seq", "sub", "at", "turn_id", "payload"})
_TRUSTED_FIELDS_SET: Final = set(_TRUSTED_FIELDS)
"""The fields set of every trusted event: one set (pydantic copies it before changing a copy), so the live ring's
events do not each hold one more object for the collector to walk."""


EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append: the store gives it its id, `seq`, time and conversation."""

    payload: Payload
    """What happened."""
    turn_id: TurnId | None = None
    """The turn it happened in."""
