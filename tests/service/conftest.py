"""Engines on a real SQLite store in a temp directory, served by the real service app on a real socket."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agentwatch.runtime.engine import Engine
from agentwatch.runtime.roster import AgentDefinition
from tests.runtime.conftest import scripted, store_url  # the same fixtures as the runtime tests

__all__ = ["open_engine", "scripted", "store_url"]


@pytest.fixture
def open_engine(tmp_path: Path, store_url: str) -> Callable[..., Any]:
    """`async with open_engine(role(...), tools=[...]) as engine:` on the test's own store."""

    @asynccontextmanager
    async def opener(*definitions: AgentDefinition, **kwargs: Any) -> AsyncIterator[Engine]:
        kwargs.setdefault("store", store_url)
        kwargs.setdefault("extensions", [])
        async with Engine.open(
            agents_dir=tmp_path / "agents", root=tmp_path, definitions=definitions, **kwargs
        ) as engine:
            yield engine

    return opener
