"""`cancel_and_wait`: the readers of a ring and the pumps of an attach end even when something under them
swallowed a cancellation (redis-py's `wait_for` on Python 3.11 can), and their failures are not left
unretrieved."""

from __future__ import annotations

import asyncio
import contextlib

from agentwatch.live import cancel_and_wait


async def _swallows_one_cancellation(ended: list[str]) -> None:
    with contextlib.suppress(asyncio.CancelledError):  # as a client library that swallowed it would: it goes on
        await asyncio.sleep(60)
    try:
        await asyncio.sleep(60)
    finally:
        ended.append("ended")


async def test_a_task_that_swallowed_a_cancellation_is_cancelled_again_until_it_ends() -> None:
    ended: list[str] = []
    task = asyncio.create_task(_swallows_one_cancellation(ended))
    await asyncio.sleep(0)
    once = asyncio.create_task(_swallows_one_cancellation([]))
    await asyncio.sleep(0)
    once.cancel()  # one cancellation, as `task.cancel(); await gather(task)` gave: it does not end
    await asyncio.sleep(0.3)
    assert not once.done()

    await asyncio.wait_for(cancel_and_wait([task, once]), 5)
    assert ended == ["ended"] and task.cancelled() and once.cancelled()


async def test_a_task_that_failed_is_waited_for_without_raising() -> None:
    async def fails() -> None:
        raise ValueError("the pump broke")

    failed = asyncio.create_task(fails())
    await asyncio.sleep(0)
    await cancel_and_wait([failed])  # (its failure is retrieved: no "never retrieved" report)
    assert isinstance(failed.exception(), ValueError)
