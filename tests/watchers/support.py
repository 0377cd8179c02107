"""Helpers for observer tests: polling real engines, reading what a session recorded."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from agentwatch.events import Event, ObserverReported, ObserverStateChanged, RuntimeNotice
from agentwatch.runtime.engine import Engine
from agentwatch.store import SessionFilter, SessionRecord
from tests.runtime.support import OpenEngine, Scripted, role

__all__ = [
    "OpenEngine",
    "Scripted",
    "events",
    "eventually",
    "observers_of",
    "reports",
    "role",
    "states",
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


def turn_types(found: list[Event]) -> list[str]:
    """The types of the events that belong to a turn (observer notes are recorded outside turns)."""
    return [e.type for e in found if e.turn_id is not None]
