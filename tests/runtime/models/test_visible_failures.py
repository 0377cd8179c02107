"""Visible failures over real HTTP: retries as `runtime.retry`, failures as `runtime.error` naming the provider and
URL, fallback chains with `model.reroute`. Against the local fake OpenAI server (made to fail) and a closed port."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentwatch.config import Config, ProviderConfig, load_config
from agentwatch.errors import InvalidArgument
from agentwatch.events import (
    CompletionFinished,
    CompletionStarted,
    ModelReroute,
    Payload,
    RuntimeNotice,
    RuntimeRetry,
)
from agentwatch.runtime.models import (
    CallTool,
    Fail,
    ModelResolver,
    RetryPolicy,
    ScriptedModel,
    TurnInput,
    run_turn,
)
from agentwatch.runtime.models.refs import retry_policy_from_env, split_chain
from agentwatch.runtime.roster import AgentDefinition
from tests.fakes.openai_server import FakeOpenAI
from tests.runtime.support import OpenEngine

from .recording import RecordingSink, resolver, turn, wait_for
from .test_refs import weather_turn

FAST = RetryPolicy(attempts=3, first_wait_seconds=0.01, max_wait_seconds=0.05)
ANSWER = "The weather is sunny in Paris."
VISIBLE = (RuntimeRetry, ModelReroute, RuntimeNotice, CompletionStarted, CompletionFinished)


def closed_port() -> int:
    """A port on 127.0.0.1 with nothing listening (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def visible(sink: RecordingSink) -> list[Payload]:
    return [p for p in sink.durable if isinstance(p, VISIBLE)]


def openai_env(base_url: str) -> dict[str, str]:
    return {"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "sk-test"}


async def test_a_rate_limited_request_is_retried_visibly_and_the_turn_completes() -> None:
    with FakeOpenAI(fail_status=429, fail_times=2) as server:
        sink = RecordingSink()
        async with ModelResolver(env=openai_env(server.base_url), retry=FAST) as models:
            result = await run_turn(weather_turn("openai-chat:gpt-4o"), sink, models=models)
    assert result.outcome == "completed" and result.output == ANSWER
    # our retries are the only ones: 2 refused + 1 answered for the first request, 1 for the second
    assert len(server.requests) == 4
    steps = visible(sink)
    assert [type(p).__name__ for p in steps] == [
        "CompletionStarted",
        "RuntimeRetry",
        "RuntimeRetry",
        "CompletionFinished",
        "CompletionStarted",
        "CompletionFinished",
    ]
    retries = [p for p in steps if isinstance(p, RuntimeRetry)]
    assert [(r.attempt, r.delay_seconds) for r in retries] == [(2, 0.01), (3, 0.02)]
    for retry in retries:
        assert "429" in retry.message and "openai-chat:gpt-4o" in retry.message
        assert server.base_url in retry.message
    assert not [p for p in sink.durable if isinstance(p, RuntimeNotice)]


async def test_the_wait_before_a_retry_is_what_the_provider_asked_within_the_bound() -> None:
    policy = RetryPolicy(attempts=2, first_wait_seconds=0.01, max_wait_seconds=0.2)
    with FakeOpenAI(fail_status=503, fail_times=1, retry_after=0.05) as server:
        sink = RecordingSink()
        async with ModelResolver(env=openai_env(server.base_url), retry=policy) as models:
            result = await run_turn(weather_turn("openai-chat:gpt-4o"), sink, models=models)
    assert result.output == ANSWER
    assert [(p.attempt, p.delay_seconds) for p in sink.durable if isinstance(p, RuntimeRetry)] == [(2, 0.05)]
    assert RetryPolicy(first_wait_seconds=1, max_wait_seconds=3).wait(5, asked=60) == 3


async def test_a_server_error_that_persists_fails_the_turn_naming_the_model_provider_and_url() -> None:
    with FakeOpenAI(fail_status=500) as server:
        sink = RecordingSink()
        async with ModelResolver(env=openai_env(server.base_url), retry=FAST) as models:
            result = await run_turn(weather_turn("openai-chat:gpt-4o"), sink, models=models)
    assert result.outcome == "failed" and result.error is not None
    assert len(server.requests) == FAST.attempts
    assert "status_code: 500" in result.error
    assert f"openai-chat:gpt-4o via openai at {server.base_url}/, 3 attempts" in result.error
    retries = [p.attempt for p in sink.durable if isinstance(p, RuntimeRetry)]
    assert retries == [2, 3]
    (error,) = [p for p in sink.durable if isinstance(p, RuntimeNotice)]
    assert error.type == "runtime.error" and error.source == "model" and error.message == result.error
    assert error.detail == {
        "models": [
            {
                "model": "openai-chat:gpt-4o",
                "provider": "openai",
                "url": f"{server.base_url}/",
                "error": result.error.split(" (openai-chat:gpt-4o via")[0],
                "attempts": 3,
            }
        ]
    }
    assert sink.durable[-1] == error  # recorded after what the failed run recovered


async def test_a_closed_port_is_retried_then_fails_with_its_url() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    sink = RecordingSink()
    policy = RetryPolicy(attempts=2, first_wait_seconds=0.01)
    async with ModelResolver(env=openai_env(url), retry=policy) as models:
        result = await run_turn(weather_turn("openai-chat:gpt-4o"), sink, models=models)
    assert result.outcome == "failed" and result.error is not None
    assert result.error.startswith("ModelConnectionError: Connection error.")
    assert f"via openai at {url}/, 2 attempts" in result.error
    (retry,) = [p for p in sink.durable if isinstance(p, RuntimeRetry)]
    assert retry.attempt == 2 and url in retry.message
    (error,) = [p for p in sink.durable if isinstance(p, RuntimeNotice)]
    assert error.type == "runtime.error" and url in error.message


async def test_a_refused_request_is_not_retried() -> None:
    with FakeOpenAI(fail_status=401) as server:
        sink = RecordingSink()
        async with ModelResolver(env=openai_env(server.base_url), retry=FAST) as models:
            result = await run_turn(weather_turn("openai-chat:gpt-4o"), sink, models=models)
    assert result.outcome == "failed"
    assert len(server.requests) == 1
    assert not [p for p in sink.durable if isinstance(p, RuntimeRetry)]
    assert result.error is not None and "1 attempt" in result.error


def chain_resolver(first: str, second: str, policy: RetryPolicy = FAST) -> ModelResolver:
    providers = {"first": ProviderConfig(base_url=first), "second": ProviderConfig(base_url=second)}
    return ModelResolver(providers, {}, retry=policy)


async def test_a_chain_moves_to_the_next_model_when_one_fails_and_stays_there() -> None:
    policy = RetryPolicy(attempts=2, first_wait_seconds=0.01)
    with FakeOpenAI(fail_status=500) as broken, FakeOpenAI() as working:
        sink = RecordingSink()
        async with chain_resolver(broken.base_url, working.base_url, policy) as models:
            result = await run_turn(weather_turn("first:big, second:small"), sink, models=models)
    assert result.outcome == "completed" and result.output == ANSWER
    # the failed model is not tried again in the run: the second request goes straight to the next one
    assert (len(broken.requests), len(working.requests)) == (2, 2)
    steps = visible(sink)
    assert [type(p).__name__ for p in steps] == [
        "CompletionStarted",
        "RuntimeRetry",
        "ModelReroute",
        "CompletionFinished",
        "CompletionStarted",
        "CompletionFinished",
    ]
    started = [p.model for p in steps if isinstance(p, CompletionStarted)]
    answered = [p.model for p in steps if isinstance(p, CompletionFinished)]
    assert (started, answered) == (["first:big", "second:small"], ["second:small", "second:small"])
    (reroute,) = [p for p in steps if isinstance(p, ModelReroute)]
    assert (reroute.from_model, reroute.to_model) == ("first:big", "second:small")
    assert "status_code: 500" in reroute.reason and f"first:big via first at {broken.base_url}/" in reroute.reason


async def test_a_chain_that_fails_everywhere_names_every_model_tried() -> None:
    down = f"http://127.0.0.1:{closed_port()}/v1"
    policy = RetryPolicy(attempts=1)
    with FakeOpenAI(fail_status=503) as busy:
        sink = RecordingSink()
        async with chain_resolver(busy.base_url, down, policy) as models:
            result = await run_turn(weather_turn("first:big, second:small"), sink, models=models)
    assert result.outcome == "failed" and result.error is not None
    assert result.error.startswith("every model of the chain failed: first:big: ")
    assert f"first:big via first at {busy.base_url}/, 1 attempt" in result.error
    assert f"second:small: ModelConnectionError: Connection error. (second:small via second at {down}/" in result.error
    assert [(p.from_model, p.to_model) for p in sink.durable if isinstance(p, ModelReroute)] == [
        ("first:big", "second:small")
    ]
    (error,) = [p for p in sink.durable if isinstance(p, RuntimeNotice)]
    assert isinstance(error.detail, dict) and isinstance(error.detail["models"], list)
    tried = [m for m in error.detail["models"] if isinstance(m, dict)]
    assert [(m["model"], m["url"]) for m in tried] == [("first:big", f"{busy.base_url}/"), ("second:small", f"{down}/")]


async def test_a_failure_of_the_tool_layer_is_a_runtime_error() -> None:
    # a model that keeps calling a tool that does not exist ends the run in the tool layer
    model = ScriptedModel(function=lambda ctx: CallTool("no_such_tool", {}))
    sink = RecordingSink()
    result = await run_turn(turn(), sink, models=resolver(model))
    assert result.outcome == "failed" and result.error is not None
    (error,) = [p for p in sink.durable if isinstance(p, RuntimeNotice)]
    assert error == RuntimeNotice(
        type="runtime.error", message=f"the tool layer failed: {result.error}", source="tools"
    )


def test_a_definition_takes_an_ordered_chain_of_models() -> None:
    definition = AgentDefinition(name="coder", model=["openai:gpt-4o", " local:llama3.1 "])
    assert definition.model == "openai:gpt-4o, local:llama3.1"
    assert split_chain(definition.model) == ("openai:gpt-4o", "local:llama3.1")
    assert split_chain("openai:gpt-4o") == ("openai:gpt-4o",)
    with pytest.raises(ValueError, match="'llama' is not a model ref"):
        AgentDefinition(name="coder", model=["openai:gpt-4o", "llama"])


def test_a_chain_resolves_only_when_every_model_does() -> None:
    models = ModelResolver(env={"OPENAI_API_KEY": "sk-test"})
    models.check("openai:gpt-4o, openai-chat:gpt-4o-mini")
    with pytest.raises(InvalidArgument, match="needs ANTHROPIC_API_KEY"):
        models.check("openai:gpt-4o, anthropic:claude-sonnet-4-5")
    assert models.context_window("openai:gpt-4o, openai:gpt-4.1") == 128_000


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, RetryPolicy()),
        (
            {
                "AGENTWATCH_MODEL_ATTEMPTS": "5",
                "AGENTWATCH_MODEL_RETRY_WAIT": "0.5",
                "AGENTWATCH_MODEL_RETRY_MAX_WAIT": "4",
            },
            RetryPolicy(attempts=5, first_wait_seconds=0.5, max_wait_seconds=4),
        ),
    ],
)
def test_the_retry_policy_comes_from_the_environment(env: dict[str, str], expected: RetryPolicy) -> None:
    assert retry_policy_from_env(env) == expected
    assert ModelResolver(env=env).retry == expected


