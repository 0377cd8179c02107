"""An `agentwatch mcp` server for the stdio test: the real stdio server, with a scripted role registered.

Run as `python -m tests.service.mcp_stdio_server STORE_URL ROOT`.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from agentwatch.config import load_config
from agentwatch.runtime.models import ScriptedModel, register_scripted_model
from agentwatch.service.stdio import run_mcp_stdio
from tests.service.support import role

if __name__ == "__main__":
    store, root = sys.argv[1], Path(sys.argv[2])
    register_scripted_model("mcp-helper", ScriptedModel.replying("Done over stdio."))
    config = load_config(root).model_copy(update={"store": store, "agents_dir": root / "agents"})
    asyncio.run(run_mcp_stdio(config, definitions=[role("helper", "scripted:mcp-helper")], extensions=[]))
