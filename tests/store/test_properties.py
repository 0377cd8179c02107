"""Invariants under concurrency: whatever the interleaving, each session's seqs are 1, 2, 3, ... with no
gap and no repeat, and every acknowledged append is stored as returned."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentwatch.events import Event, NewEvent, UserMessage, new_id
from agentwatch.store import SessionDraft, Store, connect_store

APPENDER = Path(__file__).with_name("_appender.py")

# The store fixture is made once per test and shared by its examples; each example uses new sessions.
_SHARED_STORE = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

batch_sizes = st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=8)


async def _read_all(store: Store, session_id: str) -> list[Event]:
    events: list[Event] = []
    while batch := await store.read_events(session_id, after_seq=events[-1].seq if events else 0, limit=10_000):
        events.extend(batch)
    return events


@pytest.mark.slow
@settings(_SHARED_STORE, max_examples=15)
@given(writers=st.lists(batch_sizes, min_size=2, max_size=10), sessions=st.integers(min_value=1, max_value=3))
async def test_concurrent_tasks_get_contiguous_seqs(store: Store, writers: list[list[int]], sessions: int) -> None:
    session_ids = [
        (await store.create_session(SessionDraft(name=new_id("ses"), role="chat"))).id for _ in range(sessions)
    ]

    async def writer(number: int, sizes: list[int]) -> list[Event]:
        appended: list[Event] = []
        for n, size in enumerate(sizes):
            session_id = session_ids[(number + n) % sessions]
            events = await store.append(session_id, [NewEvent(UserMessage(text=f"{number}:{n}"))] * size)
            # One write's events are consecutive.
            assert [event.seq for event in events] == list(range(events[0].seq, events[0].seq + size))
            appended.extend(events)
        return appended

    results = await asyncio.gather(*(writer(number, sizes) for number, sizes in enumerate(writers)))

    acknowledged = sorted((event for events in results for event in events), key=lambda e: (e.session_id, e.seq))
    stored = [event for session_id in sorted(session_ids) for event in await _read_all(store, session_id)]
    assert stored == acknowledged
    for session_id in session_ids:
        seqs = [event.seq for event in stored if event.session_id == session_id]
        assert seqs == list(range(1, len(seqs) + 1))
        assert (await store.get_session(session_id)).last_seq == len(seqs)


@pytest.mark.slow
@settings(_SHARED_STORE, max_examples=4)
@given(
    plans=st.tuples(*[st.lists(st.integers(min_value=1, max_value=3), min_size=10, max_size=40)] * 2),
    sessions=st.integers(min_value=1, max_value=2),
)
def test_two_processes_get_contiguous_seqs(
    shared_store_url: str, plans: tuple[list[int], list[int]], sessions: int
) -> None:
    """Two processes, each with concurrent writers, append to the same sessions of one store: on SQLite each
    process's writer applies its appends in groups, and the file's write lock orders the two writers."""
    session_ids = asyncio.run(_create_sessions(shared_store_url, sessions))
    start_at = time.time() + 1.5  # both children connect first, then write at the same moment
    children = [
        subprocess.Popen(
            [
                sys.executable,
                str(APPENDER),
                shared_store_url,
                ",".join(session_ids),
                ",".join(map(str, plan)),
                str(start_at),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for plan in plans
    ]
    outputs = [child.communicate(timeout=120)[0] for child in children]
    assert [child.returncode for child in children] == [0, 0]

    acknowledged = Counter(tuple(line.split()) for output in outputs for line in output.splitlines())
    assert max(acknowledged.values()) == 1  # no seq was handed to both processes
    stored = asyncio.run(_stored_seqs(shared_store_url, session_ids))
    for session_id in session_ids:
        assert stored[session_id] == list(range(1, len(stored[session_id]) + 1))
    assert sorted(acknowledged) == sorted((sid, str(seq)) for sid, seqs in stored.items() for seq in seqs)
    assert sum(len(seqs) for seqs in stored.values()) == sum(map(sum, plans))


@pytest.fixture
def shared_store_url(store_url: str) -> str:
    """A migrated, empty store of the backend under test, for several processes to share."""
    asyncio.run(_create_sessions(store_url, 0))  # migrate once, before the children race to open it
    return store_url


async def _create_sessions(url: str, count: int) -> list[str]:
    store = await connect_store(url)
    try:
        return [(await store.create_session(SessionDraft(name=new_id("ses"), role="chat"))).id for _ in range(count)]
    finally:
        await store.close()


async def _stored_seqs(url: str, session_ids: list[str]) -> dict[str, list[int]]:
    store = await connect_store(url)
    try:
        return {session_id: [event.seq for event in await _read_all(store, session_id)] for session_id in session_ids}
    finally:
        await store.close()
