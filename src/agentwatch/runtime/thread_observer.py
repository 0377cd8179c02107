"""ThreadObserver: in-process code that receives everything a session (thread) does.

Two hooks, called by the session's driver:

- `on_event(thread_id, event)`: synchronous, at the emission point, for every event of the session in
  order, after the event is durable (for durable types) and in the live ring. Keep it fast: push to a
  queue, append to a buffer, bump a counter. Work that must await belongs in a task it spawns.
- `on_subscribe(thread_id, request, snapshot)`: when `engine.subscribe(thread_id, request)` attaches a
  client. Render `snapshot` to the client and register it *inside this call*, in the list `on_event`
  broadcasts to: every event is then either in the snapshot or delivered by `on_event` afterwards,
  never both and never neither (exactly once relative to attach).

Events another process wrote to the session (an answer given through another service, a turn another engine
ran while this one held no lease) reach `on_event` too, in their place in the order: read from the store
before this engine's next event of the session, or before a snapshot. An observer that wants only what this
engine wrote says so with a class attribute `own_events_only = True`.

`engine.start_with_observer(factory)` calls `factory(thread_id)` once per session driver, so each session
gets its own instance; state that must outlive a driver (a client registry) belongs outside the observer.

An observer that raises, or takes long, is isolated: the failure is recorded on the session as a
`runtime.warning` event and the turn never notices.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol

from typing_extensions import TypeVar  # (a default, PEP 696: `EventCollector()` needs no type argument)

from agentwatch.events import Event, RequestOpened, StreamCursor

__all__ = [
    "EventCollector",
    "ObserverFactory",
    "PartialTurn",
    "ReplaySnapshot",
    "ThreadObserver",
]

R_contra = TypeVar("R_contra", contravariant=True, default=Any)


@dataclass(frozen=True, slots=True)
class PartialTurn:
    """The turn being streamed right now: what exists only in memory until its parts complete."""

    turn_id: str
    """The turn in progress."""
    text: str = ""
    """Assistant text streamed so far in the current model request, not yet a complete message."""
    thinking: str = ""
    """Reasoning streamed so far in the current model request (in-progress thinking)."""
    request_index: int = 0
    """The model request the partial content belongs to."""


@dataclass(frozen=True, slots=True)
class ReplaySnapshot:
    """Everything a client attaching mid-conversation needs to catch up."""

    thread_id: str
    """The session."""
    position: StreamCursor
    """The newest event reflected in the snapshot; `on_event` delivers everything after it."""
    history: tuple[Event, ...]
    """Committed events of the current conversation, oldest first."""
    partial: PartialTurn | None
    """The partially streamed turn and in-progress thinking, or None between turns."""
    pending_choices: tuple[RequestOpened, ...]
    """Requests (choices, questions, approvals) still waiting for an answer."""


class ThreadObserver(Protocol[R_contra]):
    """Receives every event of one session; see the module docs for the contract."""

    def on_event(self, thread_id: str, event: Event) -> None:
        """Called inline, in order, for every event of the session. Must be fast and must not await."""

    def on_subscribe(self, thread_id: str, request: R_contra, snapshot: ReplaySnapshot) -> None:
        """Catch `request`'s client up from `snapshot` and register it, both inside this call."""


ObserverFactory = Callable[[str], ThreadObserver[Any]]
"""Makes the observer instance for one session's driver, given the session id."""

T = TypeVar("T", default=Any)


@dataclass
class EventCollector(Generic[T]):
    """The trivial observer: buffers `(thread_id, event)` pairs in memory, for inspection after a step.

    ```python
    collector = EventCollector()
    engine.start_with_observer(lambda thread_id: collector)
    ...
    [event.type for _, event in collector.events]
    ```
    """

    events: list[tuple[str, Event]] = field(default_factory=list)
    """Every event received, in order."""
    snapshots: list[tuple[str, T, ReplaySnapshot]] = field(default_factory=list)
    """Every subscribe request received with its snapshot."""

    def on_event(self, thread_id: str, event: Event) -> None:
        """Append the event."""
        self.events.append((thread_id, event))

    def on_subscribe(self, thread_id: str, request: T, snapshot: ReplaySnapshot) -> None:
        """Keep the request and snapshot."""
        self.snapshots.append((thread_id, request, snapshot))

    def clear(self) -> None:
        """Forget everything collected so far."""
        self.events.clear()
        self.snapshots.clear()
