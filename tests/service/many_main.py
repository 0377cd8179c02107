"""A real `agentwatch serve` for the many-processes test: a worker role whose turns call a slow tool.

Run as `python -m tests.service.many_main STORE_URL LIVE_URL ROOT RUNS_FILE`. The service prints
`serving on http://...` on stderr once it listens. Every run of the slow tool appends `start <call id> <pid>`
and `end <call id> <pid>` to `RUNS_FILE`; call ids are unique per call. The lease comes from
`AGENTWATCH_LEASE_SECONDS`.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from pathlib import Path
from typing import Any

from agentwatch.config import load_config
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel, register_scripted_model
from agentwatch.runtime.roster import AgentDefinition
from agentwatch.service.server import serve

TOOL_SECONDS = 1.0
CALLS_PER_PROMPT = 2


def _script(ctx: Any) -> Any:
    since_prompt = 0
    for entry in ctx.transcript:
        if entry.kind == "prompt" and not entry.text.startswith("[agentwatch]"):
            since_prompt = 0
        elif entry.kind == "tool_result":
            since_prompt += 1
    if since_prompt < CALLS_PER_PROMPT:
        label = uuid.uuid4().hex
        return CallTool("slow_tool", {"label": label}, id=f"call_{label[:12]}")
    return Reply("done")


def worker() -> AgentDefinition:
    return AgentDefinition(name="worker", model="scripted:many-worker", instructions="You work.", tools=("slow_tool",))


def slow_tool(runs: Path) -> Any:
    async def slow_tool(label: str) -> str:
        """Work a while."""
        _log(runs, f"start {label} {os.getpid()}")
        await asyncio.sleep(TOOL_SECONDS)
        _log(runs, f"end {label} {os.getpid()}")
        return f"did {label}"

    return slow_tool


def _log(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


if __name__ == "__main__":
    store, live, root, runs = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
    register_scripted_model("many-worker", ScriptedModel(function=_script, chunk_delay=0.002))
    config = load_config(root).model_copy(update={"store": store, "live": live, "agents_dir": root / "none"})
    asyncio.run(
        serve(
            host="127.0.0.1",
            port=0,
            config=config,
            hold_minutes=0,
            engine_args={"definitions": [worker()], "tools": [slow_tool(runs)], "extensions": []},
        )
    )
