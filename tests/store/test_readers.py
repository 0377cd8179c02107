"""The SQLite store's reads: on the caller's thread within a budget, on a reader thread past it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentwatch.errors import StoreError
from agentwatch.store import SessionDraft, SessionFilter, open_store
from agentwatch.store import _readers as readers_module
from agentwatch.store._sql import Tx
from agentwatch.store.sqlite import SqliteStore

_COUNT_TO = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) SELECT count(*) FROM n"
"""A read that takes many steps of SQLite's virtual machine (far more than one look at the clock)."""


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    async with open_store(f"sqlite:///{tmp_path}/a.db") as opened:
        assert isinstance(opened, SqliteStore)
        await opened.create_session(SessionDraft(name="nova", role="chat"))
        yield opened


async def test_a_small_read_runs_on_the_callers_thread(store: SqliteStore) -> None:
    threads: list[int] = []

    async def read(tx: Tx) -> Any:
        threads.append(threading.get_ident())
        return (await tx.fetch("SELECT name FROM sessions"))[0][0]

    assert await store._read(read) == "nova"
    assert threads == [threading.get_ident()]


@pytest.mark.parametrize(("cpu_s", "wall_s"), [(0.0, 10.0), (10.0, 0.0)], ids=["cpu", "wall"])
async def test_a_read_past_its_budget_runs_again_on_a_reader_thread_and_so_do_the_next_of_its_code_if_it_was_dear(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch, cpu_s: float, wall_s: float
) -> None:
    monkeypatch.setattr(readers_module, "_INLINE_BUDGET_S", cpu_s)
    monkeypatch.setattr(readers_module, "_INLINE_WALL_S", wall_s)
    here = threading.get_ident()
    threads: list[int] = []

    async def count(tx: Tx) -> Any:
        threads.append(threading.get_ident())
        return (await tx.fetch(_COUNT_TO, [200_000]))[0][0]

    assert await store._read(count) == 200_000
    assert threads[0] == here  # tried here first, interrupted, then read on a thread
    assert len(threads) == 2
    assert threads[1] != here
    threads.clear()
    assert await store._read(count) == 200_000
    if cpu_s == 0.0:
        assert len(threads) == 1
        assert threads[0] != here  # the same code goes to a thread at once
    else:
        # Its CPU time on the thread fitted the budget: the wall time was not its own. Its code reads here again.
        assert threads[0] == here
        assert len(threads) == 2

    async def small(tx: Tx) -> Any:
        threads.append(threading.get_ident())
        return (await tx.fetch("SELECT 1"))[0][0]

    threads.clear()
    assert await store._read(small) == 1
    assert threads == [here]  # other code still reads here


async def test_a_read_finds_the_callers_connection_taken_and_reads_on_a_thread(store: SqliteStore) -> None:
    readers = store._readers
    assert readers is not None
    threads: list[int] = []

    async def read(tx: Tx) -> Any:
        threads.append(threading.get_ident())
        return (await tx.fetch("SELECT count(*) FROM sessions"))[0][0]

    with readers._inline_lock:  # another thread's read is under way on it
        assert await store._read(read) == 1
    assert len(threads) == 1
    assert threads[0] != threading.get_ident()


async def test_a_failed_read_on_the_callers_thread_is_a_store_error_and_is_not_run_again(store: SqliteStore) -> None:
    calls = 0

    async def bad(tx: Tx) -> Any:
        nonlocal calls
        calls += 1
        return await tx.fetch("SELECT nothing FROM nowhere")

    with pytest.raises(StoreError, match="SQLite failed"):
        await store._read(bad)
    assert calls == 1

    async def write(tx: Tx) -> Any:
        return await tx.execute("DELETE FROM sessions")

    with pytest.raises(StoreError, match=r"readonly|query_only"):
        await store._read(write)
    assert [session.name for session in (await store.list_sessions(SessionFilter())).items] == ["nova"]


async def test_a_read_on_the_callers_thread_still_lets_other_tasks_run(store: SqliteStore) -> None:
    turns: list[int] = []
    reads = 0

    async def read(tx: Tx) -> Any:
        return await tx.fetch("SELECT 1")

    async def reader() -> None:
        nonlocal reads
        for _ in range(5):
            await store._read(read)
            reads += 1

    async def ticker() -> None:
        while reads < 5:
            turns.append(reads)
            await asyncio.sleep(0)

    await asyncio.gather(reader(), ticker())
    # The ticker ran between the reads: each read gave the loop a turn, as waiting for a thread would have.
    assert len(set(turns)) >= 4


async def test_reads_see_every_write_acknowledged_before_them(store: SqliteStore) -> None:
    for index in range(20):
        await store.create_session(SessionDraft(name=f"s{index}", role="chat"))
        assert len((await store.list_sessions(SessionFilter(), limit=100)).items) == index + 2
