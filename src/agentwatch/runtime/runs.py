"""Runs: a workflow's phases and tasks, recorded as spans of one run; each task is an agent session of the run.

```python
async with engine.run("report", input={"topic": "tides"}) as run:
    async with run.span("Research") as research:
        found = await research.task("researcher", "Collect sources on tides", attempts=3, backoff_seconds=5)
    written = await run.task("writer", f"Write it up: {found['lastAssistantText']}")
```

- A run is a row of the store (`kind`, `entity` = `<kind>:<name>`, `input`, `status`): `running` while the block
  runs, then `completed`, `failed` when the block raises (its `error` holds the exception's class and message)
  or `cancelled`.
- `run.span(label)` is a phase (any named part of the work); spans nest, and end as their block does.
- `span.task(role, prompt)` runs one agent session for the run (its `run_id` is the run's, its origin the run)
  and waits until its turn is over, a person's answer included (a turn paused on a request keeps waiting, up to
  `timeout`); it returns the session's status snapshot (as `agent_task` answers). The task's span names the
  session (`ref.agentId`) and keeps its cost and tokens from the spend ledger, which outlives the session.
- A run cancelled while a task waits stops the task's agent (its span and the run end `cancelled`). A run ends
  every span of it still open with its own status. A run cut off by its engine closing (a deploy's stop) ends
  `interrupted` instead, as if its process had died, and its agents' turns go on at the next start.
- A run whose process dies lapses: its process renews its expiry while the block runs, and an engine's
  maintenance (every few seconds, in any engine on the store) ends a lapsed run `interrupted`, with its open
  spans, about four session leases (a minute by default) after the last renewal. Its agents' turns are not
  stopped: like any cut-off turn, another engine continues them (their cost shows in the run's trace).
- A task that does not complete (it failed, was stopped, or had no answer within `timeout`, and is then stopped)
  is tried again, up to `attempts` times, after `backoff_seconds` (doubling): one span per attempt sharing
  `attempt_of`, a `backoff` span over each wait, and a `retry` line in the run's journal. When every attempt
  failed, `TaskFailed` is raised: the run fails with it unless the workflow catches it.

`run_trace`, `run_compare` and `run_history` (the run reads) read all of this back, after its agents were
reaped too. A run's agents work for it until it ends, and so do their turns that began before (continued
after a restart, or after an answer), their turns on work the run sent them (an input a turn of the run's
queued, taken after the end), their observers, and the sub-agents such a turn spawns or sends work after the
end: a turn begun on new input after the run ended is otherwise other work of the agent's, billed to no run
(`billed_run`) and left out of the run's log.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import re
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Literal

from pydantic import JsonValue, ValidationError

from agentwatch.errors import AgentwatchError, Conflict, InvalidArgument, NotFound
from agentwatch.events import Origin, TurnStarted, Usage
from agentwatch.live import cancel_and_wait
from agentwatch.store import (
    RUN_ENDINGS,
    InputRecord,
    JournalEntry,
    RunDraft,
    RunPatch,
    RunRecord,
    SessionRecord,
    SpanDraft,
    SpanPatch,
    SpanRecord,
    descendants,
)
from agentwatch.tools import check_prompt

if TYPE_CHECKING:
    from agentwatch.runtime.services import Runtime

__all__ = ["Run", "RunListener", "RunMark", "Span", "TaskFailed", "start_run", "tell"]

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\- ]{0,99}$")
_PAUSED_POLL_S = 0.5
"""How often a task whose turn waits on a person looks whether it was answered."""


class TaskFailed(AgentwatchError):
    """Every attempt of a run's task ended without completing."""

    code = "task_failed"


@dataclass(frozen=True, slots=True)
class RunMark:
    """A step of a run as this engine takes it, for the engine's run listeners (`Runtime.run_listeners`: the
    tracing spans): the run started, a span of it opened, a span or the run ended."""

    what: Literal["started", "opened", "ended"]
    run_id: str
    span_id: str | None
    """None: the run itself."""
    parent_span_id: str | None
    """The span it is in (None: the run's top level)."""
    label: str
    """The run's entity (`workflow:report`), or the span's label."""
    kind: str
    """The run's kind (`workflow`, `heartbeat`, `hook`), or the span's (`phase`, `task`, `backoff`)."""
    status: str | None
    at: datetime | None
    agent_id: str | None = None
    """A task span's agent."""


