"""Full garbage collections wait while turns run (young ones go on, generation-1 ones more often), and the one
that waited runs once the process has had no turn for a moment; the application's own thresholds are put
back."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agentwatch.runtime import full_collections
from agentwatch.runtime.full_collections import (
    CROWD,
    DEFERRED_THRESHOLD,
    MIDDLE_THRESHOLD,
    YOUNG_SECONDS,
    collect_now,
    turn_loop_ended,
    turn_loop_started,
)
from agentwatch.runtime.models import Hang, Reply, ScriptedModel
from tests.runtime.support import OpenEngine, role, until


@pytest.fixture
def thresholds() -> Iterator[tuple[int, int, int]]:
    """The process's thresholds, put back after the test whatever it did."""
    saved = gc.get_threshold()
    yield saved
    gc.set_threshold(*saved)


@pytest.fixture
def full_runs() -> Iterator[list[int]]:
    """Counts the full collections that start while the test runs."""
    started: list[int] = []

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and info["generation"] == 2:
            started.append(1)

    gc.callbacks.append(note)
    yield started
    gc.callbacks.remove(note)


async def test_full_collections_wait_while_a_turn_runs(open_engine: OpenEngine, thresholds: tuple[int, ...]) -> None:
    model = ScriptedModel([[Reply("Working on it"), Hang()]])
    async with open_engine(role("hanger", "scripted:hang"), models={"hang": model}) as engine:
        session = await engine.create("hanger")
        await engine.enqueue(session.id, "go")
        await until(lambda: engine.running_turns() == [session.id])
        assert gc.get_threshold() == (thresholds[0], min(thresholds[1], MIDDLE_THRESHOLD), DEFERRED_THRESHOLD)
        await engine.stop(session.id)
        await until(lambda: not engine.running_turns())
        await until(lambda: gc.get_threshold() == thresholds)  # once no turn ran for a moment


async def test_the_collection_that_waited_runs_once_no_turn_runs(
    monkeypatch: pytest.MonkeyPatch, thresholds: tuple[int, ...], full_runs: list[int]
) -> None:
    monkeypatch.setattr(full_collections, "IDLE_SECONDS", 0.05)
    gc.set_threshold(700, 10, 2)
    gc.collect()
    full_runs.clear()
    turn_loop_started()
    turn_loop_started()  # two sessions' turns at once
    assert gc.get_threshold() == (700, MIDDLE_THRESHOLD, DEFERRED_THRESHOLD)
    for _ in range(3):
        gc.collect(1)  # three young collections: a full one would have been due after two
    assert full_runs == []
    turn_loop_ended()
    assert gc.get_threshold() == (700, MIDDLE_THRESHOLD, DEFERRED_THRESHOLD)  # one turn still runs
    turn_loop_ended()
    # Not inside the turn's last step, nor by CPython's own trigger right after it (the thresholds it would go
    # by stay until then): a moment later.
    assert gc.get_threshold() == (700, MIDDLE_THRESHOLD, DEFERRED_THRESHOLD)
    assert full_runs == []
    await asyncio.sleep(0.2)
    assert full_runs == [1]
    assert gc.get_threshold() == (700, 10, 2)
    assert gc.get_count()[2] == 0


async def test_collect_now_runs_the_waiting_collection_at_once_but_never_while_a_turn_runs(
    thresholds: tuple[int, ...], full_runs: list[int]
) -> None:
    gc.set_threshold(700, 10, 2)
    gc.collect()
    full_runs.clear()
    turn_loop_started()
    assert collect_now() is False  # a turn runs: nothing changes
    assert gc.get_threshold() == (700, MIDDLE_THRESHOLD, DEFERRED_THRESHOLD) and full_runs == []
    turn_loop_ended()
    assert collect_now() is True
    assert full_runs == [1] and gc.get_threshold() == (700, 10, 2)
    await asyncio.sleep(full_collections.IDLE_SECONDS + 0.2)
    assert full_runs == [1]  # the collection that waited ran once, not again when the moment passed


async def test_a_new_turn_keeps_the_waiting_collection_waiting(
    monkeypatch: pytest.MonkeyPatch, thresholds: tuple[int, ...], full_runs: list[int]
) -> None:
    monkeypatch.setattr(full_collections, "IDLE_SECONDS", 0.05)
    gc.set_threshold(700, 10, 2)
    gc.collect()
    full_runs.clear()
    turn_loop_started()
    for _ in range(3):
        gc.collect(1)
    turn_loop_ended()
    turn_loop_started()  # the next turn starts before the moment passed
    await asyncio.sleep(0.2)
    assert full_runs == []
    turn_loop_ended()
    await asyncio.sleep(0.2)
    assert full_runs == [1]


