"""An engine process that runs a workflow until it is killed (the fault test of runs that lapse).

    python -m tests.runtime.run_scenario STORE_URL ROOT

It opens the store with a one-second session lease (so a run lapses four seconds after its last renewal),
starts a run of `report` whose one task calls a tool that never returns, prints `running <run id>` once the
tool runs, and waits to be killed.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.runtime.roster import AgentDefinition
from tests.runtime.support import lease_config


async def main(url: str, root: Path) -> None:
    running = asyncio.Event()

    async def never_returns() -> str:
        running.set()
        await asyncio.Event().wait()
        return "never"

    def script(ctx: Any) -> Any:
        return CallTool("never_returns", {}) if not ctx.tool_results else Reply("done")

    worker = AgentDefinition(name="worker", model="scripted:stuck", tools=("never_returns",))
    models = {"stuck": ScriptedModel(function=script)}
    async with (
        Engine.open(
            url, root=root, config=lease_config(root), definitions=[worker], tools=[never_returns], models=models
        ) as engine,
        engine.run("report") as run,
    ):
        task = asyncio.create_task(run.task("worker", "go"))
        await running.wait()
        print(f"running {run.id}", flush=True)
        await task


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2])))
