"""A session's context fill is stored snake_case (`ContextFill`), answered camelCase by `agent_get`, and rows
written camelCase by earlier versions read the same."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from agentwatch.events import CompactionApplied
from agentwatch.runtime.compaction import ContextFill
from agentwatch.runtime.models import Reply, ScriptedModel
from agentwatch.store import SessionPatch
from tests.runtime.support import OpenEngine, role

AT = "2026-11-30T10:00:00+00:00"


def stored_fill(tmp_path: Path, session_id: str) -> Any:
    """The context fill as the session's row holds it (read with sqlite3, not through the store)."""
    with sqlite3.connect(tmp_path / "agentwatch.db") as db:
        (text,) = db.execute("SELECT context_fill FROM sessions WHERE id = ?", [session_id]).fetchone()
    return None if text is None else json.loads(text)


async def test_a_measured_fill_is_stored_snake_case_and_answered_camel_case(
    open_engine: OpenEngine, tmp_path: Path
) -> None:
    model = ScriptedModel(function=lambda ctx: Reply("ok"))
    async with open_engine(role("chat", "scripted:chat"), models={"chat": model}) as engine:
        session = await engine.create("chat")
        await engine.enqueue(session.id, "hello")
        await engine.wait(session.id, 10)
        stored = stored_fill(tmp_path, session.id)
        record = await engine.call_tool("agent_get", {"id": session.id})
    assert set(stored) == {"state", "tokens", "model", "window", "window_source", "at"}
    assert stored["state"] == "measured" and stored["tokens"] > 0
    assert record["contextFill"] == {
        "state": "measured",
        "tokens": stored["tokens"],
        "model": stored["model"],
        "window": stored["window"],
        "windowSource": stored["window_source"],
        "at": stored["at"],
    }


async def test_a_row_written_camel_case_reads_the_same(open_engine: OpenEngine, tmp_path: Path) -> None:
    old = {"state": "measured", "tokens": 1200, "model": "m", "window": 200000, "windowSource": "registry", "at": AT}
    async with open_engine(role("chat", "scripted:chat"), models={"chat": ScriptedModel()}) as engine:
        session = await engine.create("chat")
        await engine.store.update_session(session.id, SessionPatch(context_fill=old))
        assert stored_fill(tmp_path, session.id) == old  # an old-shaped row
        record = await engine.call_tool("agent_get", {"id": session.id})
        assert record["contextFill"] == old

        await engine.compact(session.id, summary="what happened")  # reads the old row's tokens
        events = await engine.store.read_events(session.id, types=["compaction.applied"], limit=1)
        stored = stored_fill(tmp_path, session.id)
        record = await engine.call_tool("agent_get", {"id": session.id})
    assert isinstance(events[0].payload, CompactionApplied) and events[0].payload.pre_tokens == 1200
    assert set(stored) == {"state", "pre_tokens", "at"} and stored["pre_tokens"] == 1200
    assert record["contextFill"] == {"state": "compacted", "preTokens": 1200, "at": stored["at"]}


def test_either_spelling_reads_as_one_fill() -> None:
    new: dict[str, JsonValue] = {"state": "compacted", "pre_tokens": 7, "at": AT}
    old: dict[str, JsonValue] = {"state": "compacted", "preTokens": 7, "at": AT}
    assert ContextFill.read(new) == ContextFill.read(old) == ContextFill(state="compacted", pre_tokens=7, at=AT)
    read_old = ContextFill.read(old)
    assert read_old is not None and read_old.stored() == new
    assert [ContextFill.read(x) for x in (None, {}, {"state": "none"}, {"state": "measured", "tokens": "x"})] == [
        None
    ] * 4
