"""Helpers for runtime tests: roles built in Python, and the fixture types."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentwatch.runtime.models import ScriptedModel
from agentwatch.runtime.roster import AgentDefinition

Scripted = Callable[[str, ScriptedModel], str]
"""`scripted(name, model)` registers a scripted model for one test and returns its ref."""
OpenEngine = Callable[..., Any]
"""`open_engine(*definitions, **engine_args)` opens an engine on the test's own store."""


def role(name: str, model: str, *, tools: tuple[str, ...] = (), **fields: Any) -> AgentDefinition:
    """A role built in Python, as a project would."""
    return AgentDefinition(name=name, model=model, instructions=f"You are {name}.", tools=tools, **fields)
