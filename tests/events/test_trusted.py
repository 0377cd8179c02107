"""`BasePayload.trusted`: a payload built without validation is the payload validation would build."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal, cast

import pytest

from agentwatch.events import (
    PAYLOAD_ADAPTER,
    CompletionFinished,
    ContentDelta,
    Event,
    EventId,
    Payload,
    SessionId,
    ToolCall,
    TurnEnded,
    Usage,
)
from agentwatch.events._base import BasePayload

RESPONSE = {"parts": [{"part_kind": "text", "content": "Hi."}], "usage": {"input_tokens": 3}, "kind": "response"}


@pytest.mark.parametrize(
    ("kind", "values"),
    [
        (ContentDelta, {"part": "text", "index": 0, "request_index": 2, "delta": "Hel"}),
        (
            CompletionFinished,
            {
                "request_index": 1,
                "model": "scripted:x",
                "usage": Usage(input_tokens=3, requests=1),
                "finish_reason": "stop",
                "response": RESPONSE,
                "context_tokens": 3,
                "context_window": None,
                "window_source": None,
            },
        ),
        (CompletionFinished, {"request_index": 0, "model": "m", "usage": Usage()}),  # defaults filled in
        (ToolCall, {"tool_call_id": "call_0_0", "tool_name": "lookup", "input": {"key": "a"}}),
        (TurnEnded, {"outcome": "completed"}),
    ],
)
def test_a_trusted_payload_equals_the_validated_one(kind: type[BasePayload], values: dict[str, Any]) -> None:
    trusted, validated = kind.trusted(**values), kind(**values)
    assert type(trusted) is kind
    assert trusted == validated
    assert trusted.model_fields_set == validated.model_fields_set
    assert repr(trusted) == repr(validated)
    assert PAYLOAD_ADAPTER.dump_json(cast(Payload, trusted)) == PAYLOAD_ADAPTER.dump_json(cast(Payload, validated))
    assert trusted.model_dump(exclude_unset=True) == validated.model_dump(exclude_unset=True)
    assert PAYLOAD_ADAPTER.validate_json(PAYLOAD_ADAPTER.dump_json(cast(Payload, trusted))) == validated


class _Tagged(BasePayload):
    type: Literal["test.tagged"] = "test.tagged"
    tags: list[str] = []  # noqa: RUF012 (a pydantic field: pydantic copies it per instance)


def test_a_mutable_default_is_not_shared_between_trusted_payloads() -> None:
    first, second = _Tagged.trusted(), _Tagged.trusted()
    assert first == second == _Tagged()
    assert first.tags is not second.tags


def test_an_unknown_or_a_missing_field_raises() -> None:
    with pytest.raises(TypeError, match=r"unknown \['colour'\]"):
        ContentDelta.trusted(part="text", index=0, request_index=0, delta="x", colour="red")
    with pytest.raises(TypeError, match=r"missing \['delta'\]"):
        ContentDelta.trusted(part="text", index=0, request_index=0)


def test_trusted_events_share_one_fields_set_that_a_copy_never_changes() -> None:
    at = datetime.now(UTC)
    delta = ContentDelta(part="text", index=0, request_index=0, delta="x")
    first = Event.trusted(EventId("evt_a"), SessionId("ses_a"), 1, 1, at, None, delta)
    second = Event.trusted(EventId("evt_b"), SessionId("ses_a"), 1, 2, at, None, delta)
    validated = Event(id=EventId("evt_a"), session_id=SessionId("ses_a"), seq=1, sub=1, at=at, payload=delta)
    assert first.model_fields_set is second.model_fields_set  # one object for every trusted event
    assert first.model_dump() == validated.model_dump()
    moved = first.model_copy(update={"conversation_id": "cnv_a"})
    assert "conversation_id" in moved.model_fields_set
    assert "conversation_id" not in first.model_fields_set and "conversation_id" not in second.model_fields_set