@pytest.mark.parametrize("env", [{"AGENTWATCH_MODEL_ATTEMPTS": "0"}, {"AGENTWATCH_MODEL_RETRY_WAIT": "soon"}])
def test_a_bad_retry_setting_is_refused_naming_it(env: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument, match=r"AGENTWATCH_MODEL|attempts"):
        retry_policy_from_env(env)


WATCHED = ["runtime.retry", "model.reroute", "runtime.error"]


def chain_definition(agents_dir: Path) -> None:
    """A definition file whose model is a fallback chain, as a project writes it."""
    agents_dir.mkdir(parents=True, exist_ok=True)
    (agents_dir / "forecaster.md").write_text(
        "---\nname: forecaster\nmodel: [first:big, second:small]\n---\nYou tell the weather.\n"
    )


def chain_config(tmp_path: Path, first: str, second: str) -> Config:
    providers = {"first": ProviderConfig(base_url=first), "second": ProviderConfig(base_url=second)}
    return load_config(tmp_path).model_copy(update={"providers": providers})


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTWATCH_MODEL_ATTEMPTS", "2")
    monkeypatch.setenv("AGENTWATCH_MODEL_RETRY_WAIT", "0.01")


@pytest.mark.usefixtures("fast_retries")
async def test_an_agent_on_a_chain_shows_its_retry_and_reroute_in_its_tail(
    open_engine: OpenEngine, tmp_path: Path
) -> None:
    chain_definition(tmp_path / "agents")
    with FakeOpenAI(fail_status=429) as limited, FakeOpenAI() as working:
        config = chain_config(tmp_path, limited.base_url, working.base_url)
        async with open_engine(config=config) as engine:
            snapshot = await engine.task("forecaster", "Weather in Paris?", timeout=30)
            tail = await engine.call_tool("agent_tail", {"id": snapshot["agentId"], "types": WATCHED})
            every = await engine.call_tool("agent_tail", {"id": snapshot["agentId"]})
    assert snapshot["status"] == "completed"
    assert [row["type"] for row in tail["events"]] == ["runtime.retry", "model.reroute"]
    retry, reroute = tail["events"]
    assert "429" in retry["detail"] and limited.base_url in retry["detail"]
    assert reroute["title"] == "first:big → second:small" and limited.base_url in reroute["detail"]
    # both are in the tail's default set too
    assert {"runtime.retry", "model.reroute"} <= {row["type"] for row in every["events"]}


