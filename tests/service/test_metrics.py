"""`GET /metrics`: what the service's engine did, counted from its events, and what it holds now, scraped over a
real socket and read with Prometheus's own parser; behind the token as every other path."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentwatch.runtime import engine as engines
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.service import ServiceSettings, create_app
from agentwatch.store import SessionFilter
from tests.runtime.support import HeldTool, asking_child, until
from tests.service.support import role, served


def lookup(key: str) -> str:
    """Look a note up."""
    if key == "missing":
        raise KeyError("no such note")
    return f"note {key}: done"


def _two_lookups(ctx: Any) -> Any:
    if ctx.request_index < 2:
        return CallTool("lookup", {"key": "a" if ctx.request_index == 0 else "missing"})
    return Reply("One note is done, the other is missing.")


def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@asynccontextmanager
async def _scraping(open_engine: Any, *definitions: Any, **engine_args: Any) -> AsyncIterator[tuple[Any, Any]]:
    """An engine served on a real socket, and a function that scrapes its `/metrics` (every sample, once the answer
    was checked: 200, in the text format)."""
    async with (
        open_engine(*definitions, **engine_args) as engine,
        served(create_app(engine)) as base,
        httpx.AsyncClient(base_url=base) as http,
    ):

        async def scrape() -> Samples:
            scraped = await http.get("/metrics")
            assert scraped.status_code == 200, scraped.text
            assert scraped.headers["content-type"].startswith("text/plain")
            return _samples(scraped.text)

        yield engine, scrape


def _cleaner(scripted: Any, name: str, script: Any) -> Any:
    """A role whose `delete_file` calls wait for a person's approval."""
    model = scripted(name, ScriptedModel(function=script))
    return role("cleaner", model, tools=("delete_file",), approval_tools=("delete_file",))


