"""Runs: a workflow's phases and tasks recorded by `engine.run`, and read back by `run_list`, `run_trace`,
`run_compare` and `run_history` (through `engine.call_tool`, as every surface calls them)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agentwatch.errors import InvalidArgument
from agentwatch.events import PageCursor, query_digest
from agentwatch.reads.runs import HistoryArgs
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.runtime.runs import Run, TaskFailed
from agentwatch.store import RunDraft, RunFilter, RunPatch, SessionFilter, SessionRecord, SpanPatch
from tests.runtime.support import HeldTool, OpenEngine, Scripted, lease_config, role
from tests.watchers.support import reporting

ROOT = Path(__file__).resolve().parents[2]


def _flaky(failures: int) -> ScriptedModel:
    """A model whose first `failures` requests fail (the turn fails), then answers."""
    calls = [0]

    def script(ctx: Any) -> Any:
        calls[0] += 1
        if calls[0] <= failures:
            raise RuntimeError(f"the provider is down (call {calls[0]})")
        return Reply(f"sources for {ctx.prompt}")

    return ScriptedModel(function=script)


async def _call(engine: Engine, tool: str, **args: Any) -> dict[str, Any]:
    answer = await engine.call_tool(tool, args)
    assert "error" not in answer, answer
    return answer


async def test_a_workflow_records_phases_tasks_attempts_and_backoffs_that_the_trace_reads_back(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    researcher = role("researcher", scripted("runs-researcher", _flaky(1)))
    writer = role("writer", scripted("runs-writer", ScriptedModel(function=lambda ctx: Reply("the report"))))
    async with open_engine(researcher, writer) as engine:
        async with engine.run("report", input={"topic": "tides", "depth": 2}) as run:
            async with run.span("Research") as research:
                found = await research.task("researcher", "tides", attempts=3, backoff_seconds=0.01)
            written = await run.task("writer", f"write up {found['lastAssistantText']}")
        assert (found["status"], written["lastAssistantText"]) == ("completed", "the report")

        trace = await _call(engine, "run_trace", id=run.id)
        assert trace["run"]["status"] == "completed" and trace["run"]["entity"] == "workflow:report"
        assert trace["run"]["input"] == {"topic": "tides", "depth": 2}
        by_kind: dict[str, list[dict[str, Any]]] = {}
        for span in trace["spans"]:
            by_kind.setdefault(span["kind"], []).append(span)
        (phase,) = by_kind["phase"]
        first, second, third = by_kind["task"]
        assert (phase["label"], phase["status"]) == ("Research", "completed")
        assert [(t["label"], t["attempt"], t["attempts"], t["status"]) for t in (first, second)] == [
            ("researcher", 1, 2, "failed"),
            ("researcher", 2, 2, "completed"),
        ]
        assert second["attemptOf"] == first["id"] and first["attemptOf"] is None
        assert first["parentSpanId"] == second["parentSpanId"] == phase["id"]
        assert (third["label"], third["parentSpanId"], third["status"]) == ("writer", None, "completed")
        (backoff,) = by_kind["backoff"]
        assert backoff["parentSpanId"] == phase["id"] and first["endedAt"] <= backoff["startedAt"]
        turns = by_kind["turn"]
        assert [t["parentSpanId"] for t in turns] == [first["id"], second["id"], third["id"]]
        assert [t["status"] for t in turns] == ["failed", "completed", "completed"]
        assert all(first["startedAt"] <= t["startedAt"] <= t["endedAt"] for t in turns)
        assert phase["tokens"] == second["tokens"] > 0  # a span's cost and tokens are its turns'
        assert trace["run"]["tokens"] == sum(t["tokens"] for t in turns)
        assert trace["honesty"] == {"reapedAgents": [], "costCoverage": "full", "truncated": False}
        assert [s["startedAt"] for s in trace["spans"]] == sorted(s["startedAt"] for s in trace["spans"])

        history = await _call(engine, "run_history", id=run.id, source=["journal"])
        assert [(e["type"], e["title"]) for e in history["entries"]] == [
            ("retry", "researcher: attempt 1 failed; trying again in 0.01 s")
        ]


async def test_a_task_that_never_completes_fails_the_run_with_its_reason(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    async with open_engine(role("researcher", scripted("runs-down", _flaky(10)))) as engine:
        with pytest.raises(TaskFailed, match="none of 2 attempt"):
            async with engine.run("report") as run:
                await run.task("researcher", "tides", attempts=2, backoff_seconds=0)
        trace = await _call(engine, "run_trace", id=run.id)
        assert trace["run"]["status"] == "failed"
        assert trace["run"]["error"]["class"] == "TaskFailed"
        assert [s["status"] for s in trace["spans"] if s["kind"] == "task"] == ["failed", "failed"]
        listed = await _call(engine, "run_list", entity="workflow:report")
        assert [(r["id"], r["status"]) for r in listed["runs"]] == [(run.id, "failed")]


async def test_a_task_paused_on_a_person_waits_and_its_wait_is_a_span(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    ran: list[str] = []

    def deploy(target: str) -> str:
        ran.append(target)
        return f"deployed to {target}"

    def script(ctx: Any) -> Any:
        if not ctx.tool_results:
            return CallTool("deploy", {"target": ctx.prompt})
        return Reply(ctx.tool_results[0].output)

    deployer = role(
        "deployer",
        scripted("runs-deployer", ScriptedModel(function=script)),
        tools=("deploy",),
        approval_tools=("deploy",),
    )
    async with open_engine(deployer, tools=[deploy]) as engine:

        async def approve_when_asked() -> None:
            while True:
                waiting = await engine.call_tool("agent_list", {"word": ["needs_you"]})
                if waiting["agents"]:
                    request = waiting["agents"][0]["oldestRequest"]["id"]
                    await engine.answer(request, True)
                    return
                await asyncio.sleep(0.05)

        async with engine.run("release", kind="pipeline") as run:
            approver = asyncio.create_task(approve_when_asked())
            done = await run.task("deployer", "staging", timeout=10)
            await approver
        assert done["lastAssistantText"] == "deployed to staging" and ran == ["staging"]
        trace = await _call(engine, "run_trace", id=run.id)
        (task,) = [s for s in trace["spans"] if s["kind"] == "task"]
        (wait,) = [s for s in trace["spans"] if s["kind"] == "hitl_wait"]
        assert (wait["label"], wait["status"], wait["parentSpanId"]) == (
            "approve deploy(target='staging')",
            "resolved",
            task["id"],
        )
        assert wait["endedAt"] is not None and wait["ref"]["agentId"] == task["ref"]["agentId"]
        assert trace["run"]["entity"] == "pipeline:release"

        # The run has ended: the same agent's later work (another deploy, approved too) is none of the run's.
        history = await _call(engine, "run_history", id=run.id, limit=200)
        (listed,) = (await _call(engine, "run_list", entity="pipeline:release"))["runs"]
        approver = asyncio.create_task(approve_when_asked())
        await engine.enqueue(task["ref"]["agentId"], "production")
        await approver
        await engine.wait(task["ref"]["agentId"], 10)
        assert ran == ["staging", "production"]
        assert await _call(engine, "run_trace", id=run.id) == trace
        assert await _call(engine, "run_history", id=run.id, limit=200) == history
        assert (await _call(engine, "run_list", entity="pipeline:release"))["runs"] == [listed]


async def test_compare_aligns_spans_by_path_and_diffs_the_inputs_leaf_by_leaf(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    researcher = role("researcher", scripted("runs-compare", _flaky(0)))
    async with open_engine(researcher) as engine:
        for depth, extra in ((1, False), (2, True)):
            async with (
                engine.run("report", input={"topic": "tides", "depth": depth}) as run,
                run.span("Research") as research,
            ):
                await research.task("researcher", "tides", label="Collect sources")
                if extra:
                    await research.task("researcher", "moons", label="Check facts")
            if depth == 1:
                first = run.id
        compared = await _call(engine, "run_compare", id=run.id)
        assert compared["against"]["id"] == first
        assert compared["input"] == [{"path": "depth", "this": 2, "that": 1}]
        assert [(s["path"], s["this"] is not None, s["that"] is not None) for s in compared["spans"]] == [
            ("Research", True, True),
            ("Research / Collect sources", True, True),
            ("Research / Check facts", True, False),
        ]
        assert compared["deltas"]["status"] == "same" and compared["deltas"]["tokens"] > 0
        assert compared["brainSha"] == {"this": None, "that": None, "changed": False}
        first_one = await _call(engine, "run_compare", id=first)
        assert (first_one["against"], first_one["deltas"], first_one["spans"]) == (None, None, [])
        explicit = await _call(engine, "run_compare", id=first, against=run.id)
        assert explicit["input"] == [{"path": "depth", "this": 1, "that": 2}]
        itself = await engine.call_tool("run_compare", {"id": run.id, "against": run.id})
        assert itself["error"]["code"] == "invalid_argument" and itself["error"]["details"]["fields"] == ["against"]
        assert "leave it out" in itself["error"]["message"]  # (what to do: its previous run, or another)


async def test_compare_says_which_run_is_still_going(open_engine: OpenEngine) -> None:
    """Once: a run still going was compared by its figures so far (`tokens -65`, `time ?`) with nothing to say so
    but a `status completed → running` delta, which reads as a change of outcome."""
    async with open_engine() as engine:
        store = engine.store
        done = await store.create_run(RunDraft(kind="workflow", entity="workflow:report"))
        await store.end_run(done.id, RunPatch(status="completed", ended_at=datetime.now(UTC)))
        going = await store.create_run(RunDraft(kind="workflow", entity="workflow:report"))
        compared = await _call(engine, "run_compare", id=going.id)
        assert (compared["against"]["id"], compared["stillRunning"]) == (done.id, ["this"])
        backwards = await _call(engine, "run_compare", id=done.id, against=going.id)
        assert backwards["stillRunning"] == ["that"]
        alone = await _call(engine, "run_compare", id=done.id)
        assert (alone["against"], alone["stillRunning"]) == (None, [])


async def test_history_pages_back_through_agents_pipeline_and_journal_in_one_order(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    researcher = role("researcher", scripted("runs-history", _flaky(0)))
    async with open_engine(researcher) as engine:
        async with engine.run("report") as run:
            await run.journal("note", "collecting from two sources", {"sources": 2})
            async with run.span("Research") as research:
                first = await research.task("researcher", "tides")
                await research.task("researcher", "moons")
        whole = await _call(engine, "run_history", id=run.id, limit=200)
        assert whole["nextCursor"] is None and not whole["truncated"]
        entries = whole["entries"]
        assert [e["at"] for e in entries] == sorted(e["at"] for e in entries)
        assert entries[0]["type"] == "run.started" and entries[-1]["type"] == "run.ended"
        titles = [e["title"] for e in entries if e["type"] in ("run.started", "run.ended")]
        assert titles == ["workflow:report started", "workflow:report completed"]  # (the entity says its kind)
        assert {e["source"] for e in entries} == {"agent", "pipeline", "journal"}
        assert ("journal", "note", "collecting from two sources") in {
            (e["source"], e["type"], e["title"]) for e in entries
        }

        pages: list[dict[str, Any]] = []
        cursor = None
        while True:
            page = await _call(engine, "run_history", id=run.id, limit=3, **({"cursor": cursor} if cursor else {}))
            pages.insert(0, page)  # newest page first: each older page goes before it
            cursor = page["nextCursor"]
            if cursor is None:
                break
        assert [e for page in pages for e in page["entries"]] == entries

        one = await _call(engine, "run_history", id=run.id, agentId=first["agentId"], limit=200)
        assert {e["agentId"] for e in one["entries"]} == {first["agentId"]}
        name = (await engine.store.get_session(first["agentId"])).name
        by_name = await _call(engine, "run_history", id=run.id, agentId=name, limit=200)  # as every tool takes it
        assert by_name["entries"] == one["entries"]
        assert any(e["detail"] == "tides" for e in one["entries"])
        found = await _call(engine, "run_history", id=run.id, q="MOONS", source=["agent"])
        assert found["entries"] and all("moons" in (e["detail"] or "").lower() for e in found["entries"])

        stranger = await engine.call_tool("run_history", {"id": run.id, "agentId": "ses_nope"})
        assert stranger["error"]["code"] == "invalid_argument" and stranger["error"]["details"]["fields"] == ["agentId"]
        # An agent has events, not pipeline or journal lines: asked for those only, it is refused, not an empty page.
        elsewhere = await engine.call_tool(
            "run_history", {"id": run.id, "agentId": first["agentId"], "source": ["journal"]}
        )
        assert elsewhere["error"]["code"] == "invalid_argument", elsewhere
        assert elsewhere["error"]["details"]["fields"] == ["agentId", "source"]
        bad_cursor = await engine.call_tool("run_history", {"id": run.id, "cursor": "p1.nope"})
        assert bad_cursor["error"]["code"] == "invalid_argument"
        missing = await engine.call_tool("run_trace", {"id": "run_nope"})
        assert missing["error"]["code"] == "not_found"


async def test_a_tasks_observer_works_for_the_run_after_it_ended(open_engine: OpenEngine, scripted: Scripted) -> None:
    """The observer of a run's task reads the task's last turn once it ended, after the run ended: its turns
    and its report are the run's all the same."""
    coder = role("coder", scripted("runs-observed", _flaky(0)), observer="reviewer", grant=("spawn",))
    reviewer = role("reviewer", scripted("runs-reviewer", reporting("Add a test.")))
    async with open_engine(coder, reviewer, extensions=None) as engine:
        async with engine.run("fix") as run:
            done = await run.task("coder", "the parser")

        async def reported() -> list[Any]:
            return await engine.store.read_events(done["agentId"], types=["observer.report"])

        for _ in range(500):
            if await reported():
                break
            await asyncio.sleep(0.02)
        (observer,) = (await engine.store.list_sessions(SessionFilter(is_observer=True))).items
        await engine.wait(observer.id, 10)
        billed = await engine.store.usage_totals([done["agentId"], observer.id])
        trace = await _call(engine, "run_trace", id=run.id)
        assert billed[observer.id].total_tokens > 0
        assert trace["run"]["tokens"] == sum(u.total_tokens for u in billed.values())
        history = await _call(engine, "run_history", id=run.id, limit=200)
        assert "observer.report" in {e["type"] for e in history["entries"] if e["agentId"] == done["agentId"]}
        assert {e["agentId"] for e in history["entries"]} >= {observer.id}


