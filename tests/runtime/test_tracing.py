"""OpenTelemetry spans projected from the log (`agentwatch.tracing`): a turn, its model requests and its tool
calls as spans with the generative-AI conventions' names and attributes; failures, pauses and cut-off turns said
so; off by default (nothing of the SDK imported); on with the switch, exported over real OTLP/HTTP by a
provider the extension makes, or refused with what to install."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from agentwatch.events import TurnStarted
from agentwatch.notify import Notifications
from agentwatch.runtime import engine as engines
from agentwatch.runtime.models import CallTool, Fail, Reply, ScriptedModel
from agentwatch.runtime.roster import AgentDefinition
from agentwatch.tracing import CUT_OFF, Tracing
from agentwatch.watchers import ObserverAgents
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.otlp_collector import OtlpCollector
from tests.runtime.support import HeldTool, OpenEngine, Scripted, role

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def exported() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def lookup(key: str) -> str:
    """Look a note up."""
    if key == "missing":
        raise KeyError("no such note")
    return f"note {key}: done"


def _two_lookups(ctx: Any) -> Any:
    if ctx.request_index == 0:
        return [Reply("Reading the first note."), CallTool("lookup", {"key": "a"})]
    if ctx.request_index == 1:
        return CallTool("lookup", {"key": "missing"})
    return Reply("One note is done, the other is missing.")


def _by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        found.setdefault(span.name, []).append(span)
    return found


async def test_a_turn_is_a_span_with_its_model_requests_and_tool_calls_as_children(
    open_engine: OpenEngine, scripted: Scripted, exported: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = exported
    model = scripted("tracing-notes", ScriptedModel(function=_two_lookups))
    definition = role("notes", model, tools=("lookup",))
    async with open_engine(definition, tools=[lookup], extensions=[Tracing(provider)]) as engine:
        done = await engine.task("notes", "What do the notes say?", timeout=10)
        session = await engine.store.get_session(str(done["agentId"]))

    spans = _by_name(exporter.get_finished_spans())
    assert sorted(spans) == ["chat tracing-notes", "execute_tool lookup", "invoke_agent notes"]
    [turn] = spans["invoke_agent notes"]
    chats, tools = spans["chat tracing-notes"], spans["execute_tool lookup"]
    assert (len(chats), len(tools)) == (3, 2)
    assert turn.parent is None and turn.attributes is not None
    assert {key: turn.attributes[key] for key in ("gen_ai.operation.name", "gen_ai.agent.name", "gen_ai.agent.id")} == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "notes",
        "gen_ai.agent.id": session.id,
    }
    assert turn.attributes["gen_ai.conversation.id"] == session.conversation_id
    assert (turn.attributes["agentwatch.turn.trigger"], turn.attributes["agentwatch.turn.outcome"]) == (
        "input",
        "completed",
    )
    assert turn.status.status_code is StatusCode.UNSET
    tokens_in, tokens_out = turn.attributes["gen_ai.usage.input_tokens"], turn.attributes["gen_ai.usage.output_tokens"]
    assert isinstance(tokens_in, int) and isinstance(tokens_out, int) and tokens_out > 0
    assert tokens_in + tokens_out == session.tokens

    for child in (*chats, *tools):
        assert child.parent is not None and child.parent.span_id == turn.context.span_id
        assert child.context.trace_id == turn.context.trace_id
        assert turn.start_time is not None and child.start_time is not None and child.end_time is not None
        assert turn.end_time is not None and turn.start_time <= child.start_time <= child.end_time <= turn.end_time
    chats = sorted(chats, key=lambda span: span.start_time or 0)
    assert [c.attributes and c.attributes["agentwatch.request_index"] for c in chats] == [0, 1, 2]
    assert [c.attributes and c.attributes["gen_ai.response.finish_reasons"] for c in chats] == [
        ("tool_call",),
        ("tool_call",),
        ("stop",),
    ]
    assert all(c.attributes and c.attributes["gen_ai.request.model"] == "tracing-notes" for c in chats)
    assert sum(int(c.attributes["gen_ai.usage.input_tokens"]) for c in chats if c.attributes) == tokens_in

    tools = sorted(tools, key=lambda span: span.start_time or 0)
    assert [t.attributes and t.attributes["agentwatch.tool.status"] for t in tools] == ["ok", "error"]
    assert [t.status.status_code for t in tools] == [StatusCode.UNSET, StatusCode.ERROR]
    assert tools[0].attributes and str(tools[0].attributes["gen_ai.tool.call.id"]).startswith("call_")
    # Each tool call runs between the response that made it and the request that reads its result.
    assert chats[0].end_time is not None and tools[0].start_time is not None and tools[0].end_time is not None
    assert chats[0].end_time <= tools[0].start_time and tools[0].end_time <= (chats[1].start_time or 0)
    # No text of the conversation in any span.
    texts = json.dumps([dict(s.attributes or {}) for s in exporter.get_finished_spans()])
    assert "What do the notes say" not in texts and "note a: done" not in texts and "Reading" not in texts


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


async def test_a_models_provider_is_named_as_the_conventions_name_it(
    open_engine: OpenEngine, exported: tuple[TracerProvider, InMemorySpanExporter], monkeypatch: pytest.MonkeyPatch
) -> None:
    provider, exporter = exported
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        weather = role("weather", "openai-chat:gpt-4o", tools=("get_weather",))
        async with open_engine(weather, tools=[get_weather], extensions=[Tracing(provider)]) as engine:
            done = await engine.task("weather", "What is the weather in Paris?", timeout=10)
    assert done["status"] == "completed"
    # OpenAI's two APIs are one provider for the conventions (`gen_ai.provider.name` tells the telemetry's flavour).
    named = {(span.name, (span.attributes or {}).get("gen_ai.provider.name")) for span in exporter.get_finished_spans()}
    assert named == {("invoke_agent weather", "openai"), ("chat gpt-4o", "openai"), ("execute_tool get_weather", None)}


async def test_a_sub_agents_first_turn_is_a_child_of_the_call_that_spawned_it(
    open_engine: OpenEngine, scripted: Scripted, exported: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = exported

    helper: list[str] = []

    def lead(ctx: Any) -> Any:
        if ctx.request_index == 0:
            return CallTool("agent_task", {"role": "helper", "prompt": "count to 3"})
        if ctx.request_index == 1:
            helper.append(json.loads(ctx.tool_results[0].output)["agentId"])
            return CallTool("agent_enqueue", {"agentId": helper[0], "prompt": "and to 4"})
        if ctx.request_index == 2:
            return CallTool("agent_await", {"agentId": helper[0], "timeoutMs": 10_000})
        return Reply("The helper is done.")

    lead_model = scripted("tracing-lead", ScriptedModel(function=lead))
    helper_model = scripted("tracing-helper", ScriptedModel(function=lambda ctx: Reply("counted")))
    lead_role = role("lead", lead_model, tools=("agent_task", "agent_enqueue", "agent_await"), grant=("spawn",))
    async with open_engine(lead_role, role("helper", helper_model), extensions=[Tracing(provider)]) as engine:
        done = await engine.task("lead", "Delegate.", timeout=10)
    assert done["status"] == "completed"

    spans = _by_name(exporter.get_finished_spans())
    [lead_turn] = spans["invoke_agent lead"]
    [spawning] = spans["execute_tool agent_task"]
    first, second = sorted(spans["invoke_agent helper"], key=lambda span: span.start_time or 0)
    assert first.parent is not None and first.parent.span_id == spawning.context.span_id
    assert first.context.trace_id == spawning.context.trace_id == lead_turn.context.trace_id
    # A later turn the parent gave it by message is a trace of its own.
    assert second.parent is None and second.context.trace_id != lead_turn.context.trace_id


async def test_a_workflow_is_one_trace_down_to_its_agents_model_requests_and_tool_calls(
    open_engine: OpenEngine, scripted: Scripted, exported: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = exported
    tries: list[str] = []

    def writer(ctx: Any) -> Any:
        tries.append(ctx.prompt)
        return Fail("the draft is lost") if len(tries) == 1 else Reply("written")

    researcher = role(
        "researcher", scripted("tracing-research", ScriptedModel(function=_two_lookups)), tools=("lookup",)
    )
    writer_role = role("writer", scripted("tracing-writer", ScriptedModel(function=writer)))
    async with (
        open_engine(researcher, writer_role, tools=[lookup], extensions=[Tracing(provider)]) as engine,
        engine.run("report") as run,
    ):
        async with run.span("Research") as research:
            await research.task("researcher", "Collect the notes.")
        await run.task("writer", "Write it up.", attempts=2, backoff_seconds=0.01)

    spans = exporter.get_finished_spans()
    by_name = _by_name(spans)
    [workflow] = by_name["workflow report"]
    [phase] = by_name["phase Research"]
    [research_task] = by_name["task researcher"]
    first, second = sorted(by_name["task writer"], key=lambda span: span.start_time or 0)
    [backoff] = by_name["backoff writer backoff"]
    [research_turn] = by_name["invoke_agent researcher"]
    writer_turns = sorted(by_name["invoke_agent writer"], key=lambda span: span.start_time or 0)

    assert {span.context.trace_id for span in spans} == {workflow.context.trace_id}  # one trace
    assert workflow.parent is None and workflow.status.status_code is StatusCode.UNSET

    def parent_of(span: ReadableSpan) -> int | None:
        return span.parent.span_id if span.parent is not None else None

    assert parent_of(phase) == workflow.context.span_id
    assert parent_of(research_task) == phase.context.span_id
    assert parent_of(research_turn) == research_task.context.span_id
    assert {parent_of(s) for s in by_name["execute_tool lookup"]} == {research_turn.context.span_id}
    assert parent_of(first) == parent_of(second) == parent_of(backoff) == workflow.context.span_id
    assert [parent_of(turn) for turn in writer_turns] == [first.context.span_id, second.context.span_id]
    assert (first.status.status_code, second.status.status_code) == (StatusCode.ERROR, StatusCode.UNSET)
    assert first.attributes and first.attributes["agentwatch.run.status"] == "failed"
    assert research_task.attributes and research_turn.attributes
    assert research_task.attributes["gen_ai.agent.id"] == research_turn.attributes["gen_ai.agent.id"]


async def test_a_failed_turn_and_a_paused_one_say_so_and_an_answer_resumes_in_a_new_span(
    open_engine: OpenEngine, scripted: Scripted, exported: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = exported
    failing = role("failing", scripted("tracing-fails", ScriptedModel([Fail("the model is down")])))

    def delete_file(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    def deleting(ctx: Any) -> Any:
        return Reply(ctx.tool_results[0].output) if ctx.tool_results else CallTool("delete_file", {"path": "a.txt"})

    cleaner = role(
        "cleaner",
        scripted("tracing-deletes", ScriptedModel(function=deleting)),
        tools=("delete_file",),
        approval_tools=("delete_file",),
    )
    async with open_engine(failing, cleaner, tools=[delete_file], extensions=[Tracing(provider)]) as engine:
        failed = await engine.task("failing", "Go.", timeout=10)
        paused = await engine.task("cleaner", "Clean up.", timeout=10)
        pending = paused["pendingHitl"]
        assert isinstance(pending, dict)
        await engine.answer(str(pending["hitlId"]), True)
        await engine.wait(str(paused["agentId"]), 10)

    assert failed["status"] == "failed"
    spans = _by_name(exporter.get_finished_spans())
    [failed_turn] = spans["invoke_agent failing"]
    assert failed_turn.status.status_code is StatusCode.ERROR
    assert failed_turn.status.description is not None and "the model is down" in failed_turn.status.description
    assert failed_turn.attributes and failed_turn.attributes["agentwatch.turn.outcome"] == "failed"

    first, resumed = sorted(spans["invoke_agent cleaner"], key=lambda span: span.start_time or 0)
    assert first.attributes and resumed.attributes
    assert (first.attributes["agentwatch.turn.outcome"], first.status.status_code) == ("paused", StatusCode.UNSET)
    assert [e.name for e in first.events] == ["request.opened"]
    assert first.events[0].attributes and first.events[0].attributes["kind"] == "approval"
    assert (resumed.attributes["agentwatch.turn.trigger"], resumed.attributes["agentwatch.turn.outcome"]) == (
        "answer",
        "completed",
    )
    assert resumed.attributes["agentwatch.turn.id"] == first.attributes["agentwatch.turn.id"]
    assert [link.context.span_id for link in resumed.links] == [first.context.span_id]  # the part before it
    assert not first.links
    # The call waited on a person while the turn was paused: its span says so, and is no failure; once approved
    # it ran as the resumed turn began, a span of that turn's.
    waited, ran = sorted(spans["execute_tool delete_file"], key=lambda span: span.start_time or 0)
    assert waited.attributes and waited.attributes["agentwatch.tool.status"] == "waiting"
    assert waited.status.status_code is StatusCode.UNSET
    assert waited.parent is not None and waited.parent.span_id == first.context.span_id
    assert ran.attributes and (ran.attributes["agentwatch.tool.status"], ran.attributes["gen_ai.tool.call.id"]) == (
        "ok",
        waited.attributes["gen_ai.tool.call.id"],
    )
    assert ran.parent is not None and ran.parent.span_id == resumed.context.span_id
    assert resumed.start_time == ran.start_time and ran.end_time is not None and resumed.end_time is not None
    assert ran.end_time <= resumed.end_time


async def test_a_span_that_ended_in_an_error_names_its_class_and_a_model_request_is_a_client_call(
    open_engine: OpenEngine, scripted: Scripted, exported: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = exported
    notes = role("notes", scripted("tracing-error-types", ScriptedModel(function=_two_lookups)), tools=("lookup",))
    failing = role("failing", scripted("tracing-error-fails", ScriptedModel([Fail("the model is down")])))
    async with open_engine(notes, failing, tools=[lookup], extensions=[Tracing(provider)]) as engine:
        done = await engine.task("notes", "What do the notes say?", timeout=10)
        await engine.task("failing", "Go.", timeout=10)
        session = await engine.store.get_session(str(done["agentId"]))

    spans = _by_name(exporter.get_finished_spans())
    # `error.type` is what the conventions ask of a span that ended in an error, beside its status.
    error_types = [
        (span.status.status_code, (span.attributes or {}).get("error.type"))
        for span in sorted(spans["execute_tool lookup"], key=lambda span: span.start_time or 0)
    ]
    assert error_types == [(StatusCode.UNSET, None), (StatusCode.ERROR, "error")]
    [failed] = spans["invoke_agent failing"]
    assert (failed.status.status_code, (failed.attributes or {}).get("error.type")) == (StatusCode.ERROR, "failed")
    # A model request is a call of a client (kind CLIENT), in the turn's conversation.
    chats = spans["chat tracing-error-types"]
    assert {(chat.kind, (chat.attributes or {}).get("gen_ai.conversation.id")) for chat in chats} == {
        (SpanKind.CLIENT, session.conversation_id)
    }


async def _cut_off(
    open_engine: OpenEngine, scripted: Scripted, exported: tuple[TracerProvider, InMemorySpanExporter], model: str
) -> tuple[HeldTool, AgentDefinition, str]:
    """A traced engine whose turn (of a `holder`) is in its tool when the engine closes (only its model request's
    span is over by then); the tool, the role and the session's id."""
    provider, exporter = exported
    held = HeldTool("wait_for_it")
    definition = held.role("holder", scripted, model)
    async with open_engine(definition, tools=[held.tool], extensions=[Tracing(provider)]) as engine:
        session = await engine.create("holder")
        await engine.enqueue(session.id, "Hold on.")
        await asyncio.wait_for(held.started.wait(), 10)
        assert [span.name for span in exporter.get_finished_spans()] == [f"chat {model}"]
    return held, definition, session.id