def _samples(text: str) -> Samples:
    """Every sample by (name, sorted labels)."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_the_metrics_count_turns_requests_tokens_tool_calls_and_requests_to_a_person(
    open_engine: Any, scripted: Any
) -> None:
    notes_model = scripted("metrics-notes", ScriptedModel(function=_two_lookups))
    held = HeldTool("dig")
    definitions = (
        role("notes", notes_model, tools=("lookup",)),
        _cleaner(scripted, "metrics-cleaner", lambda ctx: CallTool("delete_file", {"path": "a"})),
        held.role("digger", scripted, "metrics-digger"),
    )
    async with _scraping(open_engine, *definitions, tools=[lookup, delete_file, held.tool]) as (engine, scrape):
        for _ in range(2):
            await engine.task("notes", "What do the notes say?", timeout=10)
        paused = await engine.task("cleaner", "Clean up.", timeout=10)
        digger = await engine.create("digger")
        await engine.enqueue(digger.id, "Dig.")
        await asyncio.wait_for(held.started.wait(), 10)
        samples = await scrape()
        held.release.set()
        await engine.wait(digger.id, 10)
        notes = (await engine.store.list_sessions(SessionFilter(role=["notes"]))).items

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    model = "scripted:metrics-notes"
    assert value("agentwatch_turns_total", role="notes", outcome="completed") == 2
    assert value("agentwatch_turns_total", role="cleaner", outcome="paused") == 1
    assert value("agentwatch_turn_seconds_count", role="notes") == 2
    assert value("agentwatch_model_requests_total", model=model, finish_reason="tool_call") == 4
    assert value("agentwatch_model_requests_total", model=model, finish_reason="stop") == 2
    assert value("agentwatch_model_request_seconds_count", model=model) == 6
    tokens_in = value("agentwatch_tokens_total", role="notes", model=model, kind="input")
    tokens_out = value("agentwatch_tokens_total", role="notes", model=model, kind="output")
    assert tokens_in + tokens_out == sum(s.tokens for s in notes) > 0
    assert value("agentwatch_tool_calls_total", tool="lookup", status="ok") == 2
    assert value("agentwatch_tool_calls_total", tool="lookup", status="error") == 2
    assert value("agentwatch_tool_call_seconds_count", tool="lookup") == 4
    assert value("agentwatch_person_requests_total", kind="approval") == 1
    assert paused["status"] == "awaiting_input"
    # What the service holds at the scrape: the digger's turn running, the sessions it loaded.
    assert value("agentwatch_turns_running") == 1
    assert value("agentwatch_sessions_loaded") >= 4
    assert value("agentwatch_draining") == 0
    assert ("agentwatch_turns_total", (("outcome", "completed"), ("role", "digger"))) not in samples


async def test_metrics_ask_for_a_token_and_a_read_only_one_will_do(open_engine: Any) -> None:
    settings = ServiceSettings(token="full", read_token="reads")
    async with (
        open_engine() as engine,
        served(create_app(engine, settings)) as base,
        httpx.AsyncClient(base_url=base) as http,
    ):
        without = await http.get("/metrics")
        read_only = await http.get("/metrics", headers={"Authorization": "Bearer reads"})
    assert without.status_code == 401
    assert read_only.status_code == 200 and "agentwatch_turns_running 0.0" in read_only.text


def _made_up_tools(ctx: Any) -> Any:
    if ctx.request_index < 3:
        return CallTool(f"{ctx.prompt}_{ctx.request_index}", {})
    return Reply("Done.")


async def test_a_tool_the_engine_does_not_have_is_counted_as_other_not_as_a_series_of_its_own(
    open_engine: Any, scripted: Any
) -> None:
    model = scripted("metrics-made-up", ScriptedModel(function=_made_up_tools))
    async with _scraping(open_engine, role("dreamer", model, tools=("lookup",)), tools=[lookup]) as (engine, scrape):
        for prompt in ("fetch", "summon"):
            await engine.task("dreamer", prompt, timeout=10)
        samples = await scrape()

    # A model's made-up names (or ones a prompt put in its mouth) would each make series of their own.
    tools = {dict(labels)["tool"] for name, labels in samples if name == "agentwatch_tool_calls_total"}
    assert tools == {"other"}
    assert samples[("agentwatch_tool_calls_total", (("status", "error"), ("tool", "other")))] == 6


def _asks(ctx: Any) -> Any:
    if not ctx.tool_results:
        return CallTool("ask_user", {"question": "Which branch?", "options": ["main", "dev"]})
    return Reply("Done.")


async def test_a_request_held_for_the_parent_counts_as_a_request_to_a_person_once_a_person_has_it(
    open_engine: Any, scripted: Any
) -> None:
    busy = HeldTool("busy")
    kid_role = role("kid", scripted("metrics-kid", ScriptedModel(function=_asks)), tools=("ask_user",))
    lead_role = busy.role("lead", scripted, "metrics-lead")
    async with _scraping(open_engine, kid_role, lead_role, tools=[busy.tool]) as (engine, scrape):
        kid = await asking_child(engine, busy)
        held = await scrape()
        await engine.escalate(str((await engine.snapshot(kid))["pendingHitl"]["hitlId"]))  # type: ignore[index]
        escalated = await scrape()
        busy.release.set()

    person_requests = "agentwatch_person_requests_total"
    assert not [name for name, _ in held if name == person_requests]  # its parent is asked first
    assert escalated[(person_requests, (("kind", "choice"),))] == 1


async def test_a_paused_turn_stopped_after_its_session_was_let_go_counts_under_its_role(
    open_engine: Any, scripted: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engines, "MAINTENANCE_SECONDS", 0.05)
    monkeypatch.setattr(engines, "DRIVER_IDLE_SECONDS", 0.2)
    cleaner = _cleaner(scripted, "metrics-let-go", lambda ctx: CallTool("delete_file", {"path": "a"}))
    async with _scraping(open_engine, cleaner, tools=[delete_file]) as (engine, scrape):
        paused = await engine.task("cleaner", "Clean up.", timeout=10)
        agent_id = str(paused["agentId"])
        await until(lambda: agent_id not in engine._drivers)  # idle (waiting on a person): its driver went
        await engine.stop(agent_id)  # (a new driver, and a new meter, that saw none of the turn)

        cancelled = ("agentwatch_turns_total", (("outcome", "cancelled"), ("role", "cleaner")))
        for _ in range(100):
            if cancelled in await scrape():
                break
            await asyncio.sleep(0.02)
        samples = await scrape()

    turns = {labels: value for (name, labels), value in samples.items() if name == "agentwatch_turns_total"}
    assert turns == {
        (("outcome", "paused"), ("role", "cleaner")): 1,
        (("outcome", "cancelled"), ("role", "cleaner")): 1,
    }


async def test_a_call_a_person_approved_is_timed_from_the_turn_the_approval_resumed(
    open_engine: Any, scripted: Any
) -> None:
    def deleting(ctx: Any) -> Any:
        return Reply(ctx.tool_results[0].output) if ctx.tool_results else CallTool("delete_file", {"path": "a"})

    async with _scraping(open_engine, _cleaner(scripted, "metrics-approved", deleting), tools=[delete_file]) as (
        engine,
        scrape,
    ):
        paused = await engine.task("cleaner", "Clean up.", timeout=10)
        await engine.answer(str(paused["pendingHitl"]["hitlId"]), True)  # type: ignore[index]
        await engine.wait(str(paused["agentId"]), 10)
        samples = await scrape()

    assert samples[("agentwatch_tool_calls_total", (("status", "ok"), ("tool", "delete_file")))] == 1
    assert samples[("agentwatch_tool_call_seconds_count", (("tool", "delete_file"),))] == 1
