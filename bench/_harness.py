"""What every benchmark shares: sizes, the run context, percentiles, and results as ratios to a baseline.

A figure alone means little on a shared machine (a disk flush costs 20-30x more when the neighbours are
busy), so every `Result` carries the figure and a raw baseline measured in the same run, right beside it,
and the ratio between them. `ratio` is always `value / baseline`; `better` says which way is good:

- `higher` (throughput): 1.0 means as fast as the raw baseline, 0.5 means half its speed.
- `lower` (latency): 1.0 means as quick as the raw baseline, 3.0 means three times its latency.

A `Target` is the bar a figure is held to: either on the value itself (`p50 <= 1 ms`) or on the ratio
(`>= 0.5x the baseline`). Missing a target is reported, never raised: benchmarks inform, tests assert.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

from agentwatch.events import PAYLOAD_ADAPTER, ToolResult

if TYPE_CHECKING:
    from agentwatch.live.redis import RedisRing

__all__ = [
    "FULL",
    "PAYLOAD_BYTES",
    "QUICK",
    "SIZES",
    "TINY",
    "Better",
    "Context",
    "Result",
    "Sizes",
    "Skip",
    "Target",
    "percentile",
    "rotations",
    "sample_payload",
]

T = TypeVar("T")

Better = Literal["higher", "lower"]

PAYLOAD_BYTES = 300
"""Size of the JSON payload of every appended or published event (a tool result, as agents write most)."""


class Skip(Exception):
    """A benchmark that cannot run here (a server is not reachable); the message says why."""


@dataclass(frozen=True, slots=True)
class Target:
    """The bar a figure is held to: `on` the value or the ratio, `op` the comparison, `limit` the bound."""

    on: Literal["value", "ratio"]
    op: Literal["<=", ">="]
    limit: float

    def met(self, value: float, ratio: float) -> bool:
        """Whether a figure with this value and ratio meets the target."""
        subject = value if self.on == "value" else ratio
        return subject <= self.limit if self.op == "<=" else subject >= self.limit

    def describe(self, unit: str) -> str:
        """`value <= 1 ms` or `ratio >= 0.5x`."""
        if self.on == "value":
            return f"value {self.op} {self.limit:g} {unit}"
        return f"ratio {self.op} {self.limit:g}x"


@dataclass(frozen=True, slots=True)
class Result:
    """One figure beside its baseline from the same run."""

    name: str
    """Dotted name, area first: `store.append.sqlite.100_sessions`."""
    unit: str
    """Unit of `value` and `baseline` (`events/s`, `ms`, ...)."""
    value: float
    """What agentwatch achieved."""
    baseline: float
    """What the raw engine (sqlite3, psycopg, redis-py, asyncio) achieved on the same work in the same run."""
    better: Better
    """Whether a higher or a lower value (and ratio) is better."""
    target: Target | None = None
    """The bar the figure is held to, if any."""
    note: str = ""
    """How it was measured, in a few words (batch sizes, samples)."""

    @property
    def ratio(self) -> float:
        """`value / baseline`; read it with `better`."""
        return self.value / self.baseline if self.baseline > 0 else math.inf

    @property
    def met(self) -> bool | None:
        """Whether the target is met (None without a target)."""
        return None if self.target is None else self.target.met(self.value, self.ratio)

    def as_json(self) -> dict[str, object]:
        """The entry written to `results/latest.json`: the six keys, then `better`, `met` and `note`."""
        ratio = self.ratio
        return {
            "name": self.name,
            "unit": self.unit,
            "value": _finite(self.value),
            "baseline": _finite(self.baseline),
            "ratio": _finite(ratio),
            "target": None if self.target is None else self.target.describe(self.unit),
            "better": self.better,
            "met": self.met,
            "note": self.note,
        }


def _finite(number: float) -> float:
    # JSON has no infinity; a zero baseline cannot happen with real timings, but never write invalid JSON.
    return round(number, 6) if math.isfinite(number) else -1.0


@dataclass(frozen=True, slots=True)
class Sizes:
    """How much work each benchmark does. `FULL` for `make bench`, `QUICK` for `--quick`, `TINY` for tests."""

    rounds: int
    """Throughput runs alternate baseline and agentwatch this many times each (ABBA order), after a warm-up."""
    sqlite_sequential: int
    """Events appended one by one per round, one session (SQLite)."""
    sqlite_per_session: int
    """Events each of the concurrent sessions appends per round (SQLite)."""
    sqlite_history: int
    """Events each session of the with-history SQLite figure holds before the concurrent appends are timed."""
    postgres_sequential: int
    """Events appended one by one per round, one session (PostgreSQL)."""
    postgres_per_session: int
    """Events each of the concurrent sessions appends per round (PostgreSQL)."""
    concurrent_sessions: int
    """Sessions appending at once (asyncio tasks, one per session)."""
    tail_events: int
    """Events in the tail-read database (built once, cached)."""
    tail_sessions: int
    """Sessions those events are spread over."""
    tail_samples: int
    """Timed reads of each kind."""
    list_sessions: int
    """Sessions in the listing database (built once, cached)."""
    list_later_page: int
    """Which page (1-based) the "later page" figure reads."""
    list_samples: int
    """Timed listings of each kind and page."""
    live_samples: int
    """Timed publish-to-receive round trips of each kind."""


FULL = Sizes(
    rounds=3,
    sqlite_sequential=300,
    sqlite_per_session=20,
    sqlite_history=300,
    postgres_sequential=200,
    postgres_per_session=40,
    concurrent_sessions=100,
    tail_events=1_000_000,
    tail_sessions=100,
    tail_samples=2000,
    list_sessions=100_000,
    list_later_page=50,
    list_samples=100,
    live_samples=2000,
)
QUICK = Sizes(
    rounds=1,
    sqlite_sequential=150,
    sqlite_per_session=8,
    sqlite_history=300,
    postgres_sequential=80,
    postgres_per_session=4,
    concurrent_sessions=100,
    tail_events=100_000,
    tail_sessions=100,
    tail_samples=500,
    list_sessions=100_000,
    list_later_page=50,
    list_samples=30,
    live_samples=500,
)
TINY = Sizes(
    rounds=1,
    sqlite_sequential=5,
    sqlite_per_session=2,
    sqlite_history=5,
    postgres_sequential=5,
    postgres_per_session=2,
    concurrent_sessions=5,
    tail_events=600,
    tail_sessions=3,
    tail_samples=10,
    list_sessions=1000,
    list_later_page=2,
    list_samples=5,
    live_samples=10,
)
SIZES: dict[str, Sizes] = {"full": FULL, "quick": QUICK, "tiny": TINY}


@dataclass(slots=True)
class Context:
    """What a benchmark runs with."""

    sizes: Sizes
    workdir: Path
    """A temporary directory for this run's SQLite files, removed afterwards."""
    cache_dir: Path
    """Where large read-only databases are kept between runs (built once per size and schema version)."""
    postgres_url: str | None
    """The PostgreSQL server to use, or None to skip its figures."""
    redis_url: str | None
    """The Redis server (a database the benchmark may write to), or None to skip its figures."""
    say: Callable[[str], None] = field(default=print)
    """Prints a progress line."""
    long: bool = False
    """`--long`: the long-chat figure runs its full length (1,000 turns) instead of the default's."""


