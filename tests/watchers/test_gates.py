"""Declarations and gates: the resolver's cases, the switch, and the arm-time policy check."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from agentwatch.cli import cli
from agentwatch.runtime.models import Reply, ScriptedModel
from agentwatch.runtime.policy import Decision, Policy, ToolRequest, Verdict
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


async def test_observers_are_not_chained_as_the_seeds_resolve_it(open_engine: OpenEngine, scripted: Scripted) -> None:
    model = replying(scripted, "m2")
    async with open_engine(
        role("coder", model, observer="watcher", grant=("spawn",)),
        role("watcher", model, observer="auditor", grant=("spawn",)),
        role("auditor", model),
    ) as engine:
        sid = await two_turns(engine, "coder")
        # the observed agent is observed even though its observer type declares an observer of its own ...
        (watcher,) = await eventually(lambda: observers_of(engine, sid))
        assert watcher.role == "watcher"
        assert [state for state, _ in await eventually(lambda: states(engine, sid))] == ["armed"]
        # ... and the observer session ignores that declaration, with a warning
        assert await eventually(lambda: warnings(engine, watcher.id)) == [
            "the observer 'auditor' declared for 'watcher' is ignored: this session runs as an observer itself, "
            "and observers are not chained"
        ]
        assert await observers_of(engine, watcher.id) == []
        assert await warnings(engine, sid) == []


@pytest.mark.parametrize("variable", ["AGENTWATCH_OBSERVER_AGENTS", "AGENTWATCH_BACKGROUND_TASKS"])
async def test_the_switches_turn_observer_agents_off(
    open_engine: OpenEngine, scripted: Scripted, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "0")
    model = replying(scripted, "m3")
    async with open_engine(
        role("coder", model, observer="watcher", grant=("spawn",)), role("watcher", model)
    ) as engine:
        assert engine.config.observer_agents_enabled is False
        sid = await two_turns(engine, "coder")
        assert await observers_of(engine, sid) == []
        assert await states(engine, sid) == []
        assert await warnings(engine, sid) == []


async def test_observer_agents_are_on_by_default(open_engine: OpenEngine, scripted: Scripted) -> None:
    model = replying(scripted, "m4")
    async with open_engine(
        role("coder", model, observer="watcher", grant=("spawn",)), role("watcher", model)
    ) as engine:
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
        role("coder", model, observer="watcher", grant=("spawn",)),
        role("watcher", model),
        policies=[Policy("gate", gate)],
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


async def test_a_role_whose_agent_task_a_person_approves_arms_no_model_observer(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    model = replying(scripted, "approved-spawn")
    async with open_engine(
        role("coder", model, observer="watcher", grant=("spawn",), approval_tools=("agent_task",)),
        role("guarded", model, observer="loop-guard", approval_tools=("agent_task",)),
        role("watcher", model),
    ) as engine:
        sid = await two_turns(engine, "coder")
        reason = "ask: role 'coder' has agent_task approved by a person (approval_tools)"
        assert await eventually(lambda: states(engine, sid)) == [("denied", reason)]
        assert await observers_of(engine, sid) == []
        guarded = await two_turns(engine, "guarded")  # a rule observer spawns nothing: nothing to approve
        assert await eventually(lambda: states(engine, guarded)) == [("armed", "rule observer")]


async def test_a_policy_that_raises_at_arm_time_leaves_the_pairing_denied(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    def broken(request: ToolRequest) -> Verdict | None:
        if request.purpose == "observer_arm":
            raise RuntimeError("policy server unreachable")
        return None

    model = replying(scripted, "m6")
    async with open_engine(
        role("coder", model, observer="watcher", grant=("spawn",)),
        role("watcher", model),
        policies=[Policy("broken", broken)],
    ) as engine:
        sid = await two_turns(engine, "coder")
        assert await eventually(lambda: states(engine, sid)) == [
            ("denied", "the policy check failed: RuntimeError: policy server unreachable")
        ]


async def test_without_the_spawn_grant_a_model_observer_is_not_armed(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    seen: list[ToolRequest] = []

    def spy(request: ToolRequest) -> Verdict | None:
        if request.purpose == "observer_arm":
            seen.append(request)
        return None

    model = replying(scripted, "m7")
    async with open_engine(
        role("coder", model, observer="watcher"), role("watcher", model), policies=[Policy("spy", spy)]
    ) as engine:
        sid = await two_turns(engine, "coder")
        reason = (
            "deny by policy 'grant': role 'coder' has no 'spawn' grant, which 'agent_task' needs; add `grant: [spawn]` "
            "to its definition"
        )
        assert await eventually(lambda: states(engine, sid)) == [("denied", reason)]
        assert await eventually(lambda: warnings(engine, sid)) == [f"the observer 'watcher' is not armed: {reason}"]
        assert await observers_of(engine, sid) == []
        assert seen[0].grant == frozenset()  # the observed agent's real grant: nothing added


async def test_a_rule_observer_needs_no_spawn_grant(open_engine: OpenEngine, scripted: Scripted) -> None:
    async with open_engine(role("coder", replying(scripted, "m8"), observer="loop-guard")) as engine:
        sid = await two_turns(engine, "coder")
        assert await eventually(lambda: states(engine, sid)) == [("armed", "rule observer")]


@pytest.mark.parametrize(
    ("observers", "reason"),
    [
        ({"deny": ("agent_task",)}, "agent_task is denied by [observers] deny, so no observer is armed"),
        ({"deny": ("agent_task(watcher)",)}, "agent_task(watcher) is denied by [observers] deny"),
        ({"allowed_types": ("reviewer",)}, "'watcher' is not in [observers] allowed_types (reviewer)"),
    ],
)
async def test_the_projects_deny_rules_and_allowed_types_keep_an_observer_unarmed(
    open_engine: OpenEngine, scripted: Scripted, observers: dict[str, object], reason: str
) -> None:
    model = replying(scripted, "m9-" + str(len(reason)))
    async with open_engine(
        role("coder", model, observer="watcher", grant=("spawn",)), role("watcher", model)
    ) as engine:
        engine.config = engine.config.model_copy(
            update={"observers": engine.config.observers.model_copy(update=observers)}
        )
        sid = await two_turns(engine, "coder")
        expected = f"deny by policy 'observers config': {reason}"
        assert await eventually(lambda: states(engine, sid)) == [("denied", expected)]
        assert await warnings(engine, sid) == [f"the observer 'watcher' is not armed: {expected}"]
        assert await observers_of(engine, sid) == []


async def test_a_config_change_stops_delivery_before_the_next_batch(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    model = replying(scripted, "m10")
    async with open_engine(
        role("coder", model, observer="watcher", grant=("spawn",)), role("watcher", model)
    ) as engine:
        session = await engine.create("coder", source="chat")
        await engine.enqueue(session.id, "one")
        await engine.wait(session.id, 10)
        (observer,) = await eventually(lambda: observers_of(engine, session.id))
        await eventually(lambda: _observer_turns(engine, observer.id, 1))
        engine.config = engine.config.model_copy(
            update={"observers": engine.config.observers.model_copy(update={"deny": ("agent_task(watcher)",)})}
        )
        await engine.enqueue(session.id, "two")
        await engine.wait(session.id, 10)
        found = await eventually(lambda: _denied(engine, session.id))
        assert found == "deny: agent_task(watcher) is denied by [observers] deny"
        await engine.wait(observer.id, 5)
        assert await _observer_turns(engine, observer.id, 2) is False


async def _observer_turns(engine: object, session_id: str, count: int) -> bool:
    from tests.watchers.support import events

    return len(await events(engine, session_id, "turn.ended")) >= count  # type: ignore[arg-type]


async def _denied(engine: object, session_id: str) -> str | None:
    found = await states(engine, session_id)  # type: ignore[arg-type]
    return next((reason for state, reason in found if state == "denied"), None)


def test_agents_check_warns_about_a_model_observer_without_the_spawn_grant(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "coder.md").write_text("---\nmodel: openai-chat:m\nobserver: reviewer\n---\nCode.")
    (agents / "lead.md").write_text("---\nmodel: openai-chat:m\ngrant: [spawn]\nobserver: reviewer\n---\nLead.")
    (agents / "guarded.md").write_text("---\nmodel: openai-chat:m\nobserver: loop-guard\n---\nWork.")
    (agents / "reviewer.md").write_text("---\nmodel: openai-chat:m\n---\nReview.")
    done = CliRunner().invoke(cli, ["agents", "check", "--dir", str(agents)])
    assert done.exit_code == 0, done.output
    flat = " ".join(done.output.split())
    assert (
        "coder.md: warning: observer: 'reviewer' is a model observer, armed only for an agent that may spawn one; "
        "add `grant: [spawn]` or 'coder' runs unobserved"
    ) in flat
    assert "lead.md" not in flat and "guarded.md" not in flat


def test_agents_check_says_an_observer_types_own_observer_does_not_unobserve_the_agent(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "coder.md").write_text("---\nmodel: openai-chat:m\ngrant: [spawn]\nobserver: critic\n---\nCode.")
    (agents / "critic.md").write_text("---\nmodel: openai-chat:m\nobserver: loop-guard\n---\nCritique.")
    done = CliRunner().invoke(cli, ["agents", "check", "--dir", str(agents)])
    assert done.exit_code == 0, done.output
    flat = " ".join(done.output.split())
    assert (
        "coder.md: warning: observer: 'critic' has an observer of its own ('loop-guard'), which a 'critic' session "
        "observing 'coder' ignores (observers are not chained): 'coder' is observed by 'critic', and 'loop-guard' "
        "watches only 'critic' sessions that observe nothing"
    ) in flat
    assert "runs unobserved" not in flat


async def test_a_pairing_left_armed_is_retired_once_its_role_names_no_observer(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    model = replying(scripted, "m11")
    observed, watcher = role("coder", model, observer="watcher", grant=("spawn",)), role("watcher", model)
    async with open_engine(observed, watcher) as engine:
        sid = await two_turns(engine, "coder")
        (observer,) = await eventually(lambda: observers_of(engine, sid))
        assert (await states(engine, sid))[-1][0] == "armed"
    reason = "runs unobserved: the role 'coder' names no observer"
    async with open_engine(role("coder", model, grant=("spawn",)), watcher) as engine:
        await engine.enqueue(sid, "three")
        await engine.wait(sid, 10)
        assert await eventually(lambda: _last_is(engine, sid, ("retired", reason)))
        shown = await describe(engine.store, await engine.store.get_session(sid))
        assert shown is not None and (shown["state"], shown["reason"]) == ("retired", reason)
    async with open_engine(observed, watcher) as engine:  # named again: the same observer goes on
        await engine.enqueue(sid, "four")
        await engine.wait(sid, 10)
        assert await eventually(lambda: _last_is(engine, sid, ("armed", "reattached to its observer")))
        assert [o.id for o in await observers_of(engine, sid)] == [observer.id]


async def _last_is(engine: object, session_id: str, expected: tuple[str, str]) -> bool:
    found = await states(engine, session_id)  # type: ignore[arg-type]
    return bool(found) and found[-1] == expected
