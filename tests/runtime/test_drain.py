"""`Engine.drain()`: no new turn starts in a draining engine, its running turns go on, and the work it leaves
is taken by another engine on the store; `Engine.running_turns()` names the turns in progress."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentwatch.events import NewEvent, TurnEnded, TurnId, TurnStarted, UserMessage
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.leases import new_owner
from agentwatch.runtime.models import ScriptedModel
from agentwatch.store import SessionPatch, Write
from tests.runtime.support import LEASE, Scripted, lease_config, one_call_per_prompt, role, until

Runs = list[tuple[str, str]]
"""(engine, label) for every tool run started."""


def slow_tool(runs: Runs, engine: str, seconds: float) -> Callable[..., Any]:
    async def slow_tool(label: str) -> str:
        runs.append((engine, label))
        await asyncio.sleep(seconds)
        return f"{engine} did {label}"

    return slow_tool


async def test_the_running_turn_ends_and_no_new_one_starts(tmp_path: Path, url: str, scripted: Scripted) -> None:
    model = scripted("drain-one", ScriptedModel(function=one_call_per_prompt))
    runs: Runs = []
    definition = role("slow", model, tools=("slow_tool",))
    config = lease_config(tmp_path)
    async with Engine.open(url, config=config, definitions=[definition], tools=[slow_tool(runs, "a", 0.8)]) as a:
        busy = await a.create("slow")
        idle = await a.create("slow")
        await a.enqueue(busy.id, "first")
        await until(lambda: bool(runs))
        assert a.running_turns() == [busy.id]
        a.drain()
        assert a.draining
        await a.enqueue(busy.id, "second")  # queued during the running turn: left in the store
        await a.enqueue(idle.id, "third")  # an existing driver with no turn: nothing starts
        fresh = await a.create("slow")
        await a.enqueue(fresh.id, "fourth")  # a driver made after the drain: nothing starts
        await until(lambda: not a.running_turns(), timeout=15)
        await asyncio.sleep(LEASE + 0.5)  # a sweep or two: a draining engine takes nothing over
        assert a.running_turns() == []
        assert a.leases.held == []
        sessions = {s: await a.store.get_session(s) for s in (busy.id, idle.id, fresh.id)}
        events = await a.store.read_events(busy.id, after_seq=0, limit=1000)
    assert len(runs) == 1
    ended = [e.payload.outcome for e in events if isinstance(e.payload, TurnEnded)]
    assert ended == ["completed"]
    assert [(s.status, s.pending_inputs) for s in sessions.values()] == [("completed", 1), ("idle", 1), ("idle", 1)]


async def test_another_engine_takes_the_work_a_draining_one_leaves(
    tmp_path: Path, url: str, scripted: Scripted
) -> None:
    model = scripted("drain-two", ScriptedModel(function=one_call_per_prompt))
    runs: Runs = []
    definition = role("slow", model, tools=("slow_tool",))
    config = lease_config(tmp_path, lease=30.0)  # the hand-over, not an expiry, must move the work
    async with (
        Engine.open(url, config=config, definitions=[definition], tools=[slow_tool(runs, "b", 0.1)]) as b,
        Engine.open(url, config=config, definitions=[definition], tools=[slow_tool(runs, "a", 0.8)]) as a,
    ):
        session = await a.create("slow")
        await a.enqueue(session.id, "first")
        await until(lambda: bool(runs))
        a.drain()
        await a.enqueue(session.id, "second")
        await until(lambda: len(runs) == 2, timeout=10)  # b runs the second turn while a is still open
        assert a.running_turns() == []
        settled, timed_out = await b.wait(session.id, 15)
        events = await b.store.read_events(session.id, after_seq=0, limit=1000)
    assert not timed_out and settled.status == "completed" and settled.pending_inputs == 0
    assert [engine for engine, _ in runs] == ["a", "b"]
    assert [e.payload.text for e in events if isinstance(e.payload, UserMessage)] == ["first", "second"]
    ended = [e.payload.outcome for e in events if isinstance(e.payload, TurnEnded)]
    assert ended == ["completed", "completed"]


async def test_a_draining_engine_takes_over_no_expired_lease(tmp_path: Path, url: str, scripted: Scripted) -> None:
    model = scripted("drain-orphan", ScriptedModel(function=one_call_per_prompt))
    runs: Runs = []
    definition = role("slow", model, tools=("slow_tool",))
    config = lease_config(tmp_path)
    async with Engine.open(url, config=config, definitions=[definition], tools=[slow_tool(runs, "a", 0.1)]) as a:
        a.drain()
        # What a process that died mid-turn leaves: a running turn and a lease nobody renews.
        session = await a.create("slow")
        turn = TurnId("trn_dead")
        await a.store.write(
            Write(
                session.id,
                events=[NewEvent(TurnStarted(), turn), NewEvent(UserMessage(text="go"), turn)],
                session=SessionPatch(status="running", current_turn_id=turn, turn_attempts=1),
            )
        )
        dead = new_owner()
        assert await a.store.acquire_lease(session.id, dead, 0.2)
        await asyncio.sleep(1.2)
        lease = await a.store.get_lease(session.id)
        assert lease is not None and lease.owner == dead and a.leases.takeovers == 0
        assert runs == []
        async with Engine.open(url, config=config, definitions=[definition], tools=[slow_tool(runs, "b", 0.1)]) as b:
            settled, timed_out = await b.wait(session.id, 15)  # its start-up recovery or its sweep
    assert not timed_out and settled.status == "completed"
    assert [engine for engine, _ in runs] == ["b"]
