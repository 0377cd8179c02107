"""Engine figures: what a watched, durable turn costs beside the same turn in bare pydantic-ai.

Both sides play the same script (see `bench._turns`): the engine on the project's `ScriptedModel`, the default
SQLite store and a ThreadObserver consuming every event; bare pydantic-ai with `Agent.iter` over a FunctionModel
streaming the same chunks, every stream event consumed, nothing stored. Every figure is a ratio of the two
measured in the same run, turn by turn or round by round in alternating order, as medians, with the CPU time
(every thread of the process) beside the wall time.

- `engine.turn`: one 10-tool-call turn on a fresh session, at `synchronous=FULL` (the default, the headline)
  and at `synchronous=NORMAL` beside it; the floor beside them (the bare side made durable by hand: what
  durability alone costs, and what the engine adds to it); the store writes (commits) per turn; the database
  file's growth per turn against the payload it stored.
- `engine.history`: turn 20 / turn 2 of one session, against the same ratio of a bare chat passing its
  history back.
- `engine.long_chat`: turn N / turn 10 of one long chat of 1-tool turns (N = 100, or 1,000 with `--long`),
  against the same ratio of a bare chat.
- `engine.memory`: what a session created through the engine, with its driver alive, adds to the Python heap.
- `engine.concurrent`: 1,000 short turns at once on one event loop: the wall time and the longest stall.
- `engine.tracing`: the `engine.turn` turn with tracing on (OpenTelemetry spans of the turn, its requests and
  tool calls) against the same engine with it off.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import resource
import sqlite3
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pydantic_ai.messages import ModelMessage

from agentwatch.events import PAYLOAD_ADAPTER
from agentwatch.runtime.full_collections import collect_now
from bench._harness import FULL, QUICK, TINY, Context, Result, Sizes, Target, percentile, rotations
from bench._turns import (
    TOOL_CALLS,
    BareChat,
    DurableByHand,
    EngineSide,
    bare_agent,
    bare_run,
    engine_side,
    one_tool_turn,
    ten_tool_turn,
    tool_returns,
)

__all__ = ["concurrent_turns", "history_growth", "idle_memory", "long_chat", "tracing_overhead", "turn_overhead"]

_STALL_TICK_S: Final = 0.005
_CONCURRENT_WAIT_S: Final = 150.0
"""How long the concurrent turns may take before the run is given up on (its unfinished turns counted)."""
_BATCH: Final = 200  # sessions created (or read) at once, so the store can group their commits
_REQUESTS: Final = TOOL_CALLS + 1
"""Model requests in the 10-tool turn."""
_HISTORY_TURNS: Final = 20
_LONG_FIRST: Final = 10
_LONG_WINDOW: Final = 5
"""Turns measured at each end of the long chat (turns 10-14 and the last five), their median taken."""


@dataclass(frozen=True, slots=True)
class _EngineSizes:
    """How much work the engine benchmarks do at each size."""

    warm_up_turns: int
    """Turns run each way before timing."""
    turns: int
    """Timed turns each way (alternating one by one)."""
    history_turns: int
    """Turns of each session of the history figure (its last over its second)."""
    history_rounds: int
    """Sessions of `history_turns` turns each way for the history figure."""
    long_turns: int
    """Turns of the long chat (without `--long`)."""
    idle_sessions: int
    """Sessions held by the engine for the memory figure."""
    concurrent_sessions: int
    """Sessions whose turns run at once."""
    concurrent_rounds: int
    """Times the concurrent run is repeated each way (ABBA order)."""


_ENGINE_SIZES: Final[dict[Sizes, _EngineSizes]] = {
    FULL: _EngineSizes(
        warm_up_turns=5,
        turns=40,
        history_turns=_HISTORY_TURNS,
        history_rounds=3,
        long_turns=100,
        idle_sessions=5_000,
        concurrent_sessions=1_000,
        concurrent_rounds=1,
    ),
    QUICK: _EngineSizes(
        warm_up_turns=3,
        turns=10,
        history_turns=_HISTORY_TURNS,
        history_rounds=2,
        long_turns=40,
        idle_sessions=1_000,
        concurrent_sessions=100,
        concurrent_rounds=1,
    ),
    TINY: _EngineSizes(
        warm_up_turns=1,
        turns=2,
        history_turns=3,
        history_rounds=1,
        long_turns=_LONG_FIRST + _LONG_WINDOW + 2,
        idle_sessions=20,
        concurrent_sessions=5,
        concurrent_rounds=1,
    ),
}
LONG_TURNS: Final = 1_000
"""Turns of the long chat with `--long`."""


def _engine_sizes(ctx: Context) -> _EngineSizes:
    return _ENGINE_SIZES.get(ctx.sizes, _ENGINE_SIZES[FULL])


@dataclass(slots=True)
class _Clock:
    """Wall and CPU (every thread of the process) milliseconds of the samples of one side."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    async def time(self, call: Callable[[], Awaitable[Any]]) -> None:
        cpu = time.process_time()
        start = time.perf_counter()
        await call()
        self.wall.append((time.perf_counter() - start) * 1000)
        self.cpu.append((time.process_time() - cpu) * 1000)


