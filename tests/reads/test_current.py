"""`current`: what a running agent is doing now, as agent_get and agent_await say it."""

from __future__ import annotations

import asyncio
from typing import Any

from agentwatch.cli._common import Reader
from agentwatch.events import CompletionFinished, Event, TurnStarted, truncation_marker
from agentwatch.live.redis import RedisRing
from agentwatch.reads.tools import read_tools
from agentwatch.runtime.models import CallTool, Hang, Reply, ScriptedModel, Think
from agentwatch.tools import Caller
from tests.runtime.support import HeldTool, OpenEngine, Scripted, role


async def _now(engine: Any, agent_id: str, title: str) -> dict[str, Any]:
    """`current.currentItem` of the agent, once its title is `title` (or as it is after a few seconds)."""
    for _ in range(100):
        item: dict[str, Any] = (await engine.call_tool("agent_get", {"id": agent_id}))["current"]["currentItem"]
        if item is not None and item["title"] == title:
            break
        await asyncio.sleep(0.02)
    return item


async def _listed_now(engine: Any, agent_id: str) -> Any:
    """The `currentItem` of the agent's `agent_list` row."""
    rows = (await engine.call_tool("agent_list", {"limit": 100}))["agents"]
    return next(row for row in rows if row["id"] == agent_id)["currentItem"]


