"""The Engine: sessions, their drivers, tools, policies, observers, the store and the live ring, together.

```python
async with Engine.open("sqlite:///.agentwatch/agentwatch.db", agents_dir="agents") as engine:
    snapshot = await engine.task("coder", "Add a --verbose flag")
    print(snapshot["status"], snapshot["lastAssistantText"])
```

`engine.call_tool(name, args)` is the one entry for every tool (the same call an agent, MCP, HTTP and the
CLI make); it returns a JSON-able dict, or `{"error": {"code": ..., "message": ...}}`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import importlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from pydantic import JsonValue

from agentwatch.config import Config, load_config
from agentwatch.errors import Conflict, DamagedRecord, InvalidArgument, NotFound, UserError
from agentwatch.events import DELETION_SOURCE, NewEvent, Origin, RuntimeNotice, SubtaskStarted, new_id
from agentwatch.live import LiveRing, cancel_and_wait, connect_live
from agentwatch.reads.current import status_snapshot
from agentwatch.retention import deleted_reap_at, reap_due, reap_runs_due
from agentwatch.runtime import compaction, requests
from agentwatch.runtime.driver import DRIVER_IDLE_SECONDS, DRIVERS_KEPT, SessionDriver, evict_idle
from agentwatch.runtime.extensions import Extension, default_extensions
from agentwatch.runtime.full_collections import turn_loop_ended, turn_loop_started
from agentwatch.runtime.heartbeats import Heartbeat, HeartbeatTicker, heartbeats_from_config
from agentwatch.runtime.hooks import Hook, HookFired, HookRunner, hooks_from_config
from agentwatch.runtime.leases import (
    HAND_OVER_SECONDS,
    STOP_CHECK_SECONDS,
    Leases,
    commit_claimed,
    release_after_stop,
    to_the_end,
)
from agentwatch.runtime.models import ModelResolver, ScriptedModel
from agentwatch.runtime.plan import settled
from agentwatch.runtime.policy import GrantPolicy, Policy, PolicyChain, PolicyFn, as_policy
from agentwatch.runtime.roster import AgentDefinition, Roster, load_roster
from agentwatch.runtime.runs import Run, RunListener, start_run
from agentwatch.runtime.services import Deletion, Queued, Runtime, RuntimeServices, ToolSetHook, TurnTracer
from agentwatch.runtime.thread_observer import ObserverFactory, ReplaySnapshot
from agentwatch.runtime.tools import builtin_tools, project_tool
from agentwatch.runtime.tools.base import Caller, Tool
from agentwatch.runtime.toolservers import close_tool_servers
from agentwatch.runtime.turn import end_stopped_turn
from agentwatch.store import (
    TERMINAL_STATUSES,
    InputDraft,
    RequestRecord,
    SessionDraft,
    SessionFilter,
    SessionRecord,
    SessionStatus,
    Store,
    Write,
    connect_store,
    every_session,
)
from agentwatch.tools import call_tool, check_agent_name, check_prompt

__all__ = ["Engine", "ToolSetHook", "run_task"]

log = logging.getLogger(__name__)

MAINTENANCE_SECONDS = 5.0
"""How often the engine hands held requests whose time came over to a person."""
STOP_POLL_SECONDS = 0.1
"""How often a stop asked of another engine looks whether the turn ended."""
STOP_WAIT_SECONDS = 30.0
"""How long a stop asked of another engine waits for the turn to end (at least a lease's time, and a bit)."""


class _RunsElsewhere(Exception):
    """The session's turn runs in another live engine: only that engine can stop it (`Engine._stop_elsewhere`)."""


class Engine:
    """The running system. Open it with `Engine.open(...)`; see the module docs."""

    def __init__(
        self,
        *,
        config: Config,
        store: Store,
        ring: LiveRing,
        roster: Roster,
        tools: dict[str, Tool],
        policy: PolicyChain,
        models: ModelResolver,
    ) -> None:
        self.config = config
        self.store = store
        self.ring = ring
        self.roster = roster
        self.tools = tools
        """Every tool by name: built-in, drive, read and user tools."""
        self.policy = policy
        self.models = models
        self._drivers: dict[str, SessionDriver] = {}
        self._starting: dict[str, asyncio.Future[SessionDriver]] = {}  # drivers being started, per session
        self._factories: list[ObserverFactory] = []
        self._stop_reasons: dict[str, str] = {}
        self._deleting: set[str] = set()
        """Sessions this engine is deleting: stopped, their deletion not yet written (a wait does not settle)."""
        self._maintenance: asyncio.Task[None] | None = None
        self._closed = False
        self._draining = False
        sessions = config.sessions
        self.leases = Leases(store, ttl=sessions.lease_seconds, renew_every=sessions.lease_renew_seconds)
        """The session leases this engine holds: it runs a session's turns only while it holds its lease."""
        self.extensions: list[Extension] = []
        """The extensions installed in this engine, in install order."""
        self.heartbeats: list[Heartbeat] = []
        """The heartbeats this engine ticks (none where it does not: see `open`)."""
        self._ticker: HeartbeatTicker | None = None
        self.hooks: HookRunner | None = None
        """Fires this engine's hooks (None where it runs no turn: see `open`)."""
        self.tool_set_hooks: list[ToolSetHook] = []
        """Hooks that adjust each turn's tool set, applied in order (see `tools_for`)."""
        self.run_listeners: list[RunListener] = []
        """Told each step of the runs this engine takes (the tracing spans of workflows)."""
        self.turn_tracers: list[TurnTracer] = []
        """Asked for the trace context of each part of a turn this engine starts (the tracing spans of turns)."""

    @property
    def services(self) -> RuntimeServices:
        """The shared parts this engine was assembled from."""
        return RuntimeServices(self.config, self.store, self.ring, self.roster, self.tools, self.policy, self.models)

    # -- opening and closing --------------------------------------------------------------------------

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        store: str | None = None,
        *,
        agents_dir: str | Path | None = None,
        live: str | None = None,
        root: str | Path = ".",
        config: Config | None = None,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        definitions: Iterable[AgentDefinition] = (),
        policies: Iterable[Policy | PolicyFn] = (),
        recover: bool = True,
        extensions: Iterable[Extension] | None = None,
        models: Mapping[str, ScriptedModel] | None = None,
        runs_turns: bool = True,
        create_store: bool = True,
        heartbeats: Iterable[Heartbeat] = (),
        tick: bool = True,
        hooks: Iterable[Hook] = (),
    ) -> AsyncIterator[Engine]:
        """Open the store and live ring, load the roster, continue cut-off turns; close everything after.

        Arguments override `agentwatch.toml` and `AGENTWATCH_*` variables, which override the defaults.
        `tools` and `policies` take plain functions too (sync or async): a tool's schema comes from its signature,
        a policy is named after its function (`agentwatch.tools.function_tool`, `agentwatch.runtime.policy`).
        `extensions` None installs the default extensions (observer agents among them); `[]` installs none.
        `models` are model objects (a `ScriptedModel` in tests) by name: a role's `model: scripted:<name>` plays
        the one given as `<name>`, before any registered with `register_scripted_model`.

        Opening loads the model layer (pydantic-ai, in a worker thread) and then calls `gc.freeze()`, so the
        process's long-lived start-up objects are no longer scanned by full garbage collections during turns.

        `runs_turns=False` opens an engine that writes (answers, inputs, stops, take-overs: the drive tools) but
        never runs a turn, for a short-lived process such as an acting CLI command: it installs no extension,
        loads no model layer, continues no cut-off turn, runs no maintenance and holds no lease. Work it
        queues is left for the engine that runs the session, which picks it up after its current turn; when
        the session has no live owner, its lease is written expired, so a running engine's sweep (or the next
        engine to open the store) takes it over at once. `create_store=False` (a reader's engine) refuses a store
        that does not exist yet instead of making it (`connect_store(create=False)`).

        `heartbeats` run roles on a schedule, beside those `[heartbeats]` in `agentwatch.toml` declares; they are
        checked (each names a role of the roster) and tick in an engine that recovers (`recover=True`) with
        background tasks on, unless `tick=False` (a short-lived server such as `agentwatch mcp`): see
        `agentwatch.runtime.heartbeats`. `hooks` run roles when something outside asks (`hook_fire`), beside those
        `[hooks]` declares: see `agentwatch.runtime.hooks`.
        """
        if not runs_turns and extensions:
            raise UserError("an engine opened with runs_turns=False runs no turn: it takes no extensions")
        config = config or load_config(root)
        updates: dict[str, Any] = {}
        if store is not None:
            updates["store"] = store
        if live is not None:
            updates["live"] = live
        if agents_dir is not None:
            updates["agents_dir"] = Path(agents_dir)
        config = config.model_copy(update=updates)
        engine = await cls._assemble(config, tools, definitions, policies, models, create_store=create_store)
        try:
            if runs_turns:
                for extension in default_extensions() if extensions is None else extensions:
                    engine.add_extension(extension)
                for problem in engine.roster.problems:
                    log.warning("%s", problem)
                if recover and tick and config.background_tasks:
                    declared = [*heartbeats_from_config(config), *heartbeats]
                    engine.heartbeats = _checked_schedule(engine.roster, "heartbeat", declared)
                declared_hooks = [*hooks_from_config(config), *hooks]
                engine.hooks = HookRunner(engine, _checked_schedule(engine.roster, "hook", declared_hooks))
                await engine._start(recover=recover)
            else:
                engine.leases = _HandOver(engine.store, ttl=HAND_OVER_SECONDS)
            yield engine
        finally:
            await engine.close()

    @classmethod
    async def _assemble(
        cls,
        config: Config,
        tools: Iterable[Tool | Callable[..., Any]],
        definitions: Iterable[AgentDefinition],
        policies: Iterable[Policy | PolicyFn],
        models: Mapping[str, ScriptedModel] | None = None,
        *,
        create_store: bool = True,
    ) -> Engine:
        chained = [as_policy(policy) for policy in policies]  # (before anything opens: a bad one is refused here)
        registry = {tool.name: tool for tool in builtin_tools()}
        for item in tools:
            tool = project_tool(item)
            registry[tool.name] = tool
        agents_dir = config.agents_dir if config.agents_dir.is_absolute() else config.root / config.agents_dir
        resolver = ModelResolver.from_config(config, models=models)  # its aliases apply to the roster too
        roster = load_roster(agents_dir, known_tools=registry, extra=definitions, models=resolver)
        chain = PolicyChain([GrantPolicy({t.name: t.grant for t in registry.values() if t.grant}), *chained])
        store = await connect_store(config.store, create=create_store)
        try:
            ring = await connect_live(config.live)
        except BaseException:
            await store.close()
            raise
        return cls(config=config, store=store, ring=ring, roster=roster, tools=registry, policy=chain, models=resolver)

    async def _start(self, *, recover: bool) -> None:
        # The model layer loads now, off the loop, rather than inside the first turn (where it would hold the
        # loop, and the turn's first commit, for as long as the import takes).
        await asyncio.to_thread(_load_model_layer)
        _freeze_start_up()
        if recover:  # (the turns of lapsed leases are left to the sweep, whose first one runs as the leases start)
            unfinished: tuple[SessionStatus, ...] = ("running", "awaiting_input")
            runnable = set(self.roster.runnable())
            for status in unfinished:
                async for session in every_session(self.store, SessionFilter(status=[status]), sort="newest"):
                    if await self.leases.runs_at_start(session, runnable):
                        (await self.driver(session.id)).kick()
        self._maintenance = asyncio.create_task(self._maintain(recover=recover), name="agentwatch-maintenance")
        self.leases.start(self, sweep=recover)  # renew held leases; take over expired ones
        if self.heartbeats:  # (set only where they tick: see `open`)
            self._ticker = HeartbeatTicker(self, self.heartbeats)
            self._ticker.start()

    # -- draining (a deploy) ---------------------------------------------------------------------------

    def drain(self) -> None:
        """Start no new turn here from now on; running turns go on to their end.

        For a process about to stop (a deploy): the turn loop of every session driver, those running now and
        every later one, ends after its running turn instead of taking the next work. Work left for this engine
        (input queued, an answered request, a turn to continue) stays in the store and its lease is handed
        over (expired at once), so another live engine's sweep takes it within a second, or the next engine
        opened on the store does. A draining engine takes over no expired lease either. Reads, attach and
        writes that start no turn keep working. Cannot be undone; `close` still cuts off what is running.
        """
        if self._draining:
            return
        self._draining = True
        self.leases.sweeping = False
        if self._ticker is not None:
            self._ticker.stop()
        for driver in list(self._drivers.values()):
            driver.drain()

    @property
    def draining(self) -> bool:
        """Whether `drain` was called: no new turn starts in this engine."""
        return self._draining

    @property
    def closing(self) -> bool:
        """Whether `close` was called: the turns and runs it cuts off go on when an engine next opens the store."""
        return self._closed

    def sessions_loaded(self) -> int:
        """How many sessions this engine holds in memory now (their drivers; idle ones are let go)."""
        return len(self._drivers)

    def running_turns(self) -> list[str]:
        """The ids of the sessions with a turn in progress in this engine (its turn loop running), sorted."""
        return sorted(sid for sid, driver in list(self._drivers.items()) if driver.turn_running)

    async def close(self) -> None:
        """Cut off running turns (they continue when an engine opens the store again) and close.

        From here on the engine refuses calls (`UserError`): open a new one to go on."""
        if self._closed:
            return
        self._closed = True
        if self._ticker is not None:
            await self._ticker.close()
        if self.hooks is not None:
            await self.hooks.close()
        for extension in reversed(self.extensions):
            try:
                await extension.close()
            except Exception as exc:  # one broken extension must not keep the store open
                log.warning("closing extension %s failed: %s", type(extension).__name__, exc)
        if self._maintenance is not None:  # (cancelled again while it runs: a store call may swallow a cancellation)
            await cancel_and_wait([self._maintenance])
        await asyncio.gather(*(d.close() for d in self._drivers.values()), return_exceptions=True)
        await close_tool_servers(self)  # the sessions' MCP servers (stdio servers' processes end)
        await self.leases.close()  # hand the cut-off turns over to another live engine at once
        await self.ring.close()
        await self.store.close()

    def _check_open(self) -> None:
        """Refuse a call on an engine whose `close` was called, before it reaches the store (closed with it)."""
        if self._closed:
            raise UserError("this engine is closed; open a new one (`Engine.open(...)`) to go on")

    async def _maintain(self, *, recover: bool) -> None:
        while True:
            await asyncio.sleep(MAINTENANCE_SECONDS)
            steps: list[tuple[str, Callable[[], Awaitable[object]]]] = [
                ("handing held requests over", self.escalate_due),
                ("reaping", lambda: reap_due(self.store, self.config.retention, reaped=self.ring.drop)),
                ("reaping runs", lambda: reap_runs_due(self.store, self.config.retention)),
                ("ending lapsed runs", lambda: self.store.end_lapsed_runs(datetime.now(UTC))),
            ]
            if self.hooks is not None:
                steps.append(("stopping hook fires no run times out", self.hooks.stop_orphans))
            if recover and not self._draining:  # (an engine that takes over work says which work none takes)
                steps.append(("saying which agents no engine runs", lambda: self.leases.say_unclaimed(self)))
            for what, step in steps:  # one failing step does not keep the others from running
                try:
                    await step()
                except Exception as exc:  # housekeeping must never take the engine down
                    log.warning("maintenance (%s) failed: %s", what, exc)
            evict_idle(self._drivers, idle_for=DRIVER_IDLE_SECONDS)

    # -- drivers and observers ------------------------------------------------------------------------

    async def driver(self, session_id: str) -> SessionDriver:
        """The driver of a session in this engine, started on first use. The drivers of several sessions start at
        once, each after a store read (an engine that takes hundreds of lapsed turns over starts as many); the
        callers of one session share its start."""
        driver = self._drivers.get(session_id)
        if driver is not None:
            return driver
        starting = self._starting.get(session_id)
        if starting is None:
            starting = self._starting[session_id] = asyncio.ensure_future(self._start_driver(session_id))
            starting.add_done_callback(partial(_forget_start, self._starting, session_id))
        return await asyncio.shield(starting)

    async def _start_driver(self, session_id: str) -> SessionDriver:
        [last_seq] = await self._columns(session_id, "last_seq")  # (all it needs: a damaged row has one)
        driver = SessionDriver(self, session_id, last_seq, self._factories)
        if self._draining:
            driver.drain()
        evict_idle(self._drivers, keep=DRIVERS_KEPT - 1)  # room for this one
        self._drivers[session_id] = driver
        return driver

    def start_with_observer(self, factory: ObserverFactory) -> None:
        """Give every session driver (those running now and every later one) its own observer instance."""
        self._factories.append(factory)
        for driver in self._drivers.values():
            driver.add_observer(factory)

    def add_extension(self, extension: Extension) -> None:
        """Install an extension now (`Engine.open` installs the defaults or the ones it is given)."""
        self.extensions.append(extension)
        extension.install(self)

    async def subscribe(self, thread_id: str, request: Any) -> ReplaySnapshot:
        """Route `request` to the session's observers' `on_subscribe` with a replay snapshot.

        Resolves once they ran, so any message sent after it returns reaches the new subscriber.
        """
        self._check_open()
        return await (await self.driver(thread_id)).subscribe(request)

    # -- sessions -------------------------------------------------------------------------------------

    async def create(
        self,
        role: str,
        *,
        name: str | None = None,
        scope: str | None = None,
        parent_id: str | None = None,
        run_id: str | None = None,
        origin: Origin | None = None,
        source: str = "api",
        group_key: str | None = None,
        display_name: str | None = None,
        boss: bool = False,
    ) -> SessionRecord:
        """Create a session of `role` (its name unique among live sessions of `scope`)."""
        self._check_open()
        definition = self.roster.get(role)
        if definition.kind == "rule":
            raise InvalidArgument(
                f"{role!r} is a rule observer: it watches agents (name it as an agent's `observer:`) and is not run "
                "as an agent itself"
            )
        if name is not None:
            try:
                check_agent_name(name)
            except ValueError as exc:
                raise InvalidArgument(f"name: {exc}", fields=["name"]) from None
        session_id = new_id("ses")
        draft = SessionDraft(
            id=session_id,
            name=name or f"{role}-{session_id[-6:]}",
            role=role,
            display_name=display_name,
            feature=definition.feature,
            scope=scope,
            source=source,
            model_ref=definition.model,
            group_key=group_key,
            boss=boss,
            parent_id=parent_id,
            run_id=run_id,
            origin=origin,
        )
        return await self.store.create_session(draft)

    async def enqueue(
        self,
        session_id: str,
        text: str,
        *,
        origin: Origin | None = None,
        meta: bool = False,
        key: str | None = None,
        run_id: str | None = None,
    ) -> int:
        """Queue input for a session's next turn; returns how many inputs now wait in its inbox.

        With `key`, the input is queued once: a call with a key this session was sent before queues nothing
        (`queue_input` says so), so a caller may send it again safely after a lost answer or a timeout, for as
        long as the session is kept. The same key with other text is refused (`Conflict`). `run_id` is the run
        whose work it is (the run of the turn that sends it): the turn it begins bills that run, when it is the
        session's, even after the run ended (`InputDraft.run_id`)."""
        return (await self._queue(session_id, text, origin=origin, meta=meta, key=key, run_id=run_id)).pending_inputs

    async def queue_input(
        self,
        session_id: str,
        text: str,
        *,
        origin: Origin | None = None,
        key: str | None = None,
        run_id: str | None = None,
    ) -> Queued:
        """`enqueue`, saying also whether the input's key was sent before (then nothing was queued)."""
        return await self._queue(session_id, text, origin=origin, meta=False, key=key, run_id=run_id)

    async def _queue(
        self, session_id: str, text: str, *, origin: Origin | None, meta: bool, key: str | None, run_id: str | None
    ) -> Queued:
        self._check_open()
        check_prompt(text)
        # A keyed input's id is made from its key: of two calls with one key, the store takes one (the id is taken).
        input_id = keyed_input_id(session_id, key) if key is not None else None
        turn_loop_started()  # full collections wait from here: the turn this input starts is on its way
        try:
            session = await self.store.get_session(session_id)
            if session.deleted_at is not None:
                raise Conflict(f"session {session_id!r} was deleted; create a new one")
            if input_id is not None and await self._queued_before(session_id, input_id, key, text):
                return Queued(session.pending_inputs, duplicate=True)
            driver = await self.driver(session_id)
            draft = InputDraft(text=text, origin=origin, meta=meta, id=input_id, run_id=run_id)
            write = Write(session_id, inputs_add=[draft])

            async def queue() -> None:
                # leases: the input is never left without an owner to run it (the lease's take shares its commit)
                await commit_claimed(self, session_id, lambda claim: driver.submit(replace(write, claim=claim)))
                driver.kick()

            try:
                await to_the_end(queue())  # (a caller that goes away leaves the input queued and looked at)
            except Conflict:
                # Another call with the same key queued it meanwhile (or the write clashed otherwise: then raised).
                if input_id is None or not await self._queued_before(session_id, input_id, key, text):
                    raise
                return Queued((await self.store.get_session(session_id)).pending_inputs, duplicate=True)
        finally:
            turn_loop_ended()
        return Queued((await self.store.get_session(session_id)).pending_inputs, duplicate=False)

    async def _queued_before(self, session_id: str, input_id: str, key: str | None, text: str) -> bool:
        """Whether the keyed input `input_id` is in the session's inbox (taken or not) with this `text`; raises
        `Conflict` when it holds other text: a reused key with new text is a caller's mistake."""
        try:
            earlier = await self.store.get_input(session_id, input_id)
        except NotFound:
            return False
        if earlier.text != text:
            raise Conflict(
                f"key {key!r} queued other text for session {session_id!r}; an input with new text needs a new key "
                "(or no key)",
                fields=["key"],
            )
        return True

    async def wait(self, session_id: str, timeout: float) -> tuple[SessionRecord, bool]:
        """Wait until the session settles (done, failed, stopped, waiting on a request, or idle with nothing in
        its inbox that a turn would take now: see `runtime.plan.settled`) or `timeout` seconds pass. Returns the
        session and whether the wait timed out."""
        self._check_open()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        driver = await self.driver(session_id)
        while True:
            session = await self.store.get_session(session_id)
            busy = driver.turn_running and session.status not in TERMINAL_STATUSES
            if not busy and session_id not in self._deleting and await settled(self.store, session):
                return session, False
            remaining = deadline - loop.time()
            if remaining <= 0:
                return session, True
            # Changes made in this process wake us at once; the 1 s poll covers other processes.
            await driver.wait_changed(min(remaining, 1.0))

    async def snapshot(self, session: SessionRecord, *, timed_out: bool = False) -> dict[str, JsonValue]:
        """The status snapshot `agent_await` and `agent_task` return."""
        self._check_open()
        threshold = self.stuck_after(session.role)
        return await status_snapshot(
            self.store, session, stuck_after=threshold, timed_out=timed_out, ring=self.ring, roster=self.roster
        )

    @property
    def runs_agents(self) -> bool:
        """True: this engine runs the agents of its roles (a read of the store alone runs none)."""
        return True

    def stuck_after(self, role: str) -> float:
        """The role's stuck threshold in seconds (its front matter, else the project's, else 600)."""
        return self.roster.session_settings(role, self.config.sessions).stuck_after_seconds

    async def task(self, role: str, prompt: str, *, timeout: float = 600.0, **create: Any) -> dict[str, JsonValue]:
        """Create a session, give it `prompt`, wait for it to settle; returns its status snapshot."""
        check_prompt(prompt)  # before the session is made: a refused prompt leaves nothing behind
        session = await self.create(role, **create)
        await self.enqueue(session.id, prompt)
        session, timed_out = await self.wait(session.id, timeout)
        return await self.snapshot(session, timed_out=timed_out)

    def run(
        self, name: str, *, kind: str = "workflow", input: JsonValue = None, brain_sha: str | None = None
    ) -> contextlib.AbstractAsyncContextManager[Run]:
        """Record a run of `name`, its phases and its tasks (agent sessions of the run), for the run reads
        (`run_trace`, `run_compare`, `run_history`); see `agentwatch.runtime.runs`:

        ```python
        async with engine.run("report", input={"topic": "tides"}) as run:
            async with run.span("Research") as research:
                found = await research.task("researcher", "Collect sources", attempts=3)
        ```
        """
        self._check_open()
        return start_run(self, name, kind=kind, input=input, brain_sha=brain_sha)

    async def stop(self, session_id: str, *, by: str = "a person") -> bool:
        """Stop the session's turn (it ends `cancelled`); returns whether there was one to stop.

        An observer session is stopped even between turns: it ends `cancelled` at once, which ends its pairing
        for good (the observed session's engine reads that as a person's stop and writes the tombstone).

        A turn running in another live engine (its lease is held elsewhere and not expired) is stopped by that
        engine, asked through the store (it looks about once a second); this returns once the turn ended, or
        raises `Conflict` when it still runs after `STOP_WAIT_SECONDS` (the other engine hangs)."""
        self._check_open()
        return await self._stop(session_id, by, idle_observer=True)

    async def _stop(self, session_id: str, by: str, *, idle_observer: bool) -> bool:
        driver = await self.driver(session_id)
        cut_off, written = False, False
        try:
            async with self._stopping(session_id):
                self._stop_reasons[session_id] = by
                looping = driver.turn_running
                stopped = await driver.stop_turn()
                self._stop_reasons.pop(session_id, None)  # read by the turn it ended, if any (`stop_reason`)
                if stopped:
                    return True
                cut_off = looping  # the stop found the turn loop between turns, and cancelled it there
                session = await self.store.get_session(session_id)
                if not (
                    session.status in ("awaiting_input", "running")
                    or (idle_observer and session.is_observer and session.status != "cancelled")
                    or (cut_off and session.inbox_size)  # the loop was taking input up: its turn is stopped
                ):
                    return False
                try:
                    await end_stopped_turn(self, driver, session_id, session.current_turn_id, by, status=session.status)
                    written = True
                    return True
                except Conflict:
                    if (await self.store.get_session(session_id)).last_seq == session.last_seq:
                        raise
                # The session moved on while the stop was written (another stop ended the turn, an answer came,
                # or the turn resumed elsewhere): what was read is stale, so look again.
        except _RunsElsewhere:
            return await self._stop_elsewhere(session_id, by, idle_observer=idle_observer)
        finally:
            if cut_off and not driver.turn_running:
                # What the cancelled loop was doing is left undone: the lease it took (renewed for good, so no
                # other engine's sweep takes the session). With a stop written (input the loop was taking up
                # waits for the next input, as input queued before any stop does), the lease goes, as a stopped
                # turn's loop lets it go; with nothing to stop, the loop looks again, and lets the lease go.
                if written:
                    await release_after_stop(self, session_id)
                else:
                    driver.kick()
        return await self._stop(session_id, by, idle_observer=idle_observer)

    async def _stop_elsewhere(self, session_id: str, by: str, *, idle_observer: bool) -> bool:
        """Ask the engine running the session's turn to stop it, and wait until it did (or its lease lapsed:
        then the stop is this engine's to make)."""
        # As long as the owner renews its lease, it is alive and ending the turn (a tool may take its time to let
        # go); one that lets the lease lapse leaves the stop to this engine. (Not this engine's own lease time: an
        # acting engine hands its leases over at once.)
        waits = max(STOP_WAIT_SECONDS, self.config.sessions.lease_seconds + 2 * STOP_CHECK_SECONDS)
        deadline = asyncio.get_running_loop().time() + waits
        asked = await self.store.request_stop(session_id, by)
        while asked is not None:
            await asyncio.sleep(STOP_POLL_SECONDS)
            session = await self.store.get_session(session_id)
            if session.status == "cancelled":
                return True
            if session.status != "running":
                break  # it ended or paused meanwhile: what is left to stop (a paused turn) is stopped here
            lease = await self.store.get_lease(session_id)
            if lease is None or lease.expired or lease.owner == self.leases.owner:
                break  # nobody runs it any more, or this engine took it over: stop it here
            if asyncio.get_running_loop().time() > deadline:
                raise Conflict(
                    f"{session.name} ({session.id}) is running a turn in another engine ({lease.owner}), which was "
                    f"asked to stop it and has not within {waits:g} s (it may hang); the stop stays asked: "
                    "that engine stops the turn when it looks again, or whichever engine continues the turn once "
                    "its lease lapses"
                )
        return await self._stop(session_id, by, idle_observer=idle_observer)

    @contextlib.asynccontextmanager
    async def _stopping(self, session_id: str) -> AsyncIterator[None]:
        """Hold the session's lease while a stop is written by an engine that does not run its turn: a live
        owner's running turn is left to that owner (`_RunsElsewhere`); a lapsed owner's lease is taken over
        first, so that it cannot renew it and run on past the stop (it is cut off instead), and no turn starts
        meanwhile. Work the stop left waiting (input queued while no engine with the agent's role was open, a
        stop that found no turn) keeps a lease, handed over: it is how an engine with the role finds it."""
        if self.leases.holds(session_id) or (session_id in self.leases.held and await self.leases.confirm(session_id)):
            yield
            return
        if session_id in self.leases.held:  # lost (confirmed so, and let go): its turn here was taken over
            await self._cut_off_here(session_id)
        owner = self.leases.owner
        if await self.store.acquire_lease(session_id, owner, self.leases.ttl):
            try:
                yield
            finally:
                with contextlib.suppress(Exception):  # (it expires on its own)
                    if await settled(self.store, await self.store.get_session(session_id)):
                        await self.store.release_lease(session_id, owner)
                    else:  # an engine's sweep takes it (one with the role: `SessionDriver`)
                        await self.store.renew_leases(owner, [session_id], HAND_OVER_SECONDS)
            return
        session = await self.store.get_session(session_id)
        lease = await self.store.get_lease(session_id)
        if session.status == "running" and lease is not None and not lease.expired:
            raise _RunsElsewhere
        yield  # a paused or settled session another engine holds: its stop is written as before

    async def _cut_off_here(self, session_id: str) -> None:
        """Cut off the session's turn here, this engine having lost its lease (the turn writes nothing more), and
        wait for its loop to end: a stop then finds no turn running here, and is written from what the store
        says (taken in this engine's name, the lease would have let the old turn write its own stop after the
        end the engine that took it over wrote)."""
        driver = await self.driver(session_id)
        driver.cut_off_turn()
        await driver.stop_turn()  # (it stops nothing: the turn is cut off already)

    async def fire_hook(self, name: str, input: JsonValue = None, *, key: str | None = None) -> HookFired:
        """Start a run of hook `name` with `input` (once per `key`, when given); returns once the run is recorded
        (see `agentwatch.runtime.hooks`)."""
        self._check_open()
        if self.hooks is None:  # (the fire's run is held by the engine that runs it: see `agentwatch.runtime.hooks`)
            raise Conflict(
                f"hook {name!r} cannot fire here: a fire runs in an engine that runs turns, and this one runs none "
                "(it only reads and writes the store); fire it through a server on this store whose engine runs turns"
            )
        if self._draining:
            raise Conflict("this engine is draining for a restart: it starts no run; fire the hook again in a moment")
        return await self.hooks.fire(name, input, key)

    def stop_reason(self, session_id: str) -> str:
        """Who stopped the session's turn (consumed by the turn that ends)."""
        return self._stop_reasons.pop(session_id, "a person")

    async def delete(self, session_id: str, *, by: str = "a person") -> Deletion:
        """Soft-delete a session (its turn is stopped); readable by id until its reap time.

        A session whose row is damaged (`DamagedRecord` for a value it holds) is deleted too: that is how a
        person gets rid of it. Deleting reads only what it needs; what its stop cannot read is left as it is."""
        self._check_open()
        deletion = await self._deletion(session_id)
        if deletion is not None:
            return deletion
        self._deleting.add(session_id)  # a wait the stop ends answers with the deletion
        try:
            return await self._delete(session_id, by)
        finally:
            self._deleting.discard(session_id)
            driver = self._drivers.get(session_id)
            if driver is not None:
                driver.notify_changed()  # a wait that found it being deleted answers now, not at its next poll

    async def _delete(self, session_id: str, by: str) -> Deletion:
        now = datetime.now(UTC)
        try:
            await self._stop(session_id, by, idle_observer=False)  # (a deleted observer is stopped as deleted)
            reap_at = deleted_reap_at(await self.store.get_session(session_id), self.config.retention, now=now)
        except DamagedRecord as damaged:
            # Its turn cannot run on what cannot be read (a turn this engine ran was stopped before the read).
            log.info("deleting session %s, whose stored state is damaged: %s", session_id, damaged.message)
            reap_at = now + self.config.retention.deleted_ttl
        # Its last event, in the same write as the deletion: attach streams end with it (`DELETION_SOURCE`),
        # and its history says who and when. Of two deletions at once, the store lets one write (the other
        # finds the agent deleted), so there is one such event, and no moment when the agent is deleted
        # without it or has it without being deleted.
        notice = RuntimeNotice(
            type="runtime.info",
            message=f"deleted by {by}; readable by its id until {reap_at:%Y-%m-%d %H:%M} UTC",
            source=DELETION_SOURCE,
            detail={"by": by, "reap_at": reap_at.isoformat()},
        )
        write = Write(session_id, events=[NewEvent(notice)], touch=False, delete_until=reap_at)
        try:
            await (await self.driver(session_id)).commit(write)
        except Conflict:
            deletion = await self._deletion(session_id)
            if deletion is None:
                raise
            return deletion  # deleted meanwhile by someone else
        deletion = await self._deletion(session_id)
        assert deletion is not None  # (written above; a reap comes days later)
        return deletion

    async def _deletion(self, session_id: str) -> Deletion | None:
        """The session's deletion (None: not deleted), read from those columns alone."""
        deleted_at, reap_at = await self._columns(session_id, "deleted_at", "reap_at")
        if deleted_at is None:
            return None
        return Deletion(session_id, datetime.fromisoformat(deleted_at), datetime.fromisoformat(reap_at))

    async def _columns(self, session_id: str, *fields: str) -> list[Any]:
        """The values of `fields` of a session (deleted or not), in JSON form, read and decoded alone: a value
        damaged in another column does not keep them from being read. `NotFound` for no such session."""
        page = await self.store.list_session_values(SessionFilter(ids=[session_id], deleted=True), fields, limit=1)
        if not page.items:
            await self.store.get_session(session_id)  # (the store's own `NotFound`, which says what to give)
        return page.items[0]

    async def live_children(self, session_id: str) -> list[SessionRecord]:
        """Sub-agents of a session that have not ended (not its observer, which is no sub-agent of it)."""
        page = await self.store.list_sessions(
            SessionFilter(parent_id=session_id, status=["idle", "running", "awaiting_input"], is_observer=False),
            limit=100,
        )
        return page.items

    async def note_spawn(self, parent_id: str, child: SessionRecord, tool_call_id: str | None) -> None:
        """Record on the parent that it spawned `child`."""
        started = SubtaskStarted(child_session_id=child.id, role=child.role, name=child.name, tool_call_id=tool_call_id)
        driver = await self.driver(parent_id)
        await driver.commit(Write(parent_id, events=[NewEvent(started)]))

    # -- requests (agentwatch.runtime.requests) -------------------------------------------------------

    async def answer(self, request_id: str, answer: JsonValue, *, by: str = "a person") -> RequestRecord:
        """Resolve a pending request; the paused turn continues (in this process or after a restart)."""
        self._check_open()
        return await requests.answer(self, request_id, answer, by=by)

    async def escalate(self, request_id: str, *, reason: str = "escalated") -> RequestRecord:
        """Hand a request held for the parent agent over to a person now."""
        self._check_open()
        return await requests.escalate(self, request_id, reason=reason)

    async def escalate_due(self) -> int:
        """Escalate every held request whose `deliver_at` has passed; returns how many."""
        return await requests.escalate_due(self)

    # -- conversations (agentwatch.runtime.compaction) ------------------------------------------------

    async def clear(self, session_id: str) -> SessionRecord:
        """Archive the current conversation (reason `clear`) and start a new, empty one."""
        self._check_open()
        return await compaction.clear(self, session_id)

    async def compact(self, session_id: str, *, summary: str | None = None) -> SessionRecord:
        """Set the conversation's messages aside (archived, reason `compact`) behind a summary that opens the
        next turn. Without `summary`, the session's model writes it."""
        self._check_open()
        return await compaction.compact(self, session_id, summary=summary)

    # -- tools ----------------------------------------------------------------------------------------

    def add_tool(self, tool: Tool | Callable[..., Any]) -> Tool:
        """Register a tool (or a plain function, which becomes one) for roles that list it."""
        registered = project_tool(tool)
        self.tools[registered.name] = registered
        return registered

    async def call_tool(self, name: str, args: dict[str, Any], *, caller: Caller | None = None) -> dict[str, Any]:
        """Call a tool by name with JSON arguments; returns its dict or `{"error": {...}}`, never raises for
        a bad call."""
        self._check_open()
        return await call_tool(self.tools, self, name, args, caller)

    def tools_for(self, session: SessionRecord, definition: AgentDefinition) -> tuple[str, ...]:
        """The tool names a turn of `session` gets: its role's tools, adjusted by every tool-set hook."""
        names: Sequence[str] = definition.tools
        for hook in self.tool_set_hooks:
            names = hook(session, names)
        return tuple(names)

    def tool_names(self) -> Sequence[str]:
        """Every registered tool name, sorted."""
        return sorted(self.tools)