def _median(samples: Sequence[float]) -> float:
    return percentile(samples, 50)


async def _rotate(count: int, sides: Sequence[Callable[[], Awaitable[None]]]) -> None:
    """Run every side `count` times, in `rotations` order."""
    for order in rotations(count, sides):
        for side in order:
            await _between_sides()
            await side()


async def _between_sides() -> None:
    """Untimed, before each sample: wait for the turn loops of the side before to finish what follows a turn's
    end (letting the lease go), then put the collector back to the process's own thresholds and collect, so no
    side pays for another's garbage or runs under the thresholds another's turns set (full collections wait
    while turns run, and for a moment after: `agentwatch.runtime.full_collections`)."""
    deadline = time.monotonic() + 2.0
    while not collect_now() and time.monotonic() < deadline:
        await asyncio.sleep(0.001)


# -- one turn -----------------------------------------------------------------------------------------------


class WriteCounter:
    """Counts `store.write` calls (wrapping the store instance's method) and, on SQLite, the writer's COMMITs
    from the store's own tally. (Not with a statement tracer: SQLite expands every statement's text for it and
    the writer's thread takes the GIL to run it, at every statement and every row of the timed turns, which
    only the side counted paid: ~2.5M instructions a ten-tool turn, ~11 % of the writer's, by callgrind.)"""

    def __init__(self, side: EngineSide) -> None:
        self.writes = 0
        store = side.engine.store
        original = store.write

        async def counted(write: Any) -> Any:
            self.writes += 1
            return await original(write)

        store.write = counted  # type: ignore[method-assign]
        tally = getattr(store, "_group_counts", None)
        self._tally: list[int] | None = (
            tally if isinstance(getattr(store, "_writer_connection", None), sqlite3.Connection) else None
        )
        self.traced = self._tally is not None
        self._base = self._tally[0] if self._tally is not None else 0

    @property
    def commits(self) -> int:
        """COMMITs the writer ran since the counter was made or last reset."""
        return self._tally[0] - self._base if self._tally is not None else 0

    def reset(self) -> None:
        self.writes = 0
        self._base = self._tally[0] if self._tally is not None else 0


def _checkpointed_size(path: Path) -> int:
    """The database file's size once the WAL is copied into it and truncated (from a connection of our own)."""
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()
    return path.stat().st_size


async def _stored_payload(side: EngineSide, session_ids: Sequence[str]) -> int:
    """Bytes of payload the sessions hold: their durable events' payload JSON and their model messages' JSON."""
    store = side.engine.store
    total = 0
    for session_id in session_ids:
        for event in await store.read_events(session_id, limit=10_000):
            total += len(PAYLOAD_ADAPTER.dump_json(event.payload))
        session = await store.get_session(session_id)
        messages = await store.read_messages(session.conversation_id)
        total += sum(len(json.dumps(message, separators=(",", ":"))) for message in messages)
    return total


