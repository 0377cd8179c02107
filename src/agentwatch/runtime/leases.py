"""Leases: which engine owns a session's turns, so two engines on one store never run the same turn.

Every engine is an owner with an identity of its own (`own_<host>_<pid>_<random>`). Before its turn loop
runs a turn of a session, the engine takes the session's lease in the store: a row naming the owner and
an expiry (`[sessions] lease_seconds`, default 15 s). While the loop runs, the engine renews every lease it
holds (every `lease_renew_seconds`, default a third of the lease); when the loop runs out of work it lets
the lease go. Taking a lease succeeds only when nobody holds it or its holder's lease expired, so:

- a turn marked `running` (or paused, or with input waiting) whose owner is alive is left to that owner:
  another engine that finds it (at start, after an `agent_enqueue` or an answer it took) does not take the
  lease and leaves the work where it is; the owner's loop looks at the inbox and the requests again once
  it lets the lease go after a turn (and before, too, when work was queued in its own engine meanwhile), so
  nothing queued meanwhile is stranded;
- a turn whose owner died is continued by whichever engine takes the expired lease first: each engine that
  recovers turns sweeps the store for expired leases four times a second, the first time as it starts, so an
  orphaned turn continues within the lease plus about a second, and records a `runtime.info` note (source
  `leases`) naming the previous owner. The restart note and `continue_after_restart` apply as after a
  restart. The turns of one dead owner are spread over the engines that have their roles: a sweep takes a
  share of the orphans it sees for the first time (`TAKEOVER_SHARE`, picked at random, one fewer per
  `TAKEOVER_SHARE_TURNS` turns the engine already runs, at least one), so the other engines' sweeps, which
  come within the same quarter second, take the others; an orphan it saw in its previous sweep, which nobody
  took meanwhile, it takes whatever its share (it may be alone), so a turn waits at most two sweeps, however
  many there are: a sweep reads every expired lease, a page (`SWEEP_PAGE`) at a time, and takes those of a page
  before it reads the next. An engine that starts leaves the turns of lapsed leases to its sweep too
  (`Leases.runs_at_start`: at once it looks only at the unfinished turns whose lease nobody holds), so a
  newcomer takes its share of them, not all, and an engine restarted alone all of them by its second sweep;
- a stop sent to an engine that does not run the turn (through another service) is asked of the lease's
  holder in the store (`Store.request_stop`); the holder reads it about once a second while it holds leases
  and stops the turn itself, as whoever asked;
- a lease is lost when the store says so: a renewal (or a confirmation) finds the row held by another
  owner, who took it over after it expired. A renewal that comes back late loses nothing: under load it
  waits behind other writes, the store renews an expired lease nobody took over, and a busy engine never
  fails its own turns. One that fails (the store cannot be reached from here, though other engines may
  reach it) loses the leases whose time has run out since the last renewal that worked (`run_out`): their
  turns are cut off here, tools in flight included, as after a crash, so that a tool never runs on here
  after another engine took the turn over. An engine that lost a lease cuts that turn off without recording
  anything (a turn's writes check the lease first): the new owner continues it. A turn writes only under the
  take of the lease it began with (`Leases.take`): an engine that takes the lease again (its sweep, input it
  is given) while the turn that lost it still runs here (inside a tool) starts a new take, and that turn
  writes nothing more (the other owner may have ended it already). A tool call starts only
  once the lease is confirmed (in the store, when the local view has lapsed; confirmations asked at once
  share one store call), so a tool never runs in two engines at once;
- work queued for a session (input, an answer, a report, a digest) takes the lease first when it is free,
  so work whose engine dies before running it is found by the sweep like an orphaned turn. When another live
  engine holds the lease, the write claims it (`Write.claim`): should that engine let the lease go before the
  write commits, the write takes it in the same transaction, so the work is never stored with no lease (its
  engine could die before its own loop took one, and that engine's last look had come too early to see it);
- a turn loop that fails on a store fault ends the turn `failed` with the store's error once that can be
  written (`end_after_fault`), or stops renewing the lease, so the turn is continued once the store works.

An engine that closes hands its leases over at once (their expiry is set to now), so another live engine
continues its cut-off turns within a second. Reading never takes a lease: only a turn loop does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import re
import secrets
import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from agentwatch.errors import AgentwatchError, NotFound, StoreUnavailable
from agentwatch.events import NewEvent, RuntimeNotice, TurnEnded, TurnId, TurnStarted
from agentwatch.live import cancel_and_wait
from agentwatch.runtime.plan import Plan, next_plan
from agentwatch.store import LeaseClaim, LeaseRecord, SessionPatch, SessionRecord, Store, Write

if TYPE_CHECKING:
    from agentwatch.runtime.services import Runtime, SessionChannel

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "LeaseLost",
    "Leases",
    "check_held",
    "claimed",
    "claimed_commit",
    "commit_claimed",
    "end_after_fault",
    "ensure_held",
    "leases_of",
    "new_owner",
    "owned_plan",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_LEASE_SECONDS = 15.0
STOP_CHECK_SECONDS = 1.0
"""How often an engine that holds leases looks for the stops other engines asked of it."""
SWEEP_SECONDS = 0.25
"""How often an engine that recovers turns looks for expired leases (at most; less with a shorter renewal), the
first time as it starts."""
SWEEP_PAGE = 100
"""How many expired leases a sweep reads at a time (and takes over, at most, before it reads on)."""
TAKEOVER_SHARE = 4
"""How many of the orphans a sweep sees for the first time it takes, in an engine that runs no turn: the others
are left to the sweeps of the other engines (see `Leases.sweep`)."""
TAKEOVER_SHARE_TURNS = 10
"""An engine takes one orphan fewer per sweep for each this many turns it already runs (its held leases)."""
HAND_OVER_SECONDS = 0.001
"""The lease a closing engine leaves behind: expired at once, so another engine's sweep takes it over."""
CUT_TAKE_SECONDS = 5.0
"""How long a take cut short is waited for, to let go of what it took (see `Leases._let_go_of`)."""
UNCLAIMED_SECONDS = 10.0
"""How long work of an agent whose role an engine lacks waits under an expired lease before that engine says on the
agent that no engine open on the store runs the role (one that has it takes the work within about a second)."""
ROSTER_SOURCE = "roster"
"""The `source` of the warnings that an engine cannot run an agent's role."""
ROLE_LACK_SCAN = 20
"""How many of a session's newest warnings and turn starts are read to find whether it was told already that an
engine cannot run its role (other warnings between count for nothing; past these, it is told again)."""
FAULT_RETRIES = (0.2, 0.5, 1.0, 2.0, 4.0)
"""Pauses between tries to record a turn's failure after a store fault (about 8 s in all)."""


