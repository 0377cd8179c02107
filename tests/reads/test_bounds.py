"""Every bad argument of every read tool is a structured error through call_tool, and writes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from agentwatch.runtime.models import Reply, ScriptedModel
from tests.runtime.support import OpenEngine, Scripted, role

SID = "{sid}"

BAD: list[tuple[str, dict[str, Any], str]] = [
    ("agent_list", {"limit": 0}, "invalid_argument"),
    ("agent_list", {"limit": 101}, "invalid_argument"),
    ("agent_list", {"limit": "ten"}, "invalid_argument"),
    ("agent_list", {"word": ["sleepy"]}, "invalid_argument"),
    ("agent_list", {"status": ["done"]}, "invalid_argument"),
    ("agent_list", {"group": "team"}, "invalid_argument"),
    ("agent_list", {"sort": "size"}, "invalid_argument"),
    ("agent_list", {"window": "soon"}, "invalid_argument"),
    ("agent_list", {"window": "0s"}, "invalid_argument"),
    ("agent_list", {"window": "1h", "from": "2024-01-01T00:00:00Z"}, "invalid_argument"),
    ("agent_list", {"from": "2024-01-01T00:00:00"}, "invalid_argument"),
    ("agent_list", {"cursor": "garbage"}, "invalid_argument"),
    ("agent_list", {"color": "red"}, "invalid_argument"),
    ("agent_summary", {"window": "-1d"}, "invalid_argument"),
    ("agent_summary", {"by": "model"}, "invalid_argument"),
    ("agent_get", {}, "invalid_argument"),
    ("agent_get", {"id": SID, "name": "x"}, "invalid_argument"),
    ("agent_get", {"id": "ses_nope"}, "not_found"),
    ("agent_history", {"id": SID, "limit": 0}, "invalid_argument"),
    ("agent_history", {"id": SID, "limit": 101}, "invalid_argument"),
    ("agent_history", {"id": SID, "cursor": "p1.zz"}, "invalid_argument"),
    ("agent_history", {"id": "ses_nope"}, "not_found"),
    ("agent_tail", {"id": SID, "maxEvents": 0}, "invalid_argument"),
    ("agent_tail", {"id": SID, "maxEvents": 201}, "invalid_argument"),
    ("agent_tail", {"id": SID, "maxChars": 0}, "invalid_argument"),
    ("agent_tail", {"id": SID, "maxChars": 4001}, "invalid_argument"),
    ("agent_tail", {"id": SID, "types": []}, "invalid_argument"),
    ("agent_tail", {"id": SID, "types": ["nope.*"]}, "invalid_argument"),
    ("agent_tail", {"id": SID, "afterId": "c1.garbage"}, "invalid_argument"),
    ("agent_tail", {"id": SID, "afterId": "evt_nope"}, "not_found"),
    ("agent_tail", {"id": "ses_nope"}, "not_found"),
    ("agent_prompt", {"id": SID, "against": "yesterday"}, "invalid_argument"),
    ("agent_prompt", {"id": SID, "eventId": "evt_nope"}, "not_found"),
    ("agent_export", {"id": "ses_nope"}, "not_found"),
    ("agent_export", {}, "invalid_argument"),
]


@pytest.fixture
def model(scripted: Scripted) -> str:
    return scripted("bounds", ScriptedModel(function=lambda ctx: Reply("ok")))


async def test_bad_arguments_are_refused_with_a_code_and_nothing_written(open_engine: OpenEngine, model: str) -> None:
    async with open_engine(role("chat", model)) as engine:
        sid = (await engine.task("chat", "hi"))["agentId"]
        other = (await engine.task("chat", "hi"))["agentId"]
        before = await engine.store.info()
        for tool, args, code in BAD:
            filled = {k: (sid if v == SID else v) for k, v in args.items()}
            answer = await engine.call_tool(tool, filled)
            assert set(answer) == {"error"}, (tool, args, answer)
            assert answer["error"]["code"] == code, (tool, args, answer)
            assert answer["error"]["message"]
        # A cursor of another session's stream is refused too.
        foreign = (await engine.call_tool("agent_get", {"id": other}))["current"]["cursor"]
        refused = await engine.call_tool("agent_tail", {"id": sid, "afterId": foreign})
        assert refused["error"]["code"] == "invalid_argument"
        after = await engine.store.info()
        assert (after.sessions, after.events) == (before.sessions, before.events)


@pytest.mark.parametrize(
    ("tool", "field", "low", "high", "default"),
    [
        ("agent_list", "limit", 1, 100, 20),
        ("agent_history", "limit", 1, 100, 50),
        ("agent_tail", "maxEvents", 1, 200, 50),
        ("agent_tail", "maxChars", 1, 4000, 500),
    ],
)
async def test_bounds_are_inclusive_and_published_in_the_schema(
    open_engine: OpenEngine, model: str, tool: str, field: str, low: int, high: int, default: int
) -> None:
    async with open_engine(role("chat", model)) as engine:
        sid = (await engine.task("chat", "hi"))["agentId"]
        schema = engine.tools[tool].parameters["properties"][field]
        assert (schema["minimum"], schema["maximum"], schema["default"]) == (low, high, default)
        assert engine.tools[tool].grant is None
        for value in (low, high):
            args = {field: value} | ({} if tool == "agent_list" else {"id": sid})
            assert "error" not in await engine.call_tool(tool, args)