async def turn_overhead(ctx: Context) -> list[Result]:
    """One 10-tool-call turn through the engine (FULL and NORMAL) against the same turn in bare pydantic-ai."""
    sizes = _engine_sizes(ctx)
    script = ten_tool_turn()
    agent = bare_agent(script)
    ctx.say(
        f"engine turn: {sizes.turns} turns of {TOOL_CALLS} tool calls on each of synchronous=FULL, =NORMAL, bare "
        "pydantic-ai and the floor, rotating"
    )
    full, normal, bare, floor = _Clock(), _Clock(), _Clock(), _Clock()
    by_hand = DurableByHand(agent, ctx.workdir / "engine-turn-floor.db")
    async with (
        contextlib.aclosing(by_hand),
        engine_side(ctx.workdir / "engine-turn-full", script, synchronous="full") as on_full,
        engine_side(ctx.workdir / "engine-turn-normal", script, synchronous="normal") as on_normal,
    ):
        total = sizes.warm_up_turns + sizes.turns
        fresh = {
            id(on_full): iter([await on_full.new_session() for _ in range(total)]),
            id(on_normal): iter([await on_normal.new_session() for _ in range(total)]),
        }
        timed_full: list[str] = []

        def engine_turn(side: EngineSide, clock: _Clock, kept: list[str] | None = None) -> Any:
            async def run() -> None:
                session_id = next(fresh[id(side)])
                if kept is not None:
                    kept.append(session_id)
                await clock.time(lambda: side.turn(session_id))

            return run

        def checked_turn(what: str, play: Callable[[], Awaitable[list[ModelMessage]]], clock: _Clock) -> Any:
            async def run() -> None:
                async def once() -> None:
                    if tool_returns(await play()) != TOOL_CALLS:
                        raise RuntimeError(f"the {what} run did not make the script's {TOOL_CALLS} tool calls")

                await clock.time(once)

            return run

        def bare_turn(clock: _Clock) -> Any:
            return checked_turn("bare", lambda: bare_run(agent), clock)

        def floor_turn(clock: _Clock) -> Any:
            return checked_turn("floor's", by_hand.turn, clock)

        warm: list[str] = []
        untimed = _Clock()  # the warm-up turns' times, never read
        for _ in range(sizes.warm_up_turns):
            await engine_turn(on_full, untimed, warm)()
            await engine_turn(on_normal, untimed)()
            await bare_turn(untimed)()
            await floor_turn(untimed)()
        made = await on_full.tool_results(warm[-1])
        if made != TOOL_CALLS:
            raise RuntimeError(f"the engine's turn made {made} tool call(s); the script has {TOOL_CALLS}")

        counter = WriteCounter(on_full)
        database = ctx.workdir / "engine-turn-full" / "agentwatch.db"
        size_before = await asyncio.to_thread(_checkpointed_size, database)
        floor_before = by_hand.commits
        await _rotate(
            sizes.turns,
            [
                engine_turn(on_full, full, timed_full),
                engine_turn(on_normal, normal),
                bare_turn(bare),
                floor_turn(floor),
            ],
        )
        writes, commits = counter.writes / sizes.turns, counter.commits / sizes.turns
        floor_commits = (by_hand.commits - floor_before) / sizes.turns
        size_after = await asyncio.to_thread(_checkpointed_size, database)
        payload = await _stored_payload(on_full, timed_full) / sizes.turns
        growth = (size_after - size_before) / sizes.turns

    how = (
        f"p50 of {sizes.turns} turns per side, rotating with the other two, after {sizes.warm_up_turns} warm-up "
        f"turns; a turn: 11 model requests, 10 streaming a sentence and calling one cheap tool, the last "
        f"streaming a 35-word answer, timed from engine.enqueue on a session created beforehand to the "
        f"ThreadObserver receiving turn.ended (no extensions); baseline: pydantic_ai.Agent.iter over a "
        f"FunctionModel streaming the same chunks, every model request streamed with node.stream and every "
        f"event consumed, nothing stored; before each sample, untimed, the turn loops of the side before finish "
        f"and a full collection runs with the process's own thresholds"
    )
    cpu_how = "CPU time of the process (every thread: the store's writer too) per turn"
    floor_how = (
        "the floor: the bare side made durable by hand, each model response's new messages committed as one "
        "JSON row with sqlite3 (WAL, synchronous=FULL) on the loop's thread before its tools run, the last ones "
        f"at the end ({floor_commits:.1f} commits/turn); no events, no watcher, no session state"
    )
    return [
        Result(
            "engine.turn.full.p50",
            "ms",
            _median(full.wall),
            _median(bare.wall),
            "lower",
            Target("ratio", "<=", 1.3),
            f"wall; default store: SQLite WAL synchronous=FULL; {how}",
        ),
        Result(
            "engine.turn.full.cpu_p50",
            "ms",
            _median(full.cpu),
            _median(bare.cpu),
            "lower",
            Target("ratio", "<=", 1.3),
            f"{cpu_how}; SQLite WAL synchronous=FULL; {how}",
        ),
        Result(
            "engine.turn.normal.p50",
            "ms",
            _median(normal.wall),
            _median(bare.wall),
            "lower",
            None,
            f"wall; SQLite WAL synchronous=NORMAL, beside the FULL figure (not instead); {how}",
        ),
        Result(
            "engine.turn.normal.cpu_p50",
            "ms",
            _median(normal.cpu),
            _median(bare.cpu),
            "lower",
            None,
            f"{cpu_how}; SQLite WAL synchronous=NORMAL; {how}",
        ),
        Result(
            "engine.turn.floor.p50",
            "ms",
            _median(floor.wall),
            _median(bare.wall),
            "lower",
            None,
            f"wall; {floor_how}; what durability alone costs; {how}",
        ),
        Result(
            "engine.turn.floor.cpu_p50",
            "ms",
            _median(floor.cpu),
            _median(bare.cpu),
            "lower",
            None,
            f"CPU time of the process per turn; {floor_how}; {how}",
        ),
        Result(
            "engine.turn.full_over_floor.p50",
            "ms",
            _median(full.wall),
            _median(floor.wall),
            "lower",
            None,
            "wall; the engine at FULL against the floor: what agentwatch adds to a turn durable by hand (events, "
            f"the watcher, session state, ordering); {floor_how}",
        ),
        Result(
            "engine.turn.commits",
            "commits/turn",
            writes,
            _REQUESTS,
            "lower",
            Target("value", "<=", 24.0),
            f"store.write calls per 10-tool turn on synchronous=FULL ({commits:.1f} SQLite COMMITs by the writer"
            f"{'' if counter.traced else ', not counted: no SQLite writer connection found'}), from enqueue to "
            f"turn.ended, over {sizes.turns} turns; baseline: the turn's {_REQUESTS} model requests",
        ),
        Result(
            "engine.turn.sqlite_commits",
            "commits/turn",
            commits,
            _REQUESTS,
            "lower",
            None,
            f"COMMITs the SQLite writer ran per 10-tool turn at FULL (every transaction of the turns' store, "
            f"whatever method asked for it), from enqueue to turn.ended, over {sizes.turns} turns; baseline: the "
            f"turn's {_REQUESTS} model requests",
        ),
        Result(
            "engine.turn.db_growth",
            "bytes/turn",
            growth,
            payload,
            "lower",
            Target("ratio", "<=", 1.5),
            f"growth of the database file (WAL checkpointed and truncated before and after) over {sizes.turns} "
            f"10-tool turns on fresh sessions, synchronous=FULL; baseline: the payload those turns stored (each "
            f"durable event's payload JSON and each model message's JSON)",
        ),
    ]


