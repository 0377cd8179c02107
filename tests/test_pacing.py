"""Outcomes finished on other threads reach their callers a chunk per event-loop turn, the chunk sized from what
a woken caller costs the loop: a group of hundreds never resumes all its callers in one loop turn."""

from __future__ import annotations

import asyncio
import gc
import itertools
import threading
import time
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agentwatch.pacing import _FIRST_CHUNK, _INLINE_BUDGET_S, _MAX_CHUNK, _TURN_BUDGET_S, Mailbox, Mailboxes


@dataclass(eq=False)
class Job:
    """A finished piece of work, as a thread posts it: its caller's future and its value."""

    future: asyncio.Future[Any]
    value: int

    def deliver(self) -> None:
        self.future.set_result(self.value)


class LoopTurns:
    """Numbers the event loop's turns: a callback that runs once a turn and counts."""

    def __init__(self) -> None:
        self.turn = 0
        self._running = True

    def start(self) -> None:
        self._tick()

    def _tick(self) -> None:
        self.turn += 1
        if self._running:
            asyncio.get_running_loop().call_soon(self._tick)

    def stop(self) -> None:
        self._running = False


def finished(count: int) -> list[Job]:
    loop = asyncio.get_running_loop()
    return [Job(loop.create_future(), index) for index in range(count)]


def burn(seconds: float) -> None:
    """Keep the loop's thread busy for `seconds` of its CPU time (a caller's step of Python work)."""
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


async def post_from_a_thread(
    mailbox: Mailbox, jobs: list[Job], turns: LoopTurns, caller: Callable[[Job], Awaitable[None]]
) -> None:
    """Start a caller per job, post every job's outcome at once from another thread (as the writer does after a
    group commit), and wait for the callers, counting loop turns meanwhile."""
    callers = [asyncio.ensure_future(caller(job)) for job in jobs]
    await asyncio.sleep(0)
    turns.start()
    poster = threading.Thread(target=mailbox.post, args=(jobs,))
    poster.start()
    poster.join()
    await asyncio.gather(*callers)
    turns.stop()


async def woken_per_turn(count: int, cost: float) -> list[int]:
    """Post `count` outcomes at once from another thread (as the writer does after a group commit); each
    caller spends `cost` seconds of CPU once woken. Returns how many callers ran in each loop turn, in order."""
    mailbox = Mailbox(asyncio.get_running_loop())
    jobs = finished(count)
    turns = LoopTurns()
    woke: Counter[int] = Counter()

    async def caller(job: Job) -> None:
        assert await job.future == jobs.index(job)
        woke[turns.turn] += 1
        burn(cost)

    await post_from_a_thread(mailbox, jobs, turns, caller)
    return [woke[turn] for turn in sorted(woke)]


async def test_a_large_group_wakes_its_callers_a_chunk_per_loop_turn() -> None:
    per_turn = await woken_per_turn(300, 0.0)
    assert sum(per_turn) == 300
    assert per_turn[0] == _FIRST_CHUNK
    assert max(per_turn) <= _MAX_CHUNK
    # Cheap callers: the chunk grows, one caller a turn at most, up to the most.
    assert all(later <= earlier + 1 for earlier, later in itertools.pairwise(per_turn))
    assert _MAX_CHUNK in per_turn


async def test_dear_callers_get_smaller_chunks() -> None:
    cost = _TURN_BUDGET_S / 2  # two such callers fill a loop turn's budget
    per_turn = await woken_per_turn(40, cost)
    assert sum(per_turn) == 40
    assert per_turn[0] == _FIRST_CHUNK  # nothing known yet
    # Once a turn was measured, a chunk holds about what fits in the budget.
    assert max(per_turn[2:]) <= 2, per_turn


async def test_groups_that_fit_in_one_chunk_are_measured_too() -> None:
    """Small groups one after another, each handed out in one go: the chunk still shrinks for dear callers."""
    mailbox = Mailbox(asyncio.get_running_loop())
    turns = LoopTurns()
    turns.start()
    per_group: list[list[int]] = []
    for _ in range(6):
        jobs = finished(_FIRST_CHUNK)
        woke: Counter[int] = Counter()

        async def caller(job: Job, woke: Counter[int] = woke) -> None:
            await job.future
            woke[turns.turn] += 1
            burn(_TURN_BUDGET_S / 2)

        callers = [asyncio.ensure_future(caller(job)) for job in jobs]
        await asyncio.sleep(0)
        mailbox.post(jobs)
        await asyncio.gather(*callers)
        await asyncio.sleep(0)  # the turn after the last chunk is measured
        per_group.append([woke[turn] for turn in sorted(woke)])
    turns.stop()
    assert per_group[0] == [_FIRST_CHUNK]  # nothing known yet: the whole group at once
    assert all(max(woken) <= 2 for woken in per_group[2:]), per_group


