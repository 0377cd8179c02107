"""Start-up figures: a cold `from agentwatch import Engine`, a cold `agentwatch --help`, and a cold run of every
command that runs no model, each in a new process.

Each command runs in a fresh interpreter with warm bytecode caches (as after an install: the caches are kept
in a directory of the run's own, so the repository gets none and a `PYTHONDONTWRITEBYTECODE` in the
environment cannot make every run compile the sources again), after one unmeasured run. A round runs every
command once, alternating with the baselines; the figure is the median wall time from spawning the process
to its exit, with the median CPU time (user + system) in the note.

- `start.import_engine`: `python -c "from agentwatch import Engine"`, against `python -c "from pydantic_ai
  import Agent"` (what a bare pydantic-ai program imports before it runs anything).
- `start.cli_help`: `agentwatch --help` (the installed console script), against a bare argparse program
  printing its help.
- `start.cli.<command>`: `agentwatch <command> ...` on a small SQLite store (a fresh copy of it for every run,
  so that an acting command finds what it acts on each time), against `python -c "import click"`.

`python -c pass` (the interpreter alone) is measured in the same rounds and named in every note.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

from bench._harness import FULL, QUICK, Context, Result, Target, percentile

__all__ = ["CLI_COMMANDS", "cold_start", "prepare_store"]

_BARE_HELP: Final = (
    "import argparse; parser = argparse.ArgumentParser(prog='tool', description='A command line tool.'); "
    "sub = parser.add_subparsers(); [sub.add_parser(name, help=name) for name in ('ls', 'get', 'tail', 'run')]; "
    "parser.parse_args(['--help'])"
)

CLI_LIMIT_MS: Final = 300.0
"""Target of every command that runs no model: a cold start of at most 0.3 s."""

CLI_CPU_LIMIT_MS: Final = 200.0
"""What the CPU twin of each `start.cli.*` figure is held to: at most 0.2 s of CPU, so that the 0.3 s wall holds
on a busy machine."""

CLI_COMMANDS: Final[dict[str, tuple[str, ...]]] = {
    "ls": ("ls",),
    "get": ("get", "asker"),
    "tail": ("tail", "asker"),
    "history": ("history", "asker"),
    "summary": ("summary",),
    "await": ("await", "asker", "--timeout", "0"),
    "agents_list": ("agents", "list"),
    "agents_check": ("agents", "check"),
    "db_info": ("db", "info"),
    "answer": ("answer", "asker", "yes"),
    "approve": ("approve", "deployer"),
    "deny": ("deny", "deployer", "--reason", "not now"),
    "send": ("send", "idler", "also this"),
    "stop": ("stop", "picker"),
    "escalate": ("escalate", "scout"),
    "delete": ("delete", "idler"),
    "take_over": ("take-over", "idler", "--by", "ada"),
    "hand_back": ("hand-back", "held"),
}
"""Figure name → the command's arguments. Each acts on the store `prepare_store` writes; every one of them succeeds
(exit 0) there, which `_Bench.run` checks."""

_TAKES_STORE: Final = frozenset(name for name, argv in CLI_COMMANDS.items() if argv[0] != "agents")


_GC_PROBE: Final = """
import asyncio, gc, json, sys, time

from agentwatch import AgentDefinition, Engine, Reply, ScriptedModel


def pause():
    times = []
    for _ in range(5):
        start = time.perf_counter()
        gc.collect()
        times.append((time.perf_counter() - start) * 1000)
    return sorted(times)[2]


async def main():
    role = AgentDefinition(name="probe", model="scripted:probe", instructions="Answer.")
    model = ScriptedModel([Reply("done")])
    async with Engine.open(sys.argv[1], definitions=[role], extensions=[], models={"probe": model}) as engine:
        await engine.task("probe", "hello")
        frozen, tracked = gc.get_freeze_count(), len(gc.get_objects())
        pause_frozen = pause()
        gc.unfreeze()
        everything = len(gc.get_objects())
        pause_everything = pause()
    print(json.dumps([frozen, tracked, everything, pause_frozen, pause_everything]))


