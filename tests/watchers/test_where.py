"""Reports where people look: `agent_tail`'s default set, `agent_history`, `agent_get` with each report's delivery
state, and the CLI's `tail` and `get`."""

from __future__ import annotations

import asyncio
from pathlib import Path

from click.testing import CliRunner

from agentwatch.cli import cli
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import ScriptedModel
from tests.watchers.support import OpenEngine, Scripted, eventually, reporting, reports, role

REPORT = "The parser drops the last line."


async def _delivery(engine: Engine, session_id: str) -> list[str]:
    record = await engine.call_tool("agent_get", {"id": session_id})
    return [r["delivery"] for r in record["observer"]["reports"]]


async def test_reports_show_in_the_default_tail_the_history_and_get(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    coder = role("coder", scripted("where-coder", ScriptedModel.replying("done", "fixed")), observer="reviewer")
    coder = coder.model_copy(update={"grant": ("spawn",)})
    watcher = role("reviewer", scripted("where-reviewer", reporting(REPORT)))
    async with open_engine(coder, watcher) as engine:
        session_id = str((await engine.task("coder", "write the parser", timeout=10))["agentId"])
        await eventually(lambda: reports(engine, session_id))
        tail = await engine.call_tool("agent_tail", {"id": session_id})
        rows = [r for r in tail["events"] if r["type"] == "observer.report"]
        assert [(r["title"], r["detail"], r["status"]) for r in rows] == [("report from reviewer", REPORT, "queued")]
        history = await engine.call_tool("agent_history", {"id": session_id})
        found = [e["payload"] for e in history["events"] if e["type"] == "observer.report"]
        assert [(p["observer_type"], p["report"]) for p in found] == [("reviewer", REPORT)]
        assert await _delivery(engine, session_id) == ["queued"]
        await engine.enqueue(session_id, "fix it")
        await engine.wait(session_id, 10)
        await eventually(lambda: _reports_count(engine, session_id, 2))  # its turn's digest: one more report
        assert await _delivery(engine, session_id) == ["read", "queued"]


async def _reports_count(engine: Engine, session_id: str, count: int) -> bool:
    return len(await reports(engine, session_id)) >= count


def test_the_cli_tail_and_get_show_reports_and_their_delivery_state(
    open_engine: OpenEngine, scripted: Scripted, store_url: str
) -> None:
    coder = role("coder", scripted("cli-where-coder", ScriptedModel.replying("done")), observer="reviewer")
    coder = coder.model_copy(update={"grant": ("spawn",)})
    watcher = role("reviewer", scripted("cli-where-reviewer", reporting(REPORT)))

    async def prepare() -> str:
        async with open_engine(coder, watcher) as engine:
            session_id = str((await engine.task("coder", "write the parser", timeout=10))["agentId"])
            await eventually(lambda: reports(engine, session_id))
            return session_id

    session_id = asyncio.run(prepare())
    runner = CliRunner(env={"AGENTWATCH_AGENTS_DIR": str(Path("no-agents-here")), "COLUMNS": "200"})
    got = runner.invoke(cli, ["get", session_id, "--store", store_url], catch_exceptions=False)
    assert got.exit_code == 0, got.output
    lines = [" ".join(line.split()) for line in got.output.splitlines()]
    assert "observer reviewer armed (observer started)" in lines
    assert f"report queued {REPORT}" in lines
    tailed = runner.invoke(cli, ["tail", session_id, "--store", store_url], catch_exceptions=False)
    assert tailed.exit_code == 0, tailed.output
    assert any("observer.report" in line and REPORT in line for line in tailed.output.splitlines())


async def test_a_queued_report_is_counted_apart_from_the_agents_pending_inputs(
    open_engine: OpenEngine, scripted: Scripted, url: str
) -> None:
    """A report waiting for the observed agent's next turn is not work someone queued for it: `pendingInputs` (what
    a scheduler reads to know an agent has work waiting) leaves it out, and `pendingReports` counts it, in the
    record and in the list row alike, until a turn reads it."""
    coder = role("coder", scripted("count-coder", ScriptedModel.replying("done", "fixed")), observer="reviewer")
    coder = coder.model_copy(update={"grant": ("spawn",)})
    watcher = role("reviewer", scripted("count-reviewer", reporting(REPORT)))
    async with open_engine(coder, watcher, store=url) as engine:
        session_id = str((await engine.task("coder", "write the parser", timeout=10))["agentId"])
        await eventually(lambda: reports(engine, session_id))
        assert await _waiting(engine, session_id) == (0, 1)
        await engine.enqueue(session_id, "fix it")
        await engine.wait(session_id, 10)  # the turn read the report with the input
        await eventually(lambda: _reports_count(engine, session_id, 2))  # its turn's digest: one more report
        assert await _waiting(engine, session_id) == (0, 1)


async def _waiting(engine: Engine, session_id: str) -> tuple[int, int]:
    """`(pendingInputs, pendingReports)` of the agent, the same in its record and in its list row."""
    record = await engine.call_tool("agent_get", {"id": session_id})
    listed = await engine.call_tool("agent_list", {"role": "coder"})
    (row,) = listed["agents"]
    assert (row["pendingInputs"], row["pendingReports"]) == (record["pendingInputs"], record["pendingReports"])
    return record["pendingInputs"], record["pendingReports"]
