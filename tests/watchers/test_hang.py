"""Delivery that cannot hang: a per-batch timeout, a hung observer let go of (and recorded), and the count of
digests the buffer bound dropped in the next batch."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.runtime.tools import function_tool
from agentwatch.watchers import AssistantTextItem, Batch, Pairing, SessionCourier, observer_agents
from agentwatch.watchers.pairing import MAX_BUFFERED
from tests.watchers.support import OpenEngine, Scripted, eventually, observers_of, role, states, warnings


def with_timeout(engine: Engine, seconds: float) -> None:
    observers = engine.config.observers.model_copy(update={"delivery_timeout_seconds": seconds})
    engine.config = engine.config.model_copy(update={"observers": observers})


def hanging_first(release: asyncio.Event) -> tuple[Callable[[], Awaitable[str]], Callable[[Any], Any]]:
    """A `ponder` tool whose first call hangs until `release` is set, and an observer's script that calls it
    once a batch, then reports nothing."""
    calls: list[str] = []

    async def ponder() -> str:
        """Think it over."""
        calls.append("ponder")
        if len(calls) == 1:
            await asyncio.wait_for(release.wait(), 60)  # the first observer hangs here
        return "thought"

    def watcher_script(ctx: Any) -> Any:
        return CallTool("ponder", {}) if not ctx.tool_results else Reply("nothing to report")

    return ponder, watcher_script


async def test_a_hung_observer_is_recorded_and_a_fresh_one_takes_the_next_batch(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    release = asyncio.Event()
    ponder, watcher_script = hanging_first(release)
    coder_model = scripted("coder-hang", ScriptedModel(function=lambda ctx: Reply("done")))
    watcher_model = scripted("watcher-hang", ScriptedModel(function=watcher_script))
    async with open_engine(
        role("coder", coder_model, observer="watcher", grant=("spawn",)),
        role("watcher", watcher_model, tools=("ponder",)),
        tools=[function_tool(ponder)],
    ) as engine:
        with_timeout(engine, 0.5)
        session = await engine.create("coder", source="chat")
        await engine.enqueue(session.id, "one")
        (hung,) = await eventually(lambda: observers_of(engine, session.id))
        found = await eventually(lambda: _hung_warnings(engine, session.id))
        assert found == [
            "the observer did not deal with a batch within 0.5 s and is recorded as hung: its turn is stopped and a "
            "fresh observer takes the next batch; 1 digest(s) dropped"
        ]
        assert (await eventually(lambda: _status_is(engine, hung.id, "cancelled"))).status == "cancelled"
        await engine.enqueue(session.id, "two")
        fresh = await eventually(lambda: _other_observer(engine, session.id, hung.id))
        await eventually(lambda: _status_is(engine, fresh.id, "idle"))
        pairing = observer_agents(engine).pairing(session.id)
        assert pairing is not None and pairing.state == "armed" and pairing.observer_session_id == fresh.id
        assert "stopped" not in [state for state, _ in await states(engine, session.id)]
        ref = await engine.store.get_observer_ref(session.id)
        assert ref is not None and (ref.observer_session_id, ref.stopped) == (fresh.id, False)
        release.set()


async def test_a_hung_observer_is_no_tombstone_after_a_restart(open_engine: OpenEngine, scripted: Scripted) -> None:
    """Once: the engine's own stop of a hung observer was read, once the engine had restarted, as a person's:
    the pairing was `blocked` for good ("a person stopped this observer") and no fresh observer ever came."""
    release = asyncio.Event()
    ponder, watcher_script = hanging_first(release)
    coder_model = scripted("coder-hang-restart", ScriptedModel(function=lambda ctx: Reply("done")))
    watcher_model = scripted("watcher-hang-restart", ScriptedModel(function=watcher_script))
    roles = (
        role("coder", coder_model, observer="watcher", grant=("spawn",)),
        role("watcher", watcher_model, tools=("ponder",)),
    )
    async with open_engine(*roles, tools=[function_tool(ponder)]) as engine:
        with_timeout(engine, 0.5)
        session = await engine.create("coder", source="chat")
        await engine.enqueue(session.id, "one")
        (hung,) = await eventually(lambda: observers_of(engine, session.id))
        await eventually(lambda: _status_is(engine, hung.id, "cancelled"))
        release.set()
    async with open_engine(*roles, tools=[function_tool(ponder)]) as engine:
        await engine.enqueue(session.id, "two")
        fresh = await eventually(lambda: _other_observer(engine, session.id, hung.id))
        pairing = await eventually(lambda: _armed_pairing(engine, session.id))
        assert pairing.observer_session_id == fresh.id
        assert "blocked" not in [state for state, _ in await states(engine, session.id)]


async def _armed_pairing(engine: Engine, session_id: str) -> Any:
    pairing = observer_agents(engine).pairing(session_id)
    return pairing if pairing is not None and pairing.state == "armed" else None


async def _hung_warnings(engine: Engine, session_id: str) -> list[str]:
    return [w for w in await warnings(engine, session_id) if "recorded as hung" in w]


async def _status_is(engine: Engine, session_id: str, status: str) -> Any:
    session = await engine.store.get_session(session_id)
    return session if session.status == status else None


async def _other_observer(engine: Engine, session_id: str, hung_id: str) -> Any:
    found = [s for s in await observers_of(engine, session_id) if s.id != hung_id]
    return found[0] if found else None


class Held(SessionCourier):
    """Holds the first batch until released; records every batch's text."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.release = asyncio.Event()
        self.texts: list[str] = []

    async def deliver(self, pairing: Pairing, batch: Batch) -> None:
        self.texts.append(batch.text)
        if len(self.texts) == 1:
            await self.release.wait()


async def test_the_next_batch_says_how_many_digests_the_buffer_bound_dropped(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    coder_model = scripted("coder-bound", ScriptedModel(function=lambda ctx: Reply("done")))
    watcher_model = scripted("watcher-bound", ScriptedModel(function=lambda ctx: Reply("nothing")))
    async with open_engine(
        role("coder", coder_model, observer="watcher", grant=("spawn",)), role("watcher", watcher_model)
    ) as engine:
        hub = observer_agents(engine)
        courier = Held(engine)
        hub.courier = courier
        session = await engine.create("coder", source="chat")
        await engine.enqueue(session.id, "one")
        await eventually(lambda: _count(courier.texts, 1))
        pairing = hub.pairing(session.id)
        assert pairing is not None
        extra = 7
        for n in range(MAX_BUFFERED + extra):
            hub.submit(pairing, (AssistantTextItem(f"step {n}"),))
        courier.release.set()
        await eventually(lambda: _count(courier.texts, 2))
        second = courier.texts[1]
        assert f"[{extra} earlier digest(s) were dropped because the observer fell behind.]" in second
        assert "step 0" not in second and f"step {extra}\n" in second and f"step {MAX_BUFFERED + extra - 1}" in second


async def _count(texts: list[str], count: int) -> bool:
    return len(texts) >= count
