"""A project that embeds agentwatch type-checks its documented uses with `mypy --strict`, as it would be set up:
no config of ours, so no pydantic plugin. `py.typed` ships, and the public names carry the types they need."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mypy")

APP = '''
from __future__ import annotations

from pathlib import Path
from typing import Literal

from agentwatch import (
    AgentDefinition,
    CallTool,
    Engine,
    EventCollector,
    Policy,
    ReplaySnapshot,
    Reply,
    ScriptContext,
    ScriptedModel,
    ScriptStep,
    ThreadObserver,
    ToolRequest,
    Verdict,
    function_tool,
)
from agentwatch.events import Event


def read_file(path: Path, mode: Literal["text", "bytes"] = "text") -> str:
    """Read a file."""
    return path.read_text()


def no_pushes(request: ToolRequest) -> Verdict | None:
    return Verdict("deny", "no pushes") if request.tool_name == "git_push" else None


async def later(request: ToolRequest) -> Verdict | None:
    return None


def script(ctx: ScriptContext) -> ScriptStep:
    if not ctx.tool_results:
        return CallTool("read_file", {"path": "a.txt"})
    return Reply(ctx.tool_results[0].output)


class Broadcast:
    def on_event(self, thread_id: str, event: Event) -> None:
        print(thread_id, event.type)

    def on_subscribe(self, thread_id: str, client: list[str], snapshot: ReplaySnapshot) -> None:
        client.append(thread_id)


async def main() -> None:
    role = AgentDefinition(name="coder", model="scripted:coder", instructions="You code.", tools=("read_file",))
    models = {"coder": ScriptedModel(function=script), "other": ScriptedModel([Reply("hi")])}
    tools = [function_tool(read_file)]
    opened = Engine.open(
        definitions=[role], tools=tools, policies=[no_pushes, Policy("later", later)], models=models
    )
    async with opened as engine:
        collector = EventCollector()
        engine.start_with_observer(lambda thread_id: collector)
        watching: ThreadObserver[list[str]] = Broadcast()
        engine.start_with_observer(lambda thread_id: watching)
        snapshot = await engine.task("coder", "Read a.txt")
        replay = await engine.subscribe(str(snapshot["agentId"]), [])
        print(replay.position, [event.type for _, event in collector.events])
'''


def test_the_documented_python_api_passes_mypy_strict_in_a_project_without_pydantics_plugin(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(textwrap.dedent(APP))
    (tmp_path / "mypy.ini").write_text("[mypy]\n")  # the project's own settings: no plugin
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file", "mypy.ini", "--cache-dir", "cache", "app.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert checked.stdout.splitlines()[-1:] == ["Success: no issues found in 1 source file"], checked.stdout
