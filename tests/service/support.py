"""Helpers for service tests: roles on scripted models, and the app served by uvicorn on a real socket."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from starlette.applications import Starlette

from agentwatch.runtime.engine import Engine
from agentwatch.runtime.roster import AgentDefinition
from agentwatch.service import ServiceSettings, create_app
from agentwatch.service.server import _Server, bound_port
from tests.runtime.support import HeldTool


def role(name: str, model: str, *, tools: tuple[str, ...] = (), **fields: Any) -> AgentDefinition:
    """A role built in Python, as a project would."""
    return AgentDefinition(name=name, model=model, instructions=f"You are {name}.", tools=tools, **fields)


@asynccontextmanager
async def served(app: Starlette, *, ws_max_size: int = 65_536, port: int = 0) -> AsyncIterator[str]:
    """Serve `app` with uvicorn on 127.0.0.1 and `port` (0: an ephemeral one; a service started again takes the
    port it had); yields the base URL."""
    server = _Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            lifespan="on",
            log_level="warning",
            ws_max_size=ws_max_size,
            ws_per_message_deflate=False,  # as `serve` does
            timeout_graceful_shutdown=2,
        )
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("uvicorn did not start")
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{bound_port(server)}"
    finally:
        app.state.service.stopping.set()
        server.should_exit = True
        await asyncio.wait_for(task, 15)


@asynccontextmanager
async def busy_agent_served(open_engine: Any, scripted: Any, model: str) -> AsyncIterator[tuple[Engine, str, int]]:
    """An engine served on a real socket, with an agent whose turn waits in a tool until the way out: the engine,
    the agent's id and the port."""
    busy = HeldTool("dig")
    async with (
        open_engine(busy.role("digger", scripted, model), tools=[busy.tool]) as engine,
        served(create_app(engine, ServiceSettings())) as base,
    ):
        agent = await engine.create("digger")
        await engine.enqueue(agent.id, "dig")
        await asyncio.wait_for(busy.started.wait(), 10)
        try:
            yield engine, agent.id, int(base.rsplit(":", 1)[1])
        finally:
            busy.release.set()