def run_task(role: str, prompt: str, *, timeout: float = 600.0, **open_args: Any) -> dict[str, JsonValue]:
    """For scripts: open an engine, run one task to its end, close, and return the status snapshot.

    ```python
    from agentwatch import run_task
    print(run_task("coder", "Add a --verbose flag", agents_dir="agents")["lastAssistantText"])
    ```
    """

    async def main() -> dict[str, JsonValue]:
        async with Engine.open(**open_args) as engine:
            return await engine.task(role, prompt, timeout=timeout)

    return asyncio.run(main())


class _HandOver(Leases):
    """The leases of an engine that runs no turn (`runs_turns=False`): it never holds one. Taking a lease
    writes it only when it is free or expired (a live owner's is left alone), expired at once, so queued work
    goes to whichever engine runs or starts next."""

    def holds(self, session_id: str) -> bool:
        return False

    async def acquire(self, session_id: str) -> bool:
        await self.store.acquire_lease(session_id, self.owner, HAND_OVER_SECONDS)
        return False


def keyed_input_id(session_id: str, key: str) -> str:
    """The inbox id of the input sent to a session with `key`: the same in every engine and process."""
    return "inp_k" + hashlib.blake2b(f"{session_id}\0{key}".encode(), digest_size=12).hexdigest()


