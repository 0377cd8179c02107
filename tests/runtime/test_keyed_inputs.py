"""A keyed input (`agent_enqueue {key}`, `agentwatch send --key`, `Engine.enqueue(key=)`) is queued once, however
often it is sent and through whichever engine: a scheduler may send it again after a timeout or a lost answer."""

from __future__ import annotations

import asyncio
from typing import Any

from agentwatch.runtime.engine import keyed_input_id
from tests.runtime.support import OpenEngine, Scripted, prompt_recorder


async def _settled(engine: Any, agent_id: str) -> dict[str, Any]:
    awaited: dict[str, Any] = await engine.call_tool("agent_await", {"id": agent_id, "timeoutMs": 20_000})
    assert awaited["status"] in ("completed", "idle"), awaited
    return awaited


async def test_a_keyed_input_is_queued_once_through_any_engine(
    open_engine: OpenEngine, scripted: Scripted, url: str
) -> None:
    prompts: list[str] = []
    async with (
        open_engine(prompt_recorder("digest", scripted, "keyed-once", prompts), store=url) as first,
        open_engine(prompt_recorder("digest", scripted, "keyed-once", prompts), store=url) as second,
    ):
        agent = await first.create("digest")
        args = {"agentId": agent.id, "prompt": "Summarise 2026-12-06", "key": "digest-2026-12-06"}
        queued = await first.call_tool("agent_enqueue", args)
        assert queued == {"agentId": agent.id, "pendingInputs": 1, "duplicate": False}
        again = await second.call_tool("agent_enqueue", args)  # a scheduler's retry, through another service
        assert again["duplicate"] is True and again["pendingInputs"] <= 1, again
        await _settled(first, agent.id)
        after = await second.call_tool("agent_enqueue", args)  # taken by a turn since: still the same input
        assert after == {"agentId": agent.id, "pendingInputs": 0, "duplicate": True}

        changed = await first.call_tool("agent_enqueue", {**args, "prompt": "Summarise it again"})  # by mistake
        assert changed["error"]["code"] == "conflict", changed
        assert "new key" in changed["error"]["message"] and changed["error"]["details"]["fields"] == ["key"]

        other = await first.call_tool(
            "agent_enqueue", {**args, "prompt": "Summarise 2026-12-07", "key": "digest-2026-12-07"}
        )
        assert other["duplicate"] is False
        await _settled(first, agent.id)
        unkeyed = {"agentId": agent.id, "prompt": "Summarise 2026-12-06"}
        for _ in range(2):  # without a key, each call is an input of its own
            assert (await first.call_tool("agent_enqueue", unkeyed))["duplicate"] is False
        await _settled(first, agent.id)

        inputs = await first.store.list_inputs(agent.id, pending_only=False)
        assert sum(i.id == keyed_input_id(agent.id, "digest-2026-12-06") for i in inputs) == 1
        assert len(inputs) == 4
        # the keyed one, then the two unkeyed ones (in one turn or two); the other key's once, the refused text never
        assert prompts.count("Summarise 2026-12-06") in (2, 3) and prompts.count("Summarise 2026-12-07") == 1
        assert "Summarise it again" not in prompts


async def test_callers_racing_with_one_key_queue_one_input(
    open_engine: OpenEngine, scripted: Scripted, url: str
) -> None:
    """Calls that all look before any has written: the store takes one (the input's id is made from the key), and
    the others hear it was queued; the session goes on as usual."""
    prompts: list[str] = []
    async with open_engine(prompt_recorder("digest", scripted, "keyed-race", prompts), store=url) as engine:
        agent = await engine.create("digest")
        calls = [engine.queue_input(agent.id, "Reindex", key="reindex-1") for _ in range(6)]
        queued = await asyncio.gather(*calls)
        assert sorted(q.duplicate for q in queued) == [False] + [True] * 5
        await _settled(engine, agent.id)
        assert prompts == ["Reindex"]
        assert len(await engine.store.list_inputs(agent.id, pending_only=False)) == 1
        assert await engine.enqueue(agent.id, "Reindex", key="reindex-1") == 0  # the Python API: the same, quietly
