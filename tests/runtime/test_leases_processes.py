"""Two (and more) engine processes on one store, SQLite file and PostgreSQL: one owner per turn.

A survivor engine and a victim engine run 50 chat sessions of slow tools, each watched by an observer agent,
and queue input on each other's sessions. Then victims are started one after another and each is SIGKILLed
at a random moment while its turns run (the next victim is already starting, so three engines are often
alive at once). Checked at the end, from the store and the tool-run log:

- no tool call ran twice (each call's label is logged with the pid of every run);
- no event of a turn follows that turn's `turn.ended`;
- every observed session has exactly one observer session;
- every turn a killed engine owned was continued by another engine within its lease's expiry plus 1 s
  (measured as the takeover note's time minus the lease's `expires_at`), and every session settled. A turn
  can be orphaned more than once: the engine that took it over may be the next one killed, before it wrote
  its takeover note; that turn's continuation is then measured from the lease the second dead owner left.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

import pytest

from agentwatch.events import RuntimeNotice, TurnEnded, TurnStarted
from agentwatch.store import SessionFilter, Store, connect_store
from tests.store.databases import postgres_schema

ROOT = Path(__file__).resolve().parents[2]
LEASE_SECONDS = 2.0
SESSIONS = 50
KILLS = int(os.environ.get("AGENTWATCH_TEST_LEASE_KILLS", "8"))
"""The issue asks for 20 kills; 8 keep each backend near 90 s on a busy machine (set 20 to run them all)."""
TAKEOVER_SLACK = 1.0
"""A dead owner's turn must continue within its lease's expiry plus this many seconds."""


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'agentwatch.db'}"
        return
    with postgres_schema(request.getfixturevalue("postgres_url")) as url:
        yield url


@dataclass
class Child:
    process: subprocess.Popen[str]
    errors: Path
    owner: str = ""
    ready: bool = False
    lines: list[str] = field(default_factory=list)

    @property
    def stdout(self) -> IO[str]:
        assert self.process.stdout is not None
        return self.process.stdout

    def read_until(self, word: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        for line in self.stdout:
            self.lines.append(line)
            key, _, value = line.strip().partition(" ")
            if key == "owner":
                self.owner = value
            if key == word:
                return
            if time.monotonic() > deadline:
                break
        errors = self.errors.read_text() if self.errors.exists() else ""
        pytest.fail(f"the engine process never printed {word!r}: {''.join(self.lines)}\n{errors[-3000:]}")


def start(url: str, root: Path, runs: Path, create: int, seed: int) -> Child:
    errors = root.parent / f"engine-{seed}.err"
    with errors.open("w") as stderr:  # a file, not a pipe: a pipe nobody reads would block its logging
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.runtime.lease_scenario", url, str(root), str(runs), str(create), str(seed)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    return Child(process, errors)


def kill(child: Child) -> None:
    """SIGKILL the engine process (when it still runs) and close its pipes."""
    if child.process.poll() is None:
        child.process.send_signal(signal.SIGKILL)
    child.process.wait(10)
    for stream in (child.process.stdin, child.process.stdout):
        if stream is not None:
            stream.close()


async def all_sessions(store: Store, where: SessionFilter | None = None) -> list[Any]:
    found, cursor = [], None
    while True:
        page = await store.list_sessions(where or SessionFilter(), limit=100, cursor=cursor)
        found += page.items
        if page.next_cursor is None:
            return found
        cursor = page.next_cursor


def tool_runs(runs: Path) -> Counter[str]:
    """How many times each tool call (by its label) started."""
    lines = runs.read_text().split("\n") if runs.exists() else []
    return Counter(line.split()[1] for line in lines if line.startswith("start "))


async def owned_running(store: Store, owner: str) -> dict[str, datetime]:
    """The running sessions whose lease `owner` holds, with each lease's expiry."""
    found: dict[str, datetime] = {}
    for session in await all_sessions(store, SessionFilter(status=["running"])):
        lease = await store.get_lease(session.id)
        if lease is not None and lease.owner == owner:
            found[session.id] = lease.expires_at
    return found


async def settled(store: Store) -> bool:
    sessions = await all_sessions(store)
    return all(s.status not in ("running", "awaiting_input") and s.pending_inputs == 0 for s in sessions)


