"""Engines on a real SQLite store in a temp directory, with roles on scripted models."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import ScriptedModel, register_scripted_model, unregister_scripted_model
from agentwatch.runtime.roster import AgentDefinition
from tests.runtime.support import OpenEngine, Scripted
from tests.store.databases import postgres_schema


@pytest.fixture
def scripted() -> Iterator[Scripted]:
    """Register scripted models by name for one test; returns the model ref (`scripted:<name>`)."""
    names: list[str] = []

    def register(name: str, model: ScriptedModel) -> str:
        register_scripted_model(name, model)
        names.append(name)
        return f"scripted:{name}"

    yield register
    for name in names:
        unregister_scripted_model(name)


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'agentwatch.db'}"


@pytest.fixture
def open_engine(tmp_path: Path, store_url: str) -> OpenEngine:
    """`async with open_engine(role(...), tools=[...]) as engine:` on the test's own store."""

    @asynccontextmanager
    async def opener(*definitions: AgentDefinition, **kwargs: Any) -> AsyncIterator[Engine]:
        kwargs.setdefault("store", store_url)
        async with Engine.open(
            agents_dir=tmp_path / "agents", root=tmp_path, definitions=definitions, **kwargs
        ) as engine:
            yield engine

    return opener


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A new store: a SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'aw.db'}"
        return
    with postgres_schema(request.getfixturevalue("postgres_url")) as schema_url:
        yield schema_url
