"""Pipelined commits: the commit that opens a model request is not waited for, and nothing a watcher or the
log can tell changes because of it (order, durability before visibility, failures)."""

from __future__ import annotations

import dataclasses
from typing import Any

from agentwatch.errors import StoreError
from agentwatch.events import (
    CompletionFinished,
    CompletionStarted,
    ContentDelta,
    Event,
    NewEvent,
    ToolCall,
    ToolResult,
    TurnEnded,
    TurnId,
)
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.runtime.thread_observer import EventCollector
from agentwatch.store import Write
from tests.runtime.support import OpenEngine, Scripted, handed_out, role, until


def lookup(key: str) -> str:
    """Look a key up."""
    return f"{key} is done"


def _script(calls: int) -> ScriptedModel:
    steps: list[Any] = [[Reply(f"Reading note {i} now."), CallTool("lookup", {"key": f"n{i}"})] for i in range(calls)]
    steps.append(Reply("All notes say done."))
    return ScriptedModel(steps)


async def _all(engine: Any, session_id: str) -> list[Event]:
    events: list[Event] = await engine.store.read_events(session_id, limit=10_000)
    return events


async def test_deltas_streamed_while_a_pipelined_commit_is_in_flight_reach_watchers_after_its_events(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    model = scripted("quiet", ScriptedModel.replying("ok"))
    async with open_engine(role("r", model)) as engine:
        collector: EventCollector[Any] = EventCollector()
        engine.start_with_observer(lambda _sid: collector)
        session = await engine.create("r")
        emitter = (await engine.driver(session.id)).emitter
        turn = TurnId("trn_test")
        pending = emitter.submit(
            Write(session.id, events=[NewEvent(CompletionStarted(request_index=0, model="m"), turn)]), turn=True
        )
        emitter.stream(ContentDelta(part="text", index=0, request_index=0, delta="Hel"), turn)
        emitter.stream(ContentDelta(part="text", index=0, request_index=0, delta="lo"), turn)
        (started,) = await pending
        await until(lambda: emitter.idle)
        seen = [e for _, e in collector.events if e.turn_id == turn]
        assert [e.type for e in seen] == ["completion.started", "content.delta", "content.delta"]
        assert [(e.seq, e.sub) for e in seen] == [(started.seq, 0), (started.seq, 1), (started.seq, 2)]


async def test_watchers_see_each_request_open_before_its_deltas_and_tools_run_after_their_calls_are_durable(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    model = scripted("notes", _script(4))
    async with open_engine(role("r", model, tools=("lookup",)), tools=[lookup]) as engine:
        collector: EventCollector[Any] = EventCollector()
        engine.start_with_observer(lambda _sid: collector)
        durable_calls_at_run: list[int] = []
        original = engine.tools["lookup"].handler

        async def checked(eng: Any, caller: Any, args: dict[str, Any]) -> Any:
            stored = await _all(eng, caller.session_id)
            durable_calls_at_run.append(sum(isinstance(e.payload, ToolCall) for e in stored))
            return await original(eng, caller, args)

        engine.tools["lookup"] = dataclasses.replace(engine.tools["lookup"], handler=checked)
        session = await engine.create("r")
        await engine.enqueue(session.id, "go")
        settled, _ = await engine.wait(session.id, 30)
        assert settled.status == "completed"
        assert durable_calls_at_run == [1, 2, 3, 4]  # each call was stored before its tool ran

        await handed_out(engine, session.id)
        seen = [e for sid, e in collector.events if sid == session.id]
        opened = -1
        last_durable = 0
        for event in seen:
            if isinstance(event.payload, CompletionStarted):
                opened = event.payload.request_index
            if isinstance(event.payload, ContentDelta):
                assert event.payload.request_index == opened  # never before its request was opened
                assert event.seq == last_durable
            elif event.durable:
                last_durable = event.seq
        assert [e.seq for e in seen if e.durable] == list(range(1, last_durable + 1))
        positions = [(e.seq, e.sub) for e in seen]
        assert positions == sorted(positions) and len(set(positions)) == len(positions)


async def test_a_failed_pipelined_commit_fails_the_turn_and_nothing_of_the_turn_after_it_is_written(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    model = scripted("notes2", _script(3))
    async with open_engine(role("r", model, tools=("lookup",)), tools=[lookup]) as engine:
        store = engine.store
        write = store.write

        async def failing(w: Write) -> list[Event]:
            if any(isinstance(e.payload, CompletionStarted) and e.payload.request_index == 1 for e in w.events):
                raise StoreError("the disk is full")
            return await write(w)

        store.write = failing  # type: ignore[method-assign]
        session = await engine.create("r")
        await engine.enqueue(session.id, "go")
        settled, _ = await engine.wait(session.id, 30)
        assert settled.status == "failed"
        assert "the disk is full" in str(settled.error)

        events = await _all(engine, session.id)
        finished = [e.payload.request_index for e in events if isinstance(e.payload, CompletionFinished)]
        assert finished == [0]  # the response of request 1 came after the failed commit: never written
        assert not any(isinstance(e.payload, ToolResult) for e in events)  # it was in the failed commit
        assert isinstance(events[-1].payload, TurnEnded) and events[-1].payload.outcome == "failed"
        assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_a_failed_commit_of_the_last_response_and_the_end_fails_the_turn(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    model = scripted("notes3", _script(2))
    async with open_engine(role("r", model, tools=("lookup",)), tools=[lookup]) as engine:
        store = engine.store
        write = store.write
        failed: list[list[str]] = []

        async def failing(w: Write) -> list[Event]:
            if any(isinstance(e.payload, CompletionFinished) and e.payload.request_index == 2 for e in w.events):
                failed.append([e.payload.type for e in w.events])
                raise StoreError("the disk is full")
            return await write(w)

        store.write = failing  # type: ignore[method-assign]
        collector: EventCollector[Any] = EventCollector()
        engine.start_with_observer(lambda _sid: collector)
        session = await engine.create("r")
        await engine.enqueue(session.id, "go")
        settled, _ = await engine.wait(session.id, 30)
        assert settled.status == "failed"
        assert "the disk is full" in str(settled.error)
        assert failed and failed[0][-1] == "turn.ended"  # the answer and the end were one write

        events = await _all(engine, session.id)
        finished = [e.payload.request_index for e in events if isinstance(e.payload, CompletionFinished)]
        assert finished == [0, 1]  # the answer was never written
        ends = [e.payload for e in events if isinstance(e.payload, TurnEnded)]
        assert len(ends) == 1 and ends[0].outcome == "failed"
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        seen = [e for _, e in collector.events if e.sub == 0]
        assert [e.id for e in seen] == [e.id for e in events]  # watchers saw exactly what was stored
