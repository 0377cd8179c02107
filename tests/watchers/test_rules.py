"""Rule observers: the four built-ins, their reports through the ObserverReport path, and registering more."""

from __future__ import annotations

import asyncio
import inspect
import traceback
from typing import Any

from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.runtime.roster import AgentDefinition
from agentwatch.runtime.tools import function_tool
from agentwatch.watchers import (
    RuleContext,
    ToolCallItem,
    ToolResultItem,
    TurnEndedItem,
    budget_guard,
    describe,
    failure_guard,
    loop_guard,
    observer_agents,
    secret_guard,
)
from agentwatch.watchers.rules import RuleBook, rule_observer, run_rule
from tests.runtime.support import HeldTool
from tests.watchers.support import (
    OpenEngine,
    Scripted,
    events,
    eventually,
    observers_of,
    reports,
    role,
    states,
    warnings,
)


def context(*items: Any, memory: dict[str, Any] | None = None) -> RuleContext:
    return RuleContext("ses_x", "coder", tuple(items), "", {} if memory is None else memory)


async def test_the_loop_guard_reports_the_same_call_repeated_in_one_turn() -> None:
    rule = loop_guard(repeats=3)
    call = ToolCallItem("search", '{"q": "x"}', "fp1")
    memory: dict[str, Any] = {}
    assert await run_rule(rule, context(call, call, memory=memory)) == []
    assert await run_rule(rule, context(call, memory=memory)) == [
        'Loop guard: you called search with the same input 3 times in this turn ({"q": "x"}). It will give the '
        "same result again; change the approach or stop."
    ]
    assert await run_rule(rule, context(call, call, memory=memory)) == []  # reported once per turn
    assert await run_rule(rule, context(TurnEndedItem("completed"), call, call, memory=memory)) == []


async def test_the_failure_guard_reports_errors_in_a_row() -> None:
    rule = failure_guard(errors=2)
    fail = ToolResultItem("build", "exit 1", "error")
    ok = ToolResultItem("build", "ok", "ok")
    assert await run_rule(rule, context(fail, ok, fail)) == []
    assert await run_rule(rule, context(fail, fail)) == [
        "Failure guard: your last 2 tool calls failed (build); the latest said: exit 1. Look at why before "
        "trying again."
    ]


async def test_the_budget_guard_reports_an_expensive_turn() -> None:
    rule = budget_guard(max_tokens=1_000, max_cost_usd=0.5)
    assert await run_rule(rule, context(TurnEndedItem("completed", tokens=900, cost_usd=0.1))) == []
    assert await run_rule(rule, context(TurnEndedItem("completed", tokens=1_500))) == [
        "Budget guard: your last turn used 1,500 tokens, over the 1,000 budget per turn. Work in smaller steps "
        "or read less at once."
    ]
    assert await run_rule(rule, context(TurnEndedItem("completed", tokens=10, cost_usd=0.75))) == [
        "Budget guard: your last turn cost $0.75, over the $0.50 budget per turn."
    ]


async def test_the_secret_guard_finds_key_like_strings_and_masks_them() -> None:
    rule = secret_guard()
    items = [
        ToolCallItem("http", '{"auth": "sk-proj-abcdefghijklmnopqrstuvwx"}', "f"),
        ToolResultItem("env", "AWS=AKIAABCDEFGHIJKLMNOP\ntoken ghp_" + "a" * 36),
        ToolResultItem("cat", "xoxb-1234567890-abc and -----BEGIN RSA PRIVATE KEY-----"),
        ToolResultItem("ls", "nothing secret, sk-short"),
    ]
    found = await run_rule(rule, context(*items))
    assert [r.split(" holds what looks like ")[1].split(" (")[0] for r in found] == [
        "an API key",
        "an AWS access key id",
        "a GitHub token",
        "a Slack token",
        "a private key",
    ]
    assert "sk-p…32 chars" in found[0] and "abcdefghijklmnop" not in found[0]
    assert await run_rule(rule, context(*items, memory={"seen": set()})) != []


