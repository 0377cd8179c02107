"""Stored history must survive an upgrade of the model layer: a file written by pydantic-ai 2.68 still loads.

`golden/history_v2_68.json` holds the messages a scripted turn committed (thinking, a tool call, its result,
the answer). Never regenerate it to make this test pass: a failure means stored conversations would break.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentwatch.events import AssistantMessage, CompletionStarted
from agentwatch.runtime.models import Reply, ScriptContext, ScriptedModel, ScriptStep, TranscriptEntry, run_turn

from .recording import REF, RecordingSink, resolver, shape, turn

GOLDEN = Path(__file__).parent / "golden" / "history_v2_68.json"


def load() -> list[Any]:
    history: list[Any] = json.loads(GOLDEN.read_text())
    return history


def test_the_golden_history_has_the_shape_it_was_written_with() -> None:
    assert [shape(m) for m in load()] == [
        ("request", ["user-prompt"]),
        ("response", ["thinking", "tool-call"]),
        ("request", ["tool-return"]),
        ("response", ["text"]),
    ]


async def test_the_golden_history_loads_and_the_conversation_continues() -> None:
    def script(ctx: ScriptContext) -> ScriptStep:
        return Reply(f"request {ctx.request_index} saw {len(ctx.transcript)} items")

    model = ScriptedModel(function=script)
    sink = RecordingSink()
    result = await run_turn(turn("And b.py?", history=load()), sink, models=resolver(model))

    assert result.output == "request 2 saw 6 items"
    assert model.requests[0].transcript == (
        TranscriptEntry("prompt", "What does a.py do?"),
        TranscriptEntry("thinking", "I should read a.py first."),
        TranscriptEntry("tool_call", '{"path":"a.py"}', tool_name="read_file", tool_call_id="call_read"),
        TranscriptEntry("tool_result", "print('hello')", tool_name="read_file", tool_call_id="call_read", status="ok"),
        TranscriptEntry("text", "a.py prints hello."),
        TranscriptEntry("prompt", "And b.py?"),
    )
    assert model.requests[0].instructions == "You are a careful coder."
    assert sink.commits[0].payloads == (CompletionStarted(request_index=0, model=REF),)
    assert AssistantMessage(text="request 2 saw 6 items") in sink.durable
