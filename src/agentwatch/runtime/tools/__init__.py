"""Tools the engine ships: `ask_user` and the spawn/drive tools (the read tools join them from `reads`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from agentwatch.errors import UserError
from agentwatch.reads.tools import read_tools
from agentwatch.runtime.tools.ask import ask_user_tool
from agentwatch.runtime.tools.base import Args, Caller, Tool, function_tool, parse_args
from agentwatch.runtime.tools.drive import drive_tools

__all__ = ["Args", "Caller", "Tool", "builtin_tools", "function_tool", "parse_args", "project_tool"]


def builtin_tools() -> list[Tool]:
    """Every tool the engine registers by itself: ask_user, the drive tools and the grant-free read tools."""
    return [ask_user_tool(), *drive_tools(), *read_tools()]


def project_tool(item: Tool | Callable[..., Any]) -> Tool:
    """A tool a project registers (a plain function becomes one); one named as a built-in tool is refused, as it
    would replace that tool for every caller (the API, the CLI, the dashboard, every agent)."""
    tool = item if isinstance(item, Tool) else function_tool(item)
    if tool.name in _builtin_names():
        raise UserError(
            f"the project gives a tool named {tool.name!r}, which is built in: give yours another name (its "
            "function's, or the Tool's)"
        )
    return tool


@functools.cache
def _builtin_names() -> frozenset[str]:
    return frozenset(tool.name for tool in builtin_tools())
