"""PostgreSQL: an append that moves a session's activity time within the same tenth of a second changes no
indexed value of its row, so the server updates the row without touching the table's indexes (a HOT update).
The listings' order is checked on every backend by the contract tests."""

from __future__ import annotations

import time
from itertools import pairwise

import pytest

from agentwatch.events import NewEvent, UserMessage
from agentwatch.store import SessionDraft, connect_store
from agentwatch.store._sql import tenth_of

from .databases import postgres_schema

pytestmark = pytest.mark.postgres


def _updates(url: str) -> tuple[int, int]:
    """The sessions table's updates and HOT updates as the server's statistics count them, once every
    backend that made them has reported (a backend reports when it exits; the store's pool has closed)."""
    import psycopg

    deadline = time.monotonic() + 15
    with psycopg.connect(url, autocommit=True) as connection:
        while True:
            row = connection.execute(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = 'sessions'::regclass"
            ).fetchone()
            assert row is not None
            if row[0] >= 20 or time.monotonic() > deadline:
                return int(row[0]), int(row[1])
            time.sleep(0.1)


async def test_appends_within_a_tenth_of_a_second_update_the_session_without_its_indexes(postgres_url: str) -> None:
    with postgres_schema(postgres_url) as url:
        store = await connect_store(url)
        try:
            session = await store.create_session(SessionDraft(name="nova", role="chat"))
            # The row's 21 versions (about 230 bytes each) fit in its page: each update can stay HOT without
            # waiting for the server to prune the versions before it.
            for n in range(20):
                await store.append(session.id, [NewEvent(UserMessage(text=str(n)))])
            times = [session.last_active_at] + [event.at for event in await store.read_events(session.id)]
        finally:
            await store.close()
        same_tenth = sum(tenth_of(before) == tenth_of(after) for before, after in pairwise(times))
        assert same_tenth > 0, "20 appends in a row spanned 20 tenths of a second: this machine is too slow"

        updates, hot = _updates(url)

    assert updates >= 20
    assert hot >= same_tenth
