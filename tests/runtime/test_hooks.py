"""Hooks: a role run when something outside asks (`hook_fire`), each fire a run of its own; a key fires once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentwatch.config import load_config
from agentwatch.errors import InvalidArgument, UserError
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.hooks import Hook, hooks_from_config
from agentwatch.runtime.policy import ToolRequest
from agentwatch.store import RunFilter, SessionFilter
from tests.runtime.support import HeldTool, OpenEngine, Scripted, prompt_recorder

CHECK = Hook("deploy-check", "checker", prompt="Check the deploy.", timeout=30)


def _checker(scripted: Scripted, name: str, prompts: list[str]) -> Any:
    return prompt_recorder("checker", scripted, name, prompts, answer="checked")


async def _settled(engine: Engine, run_id: str) -> dict[str, Any]:
    for _ in range(500):
        trace = await engine.call_tool("run_trace", {"id": run_id})
        if trace["run"]["status"] != "running":
            return trace
        await asyncio.sleep(0.02)
    raise AssertionError(f"run {run_id} did not end")


async def test_a_fire_is_a_run_with_a_session_of_the_hooks_lineage_given_the_input(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    prompts: list[str] = []
    async with open_engine(_checker(scripted, "hook-checker", prompts), hooks=[CHECK]) as engine:
        fired = await engine.call_tool("hook_fire", {"name": "deploy-check", "input": {"service": "api", "v": 7}})
        assert fired["hook"] == "deploy-check" and fired["duplicate"] is False
        trace = await _settled(engine, fired["runId"])
        assert trace["run"]["status"] == "completed" and trace["run"]["entity"] == "hook:deploy-check"
        (session,) = (await engine.store.list_sessions(SessionFilter(group_key="hook:deploy-check"))).items
        assert (session.source, session.run_id, session.last_text) == ("hook", fired["runId"], "checked 1")
        assert prompts[0].startswith("Check the deploy.\n\nInput:\n") and '"service": "api"' in prompts[0]
        (run,) = await engine.store.list_runs(RunFilter(entity="hook:deploy-check"))
        assert run.input == {"service": "api", "v": 7}


async def test_a_key_fires_once_however_often_the_fire_is_sent(open_engine: OpenEngine, scripted: Scripted) -> None:
    prompts: list[str] = []
    async with (
        open_engine(_checker(scripted, "hook-once", prompts), hooks=[CHECK]) as first,
        open_engine(_checker(scripted, "hook-once", prompts), hooks=[CHECK]) as second,
    ):
        args = {"name": "deploy-check", "key": "2026-12-05T10:00"}
        fired = await first.call_tool("hook_fire", args)
        again = await second.call_tool("hook_fire", args)  # a scheduler's retry, through another service
        assert again == {**fired, "duplicate": True}
        changed = await second.call_tool("hook_fire", {**args, "input": {"v": 2}})  # a reused key, by mistake
        assert changed["error"]["code"] == "conflict" and fired["runId"] in changed["error"]["message"]
        assert "new key" in changed["error"]["message"]
        other = await first.call_tool("hook_fire", {**args, "key": "2026-12-05T11:00"})
        assert other["runId"] != fired["runId"] and other["duplicate"] is False
        for run_id in (fired["runId"], other["runId"]):
            await _settled(first, run_id)
        assert len(prompts) == 2
        assert len(await first.store.list_runs(RunFilter(entity="hook:deploy-check"))) == 2


async def test_bad_fires_are_refused_with_what_to_do(
    open_engine: OpenEngine, scripted: Scripted, tmp_path: Path
) -> None:
    prompts: list[str] = []
    checker = _checker(scripted, "hook-refused", prompts)
    async with open_engine(checker, hooks=[CHECK]) as engine:
        unknown = await engine.call_tool("hook_fire", {"name": "nope"})
        assert unknown["error"]["code"] == "not_found" and "the hooks are deploy-check" in unknown["error"]["message"]
        agent = await engine.create("checker")  # an agent's turn asks the policy chain: it needs the spawn grant
        asked = ToolRequest("hook_fire", {"name": "deploy-check"}, session_id=agent.id, role="checker")
        refused = await engine.policy.decide(asked)
        assert refused.decision == "deny" and "'spawn' grant" in str(refused.reason)
    async with open_engine(checker, runs_turns=False) as acting:  # as an acting CLI command opens one
        idle = await acting.call_tool("hook_fire", {"name": "deploy-check"})
        assert idle["error"]["code"] == "conflict" and "an engine that runs turns" in idle["error"]["message"]
    assert prompts == []
    with pytest.raises(UserError, match="runs role 'ghost', which is not defined"):
        async with open_engine(checker, hooks=[Hook("haunt", "ghost", prompt="boo")]):
            pass
    # Once: a rule observer passed (it is in the roster) and every fire of the hook failed.
    with pytest.raises(UserError, match=r"runs role 'loop-guard', which is a rule observer.*\(roles: checker\)"):
        async with open_engine(checker, hooks=[Hook("guarded", "loop-guard", prompt="boo")]):
            pass
    with pytest.raises(InvalidArgument):
        Hook("bad name!", "checker", prompt="x")


def test_hooks_come_from_agentwatch_toml(tmp_path: Path) -> None:
    (tmp_path / "agentwatch.toml").write_text(
        '[hooks.deploy-check]\nrole = "checker"\nprompt = "Check the deploy."\ntimeout = "2m"\n'
    )
    assert hooks_from_config(load_config(tmp_path, env={})) == [
        Hook("deploy-check", "checker", prompt="Check the deploy.", timeout=120.0)
    ]


async def test_a_fire_cut_off_by_its_engine_closing_goes_on_at_the_next_start(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once: closing the engine (a deploy's stop) cancelled the fire's run and stopped its agent, while a crash
    left the agent to go on: a clean stop lost more work than a kill, and the service's log said it would go on."""
    slow = HeldTool("slow_check", output="checked")
    checker = slow.role("checker", scripted, "hook-cut-off")
    async with open_engine(checker, tools=[slow.tool], hooks=[CHECK]) as engine:
        fired = await engine.call_tool("hook_fire", {"name": "deploy-check"})
        await asyncio.wait_for(slow.started.wait(), 10)
    async with open_engine(checker, tools=[slow.tool], hooks=[CHECK]) as engine:
        run = await engine.store.get_run(fired["runId"])
        assert run.status == "interrupted" and "go on when an engine next opens the store" in str(run.status_reason)
        (session,) = (await engine.store.list_sessions(SessionFilter(group_key="hook:deploy-check"))).items
        slow.release.set()
        settled, timed_out = await engine.wait(session.id, 15)
        assert not timed_out and settled.status == "completed", settled
        # The turn went on for the run: its end is in the run's log, its whole cost in the run's.
        history = await engine.call_tool("run_history", {"id": fired["runId"], "limit": 200})
        assert "turn.ended" in {e["type"] for e in history["entries"]}
        trace = await engine.call_tool("run_trace", {"id": fired["runId"]})
        billed = (await engine.store.usage_totals([session.id]))[session.id].total_tokens
        assert trace["run"]["tokens"] == billed > 0


