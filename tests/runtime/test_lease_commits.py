"""Leases around a turn: taken before its input is stored (sharing its commit where the store applies writes
in order), let go once its end is stored, before the loop's last look for more work."""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agentwatch.runtime.engine import Engine
from agentwatch.runtime.leases import Leases, commit_claimed
from agentwatch.runtime.models import ScriptedModel
from agentwatch.store import InputDraft, SessionDraft, Store, Write, open_store
from tests.runtime.support import Scripted, role, until


class Commits:
    """Counts the COMMITs of a SQLite store's writer connection, and keeps what each transaction did."""

    def __init__(self, store: Store) -> None:
        self.count = 0
        self.transactions: list[list[str]] = [[]]
        connection: Any = getattr(store, "_writer_connection", None)
        assert isinstance(connection, sqlite3.Connection)
        connection.set_trace_callback(self._trace)

    def _trace(self, statement: str) -> None:
        if statement.startswith("COMMIT"):
            self.count += 1
            self.transactions.append([])
        elif not statement.startswith("BEGIN"):
            self.transactions[-1].append(" ".join(statement.split()[:3]))


def queued(store: Store, write: Write) -> Any:
    """Start `write` (with the claim it is given) as a session emitter does: its store write is queued in the
    next loop turn."""
    return lambda claim: asyncio.ensure_future(store.write(replace(write, claim=claim)))


async def test_the_take_of_a_lease_shares_the_commit_of_the_work_queued_with_it(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path / 'aw.db'}") as store:
        session = await store.create_session(SessionDraft(name="s-claimed", role="any"))
        leases = Leases(store, ttl=30)
        runtime: Any = SimpleNamespace(store=store, leases=leases)
        commits = Commits(store)
        write = Write(session.id, inputs_add=[InputDraft(text="go")])
        await commit_claimed(runtime, session.id, queued(store, write))
        assert commits.count == 1
        lease = await store.get_lease(session.id)
        assert lease is not None and lease.owner == leases.owner and leases.holds(session.id)
        assert [i.text for i in await store.list_inputs(session.id)] == ["go"]

        # Held already: the work alone is written.
        await commit_claimed(runtime, session.id, queued(store, Write(session.id, inputs_add=[InputDraft(text="2")])))
        assert commits.count == 2
        await leases.close()


async def test_work_queued_beside_another_owners_live_lease_is_left_to_it(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path / 'aw.db'}") as store:
        session = await store.create_session(SessionDraft(name="s-other", role="any"))
        assert await store.acquire_lease(session.id, "own_other", 30)
        leases = Leases(store, ttl=30)
        runtime: Any = SimpleNamespace(store=store, leases=leases)
        await commit_claimed(runtime, session.id, queued(store, Write(session.id, inputs_add=[InputDraft(text="go")])))
        lease = await store.get_lease(session.id)
        assert lease is not None and lease.owner == "own_other"
        assert not leases.held
        assert [i.text for i in await store.list_inputs(session.id)] == ["go"]
        await leases.close()


async def test_a_take_waiting_behind_a_release_still_comes_before_the_work(tmp_path: Path) -> None:
    """While the lease is being let go, the take waits for that, and the work waits for the take: the work is
    never stored after the release and before the take."""
    async with open_store(f"sqlite:///{tmp_path / 'aw.db'}") as store:
        session = await store.create_session(SessionDraft(name="s-order", role="any"))
        leases = Leases(store, ttl=30)
        runtime: Any = SimpleNamespace(store=store, leases=leases)
        assert await leases.acquire(session.id)
        order: list[str] = []
        write = Write(session.id, inputs_add=[InputDraft(text="go")])

        async def written() -> Any:
            events = await store.write(write)
            order.append("work")
            return events

        async def released() -> None:
            await leases.release(session.id)
            order.append("released")

        releasing = asyncio.ensure_future(released())
        await asyncio.sleep(0)  # the release is under way
        lease_taken = asyncio.ensure_future(
            commit_claimed(runtime, session.id, lambda claim: asyncio.ensure_future(written()))
        )
        await asyncio.gather(releasing, lease_taken)
        assert order == ["released", "work"]
        lease = await store.get_lease(session.id)
        assert lease is not None and lease.owner == leases.owner
        await leases.close()


async def test_after_a_turn_the_lease_goes_once_its_end_is_stored(tmp_path: Path, scripted: Scripted) -> None:
    """The lease is taken before the input is stored, in the same commit, and let go after the turn's end (the
    loop lets it go before its last look for work)."""
    model = scripted("lease-commits", ScriptedModel.replying("Done."))
    async with Engine.open(
        f"sqlite:///{tmp_path / 'aw.db'}", root=tmp_path, definitions=[role("r", model)], extensions=[]
    ) as engine:
        session = await engine.create("r")
        await engine.driver(session.id)
        commits = Commits(engine.store)
        await engine.enqueue(session.id, "hello")
        settled, timed_out = await engine.wait(session.id, 10)
        await until(lambda: not engine.running_turns())  # the loop lets the lease go after the turn
        assert not timed_out and settled.status == "completed"
        assert engine.leases.held == [] and await engine.store.get_lease(session.id) is None
    takes = [i for i, t in enumerate(commits.transactions) if "INSERT INTO leases" in t]
    inputs = [i for i, t in enumerate(commits.transactions) if "INSERT INTO inbox" in t]
    assert len(takes) == 1 and len(inputs) == 1 and takes[0] == inputs[0]
    first = commits.transactions[takes[0]]
    assert first.index("INSERT INTO leases") < first.index("INSERT INTO inbox")
    # The lease is let go once the turn's end is stored, never before it.
    ends = [i for i, t in enumerate(commits.transactions) if "INSERT INTO events" in t]
    releases = [i for i, t in enumerate(commits.transactions) if "DELETE FROM leases" in t]
    assert len(releases) == 1 and releases[0] > ends[-1]


async def test_a_take_cut_short_lets_go_of_what_the_store_took_all_the_same(tmp_path: Path) -> None:
    """Once: an engine closing while a turn loop took a lease left it taken (the store committed the take, the
    engine never heard), so the next engine waited a whole lease before it ran the agent's new input."""
    path = tmp_path / "aw.db"
    async with open_store(f"sqlite:///{path}") as store:
        session = await store.create_session(SessionDraft(name="s-cut", role="any"))
        leases = Leases(store, ttl=30)
        other = sqlite3.connect(path, isolation_level=None)  # another process holds the write lock for a moment
        other.execute("BEGIN IMMEDIATE")
        try:
            take = asyncio.ensure_future(leases.acquire(session.id))
            await asyncio.sleep(0.3)  # the take waits for the lock
            take.cancel()
            await asyncio.sleep(0.1)
        finally:
            other.execute("ROLLBACK")
            other.close()
        with pytest.raises(asyncio.CancelledError):
            await take
        await store.get_session(session.id)  # (a read: the writer is done with what was queued before it)
        await asyncio.sleep(0.2)
        assert await store.get_lease(session.id) is None  # let go: free for the next engine at once
        assert not leases.holds(session.id)
        await leases.close()
