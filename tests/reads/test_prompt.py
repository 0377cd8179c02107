"""agent_prompt: the exact prompt with its hash, diffs against the previous dispatch and the definition."""

from __future__ import annotations

import asyncio
import hashlib

from agentwatch.events import UserMessage
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.runtime.roster import AgentDefinition
from tests.runtime.support import OpenEngine, Scripted


def writer(model: str, instructions: str) -> AgentDefinition:
    return AgentDefinition(name="writer", model=model, instructions=instructions)


async def test_prompt_diffs_show_what_moved(open_engine: OpenEngine, scripted: Scripted) -> None:
    model = scripted("writer", ScriptedModel(function=lambda ctx: Reply("ok")))
    v1, v2 = "You write.\nBe brief.", "You write.\nBe thorough."
    async with open_engine(writer(model, v1)) as engine:
        session = await engine.create("writer", name="w")
        await engine.enqueue(session.id, "draft it")
        await engine.wait(session.id, 10)
        first = await engine.call_tool("agent_prompt", {"id": session.id, "against": "previous"})
        assert first["system"] == {"text": v1, "hash": hashlib.sha256(v1.encode()).hexdigest()}
        assert first["user"] == "draft it" and first["against"]["diff"] == [] and first["against"]["turnId"] is None
    async with open_engine(writer(model, v2)) as engine:
        await engine.enqueue(session.id, "again")
        await engine.wait(session.id, 10)
        now = await engine.call_tool("agent_prompt", {"id": session.id, "against": "previous"})
        assert (now["system"]["text"], now["user"]) == (v2, "again")
        assert now["against"]["turnId"] == first["turnId"]
        assert now["against"]["diff"] == ["@@ -1,2 +1,2 @@\n You write.\n-Be brief.\n+Be thorough."]

        older = await engine.call_tool(
            "agent_prompt", {"id": session.id, "eventId": first["eventId"], "against": "definition"}
        )
        assert (older["turnId"], older["system"]["text"]) == (first["turnId"], v1)
        assert older["against"]["diff"] == ["@@ -1,2 +1,2 @@\n You write.\n-Be brief.\n+Be thorough."]
        same = await engine.call_tool("agent_prompt", {"id": session.id, "against": "definition"})
        assert same["against"]["diff"] == []

        event_id = now["eventId"]
        # Ids of one session are close neighbours (sortable, monotonic), so changing a last character can name
        # another real event; an id from the start of time names none.
        other_id = event_id[:4] + "0" * (len(event_id) - 4)
        not_a_message = await engine.call_tool("agent_prompt", {"id": session.id, "eventId": other_id})
        assert not_a_message["error"]["code"] == "not_found"
    async with open_engine() as engine:  # the role is gone
        refused = await engine.call_tool("agent_prompt", {"id": session.id, "against": "definition"})
        assert refused["error"]["code"] == "invalid"
        plain = await engine.call_tool("agent_prompt", {"id": session.id})
        assert plain["system"]["text"] == v2


async def test_each_dispatch_of_a_continued_turn_shows_what_it_was_handed(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once: the first dispatch of a turn continued after a restart showed the engine's note in its user text,
    though the note came with the continuation; and the note's eventId named the first dispatch."""
    gate = asyncio.Event()

    async def slow_tool() -> str:
        await gate.wait()
        return "finished"

    model = scripted(
        "prompt-restart",
        ScriptedModel(function=lambda ctx: CallTool("slow_tool", {}) if ctx.request_index == 0 else Reply("after")),
    )
    definition = AgentDefinition(name="writer", model=model, instructions="You write.", tools=("slow_tool",))
    async with open_engine(definition, tools=[slow_tool]) as engine:
        session = await engine.create("writer", name="w")
        await engine.enqueue(session.id, "draft it")
        while not await engine.store.read_events(session.id, limit=1, types=["tool.call"]):
            await asyncio.sleep(0.01)
    async with open_engine(definition, tools=[slow_tool]) as engine:  # the turn goes on here, with a note
        await engine.wait(session.id, 10)
        first, note = await engine.store.read_events(session.id, limit=10, types=["message.user"])
        assert isinstance(note.payload, UserMessage) and note.payload.meta

        dispatched = await engine.call_tool("agent_prompt", {"id": session.id, "eventId": first.id})
        assert (dispatched["trigger"], dispatched["user"]) == ("input", "draft it")
        continued = await engine.call_tool("agent_prompt", {"id": session.id, "eventId": note.id})
        assert continued["trigger"] == "continue" and continued["user"] == f"draft it\n\n{note.payload.text}"
        newest = await engine.call_tool("agent_prompt", {"id": session.id, "against": "previous"})
        assert newest["at"] == continued["at"] and newest["turnId"] == dispatched["turnId"]
        assert newest["against"]["turnId"] == dispatched["turnId"] and newest["against"]["diff"] == []
