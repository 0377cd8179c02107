"""Leases: two engines on one store never run the same turn; a dead owner's turns continue elsewhere.

Engines here share one SQLite file in one process (each engine is its own owner); the tests with real
processes killed at random moments are in `test_leases_processes.py`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agentwatch.config import Config, load_config
from agentwatch.errors import Conflict
from agentwatch.events import (
    CompletionFinished,
    NewEvent,
    RuntimeNotice,
    ToolResult,
    TurnEnded,
    TurnId,
    TurnStarted,
    UserMessage,
)
from agentwatch.runtime import engine as engines
from agentwatch.runtime import leases as leases_module
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.leases import TAKEOVER_SHARE, Leases, claimed, new_owner
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.store import InputDraft, LeaseRecord, SessionDraft, SessionPatch, Write, _events, connect_store
from tests.runtime.support import LEASE, HeldTool, Scripted, lease_config, one_call_per_prompt, role, until
from tests.store.databases import postgres_schema

Runs = list[tuple[str, str, str]]
"""(engine, event, label) for every start and end of a tool run."""


def slow_tool(runs: Runs, engine: str, seconds: float) -> Callable[..., Any]:
    """The tool `slow_tool` of `engine`, which takes `seconds`."""
    return recorded_tool(runs, engine, lambda: asyncio.sleep(seconds))


def held_tool(runs: Runs, engine: str, release: asyncio.Event) -> Callable[..., Any]:
    """A `slow_tool` that returns once `release` is set: for a check made while the turn is surely in it."""
    return recorded_tool(runs, engine, release.wait)


def recorded_tool(runs: Runs, engine: str, work: Callable[[], Awaitable[Any]]) -> Callable[..., Any]:
    """The tool `slow_tool` of `engine`, which does `work`; its start and end are recorded in `runs`."""

    async def slow_tool(label: str) -> str:
        runs.append((engine, "start", label))
        await work()
        runs.append((engine, "end", label))
        return f"{engine} did {label}"

    return slow_tool


def started(runs: Runs) -> list[str]:
    return [label for _, event, label in runs if event == "start"]


async def check_log(engine: Engine, session_id: str) -> list[Any]:
    """The session's events, after checking that no event of a turn follows that turn's `turn.ended`."""
    events = await engine.store.read_events(session_id, limit=10_000)
    ended: set[str] = set()
    for event in events:
        if event.turn_id is not None and event.turn_id in ended and not isinstance(event.payload, TurnStarted):
            raise AssertionError(f"{event.type} after the turn.ended of {event.turn_id}")
        if isinstance(event.payload, TurnEnded) and event.payload.outcome != "paused" and event.turn_id:
            ended.add(event.turn_id)
        if isinstance(event.payload, TurnStarted) and event.turn_id:
            ended.discard(event.turn_id)
    return events


async def test_an_engine_beside_a_live_owner_leaves_its_turns_alone(
    tmp_path: Path, url: str, scripted: Scripted, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once: a second engine whose roster lacks the role ended the first one's turns `failed` (role no
    longer resolves). Now it does not own them, so it does not touch them. (The turn stays in its tool until
    the checks are made: a tool of a set length once ended first on a loaded host, and the checks then saw a
    finished turn.)"""
    swept = sweeps_recorded(monkeypatch)
    model = scripted("leases-alone", ScriptedModel(function=one_call_per_prompt))
    runs: Runs = []
    release = asyncio.Event()
    config = lease_config(tmp_path)
    definition = role("slow", model, tools=("slow_tool",))
    async with Engine.open(url, config=config, definitions=[definition], tools=[held_tool(runs, "a", release)]) as a:
        session = await a.create("slow")
        await a.enqueue(session.id, "go")
        await until(lambda: bool(runs))
        async with Engine.open(url, config=config) as b:  # no roles at all
            await until(lambda: len(swept[b.leases.owner]) >= 2)  # its start-up recovery, and two sweeps
            lease = await b.store.get_lease(session.id)
            assert lease is not None and lease.owner == a.leases.owner
            assert (await b.store.get_session(session.id)).status == "running"
            assert b.leases.held == []
        release.set()
        settled, timed_out = await a.wait(session.id, 15)
        events = await check_log(a, session.id)
    assert not timed_out and settled.status == "completed"
    assert [e.payload.outcome for e in events if isinstance(e.payload, TurnEnded)] == ["completed"]
    assert [engine for engine, event, _ in runs if event == "start"] == ["a"]


def engines_with_the_role(
    tmp_path: Path, url: str, scripted: Scripted, model: str
) -> tuple[Callable[[], contextlib.AbstractAsyncContextManager[Engine]], Runs, Config]:
    """How to open an engine `a` with role `slow` (its tool quick), the tool runs of every such engine, and the
    config (a lease of `LEASE`) for an engine beside it."""
    definition = role("slow", scripted(model, ScriptedModel(function=one_call_per_prompt)), tools=("slow_tool",))
    runs: Runs = []
    config = lease_config(tmp_path)

    def with_the_role() -> contextlib.AbstractAsyncContextManager[Engine]:
        return Engine.open(url, config=config, definitions=[definition], tools=[slow_tool(runs, "a", 0.1)])

    return with_the_role, runs, config


async def test_work_an_engine_without_the_role_was_given_waits_for_an_engine_with_it(
    tmp_path: Path, url: str, scripted: Scripted
) -> None:
    """Once: input given to an agent through an engine whose roster lacks its role (a service of a rolling deploy
    that adds the role, a service opened on another agents directory) failed the agent's turn there (its role
    "no longer resolves"), and the input with it. Now that engine says so on the agent and leaves the turn to an
    engine that has the role, whose sweep takes it within a second."""
    with_the_role, runs, config = engines_with_the_role(tmp_path, url, scripted, "leases-roleless")
    async with with_the_role() as a:
        session = await a.create("slow")
        async with Engine.open(url, config=config) as b:  # no roles at all
            await b.enqueue(session.id, "go")
            settled, timed_out = await a.wait(session.id, 15)
            assert b.leases.held == []
        events = await check_log(a, session.id)
    assert not timed_out and settled.status == "completed" and settled.pending_inputs == 0
    assert [e.payload.outcome for e in events if isinstance(e.payload, TurnEnded)] == ["completed"]
    assert [engine for engine, event, _ in runs if event == "start"] == ["a"]
    left = [e.payload for e in events if isinstance(e.payload, RuntimeNotice) and e.payload.type == "runtime.warning"]
    assert len(left) == 1 and "'slow'" in left[0].message and b.leases.owner in left[0].message


async def test_a_stop_that_finds_nothing_running_leaves_the_waiting_work_to_an_engine_with_the_role(
    tmp_path: Path, url: str, scripted: Scripted
) -> None:
    """Once: input given to an agent while no engine with its role was open (a rolling deploy adding the role)
    waits for one, its lease handed over; a stop of the agent through an engine without the role found no turn to
    stop, yet deleted that lease (it had taken it to write the stop), so the engine with the role, opened again,
    never found the input: the agent stayed idle with it queued and no lease. Now the stop leaves the lease
    handed over, and that engine's sweep takes the work."""
    with_the_role, runs, config = engines_with_the_role(tmp_path, url, scripted, "leases-roleless-stop")
    async with with_the_role() as a:
        session = await a.create("slow")
    async with Engine.open(url, config=config) as b:  # no roles at all
        await b.enqueue(session.id, "go")
        await until(lambda: b.leases.held == [])
        assert not await b.stop(session.id)
        assert await b.store.get_lease(session.id) is not None
    async with with_the_role() as a:
        settled, timed_out = await a.wait(session.id, 10)
    assert not timed_out and settled.status == "completed" and settled.pending_inputs == 0
    assert [engine for engine, event, _ in runs if event == "start"] == ["a"]


async def test_sends_through_an_engine_without_the_role_say_so_once(
    tmp_path: Path, url: str, scripted: Scripted
) -> None:
    """Once: each send through an engine that lacks the agent's role wrote the same warning on the agent again."""
    with_the_role, runs, config = engines_with_the_role(tmp_path, url, scripted, "leases-roleless-sends")
    async with with_the_role() as a:
        session = await a.create("slow")
    async with Engine.open(url, config=config) as b:  # no roles at all
        for text in ("go", "and on", "and on again"):
            await b.enqueue(session.id, text)
            await until(lambda: b.leases.held == [])
        said = [e for e in await b.store.read_events(session.id, limit=100) if isinstance(e.payload, RuntimeNotice)]
    assert [(e.payload.type, e.payload.source) for e in said] == [("runtime.warning", "roster")]
    async with with_the_role() as a:
        settled, timed_out = await a.wait(session.id, 10)
    assert not timed_out and settled.pending_inputs == 0  # nothing sent was lost
    assert {engine for engine, event, _ in runs if event == "start"} == {"a"}


