"""The benchmark suite: which benchmarks exist, running a selection, the table and `latest.json`."""

from __future__ import annotations

import json
import os
import platform
import sqlite3
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from bench import engine, live, observers, reads, service, start, store
from bench._harness import Context, Result, Sizes, Skip

__all__ = ["BENCHMARKS", "Benchmark", "Report", "render", "run_suite", "select", "write_json"]

RESULTS_VERSION = 1
"""Version of the `latest.json` layout."""


@dataclass(frozen=True, slots=True)
class Benchmark:
    """A named group of figures measured together."""

    name: str
    run: Callable[[Context], Awaitable[list[Result]]]
    summary: str


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark(
        "store.append.sqlite",
        store.append_sqlite,
        "durable appends on SQLite, 1 and 100 sessions (new, and with a history)",
    ),
    Benchmark("store.append.postgres", store.append_postgres, "durable appends on PostgreSQL, 1 and 100 sessions"),
    Benchmark("store.tail.sqlite", store.tail_sqlite, "50 events after a random cursor in a 1M-event store"),
    Benchmark("store.list.sqlite", store.list_sqlite, "a filtered keyset page of 100k sessions, first and later"),
    Benchmark("reads.list", reads.list_tool, "agent_list: a page of 100k sessions with two filters, first and later"),
    Benchmark("reads.tail", reads.tail_tool, "agent_tail: 50 events after a random cursor in a 1M-event store"),
    Benchmark("reads.summary", reads.summary_tool, "agent_summary over 100k sessions, default and words: true"),
    Benchmark("reads.postgres", reads.postgres_tools, "agent_list and agent_tail on PostgreSQL beside psycopg"),
    Benchmark(
        "reads.working",
        reads.working_rows,
        "agent_list of 20 and 100 working agents: their currentItem from a Redis live ring, beside a memory ring",
    ),
    Benchmark("live.memory", live.memory_latency, "publish to subscriber, memory ring"),
    Benchmark("live.redis", live.redis_latency, "publish to subscriber, Redis ring on loopback"),
    Benchmark(
        "engine.turn",
        engine.turn_overhead,
        "a watched, durable 10-tool turn (FULL; NORMAL beside) vs bare pydantic-ai; commits; file growth",
    ),
    Benchmark("engine.tracing", engine.tracing_overhead, "the same turn with tracing on vs off"),
    Benchmark("engine.history", engine.history_growth, "turn 20 / turn 2 of one session vs a bare chat"),
    Benchmark("engine.long_chat", engine.long_chat, "turn 100 (1,000 with --long) / turn 10 of one chat vs bare"),
    Benchmark("engine.memory", engine.idle_memory, "heap per idle session (driver alive) vs its bare record"),
    Benchmark("engine.concurrent", engine.concurrent_turns, "1,000 short turns at once: wall time, longest stall"),
    Benchmark(
        "service",
        service.service_figures,
        "agent_list over HTTP; an event to 100 WebSocket clients; attach to 1,000 events; 200 sessions x 10 watchers",
    ),
    Benchmark("start", start.cold_start, "cold import, `--help` and every command that runs no model; GC pause"),
    Benchmark(
        "observers",
        observers.efficacy,
        "built-in rule observers over 66 scripted trajectories: recall, false reports, delivery; turn time",
    ),
)

RETIRED = frozenset({"engine.turn.sqlite.p50"})
"""Figures no benchmark measures any more: dropped from `latest.json` when it is next written."""


def select(only: Sequence[str]) -> list[Benchmark]:
    """The benchmarks named in `only` (a name or a dotted prefix such as `store` or `live`); all when empty."""
    if not only:
        return list(BENCHMARKS)
    chosen: list[Benchmark] = []
    for wanted in only:
        matches = [b for b in BENCHMARKS if b.name == wanted or b.name.startswith(f"{wanted}.")]
        if not matches:
            names = ", ".join(b.name for b in BENCHMARKS)
            raise ValueError(f"no benchmark named {wanted!r}; choose among {names} (or a prefix such as 'store')")
        chosen.extend(b for b in matches if b not in chosen)
    return [b for b in BENCHMARKS if b in chosen]


@dataclass(slots=True)
class Report:
    """What one run measured, skipped and failed."""

    size: str
    started_at: datetime
    results: list[Result] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0


