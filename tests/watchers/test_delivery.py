"""Delivery failure paths: deny at a batch, a gate error, a delivery exception, a lost observer context, a
stopped observer, and an observer whose marker cannot be confirmed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.runtime.policy import Decision, Policy, ToolRequest, Verdict
from agentwatch.runtime.tools import function_tool
from agentwatch.store import ObserverRef, SessionPatch
from agentwatch.watchers import Batch, Pairing, SessionCourier, observer_agents, postamble
from tests.watchers.support import (
    OpenEngine,
    Scripted,
    coder_and_watcher,
    digests_received,
    eventually,
    observers_of,
    role,
    settled_observer,
    states,
    turn,
    warnings,
)


@pytest.mark.parametrize("decision", ["deny", "ask", "defer"])
async def test_anything_but_allow_at_a_batch_marks_the_pairing_denied_and_clears_the_buffer(
    open_engine: OpenEngine, scripted: Scripted, decision: Decision
) -> None:
    def no_delivery(request: ToolRequest) -> Verdict | None:
        return Verdict(decision, "data stays here") if request.purpose == "observer_delivery" else None

    async with open_engine(*coder_and_watcher(scripted, decision), policies=[Policy("dlp", no_delivery)]) as engine:
        session = await engine.create("coder", source="chat")
        await turn(engine, session.id, "one")
        assert await eventually(lambda: _last_state(engine, session.id, "denied")) == [
            ("armed", "observer started"),
            ("denied", f"{decision}: data stays here"),
        ]
        (observer,) = await observers_of(engine, session.id)
        await turn(engine, session.id, "two")
        assert await digests_received(engine, observer.id) == []
        pairing = observer_agents(engine).pairing(session.id)
        assert pairing is not None and pairing.buffer == [] and pairing.state == "denied"


async def test_digests_that_come_while_the_observer_works_reach_it_as_one_batch(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Each send takes the whole buffer: the turns the observed agent ends while its observer is busy with a batch
    reach the observer together, as one input closed by one postamble (with the observed role's message)."""
    busy, release = asyncio.Event(), asyncio.Event()

    async def ponder() -> str:
        """Think it over."""
        busy.set()
        await asyncio.wait_for(release.wait(), 10)
        return "pondered"

    def watcher(ctx: Any) -> Any:
        if not busy.is_set() and not ctx.tool_results:
            return CallTool("ponder", {})
        return Reply("nothing to report")

    coder = scripted("coder-batch", ScriptedModel(function=lambda ctx: Reply(f"answer to {ctx.prompt}")))
    async with open_engine(
        role("coder", coder, observer="watcher", grant=("spawn",), observer_message="Mind the migrations."),
        role("watcher", scripted("watcher-batch", ScriptedModel(function=watcher)), tools=("ponder",)),
        tools=[function_tool(ponder)],
    ) as engine:
        session = await engine.create("coder", source="chat")
        await turn(engine, session.id, "one")
        await asyncio.wait_for(busy.wait(), 10)  # the observer works on the first batch
        await turn(engine, session.id, "two")
        await turn(engine, session.id, "three")
        release.set()
        (observer,) = await observers_of(engine, session.id)
        await eventually(lambda: settled_observer(engine, observer.id, 2))
        first, second = await digests_received(engine, observer.id)
        closing = postamble("Mind the migrations.")
        assert "answer to one" in first and first.endswith(closing)
        assert "answer to two" in second and "answer to three" in second and "answer to one" not in second
        assert second.endswith(closing) and second.count(closing) == 1


async def _last_state(engine: Engine, session_id: str, state: str) -> list[tuple[str, str | None]]:
    found = await states(engine, session_id)
    return found if found and found[-1][0] == state else []


async def test_a_gate_error_drops_that_batch_only(open_engine: OpenEngine, scripted: Scripted) -> None:
    failures = [RuntimeError("policy server timed out")]

    def flaky(request: ToolRequest) -> Verdict | None:
        if request.purpose == "observer_delivery" and failures:
            raise failures.pop()
        return None

    async with open_engine(*coder_and_watcher(scripted, "gate"), policies=[Policy("flaky", flaky)]) as engine:
        session = await engine.create("coder", source="chat")
        await turn(engine, session.id, "one")
        assert await eventually(lambda: warnings(engine, session.id)) == [
            "the policy check before a delivery failed (RuntimeError: policy server timed out); 1 digest(s) dropped"
        ]
        await turn(engine, session.id, "two")
        (observer,) = await observers_of(engine, session.id)
        (received,) = await eventually(lambda: digests_received(engine, observer.id))
        assert "answer to two" in received and "answer to one" not in received
        assert await states(engine, session.id) == [("armed", "observer started")]