RunListener = Callable[[RunMark], None]
"""Told each `RunMark` of the runs this engine takes, on its event loop (keep it quick; it must not raise)."""


def tell(runtime: Runtime, mark: RunMark) -> None:
    """Tell the engine's run listeners about `mark`; one that raises is logged, and the run goes on."""
    for listener in runtime.run_listeners:
        try:
            listener(mark)
        except Exception:
            log.exception("run listener %r failed on %s of %s", listener, mark.what, mark.span_id or mark.run_id)


class Span:
    """A part of a run (the run itself is the outermost): opens spans inside it and runs tasks under it."""

    def __init__(self, runtime: Runtime, run_id: str, record: SpanRecord | None) -> None:
        self._runtime = runtime
        self.run_id = run_id
        self.record = record
        """The stored span (None for the run itself)."""

    @asynccontextmanager
    async def span(self, label: str, *, kind: str = "phase") -> AsyncIterator[Span]:
        """A span inside this one, ended as its block ends (`completed`, `failed` when it raises, `cancelled`)."""
        opened = await self._open(
            SpanDraft(run_id=self.run_id, parent_span_id=self._parent, kind=kind, label=_label(label))
        )
        status = "completed"
        try:
            yield Span(self._runtime, self.run_id, opened)
        except asyncio.CancelledError:
            status = _cut_off(self._runtime).status or "cancelled"
            raise
        except BaseException:
            status = "failed"
            raise
        finally:
            await self._end(opened, SpanPatch(status=status, ended_at=_now()))

    async def task(
        self,
        role: str,
        prompt: str,
        *,
        label: str | None = None,
        attempts: int = 1,
        backoff_seconds: float = 1.0,
        timeout: float = 600.0,
        source: str = "task",
        group_key: str | None = None,
    ) -> dict[str, JsonValue]:
        """Run an agent of `role` on `prompt` for the run and wait for it (see the module docs); its status
        snapshot. Raises `TaskFailed` when no attempt completed. `source` and `group_key` are the session's
        (`heartbeat` and `hb:<name>` for a heartbeat's tick)."""
        check_prompt(prompt)
        if not isinstance(attempts, int) or attempts < 1:
            raise InvalidArgument(f"a task's attempts is a whole number >= 1, not {attempts!r}")
        if not (math.isfinite(backoff_seconds) and backoff_seconds >= 0):
            raise InvalidArgument(f"a task's backoff_seconds is a number >= 0, not {backoff_seconds!r}")
        if not (math.isfinite(timeout) and timeout > 0):
            raise InvalidArgument(f"a task's timeout is a number of seconds > 0, not {timeout!r}")
        runtime, store = self._runtime, self._runtime.store
        name = _label(label or role)
        first: str | None = None
        wait = backoff_seconds
        for attempt in range(1, attempts + 1):
            session = await runtime.create(
                role, run_id=self.run_id, origin=Origin(kind="run", ref=self.run_id), source=source, group_key=group_key
            )
            span = await self._open(
                SpanDraft(
                    run_id=self.run_id,
                    parent_span_id=self._parent,
                    kind="task",
                    label=name,
                    attempt=attempt,
                    attempt_of=first,
                    ref={"agentId": session.id},
                )
            )
            first = first or span.id
            try:
                await runtime.enqueue(
                    session.id, prompt, origin=Origin(kind="run", ref=self.run_id), run_id=self.run_id
                )
                snapshot, status = await self._outcome(session.id, timeout)
                # Its cost is its agent's and its sub-agents' (named in its ref: the trace places their turns under
                # it after they were reaped too), and when their turns began and ended, and how (which the trace
                # shows from the ref once they were reaped).
                children = await descendants(store, session.id)
                spawned = [child.id for child in children]
                usage = sum((await store.usage_totals([session.id, *spawned])).values(), Usage())
                from agentwatch.reads.runs import turn_marks  # (the run reads' models: loaded when first used)

                turns = await turn_marks(store, [session, *children])
                ref: dict[str, JsonValue] = {
                    "agentId": session.id,
                    **({"subAgents": list[JsonValue](spawned)} if spawned else {}),
                    **({"turns": turns} if turns else {}),
                }
                cost, tokens = usage.cost_usd or 0.0, usage.total_tokens
                await self._end(span, SpanPatch(status=status, ended_at=_now(), cost_usd=cost, tokens=tokens, ref=ref))
            except asyncio.CancelledError:  # (its span ends with the run)
                if not runtime.closing:  # the run was cancelled: its agent stops too
                    with contextlib.suppress(Exception):
                        await runtime.stop(session.id, by=f"run {self.run_id} (cancelled)")
                raise  # the engine closes: its agent's turn is cut off, and goes on at the next start
            if status == "completed":
                return snapshot
            if attempt < attempts:
                await self._back_off(name, attempt, status, wait)
                wait *= 2
        raise TaskFailed(
            f"{name}: none of {attempts} attempt(s) completed (the last one {status})",
            label=name,
            attempts=attempts,
            status=status,
            last=snapshot,
        )

    async def _outcome(self, session_id: str, timeout: float) -> tuple[dict[str, JsonValue], str]:
        """Wait for the session's turn to be over (a turn paused on a request goes on waiting); its snapshot and
        the task's status: `completed`, `failed`, `cancelled` or `timed_out` (the turn is then stopped)."""
        runtime = self._runtime
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            session, timed_out = await runtime.wait(session_id, max(0.0, deadline - loop.time()))
            if timed_out or session.status != "awaiting_input":
                break
            if loop.time() >= deadline:
                timed_out = True
                break
            await asyncio.sleep(min(_PAUSED_POLL_S, deadline - loop.time()))
        if timed_out:
            with contextlib.suppress(Conflict):
                await runtime.stop(session_id, by=f"run {self.run_id} (no answer within {timeout:g} s)")
            session = await runtime.store.get_session(session_id)
        snapshot = await runtime.snapshot(session, timed_out=timed_out)
        if timed_out:
            return snapshot, "timed_out"
        return snapshot, "completed" if session.status in ("completed", "idle") else session.status

    async def _back_off(self, name: str, attempt: int, status: str, wait: float) -> None:
        store = self._runtime.store
        message = f"{name}: attempt {attempt} {status}; trying again in {wait:g} s"
        await store.append_journal(
            JournalEntry(run_id=self.run_id, kind="retry", message=message, detail={"attempt": attempt})
        )
        backoff = await self._open(
            SpanDraft(run_id=self.run_id, parent_span_id=self._parent, kind="backoff", label=f"{name} backoff")
        )
        try:
            await asyncio.sleep(wait)
        finally:
            await self._end(backoff, SpanPatch(status="completed", ended_at=_now()))

    async def _open(self, draft: SpanDraft) -> SpanRecord:
        """Store a span of the run, and tell the engine's run listeners."""
        opened = await self._runtime.store.open_span(draft)
        agent = opened.ref.get("agentId") if opened.ref else None
        mark = RunMark("opened", self.run_id, opened.id, opened.parent_span_id, opened.label, opened.kind,
                       opened.status, opened.started_at, agent if isinstance(agent, str) else None)  # fmt: skip
        tell(self._runtime, mark)
        return opened

    async def _end(self, span: SpanRecord, patch: SpanPatch) -> None:
        """Store the end of a span of the run, and tell the engine's run listeners."""
        await self._runtime.store.update_span(span.id, patch)
        mark = RunMark("ended", self.run_id, span.id, span.parent_span_id, span.label, span.kind, patch.status,
                       patch.ended_at or _now())  # fmt: skip
        tell(self._runtime, mark)

    @property
    def _parent(self) -> str | None:
        return self.record.id if self.record is not None else None


