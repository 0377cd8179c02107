"""agent_tail: alignment with current.cursor, forward scans, types in both spellings, truncation."""

from __future__ import annotations

import json
from typing import Any

from agentwatch.events import MAX_POSITION, StreamCursor, truncation_marker
from agentwatch.reads.tail import DEFAULT_TYPES, PROJECTION
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from tests.runtime.support import OpenEngine, Scripted, role


def echo_script(ctx: Any) -> Any:
    if not ctx.tool_results:
        return CallTool("shout", {"text": ctx.prompt})
    return Reply(f"said {len(ctx.tool_results[0].output)} chars")


def shout(text: str) -> str:
    return text.upper() * 50


async def test_tail_after_current_cursor_returns_exactly_the_new_events(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    model = scripted("shouter", ScriptedModel(function=echo_script))
    async with open_engine(role("shouter", model, tools=("shout",)), tools=[shout]) as engine:
        snapshot = await engine.task("shouter", "first")
        sid = snapshot["agentId"]
        got = await engine.call_tool("agent_get", {"id": sid})
        latest = await engine.call_tool("agent_tail", {"id": sid})
        assert latest["cursor"] == got["current"]["cursor"] and latest["hasMore"] is False
        cursor = got["current"]["cursor"]
        seen = await engine.store.read_events(sid, limit=1000)

        await engine.enqueue(sid, "second")
        await engine.wait(sid, 10)
        new = await engine.store.read_events(sid, after_seq=seen[-1].seq, limit=1000)
        expected = [e.id for e in new if e.type in DEFAULT_TYPES]

        ids: list[str] = []
        while True:
            page = await engine.call_tool("agent_tail", {"id": sid, "afterId": cursor, "maxEvents": 2})
            ids += [row["id"] for row in page["events"]]
            cursor = page["cursor"]
            if not page["hasMore"]:
                break
        assert ids == expected
        assert cursor == (await engine.call_tool("agent_get", {"id": sid}))["current"]["cursor"]
        again = await engine.call_tool("agent_tail", {"id": sid, "afterId": cursor})
        assert again["events"] == [] and again["cursor"] == cursor
        by_event = await engine.call_tool("agent_tail", {"id": sid, "afterId": expected[-2]})
        assert [row["id"] for row in by_event["events"]] == expected[-1:]


async def test_details_are_capped_with_the_marker_and_types_take_both_spellings(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    model = scripted("shouter2", ScriptedModel(function=echo_script))
    async with open_engine(role("shouter", model, tools=("shout",)), tools=[shout]) as engine:
        sid = (await engine.task("shouter", "hello"))["agentId"]
        results = await engine.call_tool("agent_tail", {"id": sid, "types": ["tool.result"], "maxChars": 40})
        (row,) = results["events"]
        assert row == {
            "id": row["id"],
            "at": row["at"],
            "type": "item.completed",
            "itemType": "tool_call",
            "title": "shout",
            "toolName": "shout",
            "detail": "HELLOHELLO" + truncation_marker(250),
            "status": "ok",
            "truncated": True,
        }
        assert len(row["detail"]) == 40  # the cap holds the marker too (once it came on top of 40 kept characters)
        short = await engine.call_tool("agent_tail", {"id": sid, "types": ["tool.result"], "maxChars": 10})
        assert short["events"][0]["detail"] == "HELLOHELL…"  # a cap shorter than the marker keeps a bare …
        items = await engine.call_tool("agent_tail", {"id": sid, "types": ["item.started"]})
        assert [(r["type"], r["toolName"], r["detail"]) for r in items["events"]] == [
            ("item.started", "shout", '{"text":"hello"}')
        ]
        turns = await engine.call_tool("agent_tail", {"id": sid, "types": ["turn.*"]})
        assert [r["type"] for r in turns["events"]] == ["turn.started", "turn.ended"]
        assert turns["events"][-1]["status"] == "completed"
        default = await engine.call_tool("agent_tail", {"id": sid})
        assert "completion.started" not in {r["type"] for r in default["events"]}


def test_the_projection_covers_every_event_type_and_keeps_deltas_out_by_default() -> None:
    assert "content.delta" not in DEFAULT_TYPES
    assert {"tool.progress", "subtask.started", "request.opened", "model.reroute", "runtime.retry"} <= set(
        DEFAULT_TYPES
    )
    assert PROJECTION["request.opened"].tail_type == "hitl.requested"


async def test_an_agent_reads_other_agents_with_no_grant(open_engine: OpenEngine, scripted: Scripted) -> None:
    target_model = scripted("target", ScriptedModel([Reply("I am the target.")]))
    seen: list[Any] = []

    def watcher(ctx: Any) -> Any:
        if not ctx.tool_results:
            return CallTool("agent_list", {"role": "target"})
        seen.append(ctx.tool_results[0].output)
        if len(seen) == 1:
            target_id = json.loads(seen[0])["agents"][0]["id"]
            return CallTool("agent_tail", {"id": target_id, "types": ["item.completed"]})
        return Reply("read them")

    watcher_model = scripted("watcher", ScriptedModel(function=watcher))
    async with open_engine(
        role("target", target_model), role("watcher", watcher_model, tools=("agent_list", "agent_tail"))
    ) as engine:
        target = await engine.task("target", "speak")
        done = await engine.task("watcher", "look")
        assert done["status"] == "completed", done
        assert target["agentId"] in seen[0]
        assert "I am the target." in seen[1]


async def test_deltas_come_from_the_live_ring_only_when_asked(open_engine: OpenEngine, scripted: Scripted) -> None:
    model = scripted("streamer", ScriptedModel([Reply("one two three")]))
    async with open_engine(role("streamer", model)) as engine:
        sid = (await engine.task("streamer", "count"))["agentId"]
        deltas = await engine.call_tool("agent_tail", {"id": sid, "types": ["content.delta"]})
        assert "".join(row["detail"] for row in deltas["events"]) == "one two three"
        assert {row["type"] for row in deltas["events"]} == {"content.delta"}
        with_messages = await engine.call_tool("agent_tail", {"id": sid, "types": ["content.delta", "message.*"]})
        kinds = [row["type"] for row in with_messages["events"]]
        assert kinds[-1] == "item.completed" and kinds.count("content.delta") == len(deltas["events"])
        after = await engine.call_tool("agent_tail", {"id": sid, "afterId": with_messages["cursor"], "types": ["*"]})
        assert after["events"] == [] or after["events"][0]["type"] != "content.delta"

        # A delta's row id places a read as well as a stored event's does, while the ring holds it.
        first_delta, last_delta = deltas["events"][0]["id"], deltas["events"][-1]["id"]
        from_delta = await engine.call_tool("agent_tail", {"id": sid, "afterId": first_delta, "types": ["content.*"]})
        assert [row["id"] for row in from_delta["events"]] == [row["id"] for row in deltas["events"][1:]]
        before_delta = await engine.call_tool("agent_tail", {"id": sid, "beforeId": last_delta, "types": ["message.*"]})
        assert [row["title"] for row in before_delta["events"]] == ["user"]  # not the answer the deltas made


async def test_before_id_reads_back_page_by_page_to_the_first_event(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    model = scripted("shouter", ScriptedModel(function=echo_script))
    async with open_engine(role("shouter", model, tools=("shout",)), tools=[shout]) as engine:
        sid = (await engine.task("shouter", "first"))["agentId"]
        for prompt in ("second", "third"):
            await engine.enqueue(sid, prompt)
            await engine.wait(sid, 10)
        stored = [e.id for e in await engine.store.read_events(sid, limit=1000) if e.type in DEFAULT_TYPES]
        newest = await engine.call_tool("agent_tail", {"id": sid, "maxEvents": 4})
        shown = [row["id"] for row in newest["events"]]
        assert shown == stored[-4:]
        while True:  # what the dashboard's "earlier" button does
            page = await engine.call_tool("agent_tail", {"id": sid, "beforeId": shown[0], "maxEvents": 4})
            shown = [row["id"] for row in page["events"]] + shown
            if not page["hasMore"]:
                break
        assert shown == stored
        by_cursor = await engine.call_tool("agent_tail", {"id": sid, "beforeId": newest["cursor"], "maxEvents": 1})
        assert [row["id"] for row in by_cursor["events"]] == stored[-1:] and by_cursor["hasMore"] is True

        both = await engine.call_tool("agent_tail", {"id": sid, "beforeId": shown[1], "afterId": shown[0]})
        assert both["error"]["code"] == "invalid_argument" and "beforeId" in both["error"]["message"]
        stranger = await engine.call_tool("agent_tail", {"id": "ses_nobody", "beforeId": shown[0]})
        assert stranger["error"]["code"] == "not_found"
        missing = await engine.call_tool("agent_tail", {"id": sid, "beforeId": "evt_nope"})
        assert missing["error"]["code"] == "not_found"


async def test_tail_before_the_last_position_a_cursor_can_name_reads_back_from_the_end(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once: the event just past it overflowed the store's integer (an internal error)."""
    model = scripted("shouter-end", ScriptedModel(function=echo_script))
    async with open_engine(role("shouter", model, tools=("shout",)), tools=[shout]) as engine:
        sid = (await engine.task("shouter", "first"))["agentId"]
        latest = await engine.call_tool("agent_tail", {"id": sid})
        end = StreamCursor(sid, MAX_POSITION).encode()
        before = await engine.call_tool("agent_tail", {"id": sid, "beforeId": end})
    assert [row["id"] for row in before["events"]] == [row["id"] for row in latest["events"]], before


async def test_a_cursor_past_the_agents_newest_event_is_refused(open_engine: OpenEngine, scripted: Scripted) -> None:
    """Once: it was taken, answered no events and handed back as the cursor, so a watcher polling with it never
    saw the agent's next events."""
    model = scripted("shouter-past", ScriptedModel(function=echo_script))
    async with open_engine(role("shouter", model, tools=("shout",)), tools=[shout]) as engine:
        sid = (await engine.task("shouter", "first"))["agentId"]
        head = (await engine.call_tool("agent_get", {"id": sid}))["current"]["cursor"]
        newest = StreamCursor.decode(head, session_id=sid).seq
        past = StreamCursor(sid, newest + 5).encode()
        refused = await engine.call_tool("agent_tail", {"id": sid, "afterId": past})
        assert refused["error"]["code"] == "invalid_argument", refused
        assert refused["error"]["details"]["fields"] == ["afterId"]
        assert f"newest event (seq {newest})" in refused["error"]["message"]
        at_head = await engine.call_tool("agent_tail", {"id": sid, "afterId": head})
        assert at_head["events"] == [] and at_head["cursor"] == head