async def test_the_current_item_is_a_call_still_running_when_calls_made_beside_it_ended(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Results of calls made together are recorded once every one of them ended: a fast call that ended beside
    slow ones was named as what the agent does now (the model's last call), while the slow ones ran."""
    first, second = HeldTool("crawl"), HeldTool("index")
    quick = asyncio.Event()

    async def lookup() -> str:
        quick.set()
        return "found"

    calls = [CallTool("crawl", {}), CallTool("index", {}), CallTool("lookup", {})]
    model = scripted("parallel", ScriptedModel([*calls, Reply("all done")]))
    worker = role("worker", model, tools=("crawl", "index", "lookup"))
    async with open_engine(worker, tools=[first.tool, second.tool, lookup]) as engine:
        agent = await engine.create("worker")
        await engine.enqueue(agent.id, "go")
        await asyncio.wait_for(asyncio.gather(first.started.wait(), second.started.wait(), quick.wait()), 10)

        # The one running longest (the first the model made), and how many more run beside it.
        assert await _now(engine, agent.id, "crawl +1 more") == {
            "type": "tool",
            "toolName": "crawl",
            "title": "crawl +1 more",
        }
        # The list's row says the same, read from the live ring (a dashboard watching many agents shows it).
        assert await _listed_now(engine, agent.id) == {"type": "tool", "toolName": "crawl", "title": "crawl +1 more"}
        tail = await engine.call_tool("agent_tail", {"id": agent.id})
        ended = [
            (row["title"], row["toolName"], row["detail"], row["status"])
            for row in tail["events"]
            if row["type"] == "tool.progress"
        ]
        assert ended == [("lookup", "lookup", "finished", "ok")]  # the tail says so too, before the result is recorded
        first.release.set()
        assert await _now(engine, agent.id, "index") == {"type": "tool", "toolName": "index", "title": "index"}
        snapshot = await engine.call_tool("agent_await", {"agentId": agent.id, "timeoutMs": 0})
        assert snapshot["currentItem"] == {"type": "tool", "toolName": "index", "title": "index"}
        assert await _listed_now(engine, agent.id) == {"type": "tool", "toolName": "index", "title": "index"}

        second.release.set()
        done, _ = await engine.wait(agent.id, 10)
        assert done.status == "completed"
        record = await engine.call_tool("agent_get", {"id": agent.id})
        assert (record["current"]["currentItem"], record["current"]["lastToolName"]) == (None, "lookup")
        assert await _listed_now(engine, agent.id) is None


async def test_while_no_call_runs_the_current_item_says_whether_the_model_thinks_writes_or_is_still_asked(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once it said `writing` while the model reasoned, and before it had streamed a word."""
    steps = {"thinker": [Think("Let me weigh the two options first."), Hang()], "writer": [Reply("Half of"), Hang()],
             "asked": [Hang()]}  # fmt: skip
    roles = [role(name, scripted(f"doing-{name}", ScriptedModel([step]))) for name, step in steps.items()]
    async with open_engine(*roles) as engine:
        titles, listed = {}, {}
        for name, title in (("thinker", "thinking"), ("writer", "writing"), ("asked", "waiting for the model")):
            agent = await engine.create(name)
            await engine.enqueue(agent.id, "go")
            titles[name] = await _now(engine, agent.id, title)
            listed[name] = await _listed_now(engine, agent.id)
            await engine.call_tool("agent_stop", {"id": agent.id})
    assert listed == titles
    assert titles == {
        "thinker": {"type": "message", "toolName": None, "title": "thinking"},
        "writer": {"type": "message", "toolName": None, "title": "writing"},
        "asked": {"type": "message", "toolName": None, "title": "waiting for the model"},
    }


class _CountedReads:
    """A live ring, noting the name of each read made of it."""

    def __init__(self, ring: Any) -> None:
        self.ring = ring
        self.reads: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name in ("recent", "recent_each", "head"):
            self.reads.append(name)
        return getattr(self.ring, name)


async def test_a_listing_page_reads_what_its_working_agents_do_in_one_read_of_a_shared_ring(
    open_engine: OpenEngine, scripted: Scripted, redis_url: str
) -> None:
    """The rows of a page of working agents, read by another process sharing the Redis ring (the CLI, a service's
    other workers), say what each does as agent_get does. Once each working row was one read of the ring (a round
    trip bringing back its newest 200 events, each decoded), on every listing."""
    crawl = HeldTool("crawl")
    roles = [
        role("crawler", scripted("page-crawler", ScriptedModel(function=crawl.script)), tools=("crawl",)),
        role("thinker", scripted("page-thinker", ScriptedModel([Think("Weighing it."), Hang()]))),
        role("asked", scripted("page-asked", ScriptedModel([Hang()]))),
    ]
    async with open_engine(*roles, tools=[crawl.tool], live=redis_url) as engine:
        titles = {}
        for name, title in (("crawler", "crawl"), ("thinker", "thinking"), ("asked", "waiting for the model")):
            agent = await engine.create(name)
            await engine.enqueue(agent.id, "go")
            titles[agent.id] = await _now(engine, agent.id, title)
        shared = await RedisRing.open(redis_url)
        try:
            ring = _CountedReads(shared)
            reader = Reader(engine.config, engine.store, ring, engine.roster)
            listing = next(tool for tool in read_tools() if tool.name == "agent_list")
            answer: Any = await listing.handler(reader, Caller(), {"status": ["running"], "limit": 100})
        finally:
            await shared.close()
        crawl.release.set()
    assert {row["id"]: row["currentItem"] for row in answer["agents"]} == titles
    assert [title["title"] for title in titles.values()] == ["crawl", "thinking", "waiting for the model"]
    assert ring.reads == ["recent_each"]


async def test_the_last_assistant_text_is_capped_at_1000_characters_with_its_marker(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once: 1000 characters were kept and the marker came on top (1,031 in all), past the documented cap."""
    said = "x" * 1500
    async with open_engine(role("talker", scripted("long-talker", ScriptedModel([Reply(said)])))) as engine:
        agent_id = (await engine.task("talker", "go"))["agentId"]
        record = await engine.call_tool("agent_get", {"id": agent_id})
    text = record["current"]["lastAssistantText"]
    marker = truncation_marker(1500)
    assert len(text) == 1000 and text == said[: 1000 - len(marker)] + marker
    assert record["textOutput"] == said  # the whole text is still there


async def test_the_usage_of_a_turn_continued_after_a_restart_counts_every_part_but_not_the_downtime(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once: it counted from the continuation's start only (about 0 ms for a turn cut off at its last call), and the
    tokens of the continuation only (none for a turn the restart ended `interrupted`)."""
    worked, down = 0.4, 0.6
    slow = HeldTool("slow")

    async def warm() -> str:
        await asyncio.sleep(worked)
        return "warm"

    def script(ctx: Any) -> Any:
        steps = [CallTool("warm", {}), CallTool("slow", {}), Reply("ok")]
        return steps[min(ctx.request_index, 2)]

    cases = [("goes-on", None, "completed"), ("stops", {"continue_after_restart": 0}, "interrupted")]
    for name, sessions, outcome in cases:
        model = scripted(f"restarted-{name}", ScriptedModel(function=script))
        worker = role(name, model, tools=("warm", "slow"), sessions=sessions)
        async with open_engine(worker, tools=[warm, slow.tool]) as engine:
            agent = await engine.create(name)
            await engine.enqueue(agent.id, "go")
            await asyncio.wait_for(slow.started.wait(), 10)
            slow.started.clear()
        await asyncio.sleep(down)  # the engine is down: no part of the turn runs
        async with open_engine(worker, tools=[warm, slow.tool]) as engine:
            done, _ = await engine.wait(agent.id, 10)
            assert done.status == outcome, done.status
            usage = (await engine.call_tool("agent_get", {"id": agent.id}))["current"]["partialUsage"]
            events = await engine.store.read_events(agent.id, limit=100)
        _assert_whole_turn(usage, events, worked=worked, left_out=down)


def _assert_whole_turn(usage: dict[str, Any], events: list[Event], *, worked: float, left_out: float) -> None:
    """`partialUsage` counts the `worked` seconds of the turn's first part, not the `left_out` seconds between
    its parts, and the tokens of every part."""
    starts = [e for e in events if isinstance(e.payload, TurnStarted)]
    wall = (events[-1].at - starts[0].at).total_seconds() * 1000
    assert worked * 1000 <= usage["durationMs"] <= wall - left_out * 1000, (usage, wall)
    spent = [e.payload.usage.total_tokens for e in events if isinstance(e.payload, CompletionFinished)]
    assert len(spent) > 1 and usage["tokens"] == sum(spent) > 0


async def test_the_usage_of_a_turn_resumed_after_a_request_counts_both_parts_but_not_the_wait(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once: only the part after the answer counted, in time and in tokens."""
    worked, waited = 0.4, 0.6

    async def warm() -> str:
        await asyncio.sleep(worked)
        return "warm"

    def script(ctx: Any) -> Any:
        steps = [CallTool("warm", {}), CallTool("ask_user", {"question": "Which colour?"}), Reply("red it is")]
        return steps[sum(entry.kind == "tool_result" for entry in ctx.transcript)]

    asker = role("asker", scripted("asks-midway", ScriptedModel(function=script)), tools=("warm", "ask_user"))
    async with open_engine(asker, tools=[warm]) as engine:
        agent = await engine.create("asker")
        await engine.enqueue(agent.id, "go")
        paused, _ = await engine.wait(agent.id, 10)
        assert paused.status == "awaiting_input", paused.status
        await asyncio.sleep(waited)  # a person takes a while to answer
        pending = (await engine.call_tool("agent_get", {"id": agent.id}))["current"]["pendingHitl"]
        await engine.answer(pending["hitlId"], "red")
        done, _ = await engine.wait(agent.id, 10)
        assert done.status == "completed", done.status
        usage = (await engine.call_tool("agent_get", {"id": agent.id}))["current"]["partialUsage"]
        events = await engine.store.read_events(agent.id, limit=100)
    _assert_whole_turn(usage, events, worked=worked, left_out=waited)
