"""A plain `def` tool runs in a worker thread: a slow one never pauses another session's stream."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from dataclasses import dataclass, field

from agentwatch.events import Event
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.runtime.thread_observer import ReplaySnapshot
from agentwatch.tools import Caller, function_tool
from agentwatch.tools._workers import MAX_WORKERS
from tests.runtime.support import OpenEngine, Scripted, role

NAP_SECONDS = 2.0
CHUNK_DELAY = 0.01


@dataclass
class Clock:
    """Records when each event of each session reaches an observer."""

    seen: list[tuple[float, str, str]] = field(default_factory=list)

    def on_event(self, thread_id: str, event: Event) -> None:
        self.seen.append((time.monotonic(), thread_id, event.type))

    def on_subscribe(self, thread_id: str, request: object, snapshot: ReplaySnapshot) -> None:
        pass


async def test_a_sleeping_sync_tool_does_not_stall_another_sessions_stream(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    nap: dict[str, float | int] = {}

    def doze() -> str:
        """Sleep, as a blocking tool would."""
        nap["start"], nap["thread"] = time.monotonic(), threading.get_ident()
        time.sleep(NAP_SECONDS)
        nap["end"] = time.monotonic()
        return "rested"

    words = " ".join(f"w{i}" for i in range(320))  # ~3.2 s of deltas at CHUNK_DELAY
    talker = scripted("talker", ScriptedModel([Reply(words)], chunk_delay=CHUNK_DELAY))
    sleeper = scripted("sleeper", ScriptedModel([CallTool("doze"), Reply("awake")]))
    clock = Clock()
    async with open_engine(
        role("talker", talker), role("sleeper", sleeper, tools=("doze",)), tools=[function_tool(doze)]
    ) as engine:
        engine.start_with_observer(lambda _thread_id: clock)
        talking = await engine.create("talker")
        sleeping = await engine.create("sleeper")
        await engine.enqueue(talking.id, "talk")
        await asyncio.sleep(0.3)
        await engine.enqueue(sleeping.id, "sleep")
        await engine.wait(sleeping.id, 30)
        await engine.wait(talking.id, 30)

    assert nap["thread"] != threading.get_ident(), "the sync tool ran on the event loop's thread"
    during = [at for at, thread, _ in clock.seen if thread == talking.id and nap["start"] <= at <= nap["end"]]
    assert len(during) > 50, "the talker did not stream while the tool slept; the test shows nothing"
    gaps = [b - a for a, b in itertools.pairwise(during)]
    longest = max(gaps)
    print(f"longest gap between the talker's events while a sync tool slept {NAP_SECONDS} s: {longest * 1000:.1f} ms")
    assert longest < 0.5, f"another session stalled {longest:.2f} s while a sync tool slept"


async def test_sync_tools_that_finish_together_resume_a_few_per_loop_turn() -> None:
    """Outcomes of many worker threads that finish while the loop is busy do not all wake their callers in the
    same loop turn: they resume a chunk per turn, so the turns they drive do not move in step."""
    calls = 48
    assert calls <= MAX_WORKERS  # every call in a thread at once
    loop = asyncio.get_running_loop()
    gate = threading.Event()
    waiting = itertools.count(1)
    in_threads = [0]

    def wait_for_gate() -> str:
        """Block until the test opens the gate."""
        in_threads[0] = next(waiting)
        gate.wait(10)
        return "through"

    tool = function_tool(wait_for_gate)
    loop_turn = [0]
    turns_seen: list[int] = []
    ticking = True

    def tick() -> None:  # one call a loop turn: counts them
        loop_turn[0] += 1
        if ticking:
            loop.call_soon(tick)

    async def call() -> None:
        assert await tool.handler(None, Caller(), {}) == "through"
        turns_seen.append(loop_turn[0])

    tasks = [asyncio.ensure_future(call()) for _ in range(calls)]
    while in_threads[0] < calls:
        await asyncio.sleep(0.01)
    gate.set()
    time.sleep(0.2)  # the loop is busy while every thread finishes: their outcomes are all ready at once
    loop.call_soon(tick)
    await asyncio.gather(*tasks)
    ticking = False
    per_turn = max(turns_seen.count(turn) for turn in set(turns_seen))
    assert len(turns_seen) == calls
    assert per_turn <= 16, f"{per_turn} callers resumed in one loop turn"
