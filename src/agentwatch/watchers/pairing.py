"""Pairings: which observer watches which session, and in what state.

The registry maps an observed session id (the engine's boss session plays the "main conversation") to its
pairing: the observer type and definition, the observer's session, a buffer of digests and a state.

```
            ┌──────── deny (arm or any batch) ──> denied
 (first  ──>│ gate ── allow ──> armed ── observed task stopped, or deleted ──> retired ── it runs again ──> armed
 activity)  │                     └──── a person stops the observer ──> stopped (tombstone)
            └──── tombstone found ──> blocked
```

- **arm**: the gate asks what a background `agent_task` by the observed agent, with its real grant, would be
  told: `[observers] deny` and `allowed_types` in `agentwatch.toml` first, then the policy chain on the spawn
  request the engine would make (`purpose="observer_arm"`), whose grant check denies a model observer to an
  agent without the `spawn` grant (a rule observer spawns nothing and needs none). Anything but allow
  leaves the pairing `denied`, with a `runtime.warning`. The same gate runs before every batch
  (`observer_delivery`), so a policy change stops delivery (and a change of `[observers]`, which the engine
  reads when it opens, once it has restarted).
- **reattach or fresh**: the observer ref kept with the observed session names the previous observer. It is
  reattached when the type still matches, it was not stopped and its session still exists; otherwise a new
  observer session starts. One that replaces an observer of the same type whose session is gone (reaped: its
  context is lost) is told so in its framing (the recovery note), as one that replaces it at a delivery is. A
  rule observer has no session: its `armed` state names it (a ref is written for it only to replace one naming
  another observer, or as its tombstone).
- **tombstone**: a person's stop holds for the pairing, the observed session and the observer type: a
  tombstone of that type (`Store.get_observer_tombstone`; kept when the ref goes on to name another type)
  makes the pairing `blocked`, and the ref names it again. A stopped observer is never silently brought back,
  not even after the role named another observer type in between; an observer of another type is not
  stopped by it. (A person's deletion is such a stop; when retention reaps the deleted session, the store
  turns its ref into the tombstone.)
- **marker**: a new observer session is created marked `is_observer`, together with the ref that names it,
  in one store transaction (so no crash leaves an observer without its ref, and the store refuses a second
  live observer for one pairing: the loser of a race reattaches to the winner's). The mark is read back
  before the pairing arms (the winner's too: a live session the ref names whose mark is gone leaves the
  pairing `blocked`); deliveries check it again and refuse an observer whose mark cannot be confirmed.
- **no longer named**: an engine in which the observed role names no observer (any more) records a pairing
  left `armed` as `retired`, and reattaches the same observer once the role names its type again.
- **owner only**: only the engine that owns the observed session (holds its lease, see
  `agentwatch.runtime.leases`) resolves and arms its pairing; other engines leave it alone.

Every state change is an `observer.state` event on the observed session, and the ref is durable, so
`describe(store, session)` shows the pairing from the store alone (for `agent_get`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import JsonValue

from agentwatch.config import ObserverConfig
from agentwatch.errors import Conflict, NotFound
from agentwatch.events import (
    NewEvent,
    ObserverReported,
    ObserverStateChanged,
    Origin,
    PairingState,
    RuntimeNotice,
    new_id,
)
from agentwatch.reads.observer import STOPPED_FOR_GOOD, describe_observer, stopped_by_person
from agentwatch.runtime.plan import lives_on
from agentwatch.runtime.policy import ToolRequest, Verdict
from agentwatch.runtime.roster import AgentDefinition
from agentwatch.store import ObserverRef, SessionDraft, SessionRecord, Write
from agentwatch.watchers.digest import Digest, safe_name

if TYPE_CHECKING:
    from agentwatch.runtime.services import Runtime

__all__ = ["MAX_BUFFERED", "Pairing", "PairingRegistry", "describe", "observer_source"]

describe = describe_observer
"""The observer of a session as `agent_get` shows it (see `agentwatch.reads.observer`)."""

log = logging.getLogger(__name__)

MAX_BUFFERED = 50
"""Digests kept for an observer that falls behind; older ones are dropped (and the next batch says so)."""
SOURCE = "observer"
"""The `source` of observer sessions and of the notes the subsystem records."""


def observer_source(observer_type: str) -> str:
    """The origin ref of an observer's reports, and the source of notes about it: `observer:<type>`."""
    return f"observer:{observer_type}"