def percentile(samples: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0..100) of `samples`, linearly interpolated between closest ranks."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def rotations(rounds: int, sides: Sequence[T]) -> Iterator[list[T]]:
    """The order to run `sides` in, round by round: one of each per round, rotating which goes first and
    reversing the order every other cycle (two sides: AB BA BA AB), so no side always runs after the same one
    and a neighbour that gets busy half-way through the run weighs on all alike."""
    for index in range(rounds):
        shift = index % len(sides)
        order = [*sides[shift:], *sides[:shift]]
        if index // len(sides) % 2:
            order.reverse()
        yield order


def sample_payload(tag: int = 0) -> ToolResult:
    """A tool result whose JSON is `PAYLOAD_BYTES` long (give or take a byte)."""
    probe = ToolResult(tool_call_id=f"call_{tag:08d}", tool_name="read_file", output="")
    room = max(PAYLOAD_BYTES - len(PAYLOAD_ADAPTER.dump_json(probe)), 0)
    filler = ("The file holds the agent's notes for the next step of the plan. " * 8)[:room]
    return ToolResult(tool_call_id=f"call_{tag:08d}", tool_name="read_file", output=filler)


async def bench_redis_ring(redis_url: str | None) -> tuple[RedisRing, str]:
    """A Redis live ring under a key prefix of its own, and that prefix; `Skip` (with why) when there is no Redis
    URL, redis-py is not installed, or the server cannot be reached."""
    import uuid

    from agentwatch.errors import StoreUnavailable

    if redis_url is None:
        raise Skip("no Redis URL given")
    try:
        from agentwatch.live.redis import RedisRing
    except ImportError:
        raise Skip("redis is not installed (pip install 'agentwatch[redis]')") from None
    prefix = f"agentwatch-bench:{uuid.uuid4().hex[:12]}:"
    try:
        return await RedisRing.open(redis_url, key_prefix=prefix, connect_timeout=2.0), prefix
    except StoreUnavailable as error:
        raise Skip(str(error)) from None