async def test_callers_still_running_leave_less_room_for_the_next_chunk() -> None:
    """Woken callers that go on for many loop turns (a model's stream takes a loop turn per event): the callers
    woken later get only the room the ones in flight leave in a turn, so a turn holds about the budget's worth
    of their steps rather than a full chunk more every turn."""
    steps, cost = 30, _TURN_BUDGET_S / 20  # twenty such steps fill a loop turn's budget
    mailbox = Mailbox(asyncio.get_running_loop())
    jobs = finished(200)
    turns = LoopTurns()
    ran: Counter[int] = Counter()

    async def caller(job: Job) -> None:
        await job.future
        for _ in range(steps):
            ran[turns.turn] += 1
            burn(cost)
            await asyncio.sleep(0)

    await post_from_a_thread(mailbox, jobs, turns, caller)
    per_turn = [ran[turn] for turn in sorted(ran)]
    assert sum(per_turn) == 200 * steps
    # The budget's twenty steps, and a chunk at most beyond them while the first measurements come in.
    assert max(per_turn) <= 20 + _MAX_CHUNK, per_turn


async def test_outcomes_known_on_the_loop_are_handed_back_in_chunks_too() -> None:
    """Callers whose work ran on the loop's own thread (reads run there) resume a chunk per loop turn, as if a
    thread had posted their outcomes, not all in the turn after theirs."""
    mailbox = Mailbox(asyncio.get_running_loop())
    turns = LoopTurns()
    woke: Counter[int] = Counter()

    async def caller(index: int) -> None:
        assert await mailbox.hand_back(index) == index
        woke[turns.turn] += 1

    turns.start()
    await asyncio.gather(*(caller(index) for index in range(100)))
    turns.stop()
    per_turn = [woke[turn] for turn in sorted(woke)]
    assert sum(per_turn) == 100
    assert per_turn[0] == _FIRST_CHUNK
    assert max(per_turn) <= _MAX_CHUNK


async def test_work_on_the_loop_has_a_budget_per_loop_turn() -> None:
    mailbox = Mailbox(asyncio.get_running_loop())
    assert mailbox.inline_room()
    mailbox.spent_inline(_INLINE_BUDGET_S / 2)
    assert mailbox.inline_room()
    mailbox.spent_inline(_INLINE_BUDGET_S / 2)
    assert not mailbox.inline_room()  # spent, for the rest of this loop turn
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert mailbox.inline_room()  # a later turn has its own


async def test_the_loop_has_nothing_else_ready_only_when_no_callback_waits() -> None:
    loop = asyncio.get_running_loop()
    mailbox = Mailbox(loop)
    await asyncio.sleep(0.001)  # whatever the test's start scheduled has run
    assert mailbox.nothing_else_ready()
    handle = loop.call_soon(lambda: None)
    assert not mailbox.nothing_else_ready()
    handle.cancel()
    await asyncio.sleep(0)
    assert mailbox.nothing_else_ready()
    other = asyncio.ensure_future(asyncio.sleep(0))
    assert not mailbox.nothing_else_ready()  # a task about to start is ready too
    await other
    await asyncio.sleep(0.001)
    assert await mailbox.hand_back(7) == 7
    # The mailbox measures the loop turn its chunk woke this caller in: bookkeeping, not another caller.
    assert mailbox.nothing_else_ready()
    await asyncio.sleep(0)
    assert mailbox.nothing_else_ready()
    other_source = Mailbox(loop)  # (the sync tools' mailbox beside the store's, say)
    assert await other_source.hand_back(8) == 8
    assert mailbox.nothing_else_ready()  # whichever mailbox measures
    mailbox.spent_inline(0.0001)  # work done on the loop: the next loop turn starts its budget afresh
    assert mailbox.nothing_else_ready()
    await asyncio.sleep(0)
    assert mailbox.nothing_else_ready()


def test_a_loop_of_another_kind_never_counts_as_idle() -> None:
    class OtherLoop:  # an event loop implementation without asyncio's queue of ready callbacks
        pass

    loop = OtherLoop()
    assert not Mailbox(loop).nothing_else_ready()  # type: ignore[arg-type]


def test_a_registry_keeps_one_mailbox_per_loop_and_forgets_closed_loops() -> None:
    mailboxes, others = Mailboxes(), Mailboxes()
    first, second = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        mailbox = mailboxes.of(first)
        assert mailboxes.of(first) is mailbox
        assert mailboxes.of(second) is not mailbox
        assert mailboxes.of(first) is mailbox  # not only the latest loop's
        assert others.of(first) is not mailbox  # each source its own (see `Mailboxes`)
    finally:
        first.close()
        second.close()
    gone = weakref.ref(mailbox)
    del mailbox, first
    mailboxes.of(second)  # the latest call's loop is the one remembered
    others.of(second)
    gc.collect()
    assert gone() is None  # nothing kept the closed loop's mailbox alive
