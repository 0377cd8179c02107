"""Fixtures shared by the whole suite: the real PostgreSQL and Redis servers of this machine.

Where a server cannot be reached its tests skip with the reason, except under `CI=true`, where a missing
service fails them (CI must start it). Override the addresses with `AGENTWATCH_TEST_POSTGRES` and
`AGENTWATCH_TEST_REDIS`.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

POSTGRES_URL = os.environ.get("AGENTWATCH_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("AGENTWATCH_TEST_REDIS", "redis://127.0.0.1:6379/15")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _reachable(url: str) -> str | None:
    """None when something listens at the URL's host and port, else the reason it cannot be used."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port
    try:
        with socket.create_connection((host, port or 0), timeout=2):
            return None
    except OSError as exc:
        return f"{parts.scheme} at {host}:{port} is not reachable ({exc})"


def require_service(url: str, name: str) -> str:
    """Return `url` when its server answers; otherwise skip (or fail under CI=true) with the reason."""
    reason = _reachable(url)
    if reason is None:
        return url
    message = f"{name} tests need a running server: {reason}; set AGENTWATCH_TEST_{name.upper()} to another URL"
    if IN_CI:
        pytest.fail(f"CI=true and {message}", pytrace=False)
    pytest.skip(message)


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never read the developer's agentwatch settings or provider keys."""
    for name in list(os.environ):
        if name.startswith("AGENTWATCH_") and not name.startswith("AGENTWATCH_TEST_"):
            monkeypatch.delenv(name)
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """The URL of the real PostgreSQL server used by the tests."""
    return require_service(POSTGRES_URL, "postgres")


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """The URL of the real Redis server used by the tests (database 15, flushed by the tests that use it)."""
    return require_service(REDIS_URL, "redis")