async def wait_settled(store: Store, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not await settled(store):
        if time.monotonic() > deadline:
            sessions = await all_sessions(store)
            stuck = [(s.id, s.status, s.pending_inputs) for s in sessions if s.status == "running" or s.pending_inputs]
            pytest.fail(f"sessions did not settle: {stuck[:10]}")
        await asyncio.sleep(0.25)


Orphanings = dict[str, list[tuple[datetime, datetime]]]
"""Per session, each time a kill orphaned its turn: (the dead owner's lease expiry, the kill's time)."""


async def takeover_delays(store: Store, orphans: Orphanings) -> tuple[list[float], list[float]]:
    """For each time a turn was orphaned, seconds from the dead owner's lease expiry to the takeover (the
    `runtime.info` note the engine that takes the lease over records as it continues the turn) and to the
    continuation's `turn.started` (written with its first model response).

    When the session was orphaned again before any takeover note followed a kill, the engine that took the
    lease over died before writing its note (it held the lease, so the next kill found it the owner): that
    orphaning is measured by the next one, from the lease the second dead owner left."""
    taken, continued = [], []
    for session_id, orphanings in orphans.items():
        events = await store.read_events(session_id, types=["turn.started", "runtime.info"], limit=10_000)
        notes = [e.at for e in events if isinstance(e.payload, RuntimeNotice) and e.payload.source == "leases"]
        starts = [e.at for e in events if isinstance(e.payload, TurnStarted) and e.payload.trigger == "continue"]
        for index, (expires_at, killed_at) in enumerate(orphanings):
            note = min((at for at in notes if at >= killed_at), default=None)
            start = min((at for at in starts if at >= killed_at), default=None)
            assert note is not None and start is not None, f"the orphaned turn of {session_id} was never continued"
            later_kills = [killed for _, killed in orphanings[index + 1 :]]
            if later_kills and later_kills[0] <= note:
                continue  # its taker died before noting the takeover: the next orphaning measures it
            taken.append((note - expires_at).total_seconds())
            continued.append((start - expires_at).total_seconds())
    return taken, continued


async def check_invariants(store: Store, runs: Path) -> dict[str, Any]:
    starts = tool_runs(runs)
    doubled = {label: n for label, n in starts.items() if n > 1}
    assert doubled == {}, f"tool calls run more than once: {doubled}"

    sessions = await all_sessions(store)
    workers = [s for s in sessions if s.role == "worker"]
    observers = [s for s in sessions if s.is_observer]
    after_end = 0
    for session in sessions:
        ended: set[str] = set()
        for event in await store.read_events(session.id, limit=10_000):
            if event.turn_id is not None and event.turn_id in ended:
                after_end += 1
            if isinstance(event.payload, TurnEnded) and event.payload.outcome != "paused" and event.turn_id:
                ended.add(event.turn_id)
    assert after_end == 0, f"{after_end} events came after their turn's turn.ended"
    per_pairing = Counter(o.parent_id for o in observers)
    assert all(per_pairing[w.id] == 1 for w in workers), {w.id: per_pairing[w.id] for w in workers}
    assert all(s.status != "failed" for s in sessions), [(s.id, s.error) for s in sessions if s.status == "failed"]
    return {"tool_runs": sum(starts.values()), "workers": len(workers), "observers": len(observers)}


@pytest.mark.slow
async def test_engines_on_one_store_never_run_a_turn_twice_and_continue_a_dead_ones_turns(
    tmp_path: Path, store_url: str
) -> None:
    rng = random.Random(f"leases-{store_url[:6]}")
    root, runs = tmp_path / "project", tmp_path / "runs.log"
    root.mkdir()
    (root / "agentwatch.toml").write_text(
        f"[sessions]\nlease_seconds = {LEASE_SECONDS}\ncontinue_after_restart = 1000\n"
    )
    started = time.monotonic()
    store = await connect_store(store_url)
    survivor = start(store_url, root, runs, SESSIONS // 2, 1)
    children = [survivor]
    try:
        survivor.read_until("ready")
        # Both alive: 25 sessions each, and each queues input on the other's sessions.
        peer = start(store_url, root, runs, SESSIONS - SESSIONS // 2, 2)
        children.append(peer)
        peer.read_until("ready")
        await wait_settled(store, 90)
        both_alive = await check_invariants(store, runs)
        assert both_alive["workers"] == SESSIONS
        phase_one = time.monotonic() - started
        kill(peer)

        orphans: Orphanings = {}
        victim = start(store_url, root, runs, 2, 100)
        children.append(victim)
        victim.read_until("ready")
        for kill_number in range(KILLS):
            following = start(store_url, root, runs, 2, 101 + kill_number)  # warms up meanwhile
            children.append(following)
            await asyncio.sleep(rng.uniform(0.2, 1.2))
            kill(victim)
            killed_at = datetime.now(UTC) - timedelta(milliseconds=5)
            for session_id, expires_at in (await owned_running(store, victim.owner)).items():
                orphans.setdefault(session_id, []).append((expires_at, killed_at))
            following.read_until("ready")
            victim = following
        kill(victim)
        killed_at = datetime.now(UTC) - timedelta(milliseconds=5)
        for session_id, expires_at in (await owned_running(store, victim.owner)).items():
            orphans.setdefault(session_id, []).append((expires_at, killed_at))

        await wait_settled(store, 60)
        survivor.process.stdin.close()  # type: ignore[union-attr]
        survivor.read_until("closed")
        totals = await check_invariants(store, runs)
        delays, continued = await takeover_delays(store, orphans)
    finally:
        for child in children:
            kill(child)
        await store.close()
    assert orphans, "no kill caught a turn running"
    worst = max(delays)
    print(
        f"\n{store_url.split(':')[0]}: {KILLS} kills, {sum(map(len, orphans.values()))} orphaned turns "
        f"({len(delays)} measured), taken over after lease expiry: "
        f"max {worst:.2f} s, median {sorted(delays)[len(delays) // 2]:.2f} s; continuation's turn.started: max "
        f"{max(continued):.2f} s, median {sorted(continued)[len(continued) // 2]:.2f} s; "
        f"{totals['tool_runs']} tool runs, "
        f"{totals['workers']} sessions, {totals['observers']} observers; both-alive phase {phase_one:.1f} s, "
        f"total {time.monotonic() - started:.1f} s"
    )
    assert worst <= TAKEOVER_SLACK, f"an orphaned turn continued {worst:.2f} s after its lease expired"


SPREAD_SESSIONS = 12
"""The turns the killed engine of the spread test runs (the fleet trial's kill orphaned 11)."""


@pytest.mark.slow
async def test_a_killed_engines_turns_are_spread_over_the_surviving_engines_and_each_continued_once(
    tmp_path: Path, store_url: str
) -> None:
    """Once, on a fleet: all 11 turns one killed service owned went to one surviving service, whose first sweep
    took up to 100. Two survivors, then a victim running 12 turns is SIGKILLed: each survivor takes some of
    them, and each is continued exactly once (one takeover note, no tool call run twice, every session
    settled)."""
    root, runs = tmp_path / "project", tmp_path / "runs.log"
    root.mkdir()
    (root / "agentwatch.toml").write_text(
        f"[sessions]\nlease_seconds = {LEASE_SECONDS}\ncontinue_after_restart = 1000\n"
    )
    store = await connect_store(store_url)
    survivors = [start(store_url, root, runs, 0, seed) for seed in (1, 2)]
    children = list(survivors)
    try:
        for survivor in survivors:
            survivor.read_until("ready")
        victim = start(store_url, root, runs, SPREAD_SESSIONS, 3)
        children.append(victim)
        victim.read_until("ready")
        await asyncio.sleep(0.3)  # its turns are in their tools
        kill(victim)
        killed_at = datetime.now(UTC) - timedelta(milliseconds=5)
        orphans = await owned_running(store, victim.owner)
        await wait_settled(store, 60)
        for survivor in survivors:
            survivor.process.stdin.close()  # type: ignore[union-attr]
            survivor.read_until("closed")
        await check_invariants(store, runs)
        takers: Counter[str] = Counter()
        for session_id in orphans:
            events = await store.read_events(session_id, types=["runtime.info"], limit=10_000)
            notes = [e for e in events if isinstance(e.payload, RuntimeNotice) and e.payload.source == "leases"]
            taken = [e.payload.detail for e in notes if e.at >= killed_at and isinstance(e.payload.detail, dict)]
            assert len(taken) == 1, f"the orphaned turn of {session_id} was taken over {len(taken)} times"
            assert taken[0]["previous_owner"] == victim.owner
            takers[str(taken[0]["owner"])] += 1
    finally:
        for child in children:
            kill(child)
        await store.close()
    print(f"\n{store_url.split(':')[0]}: {len(orphans)} orphaned turns, taken over: {sorted(takers.values())}")
    assert len(orphans) >= 4, f"the kill caught only {len(orphans)} turns running"
    assert set(takers) == {survivor.owner for survivor in survivors}, f"not spread over the survivors: {takers}"
