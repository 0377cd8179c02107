"""`agentwatch mcp`: the engine in this process, its tools served as MCP over stdin/stdout."""

from __future__ import annotations

import logging
import sys
from typing import Any

from agentwatch.config import Config
from agentwatch.runtime.engine import Engine
from agentwatch.service.access import ServiceSettings
from agentwatch.service.app import ServiceState
from agentwatch.service.broadcast import Broadcaster
from agentwatch.service.mcp import run_stdio

__all__ = ["run_mcp_stdio"]


async def run_mcp_stdio(config: Config, *, read_only: bool = False, **engine_args: Any) -> None:
    """Open the engine on `config` and serve MCP on stdio until the client hangs up.

    `engine_args` go to `Engine.open` (tools, definitions, ...), for a program that embeds the server. With
    `read_only`, the engine runs no turn (not even one another engine left cut off): a reader's server must not
    continue the store's agents, on definitions it may not even have.
    """
    # stdout carries the protocol: everything else goes to stderr.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    if read_only:
        engine_args = {**engine_args, "runs_turns": False, "create_store": False}  # (nor does it create a store)
    async with Engine.open(config=config, tick=False, **engine_args) as engine:  # (a client's server: `serve` ticks)
        settings = ServiceSettings()
        state = ServiceState(engine, settings, Broadcaster())
        await run_stdio(state, access="read" if read_only else "full")