async def test_a_fire_whose_agent_does_not_answer_in_time_ends_timed_out(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once: it ended `failed`, "none of 1 attempt(s) completed (the last one timed_out)": a workflow's words for
    a one-shot fire, and `run_list {status: [timed_out]}` found nothing."""
    slow = HeldTool("slow_check")
    hook = Hook("deploy-check", "checker", prompt="Check.", timeout=0.3)
    async with open_engine(slow.role("checker", scripted, "hook-late"), tools=[slow.tool], hooks=[hook]) as engine:
        fired = await engine.call_tool("hook_fire", {"name": "deploy-check"})
        trace = await _settled(engine, fired["runId"])
        assert (trace["run"]["status"], trace["run"]["statusReason"]) == (
            "timed_out",
            "checker: no answer within 0.3 s",
        )
        listed = await engine.call_tool("run_list", {"status": ["timed_out"]})
        assert [r["id"] for r in listed["runs"]] == [fired["runId"]]
        slow.release.set()


async def test_maintenance_stops_a_fires_agent_that_outlived_its_run_and_the_timeout(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once: a fire cut off with its engine went on after the restart with nobody to time it out, hung, and ran
    for good (a heartbeat's next tick stops such an agent of its own; a hook has no next tick)."""
    slow = HeldTool("stuck_check")
    hook = Hook("deploy-check", "checker", prompt="Check.", timeout=0.3)
    async with open_engine(slow.role("checker", scripted, "hook-orphan"), tools=[slow.tool], hooks=[hook]) as engine:
        assert engine.hooks is not None
        async with engine.run("deploy-check", kind="hook") as cut_off:  # (ended: as when its engine closed)
            cut_off.end_as("interrupted", "the engine closed before the run ended")
        orphan = await engine.create("checker", run_id=cut_off.id, source="hook", group_key="hook:deploy-check")
        await engine.enqueue(orphan.id, "Check.")
        await asyncio.wait_for(slow.started.wait(), 10)
        assert await engine.hooks.stop_orphans() == 0  # within its time: left be
        await asyncio.sleep(0.4)
        assert await engine.hooks.stop_orphans() == 1
        assert (await engine.store.get_session(orphan.id)).status == "cancelled"
        journal = await engine.call_tool("run_history", {"id": cut_off.id, "source": ["journal"]})
        slow.release.set()
    assert [e["title"] for e in journal["entries"]] == [
        f"stopped {orphan.name}: its fire's run ended, and it ran past the hook's timeout (0.3 s)"
    ]


async def test_a_fire_cancelled_says_who_cancelled_it(open_engine: OpenEngine, scripted: Scripted) -> None:
    """Once: a fire cancelled by `agentwatch runs fire --timeout` ended with the reason `cancelled`, which said
    neither what cancelled it nor why."""
    slow = HeldTool("slow_check")
    async with open_engine(slow.role("checker", scripted, "hook-cancel"), tools=[slow.tool], hooks=[CHECK]) as engine:
        assert engine.hooks is not None
        fired = await engine.call_tool("hook_fire", {"name": "deploy-check"})
        await asyncio.wait_for(slow.started.wait(), 10)
        assert await engine.hooks.cancel(fired["runId"], by="the deploy's script (its deadline passed)")
        run = await engine.store.get_run(fired["runId"])
        slow.release.set()
    assert (run.status, run.status_reason) == ("cancelled", "cancelled by the deploy's script (its deadline passed)")
