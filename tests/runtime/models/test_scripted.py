"""The scripted model: how a script is cut into requests, and what a script function is told."""

from __future__ import annotations

import pytest

from agentwatch.runtime.models import (
    CallTool,
    Fail,
    Hang,
    Reply,
    ScriptContext,
    ScriptedModel,
    ScriptStep,
    Think,
    ToolOutcome,
    ToolSpec,
    run_turn,
)
from agentwatch.runtime.models.scripted import _group

from .recording import RecordingSink, resolver, turn


def test_a_flat_script_is_cut_after_answers_and_after_runs_of_tool_calls() -> None:
    a, b = CallTool("a"), CallTool("b")
    assert _group([Think("t"), a, b, Reply("r"), Reply("s")]) == [(Think("t"), a, b), (Reply("r"),), (Reply("s"),)]
    assert _group([a, Think("t"), b]) == [(a,), (Think("t"), b)]
    assert _group([[Reply("look"), a], Fail("x")]) == [(Reply("look"), a), (Fail("x"),)]
    assert _group([Think("t"), Hang()]) == [(Think("t"), Hang())]


def test_steps_and_a_function_do_not_mix() -> None:
    with pytest.raises(ValueError, match="not both"):
        ScriptedModel(steps=[Reply("x")], function=lambda ctx: Reply("y"))


async def test_a_script_function_sees_the_prompt_and_the_previous_tool_results() -> None:
    async def script(ctx: ScriptContext) -> ScriptStep:
        if not ctx.tool_results:
            return [CallTool("echo", {"text": "one"}), CallTool("echo", {"text": "two"})]
        return Reply(" ".join(r.output for r in ctx.tool_results))

    async def echo(ctx: object, args: dict[str, object]) -> str:
        return str(args["text"])

    tools = [ToolSpec("echo", "Echo.", {"type": "object", "properties": {"text": {"type": "string"}}}, echo)]
    model = ScriptedModel(function=script)
    result = await run_turn(turn("say it", tools=tools), RecordingSink(), models=resolver(model))
    assert result.output == "one two"
    first, second = model.requests
    assert (first.request_index, first.prompt, first.tool_results, first.tools) == (0, "say it", (), ("echo",))
    assert second.tool_results == (
        ToolOutcome("call_0_0", "echo", "one", "ok"),
        ToolOutcome("call_0_1", "echo", "two", "ok"),
    )


async def test_a_script_that_runs_out_fails_the_run_with_a_clear_error() -> None:
    result = await run_turn(turn(), RecordingSink(), models=resolver(ScriptedModel.replying()))
    assert result.outcome == "failed"
    assert result.error == (
        "ScriptedModelError: the script has 0 step(s) and request 0 asked for step 1; "
        "add steps or use ScriptedModel(function=...)"
    )


async def test_usage_grows_with_the_conversation() -> None:
    model = ScriptedModel.replying("first answer", "second answer")
    first, second = RecordingSink(), RecordingSink()
    one = await run_turn(turn("hello"), first, models=resolver(model))
    two = await run_turn(turn("again", history=first.messages), second, models=resolver(model))
    assert 0 < one.usage.input_tokens < two.usage.input_tokens
    assert one.usage.output_tokens > 0
