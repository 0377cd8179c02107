"""Watching never hurts the watched: an observer that hangs, fails or is denied changes nothing in the turn it
watches. Each case runs the same scripted turn unobserved and observed, side by side."""

from __future__ import annotations

import time
from typing import Any

import pytest

from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.runtime.policy import Policy, ToolRequest, Verdict
from agentwatch.runtime.tools import function_tool
from tests.watchers.support import OpenEngine, Scripted, events, eventually, observers_of, role, states, turn_types
from tests.watchers.support import warnings as warnings_of


def work(ctx: Any) -> Any:
    if not ctx.tool_results:
        return [Reply("Let me look."), CallTool("lookup", {"key": "a"})]
    return Reply(f"Found {ctx.tool_results[0].output}.")


def lookup(key: str) -> str:
    """Look a key up."""
    return f"value-{key}"


def deny_observers(request: ToolRequest) -> Verdict | None:
    return Verdict("deny", "no observers here") if request.purpose == "observer_arm" else None


@pytest.mark.parametrize("case", ["hangs", "fails", "denied"])
async def test_the_observed_turn_is_identical_to_an_unobserved_one(
    open_engine: OpenEngine, scripted: Scripted, case: str
) -> None:
    model = scripted(f"work-{case}", ScriptedModel(function=work))
    watcher = {
        "hangs": ScriptedModel.hang(),
        "fails": ScriptedModel.failing("the observer's provider is down"),
        "denied": ScriptedModel.replying("never runs"),
    }[case]
    watcher_ref = scripted(f"watcher-{case}", watcher)
    policies = [Policy("no-observers", deny_observers)] if case == "denied" else []
    async with open_engine(
        role("plain", model, tools=("lookup",)),
        role("watched", model, tools=("lookup",), observer="watcher", grant=("spawn",)),
        role("watcher", watcher_ref),
        tools=[function_tool(lookup)],
        policies=policies,
    ) as engine:
        plain = await engine.task("plain", "find a", timeout=10)
        started = time.monotonic()
        watched = await engine.task("watched", "find a", timeout=10)
        elapsed = time.monotonic() - started
        assert elapsed < 5, "the observed turn waited on its observer"
        assert (watched["status"], watched["lastAssistantText"]) == (plain["status"], plain["lastAssistantText"])
        assert watched["status"] == "completed"
        plain_events = await events(engine, plain["agentId"])
        watched_events = await events(engine, watched["agentId"])
        assert turn_types(watched_events) == turn_types(plain_events)
        outside_turns = [e.type for e in watched_events if e.turn_id is None]
        assert all(t.startswith(("observer.", "runtime.")) for t in outside_turns), outside_turns
        sid = watched["agentId"]
        if case == "denied":
            assert await states(engine, sid) == [("denied", "deny by policy 'no-observers': no observers here")]
            assert await observers_of(engine, sid) == []
        elif case == "fails":
            found = await eventually(lambda: warnings_of(engine, sid))
            assert found == [
                "delivery to the observer failed (RuntimeError: the observer's turn failed: ScriptedModelError: "
                "the observer's provider is down); 1 digest(s) dropped"
            ]
        else:
            (observer,) = await observers_of(engine, sid)
            await eventually(lambda: _running(engine, observer.id))
            assert (await engine.store.get_session(sid)).status == "completed"


async def _running(engine: Engine, session_id: str) -> bool:
    return (await engine.store.get_session(session_id)).status == "running"