async def test_a_policy_check_that_hangs_drops_that_batch_after_the_delivery_timeout(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    hangs = [True]

    async def stuck(request: ToolRequest) -> Verdict | None:
        if request.purpose == "observer_delivery" and hangs:
            hangs.pop()
            await asyncio.sleep(3600)  # a policy server that never answers
        return None

    async with open_engine(*coder_and_watcher(scripted, "hang"), policies=[Policy("stuck", stuck)]) as engine:
        observers = engine.config.observers.model_copy(update={"delivery_timeout_seconds": 0.3})
        engine.config = engine.config.model_copy(update={"observers": observers})
        session = await engine.create("coder", source="chat")
        await turn(engine, session.id, "one")
        assert await eventually(lambda: warnings(engine, session.id)) == [
            "the policy check before a delivery failed (TimeoutError: policy 'stuck' did not decide within 0.3 s); "
            "1 digest(s) dropped"
        ]
        await turn(engine, session.id, "two")
        (observer,) = await observers_of(engine, session.id)
        (received,) = await eventually(lambda: digests_received(engine, observer.id))
        assert "answer to two" in received and "answer to one" not in received


class CutWire(SessionCourier):
    """Fails the first delivery, as a broken transport would."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.failures = 1

    async def deliver(self, pairing: Pairing, batch: Batch) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("the wire was cut")
        await super().deliver(pairing, batch)


async def test_a_delivery_exception_drops_that_batch_and_is_not_requeued(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    async with open_engine(*coder_and_watcher(scripted, "wire")) as engine:
        observer_agents(engine).courier = CutWire(engine)
        session = await engine.create("coder", source="chat")
        await turn(engine, session.id, "one")
        assert await eventually(lambda: warnings(engine, session.id)) == [
            "delivery to the observer failed (ConnectionError: the wire was cut); 1 digest(s) dropped"
        ]
        await turn(engine, session.id, "two")
        (observer,) = await observers_of(engine, session.id)
        await eventually(lambda: settled_observer(engine, observer.id, 1))
        (received,) = await digests_received(engine, observer.id)
        assert "answer to two" in received and "answer to one" not in received


async def test_a_lost_observer_context_starts_a_fresh_observer_with_a_recovery_note(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    async with open_engine(*coder_and_watcher(scripted, "lost")) as engine:
        session = await engine.create("coder", source="chat")
        await turn(engine, session.id, "one")
        (first,) = await eventually(lambda: observers_of(engine, session.id))
        await eventually(lambda: settled_observer(engine, first.id, 1))
        assert await engine.store.reap([first.id]) == 1
        await turn(engine, session.id, "two")
        (second,) = await eventually(lambda: observers_of(engine, session.id))
        assert second.id != first.id
        await eventually(lambda: settled_observer(engine, second.id, 1))
        inputs = await engine.store.list_inputs(second.id, pending_only=False)
        framing, digest = (i.text for i in inputs)
        assert framing.endswith("earlier activity is not shown again.]") and "lost its context" in framing
        assert "answer to two" in digest
        found = await states(engine, session.id)
        assert found[-1] == (
            "armed",
            f"observer started afresh: observer session {first.id!r} no longer exists",
        )
        ref = await engine.store.get_observer_ref(session.id)
        assert ref is not None and ref.observer_session_id == second.id


async def test_an_observer_stopped_by_a_person_is_terminal_and_never_brought_back(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    coder, watcher = coder_and_watcher(scripted, "stop")
    async with open_engine(coder, watcher) as engine:
        session = await engine.create("coder", source="chat")
        await turn(engine, session.id, "one")
        (observer,) = await eventually(lambda: observers_of(engine, session.id))
        await eventually(lambda: settled_observer(engine, observer.id, 1))
        assert await observer_agents(engine).stop_observer(session.id, by="alice") is True
        await turn(engine, session.id, "two")
        assert (await states(engine, session.id))[-1] == ("stopped", "stopped by alice")
        ref = await engine.store.get_observer_ref(session.id)
        assert ref is not None and ref.stopped and ref.stopped_at is not None
        assert len(await digests_received(engine, observer.id)) == 1
    async with open_engine(coder, watcher) as engine:
        await turn(engine, session.id, "three")
        assert await eventually(lambda: _last_state(engine, session.id, "blocked"))
        assert [o.id for o in await observers_of(engine, session.id)] == [observer.id]
        assert len(await digests_received(engine, observer.id)) == 1


async def test_stopping_an_idle_observer_session_stops_it_for_good(open_engine: OpenEngine, scripted: Scripted) -> None:
    coder, watcher = coder_and_watcher(scripted, "idle-stop")
    async with open_engine(coder, watcher) as engine:
        session = await engine.create("coder", source="chat")
        await turn(engine, session.id, "one")
        (observer,) = await eventually(lambda: observers_of(engine, session.id))
        await eventually(lambda: settled_observer(engine, observer.id, 1))
        assert await engine.stop(observer.id, by="bob") is True  # between its turns
        assert (await engine.store.get_session(observer.id)).status == "cancelled"
        assert await eventually(lambda: _last_state(engine, session.id, "stopped")) == [
            ("armed", "observer started"),
            ("stopped", "the observer was stopped by bob"),
        ]
        await turn(engine, session.id, "two")
        assert len(await digests_received(engine, observer.id)) == 1
        assert await engine.stop(observer.id, by="bob") is False  # stopped already
    async with open_engine(coder, watcher) as engine:
        await turn(engine, session.id, "three")
        assert await eventually(lambda: _last_state(engine, session.id, "blocked"))
        assert [o.id for o in await observers_of(engine, session.id)] == [observer.id]


async def test_a_stop_while_the_observers_turn_loop_lets_go_of_the_lease_stops_it_for_good(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Its turn over (idle), an observer's turn loop still lets the lease go and looks for more work. A stop
    then cancelled the loop outside any turn, which recorded nothing, and said it stopped the observer: it stayed
    idle and took the next digest."""
    coder, watcher = coder_and_watcher(scripted, "idle-stop-loop")
    async with open_engine(coder, watcher) as engine:
        session = await engine.create("coder", source="chat")
        release, letting_go = engine.store.release_lease, asyncio.Event()

        async def held_release(session_id: str, owner: str) -> None:
            if session_id != session.id and not letting_go.is_set():  # the observer's loop, after its turn
                letting_go.set()
                await asyncio.Event().wait()  # until the stop cancels the loop
            await release(session_id, owner)

        engine.store.release_lease = held_release  # type: ignore[method-assign]
        await turn(engine, session.id, "one")
        await asyncio.wait_for(letting_go.wait(), 10)
        (observer,) = await observers_of(engine, session.id)
        assert await settled_observer(engine, observer.id, 1)
        assert (await engine.driver(observer.id)).turn_running
        assert await engine.stop(observer.id, by="bob") is True
        assert (await engine.store.get_session(observer.id)).status == "cancelled"
        await turn(engine, session.id, "two")
        assert await eventually(lambda: _last_state(engine, session.id, "stopped")) == [
            ("armed", "observer started"),
            ("stopped", "the observer was stopped by bob"),
        ]
        assert len(await digests_received(engine, observer.id)) == 1


async def test_an_idle_observer_stopped_by_another_engine_gets_no_more_deliveries(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    coder, watcher = coder_and_watcher(scripted, "idle-stop-elsewhere")
    async with open_engine(coder, watcher) as engine:
        session = await engine.create("coder", source="chat")
        await turn(engine, session.id, "one")
        (observer,) = await eventually(lambda: observers_of(engine, session.id))
        await eventually(lambda: settled_observer(engine, observer.id, 1))
        async with open_engine(coder, watcher, recover=False) as acting:  # as the CLI's `stop` opens one
            assert await acting.stop(observer.id, by="carol") is True
        await turn(engine, session.id, "two")
        assert await eventually(lambda: _last_state(engine, session.id, "stopped")) == [
            ("armed", "observer started"),
            ("stopped", "a person stopped the observer"),
        ]
        assert len(await digests_received(engine, observer.id)) == 1
        ref = await engine.store.get_observer_ref(session.id)
        assert ref is not None and ref.stopped


async def test_deleting_the_observer_stops_it(open_engine: OpenEngine, scripted: Scripted) -> None:
    async with open_engine(*coder_and_watcher(scripted, "delete")) as engine:
        session = await engine.create("coder", source="chat")
        await turn(engine, session.id, "one")
        (observer,) = await eventually(lambda: observers_of(engine, session.id))
        await eventually(lambda: settled_observer(engine, observer.id, 1))
        await engine.delete(observer.id, by="bob")
        await turn(engine, session.id, "two")
        assert await eventually(lambda: _last_state(engine, session.id, "stopped")) == [
            ("armed", "observer started"),
            ("stopped", "the observer session was deleted"),
        ]


async def test_a_delivery_to_an_unconfirmed_observer_is_refused_and_recorded(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    async with open_engine(*coder_and_watcher(scripted, "marker")) as engine:
        session = await engine.create("coder", source="chat")
        await turn(engine, session.id, "one")
        (observer,) = await eventually(lambda: observers_of(engine, session.id))
        await eventually(lambda: settled_observer(engine, observer.id, 1))
        await engine.store.update_session(observer.id, SessionPatch(is_observer=False))
        await turn(engine, session.id, "two")
        assert await eventually(lambda: warnings(engine, session.id)) == [
            f"delivery to the observer failed (RuntimeError: session {observer.id!r} is not marked as an "
            "observer; nothing is delivered to it); 1 digest(s) dropped"
        ]
        assert len(await digests_received(engine, observer.id)) == 1


async def test_a_restarted_engine_reattaches_only_a_matching_live_observer(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    coder, watcher = coder_and_watcher(scripted, "resume")
    async with open_engine(coder, watcher) as engine:
        session = await engine.create("coder", source="chat")
        await turn(engine, session.id, "one")
        (observer,) = await eventually(lambda: observers_of(engine, session.id))
        await eventually(lambda: settled_observer(engine, observer.id, 1))
    async with open_engine(coder, watcher) as engine:
        await turn(engine, session.id, "two")
        await eventually(lambda: settled_observer(engine, observer.id, 2))
        assert (await states(engine, session.id))[-1] == ("armed", "reattached to its observer")
        inputs = await engine.store.list_inputs(observer.id, pending_only=False)
        assert len(inputs) == 3, "the framing prompt is sent once"
        # a ref for another type is stale: a fresh observer starts
        await engine.store.set_observer_ref(
            ObserverRef(observed_session_id=session.id, observer_type="someone-else", observer_session_id=observer.id)
        )
    async with open_engine(coder, watcher) as engine:
        await turn(engine, session.id, "three")
        found = await eventually(lambda: _two_observers(engine, session.id))
        fresh = next(o for o in found if o.id != observer.id)
        await eventually(lambda: _ref_points_at(engine, session.id, fresh.id))


async def _two_observers(engine: Engine, session_id: str) -> list[Any]:
    found = await observers_of(engine, session_id)
    return found if len(found) == 2 else []


async def _ref_points_at(engine: Engine, session_id: str, observer_id: str) -> bool:
    ref = await engine.store.get_observer_ref(session_id)
    return ref is not None and ref.observer_session_id == observer_id


async def test_agent_get_says_an_observer_whose_model_fails_is_failing_and_why(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Its pairing stays armed (every batch is still tried), but a person reading the observed agent must see that
    its observer does not work, and why, not `armed` alone; once a turn of the observer goes through, it is armed
    again. The observed agent works on all the while."""
    down = [True]

    def observe(ctx: Any) -> Any:
        if down[0]:
            raise RuntimeError("the model endpoint refused the key")
        return Reply("nothing to report")

    coder = role("coder", scripted("failing-coder", ScriptedModel.replying("one done", "two done")), observer="critic")
    critic = role("critic", scripted("failing-critic", ScriptedModel(function=observe)))
    async with open_engine(coder.model_copy(update={"grant": ("spawn",)}), critic) as engine:
        session = await engine.create("coder", source="chat")
        await turn(engine, session.id, "one")
        await eventually(lambda: warnings(engine, session.id))
        record = await engine.call_tool("agent_get", {"id": session.id})
        assert (record["status"], record["current"]["lastAssistantText"]) == ("idle", "one done")  # not held back
        shown = record["observer"]
        assert shown["state"] == "failing"
        assert "the model endpoint refused the key" in shown["reason"]
        assert [state for state, _ in await states(engine, session.id)] == ["armed"]  # nothing recorded changed

        down[0] = False
        await turn(engine, session.id, "two")
        (observer,) = await observers_of(engine, session.id)
        await eventually(lambda: settled_observer(engine, observer.id, 2))
        record = await engine.call_tool("agent_get", {"id": session.id})
        assert (record["observer"]["state"], record["observer"]["reason"]) == ("armed", "observer started")
