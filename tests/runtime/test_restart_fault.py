"""Fault test: SIGKILL a real engine process mid-turn, while it streams and while a tool runs.

After each kill a new engine opens the same store and continues the turn: every event a watcher saw before
the kill is in the store, seqs run 1..n with no event doubled, the turn ends as specified, and the tool that
was cut off is reported to the model as interrupted and never run again.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentwatch.events import ToolResult, TurnStarted
from agentwatch.runtime.engine import Engine
from tests.runtime.restart_scenario import setup

KILLS_PER_PHASE = 10
INTERRUPTED = "The tool call was interrupted before a result was produced."
ROOT = Path(__file__).resolve().parents[2]


def run_child_until(db: Path, markers: Path, phase: str, rng: random.Random) -> tuple[str, list[tuple[int, str]]]:
    """Start the child engine, kill it with SIGKILL in `phase`; returns the session id and the durable
    events (seq, id) its watcher saw."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.runtime.restart_scenario", str(db), str(markers)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A short lease: the killed engine's turns are free to continue a second after the kill.
        env={**os.environ, "PYTHONPATH": str(ROOT), "AGENTWATCH_LEASE_SECONDS": "1"},
    )
    assert process.stdout is not None
    session_id, seen = "", []
    deltas = 0
    deadline = time.monotonic() + 60
    try:
        for line in process.stdout:
            words = line.split()
            if words[0] == "session":
                session_id = words[1]
            elif words[0] == "event":
                seq, sub, event_id, kind = int(words[1]), int(words[2]), words[3], words[4]
                if sub == 0:
                    seen.append((seq, event_id))
                deltas += kind == "content.delta"
                streaming = phase == "streaming" and deltas >= rng.randint(3, 40)
                in_tool = phase == "tool" and kind == "tool.call"
                if streaming or in_tool:
                    time.sleep(rng.uniform(0.0, 0.3) if in_tool else rng.uniform(0.0, 0.02))
                    break
            elif words[0] == "settled":
                pytest.fail("the turn finished before it could be killed")
            if time.monotonic() > deadline:
                pytest.fail("the child never reached the phase to kill it in")
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
        process.stdout.close()
        assert process.stderr is not None
        errors = process.stderr.read()
        process.stderr.close()
    if not session_id:
        pytest.fail(f"the child engine died before it started the turn:\n{errors[-2000:]}")
    return session_id, seen


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["streaming", "tool"])
async def test_a_killed_engine_continues_its_turn_without_losing_or_doubling_events(tmp_path: Path, phase: str) -> None:
    rng = random.Random(f"restart-{phase}")
    for attempt in range(KILLS_PER_PHASE):
        db, markers = tmp_path / f"{phase}-{attempt}.db", tmp_path / f"{phase}-{attempt}.log"
        session_id, seen = run_child_until(db, markers, phase, rng)
        definition, tools = setup(markers)
        async with Engine.open(
            f"sqlite:///{db}", agents_dir=tmp_path / "none", root=tmp_path, definitions=[definition], tools=tools
        ) as engine:
            session, timed_out = await engine.wait(session_id, 30)
            events = await engine.store.read_events(session_id, limit=10_000)

        assert not timed_out, f"kill {attempt} ({phase}): the continued turn did not settle"
        stored = {e.seq: e.id for e in events}
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert len({e.id for e in events}) == len(events)
        assert all(stored.get(seq) == event_id for seq, event_id in seen), "a watched event is not in the store"
        assert session.status == "completed"
        starts = [e.payload for e in events if isinstance(e.payload, TurnStarted)]
        assert [(s.trigger, s.attempt) for s in starts] == [("input", 1), ("continue", 2)]
        runs = markers.read_text().split("\n") if markers.exists() else []
        results = [e.payload for e in events if isinstance(e.payload, ToolResult)]
        if phase == "tool":
            # The cut-off call is reported as interrupted and was started exactly once, before the kill.
            assert [r.status for r in results] == ["interrupted"]
            assert runs.count("start x") == 1
            assert session.last_text is not None
            assert "interrupted" in session.last_text, "the model was not told the call was cut off"
        else:
            # Cut off while streaming, before any tool: the continued attempt calls the tool, once.
            assert [r.status for r in results] == ["ok"]
            assert runs.count("start x") == 1
            assert runs.count("end x") == 1
            assert session.last_text == "Finished after: did x"


def kill_while_running(db: Path, markers: Path, mode: str, *running: str) -> str:
    """Start the child engine in `mode` (`approval`, `parallel`), kill it with SIGKILL once the `running` lines
    are all in `markers` (the calls they mark started or ended); returns the session id."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.runtime.restart_scenario", str(db), str(markers), mode],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "AGENTWATCH_LEASE_SECONDS": "1"},
    )
    try:
        assert process.stdout is not None
        session_id = process.stdout.readline().split()[1]
        deadline = time.monotonic() + 60
        while not (markers.exists() and all(line in markers.read_text().split("\n") for line in running)):
            if time.monotonic() > deadline or process.poll() is not None:
                pytest.fail(f"the child never got as far as {running}")
            time.sleep(0.01)
        time.sleep(0.2)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
        if process.stdout is not None:
            process.stdout.close()
    return session_id


@contextlib.asynccontextmanager
async def _continuing(db: Path, markers: Path, **mode: bool) -> AsyncIterator[Engine]:
    """A new engine on the killed child's store, with its role and tools (`mode` as `setup` takes it)."""
    definition, tools = setup(markers, **mode)
    async with Engine.open(
        f"sqlite:///{db}", agents_dir=db.parent / "none", root=db.parent, definitions=[definition], tools=tools
    ) as engine:
        yield engine


