"""A report reaches the observed agent whatever its kind: chat, task (`engine.task`), API-made and spawned
sessions; a finished task keeps its pairing armed and reads the report at its next turn, which the report does
not start; a parent still working hears about its child's report."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from agentwatch.events import Origin, UserMessage
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.runtime.tools import function_tool
from agentwatch.watchers import observer_agents
from tests.watchers.support import (
    OpenEngine,
    Scripted,
    events,
    eventually,
    observers_of,
    reporting,
    reports,
    role,
    states,
)

REPORT = "You skipped the tests."


async def _turns(engine: Engine, session_id: str) -> int:
    return len(await events(engine, session_id, "turn.ended"))


async def _user_messages(engine: Engine, session_id: str) -> list[UserMessage]:
    found = [e.payload for e in await events(engine, session_id, "message.user")]
    return [m for m in found if isinstance(m, UserMessage)]


@pytest.mark.parametrize("kind", ["task", "api", "chat"])
async def test_a_report_after_the_turn_reaches_every_kind_of_session(
    open_engine: OpenEngine, scripted: Scripted, kind: str
) -> None:
    model = scripted("coder", ScriptedModel(function=lambda ctx: Reply("done")))
    watcher = scripted("reviewer", reporting(REPORT))
    coder = role("coder", model, observer="reviewer", grant=("spawn",))
    async with open_engine(coder, role("reviewer", watcher)) as engine:
        if kind == "task":
            session_id = str((await engine.task("coder", "write the parser", timeout=10))["agentId"])
        else:
            session = await engine.create("coder", source="chat" if kind == "chat" else "api")
            await engine.enqueue(session.id, "write the parser")
            session_id = session.id
        # (a chat's second turn, which the report starts, gets its own digest and report, kept by the loop guard)
        assert (await eventually(lambda: reports(engine, session_id)))[0] == REPORT
        (observer,) = await observers_of(engine, session_id)
        results = [e.payload for e in await eventually(lambda: events(engine, observer.id, "tool.result"))]
        assert [getattr(r, "status", None) for r in results][:1] == ["ok"]
        pairing = observer_agents(engine).pairing(session_id)
        assert pairing is not None and pairing.state == "armed"
        if kind == "chat":  # an idle chat takes the report at once, in a turn of its own
            await eventually(lambda: _count_is(engine, session_id, 2))
        else:  # a finished task takes it at its next turn, which the report does not start
            await asyncio.sleep(0.3)
            session = await engine.store.get_session(session_id)
            assert (session.status, await _turns(engine, session_id), session.pending_reports) == ("completed", 1, 1)
            output = str(results[0].output)  # type: ignore[union-attr]
            assert "its turn is over (completed), so it reads it at the next turn it is given" in output
            await engine.enqueue(session_id, "now fix the tests")
            await eventually(lambda: _count_is(engine, session_id, 2))
        second = [m for m in await _user_messages(engine, session_id) if m.meta]
        assert len(second) >= 1 and second[0].text.endswith(REPORT)
        assert second[0].origin == Origin(kind="observer", ref="observer:reviewer")
        assert [s for s, _ in await states(engine, session_id)] == ["armed"]


async def _reports_are(engine: Engine, session_id: str, expected: list[str]) -> bool:
    return await reports(engine, session_id) == expected


async def _count_is(engine: Engine, session_id: str, count: int) -> bool:
    return await _turns(engine, session_id) >= count


async def test_a_spawned_agents_report_also_reaches_its_working_parent(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    reported = asyncio.Event()
    child_ids: list[str] = []

    async def hold() -> str:
        """Wait a little."""
        await asyncio.wait_for(reported.wait(), 10)
        return "held"

    def lead_script(ctx: Any) -> Any:
        if ctx.request_index == 0:
            return CallTool("agent_task", {"role": "coder", "prompt": "write it", "timeoutMs": 10_000})
        if ctx.request_index == 1:
            return CallTool("hold", {})
        return Reply("lead done")

    lead_model = scripted("lead", ScriptedModel(function=lead_script))
    lead = role("lead", lead_model, tools=("agent_task", "hold"), grant=("spawn",))
    coder_model = scripted("coder", ScriptedModel(function=lambda ctx: Reply("done")))
    coder = role("coder", coder_model, observer="reviewer", grant=("spawn",))
    watcher = role("reviewer", scripted("reviewer", reporting(REPORT)))
    async with open_engine(lead, coder, watcher, tools=[function_tool(hold)]) as engine:
        parent = await engine.create("lead", source="api")
        await engine.enqueue(parent.id, "get it written")

        async def child_reported() -> bool:
            children = [s for s in (await _children(engine, parent.id)) if not s.is_observer]
            if children and await reports(engine, children[0].id):
                child_ids.append(children[0].id)
                return True
            return False

        await eventually(child_reported)
        reported.set()
        await eventually(lambda: _count_is(engine, parent.id, 2))
        child_id = child_ids[0]
        about = [m for m in await _user_messages(engine, parent.id) if m.meta]
        assert len(about) == 1
        assert about[0].origin == Origin(kind="observer", ref=f"observer:reviewer@{child_id}")
        assert "about your sub-agent" in about[0].text and child_id in about[0].text
        assert about[0].text.endswith(REPORT)
        child = await engine.store.get_session(child_id)
        assert (child.status, child.pending_inputs, child.pending_reports) == ("completed", 0, 1)


async def _children(engine: Engine, parent_id: str) -> list[Any]:
    from agentwatch.store import SessionFilter

    page = await engine.store.list_sessions(SessionFilter(parent_id=parent_id), limit=100)
    return list(page.items)


async def test_a_stopped_observed_agent_refuses_reports_and_retires_its_pairing(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    started, slow = _slow_tool()

    def script(ctx: Any) -> Any:
        return CallTool("slow", {}) if not ctx.tool_results else Reply("done")

    quiet = scripted("quiet", ScriptedModel(function=lambda ctx: Reply("nothing")))
    coder_model = scripted("coder", ScriptedModel(function=script))
    coder = role("coder", coder_model, tools=("slow",), observer="quiet", grant=("spawn",))
    async with open_engine(coder, role("quiet", quiet), tools=[function_tool(slow)]) as engine:
        session = await engine.create("coder", source="api")
        await engine.enqueue(session.id, "go")
        await asyncio.wait_for(started.wait(), 10)
        (observer,) = await eventually(lambda: observers_of(engine, session.id))
        await eventually(lambda: _armed(engine, session.id))
        await engine.stop(session.id)
        await engine.wait(session.id, 5)
        refused = await engine.call_tool("ObserverReport", {"report": "x"}, caller=_caller(observer.id))
        assert refused["error"]["code"] == "not_delivered"
        assert "is not running (cancelled)" in refused["error"]["message"]
        again = await engine.call_tool("ObserverReport", {"report": "x"}, caller=_caller(observer.id))
        assert "pairing is retired (not armed)" in again["error"]["message"]
        assert await reports(engine, session.id) == []


@pytest.mark.parametrize("kind", ["boss", "chat"])
async def test_a_stopped_turn_of_the_main_conversation_keeps_its_pairing_and_takes_the_report(
    open_engine: OpenEngine, scripted: Scripted, kind: str
) -> None:
    started, slow = _slow_tool()

    def script(ctx: Any) -> Any:
        if ctx.prompt == "build" and not ctx.tool_results:
            return CallTool("slow", {})
        return Reply(f"answer to {ctx.prompt[:40]}")

    quiet = scripted("quiet", ScriptedModel(function=lambda ctx: Reply("nothing")))
    coder_model = scripted("coder", ScriptedModel(function=script))
    coder = role("coder", coder_model, tools=("slow",), observer="quiet", grant=("spawn",))
    async with open_engine(coder, role("quiet", quiet), tools=[function_tool(slow)]) as engine:
        session = await (engine.create("coder", boss=True) if kind == "boss" else engine.create("coder", source="chat"))
        await engine.enqueue(session.id, "build")
        await asyncio.wait_for(started.wait(), 10)
        (observer,) = await eventually(lambda: observers_of(engine, session.id))
        await eventually(lambda: _armed(engine, session.id))
        await engine.stop(session.id, by="alice")  # a person interrupts the turn: the agent lives on
        stopped, timed_out = await engine.wait(session.id, 5)
        assert (stopped.status, timed_out) == ("cancelled", False)
        reported = await engine.call_tool("ObserverReport", {"report": REPORT}, caller=_caller(observer.id))
        target = "the main conversation" if kind == "boss" else repr(session.name)
        assert reported.get("message") == (
            f"Report queued for {target}; its turn is over (cancelled), so it reads it at the next turn it is given."
        ), reported
        await asyncio.sleep(0.3)
        assert await _turns(engine, session.id) == 1  # the report does not undo the person's stop
        await eventually(lambda: _quiet_observer(engine, observer.id))
        assert [state for state, _ in await states(engine, session.id)] == ["armed"]
        await engine.enqueue(session.id, "go on")
        await engine.wait(session.id, 5)
        second = [m.text for m in await _user_messages(engine, session.id)][1:]
        assert [text.endswith(REPORT) for text in second] == [True, False]


def _slow_tool() -> tuple[asyncio.Event, Callable[[], Awaitable[str]]]:
    """A tool `slow` that takes half a minute, and the event it sets as it starts."""
    started = asyncio.Event()

    async def slow() -> str:
        """Take a long time."""
        started.set()
        await asyncio.sleep(30)
        return "never"

    return started, slow


async def _quiet_observer(engine: Engine, observer_id: str) -> bool:
    observer = await engine.store.get_session(observer_id)
    return observer.status == "idle" and observer.pending_inputs == 0


async def _armed(engine: Engine, session_id: str) -> bool:
    pairing = observer_agents(engine).pairing(session_id)
    return pairing is not None and pairing.state == "armed"


def _caller(session_id: str) -> Any:
    from agentwatch.runtime.tools import Caller

    return Caller(session_id=session_id)


def _end_guard(ctx: Any) -> str | None:
    """A rule observer that speaks after the turn, as budget-guard does."""
    ended = [item for item in ctx.items if item.kind == "turn_ended"]
    return "Your turn is over; here is what you missed." if ended else None


@pytest.mark.parametrize("kind", ["task", "spawned", "api", "chat"])
async def test_a_rule_observers_after_turn_report_reaches_every_kind_of_session(
    open_engine: OpenEngine, scripted: Scripted, kind: str
) -> None:
    from agentwatch.runtime.roster import AgentDefinition
    from agentwatch.watchers import ObserverAgents, RuleBook

    def lead_script(ctx: Any) -> Any:
        if (ctx.prompt or "").startswith("[agentwatch]"):  # its child's report, which it may get too
            return Reply("noted")
        if not ctx.tool_results:
            return CallTool("agent_task", {"role": "coder", "prompt": "write it", "timeoutMs": 10_000})
        return Reply("lead done")

    coder = role("coder", scripted(f"rule-coder-{kind}", ScriptedModel(function=lambda ctx: Reply("done"))))
    coder = coder.model_copy(update={"observer": "end-guard"})
    lead = role("lead", scripted(f"rule-lead-{kind}", ScriptedModel(function=lead_script)), tools=("agent_task",))
    lead = lead.model_copy(update={"grant": ("spawn",)})
    hub = ObserverAgents(rules=RuleBook({"end-guard": _end_guard}))
    async with open_engine(coder, lead, AgentDefinition(name="end-guard", kind="rule"), extensions=[hub]) as engine:
        if kind == "task":
            session_id = str((await engine.task("coder", "write it", timeout=10))["agentId"])
        elif kind == "spawned":
            parent = str((await engine.task("lead", "get it written", timeout=10))["agentId"])
            (child,) = [s for s in await _children(engine, parent) if not s.is_observer]
            session_id = child.id
        else:
            session = await engine.create("coder", source="chat" if kind == "chat" else "api")
            await engine.enqueue(session.id, "write it")
            session_id = session.id
        said = "Your turn is over; here is what you missed."
        assert (await eventually(lambda: reports(engine, session_id)))[0] == said
        pairing = hub.pairing(session_id)
        assert pairing is not None and pairing.state == "armed"
        if kind == "chat":  # the report starts turn 2, whose end is reported too: kept by the loop guard
            await eventually(lambda: _count_is(engine, session_id, 2))
            assert await eventually(lambda: _reports_are(engine, session_id, [said, said]))
            await asyncio.sleep(0.2)
            session = await engine.store.get_session(session_id)
            assert (await _turns(engine, session_id), session.pending_reports) == (2, 1)
        else:
            assert await reports(engine, session_id) == [said]
            await asyncio.sleep(0.2)
            session = await engine.store.get_session(session_id)
            assert (session.status, await _turns(engine, session_id), session.pending_reports) == ("completed", 1, 1)
            # The kept report starts no turn, so it keeps no wait going either.
            started = time.monotonic()
            waited = await engine.call_tool("agent_await", {"agentId": session_id, "timeoutMs": 5_000})
            assert (waited["status"], waited["timedOut"]) == ("completed", False)
            assert time.monotonic() - started < 2.5


async def test_a_report_that_races_a_re_arm_waits_for_it(open_engine: OpenEngine, scripted: Scripted) -> None:
    quiet = scripted("race-quiet", ScriptedModel(function=lambda ctx: Reply("nothing")))
    coder_model = scripted("race-coder", ScriptedModel(function=lambda ctx: Reply("done")))
    async with open_engine(
        role("coder", coder_model, observer="quiet", grant=("spawn",)), role("quiet", quiet)
    ) as engine:
        session = await engine.create("coder", source="api")
        await engine.enqueue(session.id, "go")
        (observer,) = await eventually(lambda: observers_of(engine, session.id))
        await eventually(lambda: _armed(engine, session.id))
        pairing = observer_agents(engine).pairing(session.id)
        assert pairing is not None

        async def re_arm() -> None:  # as `ObserverAgents.submit` re-arms a retired pairing
            await asyncio.sleep(0.3)
            pairing.state = "armed"

        pairing.state = None
        pairing.arming = asyncio.create_task(re_arm())
        answer = await engine.call_tool("ObserverReport", {"report": "mid-arm"}, caller=_caller(observer.id))
        assert answer.get("delivered") is True, answer
        assert await reports(engine, session.id) == ["mid-arm"]
