"""Model text and tool results with NUL characters or lone surrogates: a turn ends the same on every backend,
and what the model and the tool said is kept."""

from __future__ import annotations

from pathlib import Path

from agentwatch.events import AssistantMessage, ToolResult
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from tests.runtime.support import role

ODD = "before\x00after \ud800 end"


def echo_odd() -> str:
    """Returns text with a NUL and a lone surrogate in it."""
    return ODD


async def test_odd_text_from_the_model_and_a_tool_completes_the_turn_alike(url: str, tmp_path: Path) -> None:
    model = ScriptedModel([CallTool("echo_odd"), Reply(ODD)])
    async with Engine.open(
        url,
        root=tmp_path,
        agents_dir=tmp_path / "agents",
        definitions=[role("odd", "scripted:odd", tools=("echo_odd",))],
        tools=[echo_odd],
        models={"odd": model},
        extensions=[],
    ) as engine:
        snapshot = await engine.task("odd", "go", timeout=30)
        assert (snapshot["status"], snapshot["word"]) == ("completed", "done")
        events = await engine.store.read_events(str(snapshot["agentId"]), limit=1000)
        said = [e.payload.text for e in events if isinstance(e.payload, AssistantMessage)]
        results = [e.payload for e in events if isinstance(e.payload, ToolResult)]
        assert said == [ODD]
        assert len(results) == 1 and ODD in str(results[0].output)
        session = await engine.store.get_session(str(snapshot["agentId"]))
        # The preview shows each character a plain text column cannot hold as U+FFFD.
        assert session.last_text == "before\ufffdafter \ufffd end"
