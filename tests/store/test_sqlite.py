"""What only the SQLite backend does: its URL forms, options and pragmas."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentwatch.errors import StoreError
from agentwatch.events import NewEvent, UserMessage
from agentwatch.store import SessionDraft, open_store
from agentwatch.store.sqlite import SqliteStore


async def test_a_relative_url_creates_the_parent_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    async with open_store("sqlite:///.agentwatch/nested/agentwatch.db") as store:
        assert isinstance(store, SqliteStore)
        assert store.path == Path(".agentwatch/nested/agentwatch.db")
        await store.create_session(SessionDraft(name="nova", role="chat"))
        info = await store.info()
    assert info.path_bytes is not None
    assert info.path_bytes > 0


async def test_memory_store_reads_its_own_writes() -> None:
    async with open_store("sqlite://:memory:") as store:
        session = await store.create_session(SessionDraft(name="nova", role="chat"))
        [event] = await store.append(session.id, [NewEvent(UserMessage(text="hi"))])
        assert await store.read_events(session.id) == [event]
        assert (await store.info()).path_bytes is None


@pytest.mark.parametrize(("option", "level"), [("", 2), ("?synchronous=normal", 1), ("?synchronous=FULL", 2)])
async def test_writer_runs_in_wal_mode_with_the_chosen_synchronous_level(
    tmp_path: Path, option: str, level: int
) -> None:
    async with open_store(f"sqlite:///{tmp_path}/a.db{option}") as store:
        assert isinstance(store, SqliteStore)
        # The pragmas are per connection: ask the writer's own.
        assert await store._write(lambda tx: tx.fetch("PRAGMA synchronous")) == [(level,)]
        assert await store._write(lambda tx: tx.fetch("PRAGMA journal_mode")) == [("wal",)]
        assert await store._write(lambda tx: tx.fetch("PRAGMA foreign_keys")) == [(1,)]


async def test_writes_after_close_are_refused(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path}/a.db") as store:
        pass
    with pytest.raises(StoreError, match="is closed; open it again"):
        await store.create_session(SessionDraft(name="nova", role="chat"))
