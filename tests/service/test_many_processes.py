"""Many service processes on one PostgreSQL store and one Redis live ring.

Two real `agentwatch serve` processes (A and B) on a fresh PostgreSQL schema and Redis, with a short lease.
50 sessions of a worker whose turns call a slow tool are created and given a prompt through both processes'
HTTP API; WebSocket watchers attach through B, to a session created on B and to one created on A (whose
turn runs in A, so its events reach B only through the Redis ring). A is SIGKILLed while its turns run,
then started again. Checked from the store, the tool-run log and the watchers' frames:

- every session settles and every turn ends (`completed`; a tool call cut off by the kill is reported
  `interrupted` and not run again);
- no tool call ran twice (each call id is logged with the pid of every run);
- each session's events have contiguous seqs (none lost or doubled) and none follows its turn's `turn.ended`;
- each watcher saw every event of its session once: the snapshot's history plus the durable events it was
  sent are exactly the store's log, in order, with no duplicate.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from agentwatch.events import Event, RuntimeNotice, ToolResult, TurnEnded, TurnStarted
from agentwatch.store import SessionFilter, SessionRecord, Store, connect_store
from tests.service.clients import ws_url
from tests.store.databases import postgres_schema

ROOT = Path(__file__).resolve().parents[2]
SESSIONS = 50
FOLLOW_UPS = 10
"""Sessions given a second prompt through the restarted process."""
LEASE_SECONDS = 2.0

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]


class Service:
    """One `serve` process; stderr goes to a file (a pipe nobody reads would block its logging)."""

    def __init__(self, name: str, store_url: str, live_url: str, tmp_path: Path, runs: Path) -> None:
        self.errors = tmp_path / f"serve-{name}.err"
        with self.errors.open("w") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.service.many_main", store_url, live_url, str(tmp_path), str(runs)],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env={**os.environ, "PYTHONPATH": str(ROOT), "AGENTWATCH_LEASE_SECONDS": str(LEASE_SECONDS)},
            )
        self.base = ""

    async def started(self, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(r"serving on (http://\S+)", self.errors.read_text())
            if found:
                self.base = found.group(1)
                return self.base
            if self.process.poll() is not None:
                break
            await asyncio.sleep(0.05)
        pytest.fail(f"the service never served: {self.errors.read_text()[-3000:]}")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)


async def create(http: httpx.AsyncClient) -> str:
    created = await http.post("/api/tools/agent_create", json={"role": "worker"})
    assert created.status_code == 200, created.text
    return str(created.json()["agentId"])


async def create_and_enqueue(http: httpx.AsyncClient) -> str:
    agent_id = await create(http)
    await enqueue(http, agent_id)
    return agent_id


async def enqueue(http: httpx.AsyncClient, agent_id: str) -> None:
    queued = await http.post("/api/tools/agent_enqueue", json={"agentId": agent_id, "prompt": "go"})
    assert queued.status_code == 200, queued.text


class Watcher:
    """A WebSocket client attached to one session: the snapshot's history and every event frame it gets."""

    def __init__(self, base: str, agent_id: str) -> None:
        self.agent_id = agent_id
        self.history: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.attached = asyncio.Event()
        self.task = asyncio.create_task(self._run(base))

    async def _run(self, base: str) -> None:
        import json

        async with connect(ws_url(base, self.agent_id), max_size=2**24) as connection:
            async for message in connection:
                frame = json.loads(message)
                if frame["kind"] == "snapshot":
                    self.history = frame["history"]
                    self.attached.set()
                elif frame["kind"] == "event":
                    self.events.append(frame["event"])
                else:
                    raise AssertionError(f"the watcher was sent {frame}")

    def durable(self) -> list[tuple[int, str]]:
        """(seq, id) of every durable event seen: the snapshot's history, then the events sent."""
        return [(e["seq"], e["id"]) for e in [*self.history, *self.events] if e["sub"] == 0]

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def all_sessions(store: Store) -> list[SessionRecord]:
    found: list[SessionRecord] = []
    cursor = None
    while True:
        page = await store.list_sessions(SessionFilter(), limit=100, cursor=cursor)
        found += page.items
        if page.next_cursor is None:
            return found
        cursor = page.next_cursor


async def until(condition: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting: {what}")
        await asyncio.sleep(0.2)


def tool_starts(runs: Path) -> list[tuple[str, int]]:
    lines = runs.read_text().splitlines() if runs.exists() else []
    return [(line.split()[1], int(line.split()[2])) for line in lines if line.startswith("start ")]


def check_log(session: SessionRecord, events: list[Event]) -> Counter[str]:
    """Contiguous seqs, no event after its turn's end, every started turn ended; returns the outcomes."""
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), f"{session.id}: seqs not contiguous"
    ended: set[str] = set()
    started: set[str] = set()
    outcomes: Counter[str] = Counter()
    for event in events:
        assert event.turn_id is None or event.turn_id not in ended, f"{session.id}: an event after turn.ended"
        if isinstance(event.payload, TurnStarted) and event.turn_id:
            started.add(event.turn_id)
        if isinstance(event.payload, TurnEnded) and event.payload.outcome != "paused" and event.turn_id:
            ended.add(event.turn_id)
            outcomes[event.payload.outcome] += 1
    assert started <= ended, f"{session.id}: turns that never ended: {started - ended}"
    return outcomes


