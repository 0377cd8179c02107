"""Arming a pairing: reattaching the previous observer or starting a fresh one, the tombstone, and the mark."""

from __future__ import annotations

from datetime import UTC, datetime

from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import Reply, ScriptedModel
from agentwatch.runtime.roster import AgentDefinition
from agentwatch.store import ObserverRef, SessionPatch, SessionRecord
from agentwatch.watchers import describe, observer_agents
from agentwatch.watchers.delivery import RECOVERY_NOTE
from tests.watchers.support import (
    QUIET,
    OpenEngine,
    Scripted,
    coder_and_watcher,
    digests_received,
    eventually,
    observers_of,
    role,
    settled_observer,
    states_reached,
    turn,
    warnings,
)

STARTED = ("armed", "observer started")


async def paired(engine: Engine) -> tuple[str, SessionRecord]:
    """A chat agent after one turn, and its observer once it has dealt with the first digest."""
    session = await engine.create("coder", source="chat")
    await turn(engine, session.id, "one")
    (observer,) = await eventually(lambda: observers_of(engine, session.id))
    await eventually(lambda: settled_observer(engine, observer.id, 1))
    return session.id, observer


async def test_a_deleted_observer_stays_stopped_after_retention_reaps_it(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """A person deleted the observer between its turns (a stop for good), and retention reaped its session before
    the observed agent ran again. Once, nothing was left to say it had been stopped: the missing session read as
    a lost context, and a fresh observer took over."""
    coder, watcher = coder_and_watcher(scripted, "reaped-tombstone")
    async with open_engine(coder, watcher) as engine:
        sid, observer = await paired(engine)
    async with open_engine(coder, watcher, recover=False) as acting:  # as the CLI's `delete` opens one
        await acting.delete(observer.id, by="alice")
        assert await acting.store.reap([observer.id]) == 1
    async with open_engine(coder, watcher) as engine:
        await turn(engine, sid, "two")
        assert await eventually(lambda: states_reached(engine, sid, 2)) == [
            STARTED,
            ("blocked", "a person stopped this observer; it is not brought back"),
        ]
        assert await observers_of(engine, sid) == []
        ref = await engine.store.get_observer_ref(sid)
        assert ref is not None and ref.stopped and ref.observer_session_id == observer.id


async def test_agent_get_shows_an_observer_stopped_from_the_command_line_as_stopped(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """A person stopped the observer from the command line while no engine ran the agent it watches (that
    process holds no pairing, so the tombstone is left to the engine that arms it next). `agent_get` read the
    pairing as still `armed` ("observer started", not stopped) until then; it now reads the person's stop."""
    coder, watcher = coder_and_watcher(scripted, "stopped-on-the-command-line")
    async with open_engine(coder, watcher) as engine:
        sid, observer = await paired(engine)
    async with open_engine(coder, watcher, recover=False) as acting:  # as the CLI's `stop` opens one
        assert await acting.stop(observer.id, by="alice") is True
        entry = await describe(acting.store, await acting.store.get_session(sid))
        stopped_at = (await acting.store.get_session(observer.id)).updated_at.isoformat()
    assert entry is not None
    assert (entry["state"], entry["reason"], entry["since"], entry["stopped"]) == (
        "stopped",
        "a person stopped this observer; it is not brought back",
        stopped_at,
        True,
    )


async def test_agent_get_gives_a_tombstoned_observer_the_reason_of_its_stop(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """The tombstone is written before the pairing's `stopped` state; read between the two, `agent_get` said
    `stopped` with the reason and time of the state before ("observer started"): the reason is now the stop's."""
    coder, watcher = coder_and_watcher(scripted, "tombstone-before-state")
    async with open_engine(coder, watcher) as engine:
        sid, observer = await paired(engine)
    async with open_engine(coder, watcher, recover=False) as acting:
        store = acting.store
        stopped_at = datetime.now(UTC)
        await store.set_observer_ref(
            ObserverRef(
                observed_session_id=sid,
                observer_type=watcher.name,
                observer_session_id=observer.id,
                stopped=True,
                stopped_at=stopped_at,
            )
        )
        entry = await describe(store, await store.get_session(sid))
    assert entry is not None
    assert (entry["state"], entry["reason"], entry["since"], entry["stopped"]) == (
        "stopped",
        "a person stopped this observer; it is not brought back",
        stopped_at.isoformat(),
        True,
    )


async def test_an_observer_deleted_and_reaped_while_its_pairing_is_armed_is_not_replaced(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """The same, with the pairing armed in the engine that runs the observed agent: the delivery that finds the
    observer gone reads the tombstone its reap left, and stops the pairing instead of starting a fresh one."""
    coder, watcher = coder_and_watcher(scripted, "reaped-armed")
    async with open_engine(coder, watcher) as engine:
        sid, observer = await paired(engine)
        await engine.delete(observer.id, by="alice")
        assert await engine.store.reap([observer.id]) == 1
        await turn(engine, sid, "two")
        assert await eventually(lambda: states_reached(engine, sid, 2)) == [
            STARTED,
            ("stopped", "the observer session was deleted"),
        ]
        assert await observers_of(engine, sid) == []


async def test_a_restart_starts_a_fresh_observer_with_a_recovery_note_when_the_previous_one_was_reaped(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """The seeds: when an observer's resumable state is lost, a fresh observer starts, with a recovery note. Once,
    the observer that replaced a reaped one as its pairing was armed (an engine opened since) got no such note,
    unlike one that replaces it at a delivery: it took the agent's work for the start of it."""
    coder, watcher = coder_and_watcher(scripted, "reaped-between")
    async with open_engine(coder, watcher) as engine:
        sid, observer = await paired(engine)
    async with open_engine(coder, watcher, recover=False) as engine:
        assert await engine.store.reap([observer.id]) == 1
    async with open_engine(coder, watcher) as engine:
        await turn(engine, sid, "two")
        (fresh,) = await eventually(lambda: observers_of(engine, sid))
        assert fresh.id != observer.id
        await eventually(lambda: settled_observer(engine, fresh.id, 1))
        assert await states_reached(engine, sid, 2) == [STARTED, STARTED]
        ref = await engine.store.get_observer_ref(sid)
        assert ref is not None and ref.observer_session_id == fresh.id and not ref.stopped
        (received,) = await digests_received(engine, fresh.id)
        assert "answer to two" in received and "answer to one" not in received
        framing = (await engine.store.list_inputs(fresh.id, pending_only=False))[0]
        assert framing.origin is not None and framing.origin.ref == "observer-framing"
        assert framing.text.endswith(RECOVERY_NOTE)


async def observers_of_type(engine: Engine, session_id: str, observer_type: str) -> list[SessionRecord]:
    return [o for o in await observers_of(engine, session_id) if o.role == observer_type]


async def test_an_observer_first_armed_gets_no_recovery_note(open_engine: OpenEngine, scripted: Scripted) -> None:
    async with open_engine(*coder_and_watcher(scripted, "first-armed")) as engine:
        _, observer = await paired(engine)
        framing = (await engine.store.list_inputs(observer.id, pending_only=False))[0]
        assert framing.origin is not None and framing.origin.ref == "observer-framing"
        assert RECOVERY_NOTE not in framing.text


async def test_a_stopped_observer_type_stays_stopped_after_the_role_named_another_type(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """The seeds: a person's stop leaves a tombstone that prevents silent resurrection. Once, it was kept only
    until the observer ref named another type: a person stopped `alpha` on an agent, its role then named `beta`
    (which starts: nobody stopped it), then `alpha` again, and a fresh `alpha` started by itself. The tombstone
    now holds for the pairing, the agent and the observer type."""
    model = scripted("coder-retyped", ScriptedModel(function=lambda ctx: Reply(f"answer to {ctx.prompt}")))
    quiet = scripted("watcher-retyped", QUIET)
    watchers = [role("alpha", quiet), role("beta", quiet)]

    def coder(observer: str) -> AgentDefinition:
        return role("coder", model, observer=observer, grant=("spawn",))

    async with open_engine(coder("alpha"), *watchers) as engine:
        session = await engine.create("coder", source="chat")
        await turn(engine, session.id, "one")
        (alpha,) = await eventually(lambda: observers_of(engine, session.id))
        await eventually(lambda: settled_observer(engine, alpha.id, 1))
        assert await observer_agents(engine).stop_observer(session.id, by="alice") is True
    async with open_engine(coder("beta"), *watchers) as engine:
        await turn(engine, session.id, "two")
        (beta,) = await eventually(lambda: observers_of_type(engine, session.id, "beta"))
        await eventually(lambda: settled_observer(engine, beta.id, 1))
    async with open_engine(coder("alpha"), *watchers) as engine:
        await turn(engine, session.id, "three")
        assert await eventually(lambda: states_reached(engine, session.id, 4)) == [
            STARTED,
            ("stopped", "stopped by alice"),
            STARTED,
            ("blocked", "a person stopped this observer; it is not brought back"),
        ]
        assert sorted(o.role for o in await observers_of(engine, session.id)) == ["alpha", "beta"]
        assert len(await digests_received(engine, alpha.id)) == 1
        ref = await engine.store.get_observer_ref(session.id)  # names the pairing `agent_get` shows
        assert ref is not None and (ref.observer_type, ref.observer_session_id, ref.stopped) == (
            "alpha",
            alpha.id,
            True,
        )
        entry = await describe(engine.store, await engine.store.get_session(session.id))
        assert entry is not None and (entry["observerType"], entry["state"]) == ("alpha", "blocked")
    async with open_engine(coder("beta"), *watchers) as engine:  # nobody stopped beta: it watches again
        await turn(engine, session.id, "four")
        assert (await eventually(lambda: states_reached(engine, session.id, 5)))[-1] == STARTED
        assert len(await observers_of_type(engine, session.id, "alpha")) == 1


async def test_a_restart_pairs_no_session_whose_observer_mark_is_gone(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """The ref names a live session that is not marked as an observer: it is neither reattached nor taken for
    the observer another engine just started (the store keeps its slot), and is given nothing."""
    coder, watcher = coder_and_watcher(scripted, "unmarked")
    async with open_engine(coder, watcher) as engine:
        sid, observer = await paired(engine)
        await engine.store.update_session(observer.id, SessionPatch(is_observer=False))
    async with open_engine(coder, watcher) as engine:
        await turn(engine, sid, "two")
        assert await eventually(lambda: states_reached(engine, sid, 2)) == [
            STARTED,
            ("blocked", f"observer session {observer.id!r} could not be confirmed as an observer"),
        ]
        await turn(engine, sid, "three")
        assert len(await digests_received(engine, observer.id)) == 1
        assert await warnings(engine, sid) == []


async def test_an_observer_whose_mark_cannot_be_read_back_is_not_armed(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    coder, watcher = coder_and_watcher(scripted, "no-read-back")
    async with open_engine(coder, watcher) as engine:
        get_session = engine.store.get_session

        async def forgetful(session_id: str) -> SessionRecord:
            found = await get_session(session_id)
            return found.model_copy(update={"is_observer": False}) if found.role == "watcher" else found

        engine.store.get_session = forgetful  # type: ignore[method-assign]
        session = await engine.create("coder", source="chat")
        await turn(engine, session.id, "one")
        (found,) = await eventually(lambda: states_reached(engine, session.id, 1))
        (observer,) = await observers_of(engine, session.id)
        assert found == ("blocked", f"observer session {observer.id!r} could not be confirmed as an observer")
        await turn(engine, session.id, "two")
        assert await digests_received(engine, observer.id) == []
        pairing = observer_agents(engine).pairing(session.id)
        assert pairing is not None and pairing.state == "blocked"