class MarkerUnconfirmed(Exception):
    """The observer session's `is_observer` mark could not be read back."""


@dataclass(eq=False)
class Pairing:
    """One observed session and its observer."""

    observed_session_id: str
    observed_name: str
    """The observed session's name (the digest envelope is named after it)."""
    main: bool
    """True when the observed session is the boss: reports go to "the main conversation"."""
    definition: AgentDefinition
    """The observer's agent definition."""
    observer_message: str | None = None
    """The observed definition's extra guidance, appended to every batch."""
    state: PairingState | None = None
    """None while it is being armed."""
    reason: str | None = None
    observer_session_id: str | None = None
    """The observer's session (None for a rule observer)."""
    first_run_done: bool = False
    """Whether the observer session already got its framing prompt."""
    recovery: bool = False
    """The observer session was started fresh in place of one of this pairing whose context was lost: the framing
    of its first batch says so (`Batch.recovery`)."""
    buffer: list[Digest] = field(default_factory=list)
    dropped: int = 0
    """Digests dropped from a full buffer since the last batch."""
    delivering: asyncio.Task[None] | None = None
    arming: asyncio.Task[None] | None = None
    """The (re-)arming under way, which a report racing it waits for."""
    memory: dict[str, Any] = field(default_factory=dict)
    """Kept between batches for a rule observer."""
    observed_role: str | None = None
    """The observed session's role (a session never changes role), so the gate before each batch need not read
    the session; None reads it."""
    may_have_ended: bool = False
    """The observed agent may have ended (a turn of it ended `cancelled`, or it was deleted): once the buffer is
    delivered, the store says whether the pairing retires (see `delivery.run_deliveries`)."""

    @property
    def observer_type(self) -> str:
        """The observer's agent type."""
        return self.definition.name

    @property
    def target(self) -> str:
        """Where reports go, in words."""
        return "the main conversation" if self.main else safe_name(self.observed_name)

    def add(self, digest: Digest) -> None:
        """Buffer a digest, dropping the oldest when the buffer is full."""
        self.buffer.append(digest)
        if len(self.buffer) > MAX_BUFFERED:
            del self.buffer[0]
            self.dropped += 1

    def take_batch(self) -> tuple[list[Digest], int]:
        """The whole buffer as one batch, and how many digests were dropped before it."""
        batch, dropped = self.buffer[:], self.dropped
        self.buffer.clear()
        self.dropped = 0
        return batch, dropped