async def test_a_turn_cut_off_by_the_engine_closing_ends_its_spans_saying_so(
    open_engine: OpenEngine, scripted: Scripted, exported: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    await _cut_off(open_engine, scripted, exported, "tracing-holds")
    _, exporter = exported

    spans = _by_name(exporter.get_finished_spans())
    assert sorted(spans) == ["chat tracing-holds", "execute_tool wait_for_it", "invoke_agent holder"]
    [turn], [tool] = spans["invoke_agent holder"], spans["execute_tool wait_for_it"]
    for span in (turn, tool):
        assert (span.status.status_code, span.status.description) == (StatusCode.ERROR, CUT_OFF)


async def test_a_turn_continued_after_a_restart_links_to_the_part_cut_off(
    open_engine: OpenEngine, scripted: Scripted, exported: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    # Each part is made by the engine that ran it, each its own trace; the second engine knows the first part's
    # span only from the store.
    provider, exporter = exported
    held, definition, session_id = await _cut_off(open_engine, scripted, exported, "tracing-continues")
    held.release.set()
    async with open_engine(definition, tools=[held.tool], extensions=[Tracing(provider)]) as engine:
        ended, timed_out = await engine.wait(session_id, 30)
        assert (ended.status, timed_out) == ("completed", False)
        starts = await engine.store.read_events(session_id, types=["turn.started"])

    cut_off, continued = _by_name(exporter.get_finished_spans())["invoke_agent holder"]
    assert [span.attributes and span.attributes["agentwatch.turn.trigger"] for span in (cut_off, continued)] == [
        "input",
        "continue",
    ]
    assert [(link.context.trace_id, link.context.span_id) for link in continued.links] == [
        (cut_off.context.trace_id, cut_off.context.span_id)
    ]
    assert [link.attributes for link in continued.links] == [{"agentwatch.link": "resumes"}]
    assert not cut_off.links
    stored = [event.payload.trace_context for event in starts if isinstance(event.payload, TurnStarted)]
    assert [context and context.rsplit("-", 1)[0] for context in stored] == [  # (less the trace flags)
        f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}" for span in (cut_off, continued)
    ]


async def test_the_spans_of_sessions_whose_drivers_were_let_go_are_not_kept(
    open_engine: OpenEngine, exported: tuple[TracerProvider, InMemorySpanExporter], monkeypatch: pytest.MonkeyPatch
) -> None:
    provider, exporter = exported
    monkeypatch.setattr(engines, "DRIVERS_KEPT", 3)
    tracing = Tracing(provider)
    model = ScriptedModel(function=lambda ctx: Reply("ok"))
    async with open_engine(role("chat", "scripted:chat"), models={"chat": model}, extensions=[tracing]) as engine:
        for _ in range(8):
            await engine.task("chat", "Hello.", timeout=10)
        gc.collect()
        assert 0 < len(tracing._sessions) <= 3  # one per driver the engine holds, not one per driver it ever made
    assert len(_by_name(exporter.get_finished_spans())["invoke_agent chat"]) == 8


async def test_tracing_is_off_unless_switched_on(open_engine: OpenEngine, scripted: Scripted, tmp_path: Path) -> None:
    notes = role("notes", scripted("tracing-off", ScriptedModel(function=_two_lookups)), tools=("lookup",))
    tracing = Tracing()
    async with open_engine(notes, tools=[lookup], extensions=[tracing]) as engine:
        await engine.task("notes", "Anything?", timeout=10)
        assert not tracing.on
    (tmp_path / "agentwatch.toml").write_text("[tracing]\nenabled = true\n")
    switched = Tracing()
    provider = TracerProvider()  # an SDK provider set for the process is the one the switch uses
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    from opentelemetry import trace

    previous = trace._TRACER_PROVIDER
    trace._TRACER_PROVIDER = provider  # (set_tracer_provider works once a process: a test cannot undo it)
    try:
        async with open_engine(notes, tools=[lookup], extensions=[switched]) as engine:
            assert switched.on
            await engine.task("notes", "Anything?", timeout=10)
    finally:
        trace._TRACER_PROVIDER = previous
        provider.shutdown()
    assert "invoke_agent notes" in _by_name(exporter.get_finished_spans())


def _engine_script(body: str) -> str:
    return textwrap.dedent(
        """\
        import asyncio, sys
        from agentwatch import AgentDefinition, Engine, Reply, ScriptedModel

        async def main():
            definition = AgentDefinition(name="quiet", model="scripted:quiet", instructions="Be brief.")
            models = {"quiet": ScriptedModel([Reply("ok")])}
            async with Engine.open(sys.argv[1], root=sys.argv[2], definitions=[definition], models=models) as engine:
                print((await engine.task("quiet", "Hi.", timeout=10))["status"])
        """
    ) + textwrap.dedent(body)


def _python(code: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTWATCH_", "OTEL_"))}
    return subprocess.run(
        [sys.executable, "-c", code, f"sqlite:///{tmp_path / 'agentwatch.db'}", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**environment, "PYTHONPATH": str(ROOT), **env},
        timeout=120,
        check=False,
    )


def test_an_engine_without_the_switch_loads_nothing_of_the_sdk(tmp_path: Path) -> None:
    code = _engine_script(
        """
        asyncio.run(main())
        print(sorted(name for name in sys.modules if name.startswith("opentelemetry.sdk")))
        """
    )
    done = _python(code, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["completed", "[]"]


def test_the_switch_without_the_sdk_installed_says_what_to_install(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """\
        import sys

        class NoSdk:
            def find_spec(self, name, path=None, target=None):
                if name.startswith("opentelemetry.sdk") or name.startswith("opentelemetry.exporter"):
                    raise ImportError(f"No module named {name!r}", name=name)
                return None

        sys.meta_path.insert(0, NoSdk())
        """
    ) + _engine_script(
        """
        from agentwatch.errors import UserError
        try:
            asyncio.run(main())
        except UserError as exc:
            print("refused:", exc)
        """
    )
    done = _python(code, tmp_path, AGENTWATCH_TRACING="1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("refused: tracing is on"), done.stdout
    assert "pip install 'agentwatch[tracing]'" in done.stdout


def test_the_switch_exports_the_spans_over_otlp_http(tmp_path: Path) -> None:
    collector = OtlpCollector()
    try:
        done = _python(
            _engine_script("asyncio.run(main())\n"),
            tmp_path,
            AGENTWATCH_TRACING="1",
            OTEL_EXPORTER_OTLP_ENDPOINT=collector.url,
            OTEL_SERVICE_NAME="notes-service",
        )
    finally:
        collector.close()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "completed"
    assert sorted(collector.spans) == [("notes-service", "chat quiet"), ("notes-service", "invoke_agent quiet")]


def test_a_collector_that_is_down_costs_the_closing_engine_one_warning_and_a_bounded_wait(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = _python(
        _engine_script("asyncio.run(main())\n"),
        tmp_path,
        AGENTWATCH_TRACING="1",
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
    )
    assert (done.returncode, done.stdout.strip()) == (0, "completed"), done.stderr
    # The wait for the last spans ended (the exporter retries for 10 s by default), said so once, and the
    # exporter's warning for each retry was not printed.
    assert done.stderr.count("is the trace collector up?") == 1, done.stderr
    assert "retrying" not in done.stderr, done.stderr


def test_observer_agents_tracing_and_notifications_are_default_extensions(tmp_path: Path) -> None:
    import agentwatch  # noqa: F401 (registers the defaults)
    from agentwatch.runtime.extensions import default_extensions

    kinds = [type(extension) for extension in default_extensions()]
    assert kinds == [ObserverAgents, Tracing, Notifications]
