"""Declarations and gates: the resolver's cases, the switch, and the arm-time policy check."""

from __future__ import annotations

import pytest

from agentwatch.runtime.models import Reply, ScriptedModel
from agentwatch.runtime.policy import Decision, Policy, ToolRequest, Verdict
from agentwatch.store import SessionPatch
from agentwatch.watchers import describe
from tests.watchers.support import OpenEngine, Scripted, eventually, observers_of, role, states, warnings


def replying(scripted: Scripted, name: str) -> str:
    return scripted(name, ScriptedModel(function=lambda ctx: Reply("ok")))


async def two_turns(engine: object, role_name: str) -> str:
    session = await engine.create(role_name, source="chat")  # type: ignore[attr-defined]
    for prompt in ("one", "two"):
        await engine.enqueue(session.id, prompt)  # type: ignore[attr-defined]
        await engine.wait(session.id, 10)  # type: ignore[attr-defined]
    return session.id  # type: ignore[no-any-return]


async def test_an_observer_type_missing_from_the_roster_is_warned_once_and_the_agent_runs_unobserved(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    async with open_engine(role("coder", replying(scripted, "m1"), observer="ghost")) as engine:
        sid = await two_turns(engine, "coder")
        found = await eventually(lambda: warnings(engine, sid))
        assert found == ["its observer 'ghost' is not an agent type in the roster, so 'coder' runs unobserved"]
        assert await observers_of(engine, sid) == []
        assert await describe(engine.store, await engine.store.get_session(sid)) is None


async def test_observers_are_not_chained(open_engine: OpenEngine, scripted: Scripted) -> None:
    model = replying(scripted, "m2")
    async with open_engine(
        role("coder", model, observer="watcher"), role("watcher", model, observer="auditor"), role("auditor", model)
    ) as engine:
        sid = await two_turns(engine, "coder")
        assert await eventually(lambda: warnings(engine, sid)) == [
            "its observer 'watcher' has an observer of its own ('auditor'); observers are not chained, "
            "so 'coder' runs unobserved"
        ]
        # a session running as an observer ignores the observer its own role declares
        watcher = await engine.create("watcher", source="chat")
        await engine.store.update_session(watcher.id, SessionPatch(is_observer=True))
        await engine.enqueue(watcher.id, "digest")
        await engine.wait(watcher.id, 10)
        assert await eventually(lambda: warnings(engine, watcher.id)) == [
            "the observer 'auditor' declared for 'watcher' is ignored: this session runs as an observer itself, "
            "and observers are not chained"
        ]
        assert await observers_of(engine, watcher.id) == []


@pytest.mark.parametrize("variable", ["AGENTWATCH_OBSERVER_AGENTS", "AGENTWATCH_BACKGROUND_TASKS"])
async def test_the_switches_turn_observer_agents_off(
    open_engine: OpenEngine, scripted: Scripted, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "0")
    model = replying(scripted, "m3")
    async with open_engine(role("coder", model, observer="watcher"), role("watcher", model)) as engine:
        assert engine.config.observer_agents_enabled is False
        sid = await two_turns(engine, "coder")
        assert await observers_of(engine, sid) == []
        assert await states(engine, sid) == []
        assert await warnings(engine, sid) == []


async def test_observer_agents_are_on_by_default(open_engine: OpenEngine, scripted: Scripted) -> None:
    model = replying(scripted, "m4")
    async with open_engine(role("coder", model, observer="watcher"), role("watcher", model)) as engine:
        assert engine.config.observer_agents_enabled is True
        sid = await two_turns(engine, "coder")
        (observer,) = await eventually(lambda: observers_of(engine, sid))
        assert observer.is_observer and observer.role == "watcher"


@pytest.mark.parametrize("decision", ["deny", "ask", "defer"])
async def test_anything_but_allow_at_arm_time_leaves_the_pairing_denied(
    open_engine: OpenEngine, scripted: Scripted, decision: Decision
) -> None:
    seen: list[ToolRequest] = []

    def gate(request: ToolRequest) -> Verdict | None:
        if request.purpose == "call":
            return None
        seen.append(request)
        return Verdict(decision, "not today")

    model = replying(scripted, f"m5-{decision}")
    async with open_engine(
        role("coder", model, observer="watcher"), role("watcher", model), policies=[Policy("gate", gate)]
    ) as engine:
        sid = await two_turns(engine, "coder")
        assert await eventually(lambda: states(engine, sid)) == [("denied", f"{decision} by policy 'gate': not today")]
        assert await observers_of(engine, sid) == []
        request = seen[0]
        assert (request.tool_name, request.purpose, request.session_id, request.role) == (
            "agent_task",
            "observer_arm",
            sid,
            "coder",
        )
        assert (request.input["role"], request.input["background"], request.input["observes"]) == ("watcher", True, sid)
        assert "spawn" in request.grant
        described = await describe(engine.store, await engine.store.get_session(sid))
        assert described is not None and described["state"] == "denied"


async def test_a_policy_that_raises_at_arm_time_leaves_the_pairing_denied(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    def broken(request: ToolRequest) -> Verdict | None:
        if request.purpose == "observer_arm":
            raise RuntimeError("policy server unreachable")
        return None

    model = replying(scripted, "m6")
    async with open_engine(
        role("coder", model, observer="watcher"), role("watcher", model), policies=[Policy("broken", broken)]
    ) as engine:
        sid = await two_turns(engine, "coder")
        assert await eventually(lambda: states(engine, sid)) == [
            ("denied", "the policy check failed: RuntimeError: policy server unreachable")
        ]