class PairingRegistry:
    """The pairings of one engine: arming, lookups, state changes, stops."""

    def __init__(self, engine: Runtime) -> None:
        self.engine = engine
        self.pairings: dict[str, Pairing] = {}
        """Pairings by observed session id."""
        self.by_observer: dict[str, str] = {}
        """Observed session id by observer session id."""

    def of_observer(self, observer_session_id: str) -> Pairing | None:
        """The pairing an observer session serves, if this engine knows it."""
        observed = self.by_observer.get(observer_session_id)
        return self.pairings.get(observed) if observed is not None else None

    def forget(self, pairing: Pairing) -> None:
        """Let go of a pairing whose observed agent is gone for good (deleted or reaped): a long-running engine
        keeps none for agents that will never run again."""
        if self.pairings.get(pairing.observed_session_id) is pairing:
            del self.pairings[pairing.observed_session_id]
        if pairing.observer_session_id is not None:
            self.by_observer.pop(pairing.observer_session_id, None)

    # -- notes on the observed session ----------------------------------------------------------------

    async def record(
        self,
        pairing: Pairing,
        *payloads: ObserverStateChanged | ObserverReported | RuntimeNotice,
        rides: bool = False,
    ) -> None:
        """Commit notes about the pairing to the observed session (outside any turn: they are not its work).
        With `rides`, they may share the commit of the session's next write (a running turn's, mostly)."""
        sid = pairing.observed_session_id
        driver = await self.engine.driver(sid)
        await driver.commit(Write(sid, events=[NewEvent(p) for p in payloads], touch=False), rides=rides)

    async def warn(self, pairing: Pairing, message: str, **detail: JsonValue) -> None:
        """Record a `runtime.warning` about the observer on the observed session (and log it).

        Logged as info: the notice is what says it (`agent_tail`, the dashboard, `agentwatch run`'s events), and
        a warning in the log is printed a second time by a command, which sets up no logging. Only a notice that
        cannot be recorded is a warning in the log."""
        log.info("observer of %s: %s", pairing.observed_session_id, message)
        notice = RuntimeNotice(
            type="runtime.warning",
            message=message,
            source=observer_source(pairing.observer_type),
            detail={"observer_session_id": pairing.observer_session_id, **detail},
        )
        try:
            await self.record(pairing, notice)
        except Exception as exc:  # the observed session may be gone; the log has it
            log.warning("could not record the warning on %s (%s): %s", pairing.observed_session_id, message, exc)

    async def set_state(
        self, pairing: Pairing, state: PairingState, reason: str | None, *, record: bool = True
    ) -> None:
        """Move the pairing to `state` and record it on the observed session (not with `record=False`: a deleted
        session's last event is the notice of its deletion, and `describe` reads its pairing as retired)."""
        pairing.state, pairing.reason = state, reason
        if state in ("denied", "stopped", "blocked"):
            pairing.buffer.clear()  # over for good (in this engine): nothing buffered will be sent
        if not record:
            return
        changed = ObserverStateChanged(
            observer_type=pairing.observer_type,
            observer_session_id=pairing.observer_session_id,
            state=state,
            reason=reason,
        )
        try:
            # The state is the watchers' own bookkeeping: it need not cost the observed turn a commit.
            await self.record(pairing, changed, rides=True)
        except Exception as exc:
            log.warning("could not record observer state on %s: %s", pairing.observed_session_id, exc)

    # -- the gate -------------------------------------------------------------------------------------

    async def gate(self, pairing: Pairing, purpose: str) -> Verdict:
        """Ask what a background `agent_task` by the observed agent, with its real grant, would be told
        (may raise; raises `TimeoutError` past `[observers] delivery_timeout_seconds`): the project's deny
        rules and allowed observer types first, then the policy chain.

        A model observer needs the observed agent's `spawn` grant (the policy chain's grant check denies it
        otherwise), and is told `ask` when the observed role has `agent_task` approved by a person
        (`approval_tools`): only a clean allow arms it. A rule observer spawns no agent and no model reads the
        activity, so it needs neither; the project's rules and the policy chain still decide on it."""
        engine = self.engine
        configured = configured_verdict(engine.config.observers, pairing.observer_type)
        if configured is not None:
            return configured
        if pairing.observed_role is None:
            pairing.observed_role = (await engine.store.get_session(pairing.observed_session_id)).role
        role = pairing.observed_role
        grant: frozenset[str] = frozenset()
        if role in engine.roster:  # read at each ask: a changed definition changes the answer
            observed = engine.roster.get(role)
            grant = frozenset(observed.grant)
            if pairing.definition.kind != "rule" and "agent_task" in observed.approval_tools:
                return Verdict("ask", f"role {role!r} has agent_task approved by a person (approval_tools)")
        if pairing.definition.kind == "rule":
            grant |= {"spawn"}
        request = ToolRequest(
            "agent_task",
            {
                "role": pairing.observer_type,
                "prompt": f"Observe {pairing.observed_name} and report with ObserverReport.",
                "background": True,
                "observes": pairing.observed_session_id,
            },
            session_id=pairing.observed_session_id,
            role=role,
            grant=grant,
            purpose="observer_arm" if purpose == "observer_arm" else "observer_delivery",
        )
        # A check that hangs fails, as one that raises does.
        return await engine.policy.decide(request, timeout=engine.config.observers.delivery_timeout_seconds)

    # -- arming ---------------------------------------------------------------------------------------

    async def arm(self, pairing: Pairing, *, fresh: bool = False) -> None:
        """Gate, then reattach the previous observer or start a fresh one; leaves the pairing in its state.

        With `fresh`, the observed session never had a pairing (see `ObserverAgents.pairing_for`): there is no
        observer ref to read."""
        store = self.engine.store
        ref = None if fresh else await store.get_observer_ref(pairing.observed_session_id)
        stone = await self._tombstone_of(pairing, ref)
        if stone is not None:
            if stone != ref:  # (left when the role named another observer type): the ref names this pairing again
                await store.set_observer_ref(stone)
            pairing.observer_session_id = stone.observer_session_id
            await self.set_state(pairing, "blocked", STOPPED_FOR_GOOD)
            return
        try:
            verdict = await self.gate(pairing, "observer_arm")
        except Exception as exc:
            await self.set_state(pairing, "denied", f"the policy check failed: {type(exc).__name__}: {exc}")
            return
        if verdict.decision != "allow":
            reason = _verdict_reason(verdict)
            await self.set_state(pairing, "denied", reason)
            await self.warn(pairing, f"the observer {pairing.observer_type!r} is not armed: {reason}")
            return
        if pairing.definition.kind == "rule":
            if ref is not None and (ref.observer_type, ref.observer_session_id) != (pairing.observer_type, None):
                # Another observer was paired before: the ref must no longer name it. (With no ref at all, the
                # `armed` state recorded next names the rule, and one store write is saved.)
                await store.set_observer_ref(
                    ObserverRef(observed_session_id=pairing.observed_session_id, observer_type=pairing.observer_type)
                )
            await self.set_state(pairing, "armed", "rule observer")
            return
        previous = await self._reattachable(ref, pairing)
        if previous == "stopped":
            await self._tombstone(pairing, ref.observer_session_id if ref else None)
            await self.set_state(pairing, "blocked", STOPPED_FOR_GOOD)
            return
        try:
            if isinstance(previous, SessionRecord):
                await self.attach(pairing, previous.id, first_run_done=await self._had_input(previous.id))
                reason = "reattached to its observer"
            else:
                await self.spawn(pairing, recovery=previous == "lost")
                reason = "observer started"
        except MarkerUnconfirmed as exc:
            await self.set_state(pairing, "blocked", str(exc))
            return
        await self.set_state(pairing, "armed", reason)

    async def _tombstone_of(self, pairing: Pairing, ref: ObserverRef | None) -> ObserverRef | None:
        """The tombstone of the pairing's observer type on the observed session: the ref itself when it names
        that type, else the one the store kept when the ref went on to another type (there is none without a
        ref: a ref is never removed)."""
        if ref is None or ref.observer_type == pairing.observer_type:
            return ref if ref is not None and ref.stopped else None
        return await self.engine.store.get_observer_tombstone(pairing.observed_session_id, pairing.observer_type)

    async def _reattachable(self, ref: ObserverRef | None, pairing: Pairing) -> SessionRecord | str | None:
        """The observer session to reattach; "stopped" when a person stopped it, "lost" when it is gone (reaped:
        a fresh one starts, told that the context was lost), None when there is none of this type."""
        if ref is None or ref.observer_type != pairing.observer_type or ref.observer_session_id is None:
            return None
        try:
            session = await self.engine.store.get_session(ref.observer_session_id)
        except NotFound:
            return "lost"
        if stopped_by_person(session):
            return "stopped"
        return session if session.is_observer else None

    async def _had_input(self, session_id: str) -> bool:
        return bool(await self.engine.store.list_inputs(session_id, pending_only=False))

    async def spawn(self, pairing: Pairing, *, recovery: bool = False) -> None:
        """Start a new observer session for the pairing, marked, with its ref in the same transaction, and
        confirmed; when another live observer was paired meanwhile, reattach to that one instead. `recovery`:
        it replaces an observer of the pairing whose context was lost (its framing says so)."""
        store = self.engine.store
        observed = await store.get_session(pairing.observed_session_id)
        definition = pairing.definition
        session_id = new_id("ses")
        draft = SessionDraft(
            id=session_id,
            name=f"{definition.name}-{session_id[-6:]}",
            role=definition.name,
            display_name=f"observer of {observed.name}",
            feature=definition.feature,
            scope=observed.scope,
            source=SOURCE,
            model_ref=definition.model,
            parent_id=observed.id,
            run_id=observed.run_id,
            origin=Origin(kind="observer", ref=observed.id),
            is_observer=True,
        )
        ref = ObserverRef(observed_session_id=observed.id, observer_type=pairing.observer_type)
        stale = await store.get_observer_ref(observed.id)
        if stale is not None and stale.observer_type != ref.observer_type and not stale.stopped:
            # The observed role now declares another observer type: the old pairing is over (its ref goes; a
            # crash right after this leaves a ref with no observer, which the next arm fills).
            await store.set_observer_ref(ref)
        try:
            await store.create_session(draft, observer_ref=ref)
        except Conflict:
            current = await store.get_observer_ref(observed.id)
            if current is None or current.observer_session_id is None or current.observer_type != ref.observer_type:
                raise
            winner = current.observer_session_id
            if not (await store.get_session(winner)).is_observer:  # (the one the ref named, unmarked since)
                raise MarkerUnconfirmed(f"observer session {winner!r} could not be confirmed as an observer") from None
            # (The winner replaced the same lost observer, if one was lost.)
            first_run_done = await self._had_input(winner)
            await self.attach(pairing, winner, first_run_done=first_run_done, recovery=recovery, record=False)
            return
        if not (await store.get_session(session_id)).is_observer:
            raise MarkerUnconfirmed(f"observer session {session_id!r} could not be confirmed as an observer")
        await self.attach(pairing, session_id, first_run_done=False, recovery=recovery, record=False)

    async def attach(
        self,
        pairing: Pairing,
        observer_session_id: str,
        *,
        first_run_done: bool,
        recovery: bool = False,
        record: bool = True,
    ) -> None:
        """Point the pairing (and, with `record`, the durable ref) at an observer session (`recovery`: see
        `Pairing.recovery`)."""
        if pairing.observer_session_id is not None:
            self.by_observer.pop(pairing.observer_session_id, None)
        pairing.observer_session_id = observer_session_id
        pairing.first_run_done = first_run_done
        pairing.recovery = recovery
        self.by_observer[observer_session_id] = pairing.observed_session_id
        if not record:
            return
        await self.engine.store.set_observer_ref(
            ObserverRef(
                observed_session_id=pairing.observed_session_id,
                observer_type=pairing.observer_type,
                observer_session_id=observer_session_id,
            )
        )

    # -- stops ----------------------------------------------------------------------------------------

    async def stop(self, pairing: Pairing, reason: str) -> None:
        """A person stopped the observer: write the tombstone; the pairing is over for good."""
        if pairing.state == "stopped":
            return
        await self._tombstone(pairing, pairing.observer_session_id)
        await self.set_state(pairing, "stopped", reason)

    async def _tombstone(self, pairing: Pairing, observer_session_id: str | None) -> None:
        now = datetime.now(UTC)
        await self.engine.store.set_observer_ref(
            ObserverRef(
                observed_session_id=pairing.observed_session_id,
                observer_type=pairing.observer_type,
                observer_session_id=observer_session_id,
                stopped=True,
                stopped_at=now,
            )
        )


