"""CLI tests reuse the runtime's engine fixtures."""

from tests.runtime.conftest import open_engine, scripted, store_url

__all__ = ["open_engine", "scripted", "store_url"]
