"""Heartbeats: a role run on a schedule, each tick a run of its own that one engine of several records."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentwatch.config import load_config
from agentwatch.errors import InvalidArgument, UserError
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.heartbeats import Heartbeat, Tick, heartbeats_from_config, tick, tick_id
from agentwatch.runtime.models import Reply, ScriptedModel
from agentwatch.store import RunFilter, SessionFilter
from tests.runtime.support import HeldTool, OpenEngine, Scripted, role


def _digester(scripted: Scripted, name: str) -> Any:
    return role("digester", scripted(name, ScriptedModel(function=lambda ctx: Reply(f"digest of {ctx.prompt}"))))


async def _runs(engine: Engine, name: str) -> list[Any]:
    return await engine.store.list_runs(RunFilter(entity=f"heartbeat:{name}"))


async def test_a_tick_is_a_run_with_a_session_of_its_lineage_and_only_one_engine_records_it(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    digester = _digester(scripted, "hb-digester")
    beat = Heartbeat("digest", "digester", every=3600, prompt="the inbox")
    async with open_engine(digester) as first, open_engine(digester) as second:
        run_id = await tick(first, beat, 7)
        assert run_id is not None
        assert await tick(second, beat, 7) is None  # the same tick, from another engine on the store
        assert await tick(first, beat, 7) is None
        (run,) = await _runs(first, "digest")
        assert (run.id, run.status, run.input) == (
            run_id,
            "completed",
            {"tick": 7, "dueAt": "1970-01-01T07:00:00+00:00"},
        )
        (session,) = (await first.store.list_sessions(SessionFilter(group_key="hb:digest"))).items
        assert (session.source, session.run_id, session.status) == ("heartbeat", run_id, "completed")
        listed = await first.call_tool("agent_list", {"groupKey": "hb:digest"})
        assert [a["id"] for a in listed["agents"]] == [session.id]


async def test_comparing_a_tick_with_the_one_before_leaves_out_what_every_tick_changes(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once `run_compare` of every tick listed its `tick` and `dueAt` as the inputs that changed: they change at
    every tick by nature, and an agent (or a person) asking what changed since the last tick was told of them. A
    workflow's inputs of the same names are compared as ever."""
    beat = Heartbeat("digest", "digester", every=3600, prompt="the inbox")
    async with open_engine(_digester(scripted, "hb-compare")) as engine:
        earlier, later = [await tick(engine, beat, number) for number in (7, 8)]
        compared = await engine.call_tool("run_compare", {"id": later})
        assert (compared["against"]["id"], compared["input"]) == (earlier, [])
        assert compared["run"]["input"] == {"tick": 8, "dueAt": "1970-01-01T08:00:00+00:00"}  # (each side has its own)
        for number in (1, 2):
            async with engine.run("batch", input={"tick": number}) as run:
                pass
        workflow = await engine.call_tool("run_compare", {"id": run.id})
        assert workflow["input"] == [{"path": "tick", "this": 2, "that": 1}]


