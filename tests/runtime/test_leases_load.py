"""Leases under load: a busy engine never loses (or fails) its own turns.

Once, one engine running many sessions at once on SQLite (synchronous=FULL) cut its own turns off: a lease
renewal waited behind the queued writes of the turns past the lease's local deadline, and the engine took
"my renewal has not come back yet" for "lost", so turns ended `failed` with `LeaseLost` (or never ended)
although no other engine existed. A lease is lost only when the store says another owner holds it.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentwatch.config import Config, load_config
from agentwatch.events import ToolResult, TurnEnded
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.leases import Leases
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.store import SessionDraft, SessionFilter, SessionRecord, open_store
from tests.runtime.support import Scripted, role

SESSIONS = 200
LEASE = 0.5
"""Short enough that the renewals of a loaded engine come back after the local deadline, again and again."""


def lease_config(tmp_path: Path, lease: float) -> Config:
    config = load_config(tmp_path, env={})
    return config.model_copy(update={"sessions": config.sessions.model_copy(update={"lease_seconds": lease})})


def one_call(ctx: Any) -> Any:
    """One tool call, then the answer."""
    if any(entry.kind == "tool_result" for entry in ctx.transcript):
        return Reply("done")
    return CallTool("note", {"session": "x"})


async def sessions_of(engine: Engine, ids: list[str]) -> list[SessionRecord]:
    pages = [
        await engine.store.list_sessions(SessionFilter(ids=ids[i : i + 100]), limit=100)
        for i in range(0, len(ids), 100)
    ]
    return [session for page in pages for session in page.items]


async def test_a_busy_engine_keeps_its_own_leases(tmp_path: Path, scripted: Scripted) -> None:
    model = scripted("leases-load", ScriptedModel(function=one_call))
    calls: Counter[str] = Counter()

    async def note(session: str) -> str:
        calls[session] += 1
        return "noted"

    url = f"sqlite:///{tmp_path / 'aw.db'}?synchronous=full"
    async with Engine.open(
        url, config=lease_config(tmp_path, LEASE), definitions=[role("busy", model, tools=("note",))], tools=[note]
    ) as engine:
        ids = [(await engine.create("busy")).id for _ in range(SESSIONS)]
        for session_id in ids:
            await engine.driver(session_id)
        began = time.monotonic()
        await asyncio.gather(*(engine.enqueue(session_id, "go") for session_id in ids))
        while time.monotonic() - began < 45:
            if all(session.status not in ("idle", "running") for session in await sessions_of(engine, ids)):
                break
            await asyncio.sleep(0.2)
        sessions = await sessions_of(engine, ids)
        statuses = Counter(session.status for session in sessions)
        errors = Counter((session.error or "")[:40] for session in sessions if session.error)
        ends: Counter[str] = Counter()
        results = 0
        for session_id in ids:
            for event in await engine.store.read_events(session_id, limit=1_000):
                if isinstance(event.payload, TurnEnded):
                    ends[event.payload.outcome] += 1
                results += isinstance(event.payload, ToolResult)
        takeovers = engine.leases.takeovers
    assert statuses == {"completed": SESSIONS}, (statuses, errors)
    assert ends == {"completed": SESSIONS}, ends
    assert results == SESSIONS
    assert sum(calls.values()) == SESSIONS  # every tool ran once: no turn was cut off and run again
    assert takeovers == 0  # the engine's sweep never took its own late leases for orphans


class NoRuntime:
    """What the sweep would kick a taken-over session's turn loop through: there is none here. It runs role
    `any` (the sweep looks only at sessions of the roles its engine runs)."""

    class roster:
        @staticmethod
        def runnable() -> list[str]:
            return ["any"]

    async def driver(self, session_id: str) -> Any:
        raise AssertionError(f"the sweep took over {session_id}")


@pytest.mark.parametrize("late", [True, False])
async def test_a_late_renewal_loses_nothing_a_takeover_loses_the_lease(tmp_path: Path, late: bool) -> None:
    """Past its expiry (a renewal that came too late), a lease nobody took over is still this engine's: it
    may still write, a renewal or a confirmation keeps it, the sweep leaves it alone. Taken over by another
    owner, it is lost: the renewal says so, and a tool would not start."""
    async with open_store(f"sqlite:///{tmp_path / 'aw.db'}") as store:  # no engine: no other owner sweeps
        session = await store.create_session(SessionDraft(name="s-late", role="any"))
        leases = Leases(store, ttl=0.3)
        assert await leases.acquire(session.id)
        await asyncio.sleep(0.4)  # expired in the store and past the local deadline
        assert not leases.holds(session.id)
        lease = await store.get_lease(session.id)
        assert lease is not None and lease.expired
        if late:
            assert leases.may_write(session.id)
            assert await leases.sweep(NoRuntime()) == 0  # type: ignore[arg-type]  # own leases are never orphans
            assert leases.takeovers == 0
            assert await leases.renew() == []
            assert leases.holds(session.id)
            await asyncio.sleep(0.4)
            assert await leases.confirm(session.id)
            assert leases.holds(session.id) and leases.may_write(session.id)
        else:
            assert await store.acquire_lease(session.id, "own_other", 60)
            assert leases.may_write(session.id)  # not known yet: the store has not said so
            assert not await leases.confirm(session.id)  # a tool does not start
            assert not leases.may_write(session.id)  # and the turn writes nothing more
            assert await leases.renew() == []  # already dropped
        await leases.close()
