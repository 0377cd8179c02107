"""Scripted models are handed to the engine (as pydantic-ai's FunctionModel is handed to an Agent), not
registered process-wide; a given model comes before a registered one of the same name."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentwatch.errors import InvalidArgument
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import (
    ModelResolver,
    ScriptedModel,
    TurnInput,
    register_scripted_model,
    run_turn,
    unregister_scripted_model,
)
from agentwatch.runtime.roster import AgentDefinition

from .recording import RecordingSink


def greeter(model: str) -> AgentDefinition:
    return AgentDefinition(name="greeter", model=model, instructions="You greet people.")


async def test_a_model_given_to_the_engine_plays_the_turns_of_a_role_that_names_it(tmp_path: Path) -> None:
    model = ScriptedModel.replying("Hello there.")
    async with Engine.open(
        f"sqlite:///{tmp_path / 'agentwatch.db'}",
        root=tmp_path,
        definitions=[greeter("scripted:greeter-model")],
        extensions=[],
        models={"greeter-model": model},
    ) as engine:
        snapshot = await engine.call_tool("agent_task", {"role": "greeter", "prompt": "Say hello"})
    assert (snapshot["status"], snapshot["lastAssistantText"]) == ("completed", "Hello there.")
    assert [request.prompt for request in model.requests] == ["Say hello"]


async def test_a_given_model_comes_before_a_registered_one_of_the_same_name() -> None:
    given, registered = ScriptedModel.replying("given"), ScriptedModel.replying("registered")
    register_scripted_model("same-name", registered)
    try:
        resolver = ModelResolver(env={}, models={"same-name": given})
        turn = TurnInput(model="scripted:same-name", instructions="", history=[], prompt="hi")
        result = await run_turn(turn, RecordingSink(), models=resolver)
    finally:
        unregister_scripted_model("same-name")
    assert result.output == "given"
    assert (len(given.requests), len(registered.requests)) == (1, 0)


@pytest.mark.parametrize("ref", ["scripted:stand-in", "stand-in", "openai:gpt-4o"])
async def test_a_given_model_answers_to_its_name_or_stands_in_for_a_full_ref(ref: str) -> None:
    model = ScriptedModel.replying("scripted answer")
    key = ref.removeprefix("scripted:")
    resolver = ModelResolver(env={}, models={key: model})  # no OPENAI_API_KEY: the stand-in needs none
    resolver.check(ref)
    result = await run_turn(
        TurnInput(model=ref, instructions="", history=[], prompt="hi"), RecordingSink(), models=resolver
    )
    assert result.output == "scripted answer"


def test_a_name_that_was_neither_given_nor_registered_says_how_to_give_it() -> None:
    with pytest.raises(InvalidArgument, match=r"Engine.open\(models=\{'ghost': ScriptedModel\(...\)\}\)"):
        ModelResolver(env={}, models={"other": ScriptedModel()}).check("scripted:ghost")
