"""Fault tests: SIGKILL a real engine process in the middle of a pairing; the next engine re-arms it, or, when a
person stopped the observer meanwhile, leaves it stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agentwatch.events import UserMessage
from agentwatch.runtime.engine import Engine
from agentwatch.store import connect_store
from tests.watchers.pairing_scenario import setup
from tests.watchers.support import eventually, observers_of, states, states_reached

ROOT = Path(__file__).resolve().parents[2]


def run_child_until_ready(db: Path) -> dict[str, str]:
    """Start the scenario's engine and SIGKILL it while its second turn's tool runs; returns what it printed."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.watchers.pairing_scenario", str(db)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        # A short lease: the killed engine's turns are free to continue a second after the kill.
        env={**os.environ, "PYTHONPATH": str(ROOT), "AGENTWATCH_LEASE_SECONDS": "1"},
    )
    assert process.stdout is not None
    lines: dict[str, str] = {}
    try:
        for line in process.stdout:
            key, _, value = line.strip().partition(" ")
            lines[key] = value
            if key == "ready":
                break
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        process.stdout.close()
    return lines


def stop_on_the_command_line(db: Path, agent_id: str) -> None:
    """`agentwatch stop AGENT` on the store, in a process of its own, as a person would run it."""
    argv = [sys.executable, "-m", "agentwatch", "stop", agent_id, "--store", f"sqlite:///{db}", "--server", "none"]
    done = subprocess.run(argv, cwd=db.parent, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
async def test_a_pairing_killed_mid_turn_is_re_armed_on_the_same_observer(tmp_path: Path) -> None:
    db = tmp_path / "agentwatch.db"
    lines = run_child_until_ready(db)
    assert "ready" in lines, lines
    session_id, observer_id = lines["session"], lines["observer"]

    definitions, tools = setup(0.0)
    async with Engine.open(
        f"sqlite:///{db}", agents_dir=tmp_path / "none", root=tmp_path, definitions=definitions, tools=tools
    ) as engine:
        done, _ = await engine.wait(session_id, 20)
        assert done.status == "idle" and (done.last_text or "").startswith("done with [agentwatch]")
        received = await eventually(lambda: _digests(engine, observer_id, 2))
        assert "was continued" in received[1] or "cut off" in received[1]
        # The whole turn, the part the killed engine ran included (once the digest began at the continuation).
        start, call = received[1].find("<user-message>\nbuild\n"), received[1].find('<tool-call name="slow_tool">')
        assert 0 < start < call < received[1].find("is now continued"), received[1]
        assert [o.id for o in await observers_of(engine, session_id)] == [observer_id]
        assert await states(engine, session_id) == [
            ("armed", "observer started"),
            ("armed", "reattached to its observer"),
        ]
        inputs = await engine.store.list_inputs(observer_id, pending_only=False)
        assert sum(i.origin is not None and i.origin.ref == "observer-framing" for i in inputs) == 1
        # The continued turn's note names no observer as a sub-agent of the agent it watches.
        messages = [e.payload for e in await engine.store.read_events(session_id, limit=1000)]
        (note,) = [m.text for m in messages if isinstance(m, UserMessage) and "sub-agents" in m.text]
        assert "You have no sub-agents still running." in note and observer_id not in note


async def _digests(engine: Engine, observer_id: str, count: int) -> list[str]:
    inputs = await engine.store.list_inputs(observer_id, pending_only=False)
    digests = [i.text for i in inputs if i.origin is not None and i.origin.ref == "observer-digest"]
    return digests if len(digests) >= count else []


@pytest.mark.slow
async def test_an_observer_stopped_while_its_engine_is_down_is_not_brought_back(tmp_path: Path) -> None:
    """The engine that held the pairing was killed; a person then stopped the observer from the command line
    (that process holds no pairing, so it wrote no tombstone). The next engine finds the observer stopped: it
    writes the tombstone and leaves the pairing blocked, instead of reattaching to it or starting another."""
    db = tmp_path / "agentwatch.db"
    lines = run_child_until_ready(db)
    assert "ready" in lines, lines
    session_id, observer_id = lines["session"], lines["observer"]
    stop_on_the_command_line(db, observer_id)
    store = await connect_store(f"sqlite:///{db}")
    try:
        ref = await store.get_observer_ref(session_id)
        assert ref is not None and not ref.stopped  # the tombstone is left to the engine that arms the pairing
    finally:
        await store.close()

    definitions, tools = setup(0.0)
    async with Engine.open(
        f"sqlite:///{db}", agents_dir=tmp_path / "none", root=tmp_path, definitions=definitions, tools=tools
    ) as engine:
        done_turn, _ = await engine.wait(session_id, 20)
        assert done_turn.status == "idle"
        found = await eventually(lambda: states_reached(engine, session_id, 2))
        assert found == [
            ("armed", "observer started"),
            ("blocked", "a person stopped this observer; it is not brought back"),
        ]
        ref = await engine.store.get_observer_ref(session_id)
        assert ref is not None and ref.stopped and ref.observer_session_id == observer_id
        assert [o.id for o in await observers_of(engine, session_id)] == [observer_id]
        assert len(await _digests(engine, observer_id, 1)) == 1
