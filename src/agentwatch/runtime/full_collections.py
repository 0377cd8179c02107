"""Full garbage collections wait while turns run, and run once the process has had no turn for a moment;
young collections run more often, and so are shorter, while turns run.

CPython's cyclic collector pauses the whole event loop for a full (generation 2) collection, and its cost
grows with every object alive: with 1,000 turns in flight (about half a million objects), each full
collection held the loop for 0.5-0.6 s of CPU and about 20 of them ran inside the turns (a third of the
run's CPU). Young collections (generations 0 and 1) still run as usual and catch most cyclic garbage; only
the full one is put off:

- while a turn loop runs in this process, the full collection's threshold is raised to
  `DEFERRED_THRESHOLD` generation-1 collections, so CPython starts one inside a turn only after that many (a
  bound on the garbage that can wait);
- meanwhile a generation-1 collection runs after every other young one instead of every eleventh. Its pause
  grows with the objects that survived the young collections since the last one, and with 1,000 turns in
  flight those were 10,000-50,000 objects (about a microsecond each): pauses of 5-80 ms of the event loop,
  the longest left once the full ones waited. Fewer survivors each time make each pause shorter, for about
  the same work in all (each object is still looked at once in generation 1);
- and a collection of generation 1 (with the young one) also runs every `YOUNG_SECONDS`. CPython starts a
  young one when the tracked objects made minus those freed pass its threshold, and old objects freed count
  too: while turns end and others start, the objects the ended ones free make up for the new ones, the count
  stays low, and the young generation grew to 10,000-30,000 objects before a collection (20-45 ms of the
  loop, in it or in the generation-1 collection that takes it along). On a time beat it holds what about
  `YOUNG_SECONDS` made. The beat's collection is of generation 1, not a young one: `gc.collect(0)` never
  starts a generation-1 collection (only CPython's own trigger does), so with that trigger quiet generation
  1 kept the survivors of dozens of beats, and the generation-1 collection that finally came scanned
  30,000-45,000 objects (40-60 ms of the loop). Collecting generation 1 on every beat scans what the beat's
  young generation holds and the little CPython's own young collections left in generation 1, and moves what
  survives to the old generation at once: each object is looked at once, and no beat's pause holds the
  survivors of the beat before. The beat is short (`CROWDED_YOUNG_SECONDS` with many turns, about a loop
  turn under load): a beat's pause grows with what the loop made since the last one, not the work in all, so
  a shorter beat makes shorter pauses for the same collector CPU. With 1,000 turns in flight a 25 ms beat
  still let one pause reach 5-14 ms of the loop, landing on loop turns that were long already; at 5 ms the
  longest was 2-4 ms, and the collector's CPU over the run was the same (about 1.1 s), each object still
  being looked at once. A few turns make little in 25 ms, and a beat's collection has a cost of its own
  whatever it finds (a ten-tool turn of one session made 13 of them at 5 ms, about 2 % of its CPU): the beat
  is `YOUNG_SECONDS` while fewer than `CROWD` turn loops run, `CROWDED_YOUNG_SECONDS` from then on;
- once no turn has run for `IDLE_SECONDS`, the application's own thresholds are put back and a full
  collection runs if CPython would have been due one meanwhile. The thresholds stay until then: put back as
  the last turn loop ended, CPython's own trigger started the full collection that waited within a few
  milliseconds, and again after every turn of a session whose turns follow one another.

Nothing here runs when the application disabled the collector (`gc.disable()` or a threshold of 0).
"""

from __future__ import annotations

import asyncio
import gc
import threading
from typing import Final

__all__ = [
    "CROWD",
    "CROWDED_YOUNG_SECONDS",
    "DEFERRED_THRESHOLD",
    "IDLE_SECONDS",
    "MIDDLE_THRESHOLD",
    "YOUNG_SECONDS",
    "collect_now",
    "turn_loop_ended",
    "turn_loop_started",
]

