"""A chat agent with an observer, killed mid-pairing: the scenario of the observer restart fault test.

The child process (`python -m tests.watchers.pairing_scenario DB`) runs one turn (digested and seen by the
observer), prints `ready`, then starts a second turn whose tool takes long; the test kills it there and opens
its own engine on the same store.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel, register_scripted_model
from agentwatch.runtime.roster import AgentDefinition
from agentwatch.runtime.tools import Tool, function_tool
from agentwatch.store import SessionFilter

SLOW_SECONDS = 0.0
"""How long `slow_tool` takes in the test's engine (the child's takes long, to be killed in it)."""


def _coder(ctx: Any) -> Any:
    if ctx.prompt == "build" and not ctx.tool_results:
        return CallTool("slow_tool", {})
    return Reply(f"done with {ctx.prompt[:20]}")


def setup(slow_seconds: float) -> tuple[list[AgentDefinition], list[Tool]]:
    """The roles (coder, observed by watcher) and the slow tool."""
    register_scripted_model("pairing-coder", ScriptedModel(function=_coder))
    register_scripted_model("pairing-watcher", ScriptedModel(function=lambda ctx: Reply("nothing to report")))

    async def slow_tool() -> str:
        """Take a while."""
        await asyncio.sleep(slow_seconds)
        return "built"

    definitions = [
        AgentDefinition(
            name="coder",
            model="scripted:pairing-coder",
            tools=("slow_tool",),
            observer="watcher",
            instructions="Code.",
            grant=("spawn",),
        ),
        AgentDefinition(name="watcher", model="scripted:pairing-watcher", instructions="Watch."),
    ]
    return definitions, [function_tool(slow_tool)]


async def child(db: Path) -> None:
    definitions, tools = setup(60.0)
    async with Engine.open(
        f"sqlite:///{db}", agents_dir=db.parent / "none", root=db.parent, definitions=definitions, tools=tools
    ) as engine:
        session = await engine.create("coder", source="chat")
        print(f"session {session.id}", flush=True)
        await engine.enqueue(session.id, "hello")
        await engine.wait(session.id, 30)
        while True:  # the observer has read the first digest
            (observer, *_) = (
                await engine.store.list_sessions(SessionFilter(parent_id=session.id, is_observer=True))
            ).items or (None,)
            if observer is not None and observer.status == "idle" and observer.last_seq > 0:
                break
            await asyncio.sleep(0.02)
        print(f"observer {observer.id}", flush=True)
        await engine.enqueue(session.id, "build")
        while not await engine.store.read_events(session.id, types=["tool.call"]):
            await asyncio.sleep(0.02)
        print("ready", flush=True)
        await asyncio.sleep(120)


if __name__ == "__main__":
    asyncio.run(child(Path(sys.argv[1])))
