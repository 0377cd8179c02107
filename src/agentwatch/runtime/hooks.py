"""Hooks: a role run when something outside asks (a scheduler, a webhook, a CI job), each fire a run of its own
(`hook:<name>`).

```toml
[hooks.deploy-check]         # in agentwatch.toml
role = "checker"
prompt = "Check the deploy described in the input."
timeout = "10m"
```

or `Engine.open(hooks=[Hook("deploy-check", "checker", prompt="...")])` in Python.

- `hook_fire {name, input?, key?}` (`POST /api/tools/hook_fire`, MCP, `engine.fire_hook`) records the run and
  answers at once with its id; `run_trace {id}` (or `agent_await` on the run's agent) follows it to its end.
- `input` (any JSON) is the run's input (`run_compare` compares it leaf by leaf with the previous fire's) and
  is given to the agent after the hook's prompt.
- `key` fires once: the run's id is made from the hook's name and the key, so a scheduler that sends a fire
  again (a retry, a second scheduler) gets the first run back (`duplicate: true`) and starts nothing, for as long
  as that run is kept (`retention.run_ttl`, 30 days). The same key with another input is refused (a conflict).
- The fire runs a task: a session of `role` (source `hook`, group key `hook:<name>`: `agent_list {groupKey:
  "hook:deploy-check"}` lists every fire), reaped after `retention.hook_ttl`; the run ends as its task does
  (`Run.sole_task`: `completed`, `timed_out`, `cancelled` or `failed`), and is reaped after `retention.run_ttl`.
- A fire runs in the engine that took it (one that runs turns: `agentwatch serve`, `agentwatch mcp` while its
  client is connected, `Engine.open()`); one whose process dies lapses and ends `interrupted`, as any run; its
  agent goes on after the restart, and an engine's maintenance stops it once it runs past the hook's timeout
  (`stop_orphans`). An engine that runs no turns refuses a fire (a conflict): the run would have nobody to end it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import JsonValue

from agentwatch.config import Config
from agentwatch.errors import Conflict, NotFound
from agentwatch.runtime.heartbeats import check_scheduled
from agentwatch.runtime.runs import Run, stable_run_id, start_run, stop_orphaned_task
from agentwatch.store import JournalEntry, SessionFilter

if TYPE_CHECKING:
    from agentwatch.runtime.services import Runtime

__all__ = ["Hook", "HookFired", "HookRunner", "hooks_from_config"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Hook:
    """A role run when something outside asks (see the module docs)."""

    name: str
    role: str
    prompt: str
    timeout: float = 600.0
    """How long a fire's turn may take (a paused one included) before it is stopped and the run fails."""

    def __post_init__(self) -> None:
        check_scheduled("hook", self.name, self.prompt, self.timeout)


@dataclass(frozen=True, slots=True)
class HookFired:
    """What a fire started: its run, and whether an earlier fire with the same key had started it."""

    run_id: str
    duplicate: bool


def hooks_from_config(config: Config) -> list[Hook]:
    """The hooks `[hooks.<name>]` in `agentwatch.toml` declares."""
    return [Hook(name, hook.role, hook.prompt, hook.timeout.total_seconds()) for name, hook in config.hooks.items()]


def fire_id(name: str, key: str) -> str:
    """The run id of the fire of hook `name` with `key`: the same in every engine."""
    return stable_run_id("hk", name, key)


def task_prompt(hook: Hook, input: JsonValue) -> str:
    """What the fire's agent is given: the hook's prompt, then its input."""
    if input is None:
        return hook.prompt
    return f"{hook.prompt}\n\nInput:\n{json.dumps(input, ensure_ascii=False, indent=2)}"


_ORPHANS_LOOKED_AT = 50
"""Sessions of hook fires still at work that a maintenance pass looks at, at most (the next pass looks again)."""


