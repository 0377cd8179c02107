"""The engine end to end on a real SQLite store: sessions, turns, tools, requests, sub-agents, stops."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentwatch.errors import Conflict, DamagedRecord, NotFound, UserError
from agentwatch.events import (
    CompactionApplied,
    ConversationCleared,
    Event,
    Origin,
    RequestOpened,
    SubtaskEnded,
    SubtaskStarted,
    ToolResult,
    TurnEnded,
    TurnStarted,
    UserMessage,
)
from agentwatch.runtime import engine as engines
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.leases import Leases
from agentwatch.runtime.models import CallTool, Hang, Reply, ScriptedModel, Think
from agentwatch.runtime.policy import ToolRequest, Verdict
from agentwatch.runtime.thread_observer import EventCollector
from agentwatch.runtime.tools import function_tool
from agentwatch.store import SessionDraft
from tests.runtime.support import HeldTool, OpenEngine, Scripted, asking_child, lease_config, role, until
from tests.store.test_damaged import tamper


async def all_events(engine: Any, session_id: str) -> list[Event]:
    return await engine.store.read_events(session_id, limit=10_000)


def types_of(events: list[Event]) -> list[str]:
    return [e.type for e in events]


async def test_agent_task_runs_a_turn_to_done(open_engine: OpenEngine, scripted: Scripted) -> None:
    model = scripted("echo", ScriptedModel([Think("Short answer."), Reply("Hello there.")]))
    async with open_engine(role("greeter", model)) as engine:
        snapshot = await engine.call_tool("agent_task", {"role": "greeter", "prompt": "Say hello"})
        assert snapshot["status"] == "completed"
        assert snapshot["word"] == "done"
        assert snapshot["lastAssistantText"] == "Hello there."
        assert (snapshot["timedOut"], snapshot["deleted"]) == (False, False)
        events = await all_events(engine, snapshot["agentId"])
        assert types_of(events) == [
            "turn.started",
            "message.user",
            "completion.started",
            "thinking.completed",
            "message.assistant",
            "completion.finished",
            "turn.ended",
        ]
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert events[1].payload == UserMessage(text="Say hello", origin=Origin(kind="person"))  # not from a turn
        ended = events[-1].payload
        assert isinstance(ended, TurnEnded) and ended.outcome == "completed" and ended.usage.total_tokens > 0
        session = await engine.store.get_session(snapshot["agentId"])
        assert session.context_fill is not None and session.context_fill["state"] == "measured"
        assert session.origin == Origin(kind="person")  # started from outside a turn: by a person, as `run` does
        totals = await engine.store.usage_totals([session.id])
        assert totals[session.id].total_tokens == ended.usage.total_tokens


@pytest.mark.parametrize(
    ("column", "stored"), [("settings", "garbage"), ("context_fill", "{"), ("origin", '{"channel": 5}')]
)
async def test_an_agent_whose_row_is_damaged_can_be_deleted(
    open_engine: OpenEngine, url: str, column: str, stored: str
) -> None:
    """Once: deleting read the whole row first, so an agent with a damaged value could not be got rid of."""
    async with open_engine(store=url) as engine:
        alpha = await engine.store.create_session(SessionDraft(name="alpha", role="coder"))
        await engine.store.create_session(SessionDraft(name="beta", role="coder"))
        tamper(url, f"UPDATE sessions SET {column} = ? WHERE id = ?", [stored, alpha.id])
        with pytest.raises(DamagedRecord) as caught:  # (reads still say what is damaged, and how to get rid of it)
            await engine.store.get_session(alpha.id)
        assert caught.value.message.endswith(f"or delete the agent by its id (agent_delete {{id: {alpha.id!r}}})")
        assert [str(call) for call in caught.value.suggestions] == [f"agent_delete {{id: {alpha.id!r}}}"]

        deleted = await engine.call_tool("agent_delete", {"id": alpha.id})
        assert deleted.keys() == {"id", "deletedAt", "reapAt"} and deleted["id"] == alpha.id, deleted
        assert await engine.call_tool("agent_delete", {"id": alpha.id}) == deleted  # (deleted already: as it was)
        listed = await engine.call_tool("agent_list", {})
        assert [agent["name"] for agent in listed["agents"]] == ["beta"]


async def test_a_wait_that_a_deletion_ends_answers_deleted(open_engine: OpenEngine, scripted: Scripted) -> None:
    busy = HeldTool("dig")
    async with open_engine(busy.role("digger", scripted, "await-deleted"), tools=[busy.tool]) as engine:
        agent = await engine.create("digger")
        await engine.enqueue(agent.id, "dig")
        await asyncio.wait_for(busy.started.wait(), 10)
        waiting = asyncio.create_task(engine.call_tool("agent_await", {"agentId": agent.id, "timeoutMs": 10_000}))
        await asyncio.sleep(0.1)  # (the wait has begun)
        await engine.call_tool("agent_delete", {"id": agent.id})
        # The wait ends with the deletion, not at the next poll of other processes' changes (1 s later).
        snapshot = await asyncio.wait_for(waiting, 0.5)
        assert (snapshot["status"], snapshot["timedOut"], snapshot["deleted"]) == ("cancelled", False, True)

        # A paused agent stopped, another deleted: once each left who stopped it in the engine for good.
        asker = scripted(
            "await-deleted-asker", ScriptedModel(function=lambda ctx: CallTool("ask_user", {"question": "?"}))
        )
        async with open_engine(role("asker", asker, tools=("ask_user",))) as other:
            for end in (other.stop, other.delete):
                paused = await other.task("asker", "ask", timeout=10)
                await asyncio.sleep(0.2)  # (its turn loop lets go while it waits)
                await end(paused["agentId"])
                assert (await other.store.get_session(paused["agentId"])).status == "cancelled"
            assert other._stop_reasons == {}


async def test_every_event_an_observer_sees_is_already_in_the_store(
    open_engine: OpenEngine, scripted: Scripted, tmp_path: Path
) -> None:
    model = scripted(
        "tooling", ScriptedModel([CallTool("lookup", {"key": "a"}), Reply("Found it.")], chunk_delay=0.001)
    )

    class DurabilityCheck:
        def __init__(self) -> None:
            self.db = sqlite3.connect(tmp_path / "agentwatch.db")
            self.checked: list[tuple[str, bool]] = []

        def on_event(self, thread_id: str, event: Event) -> None:
            if event.durable:
                row = self.db.execute(
                    "SELECT 1 FROM events WHERE session_id = ? AND seq = ?", (thread_id, event.seq)
                ).fetchone()
                self.checked.append((event.type, row is not None))

        def on_subscribe(self, thread_id: str, request: object, snapshot: object) -> None:
            pass

    check = DurabilityCheck()

    def lookup(key: str) -> str:
        return f"value of {key}"

    async with open_engine(role("finder", model, tools=("lookup",)), tools=[lookup]) as engine:
        engine.start_with_observer(lambda _thread_id: check)
        await engine.task("finder", "find a")
    assert check.checked, "the observer saw no durable events"
    assert all(stored for _, stored in check.checked), check.checked


async def test_a_tool_runs_only_after_its_call_is_durable(open_engine: OpenEngine, scripted: Scripted) -> None:
    model = scripted("barrier", ScriptedModel([CallTool("probe", {}), Reply("done")]))
    seen: list[list[str]] = []
    engines: list[Any] = []

    async def probe() -> str:
        (engine,) = engines
        (session,) = (await engine.store.list_sessions(_all())).items
        seen.append(types_of(await all_events(engine, session.id)))
        return "probed"

    async with open_engine(role("prober", model, tools=("probe",)), tools=[probe]) as engine:
        engines.append(engine)
        await engine.task("prober", "probe it")
    assert seen == [["turn.started", "message.user", "completion.started", "completion.finished", "tool.call"]]


def _all() -> Any:
    from agentwatch.store import SessionFilter

    return SessionFilter()


async def test_a_tool_that_raises_gives_the_model_a_failed_result(open_engine: OpenEngine, scripted: Scripted) -> None:
    model = scripted("raiser", ScriptedModel([CallTool("explode", {}), Reply("It failed, moving on.")]))

    def explode() -> str:
        raise RuntimeError("disk on fire")

    async with open_engine(role("breaker", model, tools=("explode",)), tools=[explode]) as engine:
        snapshot = await engine.task("breaker", "try it")
        assert snapshot["status"] == "completed"
        events = await all_events(engine, snapshot["agentId"])
        (result,) = [e.payload for e in events if isinstance(e.payload, ToolResult)]
        assert result.status == "error" and "disk on fire" in result.output


async def test_ask_user_pauses_on_a_request_and_the_answer_continues_the_turn(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    def script(ctx: Any) -> Any:
        if not ctx.tool_results:
            return CallTool("ask_user", {"question": "Which colour?"})
        return Reply(f"You chose {ctx.tool_results[0].output}.")

    model = scripted("asker", ScriptedModel(function=script))
    async with open_engine(role("asker", model, tools=("ask_user",))) as engine:
        snapshot = await engine.task("asker", "pick a colour", timeout=10)
        assert (snapshot["status"], snapshot["word"]) == ("awaiting_input", "needs_you")
        hitl = snapshot["pendingHitl"]
        assert hitl["kind"] == "question" and hitl["questions"] == ["Which colour?"] and hitl["deliverAt"] is None
        session = await engine.store.get_session(snapshot["agentId"])
        assert session.pending_requests == 1
        answer = await engine.call_tool("agent_answer", {"hitlId": hitl["hitlId"], "answer": "green"})
        assert answer == {"hitlId": hitl["hitlId"], "agentId": session.id, "status": "resolved"}
        session, timed_out = await engine.wait(session.id, 10)
        assert (session.status, timed_out, session.last_text) == ("completed", False, "You chose green.")
        assert session.pending_requests == 0


async def test_an_answer_given_after_a_restart_continues_the_turn_in_the_new_engine(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    def script(ctx: Any) -> Any:
        if not ctx.tool_results:
            return CallTool("ask_user", {"question": "Proceed?"})
        return Reply(f"Answer was {ctx.tool_results[0].output}.")

    model = scripted("asker2", ScriptedModel(function=script))
    definition = role("asker", model, tools=("ask_user",))
    async with open_engine(definition) as engine:
        snapshot = await engine.task("asker", "go", timeout=10)
    async with open_engine(definition) as engine:
        await engine.answer(snapshot["pendingHitl"]["hitlId"], "yes")
        session, _ = await engine.wait(snapshot["agentId"], 10)
        assert (session.status, session.last_text) == ("completed", "Answer was yes.")


def _deleter(ran: list[str]) -> tuple[Callable[[str], str], Callable[[Any], Any]]:
    """A `delete_file` tool that records what it deleted in `ran`, and a script that calls it once on the
    prompt, then answers with its output."""

    def delete_file(path: str) -> str:
        ran.append(path)
        return f"deleted {path}"

    def script(ctx: Any) -> Any:
        if not ctx.tool_results:
            return CallTool("delete_file", {"path": ctx.prompt})
        return Reply(ctx.tool_results[0].output)

    return delete_file, script


async def test_approval_tools_run_only_when_approved(open_engine: OpenEngine, scripted: Scripted) -> None:
    ran: list[str] = []
    delete_file, script = _deleter(ran)
    model = scripted("deleter", ScriptedModel(function=script))
    definition = role("cleaner", model, tools=("delete_file",), approval_tools=("delete_file",))
    async with open_engine(definition, tools=[delete_file]) as engine:
        first = await engine.task("cleaner", "a.txt", timeout=10)
        second = await engine.task("cleaner", "b.txt", timeout=10)
        assert first["pendingHitl"]["kind"] == "approval" and ran == []
        await engine.answer(first["pendingHitl"]["hitlId"], True)
        await engine.answer(second["pendingHitl"]["hitlId"], {"approved": False, "message": "keep b"})
        done_a, _ = await engine.wait(first["agentId"], 10)
        _done_b, _ = await engine.wait(second["agentId"], 10)
        assert ran == ["a.txt"]
        assert done_a.last_text == "deleted a.txt"
        results = [e.payload for e in await all_events(engine, second["agentId"]) if isinstance(e.payload, ToolResult)]
        assert [(r.status, r.output) for r in results] == [("denied", "keep b")]


async def test_a_call_the_policies_refuse_is_refused_before_a_person_is_asked_to_approve_it(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once: the approval was asked first, and the policies decided only once a person had approved."""
    ran: list[str] = []
    delete_file, script = _deleter(ran)
    model = scripted("deleter-refused", ScriptedModel(function=script))
    definition = role("cleaner", model, tools=("delete_file",), approval_tools=("delete_file",))

    def keep_secrets(request: ToolRequest) -> Verdict | None:
        return Verdict("deny", "secrets stay") if request.input.get("path") == "secret.txt" else None

    async with open_engine(definition, tools=[delete_file], policies=[keep_secrets]) as engine:
        refused = await engine.task("cleaner", "secret.txt", timeout=10)
        assert (refused["status"], refused["pendingHitl"], ran) == ("completed", None, [])
        assert await engine.store.list_requests(session_id=refused["agentId"]) == []
        results = [e.payload for e in await all_events(engine, refused["agentId"]) if isinstance(e.payload, ToolResult)]
        assert [(r.status, r.output) for r in results] == [
            ("error", "ToolRefused: delete_file was not allowed (deny): secrets stay")
        ]
        allowed = await engine.task("cleaner", "a.txt", timeout=10)  # (one the policies allow is still asked)
        assert allowed["pendingHitl"]["kind"] == "approval" and ran == []
        await engine.answer(allowed["pendingHitl"]["hitlId"], True)
        await engine.wait(allowed["agentId"], 10)
        assert ran == ["a.txt"]


