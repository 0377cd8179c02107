"""Helpers for runtime tests: roles built in Python, and the fixture types."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentwatch.config import Config, load_config
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.runtime.roster import AgentDefinition
from agentwatch.store import SessionRecord

Scripted = Callable[[str, ScriptedModel], str]
"""`scripted(name, model)` registers a scripted model for one test and returns its ref."""
OpenEngine = Callable[..., Any]
"""`open_engine(*definitions, **engine_args)` opens an engine on the test's own store."""


def role(name: str, model: str, *, tools: tuple[str, ...] = (), **fields: Any) -> AgentDefinition:
    """A role built in Python, as a project would."""
    return AgentDefinition(name=name, model=model, instructions=f"You are {name}.", tools=tools, **fields)


def prompt_recorder(
    name: str, scripted: Scripted, model: str, prompts: list[str], *, answer: str = "done"
) -> AgentDefinition:
    """A role `name` on a scripted model `model` that adds each request's prompt to `prompts` and answers
    `answer` and their count."""

    def script(ctx: Any) -> Any:
        prompts.append(ctx.prompt)
        return Reply(f"{answer} {len(prompts)}")

    return role(name, scripted(model, ScriptedModel(function=script)))


LEASE = 1.0
"""The lease (seconds) of the lease tests: short, so expiry comes quickly."""


def lease_config(tmp_path: Path, lease: float = LEASE) -> Config:
    config = load_config(tmp_path, env={})
    return config.model_copy(update={"sessions": config.sessions.model_copy(update={"lease_seconds": lease})})


def one_call_per_prompt(ctx: Any) -> Any:
    """Call `slow_tool` once (with a label no other call has) after each real prompt, then answer."""
    since_prompt = 0
    for entry in ctx.transcript:
        if entry.kind == "prompt" and not entry.text.startswith("[agentwatch]"):
            since_prompt = 0
        elif entry.kind == "tool_result":
            since_prompt += 1
    if since_prompt == 0:
        return CallTool("slow_tool", {"label": uuid.uuid4().hex})
    return Reply("done")


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        await asyncio.sleep(0.01)


async def handed_out(engine: Any, session_id: str) -> None:
    """Wait until the session's emitter has handed every event it was given to the ring and the observers
    (its dispatch runs after the commits a caller waits for)."""
    emitter = (await engine.driver(session_id)).emitter
    await until(lambda: emitter.idle)


class HeldTool:
    """An async tool that returns only once `release` is set (`started` is set when a call begins), and the
    script of a model that calls it once, then answers with its output."""

    def __init__(self, name: str, output: str = "done") -> None:
        self.name = name
        self.started = asyncio.Event()
        self.release = asyncio.Event()

        async def tool() -> str:
            self.started.set()
            await self.release.wait()
            return output

        tool.__name__ = name
        self.tool = tool

    def script(self, ctx: Any) -> Any:
        """Call the tool once, then answer with what it returned."""
        return CallTool(self.name, {}) if not ctx.tool_results else Reply(str(ctx.tool_results[0].output))

    def role(self, name: str, scripted: Scripted, model: str) -> AgentDefinition:
        """A role `name` that may call the tool, on a scripted model (registered as `model`) playing `script`."""
        return role(name, scripted(model, ScriptedModel(function=self.script)), tools=(self.name,))


async def running_parent(engine: Engine, busy: HeldTool, role: str = "lead") -> SessionRecord:
    """A session of `role` (`busy.role(...)`) whose turn is in `busy`'s tool: a parent there to answer the
    requests its sub-agents hold for it."""
    parent = await engine.create(role)
    await engine.enqueue(parent.id, "work")
    await asyncio.wait_for(busy.started.wait(), 10)
    return parent


async def asking_child(engine: Engine, busy: HeldTool, role: str = "kid") -> SessionRecord:
    """A sub-agent of `role` of a running parent (`running_parent`), once its first turn (on the prompt `start`)
    is over: paused on a request it holds for that parent, when its script asks one."""
    parent = await running_parent(engine, busy)
    child = await engine.create(role, parent_id=parent.id)
    await engine.enqueue(child.id, "start")
    child, _ = await engine.wait(child.id, 10)
    return child