# -- history: turn 20 / turn 2 ------------------------------------------------------------------------------


class _Dropped:
    """A span exporter that takes every batch and keeps nothing: the spans' cost in the process, not a
    collector's."""

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Nothing to close."""

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


async def tracing_overhead(ctx: Context) -> list[Result]:
    """The same 10-tool turn with tracing on (an SDK provider, its batch processor, spans dropped at export)
    against tracing off, rotating."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from agentwatch.tracing import Tracing

    sizes = _engine_sizes(ctx)
    script = ten_tool_turn()
    ctx.say(f"tracing: {sizes.turns} turns of {TOOL_CALLS} tool calls with tracing on and off, rotating")
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(_Dropped()))  # type: ignore[arg-type]
    traced, plain = _Clock(), _Clock()
    try:
        async with (
            engine_side(ctx.workdir / "tracing-on", script, extensions=[Tracing(provider)]) as on,
            engine_side(ctx.workdir / "tracing-off", script) as off,
        ):
            total = sizes.warm_up_turns + sizes.turns
            fresh = {id(on): iter([await on.new_session() for _ in range(total)])}
            fresh[id(off)] = iter([await off.new_session() for _ in range(total)])

            def turn(side: EngineSide, clock: _Clock) -> Any:
                async def run() -> None:
                    session_id = next(fresh[id(side)])
                    await clock.time(lambda: side.turn(session_id))

                return run

            untimed = _Clock()
            for _ in range(sizes.warm_up_turns):
                await turn(on, untimed)()
                await turn(off, untimed)()
            await _rotate(sizes.turns, [turn(on, traced), turn(off, plain)])
    finally:
        provider.shutdown()
    how = (
        f"p50 of {sizes.turns} turns per side, rotating, after {sizes.warm_up_turns} warm-up turns; the turn of "
        "engine.turn (FULL); value: with `Tracing` (an OpenTelemetry SDK provider and its BatchSpanProcessor, "
        "22 spans a turn, dropped at export); baseline: the same engine without it"
    )
    return [
        Result("engine.tracing.p50", "ms", _median(traced.wall), _median(plain.wall), "lower", None, f"wall; {how}"),
        Result(
            "engine.tracing.cpu_p50",
            "ms",
            _median(traced.cpu),
            _median(plain.cpu),
            "lower",
            None,
            f"CPU of every thread (the batch processor's too); {how}",
        ),
    ]