def _calls_then_reply(*calls: dict[str, Any], tool: str = "delete_file") -> Callable[[Any], Any]:
    """A script that calls `tool` with each of `calls` in turn (the next once the previous has a result), then
    replies with every result it got."""

    def script(ctx: Any) -> Any:
        done = [entry.text for entry in ctx.transcript if entry.kind == "tool_result"]
        if len(done) < len(calls):
            return CallTool(tool, calls[len(done)])
        return Reply(" | ".join(done))

    return script


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ({}, "path: Field required"),
        ({"path": ["a.txt"]}, "path: Input should be a valid string"),
        ({"path": "a.txt", "force": True}, "force: unknown argument"),
    ],
)
async def test_an_approval_tool_called_with_invalid_arguments_fails_at_once_and_nobody_is_asked(
    open_engine: OpenEngine, scripted: Scripted, bad: dict[str, Any], problem: str
) -> None:
    """Once: a person was asked to approve a call that could not run, and it failed only once approved."""
    ran: list[str] = []
    delete_file, _ = _deleter(ran)
    model = scripted("deleter-invalid", ScriptedModel(function=_calls_then_reply(bad, {"path": "a.txt"})))
    definition = role("cleaner", model, tools=("delete_file",), approval_tools=("delete_file",))
    async with open_engine(definition, tools=[delete_file]) as engine:
        # The invalid call fails back to the model as its arguments' error, and the turn goes on: the model
        # makes the call again, valid, and that one waits on a person.
        asked = await engine.task("cleaner", "clean", timeout=10)
        assert asked["pendingHitl"]["kind"] == "approval" and ran == []
        (request,) = await engine.store.list_requests(session_id=asked["agentId"])
        assert request.body == {"tool_name": "delete_file", "input": {"path": "a.txt"}}
        results = [e.payload for e in await all_events(engine, asked["agentId"]) if isinstance(e.payload, ToolResult)]
        ((status, output),) = [(r.status, r.output) for r in results]
        assert status == "error" and output.startswith("InvalidArgument: bad arguments for delete_file: ")
        assert problem in output
        await engine.answer(request.id, True)
        done, _ = await engine.wait(asked["agentId"], 10)
        assert ran == ["a.txt"]
        assert done.last_text == f"{output} | deleted a.txt"


