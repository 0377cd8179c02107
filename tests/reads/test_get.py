"""agent_get: name resolution (the chat wins, a unique live match, an ambiguous refusal) and the record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentwatch.runtime.models import Reply, ScriptedModel
from agentwatch.tools import Caller
from tests.runtime.support import OpenEngine, Scripted, role

NOT_APPLICABLE = {
    "harness",
    "plannerMethod",
    "repo",
    "runIn",
    "capabilityCeiling",
    "extraCapabilities",
    "scheduled",
    "watching",
    "sessionCount",
    "recent",
}
"""Keys docs/fields.md lists as not applicable: never in an `agent_get` record."""


async def test_a_name_resolves_to_the_calling_chats_agent_first(open_engine: OpenEngine, scripted: Scripted) -> None:
    model = scripted("nova", ScriptedModel([Reply("hi")]))
    async with open_engine(role("chat", model)) as engine:
        mine = await engine.create("chat", name="nova", scope="42:bot1")
        other = await engine.create("chat", name="nova", scope="99:bot1")
        globe = await engine.create("chat", name="nova")

        got = await engine.call_tool("agent_get", {"name": "nova"}, caller=Caller(scope="42:bot1"))
        assert got["id"] == mine.id and got["scope"] == "42:bot1"

        refused = await engine.call_tool("agent_get", {"name": "nova"})
        ids = sorted([mine.id, other.id, globe.id])
        assert refused["error"]["code"] == "ambiguous"
        assert refused["error"]["message"] == (
            f'3 agents are named "nova": {ids[0]} (chat 42:bot1, idle); {ids[1]} (chat 99:bot1, idle); '
            f"{ids[2]} (global, idle). Pass `id` instead."
        )
        assert [c["id"] for c in refused["error"]["details"]["candidates"]] == ids

        await engine.delete(other.id)
        await engine.delete(globe.id)
        unique = await engine.call_tool("agent_get", {"name": "nova"}, caller=Caller(scope="7:bot2"))
        assert unique["id"] == mine.id

        missing = await engine.call_tool("agent_get", {"name": "vega"})
        assert missing["error"]["code"] == "not_found"


async def test_the_record_carries_the_row_grant_prompt_fill_mailbox_and_current(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    model = scripted("rec", ScriptedModel([Reply("done it")]))
    async with open_engine(role("worker", model, tools=("agent_task",), grant=("spawn",))) as engine:
        fresh = await engine.create("worker", name="w1")
        record = await engine.call_tool("agent_get", {"id": fresh.id})
        assert record["contextFill"] == {"state": "none"}
        assert (record["capabilities"], record["roleModelRef"]) == (["spawn"], model)
        assert (record["systemPrompt"], record["observer"]) == ("You are worker.", None)
        assert not NOT_APPLICABLE & record.keys(), "fields this product does not have are left out (docs/fields.md)"

        snapshot = await engine.task("worker", "do it", name="w2")
        record: dict[str, Any] = await engine.call_tool("agent_get", {"id": snapshot["agentId"]})
        assert (record["status"], record["word"], record["textOutput"]) == ("completed", "done", "done it")
        assert record["contextFill"]["state"] == "measured" and record["contextFill"]["tokens"] > 0
        assert record["current"]["cursor"] == snapshot["cursor"]
        assert record["usage"]["tokens"] > 0 and record["mailbox"] == []


async def test_a_soft_deleted_agent_is_read_by_id_with_its_reap_time(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    model = scripted("del", ScriptedModel([Reply("x")]))
    async with open_engine(role("chat", model)) as engine:
        session = await engine.create("chat", name="old")
        await engine.enqueue(session.id, "queued")
        await engine.wait(session.id, 10)
        await engine.delete(session.id)
        record = await engine.call_tool("agent_get", {"id": session.id})
        assert record["deletedAt"] is not None and record["reapAt"] is not None
        assert (await engine.call_tool("agent_get", {"name": "old"}))["error"]["code"] == "not_found"


async def test_the_parents_record_rolls_up_the_usage_of_every_sub_agent(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    from agentwatch.runtime.models import CallTool

    def spawner(ctx: Any) -> Any:  # the prompt names the role to spawn: top → middle → leaf
        if not ctx.tool_results:
            return CallTool("agent_task", {"role": ctx.prompt, "prompt": "leaf" if ctx.prompt == "middle" else "-"})
        return Reply("spawned")

    spawn_model = scripted("spawner", ScriptedModel(function=spawner))
    leaf_model = scripted("leaf", ScriptedModel(function=lambda ctx: Reply("leaf done")))
    async with open_engine(
        role("top", spawn_model, tools=("agent_task",), grant=("spawn",)),
        role("middle", spawn_model, tools=("agent_task",), grant=("spawn",)),
        role("leaf", leaf_model),
    ) as engine:
        top = await engine.create("top")
        await engine.enqueue(top.id, "middle")
        await engine.wait(top.id, 20)
        sessions = (await engine.call_tool("agent_list", {"sort": "name", "limit": 100}))["agents"]
        by_role = {row["role"]: row for row in sessions}
        record = await engine.call_tool("agent_get", {"id": top.id})
        own = record["usage"]["tokens"]
        assert own == by_role["top"]["usage"]["tokens"] > 0
        assert sorted(by_role) == ["leaf", "middle", "top"]
        assert record["usageWithSubagents"]["subagents"] == 2
        assert record["usageWithSubagents"]["tokens"] == sum(row["usage"]["tokens"] for row in sessions)


def test_every_field_left_out_is_listed_once_in_the_docs() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "fields.md").read_text()
    assert {key: text.count(f"| `{key}` |") for key in NOT_APPLICABLE - {"sessionCount", "recent"}} == dict.fromkeys(
        NOT_APPLICABLE - {"sessionCount", "recent"}, 1
    )
    assert all(f"`{key}`" in text for key in ("sessionCount", "recent"))


async def test_a_name_reused_after_a_delete_names_the_new_agent_and_the_old_one_reads_by_id(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    model = scripted("reuse", ScriptedModel(function=lambda ctx: Reply("ok")))
    async with open_engine(role("chat", model)) as engine:
        for scope in (None, "42:bot1"):
            old = await engine.create("chat", name="nova", scope=scope)
            await engine.call_tool("agent_delete", {"id": old.id})
            new = await engine.create("chat", name="nova", scope=scope)  # the name is free again
            caller = Caller(scope=scope)
            assert (await engine.call_tool("agent_get", {"name": "nova"}, caller=caller))["id"] == new.id
            kept = await engine.call_tool("agent_get", {"id": old.id})
            assert (kept["name"], kept["deletedAt"] is not None) == ("nova", True)
            await engine.call_tool("agent_delete", {"id": new.id})
        listed = await engine.call_tool("agent_list", {"q": "nova", "deleted": True})
        assert len(listed["agents"]) == 4 and all(row["deletedAt"] for row in listed["agents"])
        assert (await engine.call_tool("agent_list", {"q": "nova"}))["agents"] == []
        assert (await engine.call_tool("agent_get", {"name": "nova"}))["error"]["code"] == "not_found"