async def test_work_no_open_engine_has_the_role_for_is_said_on_the_agent_once_and_still_runs_later(
    tmp_path: Path, url: str, scripted: Scripted, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once: input queued on the store (`agentwatch send` with no service running) for an agent whose role no open
    engine has (a misspelt role file, a definition removed) waited unseen: the sweeps leave such work to an engine
    with the role, and `agent_get` said `idle`, input waiting, nothing more. Now an engine that sees the work wait
    says on the agent what to do (one `runtime.warning`, however many such engines), `agent_get` says why
    (`roleProblem`), and an engine opened with the role still runs the work. A wait on the agent (`agent_await`)
    that times out says the same (a scheduler waiting on it learns why nothing happens)."""
    monkeypatch.setattr(engines, "MAINTENANCE_SECONDS", 0.05)
    monkeypatch.setattr(leases_module, "UNCLAIMED_SECONDS", 0.3)
    with_the_role, runs, config = engines_with_the_role(tmp_path, url, scripted, "leases-unclaimed")
    async with with_the_role() as a:
        session = await a.create("slow")
    async with Engine.open(url, config=config, runs_turns=False) as acting:
        await acting.enqueue(session.id, "go")
    async with Engine.open(url, config=config) as b, Engine.open(url, config=config) as c:  # no roles at all
        await asyncio.sleep(1.5)  # many upkeep passes of each
        record = await c.call_tool("agent_get", {"id": session.id})
        awaited = await c.call_tool("agent_await", {"agentId": session.id, "timeoutMs": 200})
        events = await b.store.read_events(session.id, limit=100)
    said = [e.payload for e in events if isinstance(e.payload, RuntimeNotice) and e.payload.type == "runtime.warning"]
    assert len(said) == 1 and said[0].source == "roster", said
    assert "no engine open on this store runs agent type 'slow'" in said[0].message
    assert "delete the agent" in said[0].message and said[0].detail["role"] == "slow"  # type: ignore[index,call-overload]
    assert (record["status"], record["pendingInputs"]) == ("idle", 1)
    assert record["roleProblem"].startswith("no agent type 'slow'") and "delete the agent" in record["roleProblem"]
    assert awaited["timedOut"] and awaited["roleProblem"] == record["roleProblem"]  # a scheduler's wait says why
    async with with_the_role() as a:
        settled, timed_out = await a.wait(session.id, 10)
        record = await a.call_tool("agent_get", {"id": session.id})
        awaited = await a.call_tool("agent_await", {"agentId": session.id, "timeoutMs": 200})
    assert not timed_out and settled.status == "completed" and settled.pending_inputs == 0
    assert record["roleProblem"] is None and started(runs) != []
    assert not awaited["timedOut"] and awaited["roleProblem"] is None


async def test_the_turn_loop_and_the_upkeep_say_it_once_until_a_turn_runs(
    tmp_path: Path, url: str, scripted: Scripted, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once: the turn loop said on the agent that its engine cannot run it, a person took the agent over and handed
    it back (which changes nothing of why it waits), and the upkeep said again that no engine runs its role: the
    warning was said anew whenever anything else happened on the agent. It is said once until a turn runs on the
    agent, whichever path notices first; after a turn of an engine with the role, the next lack is said again."""
    monkeypatch.setattr(engines, "MAINTENANCE_SECONDS", 0.05)
    monkeypatch.setattr(leases_module, "UNCLAIMED_SECONDS", 0.3)
    with_the_role, _runs, config = engines_with_the_role(tmp_path, url, scripted, "leases-said-once")
    async with with_the_role() as a:
        session = await a.create("slow")

    async def roster_warnings(engine: Engine) -> int:
        events = await engine.store.read_events(session.id, limit=1000)
        return sum(isinstance(e.payload, RuntimeNotice) and e.payload.source == "roster" for e in events)

    async def without_the_role() -> int:
        async with Engine.open(url, config=config) as b:  # no roles at all
            await b.enqueue(session.id, "go")  # its turn loop says it cannot run the agent
            await until(lambda: b.leases.held == [])
            assert await b.call_tool("agent_take_over", {"id": session.id, "by": "ann"})
            assert await b.call_tool("agent_hand_back", {"id": session.id})
            await asyncio.sleep(1.0)  # many upkeep passes, long past UNCLAIMED_SECONDS
            return await roster_warnings(b)

    assert await without_the_role() == 1
    async with with_the_role() as a:
        settled, timed_out = await a.wait(session.id, 10)
    assert not timed_out and settled.pending_inputs == 0
    assert await without_the_role() == 2  # (a turn ran since: the lack is said again)


async def test_an_engine_without_the_role_says_so_on_every_agent_past_the_first_hundred(
    tmp_path: Path, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once: an engine that lacks a role read the lapsed leases 100 at a time, longest lapsed first, to say on each
    waiting agent that no engine runs its role; those it told stayed lapsed and first, so the agents past the
    first 100 were never told. Now it reads on past them."""
    monkeypatch.setattr(leases_module, "UNCLAIMED_SECONDS", -60.0)  # (every lapsed lease has waited long enough)
    waiting = 130
    config = lease_config(tmp_path)
    async with Engine.open(url, config=config, recover=False) as b:  # no roles; its upkeep tells nobody
        dead = new_owner()
        for number in range(waiting):
            session = await b.store.create_session(SessionDraft(name=f"waiting-{number}", role="slow"))
            await b.store.write(Write(session.id, inputs_add=[InputDraft(text="go")]))
            assert await b.store.acquire_lease(session.id, dead, 0.001)
        told = await b.leases.say_unclaimed(b)
        assert await b.leases.say_unclaimed(b) == 0  # told once
    assert told == waiting


async def cut_off_turn(url: str, session_id: str) -> tuple[str, LeaseRecord]:
    """Leave the session as a process that died mid-turn leaves it: a running turn and a lease nobody renews
    (expired already); returns that owner and its lease."""
    turn = TurnId("trn_dead")
    store = await connect_store(url)
    try:
        await store.write(
            Write(
                session_id,
                events=[NewEvent(TurnStarted(), turn), NewEvent(UserMessage(text="go"), turn)],
                session=SessionPatch(status="running", current_turn_id=turn, turn_attempts=1),
            )
        )
        dead = new_owner()
        assert await store.acquire_lease(session_id, dead, 0.001)
        lease = await store.get_lease(session_id)
    finally:
        await store.close()
    assert lease is not None
    return dead, lease


async def test_an_engine_without_the_role_opened_beside_a_dead_owners_turn_says_so_and_notes_no_takeover(
    tmp_path: Path, url: str, scripted: Scripted
) -> None:
    """Once, on a fleet: a service whose agents directory lacks a role, started while a turn of that role was cut
    off (its service killed), took the turn up at its start, wrote "this engine continues the session's turn",
    and then that it cannot run the agent. Now it only says that it cannot."""
    with_the_role, runs, config = engines_with_the_role(tmp_path, url, scripted, "leases-roleless-recovery")
    async with with_the_role() as a:
        session = await a.create("slow")
    await cut_off_turn(url, session.id)
    async with Engine.open(url, config=config) as b:  # no roles at all
        await asyncio.sleep(1.0)  # its start-up recovery, and a sweep or two
        events = await b.store.read_events(session.id, limit=100)
        assert b.leases.held == []
    notes = [e.payload for e in events if isinstance(e.payload, RuntimeNotice)]
    assert [(note.type, note.source) for note in notes] == [("runtime.warning", "roster")]
    assert b.leases.owner in notes[0].message and "cannot run this agent" in notes[0].message
    assert runs == []


@pytest.mark.parametrize("said_by", ["start-up", "upkeep"])
async def test_a_dead_owners_turn_that_waited_for_its_role_is_noted_as_taken_from_the_dead_owner(
    tmp_path: Path, url: str, scripted: Scripted, monkeypatch: pytest.MonkeyPatch, said_by: str
) -> None:
    """Once, on a fleet: the only service with a role was killed mid-turn; a service without the role said so on
    the agent (at its start, or once the work had waited 10 s) under the lease, taken over for a moment and handed
    over, and so left the lease in its own name. The service with the role, started again, continued the turn
    with a note naming the service that only said the warning as the owner that let the lease lapse, and when.
    Now the lease goes back as the dead owner left it."""
    monkeypatch.setattr(engines, "MAINTENANCE_SECONDS", 0.05)
    monkeypatch.setattr(leases_module, "UNCLAIMED_SECONDS", 0.3)
    with_the_role, _runs, config = engines_with_the_role(tmp_path, url, scripted, "leases-unclaimed-dead")
    async with with_the_role() as a:
        session = await a.create("slow")
    async with contextlib.AsyncExitStack() as stack:
        if said_by == "start-up":  # it takes the turn up as it opens, and says it cannot run it
            dead, left = await cut_off_turn(url, session.id)
        b = await stack.enter_async_context(Engine.open(url, config=config))  # no roles at all
        if said_by == "upkeep":  # it sees the work wait, and says that no engine runs it
            dead, left = await cut_off_turn(url, session.id)
        await asyncio.sleep(1.0)  # many upkeep passes
        kept = await b.store.get_lease(session.id)
        assert kept is not None and (kept.owner, kept.expires_at) == (dead, left.expires_at)
    async with with_the_role() as a:
        settled, timed_out = await a.wait(session.id, 10)
        events = await check_log(a, session.id)
    assert not timed_out and settled.status == "completed"
    said = [e.payload for e in events if isinstance(e.payload, RuntimeNotice) and e.payload.source == "roster"]
    assert len(said) == 1 and said[0].type == "runtime.warning"
    (taken,) = [e.payload for e in events if isinstance(e.payload, RuntimeNotice) and e.payload.source == "leases"]
    assert taken.detail is not None
    assert (taken.detail["previous_owner"], taken.detail["lease_expired_at"]) == (dead, left.expires_at.isoformat())


@contextlib.asynccontextmanager
async def owner_in_a_tool(
    tmp_path: Path, url: str, scripted: Scripted, name: str, seconds: float
) -> AsyncIterator[tuple[Engine, str, Runs]]:
    """Engine `a` (a lease of `LEASE`) with a session of role `slow` whose turn is inside a `seconds`-long tool
    call: the engine, the session id and the tool runs."""
    model = scripted(name, ScriptedModel(function=one_call_per_prompt))
    runs: Runs = []
    definition = role("slow", model, tools=("slow_tool",))
    config = lease_config(tmp_path)
    async with Engine.open(url, config=config, definitions=[definition], tools=[slow_tool(runs, "a", seconds)]) as a:
        session = await a.create("slow")
        await a.enqueue(session.id, "go")
        await until(lambda: bool(runs))
        yield a, session.id, runs


def pause_renewals(engine: Engine) -> Callable[[], Awaitable[list[str]]]:
    """Stop `engine` renewing its leases (as a paused or starved process); returns its renewal, to put back."""
    renew = engine.leases.renew

    async def paused() -> list[str]:
        return []

    engine.leases.renew = paused  # type: ignore[method-assign]
    return renew


@pytest.mark.parametrize("runs_turns", [True, False], ids=["engine", "acting-engine"])
@pytest.mark.parametrize("tool", ["agent_stop", "agent_delete"])
async def test_stop_and_delete_beside_a_live_owner_are_asked_of_the_owner_which_stops_its_turn_once(
    tmp_path: Path, url: str, scripted: Scripted, runs_turns: bool, tool: str
) -> None:
    """Once: a second engine's `agent_stop` answered `stopped: true` and wrote the turn's end, while the owner
    went on and ended the same turn `completed` (two `turn.ended`); later such a stop was refused, so behind a
    load balancer a stop worked only on the service that happened to run the turn. Now the other engine asks
    the owner (through the store), the owner stops its turn, and the answer comes once it has."""
    async with owner_in_a_tool(tmp_path, url, scripted, f"leases-{tool}", 30.0) as (a, session_id, runs):
        definition = a.roster.get("slow")
        b_args: dict[str, Any] = (
            {"definitions": [definition], "tools": [slow_tool(runs, "b", 1.5)]} if runs_turns else {"runs_turns": False}
        )
        async with Engine.open(url, config=a.config, **b_args) as b:
            asked = asyncio.get_running_loop().time()
            answer = await b.call_tool(tool, {"id": session_id})
            took = asyncio.get_running_loop().time() - asked
        settled, timed_out = await a.wait(session_id, 15)
        events = await check_log(a, session_id)
    assert "error" not in answer, answer
    assert took < 5, took  # the owner looks for stops about once a second
    assert not timed_out and settled.status == "cancelled"
    assert (settled.deleted_at is not None) == (tool == "agent_delete")
    ended = [e.payload for e in events if isinstance(e.payload, TurnEnded)]
    assert [e.outcome for e in ended] == ["cancelled"] and "a person" in str(ended[0].reason)
    assert [event for _, event, _ in runs] == ["start"]  # the tool never finished, and ran nowhere else


async def test_two_engines_stopping_one_paused_agent_at_once_end_its_turn_once(
    tmp_path: Path, url: str, scripted: Scripted
) -> None:
    """Once: both stops read the paused turn and both wrote its end (two `turn.ended`, its question dismissed
    twice): the one that did not get the lease wrote without it. The stop's write expects the status it read, so
    the later one finds the turn ended and says there was nothing left to stop."""
    model = scripted(
        "leases-two-stops", ScriptedModel(function=lambda ctx: CallTool("ask_user", {"question": "Which?"}))
    )
    config = lease_config(tmp_path)
    async with Engine.open(url, config=config, definitions=[role("asker", model, tools=("ask_user",))]) as a:
        snapshot = await a.task("asker", "go", timeout=10)
        assert snapshot["status"] == "awaiting_input"
        async with Engine.open(url, config=config, runs_turns=False) as b:
            stopped = await asyncio.gather(a.stop(snapshot["agentId"], by="ada"), b.stop(snapshot["agentId"], by="bo"))
        events = await check_log(a, snapshot["agentId"])
    ended = [e.payload for e in events if isinstance(e.payload, TurnEnded)]
    assert [e.outcome for e in ended] == ["paused", "cancelled"], ended
    assert sorted(stopped) == [False, True]
    assert len([e for e in events if e.type == "request.dismissed"]) == 1


async def test_an_answer_whose_caller_goes_away_mid_write_still_resumes_the_turn(
    tmp_path: Path, url: str, scripted: Scripted
) -> None:
    """Once: the answer's write landed (a store write runs to its end), but its caller's cancellation (a client
    that disconnected) let go of the lease taken for it, and its turn loop was never told: the answered turn
    stayed paused until a restart."""

    def asker(ctx: Any) -> Any:
        return (
            Reply(f"got {ctx.tool_results[0].output}") if ctx.tool_results else CallTool("ask_user", {"question": "?"})
        )

    model = scripted("leases-cancelled-answer", ScriptedModel(function=asker))
    definition = role("asker", model, tools=("ask_user",))
    async with Engine.open(url, config=lease_config(tmp_path), definitions=[definition]) as engine:
        paused = await engine.task("asker", "go", timeout=10)
        real = engine.store.write

        async def slow(write: Write) -> Any:  # the real store, a moment late (a busy disk)
            await asyncio.sleep(0.3)
            return await real(write)

        engine.store.write = slow  # type: ignore[method-assign]
        answering = asyncio.create_task(engine.answer(paused["pendingHitl"]["hitlId"], "red"))
        await asyncio.sleep(0.1)
        answering.cancel()
        await asyncio.gather(answering, return_exceptions=True)
        engine.store.write = real  # type: ignore[method-assign]
        settled = await engine.store.get_session(paused["agentId"])
        for _ in range(500):  # (not `wait`: it answers at once, a paused agent counting as settled)
            if settled.status == "completed":
                break
            await asyncio.sleep(0.02)
            settled = await engine.store.get_session(paused["agentId"])
    assert (settled.status, settled.last_text) == ("completed", "got red"), settled


async def test_a_claimed_write_that_fails_after_the_loop_let_go_leaves_no_lease_held(
    tmp_path: Path, url: str, scripted: Scripted
) -> None:
    """Once (while a failed claimed write let go of its lease only when no turn loop ran): one that failed just
    after the loop let the lease go, the loop being in its last look, kept the lease for good; input queued
    through another engine then waited for an owner that never looked."""
    model = scripted("leases-last-look", ScriptedModel.replying("ok", "and again"))
    config = lease_config(tmp_path)
    async with Engine.open(url, config=config, definitions=[role("r", model)]) as engine:
        session = await engine.create("r")
        leases = engine.leases
        let_go = leases.release
        failed: list[str] = []

        async def release(session_id: str) -> None:
            await let_go(session_id)
            task = asyncio.current_task()
            if not failed and task is not None and task.get_name().startswith("agentwatch-turns"):
                failed.append(session_id)  # the loop let go, and looks once more: a refused answer lands now
                with contextlib.suppress(Conflict):
                    async with claimed(engine, session_id):
                        raise Conflict("request already resolved")

        leases.release = release  # type: ignore[method-assign]
        await engine.enqueue(session.id, "hello")
        await until(lambda: bool(failed))
        await until(lambda: not engine.running_turns() and leases.held == [], timeout=5)
        async with Engine.open(url, config=config, definitions=[role("r", model)]) as other:
            await other.enqueue(session.id, "through another engine")
            settled, timed_out = await other.wait(session.id, 10)
    assert not timed_out and settled.last_text == "and again", settled


async def test_a_stop_that_an_answer_overtakes_looks_again_and_stops(
    tmp_path: Path, url: str, scripted: Scripted
) -> None:
    """Once: the answer (through another engine) landed after the stop read the pending request and before it
    wrote; the status was still `awaiting_input`, so the stop took itself for current and failed with "request
    ... is already resolved"."""
    model = scripted("leases-stop-answer", ScriptedModel(function=lambda ctx: CallTool("ask_user", {"question": "?"})))
    config = lease_config(tmp_path)
    async with Engine.open(url, config=config, definitions=[role("asker", model, tools=("ask_user",))]) as a:
        paused = await a.task("asker", "go", timeout=10)
        agent_id, hitl = paused["agentId"], paused["pendingHitl"]["hitlId"]
        async with Engine.open(url, config=config, runs_turns=False) as b:
            real = a.store.list_requests

            async def then_answered(*args: Any, **kwargs: Any) -> Any:  # the real store; an answer lands after it
                a.store.list_requests = real  # type: ignore[method-assign]
                seen = await real(*args, **kwargs)
                await b.answer(hitl, "red", by="bo")
                return seen

            a.store.list_requests = then_answered  # type: ignore[method-assign]
            stopped = await a.stop(agent_id, by="ada")
        events = await check_log(a, agent_id)
    assert stopped is True
    assert [e.payload.outcome for e in events if isinstance(e.payload, TurnEnded)] == ["paused", "cancelled"]


async def test_a_stop_beside_an_owner_whose_lease_lapsed_takes_it_over_and_cuts_the_owner_off(
    tmp_path: Path, url: str, scripted: Scripted
) -> None:
    """Once: an owner's renewal that came late (its lease lapsed in the store) let an acting engine write the
    stop, and the owner's late renewal then went through: its turn ran on to `completed` (two `turn.ended`).
    The stop takes the lapsed lease first, so the owner loses it and its turn is cut off."""
    async with owner_in_a_tool(tmp_path, url, scripted, "leases-lapsed", 3.0) as (a, session_id, _runs):
        renew = pause_renewals(a)  # renewals stuck behind other writes, as under load
        await asyncio.sleep(LEASE * 1.3)  # the lease lapses in the store; the owner and its turn go on
        async with Engine.open(url, config=a.config, runs_turns=False) as b:
            stopped = await b.call_tool("agent_stop", {"id": session_id})
        a.leases.renew = renew  # type: ignore[method-assign]
        await until(lambda: not a.running_turns(), timeout=15)
        events = await check_log(a, session_id)
        await a.enqueue(session_id, "again")  # the next turn finds no call open: none is answered twice
        settled, timed_out = await a.wait(session_id, 15)
        after = await check_log(a, session_id)
    assert not timed_out and settled.status == "completed"
    calls = [e.payload.tool_call_id for e in after if isinstance(e.payload, ToolResult)]
    assert len(calls) == len(set(calls)) == 2, calls
    assert stopped["stopped"] is True and stopped["status"] == "cancelled"
    assert [e.payload.outcome for e in events if isinstance(e.payload, TurnEnded)] == ["cancelled"]
    assert not [e for e in events if isinstance(e.payload, ToolResult) and e.seq > stopped_seq(events)]
    # Written where the turn was not running, the stop still closes the call the turn left open and counts what
    # the turn spent (once: no result for the call, and a usage of zero).
    assert [e.payload.status for e in events if isinstance(e.payload, ToolResult)] == ["interrupted"]
    (ended,) = [e.payload for e in events if isinstance(e.payload, TurnEnded)]
    assert ended.usage.total_tokens > 0 and ended.usage.requests == 1


@pytest.mark.parametrize("taken_again_by", ["sweep", "input"])
async def test_an_owner_that_takes_its_lost_lease_again_writes_nothing_more_of_the_turn_it_lost(
    tmp_path: Path, url: str, scripted: Scripted, monkeypatch: pytest.MonkeyPatch, taken_again_by: str
) -> None:
    """Once, under load: an acting engine's stop took an owner's lapsed lease over and ended the turn, and the
    owner, its turn still inside a tool, took the lease again (its sweep found the stopper's lease, which an
    acting engine hands over at once, before the stopper let it go; or input it was given took it). The old turn
    then counted as holding the lease: its tool's result and a second `turn.ended` followed the stop's. A turn
    writes only under the take it began with; a take that finds the lease lost first starts a new one."""
    async with owner_in_a_tool(tmp_path, url, scripted, "leases-taken-again", 3.0) as (a, session_id, runs):
        renew = pause_renewals(a)
        await asyncio.sleep(LEASE * 1.3)  # the lease lapses in the store; the owner and its turn go on
        async with Engine.open(url, config=a.config, runs_turns=False) as b:
            if taken_again_by == "sweep":  # the stopper lets go late: the owner's sweeps find its expired lease
                release = b.store.release_lease

                async def late_release(session: str, owner: str) -> None:
                    await asyncio.sleep(0.8)
                    await release(session, owner)

                monkeypatch.setattr(b.store, "release_lease", late_release)
            stopped = await b.call_tool("agent_stop", {"id": session_id})
        if taken_again_by == "input":
            await a.enqueue(session_id, "again")
        assert runs[-1][1] == "start"  # the owner's tool still runs
        a.leases.renew = renew  # type: ignore[method-assign]
        await until(lambda: runs[-1][1] == "end", timeout=10)
        await asyncio.sleep(0.5)  # whatever the old turn would write after its tool
        events = await check_log(a, session_id)
    assert stopped["stopped"] is True
    assert [e.payload.status for e in events if isinstance(e.payload, ToolResult)] == ["interrupted"]
    assert [e.payload.outcome for e in events if isinstance(e.payload, TurnEnded)] == ["cancelled"]


async def test_a_stop_through_an_owner_whose_lease_was_taken_over_cuts_its_turn_off_and_writes_no_second_end(
    tmp_path: Path, url: str, scripted: Scripted
) -> None:
    """A stop through the owner itself, after another engine took its lapsed lease over and ended the turn (the
    owner, inside a tool, not knowing yet): the stop took the free lease in the owner's name, so the old turn,
    stopped, wrote its end (and its tool's result) after the other engine's. The stop makes sure of the lease
    first: found lost, the old turn is cut off, and the stop is written only if the store says a turn still runs."""
    async with owner_in_a_tool(tmp_path, url, scripted, "leases-stop-through-owner", 3.0) as (a, session_id, runs):
        pause_renewals(a)
        a.leases.sweeping = False  # (its sweep would take the stopper's handed-over lease, as it may)
        await asyncio.sleep(LEASE * 1.3)  # the lease lapses in the store; the owner and its turn go on
        async with Engine.open(url, config=a.config, runs_turns=False) as b:
            await b.call_tool("agent_stop", {"id": session_id})
        assert runs[-1][1] == "start"  # the owner's tool still runs
        await a.stop(session_id, by="a second person")
        await until(lambda: not a.running_turns(), timeout=10)
        events = await check_log(a, session_id)
    assert [e.payload.outcome for e in events if isinstance(e.payload, TurnEnded)] == ["cancelled"]
    assert [e.payload.status for e in events if isinstance(e.payload, ToolResult)] == ["interrupted"]


def stopped_seq(events: list[Any]) -> int:
    """The seq of the turn's end (the stop)."""
    return next(e.seq for e in events if isinstance(e.payload, TurnEnded))


async def test_an_owner_that_lost_its_lease_while_a_tool_ran_writes_nothing_of_it(
    tmp_path: Path, url: str, scripted: Scripted
) -> None:
    """Once: an owner paused (or starved) past its lease while a tool ran came back and committed the tool's
    result into the turn another engine had taken over (a second result for one call, in the middle of the new
    owner's turn). The result is written only once the store confirms the lease."""
    async with owner_in_a_tool(tmp_path, url, scripted, "leases-paused", 3.0) as (a, session_id, runs):
        pause_renewals(a)  # the process stopped: nothing renews
        definition = a.roster.get("slow")
        async with Engine.open(url, config=a.config, definitions=[definition], tools=[slow_tool(runs, "b", 0.1)]) as b:
            settled, timed_out = await b.wait(session_id, 15)  # b takes the lapsed lease over and continues
            await until(lambda: runs.count(("a", "end", runs[0][2])) == 1, timeout=10)  # a's tool came back
            await asyncio.sleep(0.5)
            events = await check_log(b, session_id)
    assert not timed_out and settled.status == "completed"
    results = [(e.payload.tool_call_id, e.payload.status) for e in events if isinstance(e.payload, ToolResult)]
    assert len(results) == len({call for call, _ in results}), results  # one result per call
    assert results[0][1] == "interrupted"  # a's call, as b found it


async def test_an_owner_that_lost_its_lease_while_its_model_streamed_writes_nothing_of_the_response(
    tmp_path: Path, url: str, scripted: Scripted
) -> None:
    """As with a tool's result: an owner paused past its lease while its model streamed committed the response
    into the turn another engine had continued. The response is written only once the store confirms the lease."""
    words = " ".join(f"w{i}" for i in range(60))
    model = scripted("leases-streaming", ScriptedModel(function=lambda ctx: Reply(words), chunk_delay=0.05))
    definition = role("talker", model)
    config = lease_config(tmp_path)
    async with Engine.open(url, config=config, definitions=[definition]) as a:
        session = await a.create("talker")
        await a.enqueue(session.id, "talk")
        await until(lambda: bool(a.running_turns()))
        await asyncio.sleep(0.3)  # streaming
        pause_renewals(a)
        async with Engine.open(url, config=config, definitions=[definition]) as b:
            settled, timed_out = await b.wait(session.id, 15)  # b takes the lapsed lease over and continues
            await until(lambda: not a.running_turns(), timeout=15)  # a's stream ended, and its turn with it
            await asyncio.sleep(0.3)
            events = await check_log(b, session.id)
    assert not timed_out and settled.status == "completed"
    finished = [e for e in events if isinstance(e.payload, CompletionFinished)]
    ended = [e for e in events if isinstance(e.payload, TurnEnded)]
    assert len(ended) == 1 and len(finished) == 1, [e.type for e in events]  # b's response alone
    assert finished[0].seq < ended[0].seq


async def test_input_queued_by_another_engine_is_run_by_the_owner(tmp_path: Path, url: str, scripted: Scripted) -> None:
    model = scripted("leases-queue", ScriptedModel(function=one_call_per_prompt))
    runs: Runs = []
    config = lease_config(tmp_path)
    definition = role("slow", model, tools=("slow_tool",))
    async with Engine.open(url, config=config, definitions=[definition], tools=[slow_tool(runs, "a", 1.0)]) as a:
        session = await a.create("slow", source="chat")
        await a.enqueue(session.id, "first")
        await until(lambda: bool(runs))
        async with Engine.open(url, config=config, definitions=[definition], tools=[slow_tool(runs, "b", 1.0)]) as b:
            await b.enqueue(session.id, "second")  # while a's turn runs: left for a
            await until(lambda: len(started(runs)) == 2, timeout=15)
            settled, timed_out = await a.wait(session.id, 15)
            assert b.leases.held == []
        events = await check_log(a, session.id)
    assert not timed_out and settled.status == "idle" and settled.pending_inputs == 0
    assert [engine for engine, event, _ in runs if event == "start"] == ["a", "a"]
    prompts = [e.payload.text for e in events if isinstance(e.payload, UserMessage)]
    assert prompts == ["first", "second"]
    assert len(set(started(runs))) == 2


async def test_a_wait_goes_on_for_input_another_engine_queued_as_the_agent_was_stopped(
    tmp_path: Path, postgres_url: str, scripted: Scripted, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wait on a stopped agent ends when the input it has came before the stop (it waits for the next input),
    and goes on when it came after (it starts a turn). Which came first was read from the times of the two
    writes, each taken before its transaction locked the session's row: an input another engine queued as the
    agent was stopped, whose write took its time first but locked the row after the stop's, was stamped before
    the stop's `turn.ended` though it landed after it, and the wait ended as its turn began."""
    busy = HeldTool("dig")
    read_counters, late, locking, lock = _events.read_counters, [], asyncio.Event(), asyncio.Event()

    async def late_lock(*args: Any) -> Any:  # the input's write: its time taken, the row's lock not yet
        if late and late.pop():
            locking.set()
            await lock.wait()
        return await read_counters(*args)

    monkeypatch.setattr(_events, "read_counters", late_lock)
    config = lease_config(tmp_path)
    definitions = [busy.role("digger", scripted, "leases-stop-then-input")]
    with postgres_schema(postgres_url) as url:
        async with Engine.open(url, config=config, definitions=definitions, tools=[busy.tool]) as a:
            agent = await a.create("digger", source="chat")
            await a.enqueue(agent.id, "dig")
            await asyncio.wait_for(busy.started.wait(), 10)
            async with Engine.open(url, config=config, runs_turns=False) as b:
                late.append(True)
                queuing = asyncio.create_task(b.enqueue(agent.id, "dig elsewhere"))
                await asyncio.wait_for(locking.wait(), 10)
                try:
                    assert await a.stop(agent.id, by="ada") is True
                finally:
                    lock.set()
                await queuing
            busy.release.set()
            settled, timed_out = await a.wait(agent.id, 10)
            events = await check_log(a, agent.id)
    assert not timed_out and settled.status == "idle" and settled.pending_inputs == 0
    assert [e.payload.text for e in events if isinstance(e.payload, UserMessage)] == ["dig", "dig elsewhere"]


async def test_input_whose_engine_dies_as_it_lands_after_the_owner_let_go_is_run(
    tmp_path: Path, url: str, scripted: Scripted
) -> None:
    """A session could stay idle with an input waiting for good (one did once, with engine processes killed one
    after another on PostgreSQL): the engine that queued it found the lease held by the session's owner, so
    left the work to it; the owner's turn ended, it let the lease go and looked once more before the input
    landed; the engine that queued it died before its own turn loop took the lease. No lease was left for a
    sweep to find. The write now claims the lease, and takes it when the owner let it go first: the lease
    expires, and the owner's sweep finds it."""
    model = scripted("leases-late-input", ScriptedModel(function=one_call_per_prompt))
    tool_started, tool_done = asyncio.Event(), asyncio.Event()

    async def slow_tool(label: str) -> str:
        tool_started.set()
        await tool_done.wait()
        return f"did {label}"

    config = lease_config(tmp_path)
    definition = role("slow", model, tools=("slow_tool",))
    async with Engine.open(url, config=config, definitions=[definition], tools=[slow_tool]) as a:
        session = await a.create("slow", source="chat")
        await a.enqueue(session.id, "first")
        await asyncio.wait_for(tool_started.wait(), 10)
        async with Engine.open(url, config=config, definitions=[definition]) as b:
            takes: list[Any] = []
            take, write = b.store.take_lease, b.store.write
            landing, land = asyncio.Event(), asyncio.Event()

            async def noted_take(*args: Any) -> Any:
                takes.append(await take(*args))
                return takes[-1]

            async def late_write(item: Write) -> Any:  # the input lands once `land` is set
                if item.inputs_add:
                    landing.set()
                    await land.wait()
                return await write(item)

            b.store.take_lease = noted_take  # type: ignore[method-assign]
            b.store.write = late_write  # type: ignore[method-assign]
            (await b.driver(session.id)).kick = lambda: None  # type: ignore[method-assign]  # b dies once it lands
            queuing = asyncio.create_task(b.enqueue(session.id, "second"))
            await asyncio.wait_for(landing.wait(), 10)
            await until(lambda: takes == [False])  # a holds the lease: the input is left to it
            tool_done.set()
            await until(lambda: not a.running_turns() and a.leases.held == [])  # a let go, and looked
            land.set()
            assert await queuing == 1
            lease = await a.store.get_lease(session.id)
            assert lease is not None and lease.owner == b.leases.owner  # the input's write took the lease
        settled, timed_out = await a.wait(session.id, 10)
        events = await check_log(a, session.id)
    assert not timed_out and settled.status == "idle" and settled.pending_inputs == 0, settled
    assert [e.payload.text for e in events if isinstance(e.payload, UserMessage)] == ["first", "second"]


async def test_a_dead_owners_turn_continues_within_the_lease_plus_a_second(
    tmp_path: Path, url: str, scripted: Scripted
) -> None:
    model = scripted("leases-dead", ScriptedModel(function=one_call_per_prompt))
    runs: Runs = []
    config = lease_config(tmp_path)
    definition = role("slow", model, tools=("slow_tool",))
    async with Engine.open(url, config=config, definitions=[definition], tools=[slow_tool(runs, "b", 0.1)]) as b:
        # What a process that died mid-turn leaves: a running turn and a lease nobody renews.
        session = await b.create("slow")
        turn = TurnId("trn_dead")
        await b.store.write(
            Write(
                session.id,
                events=[NewEvent(TurnStarted(), turn), NewEvent(UserMessage(text="go"), turn)],
                session=SessionPatch(status="running", current_turn_id=turn, turn_attempts=1),
            )
        )
        dead = new_owner()
        assert await b.store.acquire_lease(session.id, dead, LEASE)
        lease = await b.store.get_lease(session.id)
        assert lease is not None
        settled, timed_out = await b.wait(session.id, 15)
        events = await check_log(b, session.id)
    assert not timed_out and settled.status == "completed"
    continued = [e for e in events if isinstance(e.payload, TurnStarted) and e.payload.trigger == "continue"]
    assert len(continued) == 1
    (notice,) = [e for e in events if isinstance(e.payload, RuntimeNotice) and e.payload.source == "leases"]
    assert notice.payload.detail["previous_owner"] == dead
    taken = (notice.at - lease.expires_at).total_seconds()
    assert taken <= 1.0, f"taken over {taken:.2f} s after the lease expired"
    # The continuation's turn.started is written with the first model response (the runtime pipelines it).
    assert (continued[0].at - lease.expires_at).total_seconds() <= 2.0
    assert b.leases.takeovers == 1
    assert started(runs) and len(set(started(runs))) == len(started(runs))


ORPHANS = 12
"""How many turns the dead owner of the spread tests leaves (the fleet trial's kill orphaned 11)."""


async def dead_owners_turns(engine: Engine, lease: float) -> tuple[str, dict[str, LeaseRecord]]:
    """Leave `ORPHANS` sessions of role `slow` as a process that died with their turns running leaves them:
    running turns, and leases of `lease` seconds nobody renews. Returns that owner and its lease per session."""
    dead, ids = await cut_off_turns(engine, ORPHANS, lease, "orphan")
    leases = {}
    for session_id in ids:
        left = await engine.store.get_lease(session_id)
        assert left is not None
        leases[session_id] = left
    return dead, leases


async def cut_off_turns(engine: Engine, count: int, lease: float, name: str) -> tuple[str, list[str]]:
    """Leave `count` sessions of role `slow` (named `name`-N) as a process that died with their turns running
    leaves them: running turns, and leases of `lease` seconds nobody renews. Returns that owner and the sessions."""
    dead, ids = new_owner(), []
    for number in range(count):
        session = await engine.create("slow", name=f"{name}-{number}")
        turn = TurnId(f"trn_{name}_{number}")
        await engine.store.write(
            Write(
                session.id,
                events=[NewEvent(TurnStarted(), turn), NewEvent(UserMessage(text="go"), turn)],
                session=SessionPatch(status="running", current_turn_id=turn, turn_attempts=1),
            )
        )
        assert await engine.store.acquire_lease(session.id, dead, lease)
        ids.append(session.id)
    return dead, ids


@pytest.mark.parametrize("survivors", [1, 2])
async def test_a_dead_owners_turns_are_spread_over_the_engines_with_the_role_each_continued_once(
    tmp_path: Path, url: str, scripted: Scripted, survivors: int
) -> None:
    """Once, on a fleet: every turn a killed service owned went to one surviving service, whose first sweep took
    all of them (up to 100). Now a sweep takes a share of the orphans it finds, so the other engines' sweeps get
    some; an engine alone still takes them all within the lease plus a second."""
    model = scripted("leases-spread", ScriptedModel(function=one_call_per_prompt))
    runs: Runs = []
    config = lease_config(tmp_path)
    definition = role("slow", model, tools=("slow_tool",))
    async with contextlib.AsyncExitStack() as stack:
        engines = [
            await stack.enter_async_context(
                Engine.open(url, config=config, definitions=[definition], tools=[slow_tool(runs, name, 0.1)])
            )
            for name in "bc"[:survivors]
        ]
        dead, leases = await dead_owners_turns(engines[0], LEASE)
        for session_id in leases:
            settled, timed_out = await engines[0].wait(session_id, 15)
            assert not timed_out and settled.status == "completed", settled
        logs = {session_id: await check_log(engines[0], session_id) for session_id in leases}
        takeovers = [engine.leases.takeovers for engine in engines]
    takers: list[str] = []
    for session_id, events in logs.items():
        (note,) = [e for e in events if isinstance(e.payload, RuntimeNotice) and e.payload.source == "leases"]
        assert note.payload.detail["previous_owner"] == dead
        takers.append(note.payload.detail["owner"])
        taken = (note.at - leases[session_id].expires_at).total_seconds()
        assert taken <= 1.0, f"taken over {taken:.2f} s after the lease expired"
        continued = [e for e in events if isinstance(e.payload, TurnStarted) and e.payload.trigger == "continue"]
        assert len(continued) == 1
    assert len(started(runs)) == ORPHANS and len(set(started(runs))) == ORPHANS  # each continued once
    assert sum(takeovers) == ORPHANS
    assert sorted(takers.count(engine.leases.owner) for engine in engines) == sorted(takeovers)
    assert all(takeovers), f"the orphaned turns were not spread: {takeovers} per engine"


def sweeps_recorded(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """How many turns each engine (by its owner) had taken over at the end of each of its sweeps, in order."""
    swept: dict[str, list[int]] = collections.defaultdict(list)
    sweep = Leases.sweep

    async def recorded(self: Leases, runtime: Any) -> int:
        taken = await sweep(self, runtime)
        swept[self.owner].append(self.takeovers)
        return taken

    monkeypatch.setattr(Leases, "sweep", recorded)
    return swept


def check_continued_once(logs: dict[str, list[Any]], dead: str, runs: Runs) -> list[str]:
    """Check that each of the dead owner's turns (their sessions' `logs`) was continued once, with a note naming
    the dead owner; returns the owner that took each one over."""
    takers: list[str] = []
    for events in logs.values():
        (note,) = [e for e in events if isinstance(e.payload, RuntimeNotice) and e.payload.source == "leases"]
        assert note.payload.detail["previous_owner"] == dead
        takers.append(note.payload.detail["owner"])
        continued = [e for e in events if isinstance(e.payload, TurnStarted) and e.payload.trigger == "continue"]
        assert len(continued) == 1
    assert len(started(runs)) == len(logs) and len(set(started(runs))) == len(logs)  # each tool run once
    return takers


async def test_an_engine_started_beside_a_dead_owners_turns_takes_a_share_and_leaves_the_rest_to_the_others(
    tmp_path: Path, url: str, scripted: Scripted, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once, on a fleet: a service started while a killed service's turns waited to be taken over took every one
    of them as it started (its start-up ran each unfinished turn whose lease it could take, lapsed ones too),
    and the services already running got none. Now start-up leaves lapsed leases to the sweep, whose first one
    runs as the engine starts: the newcomer takes its share, like any sweep, and the others' sweeps the rest."""
    monkeypatch.setattr(leases_module, "SWEEP_SECONDS", 3600.0)  # one sweep, at start: the test sweeps by hand
    swept = sweeps_recorded(monkeypatch)
    model = scripted("leases-start-share", ScriptedModel(function=one_call_per_prompt))
    runs: Runs = []
    config = lease_config(tmp_path, lease=300.0)  # (renewed every 100 s: no sweep with the renewals either)
    definition = role("slow", model, tools=("slow_tool",))
    async with contextlib.AsyncExitStack() as stack:
        a = await stack.enter_async_context(
            Engine.open(url, config=config, definitions=[definition], tools=[slow_tool(runs, "a", 0.1)])
        )
        dead, leases = await dead_owners_turns(a, 300.0)
        await a.store.renew_leases(dead, list(leases), 0.001)  # they lapse now, while no sweep of `a` runs
        b = await stack.enter_async_context(
            Engine.open(url, config=config, definitions=[definition], tools=[slow_tool(runs, "b", 0.1)])
        )
        await until(lambda: bool(swept[b.leases.owner]) or b.leases.takeovers == ORPHANS)
        await a.leases.sweep(a)  # the running engine's next sweep
        await b.leases.sweep(b)  # and the newcomer's, which takes what its first one saw and nobody took
        for session_id in leases:
            settled, timed_out = await a.wait(session_id, 15)
            assert not timed_out and settled.status == "completed", settled
        logs = {session_id: await check_log(a, session_id) for session_id in leases}
    takers = check_continued_once(logs, dead, runs)
    took = [b.leases.takeovers, a.leases.takeovers]
    assert took == [ORPHANS - TAKEOVER_SHARE, TAKEOVER_SHARE], f"taken over per engine (newcomer first): {took}"
    assert [takers.count(b.leases.owner), takers.count(a.leases.owner)] == took
    assert swept[b.leases.owner] == [TAKEOVER_SHARE, ORPHANS - TAKEOVER_SHARE]


async def test_an_engine_started_alone_on_a_dead_owners_turns_takes_them_all_by_its_second_sweep(
    tmp_path: Path, url: str, scripted: Scripted, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Start-up leaves lapsed leases to the sweep (see above); a service restarted alone after a crash still
    continues all of its turns at once: its first sweep runs as it starts and takes its share, its second, a
    quarter second later, all that the first saw and nobody took."""
    swept = sweeps_recorded(monkeypatch)
    model = scripted("leases-start-alone", ScriptedModel(function=one_call_per_prompt))
    runs: Runs = []
    config = lease_config(tmp_path)
    definition = role("slow", model, tools=("slow_tool",))
    tools = [slow_tool(runs, "a", 0.1)]
    async with Engine.open(url, config=config, definitions=[definition], tools=tools, recover=False) as maker:
        dead, leases = await dead_owners_turns(maker, 0.001)  # lapsed already (and `maker` sweeps for none)
    async with Engine.open(url, config=config, definitions=[definition], tools=tools) as a:
        for session_id in leases:
            settled, timed_out = await a.wait(session_id, 15)
            assert not timed_out and settled.status == "completed", settled
        logs = {session_id: await check_log(a, session_id) for session_id in leases}
        await until(lambda: len(swept[a.leases.owner]) >= 2)
    assert check_continued_once(logs, dead, runs) == [a.leases.owner] * ORPHANS
    assert swept[a.leases.owner][1] == ORPHANS, f"taken over by the end of each sweep: {swept[a.leases.owner]}"


LAPSED = 300
"""How many lapsed turns the restarted engine finds: three pages of the sweep's store read."""
PACED_SWEEP_SECONDS = 3.0
"""The sweeps' period in the test of many lapsed turns: long beside what taking them over costs on a loaded
machine, so that how many sweeps it takes to continue them all shows in the time they take."""


async def test_an_engine_restarted_alone_continues_hundreds_of_lapsed_turns_by_its_second_sweep(
    tmp_path: Path, url: str, scripted: Scripted, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once: a service restarted after a crash with more than 100 turns cut off continued them 100 per two sweeps
    (1,000 took 5 s to start), though nothing else wanted them: its sweep read the lapsed leases 100 at a time,
    took its share of those it saw first, and the others at its next sweep. Now a sweep reads them all, a page
    after the other, so its second one takes every one the first saw and nobody took meanwhile."""
    monkeypatch.setattr(leases_module, "SWEEP_SECONDS", PACED_SWEEP_SECONDS)
    swept = sweeps_recorded(monkeypatch)
    model = scripted("leases-restart-many", ScriptedModel(function=one_call_per_prompt))
    runs: Runs = []
    release = asyncio.Event()

    async def slow_tool(label: str) -> str:  # held until every turn continued: none ends and frees its lease
        runs.append(("a", "start", label))
        await release.wait()
        return f"did {label}"

    config = lease_config(tmp_path, lease=30.0)  # (no lease lapses under load: a turn taken is taken once)
    definition = role("slow", model, tools=("slow_tool",))
    async with Engine.open(url, config=config, definitions=[definition], tools=[slow_tool], recover=False) as maker:
        dead, ids = await cut_off_turns(maker, LAPSED, 0.001, "lapsed")
    began = time.monotonic()
    async with Engine.open(url, config=config, definitions=[definition], tools=[slow_tool]) as a:
        await until(lambda: len(runs) >= LAPSED, timeout=60)
        took = time.monotonic() - began
        release.set()
        for session_id in ids:
            settled, timed_out = await a.wait(session_id, 60)
            assert not timed_out and settled.status == "completed", settled
        logs = {session_id: await check_log(a, session_id) for session_id in ids}
    assert check_continued_once(logs, dead, runs) == [a.leases.owner] * LAPSED
    assert swept[a.leases.owner][1] == LAPSED, f"taken over by the end of each sweep: {swept[a.leases.owner]}"
    # Two sweeps a period apart, and the takes (seconds on a loaded machine); paced a page per two sweeps, the third
    # page's turns would have come five periods after the first sweep, at the earliest.
    assert took < 4 * PACED_SWEEP_SECONDS, f"{LAPSED} lapsed turns took {took:.1f} s to continue"


async def test_work_a_draining_owner_handed_over_starts_a_turn_with_no_takeover_note(
    tmp_path: Path, url: str, scripted: Scripted, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once, on a fleet: input queued through one service while another (draining for a deploy) ran the agent's
    turn waited for that turn's end and was handed over; the sweep that took it started the turn loop before it
    read whether a turn was cut off, so with that read answered late (a busy store), it found the new turn
    running and wrote "this engine continues the session's turn" in the middle of a turn that continued
    nothing. Now the takeover is noted before the loop looks for work, from the state the previous owner left."""
    model = scripted("leases-handed-input", ScriptedModel(function=one_call_per_prompt))
    runs: Runs = []
    note_takeover = Leases.note_takeover

    async def late_note(self: Leases, runtime: Any, lease: Any) -> None:  # its read answered late
        await asyncio.sleep(0.3)
        await note_takeover(self, runtime, lease)

    monkeypatch.setattr(Leases, "note_takeover", late_note)
    config = lease_config(tmp_path)
    definition = role("slow", model, tools=("slow_tool",))
    async with Engine.open(url, config=config, definitions=[definition], tools=[slow_tool(runs, "b", 1.0)]) as b:
        # What a draining owner leaves: its turn ended, input queued meanwhile, the lease handed over.
        session = await b.create("slow")
        assert await b.store.acquire_lease(session.id, new_owner(), 0.001)
        await b.store.write(Write(session.id, inputs_add=[InputDraft(text="go")]))
        await until(lambda: b.leases.takeovers == 1)
        settled, timed_out = await b.wait(session.id, 15)
        events = await check_log(b, session.id)
    assert not timed_out and settled.status == "completed" and settled.pending_inputs == 0
    assert [e.payload.trigger for e in events if isinstance(e.payload, TurnStarted)] == ["input"]
    assert [e.payload.message for e in events if isinstance(e.payload, RuntimeNotice)] == []


async def test_a_closing_engine_hands_its_turn_over_at_once(tmp_path: Path, url: str, scripted: Scripted) -> None:
    model = scripted("leases-close", ScriptedModel(function=one_call_per_prompt))
    runs: Runs = []
    config = lease_config(tmp_path, lease=30.0)  # waiting for expiry would take 30 s
    definition = role("slow", model, tools=("slow_tool",))
    async with Engine.open(url, config=config, definitions=[definition], tools=[slow_tool(runs, "b", 0.5)]) as b:
        async with Engine.open(url, config=config, definitions=[definition], tools=[slow_tool(runs, "a", 5.0)]) as a:
            session = await a.create("slow")
            await a.enqueue(session.id, "go")
            await until(lambda: bool(runs))
        closed = datetime.now(UTC)
        settled, timed_out = await b.wait(session.id, 15)
        events = await check_log(b, session.id)
    assert not timed_out and settled.status == "completed"
    continued = [e for e in events if isinstance(e.payload, TurnStarted) and e.payload.trigger == "continue"]
    assert len(continued) == 1 and (continued[0].at - closed).total_seconds() <= 1.5
    results = [e.payload.status for e in events if isinstance(e.payload, ToolResult)]
    assert results == ["interrupted"]  # a's call is reported cut off and not run again
    assert [(engine, event) for engine, event, _ in runs] == [("a", "start")]


async def test_a_lost_lease_cuts_the_turn_off_and_records_nothing(tmp_path: Path, url: str, scripted: Scripted) -> None:
    model = scripted("leases-lost", ScriptedModel(function=one_call_per_prompt))
    runs: Runs = []
    config = lease_config(tmp_path)
    async with Engine.open(
        url, config=config, definitions=[role("slow", model, tools=("slow_tool",))], tools=[slow_tool(runs, "a", 3.0)]
    ) as a:
        session = await a.create("slow")
        await a.enqueue(session.id, "go")
        await until(lambda: bool(runs))
        # Another owner takes the lease over (as after a stall past its expiry).
        await a.store.release_lease(session.id, a.leases.owner)
        assert await a.store.acquire_lease(session.id, "own_thief", 60)
        before = await a.store.read_events(session.id, limit=10_000)
        await until(lambda: not (a._drivers[session.id].turn_running), timeout=5)
        after = await a.store.read_events(session.id, limit=10_000)
        current = await a.store.get_session(session.id)
    assert [e.type for e in after] == [e.type for e in before], "the engine that lost the lease still wrote"
    assert current.status == "running"  # left for the new owner
    assert [(engine, event) for engine, event, _ in runs] == [("a", "start")]  # cancelled, never finished


def test_the_lease_length_comes_from_the_config_and_the_environment(tmp_path: Path) -> None:
    assert load_config(tmp_path, env={}).sessions.lease_seconds == 15
    assert load_config(tmp_path, env={"AGENTWATCH_LEASE_SECONDS": "2.5"}).sessions.lease_seconds == 2.5
    (tmp_path / "agentwatch.toml").write_text("[sessions]\nlease_seconds = 4\nlease_renew_seconds = 1\n")
    sessions = load_config(tmp_path, env={}).sessions
    assert (sessions.lease_seconds, sessions.lease_renew_seconds) == (4, 1)


def test_owners_are_distinct_per_engine() -> None:
    owners = {new_owner() for _ in range(100)}
    assert len(owners) == 100
    assert all(owner.startswith("own_") for owner in owners)


@pytest.mark.parametrize("lease", [1.5, 15.0])
async def test_a_lease_counts_as_held_only_before_its_expiry(tmp_path: Path, lease: float) -> None:
    # The short lease must outlast the acquire and the other engine's refused acquire on a loaded machine.
    async with Engine.open(f"sqlite:///{tmp_path / 'aw.db'}", config=lease_config(tmp_path)) as engine:
        created = await engine.store.create_session(_draft())
        leases = Leases(engine.store, ttl=lease)
        assert not leases.holds(created.id)
        assert await leases.acquire(created.id)
        assert leases.holds(created.id)
        other = Leases(engine.store, ttl=lease)
        assert not await other.acquire(created.id)
        if lease < 10:
            await asyncio.sleep(lease + 0.05)
            assert not leases.holds(created.id)  # past its local deadline, renewed or not
            assert await other.acquire(created.id)
            assert await leases.renew() == [created.id]
        await leases.release(created.id)


def _draft() -> SessionDraft:
    return SessionDraft(name=f"s-{uuid.uuid4().hex[:6]}", role="any")


async def test_a_take_asked_after_a_release_is_never_undone_by_it(url: str) -> None:
    """The turn loop lets a lease go (nothing left to do) just as new input takes it again: the release's
    delete must not land after the take, or the engine would believe it holds a lease the store no longer has
    (its next renewal finds it lost, and the turn is stranded with nobody to continue it). PostgreSQL runs the
    two on different connections, so without ordering the delete lands last now and then (2 in 200 seen)."""
    store = await connect_store(url)
    try:
        leases = Leases(store, ttl=30)
        undone = []
        for n in range(300):
            session = await store.create_session(SessionDraft(name=f"race-{n}", role="r"))
            await leases.acquire(session.id)
            await asyncio.gather(leases.release(session.id), leases.acquire(session.id))
            lease = await store.get_lease(session.id)
            if session.id in leases.held and (lease is None or lease.owner != leases.owner):
                undone.append(session.id)
        assert undone == []
        assert await leases.renew() == []  # nothing this engine believes it holds is lost
    finally:
        await store.close()


@pytest.mark.parametrize("runs_turns", [True, False], ids=["engine", "acting-engine"])
async def test_a_stop_asked_of_an_owner_whose_turn_takes_long_to_end_lets_its_other_leases_be(
    tmp_path: Path, url: str, scripted: Scripted, runs_turns: bool
) -> None:
    """Once: the owner stopped an asked-for turn inside its lease loop, so while the turn's tool cleaned up (3 s)
    no lease of the owner was renewed, and another engine took over (and cut off) its other turns; and an acting
    engine gave up on the stop after 2 s (its own leases' 0.001 s), saying the owner might hang."""
    runs: list[str] = []

    async def slow_tool(label: str) -> str:
        runs.append("start")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await asyncio.sleep(3.0)  # a tool's clean-up on cancel (closing a browser, a subprocess ...)
            runs.append("cleaned")
            raise
        return "done"

    model = scripted(f"leases-slow-cancel-{runs_turns}", ScriptedModel(function=one_call_per_prompt))
    definition = role("slow", model, tools=("slow_tool",))
    config = lease_config(tmp_path)
    async with Engine.open(url, config=config, definitions=[definition], tools=[slow_tool]) as a:
        stopped, other = await a.create("slow"), await a.create("slow")
        for session in (stopped, other):
            await a.enqueue(session.id, "go")
        await until(lambda: len(runs) == 2)
        b_args: dict[str, Any] = (
            {"definitions": [definition], "tools": [slow_tool]} if runs_turns else {"runs_turns": False}
        )
        async with Engine.open(url, config=config, **b_args) as b:
            answer = await b.call_tool("agent_stop", {"id": stopped.id})
            assert (answer.get("stopped"), answer.get("status")) == (True, "cancelled"), answer
            assert b.leases.takeovers == 0 and a.leases.holds(other.id)
            assert (await b.store.get_session(other.id)).status == "running"
        events = await check_log(a, stopped.id)
    assert [e.payload.outcome for e in events if isinstance(e.payload, TurnEnded)] == ["cancelled"]
    assert runs.count("cleaned") == 2  # the stopped one, and the other one as `a` closed


class _Proxy:
    """A TCP proxy to a server, which `cut()` severs: the network between one engine and the store goes."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> _Proxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cut()

    def cut(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in self._writers:
            writer.transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self._writers += [writer, up_writer]

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            sink.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


async def test_an_owner_cut_off_from_the_store_stops_its_tool_before_another_engine_continues(
    tmp_path: Path, postgres_url: str, scripted: Scripted
) -> None:
    """Once: an owner that could no longer reach the store ran its tool to the end, while another engine had
    taken the turn over and told the model the call was gone: the tool's work was done twice at once. Now an
    owner whose renewals fail stops its turn, tools included, once its lease's time has run out."""
    from urllib.parse import urlsplit

    model = scripted("leases-fenced", ScriptedModel(function=one_call_per_prompt))
    definition = role("slow", model, tools=("slow_tool",))
    runs: Runs = []
    stopped_at: list[datetime] = []

    def tool(engine: str, seconds: float) -> Callable[..., Any]:
        async def slow_tool(label: str) -> str:
            runs.append((engine, "start", label))
            try:
                await asyncio.sleep(seconds)
            except asyncio.CancelledError:
                runs.append((engine, "stopped", label))
                stopped_at.append(datetime.now(UTC))
                raise
            runs.append((engine, "end", label))
            return f"{engine} did {label}"

        return slow_tool

    with postgres_schema(postgres_url) as url:
        parts = urlsplit(url)
        async with _Proxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
            behind = parts._replace(netloc=f"{parts.username}@127.0.0.1:{proxy.port}").geturl()
            config = lease_config(tmp_path)
            async with Engine.open(behind, config=config, definitions=[definition], tools=[tool("a", 30.0)]) as a:
                session = await a.create("slow")
                await a.enqueue(session.id, "go")
                await until(lambda: bool(runs))
                proxy.cut()  # a can no longer reach the store; b can
                async with Engine.open(url, config=config, definitions=[definition], tools=[tool("b", 0.1)]) as b:
                    settled, timed_out = await b.wait(session.id, 30)
                    events = await check_log(b, session.id)
    assert not timed_out and settled.status == "completed"
    assert [(engine, event) for engine, event, _ in runs] == [("a", "start"), ("a", "stopped")]  # never ran on
    (taken,) = [e for e in events if isinstance(e.payload, RuntimeNotice) and e.payload.source == "leases"]
    assert stopped_at[0] <= taken.at, (stopped_at, taken.at)  # stopped before b took the turn over
    results = [e.payload.status for e in events if isinstance(e.payload, ToolResult)]
    assert results == ["interrupted"]  # a's call, as b found it (not run again)


async def test_a_failure_the_store_has_answered_since_makes_no_lease_run_out(tmp_path: Path) -> None:
    """Once: a sweep that failed while no lease was held left the store marked unreachable, so a lease taken
    later was cut off at its first slow (but working) renewal."""
    from agentwatch.errors import StoreUnavailable

    store = await connect_store(f"sqlite:///{tmp_path / 'aw.db'}")
    try:
        session = await store.create_session(SessionDraft(name="n", role="r"))
        leases = Leases(store, ttl=LEASE)
        leases._note_failure(StoreUnavailable("lost the store"))
        assert await leases.acquire(session.id)  # the store answered
        leases._held[session.id] = 0.0  # the sure hold is over (as while a renewal is slow)
        assert leases.run_out() == []
        leases._note_failure(StoreUnavailable("lost the store"))  # unreachable now
        assert leases.run_out() == [session.id]
    finally:
        await store.close()