@pytest.mark.slow
async def test_a_killed_engine_running_an_approved_call_never_runs_it_again(tmp_path: Path) -> None:
    """Once: an answer turn's start was deferred to its next write, so an approved call ran with nothing durable
    saying the turn had resumed; killed meanwhile, the engine left the session waiting on the answered request,
    and the next engine could plan the same answer turn and run the call again."""
    db, markers = tmp_path / "approval.db", tmp_path / "approval.log"
    session_id = kill_while_running(db, markers, "approval", "start x")  # the approved call is running
    async with _continuing(db, markers, approval=True) as engine:
        session, timed_out = await engine.wait(session_id, 30)
        events = await engine.store.read_events(session_id, limit=10_000)
    assert not timed_out and session.status == "completed", session.status
    assert [e.payload.status for e in events if isinstance(e.payload, ToolResult)] == ["interrupted"]
    assert markers.read_text().split("\n").count("start x") == 1


@pytest.mark.slow
async def test_a_call_that_ended_beside_one_cut_off_keeps_its_result_when_the_turn_continues(tmp_path: Path) -> None:
    """Once: the results of calls the model made together were stored only once every one of them ended, so a
    kill while one still ran lost the result of the other, which had ended; the continued turn told the model
    that call was interrupted too, inviting it to do again what was done."""
    db, markers = tmp_path / "parallel.db", tmp_path / "parallel.log"
    session_id = kill_while_running(db, markers, "parallel", "end q", "start x")  # the quick call ended
    async with _continuing(db, markers, parallel=True) as engine:
        session, timed_out = await engine.wait(session_id, 30)
        events = await engine.store.read_events(session_id, limit=10_000)
        history = await engine.store.read_messages(session.conversation_id)
    assert not timed_out and session.status == "completed", session.status
    results = [(e.payload.tool_call_id, e.payload.status) for e in events if isinstance(e.payload, ToolResult)]
    assert sorted(results) == [("c_quick", "ok"), ("c_slow", "interrupted")]  # one result each
    runs = markers.read_text().split("\n")
    assert runs.count("start q") == 1 and runs.count("start x") == 1  # neither ran again
    # the model was given the quick call's real result, and `interrupted` for the slow one alone
    assert session.last_text == f"Finished after: quick_tool=did q | slow_tool={INTERRUPTED}"
    returns = {p["tool_call_id"]: (p["content"], p["outcome"]) for m in history for p in m["parts"]
               if p["part_kind"] == "tool-return"}  # fmt: skip
    assert returns == {"c_quick": ("did q", "success"), "c_slow": (INTERRUPTED, "interrupted")}  # as its event


@pytest.mark.slow
async def test_a_call_that_returned_none_beside_one_cut_off_gives_back_none_when_the_turn_continues(
    tmp_path: Path,
) -> None:
    """Once: the result stored as the call ended (ahead of its model message) held only its text when the tool
    returned None, so the continued turn gave the model the text (an empty string) where the first run had given
    it None."""
    db, markers = tmp_path / "none.db", tmp_path / "none.log"
    session_id = kill_while_running(db, markers, "parallel_none", "end q", "start x")  # the quick call ended
    async with _continuing(db, markers, parallel=True, quick_returns_none=True) as engine:
        session, timed_out = await engine.wait(session_id, 30)
        history = await engine.store.read_messages(session.conversation_id)
    assert not timed_out and session.status == "completed", session.status
    returns = {p["tool_call_id"]: (p["content"], p["outcome"]) for m in history for p in m["parts"]
               if p["part_kind"] == "tool-return"}  # fmt: skip
    assert returns == {"c_quick": (None, "success"), "c_slow": (INTERRUPTED, "interrupted")}  # as the first run


@pytest.mark.slow
async def test_stopping_a_turn_cut_off_beside_a_call_that_ended_keeps_that_calls_result(tmp_path: Path) -> None:
    """The stop of a turn whose engine died (by an engine that does not run its role) closes only the calls that
    have no stored result: the call that ended keeps its own, once, in the record and in the conversation."""
    db, markers = tmp_path / "stopped.db", tmp_path / "stopped.log"
    session_id = kill_while_running(db, markers, "parallel", "end q", "start x")
    async with Engine.open(f"sqlite:///{db}", agents_dir=tmp_path / "none", root=tmp_path) as engine:
        assert await engine.stop(session_id)
        session = await engine.store.get_session(session_id)
        events = await engine.store.read_events(session_id, limit=10_000)
        history = await engine.store.read_messages(session.conversation_id)
    assert session.status == "cancelled"
    results = [(e.payload.tool_call_id, e.payload.status) for e in events if isinstance(e.payload, ToolResult)]
    assert results == [("c_quick", "ok"), ("c_slow", "interrupted")]
    returns = {p["tool_call_id"]: (p["content"], p["outcome"]) for m in history for p in m["parts"]
               if p["part_kind"] == "tool-return"}  # fmt: skip
    assert returns == {"c_quick": ("did q", "success"), "c_slow": (INTERRUPTED, "interrupted")}
