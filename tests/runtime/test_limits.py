"""A role's `limits`: a turn that reaches its requests, tokens or spend stops once the response that reached it is
stored, before the tools that response calls run; an agent that spent its whole budget fails each new turn at its
start, with no model request. Spend is counted by real prices, over real HTTP (a fake OpenAI server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.runtime.roster import AgentDefinition, RoleLimits
from tests.fakes.openai_server import FakeOpenAI
from tests.runtime.support import OpenEngine, Scripted, lease_config, role

calls: list[str] = []


def note(text: str) -> str:
    """Write a note down."""
    calls.append(text)
    return f"noted {text}"


def get_weather(city: str) -> str:
    """The weather in a city."""
    calls.append(city)
    return f"sunny in {city}"


@pytest.fixture(autouse=True)
def _no_calls_yet() -> None:
    calls.clear()


def _notes_forever(ctx: Any) -> Any:
    return CallTool("note", {"text": f"step {ctx.request_index}"})


async def _turn_end(engine: Any, agent_id: str) -> Any:
    [*_, ended] = await engine.store.read_events(agent_id, limit=100, types=["turn.ended"])
    return ended.payload


async def test_a_turn_stops_at_its_request_limit_before_the_tools_of_the_last_response_run(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    looping = role("looper", scripted("limits-loop", ScriptedModel(function=_notes_forever)), tools=("note",),
                   limits=RoleLimits(requests=3))  # fmt: skip
    async with open_engine(looping, tools=[note]) as engine:
        done = await engine.task("looper", "Take notes.", timeout=10)
        agent_id = str(done["agentId"])
        ended = await _turn_end(engine, agent_id)
        results = await engine.store.read_events(agent_id, limit=100, types=["tool.result"])
    assert done["status"] == "failed" and ended.outcome == "failed"
    assert ended.error == (
        "the turn made 3 model requests, the limit of role 'looper' (limits.requests); send the agent a new input "
        "to go on, or raise the limit"
    )
    assert ended.usage.requests == 3
    assert calls == ["step 0", "step 1"]  # the third response's call did not run...
    assert [r.payload.status for r in results][-1] == "interrupted"  # ...and has a result, so the agent can go on


async def test_a_turn_stops_once_its_tokens_reach_the_limit(open_engine: OpenEngine, scripted: Scripted) -> None:
    looping = role("looper", scripted("limits-tokens", ScriptedModel(function=_notes_forever)), tools=("note",),
                   limits={"tokens": 1})  # fmt: skip
    async with open_engine(looping, tools=[note]) as engine:
        done = await engine.task("looper", "Take notes.", timeout=10)
        ended = await _turn_end(engine, str(done["agentId"]))
    assert ended.outcome == "failed" and ended.usage.requests == 1
    assert ended.error.startswith(f"the turn used {ended.usage.total_tokens:,} tokens, reaching the limit of 1 ")
    assert calls == []


async def test_a_final_answer_over_a_limit_is_kept(open_engine: OpenEngine, scripted: Scripted) -> None:
    answering = role("answerer", scripted("limits-answer", ScriptedModel([Reply("All done.")])),
                     limits={"tokens": 1})  # fmt: skip
    async with open_engine(answering) as engine:
        done = await engine.task("answerer", "Finish.", timeout=10)
    assert done["status"] == "completed"  # nothing would have followed it: no later request to stop


async def test_a_turn_continued_after_an_approval_counts_the_requests_made_before_the_pause(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    looping = role("looper", scripted("limits-pause", ScriptedModel(function=_notes_forever)), tools=("note",),
                   approval_tools=("note",), limits={"requests": 2})  # fmt: skip
    async with open_engine(looping, tools=[note]) as engine:
        paused = await engine.task("looper", "Take notes.", timeout=10)
        agent_id = str(paused["agentId"])
        assert paused["status"] == "awaiting_input"
        await engine.answer(str(paused["pendingHitl"]["hitlId"]), True)  # type: ignore[index]
        session, _ = await engine.wait(agent_id, 10)
        ended = await _turn_end(engine, agent_id)
    # 1 request before the pause, 1 after: the second response reached the limit of 2, so its call did not run
    assert session.status == "failed" and "made 2 model requests" in (ended.error or "")
    assert calls == ["step 0"]


async def test_a_continued_turn_over_a_limit_at_its_start_answers_the_calls_it_leaves_open(
    open_engine: OpenEngine, scripted: Scripted, tmp_path: Path
) -> None:
    """Once: a turn refused at its start (the limit lowered while it waited on a person) ended with the approved
    calls open, so the record showed them running in a failed agent until the next turn closed them."""
    model = scripted("limits-lowered", ScriptedModel(function=_notes_forever))
    looping = role("looper", model, tools=("note",), approval_tools=("note",), limits={"requests": 5})
    async with open_engine(looping, tools=[note]) as engine:
        paused = await engine.task("looper", "Take notes.", timeout=10)
    agent_id = str(paused["agentId"])
    lowered = AgentDefinition(**{**looping.model_dump(), "limits": {"requests": 1}})
    # (a short lease: a look at the inbox that this engine's close cuts short may leave the lease taken)
    async with open_engine(lowered, tools=[note], config=lease_config(tmp_path)) as engine:
        await engine.answer(str(paused["pendingHitl"]["hitlId"]), True)  # type: ignore[index]
        session, _ = await engine.wait(agent_id, 10)
        ended = await _turn_end(engine, agent_id)
        kinds = ["tool.call", "tool.result", "turn.ended"]
        stopped = [(e.type, getattr(e.payload, "status", None)) for e in await engine.store.read_events(
            agent_id, limit=100, types=kinds)]  # fmt: skip
        history = await engine.store.read_messages(session.conversation_id)
    assert session.status == "failed" and ended.usage.requests == 0
    assert ended.error == (
        "the turn made 1 model request, the limit of role 'looper' (limits.requests); send the agent a new input to "
        "go on, or raise the limit"
    )
    assert calls == []  # the approved call did not run: the turn made no request, its tools none
    assert stopped == [("tool.call", None), ("turn.ended", None), ("tool.result", "interrupted"), ("turn.ended", None)]
    assert history[-1]["parts"][0]["outcome"] == "interrupted"  # type: ignore[index,call-overload]
    again = AgentDefinition(**{**looping.model_dump(), "approval_tools": (), "limits": {"requests": 2}})
    async with open_engine(again, tools=[note]) as engine:  # the next input's turn finds no call open
        await engine.enqueue(agent_id, "Go on.")
        session, _ = await engine.wait(agent_id, 10)
        results = await engine.store.read_events(agent_id, limit=100, types=["tool.result"])
    assert session.status == "failed" and calls == ["step 1"]
    assert [r.payload.tool_call_id for r in results] == ["call_0_0", "call_1_0", "call_2_0"]  # each once


def _asks_a_city(ctx: Any) -> Any:
    answers = [e.text for e in ctx.transcript if e.kind == "tool_result" and e.tool_name == "ask_user"]
    if not answers:
        return CallTool("ask_user", {"question": "Which city?"})
    return Reply(f"Going with {answers[-1]}.")


async def test_an_answer_to_a_turn_refused_at_its_start_is_kept_for_the_next_turn(
    open_engine: OpenEngine, scripted: Scripted, tmp_path: Path
) -> None:
    """Once: a person's answer to a question was dropped when the turn it resumed was refused at its start (the
    limit lowered while it waited): the call was closed `interrupted`, and the agent never saw the answer."""
    asking = role("asker", scripted("limits-ask", ScriptedModel(function=_asks_a_city)), tools=("ask_user",),
                  limits={"requests": 5})  # fmt: skip
    async with open_engine(asking) as engine:
        paused = await engine.task("asker", "Plan a trip.", timeout=10)
    agent_id = str(paused["agentId"])
    assert paused["status"] == "awaiting_input"
    lowered = AgentDefinition(**{**asking.model_dump(), "limits": {"requests": 1}})
    async with open_engine(lowered, config=lease_config(tmp_path)) as engine:
        await engine.answer(str(paused["pendingHitl"]["hitlId"]), "Lisbon")  # type: ignore[index]
        session, _ = await engine.wait(agent_id, 10)
        ended = await _turn_end(engine, agent_id)
        results = await engine.store.read_events(agent_id, limit=100, types=["tool.result"])
        history = await engine.store.read_messages(session.conversation_id)
    assert session.status == "failed" and ended.usage.requests == 0 and "limits.requests" in (ended.error or "")
    assert [(r.payload.tool_name, r.payload.status, r.payload.output) for r in results] == [
        ("ask_user", "ok", "Lisbon")
    ]
    assert history[-1]["parts"][0]["content"] == "Lisbon"  # type: ignore[index,call-overload]
    async with open_engine(asking, config=lease_config(tmp_path)) as engine:  # the agent goes on with a new input
        await engine.enqueue(agent_id, "Go on.")
        session, _ = await engine.wait(agent_id, 10)
    assert session.last_text == "Going with Lisbon."


async def test_an_agent_over_its_spend_stops_mid_turn_then_fails_each_new_turn_without_a_request(
    open_engine: OpenEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    weather = role("weather", "openai-chat:gpt-4o", tools=("get_weather",))
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        async with open_engine(weather, tools=[get_weather]) as engine:  # what a 2-request turn costs, unlimited
            done = await engine.task("weather", "Weather in Paris?", timeout=10)
            per_request = (await engine.store.get_session(str(done["agentId"]))).cost_usd / 2
        assert per_request > 0  # the price of gpt-4o is known
        # room for the first turn (2 requests), not for the second's first request
        budget = AgentDefinition(**{**weather.model_dump(), "limits": {"agent_cost_usd": per_request * 2.5}})
        async with open_engine(budget, tools=[get_weather]) as engine:
            first = await engine.task("weather", "Weather in Paris?", timeout=10)
            agent_id = str(first["agentId"])
            calls.clear()
            requests_before = len(server.requests)
            await engine.enqueue(agent_id, "And tomorrow?")
            second, _ = await engine.wait(agent_id, 10)
            second_end = await _turn_end(engine, agent_id)
            second_calls, second_requests = list(calls), len(server.requests) - requests_before
            await engine.enqueue(agent_id, "And the day after?")
            third, _ = await engine.wait(agent_id, 10)
            third_end = await _turn_end(engine, agent_id)
            third_requests = len(server.requests) - requests_before - second_requests
    assert first["status"] in ("idle", "completed")
    assert second.status == "failed" and second_requests == 1 and second_calls == []
    assert (second_end.error or "").startswith("the agent has spent ")
    assert "(limits.agent_cost_usd); raise the limit to let it go on" in (second_end.error or "")
    assert third.status == "failed" and third_requests == 0 and third_end.usage.requests == 0
    assert (third_end.error or "").startswith("the agent has spent ")


async def test_a_spend_limit_a_model_without_a_known_price_cannot_reach_is_said_once_a_turn(
    open_engine: OpenEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once: the turn ran on as if unlimited, and nothing said so (nor in the terminal)."""
    unpriced = role("local", "openai-chat:my-local-llama", tools=("get_weather",), limits={"cost_usd": 1e-9})
    unlimited = role("plain", "openai-chat:my-local-llama", tools=("get_weather",))
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        async with open_engine(unpriced, unlimited, tools=[get_weather]) as engine:
            done = await engine.task("local", "Weather in Paris?", timeout=10)
            plain = await engine.task("plain", "Weather in Paris?", timeout=10)
            warnings = await engine.store.read_events(str(done["agentId"]), limit=100, types=["runtime.warning"])
            unsaid = await engine.store.read_events(str(plain["agentId"]), limit=100, types=["runtime.warning"])
            ended = await _turn_end(engine, str(done["agentId"]))
    assert done["status"] == "completed" and ended.usage.requests == 2 and ended.usage.cost_usd is None
    assert [w.payload.message for w in warnings] == [
        "limits.cost_usd of role 'local' cannot stop this turn: the price of model 'openai-chat:my-local-llama' is "
        "not known, so its spend is not counted; limits.tokens and limits.requests bound a turn on such a model"
    ]
    assert unsaid == []


def test_limits_are_checked_where_the_role_is_defined() -> None:
    with pytest.raises(ValueError, match=r"limits\.tokens"):
        AgentDefinition(name="coder", model="scripted:coder", limits={"tokens": 0})
    assert AgentDefinition(name="coder", model="scripted:coder", limits={"costUsd": 0.5}).limits.cost_usd == 0.5
    assert AgentDefinition(name="coder", model="scripted:coder").limits == RoleLimits(requests=50)
