"""ObserverReport: every condition of its table, the report's path to the observed agent, the loop guard,
and the one-way rule."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agentwatch.events import Origin, ToolResult, UserMessage
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.runtime.policy import ToolRequest
from agentwatch.runtime.tools import Caller, function_tool
from agentwatch.store import RequestDraft, Write
from agentwatch.watchers import describe, observer_agents
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


async def test_a_report_reaches_the_observed_agents_next_turn_and_its_history(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    seen: list[str | None] = []

    def coder(ctx: Any) -> Any:
        seen.append(ctx.prompt)
        return Reply("ok")

    model = scripted("coder", ScriptedModel(function=coder))
    watcher = scripted("reviewer", reporting("You skipped the tests."))
    async with open_engine(
        role("coder", model, observer="reviewer", grant=("spawn",)), role("reviewer", watcher)
    ) as engine:
        session = await engine.create("coder", source="chat")
        await engine.enqueue(session.id, "write the parser")
        await eventually(lambda: _turns(engine, session.id, 2))
        # turn 2 (the report alone) gets a digest too, and its report is held by the loop guard
        await eventually(lambda: _reports_count(engine, session.id, 2))
        assert await reports(engine, session.id) == ["You skipped the tests."] * 2
        (observer,) = await observers_of(engine, session.id)
        messages = [e.payload for e in await events(engine, session.id, "message.user")]
        report = messages[1]
        assert isinstance(report, UserMessage) and report.meta
        assert report.origin == Origin(kind="observer", ref="observer:reviewer")
        assert report.text.endswith("You skipped the tests.") and seen[1] == report.text
        described = await describe(engine.store, await engine.store.get_session(session.id))
        assert described is not None
        assert (described["observerType"], described["observerSessionId"], described["state"]) == (
            "reviewer",
            observer.id,
            "armed",
        )
        assert [(r["report"], r["delivery"]) for r in described["reports"]] == [
            ("You skipped the tests.", "read"),
            ("You skipped the tests.", "queued"),
        ]
        assert (observer.source, observer.parent_id, observer.origin) == (
            "observer",
            session.id,
            Origin(kind="observer", ref=session.id),
        )


async def _turns(engine: Any, session_id: str, count: int) -> bool:
    return len(await events(engine, session_id, "turn.ended")) >= count


async def test_reports_cannot_feed_each_other_forever(open_engine: OpenEngine, scripted: Scripted) -> None:
    model = scripted("chatty", ScriptedModel(function=lambda ctx: Reply("noted")))
    watcher = scripted("nagger", reporting("Again!"))
    async with open_engine(role("chat", model, observer="nagger", grant=("spawn",)), role("nagger", watcher)) as engine:
        session = await engine.create("chat", source="chat")
        await engine.enqueue(session.id, "hi")
        (observer,) = await eventually(lambda: observers_of(engine, session.id))
        # turn 1 (the person) -> report -> turn 2 (the report alone) -> digest -> report queued, starting no turn
        held = await eventually(lambda: _held(engine, observer.id))
        assert held == [
            f"Report queued for {session.name!r}; its last turn was started by observer reports alone, so this one "
            "starts none: it reads it at the next turn it is given."
        ]
        await asyncio.sleep(0.3)
        await engine.wait(session.id, 5)
        assert len(await events(engine, session.id, "turn.ended")) == 2
        assert await reports(engine, session.id) == ["Again!", "Again!"]
        assert (await engine.store.get_session(session.id)).pending_reports == 1
        await engine.enqueue(session.id, "and now?")  # other input: the held report is read with it
        await eventually(lambda: _turns(engine, session.id, 3))
        # Turn 3's own messages: its report may start a fourth turn by the time they are read.
        third_turn = (await events(engine, session.id, "turn.started"))[2].turn_id
        third = [e.payload for e in await events(engine, session.id, "message.user") if e.turn_id == third_turn]
        assert [m.text.endswith("Again!") for m in third if isinstance(m, UserMessage)] == [True, False]
        await eventually(lambda: _reports_count(engine, session.id, 3))


async def _held(engine: Any, session_id: str) -> list[str]:
    results = [e.payload for e in await events(engine, session_id, "tool.result")]
    outputs = [str(r.output) for r in results if isinstance(r, ToolResult) and r.status == "ok"]
    found = []
    for output in outputs:
        if "starts none" in output:
            found.append(json.loads(output)["message"])
    return found


async def _reports_count(engine: Any, session_id: str, count: int) -> bool:
    return len(await reports(engine, session_id)) >= count


async def test_the_report_tool_takes_one_required_text_and_no_recipient(open_engine: OpenEngine) -> None:
    async with open_engine() as engine:
        tool = engine.tools["ObserverReport"]
    assert tool.parameters == {
        "type": "object",
        "properties": {
            "report": {
                "type": "string",
                "minLength": 1,
                "title": "Report",
                "description": "What the observed agent should know: short and concrete.",
            }
        },
        "required": ["report"],
        "additionalProperties": False,
    }
    assert (tool.agents_only, tool.grant, tool.requires_approval, tool.asks_user) == (True, None, False, False)


async def test_the_report_conditions_table(open_engine: OpenEngine, scripted: Scripted) -> None:
    model = scripted("task", ScriptedModel(function=lambda ctx: Reply("done")))
    quiet = scripted("quiet", ScriptedModel(function=lambda ctx: Reply("nothing to report")))
    async with open_engine(role("task", model, observer="quiet", grant=("spawn",)), role("quiet", quiet)) as engine:
        call = engine.call_tool
        hub = observer_agents(engine)
        # from outside any agent
        outside = await call("ObserverReport", {"report": "x"})
        assert outside["error"]["code"] == "not_delivered" and "outside any agent" in outside["error"]["message"]
        # from a session that is no observer
        snapshot = await engine.task("task", "go", timeout=10)
        observed_id = snapshot["agentId"]
        plain = await call("ObserverReport", {"report": "x"}, caller=Caller(session_id=observed_id))
        assert "only available to an observer agent" in plain["error"]["message"]
        # blank report
        (observer,) = await eventually(lambda: observers_of(engine, observed_id))
        as_observer = Caller(session_id=observer.id)
        blank = await call("ObserverReport", {"report": "  "}, caller=as_observer)
        assert blank["error"]["code"] == "invalid_argument"
        # the observed task has ended (completed): it still takes input, so the report waits for its next turn
        await eventually(lambda: _quiet(engine, observer.id))
        ended = await call("ObserverReport", {"report": "late"}, caller=as_observer)
        observed_name = (await engine.store.get_session(observed_id)).name
        assert ended["message"] == (
            f"Report queued for {observed_name!r}; its turn is over (completed), so it reads it at the next turn "
            "it is given."
        )
        pairing = hub.pairing(observed_id)
        assert pairing is not None and pairing.state == "armed"
        # deleted: refused, and the pairing retires
        await engine.delete(observed_id)
        deleted = await call("ObserverReport", {"report": "later"}, caller=as_observer)
        assert deleted["error"]["code"] == "not_delivered"
        assert "is not running (deleted)" in deleted["error"]["message"]
        retired = hub.pairing(observed_id)
        assert retired is None or retired.state == "retired"  # (and let go, once its delivery looked)
        refused = await call("ObserverReport", {"report": "late"}, caller=as_observer)
        assert "not armed" in refused["error"]["message"]
        # running observed agent: delivered
        running = await engine.create("task", source="chat")
        await engine.enqueue(running.id, "go")
        (second,) = await eventually(lambda: observers_of(engine, running.id))
        await engine.wait(running.id, 5)
        await eventually(lambda: _quiet(engine, second.id))
        ok = await call("ObserverReport", {"report": "look again"}, caller=Caller(session_id=second.id))
        assert ok == {
            "delivered": True,
            "observedId": running.id,
            "message": f"Report queued for {running.name!r}; it reads it at its next turn.",
        }
        # stopped pairing
        assert await hub.stop_observer(running.id, by="alice")
        stopped = await call("ObserverReport", {"report": "more"}, caller=Caller(session_id=second.id))
        assert "pairing is stopped (not armed)" in stopped["error"]["message"]
        # the boss: reports go to the main conversation
        boss = await engine.create("task", boss=True)
        await engine.enqueue(boss.id, "go")
        (third,) = await eventually(lambda: observers_of(engine, boss.id))
        await engine.wait(boss.id, 5)
        await eventually(lambda: _quiet(engine, third.id))
        main = await call("ObserverReport", {"report": "hello"}, caller=Caller(session_id=third.id))
        assert main["message"] == "Report queued for the main conversation; it reads it at its next turn."


async def test_deleting_an_idle_observed_agent_retires_its_pairing(open_engine: OpenEngine, scripted: Scripted) -> None:
    """Once: a deletion between turns ends no turn, so nothing looked whether the observed agent was gone; its
    pairing stayed `armed` (and `agent_get` showed an observer at work) until the observer happened to report."""
    model = scripted("deleted-idle", ScriptedModel(function=lambda ctx: Reply("done")))
    quiet = scripted("deleted-idle-watcher", ScriptedModel(function=lambda ctx: Reply("nothing to report")))
    async with open_engine(role("chat", model, observer="quiet", grant=("spawn",)), role("quiet", quiet)) as engine:
        session = await engine.create("chat", source="chat")
        await engine.enqueue(session.id, "hi")
        (observer,) = await eventually(lambda: observers_of(engine, session.id))
        await eventually(lambda: _quiet(engine, observer.id))
        assert await _state_is(engine, session.id, "armed")
        await engine.delete(session.id)
        hub = observer_agents(engine)
        await eventually(lambda: _let_go(hub, session.id))  # retired, and let go: a deleted agent never runs again
        deleted = await engine.store.get_session(session.id)
        described = await describe(engine.store, deleted)
        assert described is not None and (described["state"], described["reason"]) == (
            "retired",
            "the observed agent was deleted",
        )
        # Not recorded as an event: the notice of its deletion stays a deleted agent's last one (its stream ends
        # with it, and a reconnect after it is told nothing more comes).
        last = (await engine.store.read_events_backward(session.id, limit=1))[0]
        assert last.type == "runtime.info" and last.payload.source == "deletion"


async def _let_go(hub: Any, session_id: str) -> bool:
    return hub.pairing(session_id) is None


async def _quiet(engine: Engine, session_id: str) -> bool:
    session = await engine.store.get_session(session_id)
    return session.status == "idle" and session.last_seq > 0


async def _state_is(engine: Any, session_id: str, state: str) -> bool:
    found = await states(engine, session_id)
    return bool(found) and found[-1][0] == state


async def test_messages_run_one_way(open_engine: OpenEngine, scripted: Scripted) -> None:
    model = scripted("one-way", ScriptedModel(function=lambda ctx: Reply("ok")))
    quiet = scripted("silent", ScriptedModel(function=lambda ctx: Reply("nothing")))
    lead = role("lead", model, observer="silent", tools=("agent_enqueue", "agent_task"), grant=("spawn",))
    async with open_engine(
        lead, role("silent", quiet, tools=("agent_enqueue", "ask_user"), grant=("spawn",))
    ) as engine:
        session = await engine.create("lead", source="chat")
        await engine.enqueue(session.id, "go")
        (observer,) = await eventually(lambda: observers_of(engine, session.id))
        to_observer = await engine.policy.decide(
            ToolRequest(
                "agent_enqueue",
                {"agent_id": observer.id, "prompt": "hi"},
                session_id=session.id,
                role="lead",
                grant=frozenset({"spawn"}),
            )
        )
        assert to_observer.decision == "deny" and "background observer and takes no messages" in str(to_observer.reason)
        from_observer = await engine.policy.decide(
            ToolRequest(
                "agent_enqueue",
                {"agent_id": session.id, "prompt": "hi"},
                session_id=observer.id,
                role="silent",
                grant=frozenset({"spawn"}),
            )
        )
        assert from_observer.decision == "deny" and "only through ObserverReport" in str(from_observer.reason)
        observer = await engine.store.get_session(observer.id)
        definition = engine.roster.get("silent")
        assert engine.tools_for(observer, definition) == ("ObserverReport",)
        assert engine.tools_for(session, engine.roster.get("lead")) == ("agent_enqueue", "agent_task")


async def test_only_a_person_acts_on_an_observer_and_an_observer_acts_on_no_agent(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    def probe(question: str) -> str:
        return f"probed {question}"

    def lead_script(ctx: Any) -> Any:
        words = (ctx.prompt or "").split()
        if words and words[0] == "stop" and not ctx.tool_results:
            return CallTool("agent_stop", {"id": words[1]})  # the agent tries to silence its observer
        return Reply(f"results: {[r.output for r in ctx.tool_results]}")

    def watcher_script(ctx: Any) -> Any:
        return Reply("nothing")

    acting = ("agent_stop", "agent_delete", "agent_take_over", "agent_hand_back", "agent_answer", "agent_escalate")
    lead_model = scripted("acting-lead", ScriptedModel(function=lead_script))
    lead = role("lead", lead_model, tools=acting, grant=("spawn",), observer="watcher")
    watcher = role(
        "watcher",
        scripted("acting-watcher", ScriptedModel(function=watcher_script)),
        tools=("probe", *acting),
        grant=("spawn",),
        approval_tools=("probe",),
    )
    async with open_engine(lead, watcher, tools=[function_tool(probe)]) as engine:
        session = await engine.create("lead", source="chat")
        await engine.enqueue(session.id, "go")
        await engine.wait(session.id, 10)
        (observer,) = await eventually(lambda: observers_of(engine, session.id))
        # An observer opens no request itself (it is given no tool that waits on a person), but one may wait on
        # it all the same (a tool server's authorization): only a person answers it.
        opening = RequestDraft(kind="approval", summary="approve probe", waits_on="person")
        await engine.store.write(Write(observer.id, requests_open=[opening]))
        (request,) = await engine.store.list_requests(session_id=observer.id, limit=10)

        async def verdict(tool: str, arguments: dict[str, Any], caller: str | None) -> tuple[str, str]:
            asked = ToolRequest(tool, arguments, session_id=caller, role="lead", grant=frozenset({"spawn"}))
            found = await engine.policy.decide(asked)
            return found.decision, str(found.reason)

        for tool in ("agent_stop", "agent_delete", "agent_take_over", "agent_hand_back"):
            decision, reason = await verdict(tool, {"id": observer.id}, session.id)
            assert decision == "deny" and "only a person acts on it" in reason, tool
            decision, reason = await verdict(tool, {"id": session.id}, observer.id)
            assert decision == "deny" and "only through ObserverReport" in reason, tool
            assert (await verdict(tool, {"id": observer.id}, None))[0] == "allow", tool  # a person may
        for tool in ("agent_answer", "agent_escalate"):
            decision, reason = await verdict(tool, {"hitlId": request.id, "answer": True}, session.id)
            assert decision == "deny" and "only a person acts on it" in reason, tool
        definition = engine.roster.get("watcher")
        observer = await engine.store.get_session(observer.id)
        assert engine.tools_for(observer, definition) == ("probe", "ObserverReport")

        await engine.enqueue(session.id, f"stop {observer.id}")  # for real, from the agent's own turn
        await engine.wait(session.id, 10)
        (stopping,) = [
            e.payload
            for e in await engine.store.read_events(session.id, limit=1000)
            if isinstance(e.payload, ToolResult)
        ]
        assert stopping.status == "error" and "only a person acts on it" in str(stopping.output)
        assert (await describe(engine.store, await engine.store.get_session(session.id)) or {})["state"] == "armed"
        assert (await engine.store.get_session(observer.id)).status != "cancelled"


async def test_a_report_during_a_turn_that_reports_alone_started_is_answered_at_once_and_kept(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    holding, release = asyncio.Event(), asyncio.Event()

    async def hold() -> str:
        """Wait until the test lets go."""
        holding.set()
        await asyncio.wait_for(release.wait(), 10)
        return "let go"

    def coder(ctx: Any) -> Any:
        if (ctx.prompt or "").endswith("first") and not ctx.tool_results:
            return CallTool("hold", {})  # the turn the first report alone started, kept running
        return Reply("ok")

    quiet = scripted("guard-quiet", ScriptedModel(function=lambda ctx: Reply("nothing to report")))
    model = scripted("guard-coder", ScriptedModel(function=coder))
    async with open_engine(
        role("coder", model, tools=("hold",), observer="quiet", grant=("spawn",)),
        role("quiet", quiet),
        tools=[function_tool(hold)],
    ) as engine:
        session = await engine.create("coder", source="chat")
        await engine.enqueue(session.id, "go")
        await engine.wait(session.id, 10)
        (observer,) = await eventually(lambda: observers_of(engine, session.id))
        await eventually(lambda: _quiet(engine, observer.id))
        as_observer = Caller(session_id=observer.id)
        first = await engine.call_tool("ObserverReport", {"report": "first"}, caller=as_observer)
        assert first["message"] == f"Report queued for {session.name!r}; it reads it at its next turn."
        await asyncio.wait_for(holding.wait(), 10)  # turn 2, started by the report alone, is running
        second = await engine.call_tool("ObserverReport", {"report": "second"}, caller=as_observer)
        # answered while that turn still runs (it waits on `release`, which is not set yet): nothing waited
        assert not release.is_set() and (await engine.store.get_session(session.id)).status == "running"
        assert second == {
            "delivered": True,
            "observedId": session.id,
            "message": f"Report queued for {session.name!r}; its last turn was started by observer reports alone, "
            "so this one starts none: it reads it at the next turn it is given.",
        }
        assert await reports(engine, session.id) == ["first", "second"]  # recorded at once
        release.set()
        await eventually(lambda: _turns(engine, session.id, 2))
        await asyncio.sleep(0.3)  # a third turn would have started by now
        after = await engine.store.get_session(session.id)
        assert (after.status, len(await events(engine, session.id, "turn.ended")), after.pending_reports) == (
            "idle",
            2,
            1,
        )
        await engine.enqueue(session.id, "and now?")  # other input: the kept report is read with it
        await eventually(lambda: _turns(engine, session.id, 3))
        third = [e.payload for e in await events(engine, session.id, "message.user")][-2:]
        assert [(m.text.endswith("second"), m.meta) for m in third if isinstance(m, UserMessage)] == [
            (True, True),
            (False, False),
        ]
        assert (await engine.store.get_session(session.id)).pending_inputs == 0


async def test_a_report_to_a_working_task_is_read_in_the_turn_that_follows(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    holding, release = asyncio.Event(), asyncio.Event()
    prompts: list[str | None] = []

    async def hold() -> str:
        """Wait until the test lets go."""
        holding.set()
        await asyncio.wait_for(release.wait(), 10)
        return "let go"

    def coder(ctx: Any) -> Any:
        if not ctx.tool_results:
            prompts.append(ctx.prompt)
        if ctx.prompt == "go" and not ctx.tool_results:
            return CallTool("hold", {})
        return Reply("done")

    quiet = scripted("task-quiet", ScriptedModel(function=lambda ctx: Reply("nothing to report")))
    model = scripted("task-coder", ScriptedModel(function=coder))
    async with open_engine(
        role("coder", model, tools=("hold",), observer="quiet", grant=("spawn",)),
        role("quiet", quiet),
        tools=[function_tool(hold)],
    ) as engine:
        session = await engine.create("coder", source="api")
        await engine.enqueue(session.id, "go")
        await asyncio.wait_for(holding.wait(), 10)
        (observer,) = await eventually(lambda: observers_of(engine, session.id))
        await eventually(lambda: _armed(engine, session.id))
        answer = await engine.call_tool(
            "ObserverReport", {"report": "mind the tests"}, caller=Caller(session_id=observer.id)
        )
        assert answer["message"] == f"Report queued for {session.name!r}; it reads it at its next turn."
        release.set()
        await eventually(lambda: _turns(engine, session.id, 2))
        await engine.wait(session.id, 5)
        assert len(prompts) == 2 and (prompts[1] or "").endswith("mind the tests")
        after = await engine.store.get_session(session.id)
        assert (after.status, after.pending_inputs) == ("completed", 0)


async def _armed(engine: Engine, session_id: str) -> bool:
    pairing = observer_agents(engine).pairing(session_id)
    return pairing is not None and pairing.state == "armed"


async def test_a_kept_report_survives_a_restart_and_starts_no_turn_there(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    prompts: list[str | None] = []

    def coder(ctx: Any) -> Any:
        if not ctx.tool_results:
            prompts.append(ctx.prompt)
        return Reply("done")

    quiet = scripted("kept-quiet", ScriptedModel(function=lambda ctx: Reply("nothing to report")))
    model = scripted("kept-coder", ScriptedModel(function=coder))
    definitions = (role("coder", model, observer="quiet", grant=("spawn",)), role("quiet", quiet))
    async with open_engine(*definitions) as engine:
        snapshot = await engine.task("coder", "go", timeout=10)
        observed_id = str(snapshot["agentId"])
        (observer,) = await eventually(lambda: observers_of(engine, observed_id))
        await eventually(lambda: _quiet(engine, observer.id))
        kept = await engine.call_tool("ObserverReport", {"report": "kept"}, caller=Caller(session_id=observer.id))
        assert "its turn is over (completed)" in kept["message"]
    async with open_engine(*definitions) as engine:
        await asyncio.sleep(0.3)  # a turn the restart started would be running by now
        session = await engine.store.get_session(observed_id)
        assert (session.status, session.pending_reports, len(prompts)) == ("completed", 1, 1)
        await engine.enqueue(observed_id, "next")
        await eventually(lambda: _turns(engine, observed_id, 2))
        assert (prompts[1] or "").endswith("next") and "kept" in (prompts[1] or "")
        assert (await engine.store.get_session(observed_id)).inbox_size == 0


async def test_an_observer_whose_turn_runs_in_another_engine_still_reports(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once: an observer's turn that ran in an engine not holding the agent it watches (a deploy moved the
    observer's turn; the watched agent was idle, held by none) had its report refused as "not armed" and lost,
    while `agent_get` said the pairing was armed."""
    coder = scripted("coder-moved", ScriptedModel(function=lambda ctx: Reply("ok")))
    watcher = scripted("reviewer-moved", reporting("Check the migration."))
    definitions = (role("coder", coder, observer="reviewer", grant=("spawn",)), role("reviewer", watcher))
    async with open_engine(*definitions) as first:
        session = await first.create("coder")
        await first.enqueue(session.id, "migrate the table")
        await eventually(lambda: _reports_count(first, session.id, 1))
        (observer,) = await observers_of(first, session.id)
        await first.wait(observer.id, 10)  # (cut off, its turn would go on in `second`: its script reports again)
    async with open_engine(*definitions) as second:
        await second.enqueue(observer.id, "look at it again")  # a person asks the observer; its turn runs here
        await eventually(lambda: _reports_count(second, session.id, 2))
        answered = await eventually(lambda: _last_tool_result(second, observer.id))
        assert json.loads(answered)["delivered"] is True
        assert await reports(second, session.id) == ["Check the migration."] * 2


