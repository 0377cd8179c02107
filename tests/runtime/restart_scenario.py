"""One turn that streams for a while and then runs a slow tool: the scenario the restart fault test kills.

Used both by the child process (`python -m tests.runtime.restart_scenario DB MARKERS [approval|parallel]`) and
by the test, which continues the turn in its own engine after the kill. With `approval`, the tool needs a
person's approval: the turn pauses on it, and the child approves it (the call then runs in the answer turn).
With `parallel`, the model calls a quick tool beside the slow one, in one response: the quick call ends while
the slow one still runs; with `parallel_none`, the same, the quick tool returning None.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from agentwatch.events import Event
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel, register_scripted_model
from agentwatch.runtime.roster import AgentDefinition

LONG_TEXT = " ".join(f"step{i}" for i in range(60))


def _script(ctx: Any) -> Any:
    if ctx.request_index == 0:
        return [Reply(f"Planning: {LONG_TEXT}."), CallTool("slow_tool", {"label": "x"})]
    return Reply(f"Finished after: {' | '.join(r.output for r in ctx.tool_results)}")


def _parallel_script(ctx: Any) -> Any:
    if ctx.request_index == 0:
        return [
            CallTool("quick_tool", {"label": "q"}, id="c_quick"),
            CallTool("slow_tool", {"label": "x"}, id="c_slow"),
        ]
    return Reply(f"Finished after: {' | '.join(f'{r.name}={r.output}' for r in ctx.tool_results)}")


def setup(
    markers: Path, *, approval: bool = False, parallel: bool = False, quick_returns_none: bool = False
) -> tuple[AgentDefinition, list[Any]]:
    """The role and its tools (the slow one approved by a person first, with `approval`; the quick one called
    beside it, with `parallel`, returning None with `quick_returns_none`); each tool appends `start`/`end` lines
    to `markers` so runs can be counted."""
    script = _parallel_script if parallel else _script
    register_scripted_model("restart-scenario", ScriptedModel(function=script, chunk_delay=0.01))

    def mark(line: str) -> None:
        with markers.open("a") as file:
            file.write(f"{line}\n")

    async def slow_tool(label: str) -> str:
        mark(f"start {label}")
        await asyncio.sleep(1.0)
        mark(f"end {label}")
        return f"did {label}"

    async def quick_tool(label: str) -> str | None:
        mark(f"start {label}")
        mark(f"end {label}")
        return None if quick_returns_none else f"did {label}"

    definition = AgentDefinition(
        name="worker",
        model="scripted:restart-scenario",
        instructions="You work.",
        tools=("slow_tool", "quick_tool") if parallel else ("slow_tool",),
        approval_tools=("slow_tool",) if approval else (),
    )
    return definition, [slow_tool, quick_tool] if parallel else [slow_tool]


class Reporter:
    """Prints every event as it is dispatched, so the parent knows what a watcher saw before the kill."""

    def on_event(self, thread_id: str, event: Event) -> None:
        print(f"event {event.seq} {event.sub} {event.id} {event.type}", flush=True)

    def on_subscribe(self, thread_id: str, request: object, snapshot: object) -> None:
        pass


async def child(db: Path, markers: Path, **mode: bool) -> None:
    definition, tools = setup(markers, **mode)
    async with Engine.open(
        f"sqlite:///{db}", agents_dir=db.parent / "none", root=db.parent, definitions=[definition], tools=tools
    ) as engine:
        engine.start_with_observer(lambda _thread_id: Reporter())
        session = await engine.create("worker")
        print(f"session {session.id}", flush=True)
        await engine.enqueue(session.id, "work")
        settled, _ = await engine.wait(session.id, 60)
        if mode.get("approval") and settled.status == "awaiting_input":
            [request] = await engine.store.list_requests(session_id=session.id, status="pending")
            await engine.answer(request.id, True)
            await asyncio.sleep(60)  # the approved call runs now; the test kills this process while it does
        print("settled", flush=True)


if __name__ == "__main__":
    modes = {
        "approval": {"approval": True},
        "parallel": {"parallel": True},
        "parallel_none": {"parallel": True, "quick_returns_none": True},
    }
    asyncio.run(child(Path(sys.argv[1]), Path(sys.argv[2]), **modes.get(" ".join(sys.argv[3:]), {})))
