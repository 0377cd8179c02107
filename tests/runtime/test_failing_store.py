"""A failing store never strands a turn: a real SQLite store on a small file system that fills up mid-turn.

While the disk is full every turn ends: `failed` with the store's own error once that can be written, or
left `running` for the restart rule (its lease no longer held, so it is continued once it can be), never
`running` with an owner that gave up; the turn loop never dies with "Task exception was never retrieved".
Once space is freed, writes resume, every turn ends, and no event a watcher saw is missing from the store.

The small file system is a tmpfs mounted for the test (it needs the right to mount; elsewhere it skips).
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentwatch.config import load_config
from agentwatch.errors import StoreError
from agentwatch.events import Event
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.store import InputDraft, SessionFilter, Write
from tests.runtime.support import Scripted, role

SESSIONS = 12
RESULT = "x" * 40_000
"""Each tool result: a few turns of these fill the file system."""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2560k,mode=0700", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small file system here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def grow(mount: Path) -> None:
    subprocess.run(["mount", "-o", "remount,size=64m", str(mount)], check=True)


def script(ctx: Any) -> Any:
    calls = sum(entry.kind == "tool_result" for entry in ctx.transcript)
    if calls < 3:
        return CallTool("big_tool", {"label": uuid.uuid4().hex})
    return Reply("done")


class Seen:
    """Every durable event a watcher saw, by session."""

    def __init__(self) -> None:
        self.events: dict[str, list[tuple[int, str]]] = {}

    def on_event(self, thread_id: str, event: Event) -> None:
        if event.sub == 0:
            self.events.setdefault(thread_id, []).append((event.seq, event.id))

    def on_subscribe(self, thread_id: str, request: object, snapshot: object) -> None:
        pass


@pytest.mark.slow
@pytest.mark.parametrize("free_soon", [True, False], ids=["freed-soon", "full-for-long"])
async def test_a_full_disk_ends_every_turn_and_writes_resume_once_space_is_freed(
    small_disk: Path, tmp_path: Path, scripted: Scripted, caplog: pytest.LogCaptureFixture, free_soon: bool
) -> None:
    model = scripted(f"full-disk-{free_soon}", ScriptedModel(function=script))

    async def big_tool(label: str) -> str:
        await asyncio.sleep(0.05)
        return f"{label} {RESULT}"

    config = load_config(tmp_path, env={})
    config = config.model_copy(update={"sessions": config.sessions.model_copy(update={"lease_seconds": 2.0})})
    seen = Seen()
    caplog.set_level(logging.WARNING)
    async with Engine.open(
        f"sqlite:///{small_disk / 'aw.db'}",
        config=config,
        definitions=[role("filler", model, tools=("big_tool",))],
        tools=[big_tool],
    ) as engine:
        engine.start_with_observer(lambda _thread_id: seen)
        ids = [(await engine.create("filler")).id for _ in range(SESSIONS)]
        errors: list[str] = []
        for session_id in ids:
            try:
                await engine.enqueue(session_id, "fill it")
            except StoreError as exc:  # the disk filled up already: refused, and nothing was acknowledged
                errors.append(exc.message)

        drivers = [await engine.driver(i) for i in ids]
        assert all("full" in error for error in errors), errors
        if free_soon:
            # Space comes back while the failing turns still try to record their end: they end `failed`.
            await until(lambda: "failed on a store fault" in caplog.text)
            await asyncio.sleep(0.3)
        else:
            # Full for long: every turn loop gives up; each turn is ended or left for the restart rule.
            await until(lambda: not any(driver.turn_running for driver in drivers))
            full = [await engine.store.get_session(i) for i in ids]
            stranded = [s.id for s in full if s.status == "running" and engine.leases.holds(s.id)]
            assert stranded == [], "a running turn is held by an engine whose loop gave up on it"
            assert any(s.status in ("failed", "running") for s in full), "the disk never filled"
            assert all("full" in (s.error or "") for s in full if s.status == "failed")
        grow(small_disk)
        deadline = time.monotonic() + 40
        while True:
            sessions = (await engine.store.list_sessions(SessionFilter(ids=ids), limit=100)).items
            if all(
                s.status in ("completed", "failed") or (s.status == "idle" and not s.pending_inputs) for s in sessions
            ):
                break
            assert time.monotonic() < deadline, [(s.id, s.status) for s in sessions if s.status != "completed"]
            await asyncio.sleep(0.2)
        # Writes resume: a new turn runs to its end.
        fresh = await engine.task("filler", "once more", timeout=30)
        assert fresh["status"] == "completed"
        for session_id, events in seen.events.items():
            stored = {e.seq: e.id for e in await engine.store.read_events(session_id, limit=10_000)}
            assert all(stored.get(seq) == event_id for seq, event_id in events), "a watched event was lost"
    failures = [s for s in sessions if s.status == "failed"]
    assert all("full" in (s.error or "") for s in failures), [s.error for s in failures]
    continued = sum(s.turn_attempts > 1 or s.status == "completed" for s in sessions)
    if free_soon:
        assert failures, "no turn recorded its failure once space came back"
    assert "Task exception was never retrieved" not in caplog.text
    print(
        f"\nfull disk ({'freed soon' if free_soon else 'full for long'}): {len(errors)} inputs refused; "
        f"{len(failures)} turns ended failed with the store's error, {continued} completed (some continued after "
        "the restart rule)"
    )


async def until(condition: Any, timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_input_waiting_when_the_turn_loop_gave_up_on_a_fault_runs_once_the_store_works(
    open_engine: Any,
) -> None:
    """A turn loop that failed on a store fault looks for work again a moment later: input stored before the fault
    (here: its lease take failed) is not left waiting for a kick that never comes."""
    model = ScriptedModel([[Reply("Done.")]])
    async with open_engine(role("worker", "scripted:once"), models={"once": model}) as engine:
        session = await engine.create("worker")
        store = engine.store
        await store.write(Write(session.id, inputs_add=[InputDraft(text="go")]))  # stored; no loop runs it yet
        real_take = store.take_lease
        failures = [StoreError("the store is unavailable (injected)")]

        async def failing_once(*args: Any, **kwargs: Any) -> Any:
            if failures:
                raise failures.pop()
            return await real_take(*args, **kwargs)

        store.take_lease = failing_once  # type: ignore[method-assign]
        (await engine.driver(session.id)).kick()  # the loop's lease take fails: it gives up on the fault
        deadline = time.monotonic() + 10
        while (current := await store.get_session(session.id)).status != "completed" or current.pending_inputs:
            assert time.monotonic() < deadline, (current.status, current.pending_inputs)
            await asyncio.sleep(0.1)
        assert failures == []
