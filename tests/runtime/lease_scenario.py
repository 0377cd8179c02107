"""An engine process for the two-process lease test: chats on a slow tool, each watched by an observer agent.

    python -m tests.runtime.lease_scenario STORE_URL ROOT RUNS_FILE CREATE [SEED]

The engine opens the store (its project root `ROOT` sets a short lease), prints `owner <id>`, creates
`CREATE` chat sessions and gives each a prompt, queues a follow-up on a few sessions it did not create
(which their owner, if alive, must run), prints `ready`, and stays alive until its stdin closes (then it
closes gracefully and prints `closed`), unless the test kills it first. Every run of the slow tool appends
`start <label> <pid>` and `end <label> <pid>` to `RUNS_FILE`; labels are unique per call.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import uuid
from pathlib import Path
from typing import Any

from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel, register_scripted_model
from agentwatch.runtime.roster import AgentDefinition
from agentwatch.store import SessionFilter

TOOL_SECONDS = 0.4
CALLS_PER_PROMPT = 2


def _worker_script(ctx: Any) -> Any:
    since_prompt = 0
    for entry in ctx.transcript:
        if entry.kind == "prompt" and not entry.text.startswith("[agentwatch]"):
            since_prompt = 0
        elif entry.kind == "tool_result":
            since_prompt += 1
    if since_prompt < CALLS_PER_PROMPT:
        return CallTool("slow_tool", {"label": uuid.uuid4().hex}, id=f"call_{uuid.uuid4().hex[:12]}")
    return Reply("done")


def setup(runs: Path) -> tuple[list[AgentDefinition], list[Any]]:
    """The roles (a worker watched by a model observer) and the slow tool that logs its runs."""
    register_scripted_model("lease-worker", ScriptedModel(function=_worker_script, chunk_delay=0.002))
    register_scripted_model("lease-watcher", ScriptedModel(function=lambda ctx: Reply("nothing to report")))

    async def slow_tool(label: str) -> str:
        _log(runs, f"start {label} {os.getpid()}")
        await asyncio.sleep(TOOL_SECONDS)
        _log(runs, f"end {label} {os.getpid()}")
        return f"did {label}"

    worker = AgentDefinition(
        name="worker",
        model="scripted:lease-worker",
        instructions="You work.",
        tools=("slow_tool",),
        grant=("spawn",),  # a model observer is armed only for an agent that may spawn one
        observer="watcher",
    )
    watcher = AgentDefinition(name="watcher", model="scripted:lease-watcher", instructions="You watch.")
    return [worker, watcher], [slow_tool]


def _log(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


async def main(store: str, root: Path, runs: Path, create: int, seed: int) -> None:
    rng = random.Random(seed)
    definitions, tools = setup(runs)
    async with Engine.open(store, root=root, agents_dir=root / "none", definitions=definitions, tools=tools) as engine:
        print(f"owner {engine.leases.owner}", flush=True)
        others = (await engine.store.list_sessions(SessionFilter(role=["worker"]), limit=100)).items
        mine = []
        for _ in range(create):
            session = await engine.create("worker", source="chat")
            mine.append(session.id)
            await engine.enqueue(session.id, "go")
        for session in rng.sample(others, min(len(others), 3)):
            await engine.enqueue(session.id, "and some more")  # left for its owner while that one lives
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    print("closed", flush=True)


if __name__ == "__main__":
    url, root_dir, runs_file, count = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
    asyncio.run(main(url, root_dir, runs_file, count, int(sys.argv[5]) if len(sys.argv) > 5 else 0))
