"""Where the time of one watched, durable turn goes: `python -m bench.profile [--turns N] [--output FILE]`.

The turn is `engine.turn`'s: 1 message, 10 sequential tool calls, a short streamed answer, on the scripted
model, the default SQLite store (`synchronous=FULL`) and a ThreadObserver consuming every event; beside it
the same script in bare pydantic-ai (`Agent.iter` over a FunctionModel, every stream event consumed). It
prints (or writes) a Markdown report: wall and CPU time per turn, the time by module (cProfile, the event
loop's thread), the top functions by cumulative and own time, store writes and COMMITs per turn, garbage
collections and allocations per turn, and, with `--strace`, the write and fsync system calls per turn.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import os
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._turns import BareChat, bare_agent, engine_side, ten_tool_turn
from bench.engine import WriteCounter

_MARK_START = b"agentwatch-bench-profile-start"
_MARK_END = b"agentwatch-bench-profile-end"


# -- counting -----------------------------------------------------------------------------------------------


@dataclass
class _GcMeter:
    """Collections by generation and the time they took, from `gc.callbacks`."""

    collections: Counter[int] = field(default_factory=Counter)
    seconds: dict[int, float] = field(default_factory=lambda: dict.fromkeys((0, 1, 2), 0.0))
    longest: float = 0.0
    _started: float = 0.0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            took = time.perf_counter() - self._started
            generation = int(info["generation"])
            self.collections[generation] += 1
            self.seconds[generation] += took
            self.longest = max(self.longest, took)

    @contextmanager
    def measuring(self) -> Iterator[_GcMeter]:
        gc.callbacks.append(self._callback)
        try:
            yield self
        finally:
            gc.callbacks.remove(self._callback)


@dataclass
class _LoopTime:
    """Where the event loop's thread spent the wall time of some turns: running (its own CPU time), waiting in
    the selector for something to do (idle: a commit, a thread's result), and neither (ready to run, but
    waiting for the GIL held by another thread of the process, or for a CPU)."""

    wall: float = 0.0
    cpu: float = 0.0
    idle: float = 0.0
    waits: int = 0
    """Times the selector was asked to wait (for a commit, a tool's thread, a timer)."""

    @contextmanager
    def measuring(self) -> Iterator[_LoopTime]:
        selector: Any = getattr(asyncio.get_running_loop(), "_selector", None)
        select = getattr(selector, "select", None)
        wrapped = select is not None and "select" in vars(selector)  # already an attribute of its own
        if select is not None:

            def timed(timeout: float | None = None) -> Any:
                if timeout is not None and timeout <= 0:
                    return select(timeout)  # a look, not a wait
                started = time.perf_counter()
                try:
                    return select(timeout)
                finally:
                    self.idle += time.perf_counter() - started
                    self.waits += 1

            selector.select = timed
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            yield self
        finally:
            self.wall += time.perf_counter() - wall
            self.cpu += time.thread_time() - cpu
            if wrapped:
                selector.select = select
            elif select is not None:
                del selector.select  # the class's method again

    def line(self, turns: int) -> str:
        def ms(seconds: float) -> str:
            return f"{seconds * 1000 / turns:.1f} ms"

        other = max(self.wall - self.cpu - self.idle, 0.0)
        return (
            f"wall {ms(self.wall)} = CPU {ms(self.cpu)} + idle in the selector {ms(self.idle)} "
            f"({self.waits / turns:.1f} waits) + neither {ms(other)}"
        )


# -- categories ---------------------------------------------------------------------------------------------

_SITE = re.compile(r"site-packages/([^/]+)")


def _category(filename: str, name: str) -> str:
    """What module a profiler entry belongs to, in the words the engineers use."""
    if filename == "~":
        if "sqlite3" in name:
            return "sqlite3 (C calls on the loop thread)"
        if "pydantic_core" in name or "SchemaValidator" in name or "SchemaSerializer" in name:
            return "pydantic-core (C)"
        return "builtins (C: " + (name.split("'")[1].split(".")[0] if "'" in name else name) + ")"
    if "/agentwatch/" in filename:
        tail = filename.split("/agentwatch/", 1)[1]
        if tail.startswith("runtime/models/"):
            return "agentwatch/" + tail
        if tail.startswith("store/"):
            return "agentwatch/store/" + tail.split("/", 1)[1]
        if tail.startswith("events/"):
            return "agentwatch/events/*"
        return "agentwatch/" + tail
    if "/bench/" in filename:
        return "bench (the observer, the driver of the figure)"
    match = _SITE.search(filename)
    if match:
        package = match.group(1)
        if package in ("pydantic_ai", "pydantic_graph"):
            return package
        return package
    if "/asyncio/" in filename:
        return "stdlib asyncio"
    base = filename.rsplit("/", 1)[-1]
    return f"stdlib {base}"


def _by_category(stats: pstats.Stats, turns: int) -> list[tuple[str, float, float]]:
    """(category, own ms per turn, share) from the profiler's own times."""
    own: Counter[str] = Counter()
    total = 0.0
    for (filename, _line, name), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        own[_category(filename, name)] += tottime
        total += tottime
    return [(cat, seconds * 1000 / turns, seconds / total if total else 0.0) for cat, seconds in own.most_common()]


def _top(stats: pstats.Stats, key: str, count: int, turns: int) -> list[str]:
    """The `count` functions with the highest `key` ("cumulative" or "tottime"), as Markdown rows."""
    rows = []
    entries = stats.stats.items()  # type: ignore[attr-defined]
    index = 3 if key == "cumulative" else 2
    for (filename, line, name), values in sorted(entries, key=lambda item: item[1][index], reverse=True)[:count]:
        _cc, nc, tottime, cumtime, _callers = values
        where = _short(filename, line, name)
        rows.append(f"| `{where}` | {nc / turns:,.0f} | {tottime * 1000 / turns:.2f} | {cumtime * 1000 / turns:.2f} |")
    return rows


_REPO = f"{Path(__file__).resolve().parents[1]}/"
"""The checkout's own directory, cut from the file names of its modules outside `src` (the benchmarks)."""


def _short(filename: str, line: int, name: str) -> str:
    if filename == "~":
        return name
    for marker in ("/site-packages/", "/src/", "/lib/python3.11/", _REPO):
        if marker in filename:
            filename = filename.split(marker, 1)[1]
            break
    return f"{filename}:{line}:{name}"


# -- the run ------------------------------------------------------------------------------------------------


@dataclass
class _Side:
    wall_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)