async def test_two_services_share_the_work_and_a_killed_ones_turns_continue_on_the_other(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> None:
    runs = tmp_path / "runs.log"
    services: list[Service] = []
    with postgres_schema(postgres_url) as store_url:
        store = await connect_store(store_url)
        try:
            a = Service("a", store_url, redis_url, tmp_path, runs)
            b = Service("b", store_url, redis_url, tmp_path, runs)
            services += [a, b]
            await asyncio.gather(a.started(), b.started())
            async with (
                httpx.AsyncClient(base_url=a.base, timeout=30) as on_a,
                httpx.AsyncClient(base_url=b.base, timeout=30) as on_b,
            ):
                # Watchers through B, attached before the first turn: of a session B runs, and of one A runs
                # (whose events reach B through the Redis ring until B takes the turn over).
                local_id = await create(on_b)
                local = Watcher(b.base, local_id)
                await asyncio.wait_for(local.attached.wait(), 10)
                await enqueue(on_b, local_id)
                ids = [local_id]
                for index in range(1, SESSIONS - 1):
                    ids.append(await create_and_enqueue(on_a if index % 2 else on_b))
                remote_id = await create(on_a)
                remote = Watcher(b.base, remote_id)
                await asyncio.wait_for(remote.attached.wait(), 10)
                await enqueue(on_a, remote_id)
                ids.append(remote_id)

                async def remote_runs_a_tool() -> bool:
                    events = await store.read_events(remote_id, types=["tool.call"], limit=10)
                    return bool(events) and any(pid == a.process.pid for _, pid in tool_starts(runs))

                await until(remote_runs_a_tool, 30, "process A runs the watched session's tool")
                await asyncio.sleep(0.3)
                a.kill()  # mid-turn: its leases expire and B takes its turns over
                restarted = Service("a2", store_url, redis_url, tmp_path, runs)
                services.append(restarted)
                await restarted.started()
                async with httpx.AsyncClient(base_url=restarted.base, timeout=30) as on_a2:
                    for agent_id in ids[:FOLLOW_UPS]:  # new work through the restarted process
                        await enqueue(on_a2, agent_id)

                async def settled() -> bool:
                    sessions = await all_sessions(store)
                    return len(sessions) == SESSIONS and all(
                        s.status not in ("running", "awaiting_input") and s.pending_inputs == 0 for s in sessions
                    )

                await until(settled, 90, "every session settles")

                async def watched_everything() -> bool:
                    for watcher in (local, remote):
                        last = (await store.get_session(watcher.agent_id)).last_seq
                        seen = watcher.durable()
                        if not seen or seen[-1][0] < last:
                            return False
                    return True

                await until(watched_everything, 15, "the watchers see the last event")
                await asyncio.sleep(0.3)  # a doubled event would arrive now
                for watcher in (local, remote):
                    await watcher.stop()
                async with httpx.AsyncClient(base_url=restarted.base, timeout=30) as on_a2:  # the same answers
                    for agent_id in (local_id, remote_id, ids[2]):
                        for tool in ("agent_get", "agent_tail"):
                            body = {"id": agent_id}
                            answers = [await on.post(f"/api/tools/{tool}", json=body) for on in (on_a2, on_b)]
                            assert [r.status_code for r in answers] == [200, 200], answers[0].text
                            on_each = [r.json() for r in answers]
                            differ = {k for k in on_each[0] if on_each[0][k] != on_each[1].get(k)}
                            assert differ <= {"ageSeconds"}, {k: (on_each[0][k], on_each[1].get(k)) for k in differ}

            starts = tool_starts(runs)
            doubled = {label: n for label, n in Counter(label for label, _ in starts).items() if n > 1}
            assert doubled == {}, f"tool calls run more than once: {doubled}"
            pids = Counter(pid for _, pid in starts)
            assert all(pids[p.process.pid] > 0 for p in services)  # every process took work
            outcomes: Counter[str] = Counter()
            sessions = await all_sessions(store)
            taken_over = cut_off = 0
            remote_events = await store.read_events(remote_id, types=["runtime.info"], limit=100)
            # the watched session's turn was cut off in A and continued by another process
            assert any(isinstance(e.payload, RuntimeNotice) and e.payload.source == "leases" for e in remote_events)
            for session in sessions:
                assert session.status != "failed", (session.id, session.error)
                events = await store.read_events(session.id, limit=10_000)
                outcomes += check_log(session, events)
                taken_over += any(isinstance(e.payload, RuntimeNotice) and e.payload.source == "leases" for e in events)
                cut_off += sum(isinstance(e.payload, ToolResult) and e.payload.status == "interrupted" for e in events)
            print(f"tool runs {len(starts)} by pid {dict(pids)}; taken over {taken_over}; cut off {cut_off}")
            assert set(outcomes) == {"completed"}, outcomes
            assert outcomes["completed"] == SESSIONS + FOLLOW_UPS
            assert taken_over, "no turn of the killed process was continued by another one"
            assert cut_off, "the kill cut off no tool call"
            for watcher in (local, remote):
                log = [(e.seq, e.id) for e in await store.read_events(watcher.agent_id, limit=10_000)]
                assert watcher.durable() == log, f"the watcher of {watcher.agent_id} did not see the log once"
        finally:
            for service in services:
                service.kill()
            await store.close()
