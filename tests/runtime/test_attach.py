"""Exactly-once delivery relative to attach (ThreadObserver.on_subscribe with a ReplaySnapshot).

Every event is either reflected in the snapshot a new subscriber receives or delivered to it afterwards,
never both and never neither. The property is checked against a reference observer that saw every event from
the start; the same check is first shown to catch the naive order (read history, then register).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentwatch.events import Event, StreamCursor
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel, Think
from agentwatch.runtime.thread_observer import EventCollector, ReplaySnapshot
from tests.runtime.support import OpenEngine, Scripted, handed_out, role


@dataclass
class Client:
    """A watcher that attached mid-conversation."""

    snapshot: ReplaySnapshot | None = None
    received: list[Event] = field(default_factory=list)


@dataclass
class Fanout:
    """The seed's example observer: broadcasts every event to its registered clients."""

    clients: list[Client] = field(default_factory=list)

    def on_event(self, thread_id: str, event: Event) -> None:
        for client in self.clients:
            client.received.append(event)

    def on_subscribe(self, thread_id: str, request: Client, snapshot: ReplaySnapshot) -> None:
        request.snapshot = snapshot
        self.clients.append(request)  # registered inside on_subscribe, as the contract asks


def streaming_script() -> ScriptedModel:
    words = " ".join(f"word{i}" for i in range(30))
    return ScriptedModel(
        [
            [Think("Let me look at it first."), CallTool("lookup", {"key": "a"})],
            [Reply(f"Found it: {words}."), CallTool("lookup", {"key": "b"})],
            Reply(f"Done: {words}."),
        ],
        chunk_delay=0.0005,
    )


def lookup(key: str) -> str:
    return f"value of {key}"


def problems(client: Client, reference: list[Event]) -> list[str]:
    """Why the client's view is not exactly the reference stream (empty when it is)."""
    assert client.snapshot is not None
    position = client.snapshot.position
    expected_history = [e for e in reference if e.durable and e.seq <= position.seq]
    expected_after = [e for e in reference if e.cursor > position]
    found: list[str] = []
    if list(client.snapshot.history) != expected_history:
        found.append(f"history differs at position {position.seq}/{position.sub}")
    if client.received != expected_after:
        missing = len({e.id for e in expected_after} - {e.id for e in client.received})
        doubled = len(client.received) - len({e.id for e in client.received})
        found.append(f"after the snapshot: {missing} missing, {doubled} doubled")
    return found


async def run_with_attaches(open_engine: OpenEngine, model_ref: str, delays: list[float], naive: bool) -> list[str]:
    reference: EventCollector[Any] = EventCollector()
    fanout = Fanout()
    clients: list[Client] = []
    async with open_engine(role("streamer", model_ref, tools=("lookup",)), tools=[lookup]) as engine:
        engine.start_with_observer(lambda _thread_id: reference)
        engine.start_with_observer(lambda _thread_id: fanout)
        session = await engine.create("streamer")
        await engine.enqueue(session.id, "go")
        for delay in delays:
            await asyncio.sleep(delay)
            client = Client()
            if naive:
                # The order that loses events: read committed history, then register later.
                history = await engine.store.read_events(session.id, limit=10_000)
                await asyncio.sleep(0)
                last = history[-1].cursor if history else StreamCursor(session.id, 0)  # before the first event
                client.snapshot = ReplaySnapshot(session.id, last, tuple(history), None, ())
                fanout.clients.append(client)
            else:
                await engine.subscribe(session.id, client)
            clients.append(client)
        await engine.wait(session.id, 30)
        await handed_out(engine, session.id)
    events = [e for _, e in reference.events]
    return [p for client in clients for p in problems(client, events)]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(delays=st.lists(st.floats(min_value=0.0, max_value=0.02), min_size=1, max_size=6))
async def test_attaching_at_any_moment_sees_every_event_exactly_once(
    open_engine: OpenEngine, scripted: Scripted, delays: list[float]
) -> None:
    model_ref = scripted(f"stream-{random.randrange(10**9)}", streaming_script())
    assert await run_with_attaches(open_engine, model_ref, delays, naive=False) == []


async def test_the_check_catches_the_naive_order(open_engine: OpenEngine, scripted: Scripted) -> None:
    model_ref = scripted("naive-stream", streaming_script())
    # Attach every 2 ms for longer than the turn streams, so some attaches land mid-stream however slow the
    # machine is; attaches after the turn ended are harmless to the check.
    found = await run_with_attaches(open_engine, model_ref, [0.002] * 400, naive=True)
    assert found, "the naive attach order lost nothing: the exactly-once check would not catch a real gap"
