"""agent_history: newest page first, each page oldest first; conversations, archived ones, episodes."""

from __future__ import annotations

from typing import Any

from agentwatch.runtime.models import Reply, ScriptedModel
from tests.runtime.support import OpenEngine, Scripted, role


async def _three_turns(engine: Any) -> Any:
    """A chat agent `talker` that was asked "one", "two" and "three", each turn over."""
    session = await engine.create("chat", name="talker", source="chat")
    for prompt in ("one", "two", "three"):
        await engine.enqueue(session.id, prompt)
        await engine.wait(session.id, 10)
    return session


async def test_pages_walk_back_through_the_whole_conversation_once(open_engine: OpenEngine, scripted: Scripted) -> None:
    model = scripted("talk", ScriptedModel(function=lambda ctx: Reply(f"re: {ctx.prompt}")))
    async with open_engine(role("chat", model)) as engine:
        session = await _three_turns(engine)
        stored = [e.id for e in await engine.store.read_events(session.id, limit=1000)]

        pages: list[list[str]] = []
        cursor = None
        while True:
            args = {"id": session.id, "limit": 4} | ({"cursor": cursor} if cursor else {})
            page = await engine.call_tool("agent_history", args)
            pages.append([event["id"] for event in page["events"]])
            cursor = page["nextCursor"]
            if cursor is None:
                break
        assert [event_id for page in reversed(pages) for event_id in page] == stored
        assert all(len(page) == 4 for page in pages[:-1])
        first = await engine.call_tool("agent_history", {"id": session.id, "limit": 1})
        assert first["events"][0]["type"] == "turn.ended" and first["events"][0]["payload"]["outcome"] == "completed"


async def test_conversations_say_why_they_ended_and_an_archived_one_reads_back(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    model = scripted("talk2", ScriptedModel(function=lambda ctx: Reply("ok")))
    async with open_engine(role("chat", model)) as engine:
        session = await engine.create("chat", name="talker", source="chat")
        await engine.enqueue(session.id, "before the clear")
        await engine.wait(session.id, 10)
        await engine.clear(session.id)

        now = await engine.call_tool("agent_history", {"id": session.id})
        old, new = now["conversations"]
        assert (old["endReason"], old["current"], new["endReason"], new["current"]) == ("clear", False, None, True)
        assert [e["type"] for e in now["events"]] == ["conversation.cleared"]

        archived = await engine.call_tool("agent_history", {"id": session.id, "conversationId": old["id"]})
        assert archived["conversationId"] == old["id"]
        texts = [e["payload"].get("text") for e in archived["events"] if e["type"] == "message.user"]
        assert texts == ["before the clear"]

        turn_id = archived["events"][0]["turnId"]
        episode = await engine.call_tool("agent_history", {"id": session.id, "episodeId": turn_id})
        assert {e["turnId"] for e in episode["events"]} == {turn_id} and episode["events"][0]["type"] == "turn.started"

        unknown = await engine.call_tool("agent_history", {"id": session.id, "conversationId": "cnv_nope"})
        assert unknown["error"]["code"] == "not_found"
        no_episode = await engine.call_tool("agent_history", {"id": session.id, "episodeId": "trn_nope"})
        assert no_episode["error"]["code"] == "not_found"  # (once: an empty page, as if the turn wrote nothing)
        assert "has no episode 'trn_nope'" in no_episode["error"]["message"]


async def test_paging_back_goes_on_in_the_conversation_it_began_in_after_a_clear(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once: a clear (or a compaction) between two pages made the next page read the new conversation before the
    cursor's position, where there is nothing: an empty last page, and the rest of the transcript never read."""
    model = scripted("talk3", ScriptedModel(function=lambda ctx: Reply(f"re: {ctx.prompt}")))
    async with open_engine(role("chat", model)) as engine:
        session = await _three_turns(engine)
        before = await engine.store.get_session(session.id)
        stored = [e.id for e in await engine.store.read_events(session.id, limit=1000)]

        first = await engine.call_tool("agent_history", {"id": session.id, "limit": 4})
        await engine.clear(session.id)
        await engine.enqueue(session.id, "four")
        await engine.wait(session.id, 10)

        pages, cursor = [first], first["nextCursor"]
        while cursor is not None:
            page = await engine.call_tool("agent_history", {"id": session.id, "limit": 4, "cursor": cursor})
            assert page["conversationId"] == before.conversation_id
            pages.append(page)
            cursor = page["nextCursor"]
        assert [event["id"] for page in reversed(pages) for event in page["events"]] == stored
        newest = await engine.call_tool("agent_history", {"id": session.id})
        assert newest["conversationId"] != before.conversation_id  # a first page reads the current one
