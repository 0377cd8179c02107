"""Leases around a turn: taken before its input is stored, let go once its end is stored, before the loop's
last look for more work."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import ScriptedModel
from agentwatch.store import Store
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


async def test_after_a_turn_the_lease_goes_once_its_end_is_stored(tmp_path: Path, scripted: Scripted) -> None:
    """The lease is taken before the input is stored, and let go after the turn's end (the loop lets it go
    before its last look for work)."""
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
    assert len(takes) == 1 and len(inputs) == 1 and takes[0] < inputs[0]
    # The lease is let go once the turn's end is stored, never before it.
    ends = [i for i, t in enumerate(commits.transactions) if "INSERT INTO events" in t]
    releases = [i for i, t in enumerate(commits.transactions) if "DELETE FROM leases" in t]
    assert len(releases) == 1 and releases[0] > ends[-1]