async def run_suite(
    benchmarks: Sequence[Benchmark],
    *,
    size: str,
    sizes: Sizes,
    cache_dir: Path,
    postgres_url: str | None,
    redis_url: str | None,
    console: Console,
    long: bool = False,
) -> Report:
    """Run `benchmarks` one after the other, with a progress bar; a failure is reported and the rest go on."""
    report = Report(size=size, started_at=datetime.now(UTC))
    start = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="agentwatch-bench-") as workdir,
        Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as progress,
    ):
        overall = progress.add_task("benchmarks", total=len(benchmarks))

        def say(message: str) -> None:
            progress.console.print(f"  {message}", style="dim", highlight=False)

        for benchmark in benchmarks:
            progress.update(overall, description=benchmark.name)
            progress.console.print(f"[bold]{benchmark.name}[/]: {benchmark.summary}")
            context = Context(
                sizes=sizes,
                workdir=Path(workdir),
                cache_dir=cache_dir,
                postgres_url=postgres_url,
                redis_url=redis_url,
                say=say,
                long=long,
            )
            began = time.perf_counter()
            try:
                results = await benchmark.run(context)
            except Skip as skip:
                report.skipped.append((benchmark.name, str(skip)))
                say(f"skipped: {skip}")
            except Exception as error:
                report.failed.append((benchmark.name, f"{type(error).__name__}: {error}"))
                progress.console.print(f"  [red]failed[/]: {type(error).__name__}: {error}", highlight=False)
                progress.console.print(traceback.format_exc(), style="dim", highlight=False)
            else:
                report.results.extend(results)
                say(f"done in {time.perf_counter() - began:.1f} s")
            progress.advance(overall)
    report.seconds = time.perf_counter() - start
    return report


def write_json(report: Report, path: Path) -> None:
    """Write the figures to `path` as a list of result objects (see `Result.as_json`), and what the run was
    (environment, size, skipped and failed benchmarks) beside it in `<stem>.run.json`.

    A partial run (`--only`) replaces the figures it measured and keeps the others, so the file always holds
    the newest value of every figure.
    """
    fresh = [result.as_json() for result in report.results]
    measured = {str(entry["name"]) for entry in fresh}
    kept: list[dict[str, Any]] = []
    if path.exists():
        try:
            previous = json.loads(path.read_text())
        except ValueError:
            previous = []
        if isinstance(previous, list):
            kept = [
                entry
                for entry in previous
                if isinstance(entry, dict) and entry.get("name") not in measured and entry.get("name") not in RETIRED
            ]
    figures = sorted([*kept, *fresh], key=lambda entry: str(entry["name"]))
    run = {
        "version": RESULTS_VERSION,
        "started_at": report.started_at.isoformat(),
        "seconds": round(report.seconds, 1),
        "size": report.size,
        "environment": {
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "cpus": os.cpu_count(),
            "system": f"{platform.system()} {platform.machine()}",
        },
        "measured": sorted(measured),
        "skipped": [{"name": name, "reason": reason} for name, reason in report.skipped],
        "failed": [{"name": name, "error": error} for name, error in report.failed],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(figures, indent=2, allow_nan=False) + "\n")
    path.with_name(f"{path.stem}.run.json").write_text(json.dumps(run, indent=2, allow_nan=False) + "\n")


def _number(value: float, unit: str) -> str:
    if unit == "ms":
        return f"{value:.3f}" if value < 10 else f"{value:.1f}"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}"


def render(report: Report, console: Console) -> None:
    """Print the results table, then what was skipped or failed."""
    table = Table(
        title=f"agentwatch benchmarks ({report.size}, {report.seconds:.0f} s)",
        caption="ratio = value / baseline, both measured in this run; read it with 'better'",
    )
    table.add_column("figure", no_wrap=True)
    table.add_column("value", justify="right")
    table.add_column("baseline", justify="right")
    table.add_column("unit", no_wrap=True)
    table.add_column("ratio", justify="right")
    table.add_column("better")
    table.add_column("target", no_wrap=True)
    table.add_column("met")
    for result in report.results:
        met = result.met
        table.add_row(
            result.name,
            _number(result.value, result.unit),
            _number(result.baseline, result.unit),
            result.unit,
            f"{result.ratio:.2f}x",
            result.better,
            "" if result.target is None else result.target.describe(result.unit),
            "" if met is None else ("[green]yes[/]" if met else "[red]NO[/]"),
        )
    console.print(table)
    for name, reason in report.skipped:
        console.print(f"[yellow]skipped[/] {name}: {reason}", highlight=False)
    for name, error in report.failed:
        console.print(f"[red]failed[/] {name}: {error}", highlight=False)
