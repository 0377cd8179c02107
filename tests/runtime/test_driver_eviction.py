"""Idle session drivers are let go (after a while, or beyond a bound) and made again on demand: the session
keeps nothing in memory meanwhile, its next turn runs as before, and nothing is missed or doubled."""

from __future__ import annotations

import asyncio

import pytest

from agentwatch.events import TurnEnded
from agentwatch.live import Lagged
from agentwatch.runtime import engine as engines
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import Hang, Reply, ScriptedModel
from tests.runtime.support import OpenEngine, role, until


def answering() -> ScriptedModel:
    return ScriptedModel(function=lambda ctx: Reply(f"answer to {ctx.prompt}"))


async def turn(engine: Engine, session_id: str, prompt: str) -> None:
    await engine.enqueue(session_id, prompt)
    session, timed_out = await engine.wait(session_id, 10)
    assert (session.status, timed_out) == ("completed", False)


async def ended_turns(engine: Engine, session_id: str) -> list[str]:
    events = await engine.store.read_events(session_id, limit=1000)
    return [e.payload.outcome for e in events if isinstance(e.payload, TurnEnded)]


async def test_beyond_the_bound_the_least_recently_used_idle_drivers_go(
    open_engine: OpenEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engines, "DRIVERS_KEPT", 4)
    model = ScriptedModel(function=lambda ctx: [Hang()] if ctx.prompt == "hang" else Reply("ok"))
    async with open_engine(role("chat", "scripted:chat"), models={"chat": model}) as engine:
        busy = await engine.create("chat")
        await engine.enqueue(busy.id, "hang")  # the oldest driver, but running a turn
        await until(lambda: engine.running_turns() == [busy.id])
        sessions = [(await engine.create("chat")).id for _ in range(3)]
        for session_id in sessions:
            await turn(engine, session_id, "hello")
        first = await engine.driver(sessions[0])
        await until(lambda: first.idle)
        assert await engine.ring.recent(sessions[0])  # its events are retained while its driver lives
        newest = (await engine.create("chat")).id
        await engine.driver(newest)  # a fifth driver: room is made (down to 90 % of 4) from the idle ones

        assert first.evicted and not (await engine.driver(busy.id)).evicted
        assert busy.id in engine._drivers and newest in engine._drivers
        assert await engine.ring.recent(sessions[0]) == []  # nothing retained for a session nobody watches
        await until(lambda: engine.running_turns() == [busy.id])

        # Made again on demand: the next turn of the session runs, its events follow the earlier ones.
        again = await engine.driver(sessions[0])
        assert again is not first and not again.evicted
        await turn(engine, sessions[0], "and again")
        assert await ended_turns(engine, sessions[0]) == ["completed", "completed"]
        events = await engine.store.read_events(sessions[0], limit=1000)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        await engine.stop(busy.id)


async def test_a_caller_holding_a_driver_that_went_is_sent_to_the_new_one(
    open_engine: OpenEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engines, "DRIVERS_KEPT", 1)
    async with open_engine(role("chat", "scripted:chat"), models={"chat": answering()}) as engine:
        session = await engine.create("chat")
        held = await engine.driver(session.id)
        await engine.driver((await engine.create("chat")).id)  # beyond the bound: the held one goes
        assert held.evicted

        await turn(engine, session.id, "first")  # through a new driver for the session
        waiting = asyncio.ensure_future(held.wait_changed(10))  # waits on the new driver
        await engine.driver((await engine.create("chat")).id)  # the new one is waited on: it stays
        held.kick()  # nothing queued: a kick is harmless, and goes to the live driver
        await turn(engine, session.id, "second")
        assert await waiting
        assert await ended_turns(engine, session.id) == ["completed", "completed"]


async def test_drivers_idle_for_a_while_go(open_engine: OpenEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engines, "MAINTENANCE_SECONDS", 0.05)
    monkeypatch.setattr(engines, "DRIVER_IDLE_SECONDS", 0.2)
    async with open_engine(role("chat", "scripted:chat"), models={"chat": answering()}) as engine:
        session = await engine.create("chat")
        await turn(engine, session.id, "hello")
        await until(lambda: session.id not in engine._drivers, timeout=5)
        await turn(engine, session.id, "hello again")
        assert await ended_turns(engine, session.id) == ["completed", "completed"]


async def test_a_resume_older_than_a_forgotten_ring_reads_the_store(
    open_engine: OpenEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engines, "DRIVERS_KEPT", 1)
    async with open_engine(role("chat", "scripted:chat"), models={"chat": answering()}) as engine:
        session = await engine.create("chat")
        await turn(engine, session.id, "hello")
        events = await engine.store.read_events(session.id, limit=1000)
        await until(lambda: engine._drivers[session.id].idle)  # its turn loop has ended
        await engine.driver((await engine.create("chat")).id)  # the session's driver goes, its ring is emptied
        assert session.id not in engine._drivers

        behind = await engine.ring.subscribe(session.id, after=events[0].cursor)
        with pytest.raises(Lagged) as lagged:
            await asyncio.wait_for(behind.__anext__(), 5)
        assert lagged.value.resume_from == events[0].cursor
        at_head = await engine.ring.subscribe(session.id, after=events[-1].cursor)  # nothing missed: no lag
        await turn(engine, session.id, "more")
        first_new = await asyncio.wait_for(at_head.__anext__(), 5)
        assert (first_new.seq, first_new.sub) == (events[-1].seq + 1, 0)
        await at_head.close()
