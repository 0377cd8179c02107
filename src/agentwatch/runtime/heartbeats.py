"""Heartbeats: a role run on a schedule, each tick a run of its own (`heartbeat:<name>`).

```toml
[heartbeats.digest]          # in agentwatch.toml: `agentwatch serve` ticks it
role = "digester"
every = "1h"
prompt = "Summarize what arrived since the last digest."
```

In Python, with a gate:

```python
Engine.open(heartbeats=[Heartbeat("digest", "digester", every=3600, prompt="...", gate=has_news)])
```

- Ticks fall on the multiples of `every` since the Unix epoch, so every engine on one store agrees on them. Each
  tick is a run whose id is made from the heartbeat's name and the tick's number: when several engines (service
  processes on one store) tick at once, one records it and the others leave it.
- The gate (Python only) is asked first, with the `Tick`: False skips the tick (the run ends `skipped`,
  statusReason `gate`, and no session is made); a gate that raises fails it (`failed`, statusReason
  `gate_error`, error class `gate_error` with its message).
- A tick while the heartbeat's previous session still runs (or waits on a person) is `skipped` (`overlap`; its
  journal names that session and the call that shows it, `run_trace {id: ...}`, which the CLI words as a
  command), unless nobody enforces the timeout on that session any more: its tick's run ended (its engine died
  or closed, and the turn went on after the restart) and it ran past the timeout. It is then stopped, the new
  tick's journal says so, and the tick runs.
- Otherwise the tick runs a task: a session of `role` (source `heartbeat`, group key `hb:<name>`, so
  `agent_list {groupKey: "hb:digest"}` lists every tick), given `prompt`; the run ends as its turn does.
- Heartbeats tick in an engine that runs the store's background work (`Engine.open()` with `recover=True`, the
  default, as `agentwatch serve` opens it) with background tasks on (`AGENTWATCH_BACKGROUND_TASKS`), and stop
  once it drains; not in `agentwatch run` nor `agentwatch mcp` (`tick=False`), which do not check them either.
  A heartbeat's sessions are reaped after `retention.heartbeat_ttl` (with what they spawned); its runs after
  `retention.run_ttl` (a skipped tick's after `retention.skipped_run_ttl`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from agentwatch.config import HEARTBEAT_NAME as NAME_PATTERN
from agentwatch.config import Config
from agentwatch.errors import Conflict, InvalidArgument, Suggestion
from agentwatch.runtime.runs import Run, stable_run_id, start_run, stop_orphaned_task
from agentwatch.store import SessionFilter, SessionRecord

if TYPE_CHECKING:
    from agentwatch.runtime.services import Runtime

__all__ = ["Gate", "Heartbeat", "HeartbeatTicker", "Tick", "heartbeats_from_config", "tick"]

log = logging.getLogger(__name__)

_NAME = re.compile(NAME_PATTERN)
_BUSY_LOOKED_AT = 20
"""Sessions of earlier ticks still at work that a tick looks at, at most (it is an overlap past them anyway)."""


@dataclass(frozen=True, slots=True)
class Tick:
    """One tick of a heartbeat, as its gate is asked about it."""

    name: str
    number: int
    """Ticks of `every` since the Unix epoch."""
    due_at: datetime


Gate = Callable[[Tick], bool | Awaitable[bool]]
"""Whether a tick should run (a plain or an async function)."""


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A role run on a schedule: every `every` seconds, a tick gives it `prompt` (see the module docs)."""

    name: str
    role: str
    every: float
    prompt: str
    gate: Gate | None = None
    timeout: float = 600.0
    """How long a tick's turn may take (a paused one included) before it is stopped and the tick fails."""

    def __post_init__(self) -> None:
        check_scheduled("heartbeat", self.name, self.prompt, self.timeout)
        if not (self.every > 0 and math.isfinite(self.every)):
            raise InvalidArgument(f"heartbeat {self.name!r}: `every` must be a positive number of seconds")


def check_scheduled(what: str, name: str, prompt: str, timeout: float) -> None:
    """Refuse a heartbeat's or a hook's (`what`) bad name, empty prompt or timeout that is not a positive number."""
    if not _NAME.match(name):
        raise InvalidArgument(f"a {what}'s name is 1-100 letters, digits, '_', '.' or '-', not {name!r}")
    if not prompt.strip():
        raise InvalidArgument(f"{what} {name!r} has no prompt")
    if not (timeout > 0 and math.isfinite(timeout)):
        raise InvalidArgument(f"{what} {name!r}: `timeout` must be a positive number of seconds")


def heartbeats_from_config(config: Config) -> list[Heartbeat]:
    """The heartbeats `[heartbeats.<name>]` in `agentwatch.toml` declares."""
    return [
        Heartbeat(name, beat.role, beat.every.total_seconds(), beat.prompt, timeout=beat.timeout.total_seconds())
        for name, beat in config.heartbeats.items()
    ]


def tick_id(name: str, number: int) -> str:
    """The run id of a heartbeat's tick: the same in every engine."""
    return stable_run_id("hb", name, str(number))


