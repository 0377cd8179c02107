"""Read-tool fixtures: engines on a real SQLite store with scripted models, and the two-backend `store`."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agentwatch.runtime.engine import Engine
from agentwatch.runtime.roster import AgentDefinition
from tests.runtime.conftest import scripted
from tests.runtime.support import OpenEngine
from tests.store.conftest import backend, store, store_url

__all__ = ["backend", "open_engine", "scripted", "store", "store_url"]


@pytest.fixture
def open_engine(tmp_path: Path) -> OpenEngine:
    """`async with open_engine(role(...)) as engine:` on the test's own SQLite file.

    Extensions (observer agents) stay off: their sessions would show up in the listings under test.
    """
    no_extensions = {"extensions": []} if "extensions" in inspect.signature(Engine.open).parameters else {}

    @asynccontextmanager
    async def opener(*definitions: AgentDefinition, **kwargs: Any) -> AsyncIterator[Engine]:
        kwargs.setdefault("store", f"sqlite:///{tmp_path / 'agentwatch.db'}")
        async with Engine.open(
            agents_dir=tmp_path / "agents", root=tmp_path, definitions=definitions, **no_extensions, **kwargs
        ) as engine:
            yield engine

    return opener
