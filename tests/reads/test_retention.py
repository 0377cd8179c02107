"""Retention: soft-deleted rows readable until reapAt, heartbeat/hook TTL, a watch holds, reaped = not_found."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agentwatch.config import RetentionConfig
from agentwatch.retention import HELD_UNTIL, reap_due, reap_runs_due, sessions_due
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import Reply, ScriptedModel
from agentwatch.store import SessionDraft, SessionFilter, SessionPatch, SessionRecord, Store, Write, every_session
from tests.runtime.support import OpenEngine, Scripted, role


async def test_soft_deleted_agents_read_by_id_until_the_reap_then_not_found(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    model = scripted("ret", ScriptedModel([Reply("bye")]))
    async with open_engine(role("chat", model)) as engine:
        sid = (await engine.task("chat", "hi"))["agentId"]
        deleted = await engine.call_tool("agent_delete", {"id": sid})
        reap_at = datetime.fromisoformat(deleted["reapAt"])
        retention = engine.config.retention

        assert await reap_due(engine.store, retention, now=reap_at - timedelta(seconds=1)) == 0
        for tool in ("agent_get", "agent_history", "agent_export", "agent_tail"):
            answer = await engine.call_tool(tool, {"id": sid})
            assert not isinstance(answer.get("error"), dict), (tool, answer)
        listed = await engine.call_tool("agent_list", {"deleted": True})
        assert [row["id"] for row in listed["agents"]] == [sid]

        assert await engine.ring.head(sid) is not None
        reaped = engine.ring.drop  # as the engine's upkeep reaps: the live ring lets go of it too
        assert await reap_due(engine.store, retention, now=reap_at + timedelta(seconds=1), reaped=reaped) == 1
        assert await engine.ring.head(sid) is None
        for tool in ("agent_get", "agent_history", "agent_export", "agent_tail", "agent_prompt"):
            assert (await engine.call_tool(tool, {"id": sid}))["error"]["code"] == "not_found", tool
        assert (await engine.store.usage_totals([sid]))[sid].total_tokens > 0  # the ledger outlives the reap


async def test_a_deleted_agents_observer_is_reaped_with_it(scripted: Scripted, tmp_path: Path) -> None:
    """Once an observer agent's session outlived the agent it watched, for good: nothing reaped it."""
    model = scripted("ret-watched", ScriptedModel(function=lambda ctx: Reply("done")))
    quiet = scripted("ret-watcher", ScriptedModel(function=lambda ctx: Reply("nothing to report")))
    watched = role("watched", model, observer="quiet", grant=("spawn",))
    definitions = [watched, role("quiet", quiet)]  # (with the observer agents, which the reads' engines leave out)
    async with Engine.open(f"sqlite:///{tmp_path / 'watched.db'}", root=tmp_path, definitions=definitions) as engine:
        sid = (await engine.task("watched", "hi"))["agentId"]
        for _ in range(500):
            observers = (await engine.store.list_sessions(SessionFilter(parent_id=sid, is_observer=True))).items
            if observers and observers[0].status == "idle" and observers[0].last_seq > 0:
                break
            await asyncio.sleep(0.02)
        (observer,) = observers
        deleted = await engine.call_tool("agent_delete", {"id": sid})
        after = datetime.fromisoformat(deleted["reapAt"]) + timedelta(seconds=1)
        assert await reap_due(engine.store, engine.config.retention, now=after) == 2
        for gone in (sid, observer.id):
            assert (await engine.call_tool("agent_get", {"id": gone}))["error"]["code"] == "not_found"


