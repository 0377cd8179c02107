"""The one event vocabulary: ids, cursors, truncation, and every fact a session's stream can carry.

This package does no I/O and imports nothing else of agentwatch but `agentwatch.errors`.
"""

from agentwatch.events._base import BasePayload, Origin, OriginKind, Usage
from agentwatch.events._event import (
    EVENT_ADAPTER,
    PAYLOAD_ADAPTER,
    PAYLOAD_TYPES,
    Event,
    NewEvent,
    Payload,
    is_durable_type,
)
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
from agentwatch.events._observer import ObserverReported, ObserverStateChanged, PairingState
from agentwatch.events._request import (
    RequestDismissed,
    RequestKind,
    RequestOpened,
    RequestResolved,
    WaitsOn,
)
from agentwatch.events._runtime import (
    DELETION_SOURCE,
    AuthRequired,
    ExternalEvent,
    ModelReroute,
    RuntimeNotice,
    RuntimeRetry,
    SubtaskEnded,
    SubtaskStarted,
    is_deletion_notice,
)
from agentwatch.events._tool import ToolCall, ToolProgress, ToolResult, ToolStatus
from agentwatch.events._turn import TurnEnded, TurnOutcome, TurnStarted
from agentwatch.events.cursor import MAX_POSITION, PageCursor, StreamCursor, query_digest
from agentwatch.events.ids import (
    ConversationId,
    EventId,
    IdPrefix,
    InputId,
    RequestId,
    RunId,
    SessionId,
    SpanId,
    TurnId,
    new_id,
)
from agentwatch.events.truncate import Truncated, truncate, truncation_marker

__all__ = [
    "DELETION_SOURCE",
    "EVENT_ADAPTER",
    "MAX_POSITION",
    "PAYLOAD_ADAPTER",
    "PAYLOAD_TYPES",
    "AssistantMessage",
    "AuthRequired",
    "BasePayload",
    "CompactionApplied",
    "CompletionFinished",
    "CompletionStarted",
    "ContentDelta",
    "ConversationCleared",
    "ConversationId",
    "Event",
    "EventId",
    "ExternalEvent",
    "IdPrefix",
    "InputId",
    "ModelReroute",
    "NewEvent",
    "ObserverReported",
    "ObserverStateChanged",
    "Origin",
    "OriginKind",
    "PageCursor",
    "PairingState",
    "Payload",
    "RequestDismissed",
    "RequestId",
    "RequestKind",
    "RequestOpened",
    "RequestResolved",
    "RunId",
    "RuntimeNotice",
    "RuntimeRetry",
    "SessionId",
    "SpanId",
    "StreamCursor",
    "SubtaskEnded",
    "SubtaskStarted",
    "ThinkingBlock",
    "ToolCall",
    "ToolProgress",
    "ToolResult",
    "ToolStatus",
    "Truncated",
    "TurnEnded",
    "TurnId",
    "TurnOutcome",
    "TurnStarted",
    "Usage",
    "UserMessage",
    "WaitsOn",
    "is_deletion_notice",
    "is_durable_type",
    "new_id",
    "query_digest",
    "truncate",
    "truncation_marker",
]