async def test_a_compaction_after_the_run_ended_is_not_billed_to_the_run(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once a summary a person asked for long after the run was added to its cost (the turns were billed as
    other work, the compaction still to the run)."""
    worker = role("worker", scripted("runs-compacted", _flaky(0)))
    async with open_engine(worker) as engine:
        async with engine.run("job") as run:
            done = await run.task("worker", "tides")
        before = await _call(engine, "run_trace", id=run.id)
        await engine.compact(done["agentId"])  # (the model writes the summary: it bills)
        assert (await engine.store.usage_totals([done["agentId"]]))[done["agentId"]].total_tokens > before["run"][
            "tokens"
        ]
        after = await _call(engine, "run_trace", id=run.id)
        assert after["run"]["tokens"] == before["run"]["tokens"]


async def test_a_trace_outlives_the_runs_agents(open_engine: OpenEngine, scripted: Scripted) -> None:
    researcher = role("researcher", scripted("runs-reaped", _flaky(0)))
    async with open_engine(researcher) as engine:
        async with engine.run("report") as run:
            done = await run.task("researcher", "tides")
        before = await _call(engine, "run_trace", id=run.id)
        assert await engine.store.reap([done["agentId"]]) == 1
        after = await _call(engine, "run_trace", id=run.id)
        assert after["honesty"]["reapedAgents"] == [done["agentId"]]
        assert [(s["kind"], s["tokens"]) for s in after["spans"]] == [(s["kind"], s["tokens"]) for s in before["spans"]]
        assert after["run"]["tokens"] == before["run"]["tokens"] > 0
        history = await _call(engine, "run_history", id=run.id, limit=200)
        assert {e["source"] for e in history["entries"]} == {"pipeline"}  # the transcript went with the agent


async def test_a_reaped_agents_turns_keep_their_outcome_and_timing_in_the_trace(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once: after the reap, a turn span was drawn from the ledger alone: a failed attempt's turn read
    `completed`, and each turn lasted from its first billed model request to its last (0 ms for one billed once)."""
    researcher = role("researcher", scripted("runs-reaped-turns", _flaky(1)))
    async with open_engine(researcher) as engine:
        async with engine.run("report") as run:
            await run.task("researcher", "tides", attempts=2, backoff_seconds=0)
        before = await _call(engine, "run_trace", id=run.id)
        agents = [s["ref"]["agentId"] for s in before["spans"] if s["kind"] == "task"]
        assert await engine.store.reap(agents) == 2
        after = await _call(engine, "run_trace", id=run.id)

    def turns(trace: dict[str, Any]) -> list[tuple[Any, ...]]:
        keys = ("ref", "status", "startedAt", "endedAt", "durationMs", "tokens")
        return [tuple(str(s[key]) for key in keys) for s in trace["spans"] if s["kind"] == "turn"]

    assert [t[1] for t in turns(before)] == ["failed", "completed"]
    assert turns(after) == turns(before)
    assert after["honesty"]["reapedAgents"] == sorted(agents)
    assert all(set(s["ref"] or {}) <= {"agentId", "subAgents", "turnId", "hitlId"} for s in after["spans"])


async def test_run_list_pages_newest_first_and_filters(open_engine: OpenEngine, scripted: Scripted) -> None:
    async with open_engine() as engine:
        made = []
        for name in ("a", "b", "a", "a"):
            async with engine.run(name) as run:
                made.append(run.id)
        await engine.store.update_run(made[-1], RunPatch(status="skipped", status_reason="gate"))
        first = await _call(engine, "run_list", entity="workflow:a", limit=2)
        rest = await _call(engine, "run_list", entity="workflow:a", limit=2, cursor=first["nextCursor"])
        assert [r["id"] for r in first["runs"] + rest["runs"]] == [made[3], made[2], made[0]]
        assert rest["nextCursor"] is None
        skipped = await _call(engine, "run_list", status=["skipped"])
        assert [(r["id"], r["statusReason"]) for r in skipped["runs"]] == [(made[3], "gate")]
        other_filters = await engine.call_tool("run_list", {"entity": "workflow:b", "cursor": first["nextCursor"]})
        assert other_filters["error"]["code"] == "invalid_argument"


async def test_run_list_refuses_a_kind_that_no_run_has_naming_the_kinds_closest_first(
    open_engine: OpenEngine,
) -> None:
    """Once: `kind: "workflw"` answered no runs, as if there were none of that kind. A kind of run agentwatch
    names (`hook`, before any fire) or one that a run has (`etl`) still lists; any other is refused."""
    async with open_engine() as engine:
        async with engine.run("report"), engine.run("load", kind="etl"):
            pass
        typo = await engine.call_tool("run_list", {"kind": "workflw"})
        error = typo.get("error", {})
        assert (error.get("code"), error.get("details", {}).get("fields")) == ("invalid_argument", ["kind"]), typo
        assert error["message"].startswith("kind: 'workflw' is no kind of run; the kinds, closest first: workflow, ")
        assert "etl" in error["message"] and "hook" in error["message"], error
        assert (await _call(engine, "run_list", kind="hook"))["runs"] == []  # (none fired yet)
        assert [r["entity"] for r in (await _call(engine, "run_list", kind="etl"))["runs"]] == ["etl:load"]
        filtered = await _call(engine, "run_list", kind="etl", status=["failed"])
        assert filtered["runs"] == []  # (it has runs: none failed)


async def test_a_cancelled_run_stops_the_agent_its_task_waits_on(open_engine: OpenEngine, scripted: Scripted) -> None:
    search = HeldTool("slow_search")
    searcher = search.role("searcher", scripted, "runs-cancelled")
    async with open_engine(searcher, tools=[search.tool]) as engine:
        ids: list[str] = []

        async def workflow() -> None:
            async with engine.run("search") as run:
                ids.append(run.id)
                await run.task("searcher", "everything")

        running = asyncio.create_task(workflow())
        await asyncio.wait_for(search.started.wait(), 10)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        trace = await _call(engine, "run_trace", id=ids[0])
        (task,) = [s for s in trace["spans"] if s["kind"] == "task"]
        assert (trace["run"]["status"], task["status"]) == ("cancelled", "cancelled")
        session = await engine.store.get_session(task["ref"]["agentId"])
        assert session.status == "cancelled"


@contextlib.asynccontextmanager
async def _napping(engine: Any) -> AsyncIterator[tuple[str, SessionRecord]]:
    """A run of one task whose agent (role `sleeper`) hangs in its turn, its model never answering: the run's id
    and the agent, once it is in that turn. The run is cancelled on the way out."""
    ids: list[str] = []

    async def workflow() -> None:
        async with engine.run("nap") as run:
            ids.append(run.id)
            await run.task("sleeper", "nap")

    running = asyncio.create_task(workflow())
    agent = None
    for _ in range(200):  # until its agent is in its turn
        sessions = await engine.store.list_sessions(SessionFilter())
        agent = next((s for s in sessions.items if s.current_turn_id), None)
        if agent is not None:
            break
        await asyncio.sleep(0.05)
    try:
        assert agent is not None
        yield ids[0], agent
    finally:
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running


async def test_a_turn_still_running_is_a_span_before_it_bills(open_engine: OpenEngine, scripted: Scripted) -> None:
    """Once a turn showed in a trace only once it billed (its usage written): a task whose agent waited on its
    model's first answer had nothing under it. A running turn is a span still going, as a running task is."""
    sleeper = role("sleeper", scripted("runs-running-turn", ScriptedModel.hang()))
    async with open_engine(sleeper) as engine, _napping(engine) as (run_id, agent):
        assert await engine.store.run_usage(run_id) == []  # (it billed nothing yet)
        trace = await _call(engine, "run_trace", id=run_id)
    (task,) = [s for s in trace["spans"] if s["kind"] == "task"]
    (turn,) = [s for s in trace["spans"] if s["kind"] == "turn"]
    assert (turn["status"], turn["endedAt"], turn["durationMs"], turn["parentSpanId"]) == (
        "running",
        None,
        None,
        task["id"],
    )
    assert turn["ref"] == {"agentId": agent.id, "turnId": agent.current_turn_id} and turn["label"] == "sleeper turn"
    assert (turn["costUsd"], turn["tokens"]) == (None, 0) and turn["startedAt"] >= task["startedAt"]


async def test_a_turn_cancelled_while_its_model_had_not_answered_stays_a_span_with_its_end(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """The turn of `test_a_turn_still_running_is_a_span_before_it_bills`, once its run was cancelled: its span
    stays, ended `cancelled`, whether or not its cut-off request billed (the ledger holds it with no tokens)."""
    sleeper = role("sleeper", scripted("runs-cancelled-turn", ScriptedModel.hang()))
    async with open_engine(sleeper) as engine:
        async with _napping(engine) as (run_id, agent):
            pass
        trace = await _call(engine, "run_trace", id=run_id)
    (task,) = [s for s in trace["spans"] if s["kind"] == "task"]
    (turn,) = [s for s in trace["spans"] if s["kind"] == "turn"]
    assert (trace["run"]["status"], task["status"]) == ("cancelled", "cancelled")
    assert (turn["status"], turn["parentSpanId"], turn["label"]) == ("cancelled", task["id"], "sleeper turn")
    assert turn["ref"] == {"agentId": agent.id, "turnId": agent.current_turn_id}
    assert turn["endedAt"] is not None and task["startedAt"] <= turn["startedAt"] <= turn["endedAt"]
    assert turn["durationMs"] is not None and turn["tokens"] == 0


async def test_a_turn_that_ended_without_billing_is_a_span_with_its_end_and_outcome(
    open_engine: OpenEngine,
) -> None:
    """Once a turn that ended before its model answered once (here its model is none the engine knows: it fails
    before any request, and bills nothing) was in no trace: the ledger drew the ended turns, and only the turn an
    agent still ran was drawn from the agent. It is a span with its end and outcome, after its agent was reaped
    too."""
    lost = role("lost", "scripted:runs-no-such-model")
    async with open_engine(lost) as engine:
        with pytest.raises(TaskFailed, match="none of 2 attempt"):
            async with engine.run("lost") as run:
                await run.task("lost", "anything", attempts=2, backoff_seconds=0)
        assert await engine.store.run_usage(run.id) == []  # (it never billed)
        trace = await _call(engine, "run_trace", id=run.id)
        agents = [s["ref"]["agentId"] for s in trace["spans"] if s["kind"] == "task"]
        assert await engine.store.reap(agents) == 2
        reaped = await _call(engine, "run_trace", id=run.id)
    tasks = [s for s in trace["spans"] if s["kind"] == "task"]
    turns = [s for s in trace["spans"] if s["kind"] == "turn"]
    assert [(t["status"], t["parentSpanId"], t["ref"]["agentId"]) for t in turns] == [
        ("failed", task["id"], task["ref"]["agentId"]) for task in tasks
    ]
    assert all(t["endedAt"] is not None and t["durationMs"] is not None for t in turns)
    assert all(task["startedAt"] <= t["startedAt"] <= t["endedAt"] for task, t in zip(tasks, turns, strict=True))
    assert [(t["label"], t["costUsd"], t["tokens"]) for t in turns] == [("lost turn", None, 0)] * 2
    again = [s for s in reaped["spans"] if s["kind"] == "turn"]
    assert [(t["id"], t["status"], t["startedAt"], t["endedAt"]) for t in again] == [
        (t["id"], t["status"], t["startedAt"], t["endedAt"]) for t in turns
    ]


async def test_an_unbilled_turn_of_the_agent_after_its_run_ended_is_not_the_runs(open_engine: OpenEngine) -> None:
    """A turn the run's agent began on new input after the run ended is other work of the agent's: one that
    ended without billing is left out of the trace too, as the ledger leaves out one that billed."""
    lost = role("lost", "scripted:runs-no-such-model-later")
    async with open_engine(lost) as engine:
        async with engine.run("lost") as run:
            with pytest.raises(TaskFailed):
                await run.task("lost", "anything")
        (agent,) = (await engine.store.list_sessions(SessionFilter(run_id=run.id))).items
        before = await _call(engine, "run_trace", id=run.id)
        await engine.enqueue(agent.id, "something else")
        settled, timed_out = await engine.wait(agent.id, 10)
        assert not timed_out and settled.current_turn_id is None
        assert len(await engine.store.read_events(agent.id, types=["turn.ended"])) == 2  # (it failed again)
        after = await _call(engine, "run_trace", id=run.id)
    assert [s["status"] for s in before["spans"] if s["kind"] == "turn"] == ["failed"]
    assert after["spans"] == before["spans"]


async def test_bad_run_and_task_arguments_are_refused_before_anything_is_stored(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    researcher = role("researcher", scripted("runs-bad-args", _flaky(0)))
    async with open_engine(researcher) as engine:
        for name in ("", "x" * 101, "two\nlines"):
            with pytest.raises(InvalidArgument, match="name"):
                async with engine.run(name):
                    pass
        with pytest.raises(InvalidArgument, match="input is JSON"):
            async with engine.run("report", input={1, 2}):  # type: ignore[arg-type]
                pass
        assert await engine.store.list_runs(RunFilter()) == []
        async with engine.run("report") as run:
            for bad in ({"attempts": 2.5}, {"attempts": 0}, {"timeout": float("nan")}, {"backoff_seconds": -1}):
                with pytest.raises(InvalidArgument):
                    await run.task("researcher", "tides", **bad)
            with pytest.raises(InvalidArgument, match="a run ends"):
                run.end_as("running")
            run.end_as("skipped", "nothing to do")
        assert (await engine.store.get_run(run.id)).status == "skipped"
        assert (await engine.store.list_sessions(SessionFilter())).items == []


async def test_a_run_whose_process_was_killed_ends_interrupted(open_engine: OpenEngine, tmp_path: Path) -> None:
    """Once: a run (and its spans) whose process died stayed `running` for ever. Its process is killed for
    real here (SIGKILL, while the run's task runs); another engine's maintenance ends the run once it lapsed."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.runtime.run_scenario", url, str(tmp_path),
        stdout=asyncio.subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    assert child.stdout is not None
    line = (await asyncio.wait_for(child.stdout.readline(), 30)).decode().split()
    assert line[:1] == ["running"], line
    run_id = line[1]
    child.kill()
    await child.wait()
    async with open_engine(store=url, config=lease_config(tmp_path), extensions=[]) as engine:
        assert (await engine.store.get_run(run_id)).status == "running"  # not lapsed yet

        async def ended() -> bool:
            return (await engine.store.get_run(run_id)).status != "running"

        deadline = asyncio.get_running_loop().time() + 20
        while not await ended():
            assert asyncio.get_running_loop().time() < deadline, "the lapsed run was never ended"
            await asyncio.sleep(0.25)
        trace = await _call(engine, "run_trace", id=run_id)
    assert (trace["run"]["status"], trace["run"]["statusReason"]) == (
        "interrupted",
        "its process stopped before the run ended",
    )
    assert {s["status"] for s in trace["spans"] if s["kind"] == "task"} == {"interrupted"}
    assert trace["run"]["endedAt"] is not None


async def test_compare_tells_repeated_labels_apart_rolls_costs_up_and_diffs_json_as_json(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once: two tasks with one label were merged as attempts of one; a phase's cost read 0.0 (its turns' cost
    was not rolled up, and an unknown cost read as 0.0); `true` and `1`, or `{"a.b": 1}` and `{"a": {"b": 1}}`,
    compared equal."""
    researcher = role("researcher", scripted("runs-compare-edges", _flaky(0)))
    inputs = ({"a.b": 1, "flag": True, "list": [1, 2]}, {"a": {"b": 1}, "flag": 1, "list": [1]})
    async with open_engine(researcher) as engine:
        for given in inputs:
            async with engine.run("edges", input=given) as run, run.span("Research") as research:
                await research.task("researcher", "one")
                await research.task("researcher", "two")
        compared = await _call(engine, "run_compare", id=run.id)
    by_path = {s["path"]: s for s in compared["spans"]}
    assert list(by_path) == ["Research", "Research / researcher", "Research / researcher #2"]
    assert [by_path[p]["this"]["attempts"] for p in by_path] == [1, 1, 1]
    phase = by_path["Research"]["this"]
    assert phase["costUsd"] is None  # no price is known for a scripted model: unknown, not 0.0
    assert {c["path"]: (c["this"], c["that"]) for c in compared["input"]} == {
        '["a.b"]': (None, 1),
        "a": ({"b": 1}, None),
        "flag": (1, True),
        "list[1]": (None, 2),
    }


async def test_a_sub_agents_turns_stay_under_their_task_after_the_agents_were_reaped(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once: after the reap, a sub-agent's turn moved out of the task that spawned it, and the task's cost
    dropped by the sub-agent's, with the coverage still `full` and the sub-agent missing from `reapedAgents`."""

    def boss(ctx: Any) -> Any:
        if not ctx.tool_results:
            return CallTool("agent_task", {"role": "helper", "prompt": "count to 3"})
        return Reply("the helper counted")

    lead = role("lead", scripted("runs-lead", ScriptedModel(function=boss)), tools=("agent_task",), grant=("spawn",))
    helper = role("helper", scripted("runs-helper", ScriptedModel(function=lambda ctx: Reply("1 2 3"))))
    async with open_engine(lead, helper, extensions=[]) as engine:
        async with engine.run("delegate") as run:
            done = await run.task("lead", "get it counted")
        before = await _call(engine, "run_trace", id=run.id)
        (task,) = [s for s in before["spans"] if s["kind"] == "task"]
        (spawned,) = task["ref"]["subAgents"]
        turns = [s for s in before["spans"] if s["kind"] == "turn"]
        assert {t["ref"]["agentId"] for t in turns} == {done["agentId"], spawned}
        assert {t["parentSpanId"] for t in turns} == {task["id"]}
        assert await engine.store.reap([done["agentId"], spawned]) == 2
        after = await _call(engine, "run_trace", id=run.id)
    (task_after,) = [s for s in after["spans"] if s["kind"] == "task"]
    assert {t["parentSpanId"] for t in after["spans"] if t["kind"] == "turn"} == {task["id"]}
    assert task_after["tokens"] == task["tokens"] == sum(t["tokens"] for t in turns) > 0
    assert after["honesty"]["reapedAgents"] == sorted([done["agentId"], spawned])


async def test_a_run_ends_its_open_spans_and_does_not_undo_a_lapse(open_engine: OpenEngine, scripted: Scripted) -> None:
    """Once: a span still open when its run ended stayed `running` for ever; and a process cut off from the store
    past its run's expiry wrote `completed` over the `interrupted` that another engine had recorded."""
    search = HeldTool("slow_search")
    searcher = search.role("searcher", scripted, "runs-open-spans")
    async with open_engine(searcher, tools=[search.tool]) as engine:
        started: list[Any] = []

        async def broken_workflow() -> None:
            async with engine.run("broken") as broken:
                started.append(broken)
                started.append(asyncio.create_task(broken.task("searcher", "x")))  # not awaited by the block
                while not (await engine.store.list_spans(broken.id)):
                    await asyncio.sleep(0.02)
                raise RuntimeError("the workflow broke")

        with pytest.raises(RuntimeError, match="the workflow broke"):
            await broken_workflow()
        broken, background = started
        assert {(s.kind, s.status) for s in await engine.store.list_spans(broken.id)} == {("task", "failed")}
        search.release.set()
        await background

        async with engine.run("lapsed") as lapsed:
            assert await engine.store.end_lapsed_runs(datetime.now(UTC) + timedelta(hours=1)) == [lapsed.id]
        assert (await engine.store.get_run(lapsed.id)).status == "interrupted"


async def test_forged_run_cursors_are_refused_as_bad_cursors(open_engine: OpenEngine) -> None:
    """Once: a cursor whose checksum was made right (it is no secret) but whose position no page could end at
    failed the call with an internal error (IndexError, ValueError, OverflowError, TypeError)."""
    async with open_engine() as engine:
        async with engine.run("forged") as run:
            pass
        listing = query_digest(RunFilter().model_dump(mode="json"))
        history = query_digest(HistoryArgs(id=run.id).model_dump(mode="json", exclude={"cursor", "limit", "max_chars"}))
        forged = {
            "run_list": [
                (listing, {}, key)
                for key in [
                    (),
                    ("x", "r"),
                    (None, None),
                    (1e308, "r"),
                    ("0001-01-01T00:00:00+01:00", "r"),
                    ("2024-01-01T00:00:00", "r"),
                ]
            ],
            "run_history": [
                (history, {"id": run.id}, key)
                for key in [("a", "b", "c"), ("a", None, "c"), ("2024-01-01T00:00:00+00:00", 2**64, "c"), ("x",)]
            ],
        }
        for tool, cases in forged.items():
            for digest, args, key in cases:
                answer = await engine.call_tool(tool, {**args, "cursor": PageCursor(digest, key).encode()})
                error = answer.get("error", {})
                assert (error.get("code"), error.get("details", {}).get("fields")) == (
                    "invalid_argument",
                    ["cursor"],
                ), (
                    tool,
                    key,
                    answer,
                )


async def test_a_run_whose_process_stopped_renewing_it_says_so_while_nothing_ended_it(
    open_engine: OpenEngine,
) -> None:
    """Once: a workflow killed with no service on its store showed `running` for good, with no hint."""
    async with open_engine(recover=False) as engine:  # (no maintenance: nothing ends a lapsed run here)
        gone = await engine.store.create_run(
            RunDraft(kind="workflow", entity="workflow:gone", expires_at=datetime.now(UTC) - timedelta(seconds=5))
        )
        fresh = await engine.store.create_run(
            RunDraft(kind="workflow", entity="workflow:fresh", expires_at=datetime.now(UTC) + timedelta(minutes=1))
        )
        listed = {r["id"]: r for r in (await _call(engine, "run_list"))["runs"]}
        trace = await _call(engine, "run_trace", id=gone.id)
    assert listed[gone.id]["status"] == "running" and listed[gone.id]["statusReason"].startswith("lapsed at ")
    assert trace["run"]["statusReason"] == listed[gone.id]["statusReason"]
    assert listed[fresh.id]["statusReason"] is None


async def test_a_reaped_agent_that_never_billed_keeps_its_role_in_the_trace(open_engine: OpenEngine) -> None:
    """Once: after the reap, the turn of an agent that never billed (its model failed before answering once) was
    drawn as `agent turn`: its role came from its session or the ledger, and neither was left."""
    lost = role("lost", "scripted:runs-no-such-model-reaped")
    async with open_engine(lost) as engine:
        async with engine.run("lost") as run:
            with pytest.raises(TaskFailed):
                await run.task("lost", "anything")
        (agent,) = (await engine.store.list_sessions(SessionFilter(run_id=run.id))).items
        assert await engine.store.run_usage(run.id) == []  # (it never billed)
        assert await engine.store.reap([agent.id]) == 1
        trace = await _call(engine, "run_trace", id=run.id)
        # A span's marks kept before they named the role still read: the turn keeps its times, not its role.
        (span,) = [s for s in await engine.store.list_spans(run.id) if s.kind == "task"]
        old = {**(span.ref or {}), "turns": [mark[:5] for mark in (span.ref or {})["turns"]]}
        await engine.store.update_span(span.id, SpanPatch(ref=old))
        before = await _call(engine, "run_trace", id=run.id)
    (turn,) = [s for s in trace["spans"] if s["kind"] == "turn"]
    assert (turn["label"], turn["status"], turn["ref"]["agentId"]) == ("lost turn", "failed", agent.id)
    assert trace["honesty"]["reapedAgents"] == [agent.id]
    (kept,) = [s for s in before["spans"] if s["kind"] == "turn"]
    assert kept == {**turn, "label": "agent turn"}


async def test_a_sub_agent_spawned_by_a_runs_turn_after_the_run_ended_bills_the_run(
    open_engine: OpenEngine, scripted: Scripted, url: str
) -> None:
    """Once: the turn of a run's agent that went on after the run ended (begun before its end: the run's work)
    spawned a sub-agent whose turns billed no run, so the run's trace and list left out what it cost. A
    sub-agent works for what its parent's turn works for."""
    inbox = HeldTool("late_inbox", "3 new mails")
    sort = CallTool("agent_task", {"role": "helper", "prompt": "sort them"})
    steps = iter([CallTool("late_inbox", {}), sort, Reply("sorted"), sort])

    def lead_script(ctx: Any) -> Any:
        return next(steps, Reply("sorted"))

    lead = role(
        "lead",
        scripted("runs-late-lead", ScriptedModel(function=lead_script)),
        tools=("late_inbox", "agent_task"),
        grant=("spawn",),
    )
    helper = role("helper", scripted("runs-late-helper", ScriptedModel(function=lambda ctx: Reply("sorted"))))
    async with open_engine(lead, helper, tools=[inbox.tool], extensions=[], store=url) as engine:
        async with engine.run("late") as run:
            boss = await engine.create("lead", run_id=run.id)
            await engine.enqueue(boss.id, "the inbox")
            await asyncio.wait_for(inbox.started.wait(), 10)
        inbox.release.set()  # (the run ended while its agent's turn was in the tool)
        settled, timed_out = await engine.wait(boss.id, 10)
        assert not timed_out and settled.status in ("completed", "idle")
        (child,) = (await engine.store.list_sessions(SessionFilter(parent_id=boss.id))).items
        billed = await engine.store.usage_totals([boss.id, child.id])
        assert billed[child.id].total_tokens > 0
        trace = await _call(engine, "run_trace", id=run.id)
        listed = await _call(engine, "run_list", entity="workflow:late")
        history = await _call(engine, "run_history", id=run.id, source=["agent"], limit=200)
        # New input after the end is other work of the agent's: what it spawns for it bills no run.
        await engine.enqueue(boss.id, "more mail")
        settled, timed_out = await engine.wait(boss.id, 10)
        assert not timed_out and settled.status in ("completed", "idle")
        (later,) = [
            s for s in (await engine.store.list_sessions(SessionFilter(parent_id=boss.id))).items if s.id != child.id
        ]
        assert (await engine.store.usage_totals([later.id]))[later.id].total_tokens > 0  # (it billed, to no run)
        again = await _call(engine, "run_trace", id=run.id)
    by_agent = {s["ref"]["agentId"] for s in trace["spans"] if s["kind"] == "turn"}
    assert by_agent == {boss.id, child.id}
    total = sum(u.total_tokens for u in billed.values())
    assert trace["run"]["tokens"] == listed["runs"][0]["tokens"] == total
    assert child.id in {e["agentId"] for e in history["entries"]}
    assert again["run"]["tokens"] == total
    assert {s["ref"]["agentId"] for s in again["spans"] if s["kind"] == "turn"} == by_agent


async def _work_sent_to_a_busy_sub_agent(
    engine: Engine, name: str, inbox: HeldTool, sorter: dict[str, str]
) -> tuple[Run, SessionRecord, SessionRecord]:
    """In run `name`: a `lead` and its `helper` sub-agent, which is kept busy in `inbox`'s tool while the lead's
    turn of the run sends it work (the lead's script sends to `sorter["id"]`); then the run ends, and the helper
    is let go of its tool: its turn on the sent work begins after the end. The run, the lead and the helper."""
    async with engine.run(name) as run:
        boss = await engine.create("lead", run_id=run.id)
        child = await engine.create("helper", parent_id=boss.id, run_id=run.id)
        sorter["id"] = child.id
        await engine.enqueue(child.id, "watch the inbox")
        await asyncio.wait_for(inbox.started.wait(), 10)
        await engine.enqueue(boss.id, "during the run")
        settled, timed_out = await engine.wait(boss.id, 10)
        assert not timed_out and settled.status in ("completed", "idle")
    inbox.release.set()
    return run, boss, child


async def test_work_a_runs_turn_sends_a_busy_sub_agent_bills_the_run_when_its_turn_begins_after_the_end(
    open_engine: OpenEngine, scripted: Scripted, url: str
) -> None:
    """Once: a run's agent sent work to its sub-agent (`agent_enqueue`, which does not wait) while the sub-agent
    was busy; the sub-agent's turn on it began after the parent's turn and the run had ended, found its parent
    idle, and billed no run, so the run's trace and list left out work the run asked for. The same work sent
    after the end (the parent at other work) bills no run."""
    inbox = HeldTool("busy_inbox", "3 new mails")
    helper = inbox.role("helper", scripted, "runs-sent-helper")
    sorter: dict[str, str] = {}

    def lead_script(ctx: Any) -> Any:
        if ctx.tool_results:
            return Reply("sent")
        return CallTool("agent_enqueue", {"agentId": sorter["id"], "prompt": f"sort them ({ctx.prompt})"})

    lead = role(
        "lead",
        scripted("runs-sent-lead", ScriptedModel(function=lead_script)),
        tools=("agent_enqueue",),
        grant=("spawn",),
    )
    async with open_engine(lead, helper, tools=[inbox.tool], extensions=[], store=url) as engine:
        run, boss, child = await _work_sent_to_a_busy_sub_agent(engine, "sent", inbox, sorter)
        settled, timed_out = await engine.wait(child.id, 10)
        assert not timed_out and settled.status in ("completed", "idle") and settled.pending_inputs == 0
        billed = await engine.store.usage_totals([boss.id, child.id])
        trace = await _call(engine, "run_trace", id=run.id)
        listed = await _call(engine, "run_list", entity="workflow:sent")
        # Work the parent sends after the end (its own turn other work) is other work of the sub-agent's too.
        await engine.enqueue(boss.id, "after the run")
        for agent in (boss, child):
            settled, timed_out = await engine.wait(agent.id, 10)
            assert not timed_out and settled.status in ("completed", "idle")
        later = await engine.store.usage_totals([child.id])
        again = await _call(engine, "run_trace", id=run.id)
    turns = [s for s in trace["spans"] if s["kind"] == "turn"]
    assert sorted(s["ref"]["agentId"] for s in turns) == sorted([boss.id, child.id, child.id])
    total = sum(u.total_tokens for u in billed.values())
    assert trace["run"]["tokens"] == listed["runs"][0]["tokens"] == total
    assert later[child.id].total_tokens > billed[child.id].total_tokens  # (it billed, to no run)
    assert again["run"]["tokens"] == total
    assert len([s for s in again["spans"] if s["kind"] == "turn"]) == len(turns)


async def test_a_turn_begun_on_work_a_run_sent_after_the_end_bills_the_run_when_an_answer_resumes_it(
    open_engine: OpenEngine, scripted: Scripted, url: str
) -> None:
    """A sub-agent's turn begun after the run ended on work the run sent it is the run's from its start: the part
    an answer resumes, its parent long idle, bills the run too (it billed no run once)."""
    inbox = HeldTool("busy_inbox", "3 new mails")

    def file_mail(folder: str) -> str:
        """File the mail."""
        return f"filed in {folder}"

    def helper_script(ctx: Any) -> Any:
        if ctx.tool_results:
            return Reply(str(ctx.tool_results[0].output))
        return (
            CallTool("file_mail", {"folder": "sorted"}) if "sort" in (ctx.prompt or "") else CallTool("busy_inbox", {})
        )

    helper = role(
        "helper",
        scripted("runs-asked-helper", ScriptedModel(function=helper_script)),
        tools=("busy_inbox", "file_mail"),
        approval_tools=("file_mail",),
    )
    sorter: dict[str, str] = {}

    def lead_script(ctx: Any) -> Any:
        return (
            Reply("sent")
            if ctx.tool_results
            else CallTool("agent_enqueue", {"agentId": sorter["id"], "prompt": "sort"})
        )

    lead = role(
        "lead",
        scripted("runs-asked-lead", ScriptedModel(function=lead_script)),
        tools=("agent_enqueue",),
        grant=("spawn",),
    )
    async with open_engine(lead, helper, tools=[inbox.tool, file_mail], extensions=[], store=url) as engine:
        run, boss, child = await _work_sent_to_a_busy_sub_agent(engine, "asked", inbox, sorter)
        paused, timed_out = await engine.wait(child.id, 10)
        assert not timed_out and paused.status == "awaiting_input"
        (request,) = await engine.store.list_requests(session_id=child.id)
        await engine.answer(request.id, True)
        settled, timed_out = await engine.wait(child.id, 10)
        assert not timed_out and settled.status in ("completed", "idle") and settled.last_text == "filed in sorted"
        billed = await engine.store.usage_totals([boss.id, child.id])
        trace = await _call(engine, "run_trace", id=run.id)
    assert trace["run"]["tokens"] == sum(u.total_tokens for u in billed.values())
    assert sorted(s["ref"]["agentId"] for s in trace["spans"] if s["kind"] == "turn") == sorted(
        [boss.id, child.id, child.id]
    )