async def tick(runtime: Runtime, heartbeat: Heartbeat, number: int) -> str | None:
    """Run tick `number` of `heartbeat` (see the module docs); the run's id, or None when another engine
    recorded this tick."""
    due = datetime.fromtimestamp(number * heartbeat.every, UTC)
    async with contextlib.AsyncExitStack() as stack:
        try:
            run = await stack.enter_async_context(
                start_run(
                    runtime,
                    heartbeat.name,
                    kind="heartbeat",
                    input={"tick": number, "dueAt": due.isoformat()},
                    id=tick_id(heartbeat.name, number),
                )
            )
        except Conflict:
            return None  # another engine has this tick
        await _run_tick(runtime, heartbeat, Tick(heartbeat.name, number, due), run)
    return run.id


async def _run_tick(runtime: Runtime, heartbeat: Heartbeat, due: Tick, run: Run) -> None:
    if heartbeat.gate is not None:
        try:
            verdict = heartbeat.gate(due)
            passed = await verdict if inspect.isawaitable(verdict) else verdict
        except Exception as exc:
            message = f"{type(exc).__name__}: {exc}"
            run.end_as("failed", "gate_error", {"class": "gate_error", "message": message})
            return
        if not passed:
            run.end_as("skipped", "gate")
            return
    group = f"hb:{heartbeat.name}"
    busy = await runtime.store.list_sessions(
        SessionFilter(group_key=group, status=["running", "awaiting_input"]), limit=_BUSY_LOOKED_AT
    )
    for earlier in busy.items:
        if not await _stopped_if_orphaned(runtime, heartbeat, earlier, run):
            await _overlaps(run, *_still_at_work(earlier))
            return
    if busy.next_cursor is not None:  # more still at work than looked at
        listing = Suggestion("agent_list", {"groupKey": group})
        why = f"more than {_BUSY_LOOKED_AT} agents of earlier ticks are still at work ({listing} lists them)"
        await _overlaps(run, why, listing)
        return
    await run.sole_task(
        heartbeat.role, heartbeat.prompt, timeout=heartbeat.timeout, source="heartbeat", group_key=group
    )


async def _overlaps(run: Run, why: str, look: Suggestion) -> None:
    """Skip the tick as an overlap, its journal saying which earlier tick's work it overlapped, and the call that
    shows that work (`look`: worded in the line as the tool call, kept as its detail's `suggestions`, which
    `run_history` gives, so that each surface words it its way)."""
    await run.journal("overlap", f"skipped: {why}", {"suggestions": [look.to_dict()]})
    run.end_as("skipped", "overlap")


def _still_at_work(earlier: SessionRecord) -> tuple[str, Suggestion]:
    """The earlier tick's agent a tick overlaps, and the call that shows it."""
    doing = "waits on a person" if earlier.status == "awaiting_input" else "is still running"
    where = (
        Suggestion("run_trace", {"id": earlier.run_id})
        if earlier.run_id
        else Suggestion("agent_get", {"id": earlier.id})
    )
    return f"{earlier.name} ({earlier.id}), the agent of an earlier tick, {doing}; {where} shows it", where


async def _stopped_if_orphaned(runtime: Runtime, heartbeat: Heartbeat, earlier: SessionRecord, run: Run) -> bool:
    """Whether `earlier`, the agent of an earlier tick still at work, is no longer: stopped when nobody enforces
    the heartbeat's timeout on it any more (`stop_orphaned_task`), which `run`'s journal says, or ended
    meanwhile. False leaves it be (an overlap)."""
    why = f"an earlier tick's agent, whose run ended, ran past the heartbeat's timeout ({heartbeat.timeout:g} s)"
    stopped = await stop_orphaned_task(runtime, earlier, heartbeat.timeout, f"heartbeat {heartbeat.name} ({why})")
    if stopped:
        await run.journal("stopped", f"stopped {earlier.name}: {why}")
    return stopped is not None


class HeartbeatTicker:
    """Ticks an engine's heartbeats until it closes (or drains)."""

    def __init__(self, runtime: Runtime, heartbeats: Iterable[Heartbeat]) -> None:
        self._runtime = runtime
        self.heartbeats = list(heartbeats)
        self._beats: list[asyncio.Task[None]] = []
        self._ticks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        """Start ticking every heartbeat."""
        self._beats = [
            asyncio.create_task(self._beat(beat), name=f"agentwatch-heartbeat-{beat.name}") for beat in self.heartbeats
        ]

    async def _beat(self, heartbeat: Heartbeat) -> None:
        while True:
            now = time.time()
            number = math.floor(now / heartbeat.every) + 1
            await asyncio.sleep(number * heartbeat.every - now)
            # A tick runs beside the schedule: a long one does not push the next one back (it is skipped as an
            # overlap instead, and says so).
            task = asyncio.create_task(self._tick(heartbeat, number), name=f"agentwatch-tick-{heartbeat.name}")
            self._ticks.add(task)
            task.add_done_callback(self._ticks.discard)

    async def _tick(self, heartbeat: Heartbeat, number: int) -> None:
        try:
            await tick(self._runtime, heartbeat, number)
        except Exception as exc:  # a tick that cannot be recorded must not stop the next ones
            log.warning("heartbeat %s: tick %d failed: %s", heartbeat.name, number, exc)

    def stop(self) -> None:
        """Tick no more (running ticks go on)."""
        for beat in self._beats:
            beat.cancel()

    async def close(self) -> None:
        """Tick no more, and cut off running ticks (their runs end `interrupted`; their agents' turns go on at the
        next start)."""
        self.stop()
        for task in list(self._ticks):
            task.cancel()
        await asyncio.gather(*self._beats, *self._ticks, return_exceptions=True)
