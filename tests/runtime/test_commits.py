"""How many commits a turn makes: one per model response (with its tool calls, before they run), one per batch
of tool results (with the opening of the next request); the turn's start goes with the first request's opening,
and its end with the last response (which calls no tool). Counted on a real SQLite store by wrapping `write`;
the store itself is untouched."""

from __future__ import annotations

from typing import Any

from agentwatch.events import Event
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.store import Write
from tests.runtime.support import OpenEngine, Scripted, role

TOOL_CALLS = 10


def lookup(key: str) -> str:
    """Look a key up."""
    return f"{key} is done"


def ten_tool_script() -> ScriptedModel:
    steps: list[Any] = [[Reply(f"Reading note {i}."), CallTool("lookup", {"key": f"n{i}"})] for i in range(TOOL_CALLS)]
    steps.append(Reply("All notes say done."))
    return ScriptedModel(steps)


async def test_a_ten_tool_turn_commits_at_most_twice_per_model_request(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    model = scripted("ten-tools", ten_tool_script())
    async with open_engine(role("r", model, tools=("lookup",)), tools=[lookup], extensions=[]) as engine:
        session = await engine.create("r")
        writes: list[tuple[Write, list[str]]] = []
        write = engine.store.write

        async def counted(w: Write) -> list[Event]:
            stored = await write(w)
            writes.append((w, [e.type for e in stored]))
            return stored

        engine.store.write = counted  # type: ignore[method-assign]
        await engine.enqueue(session.id, "go")
        settled, timed_out = await engine.wait(session.id, 60)
        assert not timed_out and settled.status == "completed"
        events = await engine.store.read_events(session.id, limit=10_000)

    turn = [types for w, types in writes if not w.inputs_add]  # the enqueue is the caller's, not the turn's
    requests = TOOL_CALLS + 1
    assert len(turn) <= 2 * requests  # 11 responses, 10 result batches; the start and the end go with them: 21
    assert turn[0][:3] == ["turn.started", "message.user", "completion.started"]  # the start went with the first
    # The last response calls no tool, so nothing waits for it: it goes to the store with the turn's end.
    assert turn[-1][-3:] == ["message.assistant", "completion.finished", "turn.ended"]
    assert sum(types.count("turn.ended") for types in turn) == 1
    for types in turn:
        if "tool.call" in types:  # a response's calls go with the response, before the tools run
            assert "completion.finished" in types
        if "tool.result" in types:  # results go with the opening of the next request
            assert "completion.started" in types
    assert sum(types.count("tool.result") for types in turn) == TOOL_CALLS
    assert [t for types in turn for t in types] == [e.type for e in events if e.turn_id is not None]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_a_new_sessions_first_turn_reads_no_messages_back(open_engine: OpenEngine, scripted: Scripted) -> None:
    model = scripted("one-turn", ScriptedModel([Reply("Done.")]))
    async with open_engine(role("r", model), extensions=[]) as engine:
        session = await engine.create("r")
        reads: list[str] = []
        read_messages = engine.store.read_messages

        async def counted(conversation_id: str) -> Any:
            reads.append(conversation_id)
            return await read_messages(conversation_id)

        engine.store.read_messages = counted  # type: ignore[method-assign]
        await engine.enqueue(session.id, "go")
        settled, timed_out = await engine.wait(session.id, 60)
        assert not timed_out and settled.status == "completed"
        assert reads == []  # a session without events has no messages to read
        messages = await read_messages(session.conversation_id)
        assert [m["kind"] for m in messages] == ["request", "response"]  # the turn's, in the store
