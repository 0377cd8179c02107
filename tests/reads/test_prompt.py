"""agent_prompt: the exact prompt with its hash, diffs against the previous dispatch and the definition."""

from __future__ import annotations

import hashlib

from agentwatch.runtime.models import Reply, ScriptedModel
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
