"""The `ring` fixture: every contract test runs once on the memory ring and once on the Redis ring."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from agentwatch.live import DEFAULT_RING_SIZE, LiveRing

from .streams import BACKENDS, drop_streams, open_ring, unique_prefix

RingFactory = Callable[..., Awaitable[LiveRing]]


@pytest.fixture(params=[pytest.param(name, marks=[pytest.mark.redis] if name == "redis" else []) for name in BACKENDS])
def backend(request: pytest.FixtureRequest) -> str:
    """The backend under test; `redis` skips (or fails under CI=true) when the server is down."""
    name: str = request.param
    if name == "redis":
        request.getfixturevalue("redis_url")
    return name


@pytest.fixture
def backend_url(backend: str, request: pytest.FixtureRequest) -> str | None:
    """The Redis URL for the redis backend, None for memory."""
    return request.getfixturevalue("redis_url") if backend == "redis" else None


@pytest.fixture
async def open_rings(backend: str, backend_url: str | None) -> AsyncIterator[RingFactory]:
    """Open rings of the backend under test; Redis rings opened here share one key prefix, unique to the test."""
    prefix = unique_prefix()
    opened: list[LiveRing] = []

    async def factory(*, ring_size: int = DEFAULT_RING_SIZE) -> LiveRing:
        ring = await open_ring(backend, backend_url, ring_size=ring_size, key_prefix=prefix)
        opened.append(ring)
        return ring

    yield factory
    for ring in opened:
        await ring.close()
    if backend_url is not None:
        await drop_streams(backend_url, prefix)


@pytest.fixture
async def ring(open_rings: RingFactory) -> LiveRing:
    """A ring of the backend under test, with the default size."""
    return await open_rings()