async def test_a_built_in_approval_tool_called_with_invalid_arguments_fails_at_once(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    model = scripted("lister", ScriptedModel(function=_calls_then_reply({"limit": "many"}, tool="agent_list")))
    definition = role("lister", model, tools=("agent_list",), approval_tools=("agent_list",))
    async with open_engine(definition) as engine:
        snapshot = await engine.task("lister", "list", timeout=10)
        assert (snapshot["status"], snapshot["pendingHitl"]) == ("completed", None)
        assert await engine.store.list_requests(session_id=snapshot["agentId"]) == []
        assert snapshot["lastAssistantText"].startswith("InvalidArgument: bad arguments for agent_list: limit: ")


async def test_a_wait_goes_on_while_an_answered_request_waits_for_an_engine_to_take_it_up(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once: `wait` (and `agent_await`) returned at once for a turn paused on a request that was answered but
    not yet taken up by an engine (`awaiting_input`, word `working`): the agent had not settled."""
    ran: list[str] = []
    delete_file, script = _deleter(ran)
    model = scripted("deleter-taken-up", ScriptedModel(function=script))
    definition = role("cleaner", model, tools=("delete_file",), approval_tools=("delete_file",))
    async with open_engine(definition, tools=[delete_file]) as engine:
        paused = await engine.task("cleaner", "a.txt", timeout=10)
    async with open_engine(runs_turns=False, extensions=[]) as acting:
        await acting.answer(paused["pendingHitl"]["hitlId"], True)
        session, timed_out = await acting.wait(paused["agentId"], 0.3)
        assert (session.status, timed_out, ran) == ("awaiting_input", True, [])
        awaited = await acting.call_tool("agent_await", {"agentId": paused["agentId"], "timeoutMs": 300})
        assert (awaited["word"], awaited["timedOut"]) == ("working", True)
    async with open_engine(definition, tools=[delete_file]) as engine:
        session, timed_out = await engine.wait(paused["agentId"], 10)
        assert (session.status, timed_out, ran) == ("completed", False, ["a.txt"])


async def test_an_approval_answer_that_gives_no_verdict_is_refused_and_the_call_waits(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once: `{"approved": "false"}`, `{"approved": "no"}` and `[true]` approved the call (truthy values), and
    any other text denied it. An answer that is not a verdict is refused; the words yes and no are verdicts."""
    ran: list[str] = []
    delete_file, script = _deleter(ran)
    model = scripted("deleter-verdicts", ScriptedModel(function=script))
    definition = role("cleaner", model, tools=("delete_file",), approval_tools=("delete_file",))
    async with open_engine(definition, tools=[delete_file]) as engine:
        first = await engine.task("cleaner", "a.txt", timeout=10)
        hitl = first["pendingHitl"]["hitlId"]
        for no_verdict in ({"approved": "false"}, {"approved": "no"}, [True], "maybe", {"message": "hmm"}, None, 1):
            answer = await engine.call_tool("agent_answer", {"hitlId": hitl, "answer": no_verdict})
            assert answer["error"]["code"] == "invalid_argument", (no_verdict, answer)
            assert answer["error"]["details"]["fields"] == ["answer"]
        assert (await engine.store.get_request(hitl)).status == "pending" and ran == []
        assert "error" not in await engine.call_tool("agent_answer", {"hitlId": hitl, "answer": " No "})
        done, _ = await engine.wait(first["agentId"], 10)
        assert ran == [] and done.status == "completed"
        second = await engine.task("cleaner", "b.txt", timeout=10)
        assert "error" not in await engine.call_tool(
            "agent_answer", {"hitlId": second["pendingHitl"]["hitlId"], "answer": "yes"}
        )
        await engine.wait(second["agentId"], 10)
        assert ran == ["b.txt"]


async def test_a_sub_agent_records_its_parent_run_and_origin(open_engine: OpenEngine, scripted: Scripted) -> None:
    def boss(ctx: Any) -> Any:
        if not ctx.tool_results:
            return CallTool("agent_task", {"role": "helper", "prompt": "count to 3", "name": "counter"})
        return Reply("The helper is done.")

    boss_model = scripted("boss", ScriptedModel(function=boss))
    helper_model = scripted("helper", ScriptedModel(function=lambda ctx: Reply("1 2 3")))
    async with open_engine(
        role("lead", boss_model, tools=("agent_task",), grant=("spawn",)), role("helper", helper_model)
    ) as engine:
        lead = await engine.create("lead", run_id="run_test")
        await engine.enqueue(lead.id, "delegate")
        lead, _ = await engine.wait(lead.id, 10)
        assert lead.status == "completed"
        children = (await engine.store.list_sessions(_filter(parent_id=lead.id))).items
        assert len(children) == 1
        child = children[0]
        assert (child.name, child.role, child.parent_id, child.run_id, child.source) == (
            "counter",
            "helper",
            lead.id,
            "run_test",
            "task",
        )
        assert child.origin is not None and (child.origin.kind, child.origin.ref) == ("session", lead.id)
        assert child.last_text == "1 2 3"
        lead_events = [e.payload for e in await all_events(engine, lead.id)]
        assert next(p for p in lead_events if isinstance(p, SubtaskStarted)).child_session_id == child.id
        assert [p for p in lead_events if isinstance(p, SubtaskEnded)] == [
            SubtaskEnded(child_session_id=child.id, status="completed")
        ]
        totals = await engine.store.usage_totals([lead.id, child.id])
        assert totals[lead.id].total_tokens > 0 and totals[child.id].total_tokens > 0


def _filter(**fields: Any) -> Any:
    from agentwatch.store import SessionFilter

    return SessionFilter(**fields)


async def test_spawning_without_the_grant_is_refused_with_the_reason(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    def script(ctx: Any) -> Any:
        if not ctx.tool_results:
            return CallTool("agent_task", {"role": "helper", "prompt": "x"})
        return Reply(ctx.tool_results[0].output)

    model = scripted("nogrant", ScriptedModel(function=script))
    helper = scripted("helper2", ScriptedModel.replying("hi"))
    async with open_engine(role("plain", model, tools=("agent_task",)), role("helper", helper)) as engine:
        snapshot = await engine.task("plain", "spawn", timeout=10)
        assert "no 'spawn' grant" in snapshot["lastAssistantText"]
        assert (await engine.store.list_sessions(_filter(role=["helper"]))).items == []


async def test_stopping_a_turn_ends_it_cancelled_with_who_stopped_it(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    model = scripted("hanger", ScriptedModel([[Reply("Working on it"), Hang()]]))
    async with open_engine(role("slow", model)) as engine:
        session = await engine.create("slow")
        await engine.enqueue(session.id, "go")
        while (await engine.store.get_session(session.id)).status != "running":
            await asyncio.sleep(0.01)
        assert await engine.stop(session.id, by="alice") is True
        session = await engine.store.get_session(session.id)
        assert session.status == "cancelled"
        ended = (await all_events(engine, session.id))[-1].payload
        assert isinstance(ended, TurnEnded)
        assert (ended.outcome, ended.reason) == ("cancelled", "stopped by alice")
        assert await engine.stop(session.id) is False


async def test_a_shutdown_mid_turn_is_continued_by_the_next_engine_with_a_note(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    gate = asyncio.Event()

    async def slow_tool() -> str:
        await gate.wait()
        return "finished"

    def script(ctx: Any) -> Any:
        if ctx.request_index == 0:
            return CallTool("slow_tool", {})
        return Reply(f"Seen: {[r.status for r in ctx.tool_results]}")

    model = scripted("restarter", ScriptedModel(function=script))
    definition = role("worker", model, tools=("slow_tool",))
    async with open_engine(definition, tools=[slow_tool]) as engine:
        session = await engine.create("worker")
        await engine.enqueue(session.id, "work")
        while not [e for e in await all_events(engine, session.id) if e.type == "tool.call"]:
            await asyncio.sleep(0.01)
    async with open_engine(definition, tools=[slow_tool]) as engine:
        done, _ = await engine.wait(session.id, 10)
        assert done.status == "completed"
        assert done.last_text == "Seen: ['interrupted']"
        events = await all_events(engine, session.id)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        starts = [e.payload for e in events if isinstance(e.payload, TurnStarted)]
        assert [(s.trigger, s.attempt) for s in starts] == [("input", 1), ("continue", 2)]
        notes = [e.payload for e in events if isinstance(e.payload, UserMessage) and e.payload.meta]
        assert len(notes) == 1 and "cut off" in notes[0].text and "none was run again" in notes[0].text
        results = [e.payload for e in events if isinstance(e.payload, ToolResult)]
        assert [r.status for r in results] == ["interrupted"]


async def test_a_turn_cut_off_more_often_than_allowed_ends_interrupted(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    model = scripted("forever", ScriptedModel([[Hang()]] * 5))
    from agentwatch.runtime.roster import RoleSessions

    definition = role("stubborn", model, sessions=RoleSessions(continue_after_restart=1))
    async with open_engine(definition) as engine:
        session = await engine.create("stubborn")
        await engine.enqueue(session.id, "go")
        while (await engine.store.get_session(session.id)).status != "running":
            await asyncio.sleep(0.01)
    async with open_engine(definition) as engine:  # continues once (attempt 2) and is cut off again
        while (await engine.store.get_session(session.id)).turn_attempts != 2:
            await asyncio.sleep(0.01)
    async with open_engine(definition) as engine:
        done, _ = await engine.wait(session.id, 10)
        snapshot = await engine.snapshot(done)
    assert (done.status, done.error, snapshot["word"]) == ("interrupted", "Interrupted", "failed")


async def test_a_chat_turn_that_is_not_continued_says_so_in_the_chat(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    from agentwatch.runtime.roster import RoleSessions

    model = scripted("forever-chat", ScriptedModel([[Hang()]] * 2))
    definition = role("chatter", model, sessions=RoleSessions(continue_after_restart=0))
    async with open_engine(definition) as engine:
        session = await engine.create("chatter", source="chat")
        await engine.enqueue(session.id, "go")
        while (await engine.store.get_session(session.id)).status != "running":
            await asyncio.sleep(0.01)
    async with open_engine(definition) as engine:
        done, _ = await engine.wait(session.id, 10)
        tail = await engine.call_tool("agent_tail", {"id": session.id})
    said = "[agentwatch] This turn was not continued: it was cut off by a restart; continuing is turned off"
    assert done.status == "interrupted" and (done.last_text or "").startswith(said)
    assert any(row["detail"].startswith(said) for row in tail["events"] if row["detail"])


async def test_a_failing_model_fails_the_turn_with_its_error(open_engine: OpenEngine, scripted: Scripted) -> None:
    model = scripted("broken", ScriptedModel.failing("provider said 503"))
    async with open_engine(role("fragile", model)) as engine:
        snapshot = await engine.task("fragile", "go")
        assert (snapshot["status"], snapshot["word"]) == ("failed", "failed")
        assert "provider said 503" in snapshot["error"]


async def test_clear_and_compact_archive_the_conversation_with_their_reason(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    prompts: list[str] = []

    def chat(ctx: Any) -> Any:
        prompts.append(ctx.prompt)
        if ctx.prompt.startswith("Summarize"):
            return Reply("Summary: we said a and b.")
        return Reply(f"you said {ctx.prompt[-1]}")

    model = scripted("chatty", ScriptedModel(function=chat))
    async with open_engine(role("chat", model)) as engine:
        session = await engine.create("chat", source="chat")
        for prompt in ("a", "b"):
            await engine.enqueue(session.id, prompt)
            await engine.wait(session.id, 10)
        compacted = await engine.compact(session.id)
        assert compacted.context_fill is not None and compacted.context_fill["state"] == "compacted"
        await engine.enqueue(session.id, "c")
        after, _ = await engine.wait(session.id, 10)
        assert after.last_text == "you said c"
        # the first turn after the compaction opens with the summary; the turns before it did not
        assert "Summary: we said a and b." in prompts[-1] and prompts[-1].endswith("c")
        assert not any("Summary of the conversation" in p for p in prompts[:-1])
        cleared = await engine.clear(session.id)
        assert cleared.context_fill is None
        conversations = await engine.store.list_conversations(session.id)
        assert [c.end_reason for c in conversations] == ["compact", "clear", None]
        events = await all_events(engine, session.id)
        (compaction,) = [e for e in events if isinstance(e.payload, CompactionApplied)]
        assert compaction.payload.summary == "Summary: we said a and b."
        assert compaction.conversation_id == conversations[1].id
        prompt_of_next_turn = [e for e in events if isinstance(e.payload, UserMessage)][-1]
        assert prompt_of_next_turn.payload.text == "c"
        assert any(isinstance(e.payload, ConversationCleared) for e in events)


async def test_the_system_prompt_is_stored_once_with_its_hash(open_engine: OpenEngine, scripted: Scripted) -> None:
    model = scripted("twice", ScriptedModel.replying("first", "second"))
    async with open_engine(role("stable", model)) as engine:
        session = await engine.create("stable", source="chat")
        for prompt in ("a", "b"):
            await engine.enqueue(session.id, prompt)
            await engine.wait(session.id, 10)
        starts = [e.payload for e in await all_events(engine, session.id) if isinstance(e.payload, TurnStarted)]
        assert [s.system_prompt for s in starts] == ["You are stable.", None]
        assert starts[0].system_prompt_hash == starts[1].system_prompt_hash is not None


async def test_names_are_unique_per_scope_and_unknown_roles_are_refused(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    model = scripted("named", ScriptedModel.replying("hi"))
    async with open_engine(role("nova", model)) as engine:
        await engine.create("nova", name="nova", scope="42:bot1")
        await engine.create("nova", name="nova", scope="99:bot1")
        with pytest.raises(Conflict):
            await engine.create("nova", name="nova", scope="42:bot1")
        with pytest.raises(NotFound, match="nova"):
            await engine.create("novva")
        answer = await engine.call_tool("agent_create", {"role": "nope"})
        assert answer["error"]["code"] == "not_found"
        bad = await engine.call_tool("agent_await", {"agent_id": "x", "timeoutMs": -1})
        assert bad["error"]["code"] == "invalid_argument" and "timeoutMs" in bad["error"]["message"]


async def test_a_raising_thread_observer_is_isolated_and_recorded(open_engine: OpenEngine, scripted: Scripted) -> None:
    model = scripted("plain", ScriptedModel([Reply("All good.")]))

    class Broken:
        def on_event(self, thread_id: str, event: Event) -> None:
            raise ValueError("observer bug")

        def on_subscribe(self, thread_id: str, request: object, snapshot: object) -> None:
            pass

    collector: EventCollector[object] = EventCollector()
    async with open_engine(role("calm", model)) as engine:
        engine.start_with_observer(lambda _thread_id: Broken())
        engine.start_with_observer(lambda _thread_id: collector)
        snapshot = await engine.task("calm", "hi")
        assert snapshot["status"] == "completed"
        for _ in range(100):
            warnings = [e for e in await all_events(engine, snapshot["agentId"]) if e.type == "runtime.warning"]
            if warnings:
                break
            await asyncio.sleep(0.01)
        assert len(warnings) == 1
        assert "raised ValueError: observer bug" in warnings[0].payload.message  # type: ignore[union-attr]
    seen = [e.type for _, e in collector.events if e.durable]
    assert "turn.ended" in seen and "runtime.warning" in seen


async def test_a_raising_observer_factory_leaves_the_session_running_and_says_so(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once: a factory that raised failed `engine.task` and `agent_create` with the factory's own error, and left
    the session idle with its prompt lost. Now the session runs without that observer, which is recorded."""
    model = scripted("plain-factory", ScriptedModel([Reply("All good.")]))

    def broken_factory(thread_id: str) -> EventCollector[object]:
        raise RuntimeError("factory broke")

    collector: EventCollector[object] = EventCollector()
    async with open_engine(role("calm", model)) as engine:
        engine.start_with_observer(broken_factory)
        engine.start_with_observer(lambda _thread_id: collector)
        snapshot = await engine.task("calm", "hi")
        assert snapshot["status"] == "completed" and snapshot["lastAssistantText"] == "All good."
        warnings = [e for e in await all_events(engine, snapshot["agentId"]) if e.type == "runtime.warning"]
        assert len(warnings) == 1
        message = warnings[0].payload.message  # type: ignore[union-attr]
        assert "broken_factory raised RuntimeError: factory broke" in message
    assert "turn.ended" in [e.type for _, e in collector.events if e.durable]


@pytest.mark.parametrize("hook", ["on_event", "on_subscribe", "factory"])
async def test_an_observer_raising_cancelled_error_is_isolated_like_any_failure(
    open_engine: OpenEngine, scripted: Scripted, hook: str
) -> None:
    """Once: a `CancelledError` out of an observer's own code (the `result()` of a cancelled future) was taken
    for a cancellation: out of `on_event` it left the turn `running` for good with nothing recorded, out of
    `on_subscribe` that `subscribe` and every later one of the session never resolved. It is the observer's
    failure like any other: recorded, and the session goes on."""
    model = scripted("plain-cancel", ScriptedModel([Reply("All good.")]))

    class Cancelling:
        def on_event(self, thread_id: str, event: Event) -> None:
            if hook == "on_event":
                raise asyncio.CancelledError()

        def on_subscribe(self, thread_id: str, request: object, snapshot: object) -> None:
            if hook == "on_subscribe":
                raise asyncio.CancelledError()

    def factory(thread_id: str) -> Cancelling:
        if hook == "factory":
            raise asyncio.CancelledError()
        return Cancelling()

    async with open_engine(role("calm", model)) as engine:
        engine.start_with_observer(factory)
        session = await engine.create("calm")
        await asyncio.wait_for(engine.subscribe(session.id, "first"), 5)
        await engine.enqueue(session.id, "hi")
        done, _ = await engine.wait(session.id, 10)
        assert done.status == "completed"
        await asyncio.wait_for(engine.subscribe(session.id, "second"), 5)
        for _ in range(100):
            warnings = [e for e in await all_events(engine, session.id) if e.type == "runtime.warning"]
            if warnings:
                break
            await asyncio.sleep(0.01)
        assert len(warnings) == 1 and "raised CancelledError" in warnings[0].payload.message  # type: ignore[union-attr]


async def test_a_request_held_for_the_parent_reaches_a_person_when_escalated(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    def child(ctx: Any) -> Any:
        if not ctx.tool_results:
            return CallTool("ask_user", {"question": "Which branch?"})
        return Reply(f"Using {ctx.tool_results[0].output}.")

    asker = scripted("child-asker", ScriptedModel(function=child))
    busy = HeldTool("busy")
    async with open_engine(
        role("kid", asker, tools=("ask_user",)), busy.role("lead", scripted, "parent"), tools=[busy.tool]
    ) as engine:
        kid = await asking_child(engine, busy)
        snapshot = await engine.snapshot(kid)
        assert (kid.pending_requests, kid.held_requests, snapshot["word"]) == (0, 1, "working")
        assert snapshot["pendingHitl"]["deliverAt"] is not None
        (opened,) = [e.payload for e in await all_events(engine, kid.id) if isinstance(e.payload, RequestOpened)]
        assert opened.waits_on == "parent"
        await engine.escalate(snapshot["pendingHitl"]["hitlId"])
        kid = await engine.store.get_session(kid.id)
        assert (kid.pending_requests, kid.held_requests) == (1, 0)
        assert (await engine.snapshot(kid))["word"] == "needs_you"
        busy.release.set()


async def test_a_sub_agents_question_goes_to_a_person_at_once_when_its_parent_runs_no_turn(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once: it was held for `hold_for_parent_seconds` (five minutes by default) for a parent that was idle, with
    no turn to answer it in, and the agent looked busy (`working`) all that time."""
    asker = scripted(
        "idle-parent-asker", ScriptedModel(function=lambda ctx: CallTool("ask_user", {"question": "Which?"}))
    )
    parent = scripted("idle-parent", ScriptedModel.replying("ok"))
    async with open_engine(role("kid", asker, tools=("ask_user",)), role("lead", parent)) as engine:
        done = await engine.task("lead", "hello")
        assert done["status"] == "completed"
        kid = await engine.create("kid", parent_id=done["agentId"])
        await engine.enqueue(kid.id, "start")
        kid, _ = await engine.wait(kid.id, 10)
        snapshot = await engine.snapshot(kid)
        assert (kid.pending_requests, kid.held_requests, snapshot["word"]) == (1, 0, "needs_you")
        assert snapshot["pendingHitl"]["deliverAt"] is None


@pytest.mark.parametrize("kind", ["question", "approval"])
async def test_two_answers_at_once_give_the_turn_the_one_accepted(
    open_engine: OpenEngine, scripted: Scripted, kind: str
) -> None:
    """Once: the refused answer let go of the session's lease, which the accepted answer's turn was running
    under; the turn was cut off and continued, and the model was told its question (or approved call) was
    interrupted."""

    def asker(ctx: Any) -> Any:
        if not ctx.tool_results:
            return CallTool("ask_user", {"question": "Which colour?"}) if kind == "question" else CallTool("paint", {})
        return Reply(f"got {ctx.tool_results[0].output}")

    def paint() -> str:
        return "painted"

    model = scripted(f"two-answers-{kind}", ScriptedModel(function=asker))
    definition = role("asker", model, tools=("ask_user", "paint"), approval_tools=("paint",))
    async with open_engine(definition, tools=[paint]) as engine:
        paused = await engine.task("asker", "go", timeout=10)
        hitl = paused["pendingHitl"]["hitlId"]
        answers = ("red", "blue") if kind == "question" else (True, False)
        replies = await asyncio.gather(
            *(engine.call_tool("agent_answer", {"hitlId": hitl, "answer": answer}) for answer in answers)
        )
        assert sorted("error" in reply for reply in replies) == [False, True], replies
        settled, timed_out = await engine.wait(paused["agentId"], 10)
        events = await all_events(engine, paused["agentId"])
    assert not timed_out and settled.status == "completed", settled
    assert [e.payload.attempt for e in events if isinstance(e.payload, TurnStarted)] == [1, 1]
    results = [str(e.payload.output) for e in events if isinstance(e.payload, ToolResult)]
    assert not any("interrupted" in result for result in results), results
    accepted = answers[[("error" in reply) for reply in replies].index(False)]
    if kind == "question":
        assert settled.last_text == f"got {accepted}"
    else:
        assert (settled.last_text == "got painted") is accepted, settled.last_text


async def test_a_sub_agents_question_goes_to_a_person_once_its_parents_turn_ends(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once: `agent_task` came back with the child waiting on a question held for its parent; the parent's turn
    ended without answering, and the question stayed unseen (not `needs_you`) for `hold_for_parent_seconds`."""

    def child(ctx: Any) -> Any:
        if not ctx.tool_results:
            return CallTool("ask_user", {"question": "Which branch?"})
        return Reply(f"Using {ctx.tool_results[0].output}.")

    def lead(ctx: Any) -> Any:
        if not ctx.tool_results:
            return CallTool("agent_task", {"role": "kid", "prompt": "start", "name": "kid"})
        return Reply("The kid is on it.")

    asker = scripted("release-asker", ScriptedModel(function=child))
    boss = scripted("release-lead", ScriptedModel(function=lead))
    kid_role = role("kid", asker, tools=("ask_user",))
    lead_role = role("lead", boss, tools=("agent_task",), grant=("spawn",))
    async with open_engine(kid_role, lead_role) as engine:
        snapshot = await engine.task("lead", "delegate")
        assert snapshot["status"] == "completed"
        kid = await engine.store.get_session((await engine.call_tool("agent_get", {"name": "kid"}))["id"])
        assert (kid.status, kid.pending_requests, kid.held_requests) == ("awaiting_input", 1, 0)
        assert (await engine.snapshot(kid))["word"] == "needs_you"
        notes = [e.payload for e in await all_events(engine, kid.id) if e.type == "runtime.info"]
        assert any("its parent's turn ended without answering" in n.message for n in notes)  # type: ignore[union-attr]


async def test_a_sub_agents_held_question_waits_while_its_parent_pauses_and_is_released_when_it_ends(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    def child(ctx: Any) -> Any:
        return Reply("done") if ctx.tool_results else CallTool("ask_user", {"question": "Which branch?"})

    def lead(ctx: Any) -> Any:
        if not ctx.tool_results:
            return CallTool("agent_task", {"role": "kid", "prompt": "start", "name": "kid"})
        if "yes" not in [result.output for result in ctx.tool_results]:
            return CallTool("ask_user", {"question": "Go on?"})
        return Reply("Going on.")

    asker = scripted("pause-asker", ScriptedModel(function=child))
    boss = scripted("pause-lead", ScriptedModel(function=lead))
    lead_role = role("lead", boss, tools=("agent_task", "ask_user"), grant=("spawn",))
    async with open_engine(role("kid", asker, tools=("ask_user",)), lead_role) as engine:
        paused = await engine.task("lead", "delegate")
        assert paused["status"] == "awaiting_input"  # the lead waits on a person itself: it may still answer
        kid_id = (await engine.call_tool("agent_get", {"name": "kid"}))["id"]
        assert (await engine.store.get_session(kid_id)).held_requests == 1
        await engine.answer(paused["pendingHitl"]["hitlId"], "yes")
        for _ in range(200):  # (the answered turn goes on in the lead's driver)
            if (await engine.store.get_session(paused["agentId"])).status == "completed":
                break
            await asyncio.sleep(0.02)
        # A turn continued from the answer (a new turn object, after the pause): its end releases the question.
        assert (await engine.store.get_session(paused["agentId"])).status == "completed"
        kid = await engine.store.get_session(kid_id)
        assert (kid.pending_requests, kid.held_requests) == (1, 0)


def read_note(path: str) -> str:
    return f"the note at {path}"


def delete_note(path: str) -> str:
    return f"deleted {path}"


def no_deleting(request: ToolRequest) -> Verdict | None:
    return Verdict("deny", "nothing is deleted here") if request.tool_name == "delete_note" else None


async def test_a_plain_function_is_a_policy_as_a_plain_function_is_a_tool(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    calls = [CallTool("read_note", {"path": "a"}), CallTool("delete_note", {"path": "a"}), Reply("tidied")]
    model = scripted("tidier", ScriptedModel(calls))
    tidier = role("tidier", model, tools=("read_note", "delete_note"))
    async with open_engine(tidier, tools=[read_note, delete_note], policies=[no_deleting]) as engine:
        snapshot = await engine.task("tidier", "Tidy the notes")
        results = [e.payload for e in await all_events(engine, snapshot["agentId"]) if e.type == "tool.result"]
        assert sorted((r.tool_name, r.status, r.output) for r in results if isinstance(r, ToolResult)) == [
            ("delete_note", "error", "ToolRefused: delete_note was not allowed (deny): nothing is deleted here"),
            ("read_note", "ok", "the note at a"),
        ]


async def test_a_policy_that_is_neither_a_policy_nor_a_function_is_refused_at_open(
    open_engine: OpenEngine,
) -> None:
    with pytest.raises(UserError) as raised:
        async with open_engine(policies=["no_deleting"]):
            pass
    assert str(raised.value) == (
        "policies: 'no_deleting' (a str) is not a policy; give a Policy(name, decide) or a function that takes "
        "a ToolRequest and returns a Verdict or None"
    )


async def test_an_engine_used_after_close_says_it_is_closed_and_to_open_a_new_one(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    async with open_engine(role("greeter", scripted("echo", ScriptedModel([Reply("Hi.")])))) as engine:
        session = await engine.create("greeter")
    calls = {
        "create": lambda: engine.create("greeter"),
        "enqueue": lambda: engine.enqueue(session.id, "Hello"),
        "wait": lambda: engine.wait(session.id, 1.0),
        "stop": lambda: engine.stop(session.id),
        "delete": lambda: engine.delete(session.id),
        "answer": lambda: engine.answer("req_x", "yes"),
        "call_tool": lambda: engine.call_tool("agent_list", {}),
    }
    for name, call in calls.items():
        with pytest.raises(UserError) as raised:
            await call()
        assert str(raised.value) == "this engine is closed; open a new one (`Engine.open(...)`) to go on", name


def test_function_tools_take_their_schema_from_the_signature() -> None:
    def read_file(path: str, limit: int = 100) -> str:
        """Read a text file."""
        return path

    tool = function_tool(read_file)
    assert tool.description == "Read a text file."
    assert tool.parameters["required"] == ["path"]
    assert tool.parameters["properties"] == {
        "path": {"title": "Path", "type": "string"},
        "limit": {"default": 100, "title": "Limit", "type": "integer"},
    }


async def test_a_held_request_reaches_a_person_by_its_deliver_at(open_engine: OpenEngine, scripted: Scripted) -> None:
    from agentwatch.config import Config, SessionDefaults

    def child(ctx: Any) -> Any:
        if not ctx.tool_results:
            return CallTool("ask_user", {"question": "Which branch?"})
        return Reply("ok")

    asker = scripted("held-asker", ScriptedModel(function=child))
    config = Config(sessions=SessionDefaults(hold_for_parent_seconds=0.2))
    busy = HeldTool("busy")
    lead_role = busy.role("lead", scripted, "held-parent")
    async with open_engine(
        role("kid", asker, tools=("ask_user",)), lead_role, tools=[busy.tool], config=config
    ) as engine:
        kid = await asking_child(engine, busy)
        assert (kid.pending_requests, kid.held_requests) == (0, 1)
        assert await engine.escalate_due() == 0  # not yet: its parent still has time to answer
        await asyncio.sleep(0.3)
        assert await engine.escalate_due() == 1
        kid = await engine.store.get_session(kid.id)
        assert (kid.pending_requests, kid.held_requests) == (1, 0)
        notes = [e.payload for e in await all_events(engine, kid.id) if e.type == "runtime.info"]
        assert any("its parent did not answer in time" in n.message for n in notes)  # type: ignore[union-attr]
        busy.release.set()


async def test_deletions_at_once_write_one_notice_with_it(open_engine: OpenEngine, scripted: Scripted) -> None:
    """Once: each deletion wrote its notice, then deleted, so two at once wrote two notices, and between the
    notice and the deletion a reconnecting stream found an agent with its last event that was not deleted."""
    model = scripted("deleted-twice", ScriptedModel.replying("hi"))
    async with open_engine(role("quiet", model)) as engine:
        snapshot = await engine.call_tool("agent_task", {"role": "quiet", "prompt": "hello"})
        agent_id = snapshot["agentId"]
        deleted = await asyncio.gather(*(engine.delete(agent_id, by=by) for by in ("ada", "bo", "cy")))
        assert len({(s.deleted_at, s.reap_at) for s in deleted}) == 1
        events = await all_events(engine, agent_id)
        notices = [e for e in events if e.type == "runtime.info" and e.payload.source == "deletion"]
        last_seq = (await engine.store.get_session(agent_id)).last_seq
        assert len(notices) == 1 and notices[0].seq == last_seq == events[-1].seq
        assert (await engine.delete(agent_id)).deleted_at == deleted[0].deleted_at  # again: nothing changes
        assert len(await all_events(engine, agent_id)) == len(events)


async def test_stopping_a_paused_turn_counts_nothing_twice(open_engine: OpenEngine, scripted: Scripted) -> None:
    """A stop where the turn is not running reads back what it spent: since it paused, not what its pause's
    `turn.ended` already counted."""
    model = scripted("paused-stop", ScriptedModel(function=lambda ctx: CallTool("ask_user", {"question": "Which?"})))
    async with open_engine(role("asker", model, tools=("ask_user",))) as engine:
        snapshot = await engine.task("asker", "go", timeout=10)
        assert snapshot["status"] == "awaiting_input"
        await engine.stop(snapshot["agentId"], by="ada")
        ended = [e.payload for e in await all_events(engine, snapshot["agentId"]) if isinstance(e.payload, TurnEnded)]
    assert [e.outcome for e in ended] == ["paused", "cancelled"]
    assert ended[0].usage.requests == 1 and ended[1].usage.requests == 0


async def test_a_stop_while_the_turn_loop_lets_go_of_the_lease_ends_the_paused_turn(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Its turn paused on a question, the session's turn loop still lets the lease go and looks for more work. A
    stop then cancelled the loop outside any turn, which recorded nothing, and said it stopped the turn: the
    question stayed open and the turn paused."""
    model = scripted("paused-loop", ScriptedModel(function=lambda ctx: CallTool("ask_user", {"question": "Which?"})))
    async with open_engine(role("asker", model, tools=("ask_user",))) as engine:
        release, letting_go = engine.store.release_lease, asyncio.Event()

        async def held_release(session_id: str, owner: str) -> None:
            if not letting_go.is_set():  # the loop, after the turn paused
                letting_go.set()
                await asyncio.Event().wait()  # until the stop cancels the loop
            await release(session_id, owner)

        engine.store.release_lease = held_release  # type: ignore[method-assign]
        session = await engine.create("asker")
        await engine.enqueue(session.id, "go")
        await asyncio.wait_for(letting_go.wait(), 10)
        assert (await engine.store.get_session(session.id)).status == "awaiting_input"
        assert (await engine.driver(session.id)).turn_running
        assert await engine.stop(session.id, by="ada") is True
        assert (await engine.store.get_session(session.id)).status == "cancelled"
        requests = await engine.store.list_requests(session_id=session.id, status=None)
        assert [r.status for r in requests] == ["dismissed"]
        ended = [e.payload for e in await all_events(engine, session.id) if isinstance(e.payload, TurnEnded)]
        assert [(e.outcome, e.reason) for e in ended] == [
            ("paused", "waiting on 1 request(s)"),
            ("cancelled", "stopped by ada"),
        ]


async def test_a_stop_as_the_turn_loop_takes_new_input_stops_the_agent_and_lets_the_lease_go(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """A stop that came as an idle agent's turn loop took its lease for new input, before the turn began, cut the
    loop off there and recorded nothing: the agent read `completed` with the input pending, which no turn ran
    (a wait on it ran to its timeout), and the engine held the agent's lease for good, renewing it, so no other
    engine's sweep took it either. The stop is written now, as for a turn: the input waits for the next one."""
    model = scripted("stop-new-input", ScriptedModel(function=lambda ctx: Reply("ok")))
    async with open_engine(role("talker", model)) as engine:
        agent = await engine.create("talker")
        await engine.enqueue(agent.id, "one")
        assert (await engine.wait(agent.id, 10))[0].status == "completed"
        list_inputs, looking, once = engine.store.list_inputs, asyncio.Event(), [True]

        async def held_list_inputs(*args: Any, **kwargs: Any) -> Any:
            if once and once.pop():  # the loop, the lease taken, looking for the input
                looking.set()
                await asyncio.Event().wait()  # until the stop cancels the loop
            return await list_inputs(*args, **kwargs)

        engine.store.list_inputs = held_list_inputs  # type: ignore[method-assign]
        await engine.enqueue(agent.id, "two")
        await asyncio.wait_for(looking.wait(), 10)
        assert engine.leases.held == [agent.id]
        assert await engine.stop(agent.id, by="ada") is True
        settled, timed_out = await engine.wait(agent.id, 10)
        assert not timed_out and settled.status == "cancelled" and settled.pending_inputs == 1
        await until(lambda: engine.leases.held == [])
        await engine.enqueue(agent.id, "three")
        settled, timed_out = await engine.wait(agent.id, 10)
        texts = [e.payload.text for e in await all_events(engine, agent.id) if isinstance(e.payload, UserMessage)]
    assert not timed_out and settled.status == "completed" and settled.pending_inputs == 0
    assert texts == ["one", "two", "three"]


async def test_two_stops_of_one_turn_at_once_both_return_once_it_ended_cancelled(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Of two stops at once, the second came while the turn wrote the first one's stop and cancelled the turn
    again: its loop ended before the write was stored, and both stops answered while the session still read
    `running`. The second waits for the first one's write now."""
    busy = HeldTool("dig")
    async with open_engine(busy.role("digger", scripted, "two-stops"), tools=[busy.tool]) as engine:
        agent = await engine.create("digger")
        await engine.enqueue(agent.id, "dig")
        await asyncio.wait_for(busy.started.wait(), 10)
        write, writing, land = engine.store.write, asyncio.Event(), asyncio.Event()

        async def held_write(item: Any) -> Any:
            if item.session is not None and item.session.status == "cancelled":  # the first stop's
                writing.set()
                await land.wait()
            return await write(item)

        driver = await engine.driver(agent.id)
        stop_turn, stops = driver.stop_turn, []

        def counted_stop_turn() -> Any:
            stops.append(1)
            return stop_turn()

        engine.store.write = held_write  # type: ignore[method-assign]
        driver.stop_turn = counted_stop_turn  # type: ignore[method-assign]
        first = asyncio.create_task(engine.stop(agent.id, by="ada"))
        await asyncio.wait_for(writing.wait(), 10)
        second = asyncio.create_task(engine.stop(agent.id, by="bo"))
        await until(lambda: len(stops) == 2)  # the second stop is at the driver while the write is held
        land.set()
        assert [await first, await second] == [True, True]
        assert (await engine.store.get_session(agent.id)).status == "cancelled"


async def test_enqueue_and_await_take_the_agent_as_id_too(open_engine: OpenEngine, scripted: Scripted) -> None:
    """Every other tool names the agent `id`; these two took only `agentId`, so a client needed both spellings."""
    model = scripted("id-spelling", ScriptedModel.replying("ok"))
    async with open_engine(role("helper", model)) as engine:
        session = await engine.create("helper")
        queued = await engine.call_tool("agent_enqueue", {"id": session.id, "prompt": "hi"})
        assert queued == {"agentId": session.id, "pendingInputs": 1, "duplicate": False}
        awaited = await engine.call_tool("agent_await", {"id": session.id, "timeoutMs": 10_000})
        assert awaited["status"] == "completed", awaited
        both = await engine.call_tool("agent_await", {"id": session.id, "agentId": session.id})
        assert both["error"]["code"] == "invalid_argument"  # one spelling at a time


async def test_a_driver_whose_turn_was_stopped_with_a_kick_pending_is_let_go_once_idle(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once a kick still marked pending when a stop ended the turn loop kept the driver from ever being idle: it
    stayed in the engine for good, a reaped session's too."""
    busy = HeldTool("dig")
    async with open_engine(busy.role("digger", scripted, "driver-kick"), tools=[busy.tool]) as engine:
        agent = await engine.create("digger")
        await engine.enqueue(agent.id, "dig")
        await asyncio.wait_for(busy.started.wait(), 10)
        await engine.enqueue(agent.id, "and then")  # (a kick while the turn runs)
        await engine.stop(agent.id)
        driver = await engine.driver(agent.id)
        for _ in range(250):
            if driver.idle:
                break
            await asyncio.sleep(0.02)
        assert driver.idle


async def test_a_wait_on_an_agent_stopped_with_input_queued_ends_and_the_next_input_runs_it(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Input given while a turn runs waits, after a stop of that turn, for the agent's next input (it starts no
    turn of its own); once a wait on such an agent ran to its timeout, as if a turn were coming."""
    busy = HeldTool("dig")
    async with open_engine(busy.role("digger", scripted, "stopped-queued"), tools=[busy.tool]) as engine:
        agent = await engine.create("digger", source="chat")
        await engine.enqueue(agent.id, "dig")
        await asyncio.wait_for(busy.started.wait(), 10)
        await engine.enqueue(agent.id, "and then")
        await engine.stop(agent.id)
        settled, timed_out = await engine.wait(agent.id, 5)
        assert not timed_out and settled.status == "cancelled" and settled.pending_inputs == 1
        snapshot = await engine.snapshot(settled)
        assert snapshot["status"] == "cancelled" and snapshot["timedOut"] is False
        busy.release.set()
        await engine.enqueue(agent.id, "go on")
        settled, timed_out = await engine.wait(agent.id, 10)
    assert not timed_out and settled.pending_inputs == 0 and settled.status == "idle"


@pytest.mark.parametrize("where", ["maintenance", "lease upkeep"])
async def test_an_engine_closes_when_a_store_call_swallowed_the_cancellation_of_its_upkeep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Once, under load: the engine's close waited for ever (a test hung past its time-out). On Python 3.11,
    `asyncio.wait_for` returns what it waited for when a cancellation lands just as that comes (the PostgreSQL pool
    waits for a connection so): a store call of the maintenance swallowed the close's cancellation, the loop went
    on, and the close waited for it. The close cancels its background loops again until they end."""
    entered = asyncio.Event()
    swallowed: list[bool] = []

    async def swallowing(*args: Any, **kwargs: Any) -> list[str]:
        entered.set()
        if not swallowed:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                swallowed.append(True)  # returned as the cancellation came, as wait_for does
        return []

    if where == "maintenance":
        monkeypatch.setattr(engines, "MAINTENANCE_SECONDS", 0.05)
        monkeypatch.setattr(Engine, "escalate_due", swallowing)
    else:
        monkeypatch.setattr(Leases, "renew", swallowing)
    opening = Engine.open(f"sqlite:///{tmp_path / 'aw.db'}", config=lease_config(tmp_path))
    await opening.__aenter__()
    await asyncio.wait_for(entered.wait(), 10)
    closing = asyncio.ensure_future(opening.__aexit__(None, None, None))
    done, _ = await asyncio.wait([closing], timeout=10)
    assert swallowed == [True]
    assert done, f"the engine's close still waits for its {where}, which went on past its cancellation"
