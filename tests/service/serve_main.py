"""`agentwatch serve` for the drain tests: the real `serve`, with a role whose turn waits in a tool.

Run as `python -m tests.service.serve_main STORE_URL ROOT HOLD_MINUTES PAUSE_SECONDS [REQUEST_HEAD_SECONDS]`.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentwatch.config import load_config
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel, register_scripted_model
from agentwatch.runtime.roster import AgentDefinition
from agentwatch.service import ServiceSettings
from agentwatch.service.server import serve


def slow_role() -> AgentDefinition:
    return AgentDefinition(name="slow", model="scripted:slow", instructions="You are slow.", tools=("pause",))


def slow_model() -> ScriptedModel:
    return ScriptedModel([CallTool("pause", {}), Reply("finished")])


def pause_tool(seconds: float) -> Callable[..., Any]:
    async def pause() -> str:
        """Wait a while."""
        await asyncio.sleep(seconds)
        return "paused"

    return pause


if __name__ == "__main__":
    store, root, hold, seconds = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    register_scripted_model("slow", slow_model())
    config = load_config(root).model_copy(update={"store": store, "agents_dir": root / "agents"})
    settings = ServiceSettings(request_head_seconds=float(sys.argv[5])) if len(sys.argv) > 5 else None
    asyncio.run(
        serve(
            host="127.0.0.1",
            port=0,
            config=config,
            hold_minutes=hold,
            settings=settings,
            engine_args={"definitions": [slow_role()], "tools": [pause_tool(seconds)], "extensions": []},
        )
    )
