"""Following a session live: every event after a cursor as it happens, with no gap and no repeat.

Durable events come from the store; when the live ring is shared with the writer (Redis, or the memory ring
of the same process), events arrive from it as they are emitted, deltas included. A subscriber that lags, or
a reader that reconnects with its last cursor, catches up from the store and goes on exactly where it was.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from agentwatch.events import Event, StreamCursor
from agentwatch.live import Lagged, LiveRing
from agentwatch.store import Store

__all__ = ["follow"]

_PAGE = 500


async def follow(
    store: Store,
    ring: LiveRing | None,
    session_id: str,
    *,
    after: StreamCursor | None = None,
    poll_seconds: float = 0.5,
) -> AsyncIterator[Event]:
    """Yield the session's events after `after` (from its start when None), forever.

    With `ring=None` (the writer runs in another process and the ring is not shared), durable events are
    polled from the store every `poll_seconds`.
    """
    cursor = after or StreamCursor(session_id, 0)
    while True:
        async for event in _catch_up(store, session_id, cursor):
            cursor = event.cursor
            yield event
        if ring is None:
            await asyncio.sleep(poll_seconds)
            continue
        subscription = await ring.subscribe(session_id, after=cursor)
        try:
            async for event in subscription:
                if event.cursor <= cursor:
                    continue  # already read from the store
                cursor = event.cursor
                yield event
        except Lagged:
            pass  # catch up from the store from `cursor`, then subscribe again
        finally:
            await subscription.close()


async def _catch_up(store: Store, session_id: str, cursor: StreamCursor) -> AsyncIterator[Event]:
    after_seq = cursor.seq
    while True:
        page = await store.read_events(session_id, after_seq=after_seq, limit=_PAGE)
        for event in page:
            yield event
        if len(page) < _PAGE:
            return
        after_seq = page[-1].seq