async def test_heartbeat_and_hook_sessions_are_reaped_after_their_ttl_unless_a_watch_holds_them(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    model = scripted("tick", ScriptedModel(function=lambda ctx: Reply("tick")))
    async with open_engine(role("digest", model)) as engine:
        tick = await engine.create("digest", name="tick", source="heartbeat", group_key="hb:digest")
        hook = await engine.create("digest", name="hook", source="hook")
        held = await engine.create("digest", name="held", source="heartbeat", group_key="hb:digest")
        chat = await engine.create("digest", name="chat", source="chat")
        running = await engine.create("digest", name="busy", source="hook")
        await engine.store.update_session(running.id, SessionPatch(status="running"))
        later = datetime.now(UTC) + timedelta(hours=25)
        await engine.store.update_session(
            held.id, SessionPatch(settings={HELD_UNTIL: (later + timedelta(hours=1)).isoformat()})
        )
        retention = RetentionConfig(heartbeat_ttl="24h", hook_ttl="24h")

        assert await reap_due(engine.store, retention, now=datetime.now(UTC) + timedelta(hours=23)) == 0
        assert await reap_due(engine.store, retention, now=later) == 2
        remaining = await engine.call_tool("agent_list", {"deleted": True, "sort": "name"})
        assert sorted(row["id"] for row in remaining["agents"]) == sorted([held.id, chat.id, running.id])
        assert (await engine.call_tool("agent_get", {"id": tick.id}))["error"]["code"] == "not_found"
        assert (await engine.call_tool("agent_get", {"id": hook.id}))["error"]["code"] == "not_found"

        # The watch ends: the next pass takes it.
        assert await reap_due(engine.store, retention, now=later + timedelta(hours=2)) == 1


async def test_what_a_heartbeat_session_spawned_is_reaped_with_it_once_it_settled(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once: a heartbeat tick's sub-agents (source `task`) were never reaped, their transcripts kept for ever."""
    model = scripted("tick-spawn", ScriptedModel(function=lambda ctx: Reply("tick")))
    async with open_engine(role("digest", model)) as engine:
        tick = await engine.create("digest", name="tick", source="heartbeat", group_key="hb:digest")
        helper = await engine.create("digest", name="helper", source="task", parent_id=tick.id)
        grandchild = await engine.create("digest", name="grandchild", source="task", parent_id=helper.id)
        busy_tick = await engine.create("digest", name="busy-tick", source="heartbeat", group_key="hb:digest")
        busy = await engine.create("digest", name="busy", source="task", parent_id=busy_tick.id)
        await engine.store.update_session(busy.id, SessionPatch(status="running"))
        retention = RetentionConfig(heartbeat_ttl="24h")
        later = datetime.now(UTC) + timedelta(hours=25)

        assert await reap_due(engine.store, retention, now=later) == 3
        for gone in (tick, helper, grandchild):
            assert (await engine.call_tool("agent_get", {"id": gone.id}))["error"]["code"] == "not_found"
        for kept in (busy_tick, busy):  # what it spawned still runs: both wait
            assert not isinstance((await engine.call_tool("agent_get", {"id": kept.id})).get("error"), dict)
        await engine.store.update_session(busy.id, SessionPatch(status="completed"))
        assert await reap_due(engine.store, retention, now=later) == 2


async def test_a_family_is_never_split_over_two_reaps(open_engine: OpenEngine, scripted: Scripted) -> None:
    """Once: the list of sessions due was cut at its limit inside a family: the heartbeat session was reaped,
    the sub-agents past the cut stayed, and nothing found them again (their parent was gone)."""
    model = scripted("tick-family", ScriptedModel(function=lambda ctx: Reply("tick")))
    async with open_engine(role("digest", model)) as engine:
        first = await engine.create("digest", name="first", source="heartbeat", group_key="hb:digest")
        children = [await engine.create("digest", source="task", parent_id=first.id) for _ in range(3)]
        second = await engine.create("digest", name="second", source="heartbeat", group_key="hb:digest")
        later = datetime.now(UTC) + timedelta(hours=25)
        retention = RetentionConfig(heartbeat_ttl="24h")
        due = await sessions_due(engine.store, retention, now=later, limit=2)
        assert sorted(due) == sorted([first.id, *(c.id for c in children)])  # whole, past the limit
        assert second.id not in due
        assert await reap_due(engine.store, retention, now=later) == 5


async def test_runs_are_reaped_after_their_ttl_and_the_ledger_keeps_what_they_billed(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    model = scripted("worker", ScriptedModel(function=lambda ctx: Reply("done")))
    async with open_engine(role("worker", model)) as engine:
        async with engine.run("report") as run:
            snapshot = await run.task("worker", "work")
        retention = RetentionConfig(run_ttl=timedelta(days=2), skipped_run_ttl=timedelta(hours=1))
        now = datetime.now(UTC)

        assert await reap_runs_due(engine.store, retention, now=now + timedelta(days=1)) == 0
        assert (await engine.call_tool("run_trace", {"id": run.id}))["run"]["status"] == "completed"

        assert await reap_runs_due(engine.store, retention, now=now + timedelta(days=3)) == 1
        assert (await engine.call_tool("run_trace", {"id": run.id}))["error"]["code"] == "not_found"
        assert (await engine.call_tool("run_list", {}))["runs"] == []
        assert (await engine.call_tool("agent_get", {"id": snapshot["agentId"]}))["status"] == "completed"
        assert (await engine.store.usage_totals([snapshot["agentId"]]))[snapshot["agentId"]].total_tokens > 0


async def test_a_deleted_heartbeat_session_says_when_its_ttl_reaps_it_and_goes_with_what_it_spawned(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once: a deleted heartbeat session said `reapAt` a week ahead (the deleted rows' keep) while its TTL reaped
    it within a day, so a reader counting on `reapAt` found it gone days early; and where its `reapAt` came first,
    it was reaped without the sub-agents it spawned, which nothing reaped after."""
    model = scripted("tick-deleted", ScriptedModel(function=lambda ctx: Reply("tick")))
    async with open_engine(role("digest", model)) as engine:
        tick = await engine.create("digest", name="tick", source="heartbeat", group_key="hb:digest")
        helper = await engine.create("digest", name="helper", source="task", parent_id=tick.id)
        chat = await engine.create("digest", name="chat", source="chat")
        retention = engine.config.retention
        for session in (tick, chat):
            await engine.call_tool("agent_delete", {"id": session.id})
        tick_reap = datetime.fromisoformat((await engine.call_tool("agent_get", {"id": tick.id}))["reapAt"])
        chat_reap = datetime.fromisoformat((await engine.call_tool("agent_get", {"id": chat.id}))["reapAt"])
        assert chat_reap - datetime.now(UTC) > retention.deleted_ttl - timedelta(minutes=1)
        assert tick_reap - datetime.now(UTC) < retention.heartbeat_ttl  # its TTL, shorter than the keep

        assert await reap_due(engine.store, retention, now=tick_reap - timedelta(seconds=1)) == 0
        for tool in ("agent_get", "agent_history", "agent_export"):  # readable until the moment it said
            assert not isinstance((await engine.call_tool(tool, {"id": tick.id})).get("error"), dict), tool
        assert await reap_due(engine.store, retention, now=tick_reap + timedelta(seconds=1)) == 2
        for gone in (tick, helper):
            assert (await engine.call_tool("agent_get", {"id": gone.id}))["error"]["code"] == "not_found"
        assert (await engine.call_tool("agent_get", {"id": chat.id}))["id"] == chat.id

        # Kept for less than a TTL, a deleted tick goes at its reapAt, with what it spawned once that settled.
        short = RetentionConfig(heartbeat_ttl="24h", deleted_ttl="1h")
        tick = await engine.create("digest", name="tick2", source="heartbeat", group_key="hb:digest")
        busy = await engine.create("digest", name="busy", source="task", parent_id=tick.id)
        await engine.store.update_session(busy.id, SessionPatch(status="running"))
        later = datetime.now(UTC) + timedelta(hours=2)
        await engine.store.write(Write(tick.id, delete_until=later - timedelta(hours=1)))  # as deleted_ttl = 1h
        assert await reap_due(engine.store, short, now=later) == 0  # what it spawned still runs: both wait
        await engine.store.update_session(busy.id, SessionPatch(status="completed"))
        assert await reap_due(engine.store, short, now=later) == 2


async def test_deleted_sessions_past_a_page_of_held_ones_are_reaped(store: Store) -> None:
    """Once: the reaper read the sessions due a page (100) at a time, oldest `reapAt` first, and skipped those a
    watch holds; when a whole page was held, it found nothing to reap, stopped, and read the same page at every
    pass after: the deleted sessions behind it were never reaped. Now it reads on past the ones it skips."""
    now = datetime.now(UTC)
    watched = {HELD_UNTIL: (now + timedelta(hours=1)).isoformat()}
    held, free = [], []
    for number in range(130):  # more than a page, all due before the free ones
        session = await store.create_session(SessionDraft(name=f"held-{number}", role="chat", settings=watched))
        await store.soft_delete(session.id, reap_at=now - timedelta(hours=2))
        held.append(session.id)
    for number in range(120):
        session = await store.create_session(SessionDraft(name=f"free-{number}", role="chat"))
        await store.soft_delete(session.id, reap_at=now - timedelta(hours=1))
        free.append(session.id)

    assert await reap_due(store, RetentionConfig(), now=now) == len(free)  # in one pass
    left = [s.id async for s in every_session(store, SessionFilter(deleted=True))]
    assert sorted(left) == sorted(held)

    # The watches end: the next pass takes them.
    assert await reap_due(store, RetentionConfig(), now=now + timedelta(hours=2)) == len(held)


async def test_a_pass_reads_each_held_session_once_however_many_batches_it_reaps(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once: each batch of a pass read the deleted sessions from the start again, the held ones ahead of the due
    ones every time (a pass of three batches read each of them three times). Now a pass reads on."""
    now = datetime.now(UTC)
    watched = {HELD_UNTIL: (now + timedelta(hours=1)).isoformat()}
    held: set[str] = set()
    for number in range(30):
        session = await store.create_session(SessionDraft(name=f"held-{number}", role="chat", settings=watched))
        await store.soft_delete(session.id, reap_at=now - timedelta(hours=2))
        held.add(session.id)
    for number in range(250):  # three batches
        session = await store.create_session(SessionDraft(name=f"free-{number}", role="chat"))
        await store.soft_delete(session.id, reap_at=now - timedelta(hours=1))
    reads: Counter[str] = Counter()
    get_session = store.get_session

    async def counted(session_id: str) -> SessionRecord:
        reads[session_id] += 1
        return await get_session(session_id)

    monkeypatch.setattr(store, "get_session", counted)
    batches: list[int] = []

    async def reaped(ids: Sequence[str]) -> None:
        batches.append(len(ids))

    assert await reap_due(store, RetentionConfig(), now=now, reaped=reaped) == 250
    assert batches == [100, 100, 50]
    assert {session_id: reads[session_id] for session_id in held} == dict.fromkeys(held, 1)
    left = [s.id async for s in every_session(store, SessionFilter(deleted=True))]
    assert sorted(left) == sorted(held)