async def _timed(side: _Side, call: Callable[[], Awaitable[Any]]) -> None:
    cpu = time.process_time()
    start = time.perf_counter()
    await call()
    side.wall_ms.append((time.perf_counter() - start) * 1000)
    side.cpu_ms.append((time.process_time() - cpu) * 1000)


def _median(samples: list[float]) -> float:
    ordered = sorted(samples)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


async def _profile(turns: int, synchronous: str, out: list[str]) -> dict[str, float]:
    script = ten_tool_turn()
    agent = bare_agent(script)
    with tempfile.TemporaryDirectory(prefix="agentwatch-profile-") as workdir:
        async with engine_side(Path(workdir) / "engine", script, synchronous=synchronous) as side:
            counter = WriteCounter(side)
            sessions = [await side.new_session() for _ in range(turns * 4 + 10)]
            fresh = iter(sessions)

            async def engine_turn() -> None:
                await side.turn(next(fresh))

            async def bare_turn() -> None:
                await BareChat(agent).turn()

            for _ in range(5):
                await engine_turn()
                await bare_turn()
            check = next(fresh)
            await side.turn(check)
            results = await side.tool_results(check)
            if results != 10:
                raise RuntimeError(f"the engine's turn made {results} tool calls, not 10")

            # 1. wall and CPU time, alternating.
            engine_t, bare_t = _Side(), _Side()
            for index in range(turns):
                pair = [(engine_t, engine_turn), (bare_t, bare_turn)]
                for target, call in pair if index % 2 == 0 else reversed(pair):
                    await _timed(target, call)

            # 2. counts, GC and CPU by thread over `turns` engine turns, then allocations over as many.
            gc.collect()
            counter.reset()
            events_before = side.watcher.events
            db = getattr(side.engine.store, "path", None)
            db_before = _file_bytes(db)
            meter = _GcMeter()
            loop_time = _LoopTime()
            threads_before = _thread_cpu()
            with meter.measuring(), loop_time.measuring():
                for _ in range(turns):
                    await engine_turn()
            threads_after = _thread_cpu()
            threads_used = {name: after - threads_before.get(name, 0.0) for name, after in threads_after.items()}
            writes, commits = counter.writes / turns, counter.commits / turns
            events = (side.watcher.events - events_before) / turns
            db_growth = (_file_bytes(db) - db_before) / turns
            gc.collect()
            objects_before = len(gc.get_objects())
            tracemalloc.start()
            for _ in range(turns):
                await engine_turn()
            traced, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            gc.collect()
            objects_after = len(gc.get_objects())

            bare_meter = _GcMeter()
            bare_loop_time = _LoopTime()
            with bare_meter.measuring(), bare_loop_time.measuring():
                for _ in range(turns):
                    await bare_turn()

            # 3. cProfile of both sides.
            engine_profile = cProfile.Profile()
            engine_profile.enable()
            for _ in range(turns):
                await engine_turn()
            engine_profile.disable()
            bare_profile = cProfile.Profile()
            bare_profile.enable()
            for _ in range(turns):
                await bare_turn()
            bare_profile.disable()
            process_objects = len(gc.get_objects())

    e_wall, b_wall = _median(engine_t.wall_ms), _median(bare_t.wall_ms)
    e_cpu, b_cpu = _median(engine_t.cpu_ms), _median(bare_t.cpu_ms)
    out.append(f"## Time per turn (synchronous={synchronous.upper()}, {turns} turns each way, alternating)\n")
    out.append("| side | wall p50 ms | CPU p50 ms (all threads) |")
    out.append("|---|---|---|")
    out.append(f"| agentwatch, watched, durable | {e_wall:.1f} | {e_cpu:.1f} |")
    out.append(f"| bare pydantic-ai `Agent.iter` | {b_wall:.1f} | {b_cpu:.1f} |")
    out.append(f"| ratio | {e_wall / b_wall:.2f}x | {e_cpu / b_cpu:.2f}x |\n")

    out.append("## Per turn counts (agentwatch)\n")
    out.append(f"- `store.write` calls: **{writes:.1f}**; SQLite COMMITs on the writer: **{commits:.1f}**")
    out.append(f"- events the ThreadObserver received: {events:.1f}")
    cpu_by_thread = ", ".join(
        f"{name} {seconds * 1000 / turns:.1f} ms"
        for name, seconds in sorted(threads_used.items(), key=lambda item: -item[1])
        if seconds > 0
    )
    out.append(f"- CPU by thread per turn (/proc, user + system): {cpu_by_thread}")
    out.append(f"- database file growth (main file + WAL): {db_growth:,.0f} bytes")
    out.append(
        f"- the event loop's thread per turn: {loop_time.line(turns)}; bare pydantic-ai: "
        f"{bare_loop_time.line(turns)} (neither: ready to run but waiting for the GIL or a CPU)"
    )
    out.append(f"- GC: {_gc_line(meter, turns)}; bare pydantic-ai: {_gc_line(bare_meter, turns)}")
    out.append(
        f"- tracemalloc over {turns} turns: {traced / 1024:,.0f} KiB still held after them, peak "
        f"{peak / 1024:,.0f} KiB; GC-tracked objects {objects_before:,} -> {objects_after:,} "
        f"(+{(objects_after - objects_before) / turns:,.0f} per turn kept); {process_objects:,} in the process\n"
    )

    for label, profile in (("agentwatch turn", engine_profile), ("bare pydantic-ai turn", bare_profile)):
        stats = pstats.Stats(profile, stream=io.StringIO())
        total_ms = sum(v[2] for v in stats.stats.values()) * 1000 / turns  # type: ignore[attr-defined]
        out.append(f"## {label}: own time by module (cProfile, loop thread, {total_ms:.1f} ms/turn profiled)\n")
        out.append("| module | own ms/turn | share |")
        out.append("|---|---|---|")
        for category, ms, share in _by_category(stats, turns):
            if share >= 0.003:
                out.append(f"| {category} | {ms:.2f} | {share:.1%} |")
        for key in ("cumulative", "tottime"):
            out.append(f"\n### {label}: top 25 by {key} (per turn)\n")
            out.append("| function | calls | own ms | cum ms |")
            out.append("|---|---|---|---|")
            out.extend(_top(stats, key, 25, turns))
        out.append("")
    return {"agentwatch": e_cpu, "bare": b_cpu}


