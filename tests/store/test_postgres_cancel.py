"""PostgreSQL: a store call cancelled while it waits for a pooled connection ends cancelled, even when the pool's
wait took the cancellation in (Python 3.11's `asyncio.wait_for`, which the pool waits with, returns the result
when it comes at the same moment as a cancellation, and the cancellation is lost)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentwatch.store import SessionDraft, connect_store

from .databases import postgres_schema

pytestmark = pytest.mark.postgres


async def test_a_read_cancelled_while_the_pool_swallowed_it_ends_cancelled(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once: an engine's `close` waited forever for its maintenance, whose store read had been cancelled while it
    waited for a connection: the pool handed the connection over and the read went on as if not cancelled."""
    with postgres_schema(postgres_url) as url:
        store = await connect_store(url)
        try:
            session = await store.create_session(SessionDraft(name="nova", role="chat"))
            pool: Any = store._pool  # type: ignore[attr-defined]
            connection = pool.connection
            waiting = asyncio.Event()

            @contextlib.asynccontextmanager
            async def swallowing(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
                waiting.set()
                with contextlib.suppress(asyncio.CancelledError):  # as the pool's wait may
                    await asyncio.sleep(5)
                async with connection(*args, **kwargs) as given:
                    yield given

            monkeypatch.setattr(pool, "connection", swallowing)
            read = asyncio.ensure_future(store.get_session(session.id))
            await asyncio.wait_for(waiting.wait(), 5)
            read.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(read, 10)
        finally:
            monkeypatch.undo()
            await store.close()
