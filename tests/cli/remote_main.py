"""A real `agentwatch serve` for the CLI's service tests: `serve()` itself (discovery file and all), with a
role on a scripted model whose turn waits in a tool for a while, so that a follower sees it live.

Run as `python -m tests.cli.remote_main STORE_URL ROOT PAUSE_SECONDS`.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from agentwatch.config import load_config
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel, register_scripted_model
from agentwatch.runtime.roster import AgentDefinition
from agentwatch.service.server import serve


def worker_model() -> ScriptedModel:
    def script(ctx: Any) -> Any:
        if not ctx.tool_results:
            return CallTool("pause", {})
        return Reply(f"worked on {ctx.prompt}")

    return ScriptedModel(function=script)


if __name__ == "__main__":
    store, root, seconds = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])

    async def pause() -> str:
        """Wait a while."""
        await asyncio.sleep(seconds)
        return "paused"

    register_scripted_model("remote-worker", worker_model())
    worker = AgentDefinition(
        name="worker", model="scripted:remote-worker", instructions="You are worker.", tools=("pause",)
    )
    config = load_config(root).model_copy(update={"store": store, "agents_dir": root / "agents"})
    asyncio.run(
        serve(
            host="127.0.0.1",
            port=0,
            config=config,
            hold_minutes=0,
            engine_args={"definitions": [worker], "tools": [pause], "extensions": []},
        )
    )
