"""A request costs the same at the hundredth turn of a conversation as at the first: the adapter parses only
the messages stored since its last turn, and a scripted model reads each message once. The work is counted
(messages parsed, messages read), never timed; what is remembered must change nothing a script sees."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import JsonValue

from agentwatch.events import CompletionStarted, ToolCall, ToolResult
from agentwatch.runtime.models import (
    CallTool,
    ModelResolver,
    Reply,
    ScriptContext,
    ScriptedModel,
    ScriptStep,
    Think,
    ToolAnswer,
    ToolSpec,
    TurnInput,
    _adapter,
    run_turn,
)

from .recording import INSTRUCTIONS, RecordingSink, reloaded


async def lookup(ctx: object, args: dict[str, Any]) -> JsonValue:
    return f"the note on {args.get('key')}"


LOOKUP = ToolSpec("lookup", "Look a note up.", {"type": "object", "properties": {"key": {"type": "string"}}}, lookup)


def one_tool_chat(ctx: ScriptContext) -> ScriptStep:
    """Every turn: a sentence and a lookup, then the answer."""
    if ctx.tool_results:
        return Reply(f"Done: {ctx.tool_results[0].output}.")
    return [Reply("Let me check."), CallTool("lookup", {"key": f"k{ctx.request_index}"})]


async def chat_turn(resolver: ModelResolver, history: list[JsonValue], prompt: str, **kwargs: Any) -> RecordingSink:
    """One turn on the stored history (as the store hands it back); its messages are appended to it."""
    sink = RecordingSink()
    turn = TurnInput(
        model="scripted:chat", instructions=INSTRUCTIONS, history=reloaded(history), prompt=prompt, **kwargs
    )
    result = await run_turn(turn, sink, models=resolver)
    assert result.outcome == "completed", result.error
    history.extend(sink.messages)
    return sink


async def test_a_turn_parses_only_the_messages_stored_since_the_last(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[int] = []
    load = _adapter._load_history

    def counting(history: Sequence[JsonValue]) -> Any:
        parsed.append(len(history))
        return load(history)

    monkeypatch.setattr(_adapter, "_load_history", counting)
    resolver = ModelResolver(env={}, models={"chat": ScriptedModel(function=one_tool_chat)})
    history: list[JsonValue] = []
    for index in range(40):
        parsed.clear()
        await chat_turn(resolver, history, f"question {index}", tools=[LOOKUP], conversation_id="cnv_1")
        assert sum(parsed) == (0 if index == 0 else 4)  # the previous turn's request, response, results, answer
    # What was kept is what is stored: the runs left the shared messages as they were.
    kept = resolver._histories.get("cnv_1")
    assert kept is not None and reloaded(_adapter._dump(kept)) == history[: len(kept)] and len(kept) == 156

    # Without a conversation id every turn parses the whole history; a history shorter than the one parsed
    # (a write that failed) is parsed again in full.
    parsed.clear()
    await chat_turn(resolver, history, "again", tools=[LOOKUP])
    assert parsed == [160]
    parsed.clear()
    await chat_turn(resolver, history[:8], "from an older point", tools=[LOOKUP], conversation_id="cnv_1")
    assert parsed == [8]


async def test_a_scripted_request_reads_only_the_messages_it_has_not_seen() -> None:
    model = ScriptedModel(function=one_tool_chat)
    resolver = ModelResolver(env={}, models={"chat": model})
    history: list[JsonValue] = []
    read: list[int] = []
    for index in range(40):
        await chat_turn(resolver, history, f"question {index}", tools=[LOOKUP], conversation_id="cnv_1")
        read.append(sum(reading.read for reading in model._readings.values()))
    per_turn = [after - before for before, after in itertools.pairwise(read)]
    # The same few messages every turn: the new ones, and the previous turn's again (the adapter hands them
    # over parsed from the store, no longer the objects the model saw), never the whole conversation.
    assert set(per_turn[2:]) == {per_turn[2]}
    assert per_turn[2] <= 8
    assert [r.request_index for r in model.requests[-2:]] == [78, 79]


def test_transcripts_are_built_only_when_a_script_asks() -> None:
    model = ScriptedModel(function=lambda ctx: Reply("ok"))
    resolver = ModelResolver(env={}, models={"chat": model})
    history: list[JsonValue] = []
    for index in range(3):
        asyncio.run(chat_turn(resolver, history, f"q{index}", conversation_id="cnv_1"))
    assert all("transcript" not in vars(request) for request in model.requests)
    assert [len(request.transcript) for request in model.requests] == [1, 3, 5]


# -- what is remembered changes nothing -------------------------------------------------------------------------

steps = st.lists(
    st.one_of(
        st.builds(Reply, st.sampled_from(["ok", "a longer answer with words", ""])),
        st.builds(Think, st.sampled_from(["hmm", "let me think about it"])),
        st.builds(CallTool, st.just("lookup"), st.fixed_dictionaries({"key": st.sampled_from(["a", "b"])})),
    ),
    min_size=1,
    max_size=3,
)
"""One request of a script: up to three items."""

turns = st.lists(st.lists(steps, min_size=1, max_size=3), min_size=1, max_size=5)
"""A conversation: turns of requests (a turn ends at its last request, answered with a reply)."""


def playing(conversation: list[list[list[Any]]]) -> ScriptedModel:
    """A model that plays `conversation`: the requests of each turn, then a closing reply."""
    flat: list[ScriptStep] = []
    for turn in conversation:
        flat += [[*request] for request in turn]
        flat.append(Reply("end of turn"))

    def script(ctx: ScriptContext) -> ScriptStep:
        return flat[ctx.request_index] if ctx.request_index < len(flat) else Reply("end of turn")

    return ScriptedModel(function=script)


async def contexts(conversation: list[list[list[Any]]], *, remember: bool) -> list[tuple[Any, ...]]:
    """Play the conversation; what each request was told. `remember` False: a new resolver and model per turn
    and no conversation id (nothing carried between turns); True: one of each and the id (everything)."""
    seen: list[tuple[Any, ...]] = []
    history: list[JsonValue] = []
    shared = playing(conversation)
    shared_resolver = ModelResolver(env={}, models={"chat": shared})
    for index in range(len(conversation)):
        model = shared if remember else playing(conversation)
        resolver = shared_resolver if remember else ModelResolver(env={}, models={"chat": model})
        before = len(model.requests)
        sink = RecordingSink()
        turn = TurnInput(
            model="scripted:chat",
            instructions=INSTRUCTIONS,
            history=reloaded(history),
            prompt=f"turn {index}",
            tools=[LOOKUP],
            conversation_id="cnv_1" if remember else None,
        )
        await run_turn(turn, sink, models=resolver)
        history.extend(sink.messages)
        seen += [
            (r.request_index, r.prompt, r.tool_results, r.transcript, r.instructions, r.tools)
            for r in model.requests[before:]
        ]
    return seen


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turns)
def test_a_remembered_conversation_tells_the_script_exactly_what_a_fresh_one_does(
    conversation: list[list[list[Any]]],
) -> None:
    assert asyncio.run(contexts(conversation, remember=True)) == asyncio.run(contexts(conversation, remember=False))


# -- commits -----------------------------------------------------------------------------------------------------


async def test_a_ten_tool_turn_commits_twice_per_request_and_every_call_waits_for_durability() -> None:
    steps: list[ScriptStep] = [[Reply(f"Reading note {i}."), CallTool("lookup", {"key": f"n{i}"})] for i in range(10)]
    steps.append(Reply("All notes read."))
    sink = RecordingSink()
    resolver = ModelResolver(env={}, models={"chat": ScriptedModel(steps)})
    turn = TurnInput(model="scripted:chat", instructions=INSTRUCTIONS, history=[], prompt="go", tools=[LOOKUP])
    result = await run_turn(turn, sink, models=resolver)

    assert result.outcome == "completed"
    commits = sink.commits
    assert len(commits) == 22  # 11 requests: each one's start (with the previous results) and its response
    starts, responses = commits[0::2], commits[1::2]
    assert all(not c.wait and isinstance(c.payloads[-1], CompletionStarted) for c in starts)
    assert all(c.wait for c in responses)  # the barrier: a call's tool runs only after this commit returned
    assert [sum(isinstance(p, ToolResult) for p in c.payloads) for c in starts] == [0] + [1] * 10
    assert [sum(isinstance(p, ToolCall) for p in c.payloads) for c in responses] == [1] * 10 + [0]
    assert sink.settles == 0  # the last commit waits, so there is nothing left to wait for


async def test_a_paused_turn_continues_the_same_from_remembered_messages() -> None:
    async def delete_file(ctx: object, args: dict[str, Any]) -> JsonValue:
        return f"deleted {args['path']}"

    schema: dict[str, JsonValue] = {"type": "object", "properties": {"path": {"type": "string"}}}
    tools = [ToolSpec("delete_file", "Delete a file.", schema, delete_file, requires_approval=True)]
    plan: list[tuple[str | None, tuple[ToolAnswer, ...]]] = [
        ("delete x.txt", ()),
        (None, (ToolAnswer("c1", approved=True),)),
        ("thanks", ()),
    ]

    async def play(conversation_id: str | None) -> tuple[list[Any], list[JsonValue], ModelResolver]:
        steps: list[ScriptStep] = [
            CallTool("delete_file", {"path": "x.txt"}, id="c1"),
            Reply("Gone."),
            Reply("Anything else?"),
        ]
        resolver = ModelResolver(env={}, models={"chat": ScriptedModel(steps)})
        history: list[JsonValue] = []
        seen: list[Any] = []
        for prompt, answers in plan:
            sink = RecordingSink()
            turn = TurnInput(
                model="scripted:chat",
                instructions=INSTRUCTIONS,
                history=reloaded(history),
                prompt=prompt,
                tools=tools,
                answers=answers,
                conversation_id=conversation_id,
            )
            result = await run_turn(turn, sink, models=resolver)
            history += sink.messages
            seen.append((result.outcome, result.output, [type(p).__name__ for p in sink.durable]))
        return seen, history, resolver

    remembered, stored, resolver = await play("cnv_1")
    assert remembered == (await play(None))[0]
    assert [outcome for outcome, _, _ in remembered] == ["paused", "completed", "completed"]
    kept = resolver._histories.get("cnv_1")
    assert kept is not None and reloaded(_adapter._dump(kept)) == stored[: len(kept)]
