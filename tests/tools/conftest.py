"""Tool-contract fixtures: engines on a real store (SQLite, and PostgreSQL where the fuzz asks for it)."""

from __future__ import annotations

from tests.reads.conftest import open_engine
from tests.runtime.conftest import scripted
from tests.store.conftest import backend, store_url

__all__ = ["backend", "open_engine", "scripted", "store_url"]
