"""run_turn on scripted models: the order of payloads, the barrier, tools, pauses, restarts, cancellation."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest
from pydantic import JsonValue

from agentwatch.errors import InvalidArgument
from agentwatch.events import (
    AssistantMessage,
    CompletionFinished,
    CompletionStarted,
    ContentDelta,
    Payload,
    ThinkingBlock,
    ToolCall,
    ToolProgress,
    ToolResult,
    Usage,
)
from agentwatch.runtime.models import (
    CallTool,
    Hang,
    PendingCall,
    Reply,
    ScriptContext,
    ScriptedModel,
    ScriptStep,
    Think,
    ToolAnswer,
    ToolContext,
    ToolSpec,
    TurnResult,
    run_turn,
)
from agentwatch.runtime.models._adapter import _TurnRun

from .recording import REF, Record, RecordingSink, reloaded, resolver, shape, turn, wait_for

OBJECT = {"type": "object", "properties": {"path": {"type": "string"}}}
INTERRUPTED = "The tool call was interrupted before a result was produced."


def spec(name: str, run: Any, **kwargs: Any) -> ToolSpec:
    return ToolSpec(name=name, description=f"The {name} tool.", parameters=OBJECT, run=run, **kwargs)


async def read_file(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
    ctx.progress("reading", 0.5)
    return f"print('hello')  # {args['path']}"


def coder() -> ScriptedModel:
    return ScriptedModel(
        steps=[Think("I should read it."), CallTool("read_file", {"path": "a.py"}), Reply("It prints hello.")]
    )


def finished(record: Record, request_index: int, usage: Usage, finish_reason: str) -> CompletionFinished:
    """The CompletionFinished a commit must hold: its `response` is the response message committed with it."""
    return CompletionFinished(
        request_index=request_index,
        model=REF,
        usage=usage,
        finish_reason=finish_reason,
        response=record.messages[-1],
        context_tokens=usage.input_tokens,
    )


async def test_payloads_of_a_turn_come_in_order_with_their_messages() -> None:
    sink = RecordingSink()
    result = await run_turn(turn(tools=[spec("read_file", read_file)]), sink, models=resolver(coder()))

    r = sink.records
    first = Usage(input_tokens=22, output_tokens=10, requests=1)
    second = Usage(input_tokens=36, output_tokens=4, requests=1)
    assert r == [
        # the commit that opens a request is pipelined; a response's commit waits (the barrier)
        Record("commit", (CompletionStarted(request_index=0, model=REF),), r[0].messages, wait=False),
        Record("stream", (ContentDelta(part="thinking", index=0, request_index=0, delta="I "),)),
        Record("stream", (ContentDelta(part="thinking", index=0, request_index=0, delta="should "),)),
        Record("stream", (ContentDelta(part="thinking", index=0, request_index=0, delta="read "),)),
        Record("stream", (ContentDelta(part="thinking", index=0, request_index=0, delta="it."),)),
        Record(
            "commit",
            (
                ThinkingBlock(text="I should read it."),
                finished(r[5], 0, first, "tool_call"),
                ToolCall(tool_call_id="call_0_0", tool_name="read_file", input={"path": "a.py"}),
            ),
            r[5].messages,
        ),
        Record(
            "stream", (ToolProgress(tool_call_id="call_0_0", tool_name="read_file", message="reading", fraction=0.5),)
        ),
        Record(
            "commit",
            (
                ToolResult(tool_call_id="call_0_0", tool_name="read_file", output="print('hello')  # a.py"),
                CompletionStarted(request_index=1, model=REF),
            ),
            r[7].messages,
            wait=False,
        ),
        Record("stream", (ContentDelta(part="text", index=0, request_index=1, delta="It "),)),
        Record("stream", (ContentDelta(part="text", index=0, request_index=1, delta="prints "),)),
        Record("stream", (ContentDelta(part="text", index=0, request_index=1, delta="hello."),)),
        Record(
            "commit",
            (AssistantMessage(text="It prints hello."), finished(r[11], 1, second, "stop")),
            r[11].messages,
        ),
    ]
    assert [shape(m) for m in sink.messages] == [
        ("request", ["user-prompt"]),
        ("response", ["thinking", "tool-call"]),
        ("request", ["tool-return"]),
        ("response", ["text"]),
    ]
    assert result == TurnResult(outcome="completed", output="It prints hello.", usage=first + second)


async def test_first_chunk_of_a_part_is_streamed() -> None:
    # pydantic-ai hands the first piece of a part over inside the part itself, not as a delta
    sink = RecordingSink()
    await run_turn(turn(), sink, models=resolver(ScriptedModel(steps=[[Think("Hmm"), Reply("Yes")]])))
    assert sink.streamed == [
        ContentDelta(part="thinking", index=0, request_index=0, delta="Hmm"),
        ContentDelta(part="text", index=1, request_index=0, delta="Yes"),
    ]


async def test_tools_run_only_after_their_call_and_response_are_durable() -> None:
    sink = RecordingSink()
    seen: list[bool] = []

    async def check(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
        calls = [p for p in sink.durable if isinstance(p, ToolCall)]
        responses = [shape(m) for m in sink.messages if shape(m)[0] == "response"]
        seen.append(
            [c.tool_call_id for c in calls] == ["call_0_0", "call_0_1"]
            and responses == [("response", ["tool-call", "tool-call"])]
        )
        return "ok"

    model = ScriptedModel(steps=[CallTool("a", {"path": "1"}), CallTool("b", {"path": "2"}), Reply("done")])
    result = await run_turn(turn(tools=[spec("a", check), spec("b", check)]), sink, models=resolver(model))
    assert seen == [True, True]
    assert result.outcome == "completed"


async def test_a_tool_that_raises_gives_the_model_an_error_and_the_turn_goes_on() -> None:
    async def broken(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
        raise OSError("disk on fire")

    model = ScriptedModel(steps=[CallTool("read_file", {"path": "a.py"}), Reply("The disk failed.")])
    sink = RecordingSink()
    result = await run_turn(turn(tools=[spec("read_file", broken)]), sink, models=resolver(model))

    assert [p for p in sink.durable if isinstance(p, ToolResult)] == [
        ToolResult(tool_call_id="call_0_0", tool_name="read_file", output="OSError: disk on fire", status="error")
    ]
    assert model.requests[1].tool_results[0].status == "error"
    assert result.outcome == "completed"
    assert result.output == "The disk failed."


def approvals_model() -> ScriptedModel:
    def script(ctx: ScriptContext) -> ScriptStep:
        if ctx.request_index == 0:
            return [
                CallTool("delete_file", {"path": "/etc/passwd"}, id="c_del"),
                CallTool("ask_user", {"question": "Which file?"}, id="c_ask"),
                CallTool("read_file", {"path": "a.py"}, id="c_read"),
            ]
        return Reply("; ".join(f"{r.name}={r.status}:{r.output}" for r in ctx.tool_results))

    return ScriptedModel(function=script)


async def test_approval_and_question_pause_the_turn_and_continue_from_stored_history() -> None:
    deleted: list[str] = []

    async def delete_file(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
        deleted.append(args["path"])
        return "deleted"

    async def never(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
        raise AssertionError("an asks_user tool is never run")

    tools = [
        spec("delete_file", delete_file, requires_approval=True),
        spec("ask_user", never, asks_user=True),
        spec("read_file", read_file),
    ]
    model = approvals_model()
    first = RecordingSink()
    paused = await run_turn(turn(tools=tools), first, models=resolver(model))

    assert paused == TurnResult(
        outcome="paused",
        output=None,
        usage=paused.usage,
        pending=(
            PendingCall("c_del", "delete_file", {"path": "/etc/passwd"}, "approval", None),
            PendingCall("c_ask", "ask_user", {"question": "Which file?"}, "question", "Which file?"),
        ),
    )
    # the tool that needed nobody ran, and its result is durable before the pause
    assert first.commits[-1].payloads == (
        ToolResult(tool_call_id="c_read", tool_name="read_file", output="print('hello')  # a.py"),
    )
    assert [p.tool_call_id for p in first.durable if isinstance(p, ToolCall)] == ["c_del", "c_ask", "c_read"]
    assert deleted == []

    second = RecordingSink()
    answers = [ToolAnswer("c_del", approved=False, message="Not that one."), ToolAnswer("c_ask", value="b.py")]
    done = await run_turn(
        turn(None, history=reloaded(first.messages), tools=tools, answers=answers), second, models=resolver(model)
    )
    assert second.commits[0].payloads == (
        ToolResult(tool_call_id="c_del", tool_name="delete_file", output="Not that one.", status="denied"),
        ToolResult(tool_call_id="c_ask", tool_name="ask_user", output="b.py"),
        CompletionStarted(request_index=0, model=REF),
    )
    assert done.outcome == "completed"
    # the model sees every result of its response in the order it made the calls
    assert done.output == "delete_file=denied:Not that one.; ask_user=ok:b.py; read_file=ok:print('hello')  # a.py"
    assert deleted == []


async def test_an_approved_call_runs_when_the_turn_continues() -> None:
    deleted: list[str] = []

    async def delete_file(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
        deleted.append(args["path"])
        return f"deleted {args['path']}"

    tools = [spec("delete_file", delete_file, requires_approval=True)]
    model = ScriptedModel(steps=[CallTool("delete_file", {"path": "x.txt"}, id="c1"), Reply("Gone.")])
    first = RecordingSink()
    paused = await run_turn(turn(tools=tools), first, models=resolver(model))
    assert [c.kind for c in paused.pending] == ["approval"]

    second = RecordingSink()
    answers = [ToolAnswer("c1", approved=True)]
    done = await run_turn(
        turn(None, history=reloaded(first.messages), tools=tools, answers=answers), second, models=resolver(model)
    )
    assert deleted == ["x.txt"]
    assert second.commits[0].payloads[0] == ToolResult(
        tool_call_id="c1", tool_name="delete_file", output="deleted x.txt"
    )
    assert done.output == "Gone."


async def test_a_call_that_ends_beside_calls_still_running_commits_its_result_at_once() -> None:
    """A call that ended (or, answered or denied, will not run) while calls made beside it still run commits its
    result on its own, and says so live as it happens; the last one to end leaves its result to the commit that
    opens the next request, as a lone call does."""
    release = asyncio.Event()

    async def hold(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
        await release.wait()
        return "held"

    async def quick(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
        return "quick"

    def ended(sink: RecordingSink) -> list[Payload]:
        return [p for r in sink.records for p in r.payloads if isinstance(p, ToolProgress)]

    def results(sink: RecordingSink) -> list[str]:
        return [p.tool_call_id for p in sink.durable if isinstance(p, ToolResult)]

    tools = [spec("hold", hold), spec("quick", quick), spec("drop", quick, requires_approval=True)]
    model = ScriptedModel(steps=[[CallTool("hold", id="h"), CallTool("quick", id="q")], Reply("ok")])
    sink = RecordingSink()
    running = asyncio.create_task(run_turn(turn(tools=tools), sink, models=resolver(model)))
    await wait_for(lambda: bool(results(sink)))
    assert ended(sink) == [ToolProgress(tool_call_id="q", tool_name="quick", message="finished", status="ok")]
    assert sink.commits[-1] == Record("commit", (ToolResult(tool_call_id="q", tool_name="quick", output="quick"),))
    release.set()
    await running
    assert len(ended(sink)) == 1
    assert results(sink) == ["q", "h"]  # each once: the next request's start carries the held one's alone
    assert [shape(m) for m in sink.messages][2] == ("request", ["tool-return", "tool-return"])

    release.clear()
    model = ScriptedModel(steps=[[CallTool("drop", id="d"), CallTool("hold", id="h")], Reply("ok")])
    tools = [spec("hold", hold, requires_approval=True), tools[2]]
    first = RecordingSink()
    await run_turn(turn(tools=tools), first, models=resolver(model))
    sink = RecordingSink()
    answers = [ToolAnswer("d", approved=False), ToolAnswer("h", approved=True)]
    running = asyncio.create_task(
        run_turn(
            turn(None, history=reloaded(first.messages), tools=tools, answers=answers), sink, models=resolver(model)
        )
    )
    await wait_for(lambda: bool(ended(sink)))
    assert ended(sink) == [ToolProgress(tool_call_id="d", tool_name="drop", message="denied", status="denied")]
    await wait_for(lambda: bool(results(sink)))
    denied = ToolResult(tool_call_id="d", tool_name="drop", output="The tool call was denied.", status="denied")
    # (pipelined: it shares the commit of the turn's start, which the approved call waits for)
    assert sink.commits[0] == Record("commit", (denied,), wait=False)
    release.set()
    await running
    assert results(sink) == ["d", "h"]


async def test_continuing_after_a_crash_never_runs_a_cut_off_tool_again() -> None:
    runs: list[str] = []
    started = asyncio.Event()

    async def slow(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
        runs.append(ctx.tool_call_id)
        started.set()
        await asyncio.Event().wait()
        return "never"

    tools = [spec("build", slow)]
    model = ScriptedModel(steps=[CallTool("build", {"path": "."}), Reply("I will check what was built.")])
    crashed = RecordingSink()
    task = asyncio.create_task(run_turn(turn(tools=tools), crashed, models=resolver(model)))
    await started.wait()
    durable_at_crash = reloaded(crashed.messages)  # what the store held when the process died
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [shape(m) for m in durable_at_crash] == [("request", ["user-prompt"]), ("response", ["tool-call"])]

    sink = RecordingSink()
    result = await run_turn(turn("[restart note]", history=durable_at_crash, tools=tools), sink, models=resolver(model))
    assert runs == ["call_0_0"]
    assert sink.commits[0].payloads == (
        ToolResult(tool_call_id="call_0_0", tool_name="build", output=INTERRUPTED, status="interrupted"),
        CompletionStarted(request_index=0, model=REF),
    )
    assert [shape(m) for m in sink.commits[0].messages] == [("request", ["tool-return", "user-prompt"])]
    # the stored message says what the event says: the call was interrupted (as a run cut off in its tools has it)
    assert sink.commits[0].messages[0]["parts"][0]["outcome"] == "interrupted"  # type: ignore[index,call-overload]
    assert model.requests[-1].prompt == "[restart note]"
    assert result.output == "I will check what was built."


async def test_continuing_after_a_crash_gives_back_the_stored_results_of_calls_that_ended() -> None:
    """Calls that ended beside one still running when the process died: their results were committed as they
    ended, so the continued run gives them back to the model as they were (not `interrupted`), stores none of them
    again and runs none of them again; only the call cut off is `interrupted`."""
    runs: list[str] = []
    started = asyncio.Event()

    async def quick(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
        runs.append(ctx.tool_call_id)
        return {"wrote": args["path"]}

    async def broken(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
        runs.append(ctx.tool_call_id)
        raise OSError("disk on fire")

    async def slow(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
        runs.append(ctx.tool_call_id)
        started.set()
        await asyncio.Event().wait()
        return "never"

    def script(ctx: ScriptContext) -> ScriptStep:
        if ctx.request_index == 0:
            return [CallTool("quick", {"path": "a"}, id="q"), CallTool("broken", id="b"), CallTool("slow", id="s")]
        return Reply("; ".join(f"{r.name}={r.status}:{r.output}" for r in ctx.tool_results))

    tools = [spec("quick", quick), spec("broken", broken), spec("slow", slow)]
    model = ScriptedModel(function=script)
    crashed = RecordingSink()
    task = asyncio.create_task(run_turn(turn(tools=tools), crashed, models=resolver(model)))
    await started.wait()
    await wait_for(lambda: len([p for p in crashed.durable if isinstance(p, ToolResult)]) == 2)
    # what the store held when the process died: the response with its calls, and the results committed since
    history = reloaded(crashed.messages)
    stored = [p for p in crashed.durable if isinstance(p, ToolResult)]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [shape(m) for m in history] == [("request", ["user-prompt"]), ("response", ["tool-call"] * 3)]
    assert stored == [
        ToolResult(tool_call_id="q", tool_name="quick", output='{"wrote":"a"}', value={"wrote": "a"}),
        ToolResult(tool_call_id="b", tool_name="broken", output="OSError: disk on fire", status="error"),
    ]

    sink = RecordingSink()
    result = await run_turn(
        turn("[restart note]", history=history, tools=tools, results=stored), sink, models=resolver(model)
    )
    assert sorted(runs) == ["b", "q", "s"]  # each ran once, before the crash
    assert sink.commits[0].payloads == (
        ToolResult(tool_call_id="s", tool_name="slow", output=INTERRUPTED, status="interrupted"),
        CompletionStarted(request_index=0, model=REF),
    )
    assert [shape(m) for m in sink.commits[0].messages] == [("request", ["tool-return"] * 3 + ["user-prompt"])]
    # each return as an uninterrupted run has it: the object the tool returned (not its text), the cut-off call
    # `interrupted`
    returns = [
        (part["tool_call_id"], part["content"], part["outcome"])
        for part in sink.commits[0].messages[0]["parts"][:3]  # type: ignore[index,call-overload,union-attr]
    ]
    assert returns == [
        ("q", {"wrote": "a"}, "success"),
        ("b", "OSError: disk on fire", "failed"),
        ("s", INTERRUPTED, "interrupted"),
    ]
    assert result.output == (
        f'quick=ok:{{"wrote":"a"}}; broken=error:OSError: disk on fire; slow=interrupted:{INTERRUPTED}'
    )


async def test_continuing_after_a_crash_applies_answers_that_cover_cut_off_calls() -> None:
    ran: list[str] = []

    async def record(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
        ran.append(ctx.tool_name)
        return "done"

    tools = [spec("plain", record), spec("risky", record, requires_approval=True)]
    model = ScriptedModel(steps=[[CallTool("plain", id="p"), CallTool("risky", id="r")], Reply("ok")])
    first = RecordingSink()
    await run_turn(turn(tools=tools), first, models=resolver(model))
    history = reloaded(first.messages[:2])  # the crash came before the result of `plain` was stored
    ran.clear()

    sink = RecordingSink()
    answers = [ToolAnswer("r", approved=True)]
    await run_turn(turn(None, history=history, tools=tools, answers=answers), sink, models=resolver(model))
    assert ran == ["risky"]
    # the cut-off call's result is durable before the approved call runs beside it (with the turn's start)
    assert sink.commits[0].payloads == (
        ToolResult(tool_call_id="p", tool_name="plain", output=INTERRUPTED, status="interrupted"),
    )
    assert sink.commits[1].payloads[:1] == (ToolResult(tool_call_id="r", tool_name="risky", output="done"),)
    assert [shape(m) for m in sink.commits[1].messages] == [("request", ["tool-return", "tool-return"])]


async def test_cancelling_mid_stream_commits_the_partial_response_and_reraises() -> None:
    model = ScriptedModel(steps=[[Think("Let me"), Reply("The answer is"), Hang()], Reply("Continued.")])
    sink = RecordingSink()
    task = asyncio.create_task(run_turn(turn(), sink, models=resolver(model)))
    await wait_for(lambda: len(sink.streamed) == 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    last = sink.commits[-1]
    assert last.payloads[:2] == (ThinkingBlock(text="Let me"), AssistantMessage(text="The answer is"))
    cut = last.payloads[2]
    assert isinstance(cut, CompletionFinished)
    assert cut.finish_reason == "interrupted"
    assert [(m["kind"], m["state"]) for m in last.messages] == [("response", "interrupted")]  # type: ignore[index,call-overload]

    again = RecordingSink()
    result = await run_turn(turn("go on", history=reloaded(sink.messages)), again, models=resolver(model))
    assert result.output == "Continued."


async def test_cancelling_mid_tool_closes_every_call_and_reraises() -> None:
    async def fast(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
        return "fast result"

    started = asyncio.Event()

    async def slow(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
        started.set()
        await asyncio.Event().wait()
        return "never"

    tools = [spec("fast", fast), spec("slow", slow)]
    model = ScriptedModel(steps=[[CallTool("fast", id="f"), CallTool("slow", id="s")], Reply("Noted.")])
    sink = RecordingSink()
    task = asyncio.create_task(run_turn(turn(tools=tools), sink, models=resolver(model)))
    await started.wait()
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    early, last = sink.commits[-2:]
    # the fast call's result was committed as it ended; the closing commit adds the slow one's, and both returns
    assert early.payloads == (ToolResult(tool_call_id="f", tool_name="fast", output="fast result"),)
    assert last.payloads == (ToolResult(tool_call_id="s", tool_name="slow", output=INTERRUPTED, status="interrupted"),)
    assert [shape(m) for m in last.messages] == [("request", ["tool-return", "tool-return"])]
    assert [p["content"] for p in last.messages[0]["parts"]] == ["fast result", INTERRUPTED]  # type: ignore[index,call-overload]

    again = RecordingSink()
    result = await run_turn(turn(None, history=reloaded(sink.messages), tools=tools), again, models=resolver(model))
    assert result.output == "Noted."
    assert [p for p in again.durable if isinstance(p, ToolResult)] == []


async def test_a_failing_model_ends_the_run_failed_after_committing_what_happened() -> None:
    model = ScriptedModel.failing("provider exploded", Reply("Half"))
    sink = RecordingSink()
    result = await run_turn(turn(), sink, models=resolver(model))
    assert result == TurnResult(
        outcome="failed", output=None, usage=result.usage, error="ScriptedModelError: provider exploded"
    )
    first, last = sink.commits
    assert first.payloads == (CompletionStarted(request_index=0, model=REF),)
    assert [shape(m) for m in first.messages] == [("request", ["user-prompt"])]
    # the text streamed before the failure stays durable, in a response cut off by the error
    assert last.payloads == (
        AssistantMessage(text="Half"),
        finished(last, 0, result.usage, "error"),
    )
    assert [(m["kind"], m["state"]) for m in last.messages] == [("response", "interrupted")]  # type: ignore[index,call-overload]


async def test_the_request_limit_fails_the_run() -> None:
    model = ScriptedModel(function=lambda ctx: CallTool("read_file", {"path": "a.py"}))
    result = await run_turn(
        turn(tools=[spec("read_file", read_file)], max_requests=2), RecordingSink(), models=resolver(model)
    )
    assert result.outcome == "failed"
    assert result.error is not None and "request_limit" in result.error
    assert result.usage.requests == 2


async def test_a_call_of_an_unknown_tool_is_sent_back_to_the_model_and_the_turn_goes_on() -> None:
    model = ScriptedModel(steps=[CallTool("raed_file", {"path": "a.py"}), Reply("I meant read_file.")])
    sink = RecordingSink()
    result = await run_turn(turn(tools=[spec("read_file", read_file)]), sink, models=resolver(model))

    assert [p for p in sink.durable if isinstance(p, ToolResult)] == [
        ToolResult(
            tool_call_id="call_0_0",
            tool_name="raed_file",
            output="Unknown tool name: 'raed_file'. Available tools: 'read_file'",
            status="error",
        )
    ]
    assert model.requests[1].tool_results[0].status == "error"
    assert result.outcome == "completed" and result.output == "I meant read_file."
    # stored as a retry of the call, so a provider sends it back as one
    [returned] = [p for m in reloaded(sink.messages) for p in m["parts"] if p["part_kind"] == "tool-return"]  # type: ignore[call-overload,index]
    assert returned["outcome"] == "retried" and returned["retry"]["cause"] == "unknown_tool"


async def test_a_model_that_keeps_calling_an_unknown_tool_fails_the_run() -> None:
    model = ScriptedModel(function=lambda ctx: CallTool("raed_file", {"path": "a.py"}))
    sink = RecordingSink()
    result = await run_turn(turn(tools=[spec("read_file", read_file)]), sink, models=resolver(model))
    assert result.outcome == "failed" and result.usage.requests == 2
    assert result.error == "UnexpectedModelBehavior: Tool 'raed_file' exceeded max retries count of 1"
    assert len([p for p in sink.durable if isinstance(p, ToolResult)]) == 2  # no call is left without a result


async def test_a_response_with_no_answer_and_no_call_is_asked_for_again_once() -> None:
    model = ScriptedModel(
        function=lambda ctx: Think("Nothing to say yet.") if ctx.request_index == 0 else Reply("Here.")
    )
    result = await run_turn(turn(), RecordingSink(), models=resolver(model))
    assert result.outcome == "completed" and result.output == "Here."
    assert len(model.requests) == 2

    silent = ScriptedModel(function=lambda ctx: Think("Still nothing."))
    failed = await run_turn(turn(), RecordingSink(), models=resolver(silent))
    assert failed.outcome == "failed" and failed.error == "UnexpectedModelBehavior: Exceeded maximum output retries (1)"
    assert len(silent.requests) == 2


async def test_stored_history_continues_exactly_like_the_live_conversation() -> None:
    def script(ctx: ScriptContext) -> ScriptStep:
        return Reply(f"turn {ctx.request_index}: {ctx.prompt} after {len(ctx.transcript)} items")

    tools = [spec("read_file", read_file)]
    live_model, stored_model = coder(), coder()
    live, stored = RecordingSink(), RecordingSink()
    await run_turn(turn(tools=tools), live, models=resolver(live_model))
    await run_turn(turn(tools=tools), stored, models=resolver(stored_model))

    echo_live, echo_stored = ScriptedModel(function=script), ScriptedModel(function=script)
    a, b = RecordingSink(), RecordingSink()
    await run_turn(turn("And then?", history=live.messages), a, models=resolver(echo_live))
    await run_turn(turn("And then?", history=reloaded(stored.messages)), b, models=resolver(echo_stored))
    assert echo_live.requests == echo_stored.requests
    assert _without_responses(a.durable) == _without_responses(b.durable)
    assert [p for p in a.durable if isinstance(p, AssistantMessage)] == [
        AssistantMessage(text="turn 2: And then? after 6 items")
    ]


def _without_responses(payloads: list[Any]) -> list[Any]:
    # the response documents carry times and run ids; everything else must be the same
    return [p.model_copy(update={"response": None}) if isinstance(p, CompletionFinished) else p for p in payloads]


async def test_run_turn_hands_back_the_run_itself_and_raises_only_when_awaited() -> None:
    running = run_turn(turn(), RecordingSink(), models=resolver(ScriptedModel.replying("Hi.")))
    assert getattr(running, "cr_code", None) is _TurnRun.run.__code__  # no coroutine around it: a frame less
    assert (await running).output == "Hi."

    unknown = run_turn(replace(turn(), model="nowhere:model"), RecordingSink(), models=resolver(ScriptedModel()))
    with pytest.raises(InvalidArgument):
        await unknown