async def history_growth(ctx: Context) -> list[Result]:
    """Turn 20 / turn 2 of one session through the engine, against the same ratio of a bare chat."""
    sizes = _engine_sizes(ctx)
    turns = sizes.history_turns
    script = ten_tool_turn()
    agent = bare_agent(script)
    ctx.say(f"engine history: {sizes.history_rounds} session(s) of {turns} 10-tool turns each way, alternating")
    engine_clocks: list[_Clock] = []
    bare_clocks: list[_Clock] = []
    async with engine_side(ctx.workdir / "engine-history", script * turns) as side:
        # Warm-up: one short session each way.
        session_id = await side.new_session()
        chat = BareChat(agent)
        for _ in range(2):
            await side.turn(session_id)
            await chat.turn()
        for _round in range(sizes.history_rounds):
            session_id = await side.new_session()
            chat = BareChat(agent)
            ours, theirs = _Clock(), _Clock()

            async def engine_turn(session_id: str = session_id, ours: _Clock = ours) -> None:
                await ours.time(lambda: side.turn(session_id))

            async def bare_turn(chat: BareChat = chat, theirs: _Clock = theirs) -> None:
                await theirs.time(chat.turn)

            await _rotate(turns, [engine_turn, bare_turn])
            engine_clocks.append(ours)
            bare_clocks.append(theirs)
        made = await side.tool_results(session_id)
        if made != TOOL_CALLS * turns:
            raise RuntimeError(f"the engine's session made {made} tool calls; the script has {TOOL_CALLS * turns}")

    def growth(clocks: list[_Clock], cpu: bool) -> float:
        # The median over the rounds of each round's turn 20 / turn 2.
        return _median([(c.cpu if cpu else c.wall)[turns - 1] / (c.cpu if cpu else c.wall)[1] for c in clocks])

    note = (
        f"median over {sizes.history_rounds} session(s) of (turn {turns} / turn 2) of one session of {turns} "
        f"10-tool turns, default store (synchronous=FULL), a ThreadObserver on it, each turn timed from enqueue "
        f"to turn.ended; baseline: the same ratio of a bare pydantic-ai chat passing run.all_messages() back as "
        f"the next run's history, turns alternating with the engine's"
    )
    turn_ms = (
        f"; engine turn 2 / {turns}: {_median([c.wall[1] for c in engine_clocks]):.1f} / "
        f"{_median([c.wall[turns - 1] for c in engine_clocks]):.1f} ms, bare "
        f"{_median([c.wall[1] for c in bare_clocks]):.1f} / {_median([c.wall[turns - 1] for c in bare_clocks]):.1f} ms"
    )
    return [
        Result(
            f"engine.history.turn{turns}_over_turn2",
            "x",
            growth(engine_clocks, cpu=False),
            growth(bare_clocks, cpu=False),
            "lower",
            Target("ratio", "<=", 1.1),
            f"wall; {note}{turn_ms}",
        ),
        Result(
            f"engine.history.turn{turns}_over_turn2.cpu",
            "x",
            growth(engine_clocks, cpu=True),
            growth(bare_clocks, cpu=True),
            "lower",
            Target("ratio", "<=", 1.1),
            f"CPU of the process (every thread); {note}",
        ),
    ]


