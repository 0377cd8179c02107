"""A full database (SQLite's real SQLITE_FULL, from a size limit set with `PRAGMA max_page_count`): the write
that does not fit fails with an error that says so, writes that fit still land, the writer thread lives on,
nothing acknowledged is lost, and writes resume once there is room again."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentwatch.errors import StoreError
from agentwatch.events import Event, NewEvent, UserMessage
from agentwatch.store import SessionDraft, SessionPatch, Write, open_store
from agentwatch.store.sqlite import SqliteStore

from .databases import sqlite_url

BIG = "x" * 200_000
"""Far more than the room left: its write cannot fit."""


def said(text: str) -> NewEvent:
    return NewEvent(UserMessage(text=text))


async def _limit(store: SqliteStore, extra_pages: int | None) -> None:
    """Cap the database at its current size plus `extra_pages` (None: lift the cap)."""

    async def cap(tx: object) -> None:
        pages = (await tx.fetch("PRAGMA page_count"))[0][0]  # type: ignore[attr-defined]
        limit = 1_000_000_000 if extra_pages is None else pages + extra_pages
        await tx.fetch(f"PRAGMA max_page_count = {limit}")  # type: ignore[attr-defined]

    await store._write(cap)


async def test_a_full_database_fails_only_what_does_not_fit_and_recovers(tmp_path: Path) -> None:
    async with open_store(sqlite_url(tmp_path / "agentwatch.db")) as store:
        assert isinstance(store, SqliteStore)
        a = await store.create_session(SessionDraft(name="a", role="chat"))
        b = await store.create_session(SessionDraft(name="b", role="chat"))
        acknowledged: list[Event] = list(await store.append(a.id, [said("before")]))
        await _limit(store, 8)

        for _ in range(3):
            # One group (they are queued together): small writes that fit, around big ones that cannot, of
            # both kinds (append-only, and with a session patch).
            outcomes = await asyncio.gather(
                store.append(a.id, [said("small 1")]),
                store.append(b.id, [said(BIG)]),
                store.append(a.id, [said("small 2")]),
                store.write(Write(b.id, [said(BIG)], session=SessionPatch(last_text="big"))),
                store.write(Write(a.id, [said("small 3")], session=SessionPatch(last_text="small"))),
                return_exceptions=True,
            )
            errors = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
            assert [outcomes.index(error) for error in errors] == [1, 3]
            for error in errors:
                assert isinstance(error, StoreError)
                assert "database or disk is full" in error.message
                assert "rollback" not in error.message and "savepoint" not in error.message
            acknowledged += [event for outcome in outcomes if isinstance(outcome, list) for event in outcome]

        assert store._writer.is_alive()
        assert await store.read_events(b.id) == []  # nothing of a failed write was kept
        assert (await store.get_session(b.id)).last_seq == 0
        assert (await store.get_session(a.id)).last_text == "small"

        await _limit(store, None)  # room again: the same writes go through
        acknowledged += await store.append(b.id, [said(BIG)])
        acknowledged += (await asyncio.gather(store.write(Write(a.id, [said("after")]))))[0]

    async with open_store(sqlite_url(tmp_path / "agentwatch.db")) as reopened:
        stored = [event for session in (a, b) for event in await reopened.read_events(session.id, limit=1000)]
    assert sorted(stored, key=lambda e: (e.session_id, e.seq)) == sorted(
        acknowledged, key=lambda e: (e.session_id, e.seq)
    )
    assert [event.seq for event in stored if event.session_id == a.id] == list(range(1, 12))
    assert [event.seq for event in stored if event.session_id == b.id] == [1]


async def test_a_commit_that_cannot_be_written_names_the_cause(tmp_path: Path) -> None:
    async with open_store(sqlite_url(tmp_path / "agentwatch.db")) as store:
        assert isinstance(store, SqliteStore)
        session = await store.create_session(SessionDraft(name="a", role="chat"))
        await _limit(store, 0)
        for _ in range(3):
            with pytest.raises(StoreError, match="database or disk is full"):
                await store.append(session.id, [said(BIG)])
        await _limit(store, None)
        [event] = await store.append(session.id, [said("fits")])
        assert event.seq == 1
