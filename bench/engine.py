"""Engine figures: what the engine adds around a turn, what an idle session costs, and many turns at once.

Every figure runs beside bare pydantic-ai (or bare records) doing the same work in the same process and the
same run. Both sides play the same script on the same `ScriptedModel`, whose step is chosen by how many
responses the conversation holds, so every turn (a fresh session or a fresh run) plays the same steps.

- `engine.turn`: one turn of 11 model requests, 10 of them streaming a sentence and calling a cheap tool, the
  last streaming the answer, run by the engine on SQLite (WAL, `synchronous=NORMAL`) against
  `pydantic_ai.Agent.iter` over the same model and the same tool function, with every stream event consumed
  and nothing stored.
- `engine.memory`: what a session created through the engine, with its driver alive, adds to the Python heap,
  against the `SessionRecord` objects of as many sessions.
- `engine.concurrent`: many short turns at once on one event loop: the wall time and the longest stall of the
  loop (a ticker that sleeps 5 ms notes how late it wakes up), against as many bare pydantic-ai runs at once.

The engines open with no extensions: the figures are the engine itself (store, live ring, session drivers).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import resource
import time
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pydantic_ai import Agent
from pydantic_ai.messages import ModelRequest, ToolReturnPart

from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import (
    CallTool,
    Reply,
    ScriptedModel,
    ScriptStep,
    register_scripted_model,
    unregister_scripted_model,
)
from agentwatch.runtime.roster import AgentDefinition
from agentwatch.store import SessionRecord
from bench._harness import FULL, QUICK, TINY, Context, Result, Sizes, Target, percentile

__all__ = ["concurrent_turns", "idle_memory", "turn_overhead"]

_INSTRUCTIONS: Final = "You keep the team's notes. Look up what you need, then answer in a few sentences."
_PROMPT: Final = "What do the notes say about the release?"
_TOOL_CALLS: Final = 10
_STALL_TICK_S: Final = 0.005
_WAIT_S: Final = 300.0  # a turn that takes longer than this is a failure, not a sample
_BATCH: Final = 200  # sessions created (or read) at once, so the store can group their commits


@dataclass(frozen=True, slots=True)
class _EngineSizes:
    """How much work the engine benchmarks do at each size."""

    warm_up_turns: int
    """Turns run each way before timing."""
    turns: int
    """Timed turns each way (alternating one by one)."""
    idle_sessions: int
    """Sessions held by the engine for the memory figure."""
    concurrent_sessions: int
    """Sessions whose turns run at once."""
    concurrent_rounds: int
    """Times the concurrent run is repeated each way (ABBA order)."""


_ENGINE_SIZES: Final[dict[Sizes, _EngineSizes]] = {
    FULL: _EngineSizes(warm_up_turns=5, turns=50, idle_sessions=10_000, concurrent_sessions=1_000, concurrent_rounds=2),
    QUICK: _EngineSizes(warm_up_turns=3, turns=10, idle_sessions=1_000, concurrent_sessions=100, concurrent_rounds=1),
    TINY: _EngineSizes(warm_up_turns=1, turns=2, idle_sessions=20, concurrent_sessions=5, concurrent_rounds=1),
}


def _engine_sizes(ctx: Context) -> _EngineSizes:
    return _ENGINE_SIZES.get(ctx.sizes, _ENGINE_SIZES[FULL])


def lookup(key: str) -> str:
    """Look a key up in the team's notes."""
    # Cheap on purpose: the figure is what runs around the tool, not the tool.
    return f"The note filed under {key} says the step is done and checked."


def _turn_script() -> list[ScriptStep]:
    """Ten requests that each stream a sentence and call `lookup`, then one that streams the answer."""
    steps: list[ScriptStep] = [
        [Reply(f"Let me read note {index} before going on."), CallTool("lookup", {"key": f"note-{index}"})]
        for index in range(_TOOL_CALLS)
    ]
    steps.append(
        Reply(
            "The notes agree: every step of the release is done and checked, the changelog is written, the "
            "version is tagged, and nothing is left but to announce it to the people who asked for it."
        )
    )
    return steps


