"""What the code below the surfaces may ask of a running engine.

The turn loop, drive tools, compaction, human requests, extensions and the watchers type their engine
argument as `Runtime` (or take the narrower `RuntimeServices`), never as `Engine`: `Engine` is only the
assembly that satisfies this protocol, and only the surfaces (CLI, service, MCP) and user code import it.
That keeps imports flowing down the layers (a test pins the order) and lets a test hand any of them a
runtime of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import JsonValue

from agentwatch.config import Config
from agentwatch.events import Origin, TurnStarted
from agentwatch.live import LiveRing
from agentwatch.store import RequestRecord, SessionRecord, Store, Write

if TYPE_CHECKING:
    from agentwatch.events import Event
    from agentwatch.runtime.hooks import HookFired
    from agentwatch.runtime.leases import Leases
    from agentwatch.runtime.models import ModelResolver
    from agentwatch.runtime.policy import PolicyChain
    from agentwatch.runtime.roster import AgentDefinition, Roster
    from agentwatch.runtime.runs import RunListener
    from agentwatch.runtime.thread_observer import ObserverFactory
    from agentwatch.tools import Caller, Tool

__all__ = [
    "Deletion",
    "Queued",
    "Runtime",
    "RuntimeServices",
    "SessionChannel",
    "ToolSetHook",
    "TurnPart",
    "TurnTracer",
]

ToolSetHook = Callable[["SessionRecord", Sequence[str]], Sequence[str]]
"""Adjusts the tool names a session's turn gets, given the session and the names its role lists."""


@dataclass(frozen=True, slots=True)
class Deletion:
    """A session's soft deletion, as `delete` answers it: read from those columns alone, so that a session whose
    row is damaged elsewhere can be deleted too."""

    session_id: str
    deleted_at: datetime
    reap_at: datetime
    """Until when it stays readable by id."""


@dataclass(frozen=True, slots=True)
class Queued:
    """An input queued for a session's next turn, as `queue_input` answers it."""

    pending_inputs: int
    """How many inputs wait in the session's inbox now."""
    duplicate: bool
    """The input's key was sent before: this call queued nothing."""


@dataclass(frozen=True, slots=True)
class TurnPart:
    """A part of a turn about to be recorded (a turn's start, or its continuation after a restart or an answer)."""

    session_id: str
    turn_id: str
    started: TurnStarted
    """Its `turn.started`, as it will be stored."""
    earlier: str | None
    """The trace context the turn's part before this one stored (None: this is the first part, or that part was
    not traced)."""


TurnTracer = Callable[[TurnPart], "str | None"]
"""Starts the span of a part of a turn before its start is recorded, and gives the span's trace context (a W3C
`traceparent`) for its `turn.started` to keep; None: no span."""


@dataclass(frozen=True, slots=True)
class RuntimeServices:
    """The parts an engine is assembled from; each is shared by every session of the engine."""

    config: Config
    store: Store
    ring: LiveRing
    roster: Roster
    tools: dict[str, Tool]
    """Every tool by name: built-in, drive, read and user tools."""
    policy: PolicyChain
    models: ModelResolver


class SessionChannel(Protocol):
    """The one way to write to a session from inside the engine: its emitter (commit → ring → observers)."""

    async def commit(self, write: Write, *, rides: bool = False) -> list[Event]:
        """Make `write` durable, then hand its events to the ring and the observers, in stream order. With
        `rides`, a note beside the turn's work, which may share the commit of the session's next write."""

    def kick(self) -> None:
        """Make the session look for work (new input, answered requests, a turn to continue)."""

    @property
    def turn_running(self) -> bool:
        """Whether its turn loop runs in this engine (a turn in progress, or about to start)."""