class HookRunner:
    """Fires an engine's hooks, each in a task of its own, until the engine closes."""

    def __init__(self, runtime: Runtime, hooks: Iterable[Hook]) -> None:
        self._runtime = runtime
        self.hooks = {hook.name: hook for hook in hooks}
        self._fires: set[asyncio.Task[None]] = set()
        self._running: dict[str, tuple[Run, asyncio.Task[None]]] = {}
        """The fires in progress in this engine (the run, the task that runs it), by their run's id."""

    async def fire(self, name: str, input: JsonValue = None, key: str | None = None) -> HookFired:
        """Start a run of hook `name` (see the module docs); returns once the run is recorded."""
        hook = self.hooks.get(name)
        if hook is None:
            known = ", ".join(sorted(self.hooks)) or "none: declare one under [hooks.<name>] in agentwatch.toml"
            raise NotFound(f"no hook named {name!r}; the hooks are {known}")
        recorded: asyncio.Future[HookFired] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(self._run(hook, input, key, recorded), name=f"agentwatch-hook-{name}")
        self._fires.add(task)
        task.add_done_callback(self._fires.discard)
        return await asyncio.shield(recorded)

    async def _run(self, hook: Hook, input: JsonValue, key: str | None, recorded: asyncio.Future[HookFired]) -> None:
        run_id = fire_id(hook.name, key) if key is not None else None
        try:
            async with start_run(self._runtime, hook.name, kind="hook", input=input, id=run_id) as run:
                recorded.set_result(HookFired(run.id, duplicate=False))
                this = asyncio.current_task()
                if this is not None:  # (always: `fire` made it a task)
                    self._running[run.id] = (run, this)
                try:
                    await run.sole_task(
                        hook.role,
                        task_prompt(hook, input),
                        timeout=hook.timeout,
                        source="hook",
                        group_key=f"hook:{hook.name}",
                    )
                finally:
                    self._running.pop(run.id, None)
        except Exception as exc:
            if recorded.done():  # after the run was recorded: it ended `failed` with the error
                log.warning("hook %s: its run failed: %s", hook.name, exc)
            elif isinstance(exc, Conflict) and run_id is not None:
                await self._fired_before(hook, key, input, run_id, recorded)
            else:
                recorded.set_exception(exc)

    async def _fired_before(
        self, hook: Hook, key: str | None, input: JsonValue, run_id: str, recorded: asyncio.Future[HookFired]
    ) -> None:
        """This key fired before: that run is the one, when this fire asks for the same input (a retry); one
        asking for another input is refused, as a reused key with other input is a caller's mistake."""
        try:
            run = await self._runtime.store.get_run(run_id)
        except Exception as exc:
            recorded.set_exception(exc)
            return
        if run.input != input:
            recorded.set_exception(
                Conflict(
                    f"hook {hook.name}: key {key!r} fired run {run_id} with another input; a fire with a new "
                    "input needs a new key (or no key)",
                    fields=["key"],
                )
            )
        else:
            recorded.set_result(HookFired(run_id, duplicate=True))

    async def stop_orphans(self) -> int:
        """Stop the fires' agents that nobody times out any more (`stop_orphaned_task`: their run ended with an
        engine that died or closed, and the turn went on after a restart past the hook's timeout), each noted in
        its run's journal; how many. An engine's maintenance calls it."""
        stopped = 0
        if not self.hooks:
            return stopped
        busy = await self._runtime.store.list_sessions(  # (one read for every hook, every few seconds)
            SessionFilter(source=["hook"], status=["running", "awaiting_input"]), limit=_ORPHANS_LOOKED_AT
        )
        for session in busy.items:
            hook = self.hooks.get((session.group_key or "").removeprefix("hook:"))
            if hook is None:
                continue  # a hook this engine does not declare: the engines that do look after it
            why = f"its fire's run ended, and it ran past the hook's timeout ({hook.timeout:g} s)"
            if await stop_orphaned_task(self._runtime, session, hook.timeout, f"hook {hook.name} ({why})"):
                stopped += 1
                if session.run_id is not None:
                    entry = JournalEntry(
                        run_id=session.run_id, kind="stopped", message=f"stopped {session.name}: {why}"
                    )
                    await self._runtime.store.append_journal(entry)
        return stopped

    async def cancel(self, run_id: str, by: str | None = None) -> bool:
        """Cancel the fire of run `run_id` running in this engine, and wait for its end: the run ends `cancelled`
        (`cancelled by <by>` its statusReason says, when given) and its agent is stopped (`Span.task`). False when
        no fire of that run runs here (it ended, or another engine runs it)."""
        running = self._running.get(run_id)
        if running is None:
            return False
        run, task = running
        run.cancelled_by = by
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return True

    async def close(self) -> None:
        """Cut off the fires still running (their runs end `interrupted`; their agents' turns go on at the next
        start)."""
        for task in list(self._fires):
            task.cancel()
        await asyncio.gather(*self._fires, return_exceptions=True)
