"""Model refs, and the real HTTP path against a local fake OpenAI-compatible server."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from pydantic import JsonValue

from agentwatch.config import ProviderConfig
from agentwatch.errors import InvalidArgument
from agentwatch.events import CompletionFinished, ContentDelta, ThinkingBlock, ToolCall, ToolResult, Usage
from agentwatch.runtime.models import (
    ModelResolver,
    ScriptedModel,
    ToolContext,
    ToolSpec,
    TurnInput,
    known_context_window,
    register_scripted_model,
    run_turn,
    unregister_scripted_model,
)
from agentwatch.runtime.models.refs import not_a_model_ref
from tests.fakes.openai_server import FakeOpenAI

from .recording import RecordingSink

WEATHER = ToolSpec(
    name="get_weather",
    description="The weather in a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    run=lambda ctx, args: _weather(ctx, args),
)


async def _weather(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    return f"sunny in {args['city']}"


def weather_turn(model: str) -> TurnInput:
    return TurnInput(model=model, instructions="Be brief.", history=[], prompt="Weather in Paris?", tools=[WEATHER])


@pytest.mark.parametrize(
    ("ref", "env", "message"),
    [
        ("gpt-4o", {}, "is not a model ref; write it as <provider>:<model>"),
        ("openai:gpt-4o", {}, "needs OPENAI_API_KEY"),
        ("openai-chat:", {}, "is not <provider>:<model>"),
        ("anthropic:claude-sonnet-4-5", {}, "needs ANTHROPIC_API_KEY"),
        ("ollama:llama3.1", {}, "add a [providers.ollama] section"),
        ("scripted:nobody", {}, "register_scripted_model('nobody'"),
        ("corp:m", {}, "needs CORP_KEY"),
    ],
)
def test_a_ref_that_cannot_resolve_says_what_to_do(ref: str, env: dict[str, str], message: str) -> None:
    resolver = ModelResolver({"corp": ProviderConfig(base_url="http://127.0.0.1:1/v1", api_key_env="CORP_KEY")}, env)
    with pytest.raises(InvalidArgument, match=message.replace("[", r"\[").replace("(", r"\(")) as caught:
        resolver.check(ref)
    assert repr(ref) in caught.value.message


@pytest.mark.parametrize(
    "ref",
    ["openai:gpt-4o", "openai-responses:gpt-4o", "openai-chat:gpt-4o", "anthropic:claude-sonnet-4-5", "local:llama3"],
)
def test_refs_resolve_with_keys_from_the_env_mapping(ref: str) -> None:
    env = {"OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-ant-test"}
    ModelResolver({"local": ProviderConfig(base_url="http://127.0.0.1:1/v1")}, env).check(ref)


def test_a_provider_cannot_take_a_builtin_name() -> None:
    with pytest.raises(InvalidArgument, match="built-in model prefix"):
        ModelResolver({"openai": ProviderConfig(base_url="http://127.0.0.1:1/v1")}, {})


def test_scripted_refs_use_the_registry() -> None:
    register_scripted_model("refs-test", ScriptedModel.replying("hi"))
    try:
        ModelResolver(env={}).check("scripted:refs-test")
    finally:
        unregister_scripted_model("refs-test")
    with pytest.raises(InvalidArgument):
        ModelResolver(env={}).check("scripted:refs-test")


def test_known_context_windows_match_model_families() -> None:
    assert known_context_window("openai:gpt-4o-2024-08-06") == 128_000
    assert known_context_window("openai:gpt-4o-mini") == 128_000
    assert known_context_window("anthropic:claude-sonnet-4-5") == 200_000
    assert known_context_window("local:llama3.1") is None


async def test_openai_chat_through_openai_base_url_streams_a_tool_call_then_text() -> None:
    with FakeOpenAI() as server:
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test"}
        sink = RecordingSink()
        async with ModelResolver(env=env) as resolver:
            result = await run_turn(weather_turn("openai-chat:gpt-4o"), sink, models=resolver)

    assert result.outcome == "completed"
    assert result.output == "The weather is sunny in Paris."
    assert [r["body"]["stream"] for r in server.requests] == [True, True]
    assert server.requests[0]["body"]["stream_options"] == {"include_usage": True}
    assert server.requests[0]["authorization"] == "Bearer sk-test"
    assert server.requests[1]["body"]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_xyz",
        "content": "sunny in Paris",
    }
    assert sink.streamed == [
        ContentDelta(part="thinking", index=0, request_index=0, delta="The user wants the weather; "),
        ContentDelta(part="thinking", index=0, request_index=0, delta="call the tool."),
        ContentDelta(part="text", index=0, request_index=1, delta="The weather "),
        ContentDelta(part="text", index=0, request_index=1, delta="is "),
        ContentDelta(part="text", index=0, request_index=1, delta="sunny in Paris."),
    ]
    durable = sink.durable
    assert durable[1:2] == [ThinkingBlock(text="The user wants the weather; call the tool.")]
    assert [p for p in durable if isinstance(p, ToolCall | ToolResult)] == [
        ToolCall(tool_call_id="call_xyz", tool_name="get_weather", input={"city": "Paris"}),
        ToolResult(tool_call_id="call_xyz", tool_name="get_weather", output="sunny in Paris"),
    ]
    finished = [p for p in durable if isinstance(p, CompletionFinished)]
    assert [(f.finish_reason, f.context_tokens, f.context_window, f.window_source) for f in finished] == [
        ("tool_call", 33, 128_000, "registry"),
        ("stop", 33, 128_000, "registry"),
    ]
    # usage: cached and reasoning tokens are mapped, and genai-prices knows gpt-4o's price
    usage = finished[0].usage
    assert usage.model_copy(update={"cost_usd": None}) == Usage(
        input_tokens=33, output_tokens=11, cache_read_tokens=8, reasoning_tokens=5, requests=1
    )
    assert usage.cost_usd is not None and usage.cost_usd > 0
    assert result.usage.requests == 2


async def test_a_call_whose_arguments_are_not_json_is_sent_back_to_the_model_and_its_tool_never_runs() -> None:
    ran: list[dict[str, Any]] = []

    async def weather(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
        ran.append(args)
        return "sunny"

    with FakeOpenAI(call_arguments='{"city": Paris}') as server:
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test"}
        sink = RecordingSink()
        malformed = replace(weather_turn("openai-chat:gpt-4o"), tools=[replace(WEATHER, run=weather)])
        async with ModelResolver(env=env) as resolver:
            result = await run_turn(malformed, sink, models=resolver)

    assert ran == []
    [told] = [p for p in sink.durable if isinstance(p, ToolResult)]
    assert (told.tool_call_id, told.status) == ("call_xyz", "error") and "Invalid JSON" in told.output
    # the model was told on the wire, as a result of its call, and answered
    sent = server.requests[1]["body"]["messages"][-1]
    assert sent["role"] == "tool" and sent["tool_call_id"] == "call_xyz" and "Invalid JSON" in sent["content"]
    assert result.outcome == "completed" and result.output is not None and "Invalid JSON" in result.output


async def test_a_named_provider_goes_to_its_base_url_with_its_key() -> None:
    with FakeOpenAI() as server:
        providers = {"local": ProviderConfig(base_url=server.base_url, api_key_env="LOCAL_KEY")}
        sink = RecordingSink()
        async with ModelResolver(providers, {"LOCAL_KEY": "k-local"}) as resolver:
            result = await run_turn(weather_turn("local:llama3.1"), sink, models=resolver)
    assert result.output == "The weather is sunny in Paris."
    assert [r["authorization"] for r in server.requests] == ["Bearer k-local", "Bearer k-local"]
    assert [r["body"]["model"] for r in server.requests] == ["llama3.1", "llama3.1"]
    finished = [p for p in sink.durable if isinstance(p, CompletionFinished)]
    assert [(f.usage.cost_usd, f.context_window) for f in finished] == [(None, None), (None, None)]  # unknown model


async def test_a_provider_error_fails_the_run_with_its_message() -> None:
    with FakeOpenAI(fail_status=400) as server:
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test"}
        sink = RecordingSink()
        async with ModelResolver(env=env) as resolver:
            result = await run_turn(weather_turn("openai-chat:gpt-4o"), sink, models=resolver)
    assert result.outcome == "failed"
    assert result.error is not None
    assert result.error.startswith("ModelRequestRejectedError: status_code: 400")
    assert "failing on purpose" in result.error


@pytest.mark.parametrize(
    ("ref", "expected", "not_said"),
    [
        ("", "the model is blank; write it as <provider>:<model>", "add one as"),
        ("openai: x", "'openai: x' is not a model ref", "add one as openai: x ="),
        ("gpt4", 'add one as gpt4 = "<provider>:<model>"', "the model is blank"),
    ],
)
def test_what_to_write_instead_of_a_ref_is_never_garbled(ref: str, expected: str, not_said: str) -> None:
    """Once: a blank model (a rule observer run as a role) was told `add one as  = ...`, and `openai:` to add an
    alias named `openai:`, which no alias can be."""
    message = not_a_model_ref(ref, ["fast", "sonnet"])
    assert expected in message and not_said not in message
