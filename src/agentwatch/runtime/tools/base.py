"""The tool shape, re-exported from `agentwatch.tools` (it lives below the runtime so reads can use it)."""

from __future__ import annotations

from agentwatch.tools import Args, Caller, Tool, ToolHandler, function_tool, parse_args

__all__ = ["Args", "Caller", "Tool", "ToolHandler", "function_tool", "parse_args"]