# -- a long chat: turn N / turn 10 --------------------------------------------------------------------------


async def long_chat(ctx: Context) -> list[Result]:
    """Turn N / turn 10 of one long chat of 1-tool turns through the engine, against a bare chat."""
    sizes = _engine_sizes(ctx)
    turns = LONG_TURNS if ctx.long else sizes.long_turns
    script = one_tool_turn()
    agent = bare_agent(script)
    ctx.say(f"engine long chat: {turns} 1-tool turns of one session each way, alternating")
    ours, theirs = _Clock(), _Clock()
    async with engine_side(ctx.workdir / "engine-long", script * turns) as side:
        warm_id = await side.new_session()
        warm_chat = BareChat(agent)
        for _ in range(2):
            await side.turn(warm_id)
            await warm_chat.turn()
        session_id = await side.new_session()
        chat = BareChat(agent)

        async def engine_turn() -> None:
            await ours.time(lambda: side.turn(session_id))

        async def bare_turn() -> None:
            await theirs.time(chat.turn)

        began = time.perf_counter()
        for index in range(turns):
            for run in (engine_turn, bare_turn) if index % 2 == 0 else (bare_turn, engine_turn):
                await run()
            if (index + 1) % 100 == 0:
                ctx.say(f"  turn {index + 1:,} of {turns:,} ({time.perf_counter() - began:.0f} s)")
        if tool_returns(chat.history) != turns:
            raise RuntimeError("the bare chat did not play every turn's tool call")

    early = slice(_LONG_FIRST - 1, _LONG_FIRST - 1 + _LONG_WINDOW)
    late = slice(turns - _LONG_WINDOW, turns)

    def growth(samples: list[float]) -> float:
        return _median(samples[late]) / _median(samples[early])

    note = (
        f"median of turns {turns - _LONG_WINDOW + 1}-{turns} / median of turns {_LONG_FIRST}-"
        f"{_LONG_FIRST + _LONG_WINDOW - 1} of one chat of {turns:,} 1-tool turns (two model requests each), default "
        f"store (synchronous=FULL), a ThreadObserver on it, each turn timed from enqueue to turn.ended"
        f"{'' if ctx.long else f' ({LONG_TURNS:,} turns with --long)'}; baseline: the same ratio of a bare "
        f"pydantic-ai chat passing its history back, turns alternating with the engine's; engine turn "
        f"{_LONG_FIRST} / {turns}: {_median(ours.wall[early]):.1f} / {_median(ours.wall[late]):.1f} ms, bare "
        f"{_median(theirs.wall[early]):.1f} / {_median(theirs.wall[late]):.1f} ms"
    )
    return [
        Result(
            f"engine.long_chat.turn{turns}_over_turn{_LONG_FIRST}",
            "x",
            growth(ours.wall),
            growth(theirs.wall),
            "lower",
            Target("ratio", "<=", 1.2),
            f"wall; {note}",
        ),
        Result(
            f"engine.long_chat.turn{turns}_over_turn{_LONG_FIRST}.cpu",
            "x",
            growth(ours.cpu),
            growth(theirs.cpu),
            "lower",
            Target("ratio", "<=", 1.2),
            "CPU of the process (every thread); " + note.split("; baseline", 1)[0],
        ),
    ]


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
    async with engine_side(ctx.workdir / "engine-memory", one_tool_turn()) as side:
        engine = side.engine
        # Warm-up: the first sessions and drivers pay for imports, caches and prepared statements.
        for _ in range(20):
            await side.new_session()

        with _HeapGrowth() as held:
            session_ids: list[str] = []
            for start in range(0, count, _BATCH):
                batch = min(_BATCH, count - start)
                created = await asyncio.gather(*(engine.create(side.role) for _ in range(batch)))
                session_ids.extend(session.id for session in created)
            for session_id in session_ids:
                await engine.driver(session_id)

        # The baseline: the records of the same sessions, as the store returns them, held in a list.
        with _HeapGrowth() as records_held:
            records: list[Any] = []
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
    """A task that sleeps `_STALL_TICK_S` over and over and notes the latest it ever woke up; beside it, the
    most CPU time the loop's thread spent past a tick's sleep before the ticker ran (on a busy machine the
    wall time also counts the moments the thread waited for a CPU, which no loop turn caused)."""

    def __init__(self) -> None:
        self.worst = 0.0
        self.worst_cpu = 0.0
        self.ticks = 0
        self.late: list[float] = []
        """How late every tick woke up (seconds)."""
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        while True:
            expected = time.perf_counter() + _STALL_TICK_S
            cpu = time.thread_time()
            await asyncio.sleep(_STALL_TICK_S)
            late = time.perf_counter() - expected
            self.late.append(late)
            self.worst = max(self.worst, late)
            self.worst_cpu = max(self.worst_cpu, time.thread_time() - cpu - _STALL_TICK_S)
            self.ticks += 1

    @property
    def p99(self) -> float:
        """The 99th percentile of the ticks' lateness (seconds): the loop's usual worst, beside the longest (which
        a single moment the machine took the loop's thread away can set)."""
        return percentile(self.late, 99) if self.late else 0.0

    async def __aenter__(self) -> _StallMeter:
        self._task = asyncio.create_task(self._tick())
        await asyncio.sleep(0)  # the ticker is running before the work starts
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