def new_owner() -> str:
    """A fresh owner identity: host, process id and a random part (two engines of one process differ)."""
    host = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:40] or "host"
    return f"own_{host}_{os.getpid()}_{secrets.token_hex(4)}"


class Leases:
    """The leases one engine holds, renewed in the background; see the module docs."""

    def __init__(self, store: Store, *, ttl: float, renew_every: float | None = None, owner: str | None = None):
        self.store = store
        self.owner = owner or new_owner()
        """This engine's identity as a lease holder."""
        self.ttl = ttl
        self.renew_every = renew_every if renew_every is not None else ttl / 3
        # A lease counts as held locally until a margin before the store's expiry, measured from when the
        # acquire or renewal was sent, so a tool never starts after another engine may have taken over.
        self._margin = min(1.0, ttl / 5)
        self._held: dict[str, float] = {}  # session id -> local (monotonic) deadline of a sure hold
        # Which take of a session's lease is held (a renewal's answer about an earlier take is stale).
        self._taken: dict[str, int] = {}
        self._takes = 0
        self._previous: dict[str, LeaseRecord] = {}  # the lease another owner left, per session taken over here
        self._asking: dict[str, asyncio.Future[bool | BaseException]] = {}  # store renewals under way, per session
        self._asked: list[str] = []  # confirmations waiting for the next batch
        self._changes: dict[str, _Change] = {}  # takes and releases under way, per session
        self._batch: asyncio.Task[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._fencing: asyncio.Task[None] | None = None
        self._stops: dict[str, asyncio.Task[None]] = {}  # stops other engines asked for, under way, per session
        self.takeovers = 0
        """How many expired leases of other owners this engine took over."""
        self.sweeping = True
        """False stops taking over expired leases (a draining engine: the work goes to another one)."""
        self._unreachable = False  # the last renewal failed, or a store call since (the store could not be asked)
        self._unclaimed: set[tuple[str, datetime]] = set()  # expired leases whose agents `say_unclaimed` told
        self._sighted: set[tuple[str, datetime]] = set()  # the expired leases the last sweep found

    # -- holding --------------------------------------------------------------------------------------

    def holds(self, session_id: str) -> bool:
        """Whether this engine is sure it holds the session's lease: taken or renewed in the store recently
        enough (with a margin before its expiry). False does not mean lost: a renewal may be under way."""
        deadline = self._held.get(session_id)
        return deadline is not None and time.monotonic() < deadline

    def changing(self, session_id: str) -> bool:
        """Whether a take or release of the session's lease is under way (a new one waits for it)."""
        return session_id in self._changes

    def take(self, session_id: str) -> int | None:
        """Which take of the session's lease this engine holds (None: it holds none). A turn runs under the take
        it began with (`may_write`): the lease lost and taken again since, what the turn does is not its own any
        more (the other owner may have ended it)."""
        return self._taken.get(session_id)

    def may_write(self, session_id: str, take: int | None = None) -> bool:
        """Whether a turn of the session may still write here: this engine took the lease (as `take`, when
        given) and the store has not said another owner holds it since. A lease past its local deadline is not
        lost: under load its renewal may still sit behind other writes, and the store renews an expired lease
        nobody took over."""
        return session_id in self._held and (take is None or self._taken.get(session_id) == take)

    async def confirm(self, session_id: str, take: int | None = None) -> bool:
        """Make sure of the lease in the store (extending it) when the local view is not sure any more;
        False when another owner has it now (or, with `take`, when the lease held is another take than that
        one). Confirmations asked at once share one store call, and join a renewal already under way."""
        if not self.may_write(session_id, take):
            return False  # found lost (or let go): never taken back behind the new owner's back
        if self.holds(session_id):
            return True
        answer = self._asking.get(session_id)
        if answer is None:
            answer = self._asking[session_id] = asyncio.get_running_loop().create_future()
            self._asked.append(session_id)
            if self._batch is None or self._batch.done():
                self._batch = asyncio.create_task(self._confirm_asked(), name="agentwatch-lease-confirm")
        outcome = await asyncio.shield(answer)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome and self.may_write(session_id, take)

    async def _confirm_asked(self) -> None:
        while self._asked:  # those asked while a store call is under way go in the next one
            await asyncio.sleep(0)  # every confirmation asked in this round of the loop goes in one store call
            ids, self._asked = self._asked, []
            with contextlib.suppress(Exception):  # the askers get the error
                await self._renew_in_store(ids, answering=set(ids))

    async def _renew_in_store(self, ids: list[str], *, answering: set[str]) -> list[str]:
        """Renew `ids` in the store (a renewal, not an acquire: it succeeds only while the lease row is still
        this engine's, expired or not, so a lease another engine took over is never taken back in the
        middle of a turn). Kept ones get a new local deadline; the others are lost and dropped. Answers the
        confirmations of `answering`. Returns the lost ids; raises the store's error (nothing is dropped)."""
        sent = time.monotonic()
        takes = {session_id: self._taken.get(session_id) for session_id in ids}
        try:
            kept = set(await self.store.renew_leases(self.owner, ids, self.ttl))
        except Exception as exc:
            self._answer(answering, exc)
            raise
        lost: list[str] = []
        for session_id in ids:
            if session_id not in self._held or self._taken.get(session_id) != takes[session_id]:
                continue  # let go (or taken again) meanwhile: this answer is about an older hold
            if session_id in kept:
                self._held[session_id] = max(self._held[session_id], sent + self.ttl - self._margin)
            else:
                self._drop(session_id)  # the store says another owner holds it (or nobody): lost
                lost.append(session_id)
        self._answer(answering, kept)
        return lost

    def _answer(self, ids: set[str], outcome: set[str] | BaseException) -> None:
        answers: deque[tuple[asyncio.Future[bool | BaseException], bool | BaseException]] = deque()
        for session_id in ids:
            answer = self._asking.pop(session_id, None)
            if answer is not None and not answer.done():
                answers.append((answer, outcome if isinstance(outcome, BaseException) else session_id in outcome))
        _answer_paced(answers)

    def _hold(self, session_id: str, sent: float) -> None:
        self._takes += 1
        self._taken[session_id] = self._takes
        self._held[session_id] = sent + self.ttl - self._margin

    def _drop(self, session_id: str) -> float | None:
        self._taken.pop(session_id, None)
        self._previous.pop(session_id, None)
        return self._held.pop(session_id, None)

    def claim(self) -> LeaseClaim:
        """This engine's claim of a lease, for a write that queues work while another owner may hold it
        (`Write.claim`). A lease the write takes is not held here yet: the session's turn loop takes it (it is
        already this engine's), or it expires and another engine's sweep finds it."""
        return LeaseClaim(self.owner, self.ttl)

    @property
    def held(self) -> list[str]:
        """The ids of the sessions whose lease this engine holds or renews."""
        return list(self._held)

    async def acquire(self, session_id: str) -> LeaseRecord | bool:
        """Take the session's lease; False when another live owner holds it. When it took over another owner's
        expired lease, returns that lease (a turn it continues says whose it was), else True.

        A lease this engine holds already (its local view lapsed) is renewed instead: kept, its take goes on, and
        so does the turn running under it. Found lost, it is a new take: the turn that ran under the lost one
        (still inside a tool, say) writes nothing more, whatever the engine that took the lease over wrote (its
        stop, its end of the turn). Taken again plainly, the lease let that turn write on after its end."""
        async with self._one_change(session_id):
            if session_id in self._held:
                await self._renew_in_store([session_id], answering=set())
                self._unreachable = False  # (the store answered)
                if session_id in self._held:
                    return True
            sent = time.monotonic()
            try:
                taken = await self.store.take_lease(session_id, self.owner, self.ttl)
            except asyncio.CancelledError:
                await self._let_go_of(session_id)
                raise
            self._unreachable = False  # (the store answered)
            if taken is not False:
                self._hold(session_id, sent)
            if isinstance(taken, LeaseRecord):
                self._previous[session_id] = taken
            return taken

    async def _let_go_of(self, session_id: str) -> None:
        """A take cut short (its engine closing, its turn loop stopped) may go on in the store all the same: what
        it took is let go at once (a release queued behind it; nothing if it took nothing). Kept, nobody here
        would know of it, and the next engine waited a whole lease."""
        try:
            await asyncio.wait_for(self.store.release_lease(session_id, self.owner), CUT_TAKE_SECONDS)
        except Exception as exc:  # (it expires on its own)
            log.warning("could not let go of the lease of %s a cut-off take took (it expires on its own): %s",
                        session_id, exc)  # fmt: skip

    async def release(self, session_id: str) -> None:
        """Let the lease go (best effort: a lease that cannot be released expires on its own)."""
        async with self._one_change(session_id):
            if self._drop(session_id) is None:
                return
            try:
                await self.store.release_lease(session_id, self.owner)
            except Exception as exc:
                log.warning("could not release the lease of %s (it expires on its own): %s", session_id, exc)

    @contextlib.asynccontextmanager
    async def _one_change(self, session_id: str) -> AsyncIterator[None]:
        """Takes and releases of one session's lease run one at a time, in the order asked: a release's delete
        must never land after a take asked later (it would remove the row this engine then believes it holds,
        leaving the turn with no lease to renew and nobody to continue it)."""
        change = self._changes.get(session_id)
        if change is None:
            change = self._changes[session_id] = _Change()
        change.users += 1
        try:
            async with change.lock:
                yield
        finally:
            change.users -= 1
            if change.users == 0:
                del self._changes[session_id]

    def forget(self, session_id: str) -> None:
        """Stop renewing the lease without a store call: it expires, and the restart rule takes over."""
        self._drop(session_id)

    async def hand_over(self, session_id: str) -> None:
        """Let another engine take the session's lease at once (it expires now), when this engine holds it."""
        if session_id not in self._held:
            return
        self.forget(session_id)
        try:
            await self.store.renew_leases(self.owner, [session_id], HAND_OVER_SECONDS)
        except Exception as exc:  # it expires on its own
            log.warning("could not hand over the lease of %s (it expires on its own): %s", session_id, exc)

    async def hand_back(self, session_id: str) -> None:
        """`hand_over`, by an engine that ran nothing under the lease (it lacks the session's role, and only said
        so): a lease it took over from another owner goes back as that owner left it, so the engine that
        continues the turn names the owner that was cut off, and since when, rather than this one."""
        previous = self._previous.get(session_id)
        if previous is None or session_id not in self._held:
            await self.hand_over(session_id)
            return
        self.forget(session_id)
        try:
            if not await self.store.hand_back_lease(session_id, self.owner, previous):
                log.warning("could not hand back the lease of %s: another engine holds it", session_id)
        except Exception as exc:  # it expires on its own
            log.warning("could not hand back the lease of %s (it expires on its own): %s", session_id, exc)

    async def renew(self) -> list[str]:
        """Renew every held lease; returns the ids this engine no longer holds: those the store says another
        owner took over. A renewal that fails or comes back late loses nothing (the store renews an expired
        lease nobody took over; the next renewal tries again)."""
        ids = list(self._held)
        if not ids:
            return []
        answering = {session_id for session_id in ids if session_id not in self._asking}
        loop = asyncio.get_running_loop()
        for session_id in answering:  # confirmations asked meanwhile join this renewal
            self._asking[session_id] = loop.create_future()
        try:
            lost = await self._renew_in_store(ids, answering=answering)
        except Exception as exc:
            self._unreachable = True
            log.warning("renewing %d lease(s) failed (tried again in %.1f s): %s", len(ids), self.renew_every, exc)
            return []
        self._unreachable = False
        return lost

    def run_out(self) -> list[str]:
        """The held leases about to expire in the store while it cannot be reached to renew them (the last
        renewal failed, and the sure hold the last one that worked bought is over: a margin before the
        store's expiry, after which another engine may take them). A renewal that is only slow (a busy store)
        makes none: the store renews an expired lease nobody took over."""
        if not self._unreachable:
            return []
        now = time.monotonic()
        return [session_id for session_id, deadline in self._held.items() if now >= deadline]

    # -- the background task --------------------------------------------------------------------------

    def start(self, runtime: Runtime, *, sweep: bool) -> None:
        """Renew held leases (cutting off the turns of lost ones) and, with `sweep`, take over expired ones."""
        self._task = asyncio.create_task(self._run(runtime, sweep=sweep), name="agentwatch-leases")

    async def close(self) -> None:
        """Stop renewing and hand every held lease over at once (its expiry becomes now).

        The upkeep's loops are cancelled again for as long as they run: on Python 3.11 a store call can swallow
        a cancellation (`asyncio.wait_for`, as the PostgreSQL pool waits for a connection, returns what it got
        when the cancellation lands just as that comes), the loop then went on, and the close waited for ever."""
        if self._task is not None:
            await cancel_and_wait([task for task in (self._task, self._fencing) if task is not None])
            self._task = self._fencing = None
        if self._batch is not None:
            self._batch.cancel()
            await asyncio.gather(self._batch, return_exceptions=True)
            self._batch = None
        stops = list(self._stops.values())
        for stop in stops:
            stop.cancel()
        await asyncio.gather(*stops, return_exceptions=True)
        ids, self._held = list(self._held), {}
        self._taken.clear()
        self._answer(set(self._asking), set())  # nothing is confirmed any more
        if ids:
            try:
                await self.store.renew_leases(self.owner, ids, HAND_OVER_SECONDS)
            except Exception as exc:
                log.warning("could not hand over %d lease(s) (they expire on their own): %s", len(ids), exc)

    async def _run(self, runtime: Runtime, *, sweep: bool) -> None:
        pause = min(SWEEP_SECONDS, self.renew_every)
        next_renewal, next_stops = time.monotonic() + self.renew_every, time.monotonic()
        sweeping: asyncio.Task[None] | None = None
        # Beside the renewals and stops, which wait for the store (up to its time-outs when it cannot be reached).
        fencing = self._fencing = asyncio.create_task(self._fence(runtime), name="agentwatch-lease-fence")
        try:
            while True:
                # The sweep runs beside the renewals, not before them: under load its store read waits behind
                # the turns' writes, and renewals that waited for it let the local holds lapse, so that every
                # tool call then waited for a confirmation (hundreds of turns, all woken by one store call).
                # The first one runs at once: start-up leaves the turns of lapsed leases to it.
                if sweep and self.sweeping and (sweeping is None or sweeping.done()):
                    sweeping = asyncio.create_task(self._sweep_once(runtime), name="agentwatch-lease-sweep")
                await asyncio.sleep(pause)
                try:
                    if time.monotonic() >= next_renewal:
                        next_renewal = time.monotonic() + self.renew_every
                        for session_id in await self.renew():
                            if await _cut_off(runtime, session_id):  # (a reaped session's lease went with it)
                                log.warning("lost the lease of %s; its turn is cut off here", session_id)
                    if self._held and time.monotonic() >= next_stops:
                        next_stops = time.monotonic() + STOP_CHECK_SECONDS
                        await self._stop_as_asked(runtime)
                        self._unreachable = False  # (the store answered)
                except Exception as exc:  # housekeeping must never take the engine down
                    self._note_failure(exc)
                    log.warning("lease upkeep failed: %s", exc)
        finally:
            await cancel_and_wait([fencing, *([sweeping] if sweeping is not None else [])])

    async def _fence(self, runtime: Runtime) -> None:
        """Cut off the turns whose leases run out while the store cannot be reached to renew them (`run_out`),
        looking twice per margin: their tools stop here, as after a crash, before the store lets another engine
        take the turn over."""
        while True:
            await asyncio.sleep(self._margin / 2)
            for session_id in self.run_out():
                log.warning(
                    "the lease of %s ran out while the store could not be reached to renew it; its turn is cut "
                    "off here (whichever engine takes the lease over continues it)",
                    session_id,
                )
                self.forget(session_id)
                try:
                    await _cut_off(runtime, session_id)
                except Exception as exc:  # (the driver may need the store): the turn's writes fail meanwhile
                    log.warning("could not cut off the turn of %s: %s", session_id, exc)

    async def _stop_as_asked(self, runtime: Runtime) -> None:
        """Stop the turns another engine asked this one to stop (`Store.request_stop`: a stop sent to a service
        that does not run the turn), as whoever asked: each in a task of its own, beside the renewals (a stop
        waits for its turn to end, and renewals that waited for it would let every other lease lapse)."""
        for session_id, by in (await self.store.take_stop_requests(self.owner)).items():
            if session_id in self._held and session_id not in self._stops:
                task = asyncio.create_task(
                    self._stop_one(runtime, session_id, by), name=f"agentwatch-stop-{session_id}"
                )
                self._stops[session_id] = task
                task.add_done_callback(partial(_forget, self._stops, session_id))

    async def _stop_one(self, runtime: Runtime, session_id: str, by: str) -> None:
        try:
            await runtime.stop(session_id, by=by)
        except Exception as exc:  # one stop that fails leaves the others, and the engine, alone
            log.warning("could not stop %s as %s asked: %s", session_id, by, exc)

    async def _sweep_once(self, runtime: Runtime) -> None:
        try:
            await self.sweep(runtime)
        except Exception as exc:  # housekeeping must never take the engine down
            self._note_failure(exc)
            log.warning("lease upkeep failed: %s", exc)
        else:
            self._unreachable = False  # (the store answered)

    def _note_failure(self, error: BaseException) -> None:
        """A store call of the lease upkeep failed: when the store cannot be reached, the leases' renewal
        cannot either (it may still be waiting for a connection), so their time counts down (`run_out`) until
        a store call of the leases succeeds again."""
        if isinstance(error, StoreUnavailable):
            self._unreachable = True

    async def sweep(self, runtime: Runtime) -> int:
        """Take over sessions whose owner's lease expired and let their turn loops look for work (those taken at
        once); returns how many were taken. Only sessions of the roles this engine runs: the others are left to
        an engine that has their role (see `SessionDriver`), and never crowd out the ones it can run.

        Not every orphan found: of those this sweep sees for the first time it takes `share()`, picked at
        random (engines that sweep at the same moment then mostly pick different ones), and leaves the rest to
        the other engines' sweeps, which come within the same quarter second; a killed service's turns are so
        spread over the survivors instead of all going to whichever swept first. An orphan the previous sweep
        saw too is taken whatever the share: nobody took it since (this engine may be the only one with the
        role), so no turn waits more than two sweeps. An engine that starts leaves the turns of lapsed leases to
        its first sweep (`runs_at_start`), so a newcomer too takes only its share of them.

        Every orphan is seen, however many: the sweep reads them a page at a time (`_orphans`), each page taken
        before the next is read. (It read one page of 100 once, so that an engine restarted alone on 1,000 cut-off
        turns took the second hundred only two sweeps after the first, and started the last after 5 s.)"""
        sighted, self._sighted = self._sighted, set()
        share, taken = self.share(), 0
        async for expired in self._orphans(runtime):
            self._sighted |= {(lease.session_id, lease.expires_at) for lease in expired}
            seen = [lease for lease in expired if (lease.session_id, lease.expires_at) in sighted]
            new = [lease for lease in expired if (lease.session_id, lease.expires_at) not in sighted]
            chosen = seen + random.sample(new, min(share, len(new)))
            share -= len(chosen) - len(seen)
            taken += sum(await asyncio.gather(*(self._take_over(runtime, lease) for lease in chosen)))
        return taken

    async def _orphans(self, runtime: Runtime) -> AsyncIterator[list[LeaseRecord]]:
        """The expired leases of the roles this engine runs, a page at a time (`_expired`). A lease of this engine's
        own that expired in the store is not an orphan: its renewal is late (under load it waits behind other
        writes) and renews it, since nobody took it over."""
        async for page in self._expired(runtime.roster.runnable()):
            yield [lease for lease in page if not (lease.owner == self.owner and lease.session_id in self._held)]

    async def _expired(self, roles: list[str] | None = None) -> AsyncIterator[list[LeaseRecord]]:
        """Every expired lease (of `roles`), a page (`SWEEP_PAGE`) at a time, longest expired first: however many
        there are, so that those left as they are (told, or not taken) never hide the others. The caller is done
        with a page before the next is read."""
        after: LeaseRecord | None = None
        while True:
            page = await self.store.expired_leases(limit=SWEEP_PAGE, roles=roles, after=after)
            yield page
            if len(page) < SWEEP_PAGE:
                return
            after = page[-1]

    async def runs_at_start(self, session: SessionRecord, runnable: Collection[str]) -> bool:
        """Whether an engine that starts looks for the work of an unfinished session (a turn running, or paused on
        a request) at once: when nobody holds its lease (a turn paused on a request lets it go), or when the lease
        lapsed on a role this engine lacks (the turn loop says on the agent that it cannot run it, and hands the
        lease back). A live owner's turn is left to that owner. A lapsed lease of a role in `runnable` (a dead
        owner's turn, or work handed over) is left to the sweep, whose first one runs as the engine starts: the
        engine takes its share of a dead owner's turns, as any sweep does, not all of them (the engines already
        running with the role take the others)."""
        lease = await self.store.get_lease(session.id)
        if lease is None:
            return True
        return lease.expired and session.role not in runnable

    def share(self) -> int:
        """How many newly found orphans a sweep takes: `TAKEOVER_SHARE`, one fewer per `TAKEOVER_SHARE_TURNS`
        turns this engine runs, at least one (a busy engine leaves more to the others)."""
        return max(1, TAKEOVER_SHARE - len(self._held) // TAKEOVER_SHARE_TURNS)

    async def say_unclaimed(self, runtime: Runtime) -> int:
        """Say on each agent of a role this engine lacks whose work nobody took for `UNCLAIMED_SECONDS` (its lease
        expired that long ago) that no engine open on the store runs its role, and what to do; returns how many
        were told. The sweep leaves such work to an engine that has the role, so without this the work waited
        unseen. Told once until a turn runs on the agent (`role_lack_said`); the work stays as it is, for the next
        engine opened with the role."""
        now = datetime.now(UTC)  # (beside the store's clock: a skew only moves the warning a little)
        looked: set[tuple[str, datetime]] = set()
        told = 0
        async for expired in self._expired():
            looked |= {(lease.session_id, lease.expires_at) for lease in expired}
            for lease in expired:
                waited = (now - lease.expires_at).total_seconds()
                if waited < UNCLAIMED_SECONDS or (lease.session_id, lease.expires_at) in self._unclaimed:
                    continue
                with contextlib.suppress(NotFound):  # reaped since it was listed
                    told += await self._say_unclaimed(runtime, lease, waited)
        self._unclaimed &= looked
        return told

    async def _say_unclaimed(self, runtime: Runtime, lease: LeaseRecord, waited: float) -> bool:
        session = await self.store.get_session(lease.session_id)
        waits = session.pending_inputs > 0 or session.status in ("running", "awaiting_input")
        if not waits and session.pending_reports:  # reports alone are work only when they start a turn
            waits = await next_plan(self.store, session) is not None
        if not waits or session.deleted_at is not None:
            return False  # (a lease left behind with no work, or the agent deleted: its last event stays the last)
        try:
            runtime.roster.get(session.role)
            return False  # this engine's sweep takes it
        except NotFound as exc:
            lacks = exc.message
        # Said under the lease, taken for a moment and handed straight back: of engines that would say it at
        # once, one does, and the others find it said.
        if await self._said(session.id, lease) or await self.acquire(session.id) is False:
            return False  # said already, or held (by an engine that has the role, or one saying this)
        try:
            if await self._said(session.id, lease):
                return False
            notice = RuntimeNotice(
                type="runtime.warning",
                message=(
                    f"no engine open on this store runs agent type {session.role!r}: this agent's work has waited "
                    f"{waited:.0f} s for one (an engine that has it takes it within a second; engine {self.owner}: "
                    f"{lacks}). Define the type for a service on this store (`agentwatch agents check` checks an "
                    "agents directory) and it runs the work, nothing stored is lost; or delete the agent"
                ),
                source=ROSTER_SOURCE,
                detail={"role": session.role, "waiting_since": _iso(lease)},
            )
            channel = await runtime.driver(session.id)
            await channel.commit(Write(session.id, events=[NewEvent(notice)], touch=False))
            return True
        finally:
            await self.hand_back(session.id)

    async def _said(self, session_id: str, lease: LeaseRecord) -> bool:
        """Whether the session says already that an engine cannot run its role (`role_lack_said`; then `lease` is
        not looked at again while it stays as it is)."""
        said = await role_lack_said(self.store, session_id)
        if said:
            self._unclaimed.add((session_id, lease.expires_at))
        return said

    async def _take_over(self, runtime: Runtime, lease: LeaseRecord) -> bool:
        session_id = lease.session_id
        try:
            taken = await self.acquire(session_id)
        except NotFound:
            return False  # reaped since it was listed
        if taken is False:
            return False  # another engine was faster
        try:
            channel = await runtime.driver(session_id)
            try:
                if isinstance(taken, LeaseRecord):
                    # Before the loop looks: a turn it starts would read as a cut-off one being continued.
                    await self.note_takeover(runtime, taken)
            finally:
                channel.kick()  # (a note that could not be written holds no work up)
        except AgentwatchError:  # reaped meanwhile: nothing to continue
            await self.release(session_id)
        return True

    async def note_takeover(self, runtime: Runtime, lease: LeaseRecord) -> None:
        """Record on a session whose turn this engine continues that it took the lease over from `lease`'s owner
        (whichever path took it: the sweep, or a turn loop that found the session's lease expired). Called before
        this engine runs anything on the session, so the status read is the one the previous owner left: a turn
        cut off (running, or paused on a request) is noted, work merely handed over (input queued behind a turn
        that ended) is not. Nor is a turn of a role this engine lacks: it continues nothing, says so (see
        `SessionDriver`) and hands the lease over."""
        self.takeovers += 1
        session = await self.store.get_session(lease.session_id)
        if session.status not in ("running", "awaiting_input") or session.role not in runtime.roster:
            return
        late = (datetime.now(UTC) - lease.expires_at).total_seconds()
        notice = RuntimeNotice(
            type="runtime.info",
            message=(
                f"this engine continues the session's turn: the lease's previous holder let it lapse {late:.1f} s "
                "ago (it handed the session over, closed, or died or hung)"
            ),
            source="leases",
            detail={"previous_owner": lease.owner, "owner": self.owner, "lease_expired_at": _iso(lease)},
        )
        channel = await runtime.driver(lease.session_id)
        await channel.commit(Write(lease.session_id, events=[NewEvent(notice)], touch=False))


async def role_lack_said(store: Store, session_id: str) -> bool:
    """Whether the session says already that an engine cannot run its role, since its last turn started: saying it
    again would add nothing, whatever else happened on it meanwhile (a person took it over and handed it back, an
    answer came). Whichever says it first, the turn loop or the upkeep, the other finds it said; once a turn runs
    (an engine with the role took the work), a lack found later is said again."""
    newest = await store.read_events_backward(
        session_id, limit=ROLE_LACK_SCAN, types=["turn.started", "runtime.warning"]
    )
    for event in newest:
        if isinstance(event.payload, TurnStarted):
            return False
        if isinstance(event.payload, RuntimeNotice) and event.payload.source == ROSTER_SOURCE:
            return True
    return False


def _forget(tasks: dict[str, asyncio.Task[None]], key: str, task: asyncio.Task[None]) -> None:
    if tasks.get(key) is task:
        del tasks[key]


ANSWERS_PER_LOOP_TURN = 4
"""Confirmations answered per turn of the event loop when one store call answers many."""


def _answer_paced(answers: deque[tuple[asyncio.Future[bool | BaseException], bool | BaseException]]) -> None:
    """Answer the waiting confirmations a few per turn of the event loop. Each one answered lets a turn run its
    tool and go on to its next model request; hundreds answered by one renewal would all take their next
    steps in the same loop turns, in step, keeping the loop from everything else for the sum of them."""
    for _ in range(min(ANSWERS_PER_LOOP_TURN, len(answers))):
        answer, result = answers.popleft()
        if not answer.done():  # a waiter that was cancelled meanwhile
            answer.set_result(result)
    if answers:
        asyncio.get_running_loop().call_soon(_answer_paced, answers)


@dataclass
class _Change:
    """The takes and releases of one session's lease under way (see `Leases._one_change`)."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


def _iso(lease: LeaseRecord) -> str:
    return lease.expires_at.isoformat()


def leases_of(runtime: Runtime) -> Leases | None:
    """The leases of an engine; None for a runtime without any (every session counts as its own)."""
    return runtime.leases


async def owned_plan(
    runtime: Runtime, session_id: str, *, after_turn: bool = False
) -> tuple[SessionRecord, Plan] | None:
    """The work waiting for the session, once this engine holds its lease; None when there is none, or when
    another live engine owns the session (its loop picks the work up).

    The lease is taken before the session is read, so what is read is what this engine owns. Letting the
    lease go (no work left) is followed by one more look, so input another engine queued while this one
    held the lease (and so left for it) is not stranded: its write claims the lease (`claimed`), so the
    release waits for its commit, or the write, committed after the release, took the lease itself.

    `after_turn`: the turn loop just ran a turn and nothing in this engine queued work for the session since
    (no kick). Work is then rarely waiting, so the lease is let go before the look rather than after a look
    of its own (one look instead of two); work found then takes the lease again first.
    """
    leases = leases_of(runtime)
    release_first = after_turn and leases is not None and session_id in leases.held
    for _ in range(3):
        if release_first:
            release_first = False
        else:
            if leases is not None and not leases.holds(session_id):
                taken = await leases.acquire(session_id)
                if taken is False:
                    return None
                if isinstance(taken, LeaseRecord):
                    await leases.note_takeover(runtime, taken)
            session = await runtime.store.get_session(session_id)
            plan = await next_plan(runtime.store, session)
            if plan is not None:
                return session, plan
            if leases is None:
                return None
        assert leases is not None
        await leases.release(session_id)
        session = await runtime.store.get_session(session_id)
        if await next_plan(runtime.store, session) is None:
            return None
    return None


@contextlib.asynccontextmanager
async def claimed(runtime: Runtime, session_id: str) -> AsyncIterator[LeaseClaim | None]:
    """Around queuing work for a session (input, an answer): take its lease first when it is free, so that if
    this engine dies before its turn loop runs the work, the lease expires and another engine's sweep finds
    it. When another live engine holds the lease, the work is left for that one (its loop looks again after
    each turn and after it lets the lease go), and this engine's claim is yielded for the write to carry
    (`Write.claim`, None otherwise): should that engine let the lease go before the write commits (its last
    look then comes too early to see the work), the write takes the lease. A lease taken here for work that
    was not queued is let go by the session's turn loop, which looks once more (see `_after_failed_claim`)."""
    leases = leases_of(runtime)
    taken: LeaseRecord | bool = False
    claim: LeaseClaim | None = None
    if leases is not None and not leases.holds(session_id):
        taken = await leases.acquire(session_id)
        if isinstance(taken, LeaseRecord):
            await leases.note_takeover(runtime, taken)
        elif taken is False:
            claim = leases.claim()
    try:
        yield claim
    except BaseException:
        if taken and leases is not None:
            await asyncio.shield(_after_failed_claim(runtime, leases, session_id))
        raise


async def claimed_commit(runtime: Runtime, channel: SessionChannel, write: Write) -> None:
    """Queue work for a session (an answer, a hand-back, input): `write` committed through its `channel` under
    its lease (`claimed`), then its turn loop told to look. Runs to its end even when the caller is cancelled (a
    client that went away): the write lands all the same, and so must the look that runs it."""

    async def queue() -> None:
        async with claimed(runtime, write.session_id) as claim:
            await channel.commit(replace(write, claim=claim))
        channel.kick()

    await to_the_end(queue())


async def to_the_end(work: Awaitable[T]) -> T:
    """Await `work`, which goes on to its end should the caller be cancelled (its failure then logged)."""
    task = asyncio.ensure_future(work)
    task.add_done_callback(_log_unawaited_failure)
    return await asyncio.shield(task)


def _log_unawaited_failure(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("work that outlived its caller failed: %r", task.exception())


async def _after_failed_claim(runtime: Runtime, leases: Leases, session_id: str) -> None:
    """A claimed write failed. The lease is not let go here: the session's turn loop looks instead, and finds
    nothing (it lets the lease go) or runs what other work queued meanwhile. Letting it go here cut off a turn
    the loop was already running under it (a second answer to one question, refused while the first one's turn
    ran), and skipping that when the loop ran held the lease for good once the loop had let it go and ended."""
    try:
        driver = await runtime.driver(session_id)
    except AgentwatchError:  # (no such session: nothing to run)
        await leases.release(session_id)
        return
    driver.kick()


async def commit_claimed(runtime: Runtime, session_id: str, submit: Callable[[LeaseClaim | None], Awaitable[T]]) -> T:
    """`claimed` around one write, with the lease's take and the write in one commit where the store allows.

    `submit(claim)` starts the write, carrying `claim` (its `Write.claim`), at once (it must not suspend first:
    a session emitter's `submit`, whose store write is queued in the next loop turn) and returns what to await
    for it. The take is queued just before it, in the same loop turn: a store that applies its writes one
    after another in the order queued (`Store.writes_in_order`: SQLite's one writer) applies the take first, in
    the same transaction or an earlier one, and the two cost one commit instead of two. The write claims the
    lease all the same (the take's outcome is not known yet), for a take that found another process's lease,
    which may be let go before the write commits. A store that writes concurrently (PostgreSQL) or a take that
    must wait behind another take or release of the lease gets `claimed`, one after the other. Should the turn
    that runs the work then fail to write, its loop looks again a moment later (`SessionDriver`), with the
    lease still held: the work is not stranded.
    """
    leases = leases_of(runtime)
    if leases is None or leases.holds(session_id) or leases.changing(session_id) or not runtime.store.writes_in_order:
        async with claimed(runtime, session_id) as claim:
            return await submit(claim)
    taking = asyncio.ensure_future(leases.acquire(session_id))  # its first step runs before the write's
    try:
        written = await submit(leases.claim())
    except BaseException:
        with contextlib.suppress(Exception):
            if await taking:
                await asyncio.shield(_after_failed_claim(runtime, leases, session_id))
        raise
    try:
        taken = await taking
    except Exception as exc:  # the work is stored: this engine's turn loop takes the lease when it runs it
        log.warning("could not take the lease of %s with its work (the turn loop takes it): %s", session_id, exc)
        return written
    if isinstance(taken, LeaseRecord):
        await leases.note_takeover(runtime, taken)
    return written


async def release_after_stop(runtime: Runtime, session_id: str) -> None:
    """A stopped turn ended its loop: let the lease go (the next input takes it again)."""
    leases = leases_of(runtime)
    if leases is not None:
        await leases.release(session_id)


async def end_after_fault(runtime: Runtime, session_id: str, error: BaseException) -> None:
    """The turn loop of `session_id` failed on a store fault: end the running turn `failed` with that error
    once the store takes the write, or, when it never does, stop renewing the lease so the turn is
    continued by the restart rule once the lease expires. Never raises (the turn loop survives)."""
    if isinstance(error, LeaseLost):
        return  # cut off here: the engine holding the lease now continues the turn
    message = f"{type(error).__name__}: {error}"
    log.warning("the turn loop of %s failed on a store fault: %s", session_id, message)
    leases = leases_of(runtime)
    for pause in FAULT_RETRIES:
        await asyncio.sleep(pause)
        if leases is not None and session_id not in leases.held:
            return  # the lease is gone: another engine (or the restart rule) has the turn now
        try:
            session = await runtime.store.get_session(session_id)
            if session.status != "running":
                break  # nothing left running (the end was written before the fault was reported)
            ended = TurnEnded(outcome="failed", error=message)
            turn_id = TurnId(session.current_turn_id) if session.current_turn_id else None
            channel = await runtime.driver(session_id)
            await channel.commit(
                Write(
                    session_id,
                    events=[NewEvent(ended, turn_id)],
                    session=SessionPatch(status="failed", error=message, current_turn_id=None, turn_attempts=0),
                    expect_status=["running"],
                )
            )
            break
        except NotFound:
            return  # reaped meanwhile: nothing is left running
        except Exception as exc:
            log.warning("could not record the failure of %s yet: %s", session_id, exc)
    else:
        if leases is not None:
            leases.forget(session_id)  # the lease expires and the restart rule continues the turn
        return
    if leases is not None:
        await leases.release(session_id)


class LeaseLost(Exception):
    """This engine no longer holds the session's lease: the turn writes nothing more here."""


def check_held(runtime: Runtime, session_id: str, take: int | None = None) -> None:
    """Before a turn writes: raise `LeaseLost` when this engine no longer holds the session's lease (as `take`,
    the turn's: see `Leases.take`), since another engine may be continuing the turn, and must be its only writer."""
    leases = leases_of(runtime)
    if leases is not None and not leases.may_write(session_id, take):
        raise LeaseLost(f"this engine no longer holds the lease of {session_id}; another engine continues the turn")


async def _cut_off(runtime: Runtime, session_id: str) -> bool:
    """Cut the session's turn off here; False when the session is gone (reaped, its lease with it)."""
    try:
        channel: Any = await runtime.driver(session_id)
    except NotFound:
        return False
    cut_off = getattr(channel, "cut_off_turn", None)
    if callable(cut_off):
        cut_off()
    return True


async def ensure_held(runtime: Runtime, session_id: str, take: int | None = None) -> None:
    """Before a tool runs: when this engine no longer holds the session's lease (as `take`, the turn's), cut the
    turn off here (another engine may own it now) instead of running the tool."""
    leases = leases_of(runtime)
    if leases is None or await leases.confirm(session_id, take):
        return
    await _cut_off(runtime, session_id)
    with contextlib.suppress(Exception):
        leases.forget(session_id)
    raise asyncio.CancelledError(f"the lease of {session_id} was lost; another engine continues the turn")
