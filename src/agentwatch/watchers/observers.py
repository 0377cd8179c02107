"""The observer-agents extension: resolves declarations, taps activity, arms pairings and runs deliveries.

Installed in every engine by default. Per session it adds one `ActivityTap` (a ThreadObserver): on the
session's first event the tap resolves, in the background, whether the session is observed; if not, it
goes quiet. The observed agent is never made to wait: taps only append to buffers, and everything that
awaits (arming, policy checks, delivery, the observer's turns) runs in tasks of this extension.

Resolution, in order (each "unobserved" case with a warning is warned once per session: logged and recorded
as a `runtime.warning` on the session):

1. the role declares no `observer` → unobserved;
2. the session itself runs as an observer → the declaration is ignored with a warning (no chaining);
3. the switch is off (`observers.enabled = false`, `AGENTWATCH_OBSERVER_AGENTS=0` or
   `AGENTWATCH_BACKGROUND_TASKS=0`) → unobserved; the tap is not even installed;
4. the named type is missing from the roster, or is a rule type with no registered function → unobserved,
   with a warning (an observer type that declares an observer of its own is fine: that declaration is
   ignored by step 2 when the observer runs);
5. otherwise the pairing is armed (see `pairing`), but only by the engine that owns the session (holds its
   lease): another engine that sees one of its events leaves it alone and looks again at its next event.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from agentwatch.errors import Conflict, NotFound, UserError
from agentwatch.events import (
    DELETION_SOURCE,
    Event,
    NewEvent,
    ObserverStateChanged,
    RuntimeNotice,
    TurnEnded,
    TurnStarted,
)
from agentwatch.reads.observer import ARMED_STATES, observer_entry
from agentwatch.runtime.leases import leases_of
from agentwatch.runtime.roster import AgentDefinition
from agentwatch.runtime.thread_observer import ReplaySnapshot
from agentwatch.store import SessionRecord, Write
from agentwatch.watchers.delivery import Courier, SessionCourier, run_deliveries
from agentwatch.watchers.digest import ActivityItem, ActivityRecorder, Digest
from agentwatch.watchers.pairing import MAX_BUFFERED, SOURCE, Pairing, PairingRegistry
from agentwatch.watchers.report import observer_report_tool, observer_tool_set, one_way_policy
from agentwatch.watchers.rules import RuleBook, RuleCourier, RuleFunction, default_rules, rule_definition

if TYPE_CHECKING:
    from agentwatch.runtime.services import Runtime

__all__ = ["ActivityTap", "ObserverAgents", "observer_agents"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class ObserverAgents:
    """The observer subsystem of one engine (an engine extension).

    `rules` are the rule observers it knows (by default the built-ins plus every globally registered one);
    `courier` replaces the delivery to model observers' sessions (tests use it to make delivery fail).
    """

    def __init__(self, *, rules: RuleBook | None = None, courier: Courier | None = None) -> None:
        self.rules = rules if rules is not None else default_rules()
        """The rule observers, by type."""
        self.courier = courier
        """Delivers to model observers' sessions (a `SessionCourier` once installed); replaceable."""
        self._engine: Runtime | None = None
        self._registry: PairingRegistry | None = None
        self._rule_courier = RuleCourier(self)
        self._resolving: dict[str, asyncio.Task[Pairing | None]] = {}
        """The resolutions under way, by observed session (each is let go once it is over)."""
        self._tasks: set[asyncio.Task[Any]] = set()
        self._warned: set[tuple[str, str]] = set()
        self._deferred: set[str] = set()  # sessions left unresolved because another engine owns them
        self._closed = False

    # -- the extension --------------------------------------------------------------------------------

    def install(self, engine: Runtime) -> None:
        """Add the report tool, the one-way policy, the observer tool set, the rule types and the tap."""
        self._engine = engine
        self._registry = PairingRegistry(engine)
        if self.courier is None:
            self.courier = SessionCourier(engine)
        engine.add_tool(observer_report_tool(self))
        engine.policy.add(one_way_policy(engine.store))
        engine.tool_set_hooks.append(observer_tool_set)
        for name in self.rules:
            self._define_rule(name)
        if engine.config.observer_agents_enabled:
            engine.start_with_observer(self._tap)

    async def close(self) -> None:
        """Cancel arming and deliveries (a delivery cut off here is lost, as any failed delivery is)."""
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @property
    def engine(self) -> Runtime:
        """The engine it is installed in."""
        if self._engine is None:
            raise UserError("ObserverAgents is not installed in an engine yet")
        return self._engine

    @property
    def registry(self) -> PairingRegistry:
        """The pairings of its engine."""
        if self._registry is None:
            raise UserError("ObserverAgents is not installed in an engine yet")
        return self._registry

    # -- public surface -------------------------------------------------------------------------------

    def register_rule(self, name: str, function: RuleFunction) -> None:
        """Register a rule observer in this engine only (a `kind: rule` definition is added when missing)."""
        self.rules.register(name, function)
        self._define_rule(name)

    def pairing(self, observed_session_id: str) -> Pairing | None:
        """The pairing of an observed session, if this engine has one."""
        return self.registry.pairings.get(observed_session_id)

    async def stop_observer(self, observed_session_id: str, *, by: str = "a person") -> bool:
        """Stop the observer of a session for good (tombstone); returns whether there was one to stop."""
        pairing = await self.pairing_for(observed_session_id)
        if pairing is None or pairing.state in ("stopped", "blocked"):
            return False
        # The tombstone first: should the observer's turn run in another live engine (its stop then refused),
        # the pairing is still over for good, and its reports are refused from now on.
        await self.registry.stop(pairing, f"stopped by {by}")
        if pairing.observer_session_id is not None:
            with contextlib.suppress(Conflict):
                await self.engine.stop(pairing.observer_session_id, by=by)
        return True

    async def pairing_for(self, observed_session_id: str, *, fresh: bool = False) -> Pairing | None:
        """The pairing of a session, resolved and armed first when this engine has not met it yet.

        `fresh` says the session never had a pairing (its first event ever starts its first turn), so arming
        it has no observer ref to read (see `PairingRegistry.arm`)."""
        known = self.registry.pairings.get(observed_session_id)
        if known is not None:
            return known
        task = self._resolving.get(observed_session_id)
        if task is None:
            task = _background(self._resolve(observed_session_id, fresh=fresh))
            self._resolving[observed_session_id] = task
            task.add_done_callback(lambda _: self._resolving.pop(observed_session_id, None))
            self._track(task)
        return await asyncio.shield(task)

    async def pairing_of_observer(self, observer: SessionRecord) -> Pairing | None:
        """The pairing an observer session serves (resolving its observed session when needed; as the store
        last recorded it when another engine, or none, holds the observed agent: see `_recorded_pairing`)."""
        pairing = self.registry.of_observer(observer.id)
        if pairing is None and observer.parent_id is not None:
            pairing = await self.pairing_for(observer.parent_id)
            if pairing is None and not self.owns(observer.parent_id):
                pairing = await self._recorded_pairing(observer, observer.parent_id)
        if pairing is None or pairing.observer_session_id != observer.id:
            return None
        return pairing

    async def _recorded_pairing(self, observer: SessionRecord, observed_id: str) -> Pairing | None:
        """The pairing as its owner last recorded it, for an observer whose turn runs here while this engine does
        not hold the agent it watches (a deploy or a crash moved the observer's turn, and the watched agent is
        idle or runs elsewhere): its report goes by the state the owner armed. Not kept here: arming, gating
        and retiring stay the owner's."""
        store = self.engine.store
        try:
            observed = await store.get_session(observed_id)
        except NotFound:
            return None
        entry = await observer_entry(store, observed, reports=0)
        roster = self.engine.roster
        if entry is None or entry.state not in ARMED_STATES or entry.observer_session_id != observer.id:
            return None
        if entry.observer_type is None or entry.observer_type not in roster:
            return None
        guidance = roster.get(observed.role).observer_message if observed.role in roster else None
        return Pairing(
            observed.id,
            observed.name,
            observed.boss,
            roster.get(entry.observer_type),
            guidance,
            state="armed",
            observer_session_id=observer.id,
            observed_role=observed.role,
        )

    # -- taps and digests -----------------------------------------------------------------------------

    def _tap(self, session_id: str) -> ActivityTap:
        return ActivityTap(self, session_id)  # (held by the session's driver only: it goes with the driver)

    def submit(self, pairing: Pairing, items: tuple[ActivityItem, ...]) -> None:
        """Buffer a closed segment for the pairing's observer and make sure a delivery runs (never awaits)."""
        if self._closed or pairing.state in ("denied", "stopped", "blocked"):
            return
        pairing.add(Digest(items, observed_name=pairing.observed_name))  # rendered when read
        if pairing.state == "retired":  # the observed agent runs again: arm again (it reattaches)
            pairing.state = None
            pairing.arming = self.spawn(self._arm(pairing))
        elif pairing.state == "armed":
            self._deliver(pairing)

    def observed_may_have_ended(self, pairing: Pairing) -> None:
        """The observed agent may have ended (it was deleted): once its buffer is delivered, the pairing retires
        if the store says so, and is let go; one over already is let go at once."""
        pairing.may_have_ended = True
        if pairing.state == "armed":
            self._deliver(pairing)
        elif pairing.state is not None:  # over already (its observer stopped, say): nothing will need it
            self.registry.forget(pairing)

    def observer_turn_stopped(self, observer_session_id: str, reason: str | None) -> None:
        """An observer was stopped (its turn, or the observer between turns, ended `cancelled`): the pairing is
        over for good."""
        pairing = self.registry.of_observer(observer_session_id)
        if pairing is not None and pairing.state not in ("stopped", "blocked"):
            self.spawn(self.registry.stop(pairing, f"the observer was {reason or 'stopped'}"))

    # -- resolving and arming -------------------------------------------------------------------------

    def deferred(self, session_id: str) -> bool:
        """Whether the last resolution of the session was left for later (another engine owned it)."""
        if session_id in self._deferred:
            self._deferred.discard(session_id)
            return True
        return False

    def owns(self, session_id: str) -> bool:
        """Whether this engine owns the session's turns (holds its lease), and so may arm its pairing."""
        leases = leases_of(self.engine)
        return leases is None or leases.holds(session_id)

    async def _unheld(self, session_id: str) -> bool:
        """Whether no engine holds the session's lease: its turn ended and let it go before this engine's tap
        was handed the turn's events (on a shared ring they are handed out by a task, after the turn's end), so
        this engine, which ran the turn, arms the pairing (a race with another engine's arming is settled by the
        store, which keeps one observer per pairing)."""
        try:
            lease = await self.engine.store.get_lease(session_id)
        except Exception:  # (the next event looks again)
            return False
        leases = leases_of(self.engine)
        # (Its own lease, still in the store while this engine lets it go, is no other engine's either.)
        return lease is None or lease.expired or (leases is not None and lease.owner == leases.owner)

    async def _resolve(self, session_id: str, *, fresh: bool = False) -> Pairing | None:
        if not self.owns(session_id) and not await self._unheld(session_id):
            self._resolving.pop(session_id, None)  # not ours (yet): look again at a later event
            self._deferred.add(session_id)
            return None
        try:
            session = await self.engine.store.get_session(session_id)
        except NotFound:
            return None
        target = await self._target(session)
        if isinstance(target, str):
            if not fresh:
                await self._retire_left_armed(session, target)
            return None
        definition = self.engine.roster.get(session.role)
        pairing = Pairing(
            session.id, session.name, session.boss, target, definition.observer_message, observed_role=session.role
        )
        self.registry.pairings[session.id] = pairing
        await self._arm(pairing, fresh=fresh)
        return pairing

    async def _target(self, session: SessionRecord) -> AgentDefinition | str:
        """The observer definition the session is to be paired with here, or why it runs unobserved."""
        roster = self.engine.roster
        if session.role not in roster:
            return f"the role {session.role!r} is not defined in this engine"
        definition = roster.get(session.role)
        if definition.observer is None:
            return f"the role {session.role!r} names no observer"
        if session.is_observer:
            await self._warn_once(
                session,
                "chained",
                f"the observer {definition.observer!r} declared for {session.role!r} is ignored: this session "
                "runs as an observer itself, and observers are not chained",
            )
            return "observers are not chained"
        if not self.engine.config.observer_agents_enabled:
            return "observer agents are turned off"
        # No chaining, as the seeds resolve it: only a session that runs as an observer ignores its own
        # declaration (above); the observer type declaring an observer of its own does not unobserve this one.
        target = roster.observer_of(session.role, is_observer=session.is_observer)
        if target is None:
            await self._warn_once(session, "unavailable", _unavailable(definition))
            return f"the observer {definition.observer!r} is not an agent type here"
        if target.kind == "rule" and target.name not in self.rules:
            await self._warn_once(
                session,
                "no-rule",
                f"{target.name!r} is a rule observer with no registered function, so {session.role!r} runs "
                f"unobserved; register one with register_rule_observer({target.name!r}, ...)",
            )
            return f"the rule observer {target.name!r} has no registered function"
        return target

    async def _retire_left_armed(self, session: SessionRecord, reason: str) -> None:
        """A session that runs unobserved here but whose pairing an earlier engine left armed (its role no
        longer names the observer, say): record it retired, so that `agent_get` does not show an observer that
        no longer watches. One read, for a session that had turns before. (An engine with observer agents
        turned off watches no session at all, and leaves the last state recorded as it was.)"""
        store = self.engine.store
        found = await store.read_events_backward(session.id, types=["observer.state"], limit=1)
        left = found[0].payload if found else None
        if not isinstance(left, ObserverStateChanged) or left.state != "armed":
            return
        retired = ObserverStateChanged(
            observer_type=left.observer_type,
            observer_session_id=left.observer_session_id,
            state="retired",
            reason=f"runs unobserved: {reason}",
        )
        driver = await self.engine.driver(session.id)
        await driver.commit(Write(session.id, events=[NewEvent(retired)], touch=False), rides=True)

    async def _arm(self, pairing: Pairing, *, fresh: bool = False) -> None:
        try:
            await self.registry.arm(pairing, fresh=fresh)
        except Exception as exc:
            await self.registry.set_state(pairing, "denied", f"arming failed: {type(exc).__name__}: {exc}")
            return
        if pairing.state == "armed" and pairing.buffer:
            self._deliver(pairing)

    def _deliver(self, pairing: Pairing) -> None:
        if pairing.delivering is not None and not pairing.delivering.done():
            return
        courier = self._rule_courier if pairing.definition.kind == "rule" else self.courier
        assert courier is not None
        pairing.delivering = self.spawn(run_deliveries(self.registry, pairing, courier))

    async def _warn_once(self, session: SessionRecord, kind: str, message: str) -> None:
        if (session.id, kind) in self._warned:
            return
        self._warned.add((session.id, kind))
        log.info("session %s (%s): %s", session.id, session.role, message)  # (as `PairingRegistry.warn` logs)
        notice = RuntimeNotice(type="runtime.warning", message=message, source=SOURCE, detail={"role": session.role})
        try:
            driver = await self.engine.driver(session.id)
            await driver.commit(Write(session.id, events=[NewEvent(notice)], touch=False))
        except Exception as exc:
            log.warning("could not record the warning on %s (%s): %s", session.id, message, exc)
            raise

    def _define_rule(self, name: str) -> None:
        if self._engine is not None and name not in self._engine.roster:
            self._engine.roster.add(rule_definition(name))

    # -- background tasks -----------------------------------------------------------------------------

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any] | None:
        """Run `coro` as a task of the subsystem (cancelled when the engine closes)."""
        if self._closed:
            coro.close()
            return None
        task = _background(coro)
        self._track(task)
        return task

    def _track(self, task: asyncio.Task[Any]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("observer task failed: %r", task.exception())


class ActivityTap:
    """The ThreadObserver on each session: records activity and hands closed segments to its pairing."""

    own_events_only = True
    """Only what this engine wrote: a turn another engine ran is digested by that engine's tap (the pairing's
    owner's), not a second time here."""

    def __init__(self, hub: ObserverAgents, session_id: str) -> None:
        self.hub = hub
        self.session_id = session_id
        self.recorder = ActivityRecorder()
        """Turns events into activity items."""
        self.status: Literal["new", "resolving", "observed", "unobserved"] = "new"
        self._pairing: Pairing | None = None
        self._pending: list[tuple[ActivityItem, ...]] = []
        self._dropped = 0  # segments dropped from `_pending` (the next batch says how many)
        self._turn: str | None = None
        """The turn whose events this tap records (it saw the turn start, or read back its start)."""
        self._held: list[Event] | None = None
        """Events waiting while the tap reads back the start of a turn another engine began (`_catch_up`)."""
        self._resolving: asyncio.Task[Any] | None = None
        """The resolution of the pairing under way (it says how the recorder segments: see `_resolve`)."""

    def on_event(self, thread_id: str, event: Event) -> None:
        """Record the event; never awaits, never raises for the observed session's sake."""
        payload = event.payload
        by_observer = self.hub.registry.by_observer
        if isinstance(payload, TurnEnded) and payload.outcome == "cancelled" and thread_id in by_observer:
            self.hub.observer_turn_stopped(thread_id, payload.reason)
        if self.status == "unobserved":
            return
        if isinstance(payload, RuntimeNotice) and payload.source == DELETION_SOURCE:
            # Deleted between turns (no turn of it ends to say so), maybe long after its last driver was let go.
            pairing = self._pairing or self.hub.registry.pairings.get(self.session_id)
            if pairing is not None:
                self.hub.observed_may_have_ended(pairing)
        if self.status == "new":
            self.status = "resolving"
            # The session's first event ever, starting its first turn: no pairing was armed for it before (an
            # arm leaves an `observer.state` event on the session), so it has no observer ref to read.
            self._resolving = self.hub.spawn(self._resolve(fresh=event.seq == 1 and isinstance(payload, TurnStarted)))
        if self._held is not None:
            self._held.append(event)
            return
        if event.turn_id is not None and event.turn_id != self._turn:
            self._turn = event.turn_id
            if not (isinstance(payload, TurnStarted) and payload.trigger == "input"):  # begun in another engine
                self._held = [event]
                self.hub.spawn(self._catch_up(event))
                return
        self._take(event)

    def _take(self, event: Event) -> None:
        items = self.recorder.record(event)
        if items is None:
            return
        if self._pairing is not None:
            self.hub.submit(self._pairing, items)
        else:
            pending = [*self._pending, items]
            self._dropped += max(0, len(pending) - MAX_BUFFERED)
            self._pending = pending[-MAX_BUFFERED:]

    async def _catch_up(self, first: Event) -> None:
        """Record the part of `first`'s turn another engine ran before this one took it over, so the digest
        covers the whole turn: the turn's earlier events are read back into a fresh recorder, leaving out the
        segments they closed (the other engine's to deliver), then the events held meanwhile are taken."""
        try:
            earlier = await self.hub.engine.store.read_events(self.session_id, turn_id=first.turn_id, limit=10_000)
            if self._resolving is not None:  # segmented as the pairing will be (a rule's at every call)
                await asyncio.wait({self._resolving})
            recorder = ActivityRecorder(max_results=self.recorder.max_results)
            for event in earlier:
                if event.seq >= first.seq:
                    break
                recorder.record(event)
        except Exception as exc:  # the digest then starts where this engine took over
            log.warning("could not read back the start of a turn of %s: %s", self.session_id, exc)
        else:
            self.recorder = recorder
        held, self._held = self._held or [], None
        for event in held:
            self._take(event)

    def on_subscribe(self, thread_id: str, request: object, snapshot: ReplaySnapshot) -> None:
        """Taps serve no clients."""

    async def _resolve(self, *, fresh: bool = False) -> None:
        pairing = await self.hub.pairing_for(self.session_id, fresh=fresh)
        if pairing is None and self.hub.deferred(self.session_id):
            self.status = "new"  # another engine owns the session: look again at its next event here
            return
        if pairing is None:
            self.status = "unobserved"
            self._pending.clear()
            return
        self.status = "observed"
        pending, self._pending = self._pending, []
        if pairing.definition.kind == "rule":
            # A rule costs nothing: let it see every call as it is made. (A call made while the pairing resolved,
            # a tool that runs long after it, is seen now.)
            opened = self.recorder.segment_each_call()
            if opened is not None:
                pending.append(opened)
        self._pairing = pairing
        pairing.dropped += self._dropped
        self._dropped = 0
        for items in pending:
            self.hub.submit(pairing, items)


def _background(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """A task of the subsystem, in a context of its own: one started from a tap runs inside a turn, whose
    context (the model run's, its emitter's, its driver's) it would otherwise keep alive as long as it is kept."""
    return asyncio.create_task(coro, context=contextvars.Context())


def _unavailable(definition: AgentDefinition) -> str:
    return (
        f"its observer {definition.observer!r} is not an agent type in the roster, so {definition.name!r} runs "
        "unobserved"
    )


class _WithExtensions(Protocol):
    @property
    def extensions(self) -> Sequence[object]: ...


def observer_agents(engine: _WithExtensions) -> ObserverAgents:
    """The observer subsystem installed in `engine`."""
    for extension in engine.extensions:
        if isinstance(extension, ObserverAgents):
            return extension
    raise UserError("this engine has no ObserverAgents extension; open it without extensions=[] to get one")