class _Collections:
    """Garbage collections while it is entered: how many were full ones, and the longest of any generation."""

    def __init__(self) -> None:
        self.full = 0
        self.longest_ms = 0.0
        self.longest_generation = 0
        self._started = 0.0

    def _note(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        took = (time.perf_counter() - self._started) * 1000
        self.full += info["generation"] == 2
        if took > self.longest_ms:
            self.longest_ms, self.longest_generation = took, info["generation"]

    def __enter__(self) -> _Collections:
        gc.callbacks.append(self._note)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._note)


@dataclass(slots=True)
class _Run:
    """Wall time and worst stall of one concurrent run, in milliseconds."""

    wall_ms: float
    stall_ms: float
    stall_cpu_ms: float = 0.0
    """The longest stall in the loop thread's CPU time (see `_StallMeter`)."""
    stall_p99_ms: float = 0.0
    """The 99th percentile of the ticker's lateness."""
    unfinished: int = 0
    """Turns that had not ended (or failed) when the run was given up on."""
    collections: _Collections | None = None
    """The garbage collections during the run."""


def _collections_said(runs: Sequence[_Run]) -> str:
    seen = [run.collections for run in runs if run.collections is not None]
    if not seen:
        return "not counted"
    longest = max(seen, key=lambda c: c.longest_ms)
    return (
        f"{sum(c.full for c in seen)} full, the longest of any generation {longest.longest_ms:.0f} ms "
        f"(generation {longest.longest_generation})"
    )


