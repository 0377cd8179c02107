"""Tools the engine ships: `ask_user` and the spawn/drive tools (the read tools join them from `reads`)."""

from __future__ import annotations

from agentwatch.reads.tools import read_tools
from agentwatch.runtime.tools.ask import ask_user_tool
from agentwatch.runtime.tools.base import Args, Caller, Tool, function_tool, parse_args
from agentwatch.runtime.tools.drive import drive_tools

__all__ = ["Args", "Caller", "Tool", "builtin_tools", "function_tool", "parse_args"]


def builtin_tools() -> list[Tool]:
    """Every tool the engine registers by itself: ask_user, the drive tools and the grant-free read tools."""
    return [ask_user_tool(), *drive_tools(), *read_tools()]
