"""Engines on a real store (SQLite, or PostgreSQL too with `url`) and scripted models: the runtime's fixtures."""

from tests.runtime.conftest import open_engine, scripted, store_url, url

__all__ = ["open_engine", "scripted", "store_url", "url"]