def _short_script() -> list[ScriptStep]:
    """A short turn: a sentence and a tool call, then a streamed answer."""
    return [
        [Reply("Let me check the note first."), CallTool("lookup", {"key": "plan"})],
        Reply("The plan is done and nothing is left to do."),
    ]


# -- the two sides ------------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _engine(ctx: Context, label: str, script: Sequence[ScriptStep]) -> AsyncIterator[tuple[Engine, str]]:
    """An engine on its own SQLite file (WAL, synchronous=NORMAL) with one role playing `script`; yields the
    engine and the role's name."""
    root = ctx.workdir / f"engine-{label}"
    root.mkdir(parents=True, exist_ok=True)
    model_name = f"bench-{label}-{uuid.uuid4().hex[:8]}"
    register_scripted_model(model_name, ScriptedModel(script))
    definition = AgentDefinition(
        name="notes", model=f"scripted:{model_name}", instructions=_INSTRUCTIONS, tools=("lookup",)
    )
    try:
        async with Engine.open(
            f"sqlite:///{root / 'agentwatch.db'}?synchronous=normal",
            agents_dir=root / "agents",
            root=root,
            definitions=[definition],
            tools=[lookup],
            extensions=[],
        ) as engine:
            yield engine, definition.name
    finally:
        unregister_scripted_model(model_name)


def _bare_agent(script: Sequence[ScriptStep]) -> Agent[None, str]:
    """Bare pydantic-ai on the same script and the same tool function, built once (as a program would)."""
    return Agent(ScriptedModel(script).model(), instructions=_INSTRUCTIONS, tools=[lookup])


async def _bare_turn(agent: Agent[None, str]) -> int:
    """One run of `agent`, streaming every model request and consuming every event; returns the tool returns
    the run made (to check that it played the whole script)."""
    async with agent.iter(_PROMPT) as run:
        async for node in run:
            if Agent.is_model_request_node(node):
                async with node.stream(run.ctx) as stream:
                    async for _event in stream:
                        pass
        return sum(
            isinstance(part, ToolReturnPart)
            for message in run.all_messages()
            if isinstance(message, ModelRequest)
            for part in message.parts
        )


async def _engine_turn(engine: Engine, role: str) -> SessionRecord:
    """One turn on a fresh session: create it, give it the prompt, wait until it settles."""
    session = await engine.create(role)
    await engine.enqueue(session.id, _PROMPT)
    settled, timed_out = await engine.wait(session.id, _WAIT_S)
    if timed_out or settled.status != "completed":
        raise RuntimeError(f"the engine's turn ended {settled.status!r} (timed out: {timed_out})")
    return settled


async def _check_engine_turn(engine: Engine, session: SessionRecord, calls: int) -> None:
    events = await engine.store.read_events(session.id, limit=10_000)
    results = sum(event.type == "tool.result" for event in events)
    if results != calls:
        raise RuntimeError(f"the engine's turn made {results} tool call(s); the script has {calls}")


# -- overhead per turn --------------------------------------------------------------------------------------


async def turn_overhead(ctx: Context) -> list[Result]:
    """One 10-tool-call turn through the engine on SQLite against the same turn in bare pydantic-ai."""
    sizes = _engine_sizes(ctx)
    script = _turn_script()
    agent = _bare_agent(script)
    ctx.say(f"engine turn: {sizes.turns} turns of {_TOOL_CALLS} tool calls each way, alternating")
    engine_ms: list[float] = []
    bare_ms: list[float] = []
    async with _engine(ctx, "turn", script) as (engine, role):

        async def engine_side() -> None:
            start = time.perf_counter()
            await _engine_turn(engine, role)
            engine_ms.append((time.perf_counter() - start) * 1000)

        async def bare_side() -> None:
            start = time.perf_counter()
            calls = await _bare_turn(agent)
            bare_ms.append((time.perf_counter() - start) * 1000)
            if calls != _TOOL_CALLS:
                raise RuntimeError(f"the bare run made {calls} tool call(s); the script has {_TOOL_CALLS}")

        for _ in range(sizes.warm_up_turns):
            await _check_engine_turn(engine, await _engine_turn(engine, role), _TOOL_CALLS)
            await bare_side()
        engine_ms.clear()
        bare_ms.clear()
        await _alternate(sizes.turns, engine_side, bare_side)

    note = (
        f"p50 of {len(engine_ms)} turns each way, alternating ABBA; a turn: 11 model requests, 10 streaming a "
        f"sentence and calling one cheap tool, the last streaming the answer; engine: create a session, enqueue, "
        f"wait until settled, on SQLite WAL synchronous=NORMAL (mean {_mean(engine_ms):.1f} ms); baseline: "
        f"pydantic_ai.Agent.iter on the same model and tool, every model request streamed and every event "
        f"consumed, nothing stored (mean {_mean(bare_ms):.1f} ms)"
    )
    return [
        Result(
            "engine.turn.sqlite.p50",
            "ms",
            percentile(engine_ms, 50),
            percentile(bare_ms, 50),
            "lower",
            Target("ratio", "<=", 1.3),
            note,
        )
    ]


