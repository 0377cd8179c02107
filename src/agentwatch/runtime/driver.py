"""Session drivers: one per session in an engine, its emitter and its turn loop together.

The driver is the session's `SessionChannel`: `commit` hands a write to the session's `SessionEmitter` (the
only writer and emission point of the session in this process: commit -> live ring -> observers), `kick`
makes the turn loop look for work. The loop runs one turn at a time (`turn.run_plan`) while this engine owns
the session (its lease) and there is work; `stop_turn` cancels the running turn (a stop), `close` cuts it
off without recording anything (a shutdown: it is continued after the restart), `drain` lets the running turn
end and starts no other (a deploy: the work left is handed over to another engine).

A driver is made on demand and let go once idle (`evict_idle`: no turn, nothing written or handed out, nobody
waiting on it): after `DRIVER_IDLE_SECONDS`, or at once beyond `DRIVERS_KEPT` drivers. Its session keeps
nothing in memory then, and the next use makes a new driver from the store. A caller still holding the old
one is sent on to the new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Coroutine, MutableMapping, Sequence
from typing import Any, Final

from agentwatch.errors import NotFound
from agentwatch.events import Event, NewEvent, RuntimeNotice
from agentwatch.live.memory import MemoryRing
from agentwatch.runtime.emitter import SessionEmitter
from agentwatch.runtime.full_collections import turn_loop_ended, turn_loop_started
from agentwatch.runtime.leases import (
    ROSTER_SOURCE,
    end_after_fault,
    leases_of,
    owned_plan,
    release_after_stop,
    role_lack_said,
)
from agentwatch.runtime.services import Runtime
from agentwatch.runtime.thread_observer import ObserverFactory, ReplaySnapshot
from agentwatch.runtime.turn import run_plan
from agentwatch.store import SessionRecord, Write

__all__ = ["DRIVERS_KEPT", "DRIVER_IDLE_SECONDS", "SessionDriver", "evict_idle"]


DRIVER_IDLE_SECONDS: Final = 300.0
"""How long a driver stays idle before it is let go."""
DRIVERS_KEPT: Final = 1_000
"""Drivers an engine keeps; beyond them, the idle ones used least recently are let go when a new one is made."""


class SessionDriver:
    """Owns one session in this engine: its emitter (commits, observers, attach) and its turn loop."""

    def __init__(
        self, runtime: Runtime, session_id: str, last_seq: int, observer_factories: Sequence[ObserverFactory] = ()
    ):
        self.runtime = runtime
        self.session_id = session_id
        self._changed = asyncio.Event()
        self.emitter = SessionEmitter(
            session_id,
            last_seq,
            store=runtime.store,
            ring=runtime.ring,
            on_settling=self._notify_changed,
        )
        """The session's emitter: every write of the session in this engine goes through it."""
        for factory in observer_factories:
            self.emitter.add_observer_from(factory)
        self._background: set[asyncio.Task[Any]] = set()
        self._loop_task: asyncio.Task[None] | None = None
        self._pending_kick = False
        self._fault_pause = 0.0  # how long the loop waits before it looks again after a store fault
        self._waiting = 0  # callers in `wait_changed`
        self.used_at = time.monotonic()
        """When the driver was last used (made, written through, kicked, attached to, waited on, a turn ended)."""
        self.evicted = False
        """True once the engine let the driver go (see `evict_idle`): a later call goes to the session's new one."""
        self.closing = False
        """True while the engine shuts down: a turn cut off now is continued after the restart."""
        self.cut_off = False
        """True while a turn is cut off because this engine lost the session's lease (see `cut_off_turn`)."""
        self.draining = False
        """True once the engine drains (see `drain`): no new turn starts here."""

    def add_observer(self, factory: ObserverFactory) -> None:
        """Attach the observer `factory` makes for the session; it receives events from the next one dispatched
        (see `SessionEmitter.add_observer_from`)."""
        self.emitter.add_observer_from(factory)

    async def commit(self, write: Write, *, rides: bool = False) -> list[Event]:
        """Make `write` durable, then hand its events to the ring and the observers (in stream order).

        The commit runs to its end even when the caller is cancelled (a stop): a write that reached the store
        must also reach the watchers, or they would miss events the log has. With `rides`, a note beside the
        turn's work that may share the commit of the session's next write (`SessionEmitter.commit`).
        """
        if self.evicted:
            return await (await self._successor()).commit(write, rides=rides)
        self.used_at = time.monotonic()
        return await self.emitter.commit(write, rides=rides)

    def submit(self, write: Write) -> Awaitable[list[Event]]:
        """`commit`, started at once: the write is queued behind the session's earlier writes before this
        returns (its store write in the next loop turn); await the result for its events, as `commit` returns
        them (the write runs to its end even when the awaiting caller is cancelled)."""
        if self.evicted:
            return asyncio.ensure_future(self.commit(write))
        self.used_at = time.monotonic()
        return asyncio.shield(self.emitter.submit(write))

    async def subscribe(self, request: Any) -> ReplaySnapshot:
        """Attach a client: each observer's on_subscribe gets a snapshot; resolves once they ran."""
        if self.evicted:
            return await (await self._successor()).subscribe(request)
        self.used_at = time.monotonic()
        return await self.emitter.subscribe(request)

    # -- changes, waiting -----------------------------------------------------------------------------

    def _notify_changed(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def notify_changed(self) -> None:
        """Wake the callers in `wait_changed` (something they wait on changed outside a write: a deletion
        ended)."""
        self._notify_changed()

    async def wait_changed(self, timeout: float) -> bool:
        """Wait until a write in this process may have settled the session or unsettled it (its status or its
        inbox changed), or its turn loop ended (or `timeout` seconds); False on timeout."""
        if self.evicted:
            return await (await self._successor()).wait_changed(timeout)
        changed = self._changed
        self._waiting += 1
        try:
            await asyncio.wait_for(changed.wait(), timeout)
        except TimeoutError:
            return False
        finally:
            self._waiting -= 1
            self.used_at = time.monotonic()
        return True

    # -- the turn loop --------------------------------------------------------------------------------

    def kick(self) -> None:
        """Make the driver look for work (new input, answered requests, a turn to continue)."""
        if self.evicted:
            self.spawn(self._kick_successor())
            return
        if self.closing:
            return
        self.used_at = time.monotonic()
        if self.draining:
            if not self.turn_running:  # the work stays in the store, for another engine
                self.spawn(self._hand_over())
            return
        self._pending_kick = True
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.create_task(self._turn_loop(), name=f"agentwatch-turns-{self.session_id}")
            self._loop_task.add_done_callback(self._loop_ended)
            turn_loop_started()  # full collections wait while turns run

    async def _turn_loop(self) -> None:
        runtime = self.runtime
        while self._pending_kick and not self._no_new_turns:
            self._pending_kick = False
            after_turn = False
            while not self._no_new_turns:
                try:  # leases: work is run only while this engine holds the session's lease
                    # After a turn that nothing here queued more work behind (no kick), the lease goes first.
                    owned = await owned_plan(runtime, self.session_id, after_turn=after_turn and not self._pending_kick)
                    if owned is None:
                        break
                    if not await self._runs_role(owned[0]):
                        return
                    stopped = await run_plan(runtime, self.emitter, *owned, cut_off=self._is_cut_off)
                    after_turn = True
                    self._fault_pause = 0.0
                except Exception as exc:  # a store fault: the turn ends failed, or waits for the restart rule
                    await end_after_fault(runtime, self.session_id, exc)
                    self._look_again_later()
                    return
                if stopped:
                    await release_after_stop(runtime, self.session_id)
                    return
        if self.draining and not self.closing:
            await self._hand_over()

    @property
    def _no_new_turns(self) -> bool:
        return self.closing or self.draining

    def drain(self) -> None:
        """Start no new turn: a running turn goes on to its end, then the loop ends instead of taking the next
        work; work for the session is left in the store and its lease handed over (expired at once), so
        another engine's sweep takes it. For `Engine.drain`."""
        if self.draining:
            return
        self.draining = True
        if not self.turn_running:
            self.spawn(self._hand_over())

    async def _runs_role(self, session: SessionRecord) -> bool:
        """Whether this engine has the session's role. When it has not (a service of a rolling deploy that adds
        the role, one opened on another agents directory), it says so on the session and hands its lease back:
        the work is left as it is, for an engine that has the role, whose sweep takes it within a second (this
        engine's sweep leaves it alone)."""
        try:
            self.runtime.roster.get(session.role)
        except NotFound as exc:
            leases = leases_of(self.runtime)
            engine = f"engine {leases.owner}" if leases is not None else "this engine"
            notice = RuntimeNotice(
                type="runtime.warning",
                message=(
                    f"{engine} cannot run this agent: {exc.message}; its work waits for an engine that has agent "
                    f"type {session.role!r} (one open on this store takes it within a second, else the next one "
                    "opened with it)"
                ),
                source=ROSTER_SOURCE,
            )
            if not await role_lack_said(self.runtime.store, self.session_id):  # (each send would say it again)
                await self.emitter.commit(Write(self.session_id, events=[NewEvent(notice)], touch=False))
            if leases is not None:
                await leases.hand_back(self.session_id)
            return False
        return True

    async def _hand_over(self) -> None:
        """Let another engine take the session's lease at once (it expires now), when this engine holds it."""
        leases = leases_of(self.runtime)
        if leases is not None:
            await leases.hand_over(self.session_id)

    def _is_cut_off(self) -> bool:
        return self.closing or self.cut_off

    def _look_again_later(self) -> None:
        """After a store fault, look for work again in a while (1 s, doubling up to a minute while the faults go
        on): input stored before the fault, or while the loop gave up, would otherwise wait for the next kick,
        and no lease of this engine's is left for another engine's sweep to find."""
        self._fault_pause = min(self._fault_pause * 2, 60.0) if self._fault_pause else 1.0
        asyncio.get_running_loop().call_later(self._fault_pause, self.kick)

    def _loop_ended(self, task: asyncio.Task[None]) -> None:
        turn_loop_ended()
        self.used_at = time.monotonic()
        self.cut_off = False
        self._notify_changed()  # `Engine.wait` also waits for the turn loop

    def cut_off_turn(self) -> None:
        """This engine lost the session's lease: cancel the turn without recording anything (the engine that
        holds the lease now continues it)."""
        if self._loop_task is not None and not self._loop_task.done():
            self.cut_off = True
            self._loop_task.cancel()

    @property
    def turn_running(self) -> bool:
        """Whether a turn is in progress in this process."""
        return self._loop_task is not None and not self._loop_task.done()

    async def stop_turn(self) -> bool:
        """Cancel the running turn (someone's stop); returns whether there was one, which recorded the stop.

        False also when the cancellation found the loop between turns (taking or letting go of the lease,
        looking for work: the session idle, or paused on a request): nothing recorded the stop there, so the
        caller writes it as for a session with no loop (`Engine.stop`)."""
        task = self._loop_task
        if task is None or task.done():
            return False
        if not task.cancelling():  # a stop asked already (its turn may be writing it): wait for that one
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return not task.cancelled()  # a turn it stopped ends `cancelled` and the loop returns (`run_plan`)

    # -- lifetime -------------------------------------------------------------------------------------

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run a side job of the driver that nobody awaits (`close` waits for it)."""
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def close(self) -> None:
        """Cut off the turn without recording a stop (it is continued after the restart), then drain."""
        self.closing = True
        if self._loop_task is not None and not self._loop_task.done():
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._loop_task
        while self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        await self.emitter.close()

    # -- letting an idle driver go --------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        """Whether nothing runs, waits or is queued here: no turn loop, side job, waiter, write or dispatch."""
        # (A kick still marked pending once the loop ended, a stop or a fault having ended it, is no work here:
        # counted, it kept such a driver, a reaped session's too, for good.)
        return not (self.turn_running or self._background or self._waiting or self.closing) and self.emitter.idle

    def _evict(self) -> None:
        """Let the driver go (it is idle): later calls go to the session's next driver; the in-memory ring drops
        the session's retained events (nobody is attached; its position stays)."""
        self.evicted = True
        ring = self.runtime.ring
        if isinstance(ring, MemoryRing):
            ring.forget(self.session_id)

    async def _successor(self) -> SessionDriver:
        successor = await self.runtime.driver(self.session_id)
        assert isinstance(successor, SessionDriver)  # the engine's channels are its drivers
        return successor

    async def _kick_successor(self) -> None:
        (await self._successor()).kick()


def evict_idle(
    drivers: MutableMapping[str, SessionDriver], *, idle_for: float | None = None, keep: int | None = None
) -> int:
    """Let idle drivers go: those unused for `idle_for` seconds, and, beyond `keep` drivers, the idle ones used
    least recently (down to 90 % of `keep`, so that one pass serves many new drivers). Removed from `drivers`
    in one step (nothing awaits), so a lookup finds either the driver or nothing, and makes a new one; returns
    how many went."""
    over = len(drivers) - keep * 9 // 10 if keep is not None and len(drivers) > keep else 0
    if not over and idle_for is None:
        return 0
    now = time.monotonic()
    idle = sorted((d for d in drivers.values() if d.idle), key=lambda d: d.used_at)
    stale = sum(1 for d in idle if idle_for is not None and now - d.used_at >= idle_for)
    going = idle[: max(over, stale)]
    for driver in going:
        del drivers[driver.session_id]
        driver._evict()
    return len(going)
