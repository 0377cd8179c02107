"""The attach stream's frames: each event's JSON text made once, the same value as `event_json`, ASCII only."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

from websockets.asyncio.client import connect

from agentwatch.events import ContentDelta, Event, EventId, SessionId, StreamCursor, ToolResult, new_id
from agentwatch.runtime.models import ScriptedModel
from agentwatch.runtime.thread_observer import PartialTurn, ReplaySnapshot
from agentwatch.service import create_app
from agentwatch.service._wire import EventTexts, event_json, event_text, snapshot_json, snapshot_text
from tests.service.clients import attach, ws_url
from tests.service.support import role, served

# Accents, CJK, a line separator (which some SSE readers take for a line break), an astral emoji, controls.
AWKWARD = 'naïve — 日本語\u2028next line\u2029 🎉 "quoted" \\ back\tslash\x00'


def events(session_id: str = "ses_frames") -> list[Event]:
    at = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    return [
        Event(
            id=EventId(new_id("evt")),
            session_id=SessionId(session_id),
            seq=1,
            at=at,
            turn_id="trn_1",
            payload=ToolResult(tool_call_id="call_1", tool_name="lookup", output=AWKWARD),
        ),
        Event(
            id=EventId(new_id("evt")),
            session_id=SessionId(session_id),
            seq=1,
            sub=1,
            at=at,
            turn_id="trn_1",
            payload=ContentDelta(part="text", index=0, delta="plain ascii"),
        ),
        Event(
            id=EventId(new_id("evt")),
            session_id=SessionId(session_id),
            seq=2,
            at=at,
            payload=ToolResult(tool_call_id="call_2", tool_name="lookup", output="x" * 5000, status="error"),
        ),
    ]


def test_an_events_text_is_its_json_in_ascii() -> None:
    for event in events():
        text = event_text(event)
        assert json.loads(text) == event_json(event)
        assert text.isascii()
        assert event_text(event) is text  # made once, then kept


def test_a_snapshots_text_is_its_json_in_ascii() -> None:
    history = tuple(e for e in events() if e.durable)
    for partial in (None, PartialTurn("trn_2", text=AWKWARD, thinking="hmm", request_index=1)):
        snapshot = ReplaySnapshot(
            thread_id="ses_frames",
            position=StreamCursor("ses_frames", 2, 0),
            history=history,
            partial=partial,
            pending_choices=(),
        )
        text = snapshot_text(snapshot)
        assert json.loads(text) == {"kind": "snapshot", **snapshot_json(snapshot)}
        assert text.isascii()


def test_kept_texts_stay_within_their_bound() -> None:
    made = events()
    size = len(event_text(made[0]))
    texts = EventTexts(max_chars=size + 10)
    first = texts.get(made[0])
    assert texts.chars == len(first)
    texts.get(made[1])
    assert texts.chars <= size + 10  # the oldest made room
    again = texts.get(made[0])
    assert again == first and again is not first  # made again, the same text
    big = texts.get(made[2])  # larger than the bound on its own: kept alone
    assert texts.chars == len(big)


async def test_awkward_text_arrives_intact_over_both_transports(open_engine: Any, scripted: Any) -> None:
    model_ref = scripted("awkward", ScriptedModel.replying(AWKWARD.replace("\x00", "")))
    async with open_engine(role("awkward", model_ref)) as engine, served(create_app(engine)) as base:
        session = await engine.create("awkward")
        await engine.enqueue(session.id, "go")
        await engine.wait(session.id, 10)
        async with connect(ws_url(base, session.id), max_size=2**24) as connection:
            raw = await asyncio.wait_for(connection.recv(), 10)
        assert isinstance(raw, str) and raw.isascii()
        by_ws = json.loads(raw)
        async with attach("sse", base, session.id) as stream:
            by_sse = await asyncio.wait_for(stream.next(), 10)
        for snapshot in (by_ws, by_sse):
            assert snapshot["kind"] == "snapshot"
            assert any(AWKWARD.replace("\x00", "") in text for text in strings(snapshot["history"]))
        assert by_ws["history"] == by_sse["history"]


def strings(value: Any) -> list[str]:
    """Every string in a JSON value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []
