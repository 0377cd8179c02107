"""Helpers for observer tests: polling real engines, reading what a session recorded, a reporting observer,
and the tags a digest's renderer writes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from agentwatch.events import Event, ObserverReported, ObserverStateChanged, RuntimeNotice
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.runtime.roster import AgentDefinition
from agentwatch.store import SessionFilter, SessionRecord
from agentwatch.watchers.digest import (
    ActivityItem,
    AssistantTextItem,
    ToolCallItem,
    ToolResultItem,
    TurnEndedItem,
    UserMessageItem,
    envelope_tag,
)
from tests.runtime.support import OpenEngine, Scripted, role

__all__ = [
    "QUIET",
    "OpenEngine",
    "Scripted",
    "coder_and_watcher",
    "digests_received",
    "events",
    "eventually",
    "observers_of",
    "reporting",
    "reports",
    "role",
    "settled_observer",
    "skeleton",
    "states",
    "states_reached",
    "turn",
    "turn_types",
    "warnings",
]

T = TypeVar("T")


async def eventually(probe: Callable[[], Awaitable[T]], *, timeout: float = 10.0) -> T:
    """Poll `probe` until it returns something truthy (and return it); fail after `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout} s (last value {value!r})")
        await asyncio.sleep(0.02)


async def events(engine: Engine, session_id: str, *types: str) -> list[Event]:
    """The session's events (of `types`, when given), oldest first."""
    return await engine.store.read_events(session_id, limit=10_000, types=list(types) or None)


async def states(engine: Engine, session_id: str) -> list[tuple[str, str | None]]:
    """The observer states recorded on a session, with their reasons."""
    return [
        (e.payload.state, e.payload.reason)
        for e in await events(engine, session_id, "observer.state")
        if isinstance(e.payload, ObserverStateChanged)
    ]


async def states_reached(engine: Engine, session_id: str, count: int) -> list[tuple[str, str | None]]:
    """The observer states recorded on a session once there are at least `count` of them (else none)."""
    found = await states(engine, session_id)
    return found if len(found) >= count else []


async def reports(engine: Engine, session_id: str) -> list[str]:
    """The reports recorded on an observed session."""
    return [
        e.payload.report
        for e in await events(engine, session_id, "observer.report")
        if isinstance(e.payload, ObserverReported)
    ]


async def warnings(engine: Engine, session_id: str) -> list[str]:
    """The runtime warnings recorded on a session."""
    return [
        e.payload.message
        for e in await events(engine, session_id, "runtime.warning")
        if isinstance(e.payload, RuntimeNotice)
    ]


async def observers_of(engine: Engine, session_id: str) -> list[SessionRecord]:
    """The observer sessions whose parent is `session_id`."""
    page = await engine.store.list_sessions(SessionFilter(parent_id=session_id, is_observer=True), limit=100)
    return page.items


QUIET = ScriptedModel(function=lambda ctx: Reply("nothing to report"))
"""An observer that never reports."""


def coder_and_watcher(scripted: Scripted, tag: str) -> tuple[AgentDefinition, AgentDefinition]:
    """A `coder` role that answers each prompt ("answer to ..."), observed by a quiet `watcher` (models named
    after `tag`)."""
    model = scripted(f"coder-{tag}", ScriptedModel(function=lambda ctx: Reply(f"answer to {ctx.prompt}")))
    watcher = scripted(f"watcher-{tag}", QUIET)
    return role("coder", model, observer="watcher", grant=("spawn",)), role("watcher", watcher)


async def turn(engine: Engine, session_id: str, prompt: str) -> None:
    """Give the session `prompt` and wait until its turn settles."""
    await engine.enqueue(session_id, prompt)
    await engine.wait(session_id, 10)


async def digests_received(engine: Engine, observer_id: str) -> list[str]:
    """The digest batches queued to an observer session, oldest first."""
    inputs = await engine.store.list_inputs(observer_id, pending_only=False)
    return [i.text for i in inputs if i.origin is not None and i.origin.ref == "observer-digest"]


async def settled_observer(engine: Engine, observer_id: str, digests: int) -> bool:
    """Whether the observer got at least `digests` batches and dealt with them all (idle, nothing pending)."""
    session = await engine.store.get_session(observer_id)
    received = await digests_received(engine, observer_id)
    return len(received) >= digests and session.status == "idle" and session.pending_inputs == 0


def turn_types(found: list[Event]) -> list[str]:
    """The types of the events that belong to a turn (observer notes are recorded outside turns)."""
    return [e.type for e in found if e.turn_id is not None]


def reporting(text: str) -> ScriptedModel:
    """An observer that reports `text` once per digest, then ends its turn with the tool's answer."""

    def script(ctx: Any) -> Any:
        if not ctx.tool_results:
            return CallTool("ObserverReport", {"report": text})
        return Reply(ctx.tool_results[0].output)

    return ScriptedModel(function=script)


def skeleton(name: str, items: list[ActivityItem]) -> list[tuple[str, str]]:
    """The tags the renderer itself writes for `items` in the envelope of agent `name`, in order."""
    tags = [("", envelope_tag(name))]
    for item in items:
        match item:
            case ToolCallItem():
                tags += [("", "tool-call"), ("/", "tool-call")]
            case ToolResultItem():
                tags += [("", "tool-result"), ("/", "tool-result")]
            case UserMessageItem():
                tags += [("", "user-message"), ("/", "user-message")]
            case TurnEndedItem():
                tags += [("", "turn-ended")]
            case AssistantTextItem():
                pass
    return [*tags, ("/", envelope_tag(name))]