DEFERRED_THRESHOLD: Final = 25_000
"""Generation-1 collections a full collection may wait for while turns run (CPython's default is 10): with one
on every beat (about 200 a second) and CPython's own, a couple of minutes of turns running without a pause."""
MIDDLE_THRESHOLD: Final = 1
"""Young collections after which a generation-1 one runs while turns run: every other one (CPython's default
is 10; a lower threshold of the application's own is kept)."""
YOUNG_SECONDS: Final = 0.025
"""How often a collection of the young generations (0 and 1) runs while a few turns run, whatever CPython's
count says."""
CROWDED_YOUNG_SECONDS: Final = 0.005
"""The beat while `CROWD` turn loops or more run: what the loop makes between two beats, and so each beat's
pause, grows with the turns in flight."""
CROWD: Final = 32
"""Turn loops running at once from which the beat is `CROWDED_YOUNG_SECONDS`."""
IDLE_SECONDS: Final = 1.0
"""How long the process has had no turn running before the full collection that waited runs."""

_lock = threading.Lock()
_running = 0
_saved: tuple[int, int, int] | None = None
_idle_timer: asyncio.TimerHandle | None = None
_young_timer: asyncio.TimerHandle | None = None


def turn_loop_started() -> None:
    """A session's turn loop started: full collections wait (see the module docstring)."""
    global _running, _saved, _idle_timer, _young_timer
    with _lock:
        _running += 1
        if _idle_timer is not None:
            _idle_timer.cancel()
            _idle_timer = None
        if _running > 1 or not gc.isenabled():
            return
        if _saved is not None and gc.get_threshold() != _while_turns(_saved):
            # Changed since the last turns set them (by the application, or while no loop ran the put-back:
            # a loop that closed within `IDLE_SECONDS` of its last turn): the thresholds now are its own.
            _saved = None
        if _saved is None:
            thresholds = gc.get_threshold()
            if thresholds[0] == 0 or thresholds[2] >= DEFERRED_THRESHOLD:
                return
            _saved = thresholds
            gc.set_threshold(*_while_turns(thresholds))
        # else: the last turns ended less than `IDLE_SECONDS` ago, and their thresholds are still set
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        _young_timer = loop.call_later(_beat_seconds(), _beat_collection)


def turn_loop_ended() -> None:
    """A session's turn loop ended: after the last one, the beat stops, and the thresholds are put back and the
    collection that waited runs once no turn has run for `IDLE_SECONDS` (at once without a running loop)."""
    global _running, _idle_timer, _young_timer
    with _lock:
        _running = max(_running - 1, 0)
        if _running or _saved is None:
            return
        if _young_timer is not None:
            _young_timer.cancel()
            _young_timer = None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            _put_back()
            return
        _idle_timer = loop.call_later(IDLE_SECONDS, _collect_if_due)


def _put_back() -> None:
    """The application's own thresholds again (unless it changed them meanwhile); called holding `_lock`."""
    global _saved
    if _saved is not None and gc.get_threshold() == _while_turns(_saved):
        gc.set_threshold(*_saved)
    _saved = None


def _while_turns(saved: tuple[int, int, int]) -> tuple[int, int, int]:
    """The thresholds set while turns run, from the application's own."""
    return saved[0], min(saved[1], MIDDLE_THRESHOLD), DEFERRED_THRESHOLD


def _beat_seconds() -> float:
    """The beat for the turn loops running now (see `CROWD`); called holding `_lock`."""
    return CROWDED_YOUNG_SECONDS if _running >= CROWD else YOUNG_SECONDS


def _beat_collection() -> None:
    global _young_timer
    with _lock:
        _young_timer = None
        if _saved is None:  # the last turn ended meanwhile
            return
        _young_timer = asyncio.get_running_loop().call_later(_beat_seconds(), _beat_collection)
        if not gc.isenabled():
            return
    gc.collect(1)


def collect_now() -> bool:
    """When no turn loop runs: put the application's own thresholds back and run a full collection now, not
    `IDLE_SECONDS` later (for a process that knows it is idle: a benchmark between the sides it compares, a
    server between bursts). False, doing nothing, while a turn loop runs."""
    global _idle_timer, _young_timer
    with _lock:
        if _running:
            return False
        for timer in (_idle_timer, _young_timer):
            if timer is not None:
                timer.cancel()
        _idle_timer = _young_timer = None
        _put_back()
    gc.collect()
    return True


def _collect_if_due() -> None:
    global _idle_timer
    with _lock:
        _idle_timer = None
        if _running:
            return
        _put_back()
        if not gc.isenabled():
            return
        threshold = gc.get_threshold()[2]
    if threshold and gc.get_count()[2] > threshold:
        gc.collect()