async def _alternate(count: int, first: Callable[[], Awaitable[None]], second: Callable[[], Awaitable[None]]) -> None:
    """Run `first` and `second` `count` times each, alternating which goes first (ABBA)."""
    for index in range(count):
        if index % 2 == 0:
            await first()
            await second()
        else:
            await second()
            await first()


def _mean(samples: Sequence[float]) -> float:
    return sum(samples) / len(samples) if samples else 0.0


# -- memory per idle session --------------------------------------------------------------------------------


def _rss_bytes() -> int:
    """The resident set size now (Linux `/proc`), or 0 where it cannot be read."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0
    return pages * resource.getpagesize()


class _HeapGrowth:
    """Python heap (tracemalloc) and RSS growth over a block, after a full collection at both ends."""

    def __init__(self) -> None:
        self.heap = 0
        self.rss = 0
        self._heap_before = 0
        self._rss_before = 0
        self._was_tracing = False

    def __enter__(self) -> _HeapGrowth:
        gc.collect()
        self._was_tracing = tracemalloc.is_tracing()
        tracemalloc.start()
        self._heap_before = tracemalloc.get_traced_memory()[0]
        self._rss_before = _rss_bytes()
        return self

    def __exit__(self, *exc: object) -> None:
        gc.collect()
        self.heap = tracemalloc.get_traced_memory()[0] - self._heap_before
        self.rss = _rss_bytes() - self._rss_before
        if not self._was_tracing:
            tracemalloc.stop()


async def idle_memory(ctx: Context) -> list[Result]:
    """Sessions created through the engine, each with its driver alive, against their bare records."""
    count = _engine_sizes(ctx).idle_sessions
    ctx.say(f"engine memory: {count:,} idle sessions with their drivers, against {count:,} SessionRecords")
    async with _engine(ctx, "memory", _short_script()) as (engine, role):
        # Warm-up: the first sessions and drivers pay for imports, caches and prepared statements.
        for _ in range(20):
            await engine.driver((await engine.create(role)).id)

        with _HeapGrowth() as held:
            session_ids: list[str] = []
            for start in range(0, count, _BATCH):
                batch = min(_BATCH, count - start)
                created = await asyncio.gather(*(engine.create(role) for _ in range(batch)))
                session_ids.extend(session.id for session in created)
            for session_id in session_ids:
                await engine.driver(session_id)

        # The baseline: the records of the same sessions, as the store returns them, held in a list.
        with _HeapGrowth() as records_held:
            records: list[SessionRecord] = []
            for start in range(0, count, _BATCH):
                chunk = session_ids[start : start + _BATCH]
                records.extend(await asyncio.gather(*(engine.store.get_session(s) for s in chunk)))
        if len(records) != count:
            raise RuntimeError(f"read {len(records)} records back for {count} sessions")
        del records

    note = (
        f"tracemalloc growth of the Python heap per session over {count:,} sessions made with engine.create, "
        f"each with its driver started (engine.driver) and idle; RSS grew {held.rss / count:,.0f} B/session; "
        f"baseline: the {count:,} SessionRecords read back from the store, held in a list "
        f"(RSS {records_held.rss / count:,.0f} B/session)"
    )
    return [
        Result(
            "engine.memory.idle_session",
            "bytes/session",
            held.heap / count,
            records_held.heap / count,
            "lower",
            None,
            note,
        )
    ]


# -- many turns at once -------------------------------------------------------------------------------------


class _StallMeter:
    """A task that sleeps `_STALL_TICK_S` over and over and notes the latest it ever woke up."""

    def __init__(self) -> None:
        self.worst = 0.0
        self.ticks = 0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        while True:
            expected = time.perf_counter() + _STALL_TICK_S
            await asyncio.sleep(_STALL_TICK_S)
            self.worst = max(self.worst, time.perf_counter() - expected)
            self.ticks += 1

    async def __aenter__(self) -> _StallMeter:
        self._task = asyncio.create_task(self._tick())
        await asyncio.sleep(0)  # the ticker is running before the work starts
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


@dataclass(slots=True)
class _Run:
    """Wall time and worst stall of one concurrent run, in milliseconds."""

    wall_ms: float
    stall_ms: float


async def concurrent_turns(ctx: Context) -> list[Result]:
    """Many short turns at once through the engine against as many bare pydantic-ai runs at once."""
    sizes = _engine_sizes(ctx)
    count = sizes.concurrent_sessions
    script = _short_script()
    agent = _bare_agent(script)
    ctx.say(f"engine concurrent: {count:,} short turns at once x {sizes.concurrent_rounds} round(s), each way")
    engine_runs: list[_Run] = []
    bare_runs: list[_Run] = []
    async with _engine(ctx, "concurrent", script) as (engine, role):

        async def one_session(session_id: str) -> None:
            await engine.enqueue(session_id, _PROMPT)
            settled, timed_out = await engine.wait(session_id, _WAIT_S)
            if timed_out or settled.status != "completed":
                raise RuntimeError(f"a concurrent turn ended {settled.status!r} (timed out: {timed_out})")

        async def engine_side() -> None:
            # The sessions exist before the clock starts: the figure is running their turns.
            session_ids: list[str] = []
            for start in range(0, count, _BATCH):
                created = await asyncio.gather(*(engine.create(role) for _ in range(min(_BATCH, count - start))))
                session_ids.extend(session.id for session in created)
            async with _StallMeter() as meter:
                began = time.perf_counter()
                await asyncio.gather(*(one_session(session_id) for session_id in session_ids))
                wall = time.perf_counter() - began
            engine_runs.append(_Run(wall * 1000, meter.worst * 1000))

        async def bare_side() -> None:
            async with _StallMeter() as meter:
                began = time.perf_counter()
                calls = await asyncio.gather(*(_bare_turn(agent) for _ in range(count)))
                wall = time.perf_counter() - began
            if any(made != 1 for made in calls):
                raise RuntimeError("a bare run did not play the whole script")
            bare_runs.append(_Run(wall * 1000, meter.worst * 1000))

        for _ in range(sizes.warm_up_turns):
            await _engine_turn(engine, role)
            await _bare_turn(agent)
        await _alternate(sizes.concurrent_rounds, bare_side, engine_side)

    rounds = len(engine_runs)
    how = (
        f"{count:,} sessions, each running one short turn (two model requests streaming a sentence each, one "
        f"tool call) at once on one event loop, {rounds} round(s) each way"
    )
    wall_note = (
        f"mean wall time from the first enqueue to the last session settled; {how}; engine on SQLite WAL "
        f"synchronous=NORMAL, sessions created beforehand; baseline: as many bare pydantic-ai runs at once "
        f"(Agent.iter, every event streamed and consumed)"
    )
    stall_note = (
        f"the longest an event-loop ticker sleeping {_STALL_TICK_S * 1000:g} ms woke up late, worst of the "
        f"rounds; {how}; baseline: the same ticker beside as many bare pydantic-ai runs at once"
    )
    return [
        Result(
            "engine.concurrent.sqlite.wall",
            "ms",
            _mean([run.wall_ms for run in engine_runs]),
            _mean([run.wall_ms for run in bare_runs]),
            "lower",
            None,
            wall_note,
        ),
        Result(
            "engine.concurrent.sqlite.max_stall",
            "ms",
            max(run.stall_ms for run in engine_runs),
            max(run.stall_ms for run in bare_runs),
            "lower",
            Target("value", "<=", 50.0),
            stall_note,
        ),
    ]