async def test_an_application_without_the_collector_is_left_alone(thresholds: tuple[int, ...]) -> None:
    gc.set_threshold(0, 10, 10)  # threshold 0: automatic collection off
    turn_loop_started()
    assert gc.get_threshold() == (0, 10, 10)
    turn_loop_ended()
    assert gc.get_threshold() == (0, 10, 10)


def test_middle_collections_run_more_often_while_turns_run(thresholds: tuple[int, ...]) -> None:
    gc.set_threshold(700, 10, 10)
    turn_loop_started()
    assert MIDDLE_THRESHOLD < 10
    assert gc.get_threshold() == (700, MIDDLE_THRESHOLD, DEFERRED_THRESHOLD)
    turn_loop_ended()
    assert gc.get_threshold() == (700, 10, 10)
    gc.set_threshold(700, 0, 10)  # the application's own, lower: kept
    turn_loop_started()
    assert gc.get_threshold() == (700, 0, DEFERRED_THRESHOLD)
    turn_loop_ended()
    assert gc.get_threshold() == (700, 0, 10)


async def test_young_collections_run_on_a_beat_while_turns_run(
    monkeypatch: pytest.MonkeyPatch, thresholds: tuple[int, ...]
) -> None:
    young: list[float] = []

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and info["generation"] < 2:
            young.append(time.monotonic())

    gc.set_threshold(10_000_000, 10, 10)  # CPython's count alone would start none in this test
    gc.collect()
    gc.callbacks.append(note)
    try:
        await asyncio.sleep(4 * YOUNG_SECONDS)
        assert young == []
        turn_loop_started()
        await asyncio.sleep(6 * YOUNG_SECONDS)
        assert len(young) >= 3
        turn_loop_ended()
        young.clear()
        await asyncio.sleep(4 * YOUNG_SECONDS)
        assert young == []  # the beat stops with the last turn
    finally:
        gc.callbacks.remove(note)


async def test_the_beat_quickens_once_many_turn_loops_run(thresholds: tuple[int, ...]) -> None:
    # What the loop makes between two beats grows with the turns in flight; a few turns make little.
    beats: list[int] = []

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and info["generation"] < 2:
            beats.append(info["generation"])

    window = 4 * YOUNG_SECONDS
    gc.set_threshold(10_000_000, 10, 10)  # CPython's count alone would start none in this test
    gc.collect()
    gc.callbacks.append(note)
    try:
        turn_loop_started()
        await asyncio.sleep(window)
        few = len(beats)
        for _ in range(CROWD - 1):
            turn_loop_started()
        beats.clear()
        await asyncio.sleep(window)
        many = len(beats)
    finally:
        for _ in range(CROWD):
            turn_loop_ended()
        gc.callbacks.remove(note)
    assert few <= window / YOUNG_SECONDS
    assert many >= 2 * window / YOUNG_SECONDS  # (window / CROWDED_YOUNG_SECONDS on an idle machine)


async def test_the_beat_collects_generation_1(thresholds: tuple[int, ...]) -> None:
    # `gc.collect(0)` never starts a generation-1 collection: with CPython's own trigger quiet, a beat of young
    # collections would leave generation 1 the survivors of every one of them until the trigger fired again.
    started: list[int] = []

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.set_threshold(10_000_000, 10, 10)  # CPython's count alone would start none in this test
    gc.collect()
    gc.callbacks.append(note)
    try:
        turn_loop_started()
        await asyncio.sleep(8 * YOUNG_SECONDS)
        turn_loop_ended()
    finally:
        gc.callbacks.remove(note)
    assert len(started) >= 3
    assert set(started) == {1}  # generation 1 on every beat, and the full one still waits
    assert gc.get_count()[1] == 0


def test_thresholds_the_application_set_while_turns_ran_are_kept(thresholds: tuple[int, ...]) -> None:
    gc.set_threshold(700, 10, 10)
    turn_loop_started()
    gc.set_threshold(500, 5, 5)
    turn_loop_ended()
    assert gc.get_threshold() == (500, 5, 5)


def test_a_loop_closed_before_the_put_back_leaves_the_next_turns_the_thresholds_set_meanwhile(
    thresholds: tuple[int, ...],
) -> None:
    async def one_turn_loop() -> None:
        turn_loop_started()
        turn_loop_ended()  # the put-back waits for a moment this loop will not live to see

    asyncio.run(one_turn_loop())
    gc.set_threshold(700, 10, 2)  # the application's own, set meanwhile
    turn_loop_started()
    assert gc.get_threshold() == (700, MIDDLE_THRESHOLD, DEFERRED_THRESHOLD)
    turn_loop_ended()  # no running loop: put back at once
    assert gc.get_threshold() == (700, 10, 2)
