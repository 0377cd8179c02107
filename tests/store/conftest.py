"""The `store` fixture: every contract test runs once on SQLite and once on PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from agentwatch.store import Store, connect_store

from .databases import BACKENDS, postgres_schema, sqlite_url


@pytest.fixture(
    params=[pytest.param(name, marks=[pytest.mark.postgres] if name == "postgres" else []) for name in BACKENDS]
)
def backend(request: pytest.FixtureRequest) -> str:
    """The backend under test; `postgres` skips (or fails under CI=true) when the server is down."""
    name: str = request.param
    return name


@pytest.fixture
def store_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A URL of an empty store of the backend under test: a new SQLite file, or a new PostgreSQL schema."""
    if backend == "sqlite":
        yield sqlite_url(tmp_path / "agentwatch.db")
        return
    with postgres_schema(request.getfixturevalue("postgres_url")) as url:
        yield url


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    """An open, migrated, empty store."""
    opened = await connect_store(store_url)
    try:
        yield opened
    finally:
        await opened.close()
