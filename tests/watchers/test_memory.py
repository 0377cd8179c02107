"""What a long-running engine keeps of the sessions it observed once their drivers are let go: nothing."""

from __future__ import annotations

import gc
import weakref
from typing import Any

from agentwatch.runtime.driver import evict_idle
from agentwatch.runtime.models import Reply, ScriptedModel
from agentwatch.watchers import observer_agents
from tests.watchers.support import OpenEngine, Scripted, eventually, observers_of, reporting, reports, role


async def test_an_observed_sessions_driver_is_let_go_with_its_turns(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once the observer subsystem kept, for every session it resolved, the finished task of the resolution,
    whose context held the session's first turn (the model run, its emitter, its driver): a service leaked
    ~60 KB per agent, for good."""
    coder = role("coder", scripted("memory-coder", ScriptedModel(function=lambda ctx: Reply("ok"))))
    watched = role("watched", scripted("memory-watched", ScriptedModel(function=lambda ctx: Reply("ok"))))
    definitions = (
        coder.model_copy(update={"observer": "loop-guard"}),
        watched.model_copy(update={"observer": "reviewer", "grant": ("spawn",)}),
        role("reviewer", scripted("memory-reviewer", reporting("Looks fine."))),
    )
    async with open_engine(*definitions) as engine:
        kept: list[weakref.ref[Any]] = []
        for role_name in ("coder", "watched"):
            session = await engine.create(role_name)
            await engine.enqueue(session.id, "go")
            await engine.wait(session.id, 10)
            kept.append(weakref.ref(await engine.driver(session.id)))
        observed = await engine.store.get_session(kept[1]().session_id)  # type: ignore[union-attr]
        await eventually(lambda: reports(engine, observed.id))
        (observer,) = await observers_of(engine, observed.id)
        await engine.wait(observer.id, 10)
        kept.append(weakref.ref(await engine.driver(observer.id)))

        async def all_let_go() -> bool:  # (once each is idle: an observer's delivery may still be finishing)
            evict_idle(engine._drivers, idle_for=0)
            gc.collect()
            return all(ref() is None for ref in kept)

        await eventually(all_let_go)

        # A deleted agent never runs again: its pairing is let go too (it was kept, retired, for good), also one
        # that was over already (its observer stopped by a person first: it was kept, stopped, for good).
        registry = observer_agents(engine).registry
        assert observed.id in registry.pairings
        await engine.stop(observer.id)
        await eventually(lambda: _state(registry, observed.id, "stopped"))
        await engine.delete(observed.id)
        await eventually(lambda: _gone(registry, observed.id, observer.id))


async def _gone(registry: Any, observed_id: str, observer_id: str) -> bool:
    return observed_id not in registry.pairings and observer_id not in registry.by_observer


async def _state(registry: Any, observed_id: str, state: str) -> bool:
    pairing = registry.pairings.get(observed_id)
    return pairing is not None and pairing.state == state


async def test_a_lone_agent_on_a_shared_live_ring_is_observed(
    open_engine: OpenEngine, scripted: Scripted, redis_url: str
) -> None:
    """Once, on the Redis ring (events handed out by a task, after the turn had let its lease go), a lone agent's
    pairing was left for "its next event" in this engine, which never came: it ran unobserved."""
    model = scripted("lone-redis", ScriptedModel(function=lambda ctx: Reply("ok")))
    watcher = scripted("lone-redis-watcher", reporting("Fine."))
    definitions = (role("lone", model, observer="reviewer", grant=("spawn",)), role("reviewer", watcher))
    async with open_engine(*definitions, live=redis_url) as engine:
        done = await engine.task("lone", "go", timeout=10)
        await eventually(lambda: observers_of(engine, done["agentId"]))