class Run(Span):
    """A run in progress: its spans and tasks (as a `Span`), its record and its journal."""

    def __init__(self, runtime: Runtime, record: RunRecord) -> None:
        super().__init__(runtime, record.id, None)
        self.run = record
        self.ending = RunPatch(status="completed")
        """How the run ends when its block exits without an error (`end_as` changes it)."""
        self.cancelled_by: str | None = None
        """Who cancels the run, said in its statusReason when its block is cancelled (None: `cancelled`)."""

    @property
    def id(self) -> str:
        """The run's id (`run_...`): what the run reads take."""
        return self.run_id

    def end_as(self, status: str, reason: str | None = None, error: JsonValue = None) -> None:
        """End the run with `status` (why, and what went wrong) rather than `completed` when its block exits
        without an exception: `skipped`, say (one of `RUN_ENDINGS`)."""
        if status not in RUN_ENDINGS:
            raise InvalidArgument(f"a run ends {', '.join(RUN_ENDINGS)}; not {status!r}")
        self.ending = RunPatch(status=status, status_reason=reason, error=error)

    async def sole_task(self, role: str, prompt: str, *, timeout: float, source: str, group_key: str) -> None:
        """Run the one task of a run that is nothing else (a hook's fire, a heartbeat's tick): the run ends as
        the task does, `completed`, or `timed_out`, `cancelled` or `failed`, with why."""
        try:
            await self.task(role, prompt, timeout=timeout, source=source, group_key=group_key)
        except TaskFailed as failed:
            status = failed.details["status"]
            reason = f"{role}: no answer within {timeout:g} s" if status == "timed_out" else str(failed)
            error: JsonValue = {"class": "TaskFailed", "message": str(failed)}
            self.end_as(status if status in RUN_ENDINGS else "failed", reason, error)

    async def journal(self, kind: str, message: str, detail: JsonValue = None) -> None:
        """Add a line to the run's journal (`run_history` shows it beside its agents' work)."""
        await self._runtime.store.append_journal(
            JournalEntry(run_id=self.run_id, kind=kind, message=message, detail=detail)
        )