def configured_verdict(config: ObserverConfig, observer_type: str) -> Verdict | None:
    """The verdict of `[observers]` in `agentwatch.toml` on arming or feeding an observer type (None: no rule
    applies)."""
    policy = "observers config"
    if "agent_task" in config.deny:
        return Verdict("deny", "agent_task is denied by [observers] deny, so no observer is armed", policy)
    if f"agent_task({observer_type})" in config.deny:
        return Verdict("deny", f"agent_task({observer_type}) is denied by [observers] deny", policy)
    if config.allowed_types is not None and observer_type not in config.allowed_types:
        allowed = ", ".join(config.allowed_types) or "none"
        return Verdict("deny", f"{observer_type!r} is not in [observers] allowed_types ({allowed})", policy)
    return None


def observed_alive(session: SessionRecord) -> bool:
    """Whether an observed session can still take a report: it exists, was not deleted and was not stopped,
    unless it lives on between turns.

    A task whose turn ended (`completed`, `failed`, `interrupted`) still takes input, so it keeps its pairing
    armed and its reports wait for its next turn. So does the boss (the main conversation) or a chat whose turn
    a person stopped: a stop interrupts that turn, not the conversation, and the report it got then is read at
    the next turn it is given (it starts none: see `agentwatch.runtime.plan`)."""
    return session.deleted_at is None and (session.status != "cancelled" or lives_on(session))


def _verdict_reason(verdict: Verdict) -> str:
    by = f" by policy {verdict.policy!r}" if verdict.policy else ""
    return f"{verdict.decision}{by}: {verdict.reason or 'no reason given'}"