def _thread_cpu() -> dict[str, float]:
    """CPU seconds (user + system) each live thread has used, by thread name (Linux `/proc`)."""
    ticks = os.sysconf("SC_CLK_TCK")
    used: dict[str, float] = {}
    for thread in threading.enumerate():
        try:
            fields = Path(f"/proc/self/task/{thread.native_id}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        name = re.sub(r"_\d+$", "", thread.name)  # reader threads together
        used[name] = used.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
    return used


def _gc_line(meter: _GcMeter, turns: int) -> str:
    parts = [
        f"gen{g} {meter.collections[g] / turns:.1f}/turn ({meter.seconds[g] * 1000 / turns:.2f} ms/turn)"
        for g in (0, 1, 2)
    ]
    return ", ".join(parts) + f", longest {meter.longest * 1000:.1f} ms"


def _file_bytes(path: Path | None) -> int:
    if path is None:
        return 0
    return sum(p.stat().st_size for p in (path, path.with_name(path.name + "-wal")) if p.exists())


# -- system calls (strace) ----------------------------------------------------------------------------------


async def _syscall_child(turns: int, synchronous: str, bare: bool = False) -> None:
    """Run turns between two marker writes, for `strace` to count (or py-spy to sample) what lies between."""
    script = ten_tool_turn()
    if bare:
        agent = bare_agent(script)
        for _ in range(turns + 3):
            await BareChat(agent).turn()
        return
    with tempfile.TemporaryDirectory(prefix="agentwatch-profile-") as workdir:
        async with engine_side(Path(workdir) / "engine", script, synchronous=synchronous) as side:
            sessions = [await side.new_session() for _ in range(turns + 3)]
            for session_id in sessions[:3]:
                await side.turn(session_id)
            counter = WriteCounter(side)
            marker = os.open(os.devnull, os.O_WRONLY)
            os.write(marker, _MARK_START)
            for session_id in sessions[3:]:
                await side.turn(session_id)
            os.write(marker, _MARK_END)
            os.close(marker)
            print(f"{_COMMITS} {counter.commits}")


_COMMITS = "commits-between-the-marks"
"""How the child tells its parent the COMMITs its turns made while traced (a line on its standard output)."""
_SYSCALL = re.compile(r"^\d+\s+(\w+)\((.*)\)\s+=\s+(-?\d+)")


def _syscalls(turns: int, synchronous: str, out: list[str]) -> None:
    strace = shutil.which("strace")
    if strace is None:
        out.append("(strace is not installed: no system-call counts)\n")
        return
    with tempfile.TemporaryDirectory() as scratch:
        trace = Path(scratch) / "trace"
        command = [
            strace, "-f", "-qq", "-e", "trace=write,pwrite64,writev,fsync,fdatasync", "-o", str(trace),
            sys.executable, "-m", "bench.profile", "--syscall-child", "--turns", str(turns),
            "--synchronous", synchronous,
        ]  # fmt: skip
        child = subprocess.run(command, check=True, capture_output=True, text=True)
        commits = next((line.split()[1] for line in child.stdout.splitlines() if line.startswith(_COMMITS)), None)
        calls: Counter[str] = Counter()
        written = 0
        inside = False
        for line in trace.read_text(errors="replace").splitlines():
            if _MARK_START.decode() in line:
                inside = True
                continue
            if _MARK_END.decode() in line:
                break
            match = _SYSCALL.match(line)
            if not inside or match is None:
                continue
            calls[match.group(1)] += 1
            if match.group(1) in ("write", "pwrite64", "writev") and int(match.group(3)) > 0:
                written += int(match.group(3))
    out.append(f"## System calls per turn (strace -f, {turns} turns, synchronous={synchronous.upper()})\n")
    for name, count in sorted(calls.items()):
        out.append(f"- `{name}`: {count / turns:.1f}")
    out.append(f"- bytes handed to write calls: {written / turns / 1024:,.1f} KiB")
    if commits is not None:
        # strace stops the process at every traced call: the turn's wait for a response to share the commit
        # of its request (`GROUP_COMMIT_SECONDS`) runs out more often than untraced, and the commits can double.
        out.append(
            f"- SQLite COMMITs per turn while traced: {int(commits) / turns:.1f} (tracing slows every system call, "
            "so more requests miss their response's commit than untraced: read the calls per commit, not per turn)"
        )
    out.append("")


# -- sampled stacks (py-spy) ---------------------------------------------------------------------------------

_RATE = 500
_FRAME = re.compile(r"^(?P<name>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
_TURN_FRAMES = frozenset({"_turn_loop", "_dispatch_loop", "turn", "bare_run", "_commit"})


def _frames(stack: str) -> tuple[str, list[tuple[str, str]]]:
    """The thread's name and (function, file) of each frame of a py-spy raw stack, outermost first."""
    parts = stack.split(";")
    thread = parts[0].split(": ", 1)[1] if ": " in parts[0] else parts[0]
    frames = []
    for text in parts[1:]:
        match = _FRAME.match(text)
        if match:
            frames.append((match.group("name"), match.group("file")))
    return thread, frames


def _ours(file: str) -> str | None:
    """`runtime/driver.py` for a file of ours, None for anything else."""
    if file.startswith("agentwatch/"):
        return file.removeprefix("agentwatch/")
    if "/agentwatch/" in file and "site-packages" not in file:
        return file.split("/agentwatch/", 1)[1]
    if file.startswith("bench/_turns.py"):
        return file  # the bare side's driver and the watcher; `bench/profile.py` only runs the loop
    return None


def _library(file: str) -> str:
    match = _SITE.search(file)
    if match:
        return match.group(1)
    if "/" in file:
        return file.split("/", 1)[0]
    return f"stdlib {file}" if file else "?"


@dataclass
class _Samples:
    """Samples of one run, attributed to our code."""

    total: int = 0
    threads: Counter[str] = field(default_factory=Counter)
    own: Counter[str] = field(default_factory=Counter)
    """Samples whose leaf is in our code, by `module:function`."""
    under: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Samples whose leaf is in a library, by (innermost frame of ours `module:function`, library)."""
    module_own: Counter[str] = field(default_factory=Counter)
    module_under: Counter[str] = field(default_factory=Counter)


def _attribute(path: Path) -> _Samples:
    samples = _Samples()
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        count = int(count_text)
        thread_name, frames = _frames(stack)
        if not frames:
            continue
        names = {name.rsplit(".", 1)[-1] for name, _file in frames}
        if names & {"_open_database", "create_session", "_find_and_load"}:
            continue  # start-up, session creation and imports: not the turns
        if thread_name.startswith("agentwatch-sqlite-writer"):
            thread = "store writer thread"
        elif thread_name.startswith("agentwatch-sqlite-reader"):
            thread = "store reader threads"
        elif names & _TURN_FRAMES or "_run_once" in names:
            thread = "event loop"
        else:
            continue  # imports and start-up on the main thread
        samples.total += count
        samples.threads[thread] += count
        innermost = None
        for name, file in reversed(frames):
            module = _ours(file)
            if module is not None:
                innermost = (module, name)
                break
        _leaf_name, leaf_file = frames[-1]
        if innermost is None:
            label = f"({thread}, no frame of ours)"
            samples.under[(label, _library(leaf_file))] += count
            samples.module_under[label] += count
            continue
        module, name = innermost
        key = f"{module}:{name}"
        if _ours(leaf_file) is not None:
            samples.own[key] += count
            samples.module_own[module] += count
        else:
            samples.under[(key, _library(leaf_file))] += count
            samples.module_under[module] += count
    return samples


def _sampled(turns: int, synchronous: str, cpu_ms: dict[str, float], out: list[str]) -> None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        out.append("(py-spy is not installed: no sampled stacks)\n")
        return
    runs: dict[str, _Samples] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for kind in ("agentwatch", "bare"):
            raw = Path(scratch) / f"{kind}.txt"
            command = [
                spy, "record", "--rate", str(_RATE), "--format", "raw", "--threads", "--gil", "--output",
                str(raw), "--", sys.executable, "-m", "bench.profile", "--syscall-child", "--turns", str(turns),
                "--synchronous", synchronous, *(["--bare"] if kind == "bare" else []),
            ]  # fmt: skip
            subprocess.run(command, check=True, capture_output=True)
            runs[kind] = _attribute(raw)
    ours, bare = runs["agentwatch"], runs["bare"]
    # Samples are shares of the time the GIL was held; they are scaled to each side's CPU time per turn
    # (measured above, in the profiling process), as py-spy's own clock drifts on a busy machine.
    a = cpu_ms["agentwatch"] / ours.total if ours.total else 0.0
    b = cpu_ms["bare"] / bare.total if bare.total else 0.0
    out.append(
        f"## Sampled stacks (py-spy, {_RATE} Hz, every thread, {turns} + 3 turns per side, each side in a process "
        f"of its own, only the thread holding the GIL sampled (so SQLite's C work with the GIL released and "
        f"fsync waits are left out), shares of those samples scaled to each side's CPU ms per turn measured "
        f"above: a rough split, good for ranking, not for adding up to the last ms). CPU p50 per turn: "
        f"agentwatch {cpu_ms['agentwatch']:.1f}, bare {cpu_ms['bare']:.1f}\n"
    )
    out.append("| thread | agentwatch ms/turn | bare ms/turn |")
    out.append("|---|---|---|")
    for thread in sorted(set(ours.threads) | set(bare.threads)):
        out.append(f"| {thread} | {ours.threads[thread] * a:.1f} | {bare.threads[thread] * b:.1f} |")
    out.append("\n### By module of ours: its own code, and the libraries it calls (innermost frame of ours)\n")
    out.append("| module | own ms/turn | libraries under it ms/turn |")
    out.append("|---|---|---|")
    modules = Counter(
        {m: ours.module_own[m] + ours.module_under[m] for m in set(ours.module_own) | set(ours.module_under)}
    )
    for module, _count in modules.most_common():
        out.append(f"| {module} | {ours.module_own[module] * a:.1f} | {ours.module_under[module] * a:.1f} |")
    out.append("\n(bare side, same table)\n")
    out.append("| module | own ms/turn | libraries under it ms/turn |")
    out.append("|---|---|---|")
    modules = Counter(
        {m: bare.module_own[m] + bare.module_under[m] for m in set(bare.module_own) | set(bare.module_under)}
    )
    for module, _count in modules.most_common():
        out.append(f"| {module} | {bare.module_own[module] * b:.1f} | {bare.module_under[module] * b:.1f} |")
    out.append("\n### agentwatch: top 30 functions of ours by own time (leaf in our code)\n")
    out.append("| function | ms/turn |")
    out.append("|---|---|")
    for key, count in ours.own.most_common(30):
        out.append(f"| `{key}` | {count * a:.2f} |")
    out.append("\n### agentwatch: top 30 (function of ours, library) by library time under it\n")
    out.append("| innermost function of ours | library | ms/turn |")
    out.append("|---|---|---|")
    for (key, library), count in ours.under.most_common(30):
        out.append(f"| `{key}` | {library} | {count * a:.2f} |")
    out.append("\n### bare: top 10 (function, library)\n")
    out.append("| innermost function of ours | library | ms/turn |")
    out.append("|---|---|---|")
    for (key, library), count in bare.under.most_common(10):
        out.append(f"| `{key}` | {library} | {count * b:.2f} |")
    out.append("")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--synchronous", choices=("full", "normal"), default="full")
    parser.add_argument("--strace", action="store_true", help="also count write and fsync system calls")
    parser.add_argument("--output", type=Path, help="write the Markdown here instead of printing it")
    parser.add_argument("--py-spy", action="store_true", help="also sample every thread's stacks with py-spy")
    parser.add_argument("--syscall-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.syscall_child:
        asyncio.run(_syscall_child(args.turns, args.synchronous, args.bare))
        return 0
    out: list[str] = []
    cpu_ms = asyncio.run(_profile(args.turns, args.synchronous, out))
    if args.py_spy:
        _sampled(args.turns, args.synchronous, cpu_ms, out)
    if args.strace:
        _syscalls(args.turns, args.synchronous, out)
    text = "\n".join(out) + "\n"
    if args.output:
        args.output.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
