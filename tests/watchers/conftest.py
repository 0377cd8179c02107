"""Engines on a real SQLite store with scripted models: the runtime's fixtures, shared."""

from tests.runtime.conftest import open_engine, scripted, store_url

__all__ = ["open_engine", "scripted", "store_url"]
