"""A scripted model serving many sessions for a long time remembers its last 100 requests, not every one (each
holds its conversation's messages)."""

from __future__ import annotations

from agentwatch.runtime.models import ModelResolver, Reply, ScriptedModel, TurnInput, run_turn
from tests.runtime.models.recording import INSTRUCTIONS, RecordingSink


async def test_a_scripted_model_remembers_its_last_hundred_requests() -> None:
    model = ScriptedModel(function=lambda ctx: Reply(f"answer to {ctx.prompt}"))
    resolver = ModelResolver(env={}, models={"chat": model})
    for index in range(130):
        turn = TurnInput(model="scripted:chat", instructions=INSTRUCTIONS, history=[], prompt=f"question {index}")
        result = await run_turn(turn, RecordingSink(), models=resolver)
        assert result.outcome == "completed", result.error
    assert [request.prompt for request in model.requests] == [f"question {index}" for index in range(30, 130)]
    assert [entry.text for entry in model.requests[-1].transcript] == ["question 129"]