async def test_a_gate_skips_a_tick_or_fails_it_and_no_session_is_made(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    asked: list[Tick] = []

    def quiet(due: Tick) -> bool:
        asked.append(due)
        return False

    async def broken(due: Tick) -> bool:
        raise ConnectionError("the mail server is down")

    async with open_engine(_digester(scripted, "hb-gated")) as engine:
        await tick(engine, Heartbeat("quiet", "digester", every=60, prompt="x", gate=quiet), 3)
        await tick(engine, Heartbeat("broken", "digester", every=60, prompt="x", gate=broken), 3)
        (skipped,) = await _runs(engine, "quiet")
        (failed,) = await _runs(engine, "broken")
        assert (skipped.status, skipped.status_reason) == ("skipped", "gate")
        assert (failed.status, failed.status_reason) == ("failed", "gate_error")
        assert failed.error == {"class": "gate_error", "message": "ConnectionError: the mail server is down"}
        assert [(t.name, t.number, t.due_at.timestamp()) for t in asked] == [("quiet", 3, 180.0)]
        assert (await engine.store.list_sessions(SessionFilter(source=["heartbeat"]))).items == []
        listed = await engine.call_tool("run_list", {"kind": "heartbeat", "status": ["skipped"]})
        assert [(r["entity"], r["statusReason"]) for r in listed["runs"]] == [("heartbeat:quiet", "gate")]


async def test_a_tick_while_the_previous_one_runs_is_skipped_as_an_overlap(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    inbox = HeldTool("slow_inbox", "3 new mails")
    slow = inbox.role("digester", scripted, "hb-slow")
    beat = Heartbeat("digest", "digester", every=60, prompt="the inbox")
    async with open_engine(slow, tools=[inbox.tool]) as engine:
        first = asyncio.create_task(tick(engine, beat, 1))
        while not (await engine.store.list_sessions(SessionFilter(group_key="hb:digest", status=["running"]))).items:
            await asyncio.sleep(0.02)
        await tick(engine, beat, 2)
        inbox.release.set()
        await first
        by_tick = {run.input["tick"]: (run.status, run.status_reason) for run in await _runs(engine, "digest")}
        assert by_tick == {1: ("completed", None), 2: ("skipped", "overlap")}
        # Which earlier tick it overlapped is said in its journal, with where to look: the call (an agent reads it
        # through a tool, where a command line means nothing), kept as a suggestion a surface may word its way.
        (busy,) = (await engine.store.list_sessions(SessionFilter(group_key="hb:digest"))).items
        journal = await engine.call_tool("run_history", {"id": tick_id("digest", 2), "source": ["journal"]})
        (entry,) = journal["entries"]
        said = entry["title"]
        assert f"{busy.name} ({busy.id})" in said and f"run_trace {{id: '{tick_id('digest', 1)}'}}" in said, said
        assert "agentwatch" not in said, said
        assert entry["suggestions"] == [{"tool": "run_trace", "arguments": {"id": tick_id("digest", 1)}}]


async def test_a_tick_stops_an_earlier_ticks_agent_that_outlived_its_run_and_the_timeout(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once: a tick cut off with its engine (a crash, a stop) left its agent running with nobody to enforce the
    heartbeat's timeout (its run ended `interrupted`, its turn went on after the restart and hung), and every
    later tick was skipped as an overlap, for good."""
    inbox = HeldTool("stuck_inbox", "3 new mails")
    slow = inbox.role("digester", scripted, "hb-orphan")
    beat = Heartbeat("digest", "digester", every=60, prompt="the inbox", timeout=0.5)
    async with open_engine(slow, tools=[inbox.tool]) as engine:
        async with engine.run("digest", kind="heartbeat") as cut_off:  # (ended: as another engine ends a lapsed one)
            cut_off.end_as("interrupted", "its process stopped before the run ended")
        orphan = await engine.create("digester", run_id=cut_off.id, source="heartbeat", group_key="hb:digest")
        await engine.enqueue(orphan.id, "the inbox")
        await asyncio.wait_for(inbox.started.wait(), 10)
        await tick(engine, beat, 1)  # within the timeout: an overlap as ever
        await asyncio.sleep(0.6)
        second = asyncio.create_task(tick(engine, beat, 2))
        async with asyncio.timeout(10):  # (the tick stops it before running its own task)
            while (await engine.store.get_session(orphan.id)).status != "cancelled":
                await asyncio.sleep(0.02)
        inbox.release.set()
        await second
        by_tick = {
            run.input["tick"]: (run.status, run.status_reason) for run in await _runs(engine, "digest") if run.input
        }
        assert by_tick == {1: ("skipped", "overlap"), 2: ("completed", None)}
        journal = await engine.call_tool("run_history", {"id": tick_id("digest", 2), "source": ["journal"]})
        assert [e["title"] for e in journal["entries"]] == [
            f"stopped {orphan.name}: an earlier tick's agent, whose run ended, ran past the heartbeat's timeout (0.5 s)"
        ]


async def test_an_engine_that_recovers_ticks_on_schedule_and_others_do_not(
    open_engine: OpenEngine, scripted: Scripted, tmp_path: Path
) -> None:
    beat = Heartbeat("fast", "digester", every=0.25, prompt="now")
    digester = _digester(scripted, "hb-fast")
    async with open_engine(digester, heartbeats=[beat], recover=False) as engine:  # as `agentwatch run`
        await asyncio.sleep(0.7)
        assert await _runs(engine, "fast") == []
    async with open_engine(
        digester, heartbeats=[beat], config=load_config(tmp_path, env={"AGENTWATCH_BACKGROUND_TASKS": "0"})
    ) as engine:
        await asyncio.sleep(0.7)
        assert await _runs(engine, "fast") == []
    async with open_engine(digester, heartbeats=[beat]) as engine:
        await asyncio.sleep(1.1)
        engine.drain()  # no tick after this (one already begun records its run)
        await asyncio.sleep(0.1)
        ticked = await _runs(engine, "fast")
        await asyncio.sleep(0.6)
        assert len(ticked) >= 3 and [r.id for r in await _runs(engine, "fast")] == [r.id for r in ticked]
        assert {run.status for run in ticked} <= {"completed", "running"}


def test_heartbeats_from_agentwatch_toml(tmp_path: Path) -> None:
    (tmp_path / "agentwatch.toml").write_text(
        '[heartbeats.digest]\nrole = "digester"\nevery = "1h"\nprompt = "Summarize the inbox."\ntimeout = "5m"\n'
    )
    (beat,) = heartbeats_from_config(load_config(tmp_path, env={}))
    assert (beat.name, beat.role, beat.every, beat.prompt, beat.timeout) == (
        "digest",
        "digester",
        3600.0,
        "Summarize the inbox.",
        300.0,
    )
    (tmp_path / "agentwatch.toml").write_text('[heartbeats.digest]\nrole = "digester"\nevery = "10ms"\nprompt = "x"\n')
    with pytest.raises(InvalidArgument, match="at most once a second"):
        load_config(tmp_path, env={})
    (tmp_path / "agentwatch.toml").write_text(
        '[heartbeats.digest]\nrole = "d"\nevery = "1h"\nprompt = "x"\ntimeout = "0s"\n'
    )
    with pytest.raises(InvalidArgument, match="timeout above 0"):
        load_config(tmp_path, env={})
    (tmp_path / "agentwatch.toml").write_text('[heartbeats."my digest"]\nrole = "d"\nevery = "1h"\nprompt = "x"\n')
    with pytest.raises(InvalidArgument, match=r"agentwatch\.toml"):
        load_config(tmp_path, env={})
    with pytest.raises(InvalidArgument, match="name"):
        Heartbeat("no spaces please", "digester", every=60, prompt="x")
    with pytest.raises(InvalidArgument, match="timeout"):
        Heartbeat("digest", "digester", every=60, prompt="x", timeout=0)


async def test_a_heartbeat_of_an_unknown_role_or_a_repeated_name_is_refused_at_open(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    digester = _digester(scripted, "hb-refused")
    with pytest.raises(UserError, match="'digest' runs role 'nobody', which is not defined"):
        async with open_engine(digester, heartbeats=[Heartbeat("digest", "nobody", every=60, prompt="x")]):
            pass
    twice = [Heartbeat("digest", "digester", every=60, prompt="x")] * 2
    with pytest.raises(UserError, match="two heartbeats are named 'digest'"):
        async with open_engine(digester, heartbeats=twice):
            pass