@pytest.mark.usefixtures("fast_retries")
async def test_an_agent_whose_models_all_fail_shows_the_error_naming_them_in_its_tail(
    open_engine: OpenEngine, tmp_path: Path
) -> None:
    chain_definition(tmp_path / "agents")
    down = f"http://127.0.0.1:{closed_port()}/v1"
    with FakeOpenAI(fail_status=500) as broken:
        config = chain_config(tmp_path, broken.base_url, down)
        async with open_engine(config=config) as engine:
            snapshot = await engine.task("forecaster", "Weather in Paris?", timeout=30)
            tail = await engine.call_tool("agent_tail", {"id": snapshot["agentId"], "types": WATCHED})
            ended = await engine.call_tool("agent_tail", {"id": snapshot["agentId"], "types": ["turn.ended"]})
    assert snapshot["status"] == "failed"
    assert [row["type"] for row in tail["events"]] == [
        "runtime.retry",  # first:big, attempt 2
        "model.reroute",
        "runtime.retry",  # second:small, attempt 2
        "runtime.error",
    ]
    error = tail["events"][-1]["detail"]
    assert error.startswith("every model of the chain failed: first:big")
    assert broken.base_url in error and down in error
    (turn_ended,) = ended["events"]
    assert turn_ended["status"] == "failed" and turn_ended["detail"] == error