async def _last_tool_result(engine: Engine, session_id: str) -> str | None:
    results = [e.payload for e in await events(engine, session_id, "tool.result")]
    return results[-1].output if len(results) >= 2 and isinstance(results[-1], ToolResult) else None


async def test_an_observer_is_given_no_tool_that_waits_on_a_person(open_engine: OpenEngine, scripted: Scripted) -> None:
    """An observer holds no consent. Once `ask_user` alone was withheld: a tool its role lists among
    `approval_tools` (or one that always requires approval, or asks the user) was offered, and its call left the
    observer waiting on a person's approval."""

    def note(text: str) -> str:
        """Write a note."""
        return "noted"

    def probe(text: str) -> str:
        """Look closer."""
        return "probed"

    offered: list[tuple[str, ...]] = []

    def watcher(ctx: Any) -> Any:
        offered.append(ctx.tools)
        return Reply("nothing to report")

    coder = scripted("consent-coder", ScriptedModel(function=lambda ctx: Reply("done")))
    observer_model = scripted("consent-watcher", ScriptedModel(function=watcher))
    async with open_engine(
        role("coder", coder, observer="watcher", tools=("note",), approval_tools=("note",), grant=("spawn",)),
        role("watcher", observer_model, tools=("note", "probe"), approval_tools=("note",)),
        tools=[function_tool(note), function_tool(probe, requires_approval=True)],
    ) as engine:
        session = await engine.create("coder", source="chat")
        await engine.enqueue(session.id, "one")

        async def asked() -> list[tuple[str, ...]]:
            return offered

        await eventually(asked)  # (the observer's model was asked, about the first digest)
        definition = engine.roster.get("coder")
        assert "note" in engine.tools_for(session, definition)  # (the observed agent keeps it, approval and all)
    assert offered and all(tools == ("ObserverReport",) for tools in offered), offered
