"""An `agentwatch mcp` server for the stdio tests: the real stdio server, with a scripted role registered and a
hook (`check`) that runs it.

Run as `python -m tests.service.mcp_stdio_server STORE_URL ROOT [turnless]` (`turnless`: its engine runs no turns,
as a program embedding the server may open it).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from agentwatch.config import load_config
from agentwatch.runtime.hooks import Hook
from agentwatch.runtime.models import ScriptedModel, register_scripted_model
from agentwatch.service.stdio import run_mcp_stdio
from tests.service.support import role

if __name__ == "__main__":
    store, root = sys.argv[1], Path(sys.argv[2])
    turnless = sys.argv[3:] == ["turnless"]
    register_scripted_model("mcp-helper", ScriptedModel.replying("Done over stdio."))
    config = load_config(root).model_copy(update={"store": store, "agents_dir": root / "agents"})
    engine_args = (
        {"runs_turns": False} if turnless else {"extensions": [], "hooks": [Hook("check", "helper", "Check it.")]}
    )
    asyncio.run(run_mcp_stdio(config, definitions=[role("helper", "scripted:mcp-helper")], **engine_args))