def _forget_start(
    starting: dict[str, asyncio.Future[SessionDriver]], session_id: str, done: asyncio.Future[Any]
) -> None:
    """Let a driver's start go once done: a failed one is tried again by the next caller. Its error went to its
    callers (one cancelled meanwhile leaves it unheard, which is no fault)."""
    if starting.get(session_id) is done:
        del starting[session_id]
    if not done.cancelled():
        done.exception()


def _load_model_layer() -> None:
    """Import the model layer, and what it loads only on first use: anyio's asyncio backend (the first stream)
    and the price table pydantic-ai reads for a response's cost (about 15,000 objects). Left to the first turn,
    they would be imported on the event loop (about 75 ms) and stay outside the start-up freeze, for every
    full collection to scan."""
    importlib.import_module("agentwatch.runtime.models._adapter")
    importlib.import_module("anyio._backends._asyncio")
    with contextlib.suppress(ImportError, AttributeError):  # a warm-up only: a turn loads them itself if not
        from genai_prices.data_snapshot import get_snapshot

        get_snapshot()


def _freeze_start_up() -> None:
    """Move what start-up allocated (modules, the model layer, the roster, schemas) out of the cyclic garbage
    collector's sight: a full collection then scans only what turns allocate, instead of pausing a turn for
    every long-lived object of the process (about 250,000 once the model layer is loaded)."""
    gc.collect()
    gc.freeze()


def _is_a_runtime(engine: Engine) -> Runtime:
    return engine  # mypy checks here that Engine keeps the `Runtime` protocol the lower layers rely on


Scheduled = TypeVar("Scheduled", Heartbeat, Hook)


def _checked_schedule(roster: Roster, what: str, declared: list[Scheduled]) -> list[Scheduled]:
    """The `declared` heartbeats (or hooks), once each names a role of the roster and no name is given twice."""
    seen: set[str] = set()
    runnable = roster.runnable()
    for item in declared:
        if item.name in seen:
            raise UserError(f"two {what}s are named {item.name!r}; give each its own name")
        seen.add(item.name)
        if item.role not in runnable:
            known = ", ".join(runnable) or "none"
            why = "a rule observer, which runs as no agent" if item.role in roster else "not defined"
            raise UserError(f"{what} {item.name!r} runs role {item.role!r}, which is {why} (roles: {known})")
    return declared