def stable_run_id(prefix: str, name: str, occasion: str) -> str:
    """The run id of one occasion of a scheduled run (a heartbeat's tick, a hook's keyed fire): the same in every
    engine, so of several that record it, one does (`start_run` refuses an id that is taken)."""
    return f"run_{prefix}" + hashlib.blake2b(f"{name}\0{occasion}".encode(), digest_size=12).hexdigest()


@asynccontextmanager
async def start_run(
    runtime: Runtime,
    name: str,
    *,
    kind: str = "workflow",
    input: JsonValue = None,
    brain_sha: str | None = None,
    parent_run_id: str | None = None,
    id: str | None = None,
) -> AsyncIterator[Run]:
    """Record a run of `name` (its entity `<kind>:<name>`: runs of one entity are compared with each other) and
    end it as the block ends (see the module docs). An `id` that is taken raises `Conflict` before the block
    runs (of several processes, one records a heartbeat's tick)."""
    for what, value in (("name", name), ("kind", kind)):
        if not _NAME.match(value):
            raise InvalidArgument(f"a run's {what} is 1-100 letters, digits, '_', '.', '-' or ' ', not {value!r}")
    lapse = _lapse_seconds(runtime)
    try:
        draft = RunDraft(
            id=id,
            kind=kind,
            entity=f"{kind}:{name}",
            input=input,
            brain_sha=brain_sha,
            parent_run_id=parent_run_id,
            expires_at=_now() + timedelta(seconds=lapse),
        )
    except ValidationError as exc:
        raise InvalidArgument(
            f"a run's input is JSON (objects, lists, text, numbers, true, false, null): {exc}"
        ) from None
    record = await runtime.store.create_run(draft)
    entity = record.entity or f"{kind}:{name}"
    tell(runtime, RunMark("started", record.id, None, None, entity, record.kind, record.status, record.started_at))
    run = Run(runtime, record)
    patch = run.ending
    renewing = asyncio.create_task(_renew(runtime, record.id, lapse), name=f"agentwatch-run-{record.id}")
    try:
        yield run
        patch = run.ending
    except asyncio.CancelledError:
        patch = _cut_off(runtime, run.cancelled_by)
        raise
    except BaseException as exc:
        error: JsonValue = {"class": type(exc).__name__, "message": str(exc)}
        patch = RunPatch(status="failed", status_reason=str(exc) or type(exc).__name__, error=error)
        raise
    finally:
        await cancel_and_wait([renewing])  # (again while it runs: a store call may swallow a cancellation)
        # (not over the `interrupted` another engine wrote when this one was cut off past the run's expiry)
        ended = patch.model_copy(update={"ended_at": _now()})
        await runtime.store.end_run(record.id, ended)
        tell(runtime, RunMark("ended", record.id, None, None, entity, record.kind, ended.status, ended.ended_at))