async def concurrent_turns(ctx: Context) -> list[Result]:
    """Many short turns at once through the engine against as many bare pydantic-ai runs at once."""
    sizes = _engine_sizes(ctx)
    count = sizes.concurrent_sessions
    script = one_tool_turn()
    agent = bare_agent(script)
    ctx.say(f"engine concurrent: {count:,} short turns at once x {sizes.concurrent_rounds} round(s), each way")
    engine_runs: list[_Run] = []
    bare_runs: list[_Run] = []
    async with engine_side(ctx.workdir / "engine-concurrent", script) as side:
        engine = side.engine

        async def engine_side_run() -> None:
            # The sessions exist (drivers started) before the clock starts: the figure is running their turns.
            session_ids: list[str] = []
            for start in range(0, count, _BATCH):
                created = await asyncio.gather(*(engine.create(side.role) for _ in range(min(_BATCH, count - start))))
                session_ids.extend(session.id for session in created)
            for session_id in session_ids:
                await engine.driver(session_id)
            with _Collections() as collections:
                async with _StallMeter() as meter:
                    began = time.perf_counter()
                    turns = [asyncio.ensure_future(side.turn(session_id)) for session_id in session_ids]
                    done, pending = await asyncio.wait(turns, timeout=_CONCURRENT_WAIT_S)
                    wall = time.perf_counter() - began
            for turn in pending:
                turn.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            failed = [turn.exception() for turn in done if turn.exception() is not None]
            engine_runs.append(
                _Run(
                    wall * 1000,
                    meter.worst * 1000,
                    meter.worst_cpu * 1000,
                    meter.p99 * 1000,
                    len(pending) + len(failed),
                    collections,
                )
            )
            if pending or failed:
                first = f"; the first failure: {failed[0]!r}" if failed else ""
                ctx.say(
                    f"{len(pending)} turn(s) had not ended after {_CONCURRENT_WAIT_S:.0f} s and {len(failed)} "
                    f"failed{first}"
                )

        async def bare_side_run() -> None:
            with _Collections() as collections:
                async with _StallMeter() as meter:
                    began = time.perf_counter()
                    runs = await asyncio.gather(*(bare_run(agent) for _ in range(count)))
                    wall = time.perf_counter() - began
            if any(tool_returns(messages) != 1 for messages in runs):
                raise RuntimeError("a bare run did not play the whole script")
            bare_runs.append(
                _Run(wall * 1000, meter.worst * 1000, meter.worst_cpu * 1000, meter.p99 * 1000, collections=collections)
            )

        for _ in range(_engine_sizes(ctx).warm_up_turns):
            await side.turn(await side.new_session())
            await bare_run(agent)
        for index in range(sizes.concurrent_rounds):
            pair = [bare_side_run, engine_side_run]
            for run in pair if index % 2 == 0 else reversed(pair):
                await run()

    rounds = len(engine_runs)
    how = (
        f"{count:,} sessions, each running one short turn (two model requests streaming a sentence each, one "
        f"tool call) at once on one event loop, {rounds} round(s) each way"
    )
    wall_note = (
        f"mean wall time from the first enqueue to the last turn.ended seen by the ThreadObserver; {how}; "
        f"default store (SQLite WAL synchronous=FULL), sessions and drivers made beforehand; baseline: as many "
        f"bare pydantic-ai runs at once (Agent.iter, every event streamed and consumed)"
    )
    stall_note = (
        f"the longest an event-loop ticker sleeping {_STALL_TICK_S * 1000:g} ms woke up late, worst of the "
        f"rounds; in the loop thread's CPU time past the tick, {max(r.stall_cpu_ms for r in engine_runs):.0f} ms "
        f"(baseline {max(r.stall_cpu_ms for r in bare_runs):.0f} ms); the 99th percentile of the ticks' lateness "
        f"{max(r.stall_p99_ms for r in engine_runs):.0f} ms (baseline {max(r.stall_p99_ms for r in bare_runs):.0f} "
        f"ms); {how}; default store (synchronous=FULL); "
        f"baseline: the same ticker beside as many bare pydantic-ai runs at once; garbage collections: "
        f"{_collections_said(engine_runs)} during the engine's runs (full ones wait while turns run, see "
        f"agentwatch.runtime.full_collections), "
        f"{_collections_said(bare_runs)} during the bare ones"
    )
    unfinished = sum(run.unfinished for run in engine_runs)
    if unfinished:
        wall_note = (
            f"{unfinished} of {count * rounds:,} turns had not ended within {_CONCURRENT_WAIT_S:.0f} s or failed "
            f"(the wall time is the time given up after); {wall_note}"
        )
    return [
        Result(
            "engine.concurrent.sqlite.wall",
            "ms",
            sum(run.wall_ms for run in engine_runs) / rounds,
            sum(run.wall_ms for run in bare_runs) / len(bare_runs),
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
        Result(
            "engine.concurrent.sqlite.unfinished",
            "turns",
            unfinished,
            count * rounds,
            "lower",
            Target("value", "<=", 0.0),
            f"turns of the concurrent runs that failed or had not ended within {_CONCURRENT_WAIT_S:.0f} s; {how}; "
            f"baseline: the turns run (the ratio is the share unfinished)",
        ),
    ]