async def test_a_rule_observer_reports_through_the_same_channel_at_no_token_cost(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    def looping(ctx: Any) -> Any:
        if ctx.prompt.startswith("[agentwatch]"):
            return Reply("Understood, I will stop.")
        return CallTool("search", {"q": "same"}) if ctx.request_index < 3 else Reply("gave up")

    def search(q: str) -> str:
        """Search."""
        return "no results"

    model = scripted("looper", ScriptedModel(function=looping))
    async with open_engine(
        role("looper", model, tools=("search",), observer="loop-guard"), tools=[function_tool(search)]
    ) as engine:
        session = await engine.create("looper", source="chat")
        await engine.enqueue(session.id, "find it")
        found = await eventually(lambda: reports(engine, session.id))
        assert found == [
            'Loop guard: you called search with the same input 3 times in this turn ({"q": "same"}). It will give '
            "the same result again; change the approach or stop."
        ]
        assert await observers_of(engine, session.id) == []
        await eventually(lambda: _turns(engine, session.id, 2))
        last = (await engine.store.get_session(session.id)).last_text
        assert last == "Understood, I will stop."
        described = await describe(engine.store, await engine.store.get_session(session.id))
        assert described is not None
        assert (described["observerType"], described["observerSessionId"], described["state"]) == (
            "loop-guard",
            None,
            "armed",
        )
        record = await engine.call_tool("agent_get", {"id": session.id})
        assert record["observer"] == described
        assert [r["report"] for r in record["observer"]["reports"]] == found
        tail = await engine.call_tool("agent_tail", {"id": session.id, "types": ["observer.*"], "maxChars": 4000})
        assert [row["detail"] for row in tail["events"] if row["type"] == "observer.report"] == found


async def _turns(engine: Any, session_id: str, count: int) -> bool:
    return len(await events(engine, session_id, "turn.ended")) >= count


async def test_users_register_their_own_rule_observers(open_engine: OpenEngine, scripted: Scripted) -> None:
    def todo_guard(ctx: RuleContext) -> str | None:
        texts = [i.text for i in ctx.items if i.kind == "assistant_text"]
        return "You left a TODO in your answer." if any("TODO" in t for t in texts) else None

    model = scripted("todo", ScriptedModel(function=lambda ctx: Reply("Done. TODO: tests")))
    async with open_engine(role("writer", model, observer="todo-guard")) as engine:
        observer_agents(engine).register_rule("todo-guard", todo_guard)
        assert engine.roster.get("todo-guard").kind == "rule"
        session = await engine.create("writer", source="api")  # a task: its report starts no second turn
        await engine.enqueue(session.id, "write")
        assert await eventually(lambda: reports(engine, session.id)) == ["You left a TODO in your answer."]


async def test_the_decorator_registers_for_every_later_engine_and_a_rule_type_needs_a_function(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    from agentwatch.watchers import rules

    saved = rules._GLOBAL
    rules._GLOBAL = RuleBook()
    try:

        @rule_observer("shout-guard")
        def shout(ctx: RuleContext) -> str:
            return "Please do not shout."

        model = scripted("shouter", ScriptedModel(function=lambda ctx: Reply("HELLO")))
        async with open_engine(
            role("shouter", model, observer="shout-guard"),
            role("quiet", model, observer="hush"),
            AgentDefinition(name="hush", kind="rule"),
        ) as engine:
            session = await engine.create("shouter", source="api")  # a task: its report starts no second turn
            await engine.enqueue(session.id, "greet")
            assert await eventually(lambda: reports(engine, session.id)) == ["Please do not shout."]
            quiet = await engine.create("quiet", source="chat")
            await engine.enqueue(quiet.id, "greet")
            assert await eventually(lambda: warnings(engine, quiet.id)) == [
                "'hush' is a rule observer with no registered function, so 'quiet' runs unobserved; register one "
                "with register_rule_observer('hush', ...)"
            ]
    finally:
        rules._GLOBAL = saved


async def test_a_rule_that_reads_the_items_alone_has_no_digest_rendered_and_one_that_reads_it_gets_it(
    open_engine: OpenEngine, scripted: Scripted, monkeypatch: Any
) -> None:
    from agentwatch.watchers import digest

    rendered: list[str] = []
    render = digest.render_digest

    def counting(observed_name: str, items: Any) -> str:
        rendered.append(observed_name)
        return render(observed_name, items)

    monkeypatch.setattr(digest, "render_digest", counting)
    texts: list[str] = []

    def items_only(ctx: RuleContext) -> str | None:
        return "You wrote HELLO." if any(i.kind == "assistant_text" and "HELLO" in i.text for i in ctx.items) else None

    def reading(ctx: RuleContext) -> None:
        texts.append(ctx.digest)

    model = scripted("shouter", ScriptedModel(function=lambda ctx: Reply("HELLO")))
    async with open_engine(
        role("shouter", model, observer="items-guard"), role("reader", model, observer="reading-guard")
    ) as engine:
        observer_agents(engine).register_rule("items-guard", items_only)
        observer_agents(engine).register_rule("reading-guard", reading)
        session = await engine.create("shouter", source="api")
        await engine.enqueue(session.id, "greet")
        assert await eventually(lambda: reports(engine, session.id)) == ["You wrote HELLO."]
        assert rendered == []
        reader = await engine.create("reader", source="api")
        await engine.enqueue(reader.id, "greet")
        await eventually(lambda: _read(texts))
        assert rendered and set(rendered) == {reader.name}
        assert "<user-message>\ngreet\n</user-message>" in texts[0] and "HELLO" in "".join(texts)
        assert texts[-1].endswith(digest.postamble())


async def _read(texts: list[str]) -> bool:
    return any("<turn-ended" in text for text in texts)


async def test_a_rule_observer_reads_the_store_only_to_resolve_a_fresh_session(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    def work(ctx: Any) -> Any:
        return CallTool("search", {"q": str(ctx.request_index)}) if ctx.request_index < 3 else Reply("done")

    def search(q: str) -> str:
        """Search."""
        return f"result {q}"

    model = scripted("worker", ScriptedModel(function=work))
    async with open_engine(
        role("worker", model, tools=("search",), observer="secret-guard"), tools=[function_tool(search)]
    ) as engine:
        reads = _watchers_reads(engine)
        session = await engine.create("worker", source="api")
        await engine.enqueue(session.id, "go")
        await engine.wait(session.id, 10)
        pairing = observer_agents(engine).pairing(session.id)
        await eventually(lambda: _delivered(pairing))
        # the session, to resolve it; no observer ref (it never had a pairing), nothing after a completed turn
        assert reads == ["get_session"]
        assert pairing is not None and pairing.state == "armed"
        assert [state for state, _ in await states(engine, session.id)] == ["armed"]
        await engine.enqueue(session.id, "again")
        await engine.wait(session.id, 10)
        await eventually(lambda: _delivered(pairing))
        assert reads == ["get_session"]  # a stop or a delete is what ends an agent (see test_reach)


def _watchers_reads(engine: Any) -> list[str]:
    """The store methods called from the watchers from now on, in order (a write goes through the emitter)."""
    called: list[str] = []
    store = engine.store
    for name in dir(type(store)):
        method = getattr(store, name)
        if name.startswith("_") or not inspect.iscoroutinefunction(method):
            continue

        def wrap(name: str, method: Any) -> Any:
            async def noting(*args: Any, **kwargs: Any) -> Any:
                if any("/agentwatch/watchers/" in frame.filename for frame in traceback.extract_stack()):
                    called.append(name)
                return await method(*args, **kwargs)

            return noting

        setattr(store, name, wrap(name, method))
    return called


async def _delivered(pairing: Any) -> bool:
    return pairing is not None and not pairing.buffer and (pairing.delivering is None or pairing.delivering.done())


async def test_a_plain_rule_that_reports_nothing_sets_no_timer_and_the_others_run_within_the_time_limit(
    open_engine: OpenEngine, scripted: Scripted, monkeypatch: Any
) -> None:
    from agentwatch.watchers import delivery

    timers: list[float | None] = []
    timeout = delivery.asyncio.timeout

    def counting(delay: float | None) -> Any:
        timers.append(delay)
        return timeout(delay)

    monkeypatch.setattr(delivery.asyncio, "timeout", counting)
    ended: list[str] = []

    def quiet(ctx: RuleContext) -> None:
        ended.extend(ctx.observed_session_id for i in ctx.items if i.kind == "turn_ended")

    async def slow_quiet(ctx: RuleContext) -> None:
        await asyncio.sleep(0)
        quiet(ctx)

    def loud(ctx: RuleContext) -> str | None:
        quiet(ctx)
        return "Turn over." if any(i.kind == "turn_ended" for i in ctx.items) else None

    model = scripted("plain", ScriptedModel(function=lambda ctx: Reply("Done.")))
    async with open_engine(
        role("quiet", model, observer="quiet-guard"),
        role("slow", model, observer="slow-guard"),
        role("loud", model, observer="loud-guard"),
    ) as engine:
        hub = observer_agents(engine)
        for name, function in (("quiet-guard", quiet), ("slow-guard", slow_quiet), ("loud-guard", loud)):
            hub.register_rule(name, function)
        counts = []
        for role_name in ("quiet", "slow", "loud"):
            session = await engine.create(role_name, source="api")
            await engine.enqueue(session.id, "go")
            await engine.wait(session.id, 10)
            await eventually(lambda sid=session.id: _ended(ended, sid))  # type: ignore[misc]
            await eventually(lambda sid=session.id: _delivered(hub.pairing(sid)))  # type: ignore[misc]
            counts.append(len(timers))
            timers.clear()
        assert counts[0] == 0  # its batches (the prompt, the answer, the turn's end) waited on nothing
        assert counts[1] >= 1  # an async rule: each of its batches within the time limit
        assert counts[2] == 1  # the report on the turn's end is sent within it
        assert await reports(engine, session.id) == ["Turn over."]


async def _ended(ended: list[str], session_id: str) -> bool:
    return session_id in ended


async def test_a_rule_observer_is_not_given_again_what_it_saw_before_a_deploy_moved_the_turn(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once the engine that continued the turn read its start back segmented as a model observer's digest (eight
    results), not as a rule's (each call), and the rule reported the call it had reported before the deploy."""
    held = HeldTool("slow")
    steps = [CallTool("bash", {"command": "rm -rf /"}), CallTool("slow", {}), Reply("done")]

    def bash(command: str) -> str:
        """Run a command."""
        return "ok"

    model = scripted("ops-moved", ScriptedModel(function=lambda ctx: steps[min(ctx.request_index, 2)]))
    ops = role("ops", model, tools=("bash", "slow"), observer="command-guard")
    tools = [function_tool(bash), held.tool]
    async with open_engine(ops, tools=tools) as first:
        session = await first.create("ops")
        await first.enqueue(session.id, "clean up")
        await asyncio.wait_for(held.started.wait(), 10)
        assert len(await eventually(lambda: reports(first, session.id))) == 1
    held.release.set()
    async with open_engine(ops, tools=tools) as second:
        done, _ = await second.wait(session.id, 20)
        assert done.status == "completed"
        await asyncio.sleep(0.5)  # (the rule had its segments)
        assert len(await reports(second, session.id)) == 1