class Runtime(Protocol):
    """The engine as the layers below the surfaces see it."""

    @property
    def services(self) -> RuntimeServices:
        """The shared parts: config, store, ring, roster, tools, policy, models."""

    @property
    def config(self) -> Config: ...

    @property
    def leases(self) -> Leases | None:
        """The session leases this engine holds (None: every session counts as its own)."""

    @property
    def closing(self) -> bool:
        """Whether the engine is closing: what it cuts off now goes on when an engine next opens the store."""

    @property
    def store(self) -> Store: ...

    @property
    def ring(self) -> LiveRing: ...

    @property
    def roster(self) -> Roster: ...

    @property
    def policy(self) -> PolicyChain: ...

    @property
    def models(self) -> ModelResolver: ...

    @property
    def tools(self) -> dict[str, Tool]: ...

    @property
    def tool_set_hooks(self) -> list[ToolSetHook]:
        """Hooks that adjust each turn's tool set, applied in order."""

    @property
    def run_listeners(self) -> list[RunListener]:
        """Told each step of the runs this engine takes (see `agentwatch.runtime.runs.RunMark`)."""

    @property
    def turn_tracers(self) -> list[TurnTracer]:
        """Asked for the trace context of each part of a turn this engine starts (the first that gives one)."""

    async def driver(self, session_id: str) -> SessionChannel:
        """The session's channel in this engine (its emitter and turn loop), started on first use."""

    def start_with_observer(self, factory: ObserverFactory) -> None:
        """Give every session (running now and later) its own ThreadObserver instance."""

    def add_tool(self, tool: Tool | Callable[..., Any]) -> Tool:
        """Register a tool (or a plain function) for roles that list it."""

    def tools_for(self, session: SessionRecord, definition: AgentDefinition) -> tuple[str, ...]:
        """The tool names a turn of `session` gets."""

    async def call_tool(self, name: str, args: dict[str, Any], *, caller: Caller | None = None) -> dict[str, Any]:
        """Call a tool by name; its dict or `{"error": {...}}`."""

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
        """Create a session of `role`."""

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
        """Queue input for a session's next turn (once per `key`; the work of run `run_id`); returns how many
        inputs now wait."""

    async def queue_input(
        self,
        session_id: str,
        text: str,
        *,
        origin: Origin | None = None,
        key: str | None = None,
        run_id: str | None = None,
    ) -> Queued:
        """`enqueue`, saying also whether the input's key was sent before."""

    async def wait(self, session_id: str, timeout: float) -> tuple[SessionRecord, bool]:
        """Wait until the session settles; returns it and whether the wait timed out."""

    async def snapshot(self, session: SessionRecord, *, timed_out: bool = False) -> dict[str, JsonValue]:
        """The status snapshot `agent_await` and `agent_task` return."""

    def stuck_after(self, role: str) -> float:
        """The role's stuck threshold in seconds."""

    async def stop(self, session_id: str, *, by: str = "a person") -> bool:
        """Stop the session's turn; returns whether there was one. Raises `Conflict` when another live engine
        runs it."""

    def stop_reason(self, session_id: str) -> str:
        """Who stopped the session's turn (consumed by the turn that ends)."""

    async def delete(self, session_id: str, *, by: str = "a person") -> Deletion:
        """Soft-delete a session (one whose row is damaged too)."""

    async def answer(self, request_id: str, answer: JsonValue, *, by: str = "a person") -> RequestRecord:
        """Resolve a pending request; the paused turn continues."""

    async def escalate(self, request_id: str, *, reason: str = "escalated") -> RequestRecord:
        """Hand a request held for the parent agent over to a person now."""

    async def fire_hook(self, name: str, input: JsonValue = None, *, key: str | None = None) -> HookFired:
        """Start a run of hook `name` (see `agentwatch.runtime.hooks`); returns once the run is recorded."""

    async def live_children(self, session_id: str) -> list[SessionRecord]:
        """Sub-agents of a session that have not ended (not its observer)."""

    async def note_spawn(self, parent_id: str, child: SessionRecord, tool_call_id: str | None) -> None:
        """Record on the parent that it spawned `child`."""