async def test_a_turn_cancelled_while_it_waits_to_retry_keeps_the_retry_and_sends_nothing_more() -> None:
    policy = RetryPolicy(attempts=3, first_wait_seconds=60)
    with FakeOpenAI(fail_status=500) as server:
        sink = RecordingSink()
        async with ModelResolver(env=openai_env(server.base_url), retry=policy) as models:
            task = asyncio.create_task(run_turn(weather_turn("openai-chat:gpt-4o"), sink, models=models))
            await wait_for(lambda: any(isinstance(p, RuntimeRetry) for p in sink.durable))
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    assert len(server.requests) == 1
    # the request is closed as any request a cancellation cuts off
    assert [type(p).__name__ for p in visible(sink)] == ["CompletionStarted", "RuntimeRetry", "CompletionFinished"]
    assert [p.finish_reason for p in sink.durable if isinstance(p, CompletionFinished)] == ["interrupted"]
    (retry,) = [p for p in sink.durable if isinstance(p, RuntimeRetry)]
    assert (retry.attempt, retry.delay_seconds) == (2, 20.0)  # the first wait, bounded by max_wait_seconds


@pytest.mark.parametrize("kind", ["server_error", "rate_limit_exceeded"])
async def test_an_error_sent_as_the_streams_first_event_is_retried(kind: str) -> None:
    with FakeOpenAI(stream_error=kind, fail_times=1) as server:
        sink = RecordingSink()
        async with ModelResolver(env=openai_env(server.base_url), retry=FAST) as models:
            result = await run_turn(weather_turn("openai-chat:gpt-4o"), sink, models=models)
    assert result.output == ANSWER
    (retry,) = [p for p in sink.durable if isinstance(p, RuntimeRetry)]
    assert "the fake failed in its stream" in retry.message and retry.attempt == 2
    assert len(server.requests) == 3