async def billed_run(
    runtime: Runtime,
    session: SessionRecord,
    *,
    trigger: str = "input",
    turn_id: str | None = None,
    inputs: Sequence[InputRecord] = (),
) -> str | None:
    """The run that work of `session` is for and bills (turn `turn_id`, started by `trigger`, on `inputs` for a
    new turn; a compaction is new work): the session's run, but for work begun on new input after that run ended
    (or was reaped), which is other work of the agent's. Input the run sent (queued by a turn of the run's or by
    the run's task, `InputRecord.run_id`) is the run's work whenever a turn takes it; a turn begun as the run's
    (before the end, or on such input) stays the run's when it resumes after the end (an answer, a restart); an
    observer's turns watch for the run whatever starts them; a sub-agent's work begun after the end is the run's
    while its parent is at a turn of the run's (`_parents_run`)."""
    if session.run_id is None or session.is_observer:
        return session.run_id
    try:
        run = await runtime.store.get_run(session.run_id)
    except NotFound:
        return None
    if run.ended_at is None or any(item.run_id == run.id for item in inputs):
        return run.id
    if trigger != "input" and turn_id is not None and await _began_as_the_runs(runtime, session, turn_id, run):
        return run.id
    return await _parents_run(runtime, session, run.id)


async def _began_as_the_runs(runtime: Runtime, session: SessionRecord, turn_id: str, run: RunRecord) -> bool:
    """Whether turn `turn_id` of `session` began as work of ended run `run`: its first part billed the run (as its
    start records), or began before the end (a start recorded before starts said what they bill)."""
    began = await runtime.store.read_events(session.id, turn_id=turn_id, limit=1)
    if not began:
        return False
    start = began[0]
    billed = start.payload.run_id if isinstance(start.payload, TurnStarted) else None
    return billed == run.id or (run.ended_at is not None and start.at <= run.ended_at)


async def _parents_run(runtime: Runtime, session: SessionRecord, run_id: str) -> str | None:
    """What work of a sub-agent of ended run `run_id` begun after the end is for: its parent's, the run when the
    parent is at a turn of the run's (one begun before the end or on the run's work, gone on after it, spawned
    the sub-agent or sent it this). None for an agent that no agent of the run spawned, or whose parent is at
    other work or idle."""
    if session.parent_id is None:
        return None
    try:
        parent = await runtime.store.get_session(session.parent_id)
    except NotFound:
        return None
    if parent.run_id != run_id or parent.current_turn_id is None:
        return None
    return await billed_run(runtime, parent, trigger="continue", turn_id=parent.current_turn_id)


async def stop_orphaned_task(runtime: Runtime, session: SessionRecord, timeout: float, by: str) -> bool | None:
    """Stop `session`, the agent of a run's task still at work, when nobody enforces the task's `timeout` on it
    any more: its run ended (its engine died or closed, and the turn went on after a restart) and it ran past the
    timeout. True when it was stopped (as `by`); False when it ended meanwhile; None when it is left be (within
    its time, its run still waits on it, or another engine runs it and did not stop it yet)."""
    if datetime.now(UTC) - session.created_at < timedelta(seconds=timeout):
        return None
    if session.run_id is not None:
        with contextlib.suppress(NotFound):  # (a reaped run ended long ago)
            if (await runtime.store.get_run(session.run_id)).status == "running":
                return None  # its run waits on it, and stops it at the timeout
    try:
        return await runtime.stop(session.id, by=by)
    except Conflict:
        return None  # it runs in another engine that did not stop it yet: looked at again later


def _cut_off(runtime: Runtime, by: str | None = None) -> RunPatch:
    """How a run (or span) cancelled in its block ends: `cancelled` (`by` whom, when known); `interrupted` when its
    engine closes (a deploy's stop), as when its process dies, its agents' turns going on at the next start."""
    if runtime.closing:
        reason = "the engine closed before the run ended; its agents' turns go on when an engine next opens the store"
        return RunPatch(status="interrupted", status_reason=reason)
    return RunPatch(status="cancelled", status_reason=f"cancelled by {by}" if by else "cancelled")


def _lapse_seconds(runtime: Runtime) -> float:
    """How long a run outlives its process's last renewal: four session leases (60 s by default)."""
    return 4 * runtime.config.sessions.lease_seconds


async def _renew(runtime: Runtime, run_id: str, lapse: float) -> None:
    """Keep the run from lapsing while its block runs: renewed every quarter of `lapse`."""
    while True:
        await asyncio.sleep(lapse / 4)
        try:
            await runtime.store.renew_runs([run_id], _now() + timedelta(seconds=lapse))
        except Exception as exc:  # the next renewal may go through; a lapse ends the run `interrupted`
            log.warning("run %s: its expiry could not be renewed: %s", run_id, exc)


def _label(text: str) -> str:
    label = " ".join(text.split())
    if not label or len(label) > 200:
        raise InvalidArgument(f"a span's label needs 1 to 200 characters, not {len(label)}")
    return label


def _now() -> datetime:
    return datetime.now(UTC)