asyncio.run(main())
"""
"""Opens an engine (a scripted role), runs one turn, then times a full collection as the engine left it (what
start-up allocated frozen) and with everything unfrozen again; prints the counts and both medians."""


@dataclass(slots=True)
class _Runs:
    wall_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)

    @property
    def wall(self) -> float:
        return percentile(self.wall_ms, 50)

    @property
    def cpu(self) -> float:
        return percentile(self.cpu_ms, 50)


@dataclass(slots=True)
class _Case:
    name: str
    command: list[str]
    runs: _Runs = field(default_factory=_Runs)
    store: Path | None = None
    """A store this command changes: a fresh copy of the template is put there before each run."""


class _Bench:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.template = workdir / "template.db"
        self.env = _env(workdir / "pycache")

    def run(self, case: _Case, runs: _Runs | None = None) -> None:
        if case.store is not None:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{case.store}{suffix}").unlink(missing_ok=True)
            shutil.copyfile(self.template, case.store)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(case.command, cwd=self.workdir, capture_output=True, text=True, check=False, env=self.env)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(case.command)} exited {done.returncode}: {(done.stderr or done.stdout).strip()[-500:]}"
            )
        target = case.runs if runs is None else runs
        target.wall_ms.append(wall * 1000)
        target.cpu_ms.append(((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) * 1000)


def _env(pycache: Path) -> dict[str, str]:
    # No variable of ours steers what the commands load; bytecode is cached where the run keeps its files.
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("AGENTWATCH_") and name != "PYTHONDONTWRITEBYTECODE"
    }
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def _script() -> Path | None:
    script = Path(sys.executable).with_name("agentwatch")
    return script if script.exists() else None


def _cli(*argv: str) -> list[str]:
    script = _script()
    return [str(script), *argv] if script is not None else [sys.executable, "-m", "agentwatch", *argv]


async def prepare_store(store_url: str) -> None:
    """A store with agents that each command can act on: a question (asker), a choice (picker), an approval
    (deployer), a question held for the parent (scout, under lead), an idle agent (idler) and one a person
    took over (held)."""
    from agentwatch.events import NewEvent, TurnId, UserMessage
    from agentwatch.store import RequestDraft, SessionDraft, SessionPatch, Write, open_store

    async with open_store(store_url) as store:

        async def waiting(name: str, request: RequestDraft, parent_id: str | None = None) -> None:
            session = await store.create_session(SessionDraft(name=name, role="coder", parent_id=parent_id))
            await store.write(
                Write(
                    session.id,
                    events=[NewEvent(UserMessage(text=f"A task for {name}."), turn_id=TurnId("trn_bench"))],
                    session=SessionPatch(status="awaiting_input", current_turn_id="trn_bench"),
                    requests_open=[request.model_copy(update={"turn_id": "trn_bench"})],
                )
            )

        lead = await store.create_session(SessionDraft(name="lead", role="coder"))
        await store.create_session(SessionDraft(name="idler", role="coder"))
        held = await store.create_session(SessionDraft(name="held", role="coder"))
        since = datetime.now(UTC).isoformat()
        await store.write(Write(held.id, session=SessionPatch(interception={"by": "ada", "since": since})))
        await waiting("asker", RequestDraft(kind="question", summary="Which database?", questions=["Which one?"]))
        await waiting(
            "picker",
            RequestDraft(kind="choice", summary="Where?", questions=["Where?"], options=["dev", "staging"]),
        )
        await waiting("deployer", RequestDraft(kind="approval", summary="approve deploy()"))
        later = datetime.now(UTC) + timedelta(hours=1)
        await waiting(
            "scout",
            RequestDraft(kind="question", summary="Which?", questions=["Which?"], waits_on="parent", deliver_at=later),
            parent_id=lead.id,
        )


def _cases(bench: _Bench) -> list[tuple[_Case, _Case, float, float, str, str]]:
    """(ours, baseline, wall target ms, CPU target ms, what, against) for every figure."""
    python = sys.executable
    click_baseline = _Case("click", [python, "-c", "import click"])
    cases = [
        (
            _Case("start.import_engine", [python, "-c", "from agentwatch import Engine"]),
            _Case("pydantic_ai", [python, "-c", "from pydantic_ai import Agent"]),
            500.0,
            500.0,
            'python -c "from agentwatch import Engine"',
            'python -c "from pydantic_ai import Agent"',
        ),
        (
            _Case("start.cli_help", _cli("--help")),
            _Case("argparse", [python, "-c", _BARE_HELP]),
            300.0,
            300.0,
            "agentwatch --help",
            "a bare argparse program with four sub-commands printing its --help",
        ),
    ]
    for name, argv in CLI_COMMANDS.items():
        store = bench.workdir / f"{name}.db"
        command = _cli(*argv, "--store", f"sqlite:///{store}") if name in _TAKES_STORE else _cli(*argv)
        cases.append(
            (
                _Case(f"start.cli.{name}", command, store=store if name in _TAKES_STORE else None),
                click_baseline,
                CLI_LIMIT_MS,
                CLI_CPU_LIMIT_MS,
                f"agentwatch {' '.join(argv)}",
                'python -c "import click"',
            )
        )
    return cases


async def cold_start(ctx: Context) -> list[Result]:
    """Cold import of the engine, cold `agentwatch --help` and a cold run of every command that runs no model,
    each beside a bare baseline run in the same rounds."""
    count = 5 if ctx.sizes is FULL else 3 if ctx.sizes is QUICK else 1
    workdir = ctx.workdir / "start"
    (workdir / "agents").mkdir(parents=True, exist_ok=True)
    (workdir / "agents" / "coder.md").write_text("---\nmodel: openai:gpt-4o\n---\nYou write code.\n")
    bench = _Bench(workdir)
    await prepare_store(f"sqlite:///{bench.template}")
    cases = _cases(bench)
    bare = _Case("pass", [sys.executable, "-c", "pass"])
    baselines = [*{id(case[1]): case[1] for case in cases}.values(), bare]
    everything = [case[0] for case in cases] + baselines
    ctx.say(f"start: {len(everything)} commands, {count} round(s) of fresh processes, ours and baselines alternating")
    if ctx.sizes is FULL or ctx.sizes is QUICK:  # unmeasured: the bytecode caches are written
        for case in everything:
            await asyncio.to_thread(bench.run, case, _Runs())
    # A round runs every command once, with a baseline after each (taking turns), so every baseline runs
    # several times spread over the round; every other round runs in reverse order.
    order: list[_Case] = []
    for index, (ours, *_) in enumerate(cases):
        order += [ours, baselines[index % len(baselines)]]
    for index in range(count):
        for case in order if index % 2 == 0 else reversed(order):
            await asyncio.to_thread(bench.run, case)
    results: list[Result] = []
    for ours, baseline, limit, cpu_limit, what, against in cases:
        note = (
            f"median wall time of {count} fresh processes of `{what}`, spawn to exit (CPU user+system "
            f"{ours.runs.cpu:.0f} ms); baseline: `{against}` (wall {baseline.runs.wall:.0f} ms, CPU "
            f"{baseline.runs.cpu:.0f} ms); `python -c pass`: wall {bare.runs.wall:.0f} ms, CPU {bare.runs.cpu:.0f} ms; "
            "warm bytecode caches, rounds alternating"
        )
        target = Target("value", "<=", limit)
        results.append(Result(ours.name, "ms", ours.runs.wall, baseline.runs.wall, "lower", target, note))
        held = "the wall time's target held to it" if cpu_limit == limit else f"held to {cpu_limit:.0f} ms of CPU"
        cpu_note = f"CPU time (user+system) of the same processes; {held}; {note}"
        cpu_target = Target("value", "<=", cpu_limit)
        results.append(
            Result(f"{ours.name}.cpu", "ms", ours.runs.cpu, baseline.runs.cpu, "lower", cpu_target, cpu_note)
        )
    results.append(await asyncio.to_thread(_gc_pause, bench))
    return results


def _gc_pause(bench: _Bench) -> Result:
    """`start.gc.full_collection`: a full garbage collection once an engine has started and run a turn."""
    store = bench.workdir / "gc.db"
    command = [sys.executable, "-c", _GC_PROBE, f"sqlite:///{store}"]
    done = subprocess.run(command, cwd=bench.workdir, capture_output=True, text=True, check=True, env=bench.env)
    frozen, tracked, everything, pause_frozen, pause_everything = json.loads(done.stdout.splitlines()[-1])
    note = (
        f"median of 5 full collections (gc.collect()) in a process that opened an engine (scripted model, "
        f"default SQLite store) and ran one turn: {frozen:,} objects frozen at start-up (gc.freeze() in "
        f"Engine.open), {tracked:,} left for the collector; baseline: the same process after gc.unfreeze() "
        f"({everything:,} objects scanned)"
    )
    return Result(
        "start.gc.full_collection", "ms", pause_frozen, pause_everything, "lower", Target("value", "<=", 5.0), note
    )