async def test_a_refusal_sent_in_the_stream_is_not_retried() -> None:
    with FakeOpenAI(stream_error="invalid_request_error") as server:
        sink = RecordingSink()
        async with ModelResolver(env=openai_env(server.base_url), retry=FAST) as models:
            result = await run_turn(weather_turn("openai-chat:gpt-4o"), sink, models=models)
    assert result.outcome == "failed" and result.error is not None
    assert result.error.endswith(f"(openai-chat:gpt-4o via openai at {server.base_url}/, 1 attempt)")
    assert len(server.requests) == 1 and not [p for p in sink.durable if isinstance(p, RuntimeRetry)]


async def test_a_scripted_provider_error_is_retried_and_rerouted_like_a_real_one() -> None:
    busy = ScriptedModel(steps=[Fail("too many requests", status=429)])
    calm = ScriptedModel.replying("Hi.")
    models = ModelResolver(env={}, models={"busy": busy, "calm": calm}, retry=RetryPolicy(2, first_wait_seconds=0))
    sink = RecordingSink()
    chain = TurnInput(model="scripted:busy, scripted:calm", instructions="Be brief.", history=[], prompt="hello")
    result = await run_turn(chain, sink, models=models)
    assert result.output == "Hi."
    assert (len(busy.requests), len(calm.requests)) == (2, 1)
    steps = [p for p in visible(sink) if not isinstance(p, CompletionStarted | CompletionFinished)]
    assert [type(p).__name__ for p in steps] == ["RuntimeRetry", "ModelReroute"]
    retry, reroute = steps
    assert isinstance(retry, RuntimeRetry) and "status_code: 429" in retry.message
    assert isinstance(reroute, ModelReroute)
    assert (reroute.from_model, reroute.to_model) == ("scripted:busy", "scripted:calm")
    assert "too many requests" in reroute.reason


@given(
    first=st.floats(0, 30),
    bound=st.floats(0, 120),
    retry=st.integers(1, 40),
    asked=st.none() | st.floats(0, 1e6),
)
def test_a_wait_is_never_longer_than_the_bound_and_never_shorter_than_asked_within_it(
    first: float, bound: float, retry: int, asked: float | None
) -> None:
    policy = RetryPolicy(first_wait_seconds=first, max_wait_seconds=bound)
    wait = policy.wait(retry, asked)
    assert 0 <= wait <= bound
    assert wait >= min(bound, first * 2 ** (retry - 1))
    assert asked is None or wait >= min(bound, asked)
    assert wait <= policy.wait(retry + 1, asked)  # waits never shrink from one retry to the next
