"""The dashboard in a real browser (Chromium, driven by Playwright) against a real service on a socket: the
page lists the agents, watches one live, and acts through the service's API as a person would."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from agentwatch.events import NewEvent, ToolResult, Usage, UserMessage
from agentwatch.runtime.heartbeats import Heartbeat, Tick, tick
from agentwatch.runtime.models import CallTool, Hang, Reply, ScriptedModel
from agentwatch.runtime.roster import RoleSessions
from agentwatch.service import ServiceSettings, create_app
from agentwatch.store import (
    RequestDraft,
    RunDraft,
    RunPatch,
    SessionDraft,
    SessionFilter,
    SessionPatch,
    SpanDraft,
    UsageEntry,
    Write,
)
from tests.conftest import IN_CI
from tests.runtime.support import HeldTool
from tests.service.support import role, served
from tests.watchers.support import reporting

playwright_api = pytest.importorskip("playwright.async_api")
expect = playwright_api.expect
TOKEN = "dashboard-test-token"
WAIT_MS = 10_000


def _chromium() -> str:
    found = os.environ.get("AGENTWATCH_TEST_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    message = "the dashboard's browser tests need Chromium (apt-get install chromium, or set AGENTWATCH_TEST_CHROMIUM)"
    if IN_CI:
        pytest.fail(f"CI=true and {message}", pytrace=False)
    pytest.skip(message)


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    executable = _chromium()
    async with playwright_api.async_playwright() as driver:
        launched = await driver.chromium.launch(
            executable_path=executable,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
        )
        try:
            yield launched
        finally:
            await launched.close()


async def _active_in_its_pane(page: Any, row: Any, width: int) -> None:
    """The list row's last column ("active") ends inside the list's pane, at this viewport `width`."""
    active = await row.locator("td").last.bounding_box()
    pane = await page.locator("#agents-pane").bounding_box()
    assert active is not None and pane is not None
    assert active["x"] + active["width"] <= pane["x"] + pane["width"], (width, active, pane)


async def _reported(engine: Any, session_id: str) -> dict[str, Any]:
    """The agent's `observer` once its observer reported (it reads the turn's digest first)."""
    for _ in range(500):
        described = (await engine.call_tool("agent_get", {"id": session_id})).get("observer") or {}
        if described.get("reports"):
            break
        await asyncio.sleep(0.02)
    return described


async def _agents_and_runs(engine: Any, *, agents: int, runs: int) -> None:
    """`agents` agents of role helper named `agent-NN` (as many digits as the last number has, oldest first), and
    `runs` runs named `report-NN`."""
    digits = len(str(agents - 1))
    for n in range(agents):
        await engine.create("helper", name=f"agent-{n:0{digits}d}")
    for n in range(runs):
        async with engine.run(f"report-{n:02d}"):
            pass


async def _page(browser: Any, url: str) -> tuple[Any, list[str]]:
    """A new page at `url`, and the list its script errors land in (a test ends by asserting it is empty)."""
    page = await browser.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    page.on("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))  # the Stop button's confirm()
    await page.goto(url)
    return page, problems


def _cleaner(ran: list[str]) -> tuple[Any, Any]:
    """A `delete_file` tool that needs approval, and a script that calls it on the prompt, then says so."""

    def delete_file(path: str) -> str:
        ran.append(path)
        return f"deleted {path}"

    def script(ctx: Any) -> Any:
        if not ctx.tool_results:
            return CallTool("delete_file", {"path": ctx.prompt})
        return Reply(f"Done: {ctx.tool_results[0].output}")

    return delete_file, script


def _cleaner_role(scripted: Any, model_name: str, ran: list[str]) -> tuple[Any, Any]:
    """The `cleaner` role, whose `delete_file` calls (recorded in `ran`) wait for a person's approval, on a
    scripted model of its own; and the tool."""
    delete_file, script = _cleaner(ran)
    model = scripted(model_name, ScriptedModel(function=script))
    return role("cleaner", model, tools=("delete_file",), approval_tools=("delete_file",)), delete_file


async def test_a_person_sees_what_waits_on_them_and_answers_it_from_the_page(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    ran: list[str] = []
    cleaner, delete_file = _cleaner_role(scripted, "dashboard-cleaner", ran)
    async with (
        open_engine(cleaner, tools=[delete_file]) as engine,
        served(create_app(engine, ServiceSettings(token=TOKEN))) as base,
    ):
        paused = await engine.task("cleaner", "a.txt", timeout=10)
        agent_id = paused["agentId"]
        page, problems = await _page(browser, f"{base}/#token={TOKEN}")
        assert "#token" not in page.url  # taken off the address bar, kept in the tab

        row = page.locator(f'#agents tr[data-id="{agent_id}"]')
        await expect(row).to_contain_text("needs you", timeout=WAIT_MS)
        await expect(row).to_contain_text("approve delete_file(path='a.txt')")
        await expect(page.locator('#words [data-word="needs_you"]')).to_have_text("needs you 1")

        await row.click()
        needs = page.locator("#needs")
        await expect(needs).to_contain_text("Needs you: approve delete_file(path='a.txt')", timeout=WAIT_MS)
        await expect(page.locator("#log")).to_contain_text("delete_file")
        await needs.get_by_role("button", name="Approve").click()

        log = page.locator("#log")
        await expect(log).to_contain_text("Done: deleted a.txt", timeout=WAIT_MS)
        await expect(page.locator("#d-word")).to_have_text("done", timeout=WAIT_MS)
        await expect(needs).to_be_hidden()
        assert ran == ["a.txt"]

        # A message for its next turn, from the page: the turn asks again, and is denied with a note.
        await page.locator("#send textarea").fill("b.txt")
        await page.locator("#send button").click()
        await expect(needs).to_contain_text("approve delete_file(path='b.txt')", timeout=WAIT_MS)
        await needs.get_by_role("textbox").fill("keep b")
        await needs.get_by_role("button", name="Deny").click()
        await expect(log).to_contain_text("denied: keep b", timeout=WAIT_MS)  # (once: {"approved":false,...})
        await expect(page.locator("#d-word")).to_have_text("done", timeout=WAIT_MS)
        results = [e.payload for e in await engine.store.read_events(agent_id, limit=1000)]
        denied = [(r.status, r.output) for r in results if isinstance(r, ToolResult) and r.status == "denied"]
        assert ran == ["a.txt"] and denied == [("denied", "keep b")]
        assert problems == []


async def test_the_page_asks_for_the_token_and_shows_nothing_without_it(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    model = scripted("dashboard-helper", ScriptedModel.replying("All done."))
    async with (
        open_engine(role("helper", model)) as engine,
        served(create_app(engine, ServiceSettings(token=TOKEN))) as base,
        httpx.AsyncClient(base_url=base) as http,
    ):
        done = await engine.task("helper", "go", timeout=10)
        page_response = await http.get("/")
        assert page_response.status_code == 200 and "text/html" in page_response.headers["content-type"]
        assert "frame-ancestors 'none'" in page_response.headers["content-security-policy"]
        assert (await http.post("/api/tools/agent_list", json={})).status_code == 401  # the data still needs it
        assert (await http.get("/dashboard/missing.js")).json()["error"]["code"] == "not_found"

        page = await browser.new_page()
        await page.goto(base)
        login = page.locator("#login")
        await expect(login).to_be_visible(timeout=WAIT_MS)
        await expect(page.locator("#agents tbody tr")).to_have_count(0)
        await expect(login).to_contain_text("AGENTWATCH_READ_TOKEN")  # (it works there too: the page then watches)
        await login.locator("input").fill(TOKEN)
        await login.get_by_role("button", name="Connect").click()
        await expect(page.locator(f'#agents tr[data-id="{done["agentId"]}"]')).to_contain_text("done", timeout=WAIT_MS)


async def test_a_person_starts_an_agent_watches_it_work_and_stops_it(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    held = HeldTool("wait_for_release")
    waiter = held.role("waiter", scripted, "dashboard-waiter")
    async with (
        open_engine(waiter, tools=[held.tool]) as engine,
        served(create_app(engine)) as base,  # no token: a loopback service
    ):
        page, problems = await _page(browser, base)
        await expect(page.locator("#agents-empty")).to_contain_text("No agents yet", timeout=WAIT_MS)
        await page.locator("#new-agent summary").click()
        # The roles the engine runs, before any agent of them exists (once: only those of the agents listed).
        await expect(page.locator("#roles option")).to_have_count(1, timeout=WAIT_MS)
        assert await page.locator("#roles option").get_attribute("value") == "waiter"
        await page.locator('#create input[name="role"]').fill("waiter")
        await page.locator('#create textarea[name="prompt"]').fill("wait, then finish")
        await page.locator("#create button").click()

        await expect(page.locator("#d-word")).to_have_text("working", timeout=WAIT_MS)
        await expect(page.locator("#log")).to_contain_text("wait_for_release", timeout=WAIT_MS)
        (session,) = (await engine.store.list_sessions(SessionFilter())).items
        await page.locator("#stop").click()  # (its confirm() is accepted)
        await expect(page.locator("#d-word")).to_have_text("stopped", timeout=WAIT_MS)
        await expect(page.locator("#log")).to_contain_text("turn cancelled", timeout=WAIT_MS)
        assert (await engine.store.get_session(session.id)).status == "cancelled"
        assert problems == []

        # A role that does not exist: the service's own message, on the page.
        await page.locator("#new-agent summary").click()
        await page.locator('#create input[name="role"]').fill("nobody")
        await page.locator('#create textarea[name="prompt"]').fill("anything")
        await page.locator("#create button").click()
        await expect(page.locator("#toast")).to_contain_text("nobody", timeout=WAIT_MS)
        assert [p for p in problems if "404" not in p] == []  # (the browser logs the refused call's status)


async def test_each_chip_counts_the_agents_its_filter_lists(open_engine: Any, scripted: Any, browser: Any) -> None:
    """Once the chips counted lineages (`agent_summary`'s words): three ticks of one heartbeat counted once."""
    model = scripted("dashboard-chips", ScriptedModel.replying("ok"))
    async with open_engine(role("helper", model)) as engine, served(create_app(engine)) as base:
        await engine.task("helper", "go", timeout=10)
        for tick in range(3):
            await engine.store.create_session(SessionDraft(name=f"tick-{tick}", role="helper", group_key="hb:tick"))
        page, problems = await _page(browser, base)
        chips = page.locator("#words button")
        counted = ["all 4", "needs you 0", "working 0", "stuck 0", "failed 0", "idle 3", "done 1"]
        await expect(chips).to_have_text(counted, timeout=WAIT_MS)
        await page.locator('#words [data-word="idle"]').click()
        await expect(page.locator("#agents tbody tr")).to_have_count(3, timeout=WAIT_MS)
        await expect(chips).to_have_text(counted)  # (the other words still counted while the list shows one)
        await page.locator("#q").fill("tick-1")
        await expect(page.locator("#agents tbody tr")).to_have_count(1, timeout=WAIT_MS)
        named = ["all 1", "needs you 0", "working 0", "stuck 0", "failed 0", "idle 1", "done 0"]
        await expect(chips).to_have_text(named)  # (the name filter counted too)
        assert problems == []


async def test_a_second_click_while_the_first_is_in_flight_acts_once(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    """Once a double click acted twice: Start made two agents, Send sent the message twice, and Approve showed
    an error (the request was already resolved) after it had approved."""
    ran: list[str] = []
    cleaner, delete_file = _cleaner_role(scripted, "dashboard-twice", ran)
    async with open_engine(cleaner, tools=[delete_file]) as engine, served(create_app(engine)) as base:
        page, problems = await _page(browser, base)
        acts: list[str] = []
        page.on("request", lambda request: acts.append(request.url.rsplit("/", 1)[-1]))
        await page.locator("#new-agent summary").click()
        await page.locator('#create input[name="role"]').fill("cleaner")
        await page.locator('#create textarea[name="prompt"]').fill("a.txt")
        await page.locator("#create button").dblclick()
        needs = page.locator("#needs")
        await needs.get_by_role("button", name="Approve").dblclick(timeout=WAIT_MS)
        await expect(page.locator("#log")).to_contain_text("Done: deleted a.txt", timeout=WAIT_MS)
        await page.locator("#send textarea").fill("b.txt")
        await page.locator("#send button").dblclick()
        await expect(needs).to_contain_text("approve delete_file(path='b.txt')", timeout=WAIT_MS)
        await expect(page.locator("#send textarea")).to_have_value("")
        assert [a for a in acts if a in ("agent_create", "agent_answer", "agent_enqueue")] == [
            "agent_create", "agent_answer", "agent_enqueue",
        ]  # fmt: skip
        assert len((await engine.store.list_sessions(SessionFilter())).items) == 1 and ran == ["a.txt"]
        assert await page.locator("#toast").is_hidden() and problems == []


async def test_stop_on_an_agent_that_just_ended_says_there_was_nothing_to_stop(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    """Once Stop on an agent whose turn ended while the page still showed it working (here: stopped from
    elsewhere just before) said nothing at all."""
    held = HeldTool("wait_for_release")
    async with (
        open_engine(held.role("waiter", scripted, "dashboard-ended"), tools=[held.tool]) as engine,
        served(create_app(engine)) as base,
    ):
        session = await engine.create("waiter")
        await engine.enqueue(session.id, "wait")
        page, problems = await _page(browser, f"{base}/#agent={session.id}")
        await expect(page.locator("#d-word")).to_have_text("working", timeout=WAIT_MS)

        async def ends_first(route: Any) -> None:
            assert await engine.stop(session.id, by="ada")
            await route.continue_()

        await page.route("**/api/tools/agent_stop", ends_first)
        await page.locator("#stop").click()  # (its confirm() is accepted)
        await expect(page.locator("#toast")).to_have_text("Nothing to stop: it had already ended.", timeout=WAIT_MS)
        await expect(page.locator("#d-word")).to_have_text("stopped")
        assert (await engine.store.get_session(session.id)).status == "cancelled" and problems == []


async def test_a_failed_agent_shows_its_record_and_switching_fast_shows_the_agent_picked(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    """Once: a failed agent's own `error` field was taken for a refused call (a blank header and an empty
    error box); and picking another agent while the first one's log was loading left the second log empty."""
    broken = role("broken", scripted("dashboard-broken", ScriptedModel(function=lambda ctx: 1 / 0)))
    chatty = role(
        "chatty", scripted("dashboard-chatty", ScriptedModel(function=lambda ctx: Reply(f"echo {ctx.prompt}")))
    )
    async with open_engine(broken, chatty) as engine, served(create_app(engine)) as base:
        failed = await engine.task("broken", "anything", timeout=10)
        first = await engine.task("chatty", "first words", timeout=10)
        second = await engine.task("chatty", "second words", timeout=10)
        page, problems = await _page(browser, base)

        spent = Usage(input_tokens=1000, output_tokens=200, requests=1, cost_usd=0.0123)
        await engine.store.write(Write(str(failed["agentId"]), usage=[UsageEntry(role="broken", usage=spent)]))
        await page.locator(f'#agents tr[data-id="{failed["agentId"]}"]').click()
        await expect(page.locator("#d-word")).to_have_text("failed", timeout=WAIT_MS)
        await expect(page.locator("#d-meta")).to_contain_text("1200 tokens · $0.0123")  # what it spent, too
        await expect(page.locator("#d-name")).not_to_be_empty()
        await expect(page.locator("#log")).to_contain_text("turn failed")
        await expect(page.locator("#d-problem")).to_contain_text("ZeroDivisionError")  # why, in its header
        assert await page.locator("#toast").is_hidden()

        async def slow(route: Any) -> None:
            await asyncio.sleep(0.4)
            await route.continue_()

        await page.route("**/api/tools/agent_tail", slow)  # a slow network
        await page.locator(f'#agents tr[data-id="{first["agentId"]}"]').click()
        await page.locator(f'#agents tr[data-id="{second["agentId"]}"]').click()
        await expect(page.locator("#log")).to_contain_text("echo second words", timeout=WAIT_MS)
        await expect(page.locator("#log")).not_to_contain_text("first words")
        assert await page.locator("#d-problem").is_hidden()  # nothing wrong with this one
        assert problems == []


async def test_keyboard_focus_survives_the_refresh_and_nothing_shows_before_a_pick(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    model = scripted("dashboard-focus", ScriptedModel.replying("ok"))
    async with open_engine(role("helper", model)) as engine, served(create_app(engine)) as base:
        done = await engine.task("helper", "go", timeout=10)
        for _ in range(101):
            await engine.create("helper")
        page, problems = await _page(browser, base)
        await expect(page.locator("#agents-empty")).to_contain_text("100 most recently active of 102", timeout=WAIT_MS)
        assert await page.locator("#detail").is_hidden() and await page.locator("#pick").is_visible()

        row = page.locator("#agents tbody tr").first
        await row.focus()
        await page.wait_for_timeout(2500)  # past the list's refresh
        assert await page.evaluate("document.activeElement.dataset.id") == await row.get_attribute("data-id")
        await page.locator("#q").fill(done["name"])
        await expect(page.locator("#agents tbody tr")).to_have_count(1, timeout=WAIT_MS)
        await page.keyboard.press("Tab")  # from the filter to the one row
        await page.keyboard.press("Enter")
        await expect(page.locator("#d-name")).to_have_text(done["name"], timeout=WAIT_MS)
        assert problems == []


async def test_the_keyboard_goes_to_what_waits_and_stays_in_the_detail_after_an_answer(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    """Once Enter on a row left the focus on the row (Approve was 67 Tabs away), and after Approve the focus fell
    to the page's body with the box it was in."""
    ran: list[str] = []
    cleaner, delete_file = _cleaner_role(scripted, "dashboard-keyboard", ran)
    async with open_engine(cleaner, tools=[delete_file]) as engine, served(create_app(engine)) as base:
        paused = await engine.task("cleaner", "a.txt", timeout=10)
        page, problems = await _page(browser, base)
        await page.keyboard.press("Tab")
        await expect(page.locator("#skip")).to_be_focused()
        await page.keyboard.press("Enter")  # nothing picked yet: to the list's filter
        await expect(page.locator("#q")).to_be_focused()
        await page.locator(f'#agents tr[data-id="{paused["agentId"]}"]').focus()
        await page.keyboard.press("Enter")
        await expect(page.locator("#needs").get_by_role("textbox", name="Note")).to_be_focused(timeout=WAIT_MS)
        await page.keyboard.press("Tab")
        await expect(page.locator("#needs").get_by_role("button", name="Approve")).to_be_focused()
        await page.keyboard.press("Enter")
        await expect(page.locator("#needs")).to_be_hidden(timeout=WAIT_MS)
        await expect(page.locator("#d-name")).to_be_focused()
        await engine.wait(paused["agentId"], 10)  # (the approved call runs in the agent's turn, after the answer)
        assert ran == ["a.txt"]
        await page.locator("#q").focus()
        await page.locator("#skip").focus()  # (it shows once focused)
        await page.keyboard.press("Enter")
        await expect(page.locator("#d-name")).to_be_focused()
        assert problems == []


async def test_a_read_only_token_watches_and_a_refused_token_is_said_so(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    ran: list[str] = []
    cleaner, delete_file = _cleaner_role(scripted, "dashboard-read-only", ran)
    settings = ServiceSettings(token=TOKEN, read_token="read-only-token")
    async with open_engine(cleaner, tools=[delete_file]) as engine, served(create_app(engine, settings)) as base:
        paused = await engine.task("cleaner", "a.txt", timeout=10)
        page, problems = await _page(browser, f"{base}/#token=read-only-token")
        await expect(page.locator("#mode")).to_have_text("read-only", timeout=WAIT_MS)
        await page.locator(f'#agents tr[data-id="{paused["agentId"]}"]').click()
        needs = page.locator("#needs")
        await expect(needs).to_contain_text("only reads", timeout=WAIT_MS)
        await expect(needs.get_by_role("button", name="Approve")).to_be_hidden()
        await expect(page.locator("#send")).to_be_hidden()
        await expect(page.locator("#stop")).to_be_hidden()
        assert problems == []

        refused = await browser.new_page()
        await refused.goto(f"{base}/#token=not-the-token")
        await expect(refused.locator("#login-error")).to_be_visible(timeout=WAIT_MS)
        assert ran == []


async def test_the_runs_view_shows_a_runs_trace_and_opens_its_agents(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    calls = [0]

    def flaky(ctx: Any) -> Any:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("the provider is down")
        return Reply(f"sources on {ctx.prompt}")

    researcher = role("researcher", scripted("dashboard-runs", ScriptedModel(function=flaky)))
    async with open_engine(researcher) as engine, served(create_app(engine)) as base:
        for topic in ("tides", "moons"):
            async with engine.run("report", input={"topic": topic}) as run, run.span("Research") as research:
                found = await research.task("researcher", topic, attempts=2, backoff_seconds=0)
        page, problems = await _page(browser, base)
        await page.get_by_role("button", name="Runs").click()
        row = page.locator(f'#runs tr[data-id="{run.id}"]')
        await expect(row).to_contain_text("workflow:report", timeout=WAIT_MS)
        await expect(row).to_contain_text("completed")
        await row.click()
        spans = page.locator("#spans")
        await expect(spans).to_contain_text("phaseResearch", timeout=WAIT_MS)
        await expect(page.locator("#r-compare")).to_contain_text('topic: "tides" → "moons"', timeout=WAIT_MS)
        await spans.locator("li[data-kind=task]").get_by_text("open agent").last.click()
        await expect(page.locator("#agents-view")).to_be_visible()
        await expect(page.locator("#d-name")).to_have_text(found["name"], timeout=WAIT_MS)
        await page.locator("#d-meta a").click()  # and back to its run
        await expect(page.locator("#r-name")).to_have_text("workflow:report", timeout=WAIT_MS)
        await expect(page.locator(f'#runs tr[data-id="{run.id}"]')).to_have_attribute("aria-current", "true")
        assert problems == []


async def test_a_run_whose_reason_is_a_code_says_what_went_wrong(open_engine: Any, scripted: Any, browser: Any) -> None:
    async def broken(due: Tick) -> bool:
        raise ConnectionError("the mail server is down")

    digester = role("digester", scripted("dashboard-gate", ScriptedModel.replying("digest")))
    async with open_engine(digester) as engine, served(create_app(engine)) as base:
        run_id = await tick(engine, Heartbeat("mail", "digester", every=60, prompt="x", gate=broken), 3)
        page, problems = await _page(browser, base)
        await page.get_by_role("button", name="Runs").click()
        said = "gate_error: ConnectionError: the mail server is down"
        row = page.locator(f'#runs tr[data-id="{run_id}"]')
        await expect(row).to_contain_text(said, timeout=WAIT_MS)
        await row.click()
        await expect(page.locator("#r-meta")).to_contain_text(said, timeout=WAIT_MS)
        assert problems == []


async def test_a_run_still_going_says_how_long_it_has_run(open_engine: Any, scripted: Any, browser: Any) -> None:
    async with open_engine() as engine, served(create_app(engine)) as base:
        done = await engine.store.create_run(RunDraft(kind="workflow", entity="workflow:report"))
        await engine.store.end_run(done.id, RunPatch(status="completed", ended_at=datetime.now(UTC)))
        run = await engine.store.create_run(RunDraft(kind="workflow", entity="workflow:report"))
        await engine.store.open_span(SpanDraft(run_id=run.id, kind="phase", label="Research"))
        page, problems = await _page(browser, base)
        await page.get_by_role("button", name="Runs").click()
        row = page.locator(f'#runs tr[data-id="{run.id}"]')
        await expect(row).to_contain_text(" s so far", timeout=WAIT_MS)
        await row.click()
        await expect(page.locator("#r-meta")).to_contain_text(" s so far", timeout=WAIT_MS)
        await expect(page.locator("#spans")).to_contain_text(" s so far", timeout=WAIT_MS)
        # Compared with the run before it, its figures are said to be so far (not only a status delta).
        await expect(page.locator("#r-compare")).to_contain_text(
            "this run is still running: its figures are so far", timeout=WAIT_MS
        )
        assert problems == []


async def test_the_address_says_what_is_open_and_opens_it_again(open_engine: Any, scripted: Any, browser: Any) -> None:
    """Once the address stayed bare: a reload lost the agent picked, its links (`href="#"`) opened in a new tab
    showed nothing picked, and a deleted agent (readable by its id) could not be reached from the page."""
    model = scripted("dashboard-address", ScriptedModel.replying("ok"))
    async with (
        open_engine(role("helper", model)) as engine,
        served(create_app(engine, ServiceSettings(token=TOKEN))) as base,
    ):
        async with engine.run("report") as run, run.span("Work") as work:
            found = await work.task("helper", "go")
        gone = await engine.create("helper", name="gone")
        await engine.delete(gone.id, by="ada")
        page, problems = await _page(browser, f"{base}/#token={TOKEN}&agent={found['agentId']}")
        await expect(page.locator("#d-name")).to_have_text(found["name"], timeout=WAIT_MS)
        assert page.url == f"{base}/#agent={found['agentId']}"  # the token taken off the address, the agent kept
        run_link = page.locator("#d-meta a")
        await expect(run_link).to_have_attribute("href", f"#run={run.id}")
        await run_link.click()
        await expect(page.locator("#r-name")).to_have_text("workflow:report", timeout=WAIT_MS)
        assert page.url == f"{base}/#run={run.id}"
        open_agent = page.locator("#spans").get_by_role("link", name="open agent")
        await expect(open_agent).to_have_attribute("href", f"#agent={found['agentId']}")
        await page.reload()
        await expect(page.locator("#r-name")).to_have_text("workflow:report", timeout=WAIT_MS)
        await page.go_back()  # to the agent the run was opened from
        await expect(page.locator("#d-name")).to_have_text(found["name"], timeout=WAIT_MS)
        row = page.locator(f'#agents tr[data-id="{found["agentId"]}"]')
        await expect(row).to_have_attribute("aria-current", "true")

        bookmark, its_problems = await _page(browser, f"{base}/#token={TOKEN}&agent={gone.id}")
        await expect(bookmark.locator("#d-meta")).to_contain_text("deleted, readable until", timeout=WAIT_MS)
        await bookmark.locator(f'#agents tr[data-id="{found["agentId"]}"]').click()
        await expect(bookmark.locator("#d-name")).to_have_text(found["name"], timeout=WAIT_MS)
        assert bookmark.url == f"{base}/#agent={found['agentId']}"
        await bookmark.evaluate(f"location.hash = 'run={run.id}'")  # an address edited by hand
        await expect(bookmark.locator("#r-name")).to_have_text("workflow:report", timeout=WAIT_MS)
        assert problems == [] and its_problems == []


async def test_a_person_deletes_an_agent_from_the_page(open_engine: Any, scripted: Any, browser: Any) -> None:
    """Once the page could not delete an agent: a person had to go to the command line for it. Once, too, a deleted
    agent's input was said to wait in its inbox: it takes no input, and no turn will read it."""
    model = scripted("dashboard-delete", ScriptedModel.replying("ok"))
    async with open_engine(role("helper", model)) as engine, served(create_app(engine)) as base:
        done = await engine.task("helper", "go", timeout=10)
        await engine.call_tool("agent_take_over", {"id": done["agentId"], "by": "ada"})
        await engine.enqueue(str(done["agentId"]), "and again")  # (it waits while ada holds the agent)
        page, problems = await _page(browser, f"{base}/#agent={done['agentId']}")
        await expect(page.locator("#d-name")).to_have_text(str(done["name"]), timeout=WAIT_MS)
        await expect(page.locator("#d-meta")).to_contain_text("1 input waiting in its inbox")
        await page.locator("#delete").click()  # (its confirm() is accepted)
        await expect(page.locator("#d-meta")).to_contain_text("deleted, readable until", timeout=WAIT_MS)
        await expect(page.locator("#d-meta")).to_contain_text("1 input left unread")
        await expect(page.locator("#d-meta")).not_to_contain_text("waiting")
        await expect(page.locator("#delete")).to_be_disabled()
        await expect(page.locator(f'#agents tr[data-id="{done["agentId"]}"]')).to_have_count(0, timeout=WAIT_MS)
        session = await engine.store.get_session(str(done["agentId"]))
        assert session.deleted_at is not None and problems == []


async def test_back_to_where_no_agent_was_open_closes_the_agent(open_engine: Any, scripted: Any, browser: Any) -> None:
    """Once Back to the bare address kept the last agent shown (and its live stream open)."""
    model = scripted("dashboard-back", ScriptedModel.replying("ok"))
    async with open_engine(role("helper", model)) as engine, served(create_app(engine)) as base:
        done = await engine.task("helper", "go", timeout=10)
        page, problems = await _page(browser, base)
        await page.locator(f'#agents tr[data-id="{done["agentId"]}"]').click()
        await expect(page.locator("#d-name")).to_have_text(str(done["name"]), timeout=WAIT_MS)
        await page.go_back()
        await expect(page.locator("#pick")).to_be_visible(timeout=WAIT_MS)
        await expect(page.locator("#detail")).to_be_hidden()
        await expect(page.locator(f'#agents tr[data-id="{done["agentId"]}"]')).not_to_have_attribute(
            "aria-current", "true"
        )
        await page.go_forward()
        await expect(page.locator("#d-name")).to_have_text(str(done["name"]), timeout=WAIT_MS)
        assert problems == []


async def test_earlier_events_are_read_back_page_by_page_and_the_filter_finds_display_names(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    model = scripted("dashboard-long", ScriptedModel.replying("ok"))
    async with open_engine(role("helper", model)) as engine, served(create_app(engine)) as base:
        session = await engine.create("helper", display_name="Night Shift")
        await engine.create("helper", display_name="Day Shift")
        await engine.store.append(session.id, [NewEvent(UserMessage(text=f"note {i}")) for i in range(450)])
        page, problems = await _page(browser, base)
        await page.locator("#q").fill("night")
        rows = page.locator("#agents tbody tr")
        await expect(rows).to_have_count(1, timeout=WAIT_MS)
        await rows.first.click()

        log, earlier = page.locator("#log li"), page.locator("#earlier")
        await expect(log).to_have_count(200, timeout=WAIT_MS)
        await expect(log.first).to_contain_text("note 250")
        await earlier.click()
        await expect(log).to_have_count(400, timeout=WAIT_MS)
        await expect(log.first).to_contain_text("note 50")
        await expect(earlier).to_be_visible()
        await earlier.click()
        await expect(log).to_have_count(450, timeout=WAIT_MS)
        await expect(log.first).to_contain_text("note 0")
        await expect(log.last).to_contain_text("note 449")
        await expect(earlier).to_be_hidden()
        assert problems == []


async def test_what_streams_survives_other_events_and_a_deleted_agent_says_so(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    """Once: any other event mid-stream (a take-over) wiped the "writing…" line, and a deleted agent's page
    still offered Take over and Send, with nothing to say it was deleted."""
    # The first response streams for 6 s: the take-over's checks below must be done before it ends, on a loaded
    # host too (with 3 s, they were not always).
    words, then = " ".join(f"w{n}" for n in range(120)), " ".join(f"v{n}" for n in range(30))

    def note(text: str) -> str:
        """Keep a note."""
        return text

    steps = [[Reply(words), CallTool("note", {"text": "x"})], Reply(then)]  # two responses, a tool between
    model = scripted("dashboard-streamer", ScriptedModel(steps, chunk_delay=0.05))
    async with (
        open_engine(role("streamer", model, tools=("note",)), tools=[note]) as engine,
        served(create_app(engine)) as base,
    ):
        session = await engine.create("streamer", name="streamer")
        page, problems = await _page(browser, base)
        await page.locator(f'#agents tr[data-id="{session.id}"]').click()
        await expect(page.locator("#d-name")).to_have_text("streamer", timeout=WAIT_MS)
        await engine.enqueue(session.id, "go")
        typing, stored = page.locator("#log .typing"), page.locator("#log li:not(.typing)")
        await expect(typing).to_contain_text("w3", timeout=WAIT_MS)
        await expect(typing).to_have_attribute("aria-hidden", "true")  # (not read out piece by piece)
        await engine.call_tool("agent_take_over", {"id": session.id, "by": "ada"})  # an event mid-stream
        await expect(page.locator("#take")).to_have_text("Hand back (held by ada)", timeout=WAIT_MS)
        await expect(page.locator("#log")).to_contain_text("ada took this session over")  # (once: not in the log)
        await expect(typing).to_contain_text("w20", timeout=WAIT_MS)
        await expect(typing).to_contain_text("writing…w0 w1 w2")  # what streamed before the take-over
        # The next response streams on a line of its own (once: after the first one's words, never cleared), the
        # last one: the first one's stays above it until the log shows that response as stored, and the log's
        # reads may be behind the live stream.
        await expect(typing.last).to_contain_text("v5", timeout=WAIT_MS)
        await expect(typing.last).not_to_contain_text("w119")
        for last_word in ("w119", "v29"):  # each response as stored, once, and no "writing…" line left beside it
            await expect(stored.filter(has_text=last_word)).to_have_count(1, timeout=WAIT_MS)
        await expect(typing).to_have_count(0)

        await engine.delete(session.id, by="ada")
        await expect(page.locator("#d-meta")).to_contain_text("deleted, readable until", timeout=WAIT_MS)
        await expect(page.locator("#log")).to_contain_text("deleted by ada")
        await expect(page.locator("#take")).to_be_disabled()
        await expect(page.locator("#send")).to_be_hidden()
        assert problems == []


async def test_a_question_held_for_the_parent_says_so_and_escalates_from_the_page(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    """Once: it read "Needs you: It waits for an answer." under the word `working`, with no way to take it."""
    model = scripted("dashboard-held", ScriptedModel.replying("ok"))
    async with open_engine(role("helper", model)) as engine, served(create_app(engine)) as base:
        parent = await engine.create("helper", name="boss")
        child = await engine.store.create_session(SessionDraft(name="scout", role="helper", parent_id=parent.id))
        held = RequestDraft(
            kind="question", summary="Which branch?", questions=["Which branch?"], waits_on="parent",
            deliver_at=datetime.now(UTC) + timedelta(hours=1), turn_id="trn_test",
        )  # fmt: skip
        patch = SessionPatch(status="awaiting_input", current_turn_id="trn_test")
        await engine.store.write(Write(child.id, session=patch, requests_open=[held]))
        page, problems = await _page(browser, base)
        await page.locator(f'#agents tr[data-id="{child.id}"]').click()
        needs = page.locator("#needs")
        await expect(needs).to_contain_text("Asks its parent agent: Which branch?", timeout=WAIT_MS)
        await expect(needs).to_contain_text("It comes to you at")
        await needs.get_by_role("button", name="Escalate to me now").click()
        await expect(needs).to_contain_text("Needs you: Which branch?", timeout=WAIT_MS)
        await expect(needs.get_by_role("textbox")).to_be_visible()
        (request,) = await engine.store.list_requests(session_id=child.id)
        assert request.waits_on == "person"
        assert problems == []


def _delegating(scripted: Any, model: str) -> tuple[Any, Any]:
    """A `lead` role that hands its prompt to a `helper` sub-agent named "counter", and the `helper` role."""

    def lead(ctx: Any) -> Any:
        if not ctx.tool_results:
            return CallTool("agent_task", {"role": "helper", "prompt": ctx.prompt, "name": "counter"})
        return Reply("The helper is done.")

    lead_model = scripted(f"{model}-lead", ScriptedModel(function=lead))
    helper_model = scripted(f"{model}-helper", ScriptedModel(function=lambda ctx: Reply(f"counted {ctx.prompt}")))
    return role("lead", lead_model, tools=("agent_task",), grant=("spawn",)), role("helper", helper_model)


async def test_a_sub_agent_links_its_parent_and_a_held_agent_says_who_holds_it(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    """Once the page showed none of what `agentwatch get` does: a sub-agent's parent, the parent's "spawned"
    line as plain text, and of an agent a person took over neither the hold (in its row too) nor its inbox."""
    async with open_engine(*_delegating(scripted, "dashboard-kin")) as engine, served(create_app(engine)) as base:
        boss = await engine.task("lead", "to 3", timeout=10)
        (child,) = (await engine.store.list_sessions(SessionFilter(parent_id=boss["agentId"]))).items
        await engine.call_tool("agent_take_over", {"id": child.id, "by": "ada"})
        await engine.enqueue(child.id, "and to 4")
        page, problems = await _page(browser, base)
        await expect(page.locator(f'#agents tr[data-id="{child.id}"]')).to_contain_text("held by ada", timeout=WAIT_MS)
        await page.locator(f'#agents tr[data-id="{boss["agentId"]}"]').click()
        spawned = page.locator("#log").get_by_role("link", name="spawned counter (helper)")
        await expect(spawned).to_have_attribute("href", f"#agent={child.id}", timeout=WAIT_MS)
        await spawned.click()
        meta = page.locator("#d-meta")
        await expect(meta).to_contain_text("sub-agent of", timeout=WAIT_MS)
        await expect(meta).to_contain_text("held by ada since")
        await expect(meta).to_contain_text("1 input waiting in its inbox")
        await expect(meta.get_by_role("link", name=boss["name"])).to_have_attribute("href", f"#agent={boss['agentId']}")
        assert problems == []


async def test_a_blank_answer_is_said_to_be_blank(open_engine: Any, scripted: Any, browser: Any) -> None:
    """Once Answer with a blank text did nothing and said nothing, and Send and Start with blank text answered in
    the API's words."""
    model = scripted("dashboard-blank", ScriptedModel.replying("ok"))
    async with open_engine(role("helper", model)) as engine, served(create_app(engine)) as base:
        asking = await engine.create("helper", name="asking")
        question = RequestDraft(kind="question", summary="Which branch?", questions=["Which branch?"], turn_id="trn_t")
        patch = SessionPatch(status="awaiting_input", current_turn_id="trn_t")
        await engine.store.write(Write(asking.id, session=patch, requests_open=[question]))
        page, problems = await _page(browser, f"{base}/#agent={asking.id}")
        needs = page.locator("#needs")
        await needs.get_by_role("textbox", name="Your answer").fill("  ", timeout=WAIT_MS)
        await needs.get_by_role("button", name="Answer").click()
        await expect(page.locator("#toast")).to_have_text("Write an answer first.")
        await expect(needs).to_contain_text("Needs you: Which branch?")
        # (once: "bad arguments for agent_enqueue: prompt: ... (it takes: agentId, prompt)")
        await page.locator("#send textarea").fill("  ")
        await page.locator("#send button").click()
        await expect(page.locator("#toast")).to_have_text("Write a message first.")
        await page.locator("#new-agent summary").click()
        await page.locator('#create input[name="role"]').fill("helper")
        await page.locator('#create textarea[name="prompt"]').fill("  ")
        await page.locator("#create button").click()
        await expect(page.locator("#toast")).to_have_text("Write its task first.")
        assert len((await engine.store.list_sessions(SessionFilter())).items) == 1
        assert problems == []


async def test_a_sub_agents_status_record_reads_as_one_line_in_its_parents_log(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    """Once `agent_task`'s answer (the sub-agent's status record) filled the parent's log as ~900 characters of
    raw JSON. Its line says how the sub-agent stands in one word where its status says no more than its word
    (`done`; once `completed · done`, and `cancelled · stopped` of one someone stopped)."""
    async with open_engine(*_delegating(scripted, "dashboard-record")) as engine, served(create_app(engine)) as base:
        boss = await engine.task("lead", "to 3", timeout=10)
        (child,) = (await engine.store.list_sessions(SessionFilter(parent_id=boss["agentId"]))).items
        page, problems = await _page(browser, f"{base}/#agent={boss['agentId']}")
        record = page.locator('#log li[data-type="item.completed"].tool .detail')
        await expect(record).to_have_text("counter · done · counted to 3", timeout=WAIT_MS)
        await expect(record.get_by_role("link", name="counter")).to_have_attribute("href", f"#agent={child.id}")
        await expect(page.locator("#log")).not_to_contain_text("agentId")
        assert problems == []


async def test_on_a_phone_the_status_stays_in_view(open_engine: Any, scripted: Any, browser: Any) -> None:
    """Once: at 390 px a long question under an agent's name pushed its status off the screen."""
    ran: list[str] = []
    cleaner, delete_file = _cleaner_role(scripted, "dashboard-phone", ran)
    async with open_engine(cleaner, tools=[delete_file]) as engine, served(create_app(engine)) as base:
        paused = await engine.task("cleaner", "a/very/long/path/" * 8 + "file.txt", timeout=10)
        page = await browser.new_page(viewport={"width": 390, "height": 800})
        await page.goto(base)
        badge = page.locator(f'#agents tr[data-id="{paused["agentId"]}"] .word')
        await expect(badge).to_have_text("needs you", timeout=WAIT_MS)
        box = await badge.bounding_box()
        assert box is not None and box["x"] + box["width"] <= 390, box


async def test_on_a_phone_the_agent_tapped_comes_into_view_and_nothing_is_cut_off(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    """Once at 390 px a tap scrolled to the agent while it was still empty (the screen stayed on the list), the
    "active" column was cut off, and the status chips scrolled sideways with no sign of the ones out of view."""
    model = scripted("dashboard-tap", ScriptedModel.replying("ok"))
    async with open_engine(role("helper", model)) as engine, served(create_app(engine)) as base:
        for n in range(12):
            await engine.create("helper", name=f"nightly_digest_of_the_repository_{n}")
        done = await engine.task("helper", "go", timeout=10)
        await engine.store.append(done["agentId"], [NewEvent(UserMessage(text=f"note {i}")) for i in range(40)])
        page = await browser.new_page(viewport={"width": 390, "height": 800})
        await page.goto(base)
        last = page.locator("#agents tbody tr").last
        await expect(last.locator("td").last).to_contain_text("ago", timeout=WAIT_MS)
        for cell in (page.locator("#words button").last, last.locator("td").last):
            box = await cell.bounding_box()
            assert box is not None and box["x"] + box["width"] <= 390, box
        await page.locator(f'#agents tr[data-id="{done["agentId"]}"]').click()
        await expect(page.locator("#log")).to_contain_text("note 39", timeout=WAIT_MS)
        await expect(page.locator("#detail")).to_be_in_viewport(ratio=0.95)  # all of it, its log full


async def test_the_page_shows_who_watches_an_agent_and_what_it_last_reported(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    """Once the page showed nothing of an agent's observer (`agentwatch get` did): its type, its pairing, its
    reports and whether the agent read them. Its name opens the observer, from the keyboard too. The observer
    says whom it watches: it once called itself a sub-agent of the agent it watches (its parent in the store)."""
    model = scripted("dashboard-observed", ScriptedModel(function=lambda ctx: Reply("shipped")))
    watcher = scripted("dashboard-watcher", reporting("You skipped the tests."))
    coder = role("coder", model, observer="reviewer", grant=("spawn",))
    async with (
        open_engine(coder, role("reviewer", watcher), extensions=None) as engine,  # (observer agents on)
        served(create_app(engine, ServiceSettings(token=TOKEN))) as base,
    ):
        session = await engine.create("coder", source="chat")
        await engine.enqueue(session.id, "ship it")
        await _reported(engine, session.id)  # (the observer read the turn and reported)
        page, problems = await _page(browser, f"{base}/#token={TOKEN}")
        await page.locator(f'#agents tr[data-id="{session.id}"]').click()
        observer = page.locator("#d-observer")
        await expect(observer).to_contain_text("Watched by reviewer · armed", timeout=WAIT_MS)
        await expect(observer).to_contain_text("last report: You skipped the tests.")
        await observer.get_by_role("link", name="reviewer").focus()
        await page.keyboard.press("Enter")
        meta = page.locator("#d-meta")
        await expect(meta).to_contain_text("reviewer", timeout=WAIT_MS)
        await expect(observer).to_be_hidden()  # an observer is watched by none
        await expect(meta).to_contain_text(f"observer of {session.name}")
        await expect(meta).not_to_contain_text("sub-agent")
        watched = meta.get_by_role("link", name=session.name)
        await expect(watched).to_have_attribute("href", f"#agent={session.id}")
        assert problems == []


async def test_a_request_opened_while_an_agent_is_being_opened_is_shown(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    """Once the page read the agent beside its log: a request opened between the two reads was in the log but not
    in the detail, and no later event refreshed it, so Approve never showed (a flake of the double-click test)."""
    held = HeldTool("prepare")

    def delete_file(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    def script(ctx: Any) -> Any:
        if not ctx.tool_results:
            return CallTool("prepare", {})
        return CallTool("delete_file", {"path": "a.txt"}) if ctx.request_index == 1 else Reply("done")

    model = scripted("dash-race", ScriptedModel(function=script))
    cleaner = role("cleaner", model, tools=("prepare", "delete_file"), approval_tools=("delete_file",))
    async with open_engine(cleaner, tools=[held.tool, delete_file]) as engine, served(create_app(engine)) as base:
        session = await engine.create("cleaner")
        await engine.enqueue(session.id, "clean")
        await asyncio.wait_for(held.started.wait(), 10)

        async def log_read_once_the_request_is_open(route: Any) -> None:
            await asyncio.sleep(0.3)  # (a detail read beside the log has its answer by now: nothing waits yet)
            held.release.set()
            for _ in range(250):
                if (await engine.store.get_session(session.id)).status == "awaiting_input":
                    break
                await asyncio.sleep(0.02)
            await route.continue_()

        page, problems = await _page(browser, "about:blank")
        await page.route("**/api/tools/agent_tail", log_read_once_the_request_is_open, times=1)
        await page.goto(f"{base}/#agent={session.id}")
        await expect(page.locator("#log")).to_contain_text("delete_file", timeout=WAIT_MS)
        await expect(page.locator("#needs").get_by_role("button", name="Approve")).to_be_visible(timeout=WAIT_MS)
        assert problems == []


LAGGING_STREAM = """
(() => {
  // The live stream lags behind the page's reads (a slow link, a buffering proxy): each frame comes 300 ms after
  // the one before, in order, while a read of the log answers at once.
  const Real = window.EventSource;
  window.EventSource = class extends Real {
    addEventListener(type, listener, options) {
      if (type !== "event") return super.addEventListener(type, listener, options);
      let due = 0;
      return super.addEventListener(type, (message) => {
        due = Math.max(Date.now(), due) + 300;
        setTimeout(() => {
          listener(message);
          document.body.dataset.streamed = JSON.parse(message.data).event.type;
        }, due - Date.now());
      }, options);
    }
  };
})();
"""


async def test_what_streamed_goes_once_it_is_shown_however_late_the_stream_brings_it(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    """Once: when the log's read showed a response before the live stream brought its streamed words (the
    stream a little behind), a "writing…" line with those words stayed under the finished turn for good."""
    model = scripted("dashboard-late", ScriptedModel.replying("The answer is forty two."))
    async with open_engine(role("helper", model)) as engine, served(create_app(engine)) as base:
        session = await engine.create("helper", name="late")
        page = await browser.new_page()
        problems: list[str] = []
        page.on("pageerror", lambda error: problems.append(str(error)))
        await page.add_init_script(LAGGING_STREAM)
        await page.goto(f"{base}/#agent={session.id}")
        await expect(page.locator("#d-name")).to_have_text("late", timeout=WAIT_MS)
        await page.wait_for_timeout(500)  # (attached)
        await engine.enqueue(session.id, "go")
        await expect(page.locator("#log")).to_contain_text("turn completed", timeout=WAIT_MS)
        await expect(page.locator("body")).to_have_attribute("data-streamed", "turn.ended", timeout=WAIT_MS)
        await expect(page.locator("#log .typing")).to_have_count(0)
        await expect(page.locator("#log")).to_contain_text("The answer is forty two.")
        assert problems == []


async def test_a_streamed_line_goes_when_the_log_shows_its_text_and_leaves_the_next_one_streaming(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    """Once: when the log's read of a finished response came after the next response had begun to stream (the
    reads behind the live stream, on a loaded host), that read took off the next response's "writing…" line, and
    the finished one's stayed beside its text as stored until the reads caught up with every later event."""
    words, then = " ".join(f"w{n}" for n in range(20)), " ".join(f"v{n}" for n in range(20))

    def note(text: str) -> str:
        """Keep a note."""
        return text

    steps = [[Reply(words), CallTool("note", {"text": "x"})], [Reply(then), Hang()]]  # the second never ends
    model = scripted("dashboard-reads-behind", ScriptedModel(steps, chunk_delay=0.01))
    async with (
        open_engine(role("streamer", model, tools=("note",)), tools=[note]) as engine,
        served(create_app(engine)) as base,
    ):
        session = await engine.create("streamer", name="streamer")
        page, problems = await _page(browser, f"{base}/#agent={session.id}")
        await expect(page.locator("#d-name")).to_have_text("streamer", timeout=WAIT_MS)
        reading = asyncio.Event()

        async def read_when_let(route: Any) -> None:
            await reading.wait()
            await route.continue_()

        await page.route("**/api/tools/agent_tail", read_when_let)  # the log reads nothing until let
        await engine.enqueue(session.id, "go")
        typing, stored = page.locator("#log .typing"), page.locator("#log li:not(.typing)")
        await expect(typing.last).to_contain_text("v19", timeout=WAIT_MS)  # both responses streamed
        await expect(typing.first).to_contain_text("w19")  # (its text not shown by the log yet: it stays)
        reading.set()
        await expect(stored.filter(has_text="w19")).to_have_count(1, timeout=WAIT_MS)
        await expect(typing).to_have_count(1)
        await expect(typing).to_contain_text("writing…v0 v1 v2")
        await expect(typing).to_contain_text("v19")

        assert await engine.stop(session.id)
        await expect(stored.filter(has_text="turn cancelled")).to_have_count(1, timeout=WAIT_MS)
        await expect(typing).to_have_count(0)
        assert problems == []


async def test_on_a_laptop_a_long_question_leaves_every_column_in_view(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    """Once at 1024 and 1280 px a long question under an agent's name pushed the "active" column out of the list's
    pane (cut off, behind a sideways scroll with no sign of it)."""
    ran: list[str] = []
    cleaner, delete_file = _cleaner_role(scripted, "dashboard-laptop", ran)
    async with open_engine(cleaner, tools=[delete_file]) as engine, served(create_app(engine)) as base:
        paused_path = "a/very/long/path/" * 8 + "file.txt"
        paused = await engine.task("cleaner", paused_path, timeout=10)
        for width in (1024, 1280):
            page = await browser.new_page(viewport={"width": width, "height": 800})
            await page.goto(base)
            row = page.locator(f'#agents tr[data-id="{paused["agentId"]}"]')
            await expect(row).to_contain_text("approve delete_file", timeout=WAIT_MS)
            await _active_in_its_pane(page, row, width)
            sub = row.locator(".sub")
            await expect(sub).to_be_visible()  # (the question is still there, cut to the room, whole on hover)
            await expect(sub).to_have_attribute("title", f"approve delete_file(path={paused_path!r})")
            await page.close()


async def test_a_long_stream_shows_its_newest_words_and_leaves_a_reader_where_they_scrolled(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    """Once: past a dozen lines the "writing…" line kept showing its first words (the newest ones out of view in
    its own box), and each streamed piece pulled a person who had scrolled up the log back to its end."""
    words = " ".join(f"w{n}" for n in range(400))
    model = scripted("dashboard-long-stream", ScriptedModel([Reply(words)], chunk_delay=0.02))
    async with open_engine(role("streamer", model)) as engine, served(create_app(engine)) as base:
        session = await engine.create("streamer", name="streamer")
        await engine.store.append(session.id, [NewEvent(UserMessage(text=f"note {i}")) for i in range(40)])
        page, problems = await _page(browser, f"{base}/#agent={session.id}")
        log = page.locator("#log")
        await expect(log).to_contain_text("note 39", timeout=WAIT_MS)
        await engine.enqueue(session.id, "go")
        typing = page.locator("#log .typing .detail")
        await expect(typing).to_contain_text("w200", timeout=WAIT_MS)
        below = "box => box.scrollHeight - box.scrollTop - box.clientHeight"
        assert await typing.evaluate(below) < 5  # (the newest words in view)
        await log.evaluate("box => { box.scrollTop = 0; }")  # a person reads back while it streams
        await expect(typing).to_contain_text("w300", timeout=WAIT_MS)
        assert await log.evaluate("box => box.scrollTop") == 0
        assert await typing.evaluate(below) < 5
        await expect(log).to_contain_text("w399", timeout=WAIT_MS)
        assert problems == []


CONTRAST = """
element => {
  // The WCAG contrast ratio of an element's text against its background (both opaque here).
  const channels = (color) => color.match(/[\\d.]+/g).slice(0, 3).map(Number);
  const luminance = (color) => {
    const [r, g, b] = channels(color).map((v) => {
      const c = v / 255;
      return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const style = getComputedStyle(element);
  const [fg, bg] = [luminance(style.color), luminance(style.backgroundColor)].sort((a, b) => b - a);
  return (fg + 0.05) / (bg + 0.05);
}
"""


async def test_in_dark_mode_the_text_of_the_primary_buttons_can_be_read(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    """Once in a dark theme Approve and the chosen status chip were white on light blue (a contrast of 2.6:1)."""
    ran: list[str] = []
    cleaner, delete_file = _cleaner_role(scripted, "dashboard-dark", ran)
    async with open_engine(cleaner, tools=[delete_file]) as engine, served(create_app(engine)) as base:
        paused = await engine.task("cleaner", "a.txt", timeout=10)
        for scheme in ("light", "dark"):
            context = await browser.new_context(color_scheme=scheme)
            page = await context.new_page()
            await page.goto(f"{base}/#agent={paused['agentId']}")
            approve = page.locator("#needs").get_by_role("button", name="Approve")
            await expect(approve).to_be_visible(timeout=WAIT_MS)
            for control in (approve, page.locator('#words [aria-pressed="true"]')):
                assert await control.evaluate(CONTRAST) >= 4.5, (scheme, await control.inner_text())
            await context.close()


async def test_the_agent_shown_goes_stuck_with_its_row(open_engine: Any, scripted: Any, browser: Any) -> None:
    """Once an agent that went stuck while it was shown stayed `working` (and said nothing else) beside its row's
    `stuck`: nothing happens to a stuck agent, and the page refreshed what it shows of one only on its events."""
    held = HeldTool("wait_for_release")
    model = scripted("dashboard-stuck", ScriptedModel(function=held.script))
    waiter = role("waiter", model, tools=(held.name,), sessions=RoleSessions(stuck_after_seconds=2))
    async with open_engine(waiter, tools=[held.tool]) as engine, served(create_app(engine)) as base:
        session = await engine.create("waiter")
        await engine.enqueue(session.id, "wait")
        await held.started.wait()
        page, problems = await _page(browser, f"{base}/#agent={session.id}")
        await expect(page.locator("#d-word")).to_have_text("working", timeout=WAIT_MS)
        row = page.locator(f'#agents tr[data-id="{session.id}"] .word')
        await expect(row).to_have_text("stuck", timeout=WAIT_MS)
        await expect(page.locator("#d-word")).to_have_text("stuck", timeout=3000)  # (by the list's next refresh)
        held.release.set()
        await expect(page.locator("#d-word")).to_have_text("done", timeout=WAIT_MS)
        assert problems == []


async def test_the_keyboard_stays_on_what_it_pressed(open_engine: Any, scripted: Any, browser: Any) -> None:
    """Once Enter on Take over, Hand back, Send or Stop left the focus on the page's body (the button, disabled
    while its call was in flight, let it go): a screen reader was left nowhere."""
    held = HeldTool("wait_for_release")
    async with (
        open_engine(held.role("waiter", scripted, "dashboard-keys"), tools=[held.tool]) as engine,
        served(create_app(engine)) as base,
    ):
        session = await engine.create("waiter", name="waiter")
        await engine.enqueue(session.id, "wait")
        page, problems = await _page(browser, f"{base}/#agent={session.id}")
        take = page.locator("#take")
        await expect(take).to_have_text("Take over", timeout=WAIT_MS)
        focused = "document.activeElement.id || document.activeElement.tagName"
        await take.focus()
        await page.keyboard.press("Enter")
        await expect(take).to_have_text("Hand back (held by a person)", timeout=WAIT_MS)
        await page.wait_for_timeout(200)
        assert await page.evaluate(focused) == "take"
        await page.keyboard.press("Enter")
        await expect(take).to_have_text("Take over", timeout=WAIT_MS)
        await page.wait_for_timeout(200)
        assert await page.evaluate(focused) == "take"
        await page.locator("#send textarea").fill("and then this")
        await page.locator("#send button").focus()
        await page.keyboard.press("Enter")
        await expect(page.locator("#d-meta")).to_contain_text("1 input waiting", timeout=WAIT_MS)
        await page.wait_for_timeout(200)
        assert await page.evaluate("document.activeElement.closest('#send') !== null")
        await page.locator("#stop").focus()
        await page.keyboard.press("Enter")  # (its confirm() is accepted)
        await expect(page.locator("#stop")).to_be_disabled(timeout=WAIT_MS)  # nothing left to stop: to its name
        await page.wait_for_timeout(200)
        assert await page.evaluate(focused) == "d-name"
        assert problems == []


async def test_a_long_name_breaks_and_hides_nothing(open_engine: Any, scripted: Any, browser: Any) -> None:
    """Once on a laptop a long name (no spaces, as names are) pushed every row's role, status and "active" out of the
    list's pane, and in the agent's header ran over its status and its buttons, the page scrolling sideways."""
    model = scripted("dashboard-long-name", ScriptedModel.replying("ok"))
    async with open_engine(role("helper", model)) as engine, served(create_app(engine)) as base:
        named = await engine.create("helper", name="nightly_digest_of_the_repository_" + "and_more" * 12)
        for width in (1280, 390):
            page = await browser.new_page(viewport={"width": width, "height": 800})
            await page.goto(f"{base}/#agent={named.id}")
            await expect(page.locator("#d-word")).to_have_text("idle", timeout=WAIT_MS)
            row = page.locator(f'#agents tr[data-id="{named.id}"]')
            await expect(row).to_contain_text("helper", timeout=WAIT_MS)
            await _active_in_its_pane(page, row, width)
            name = await page.locator("#d-name").bounding_box()
            word = await page.locator("#d-word").bounding_box()
            assert name is not None and word is not None
            beside, below = name["x"] + name["width"] <= word["x"], name["y"] + name["height"] <= word["y"]
            assert beside or below, (width, name, word)
            assert name["width"] >= width / 3, (width, name)  # (not squeezed into a column beside its buttons)
            assert await page.evaluate("document.documentElement.scrollWidth <= innerWidth"), width
            await page.close()


async def test_what_a_person_is_asked_to_approve_is_all_in_view(open_engine: Any, scripted: Any, browser: Any) -> None:
    """Once a call with a long path (no spaces) ran out of the "Needs you" box and off the screen (the page scrolled
    sideways), and the log's line of the request the same."""
    ran: list[str] = []
    cleaner, delete_file = _cleaner_role(scripted, "dashboard-long-path", ran)
    async with open_engine(cleaner, tools=[delete_file]) as engine, served(create_app(engine)) as base:
        paused = await engine.task("cleaner", "a/very/long/path/" * 12 + "file.txt", timeout=10)
        for width in (1280, 390):
            page = await browser.new_page(viewport={"width": width, "height": 800})
            await page.goto(f"{base}/#agent={paused['agentId']}")
            await expect(page.locator("#needs")).to_contain_text("approve delete_file(path='a/very/", timeout=WAIT_MS)
            await expect(page.locator("#log")).to_contain_text("turn paused", timeout=WAIT_MS)
            for box in ("#needs", "#log"):
                assert await page.locator(box).evaluate("box => box.scrollWidth <= box.clientWidth"), (width, box)
            assert await page.evaluate("document.documentElement.scrollWidth <= innerWidth"), width
            await page.close()


async def test_the_connection_is_read_out_only_when_it_changes(open_engine: Any, scripted: Any, browser: Any) -> None:
    """Once the header's status (a live region, read out by a screen reader at each change) held the time of the
    list's last refresh: "live · 2:31:58 PM" was read out every 2 seconds."""
    model = scripted("dashboard-quiet", ScriptedModel.replying("ok"))
    async with open_engine(role("helper", model)) as engine, served(create_app(engine)) as base:
        page, problems = await _page(browser, base)
        status = page.locator("header").get_by_role("status")
        await expect(status).to_have_text("live", timeout=WAIT_MS)
        shown = await page.locator("#connection").inner_text()
        await page.wait_for_timeout(2500)  # past the list's refresh
        await expect(status).to_have_text("live")
        assert await page.locator("#connection").inner_text() != shown  # (the time of the refresh is still shown)
        assert engine is not None and problems == []


async def test_the_header_says_when_the_service_is_stopping(open_engine: Any, scripted: Any, browser: Any) -> None:
    """Once the page said "live" while the service drained after a SIGTERM: a person learnt it only when an
    action that starts work was refused."""
    model = scripted("dashboard-draining", ScriptedModel.replying("ok"))
    async with open_engine(role("helper", model)) as engine, served(app := create_app(engine)) as base:
        page, problems = await _page(browser, base)
        status = page.locator("header").get_by_role("status")
        await expect(status).to_have_text("live", timeout=WAIT_MS)
        app.state.service.draining = True  # as a SIGTERM sets it
        await expect(status).to_have_text("stopping: no new work is taken here", timeout=WAIT_MS)
        assert problems == []


async def test_a_link_to_an_agent_or_a_run_that_is_not_there_says_so(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    """Once a link to an agent since reaped (or mistyped) showed an empty agent, with a blank name and button, a
    Stop and a Send, under a message that went after 8 seconds; a run's link the same."""
    model = scripted("dashboard-gone", ScriptedModel.replying("ok"))
    async with open_engine(role("helper", model)) as engine, served(create_app(engine)) as base:
        done = await engine.task("helper", "go", timeout=10)
        page, problems = await _page(browser, f"{base}/#agent=ses_01m95nonexistent00000000000")
        await expect(page.locator("#pick")).to_contain_text("no session with id 'ses_01m95nonexistent", timeout=WAIT_MS)
        await expect(page.locator("#detail")).to_be_hidden()
        await page.locator(f'#agents tr[data-id="{done["agentId"]}"]').click()  # then one that is there
        await expect(page.locator("#d-name")).to_have_text(done["name"], timeout=WAIT_MS)
        await expect(page.locator("#pick")).to_be_hidden()
        await page.goto(f"{base}/#run=run_nonexistent")
        await expect(page.locator("#pick-run")).to_contain_text("run_nonexistent", timeout=WAIT_MS)
        await expect(page.locator("#run")).to_be_hidden()
        assert [p for p in problems if "404" not in p] == []


async def test_the_agent_picked_low_in_a_long_list_is_shown_where_the_person_looks(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    """Once with a long list a person who scrolled down to an agent and picked it saw nothing happen: the agent was
    shown at the top of the page, out of view, beside the list's first rows (the runs view the same)."""
    model = scripted("dashboard-far-down", ScriptedModel.replying("ok"))
    async with open_engine(role("helper", model)) as engine, served(create_app(engine)) as base:
        await _agents_and_runs(engine, agents=60, runs=30)
        page, problems = await _page(browser, base)
        await page.set_viewport_size({"width": 1280, "height": 800})
        far_down = page.locator("#agents tbody tr", has_text="agent-00")  # (the oldest, below the 59 others)
        await expect(far_down).to_have_count(1, timeout=WAIT_MS)
        await far_down.click()  # (scrolled to first, as a person would)
        await expect(page.locator("#d-name")).to_have_text("agent-00", timeout=WAIT_MS)
        for shown in ("#d-name", "#log-empty", "#send"):  # (it has done nothing yet)
            await expect(page.locator(shown)).to_be_in_viewport()
        top = await page.locator("#d-name").bounding_box()
        header = await page.locator("header.top").bounding_box()
        assert top is not None and header is not None and top["y"] >= header["y"] + header["height"]  # not under it
        await page.locator("#agents tbody tr").first.click()  # and back up
        await expect(page.locator("#d-name")).to_be_in_viewport()

        await page.get_by_role("button", name="Runs").click()
        oldest = page.locator("#runs tbody tr", has_text="workflow:report-00")
        await expect(oldest).to_have_count(1, timeout=WAIT_MS)
        await oldest.click()
        await expect(page.locator("#r-name")).to_have_text("workflow:report-00", timeout=WAIT_MS)
        await expect(page.locator("#r-name")).to_be_in_viewport()
        assert problems == []


async def test_on_a_phone_the_runs_view_fits_the_screen(open_engine: Any, scripted: Any, browser: Any) -> None:
    """Once at 390 px the runs list ran off the screen (its "spent" column cut off), and the page scrolled sideways,
    the run's trace too; above them the status chips, hidden in this view, left a gap the height of two rows."""
    model = scripted("dashboard-phone-runs", ScriptedModel.replying("ok"))
    async with open_engine(role("helper", model)) as engine, served(create_app(engine)) as base:
        async with engine.run("nightly_digest_of_the_repository") as run, run.span("Work") as work:
            await work.task("helper", "go")
        page = await browser.new_page(viewport={"width": 390, "height": 800})
        await page.goto(f"{base}/#run={run.id}")
        await expect(page.locator("#spans li[data-kind=task]")).to_contain_text("open agent", timeout=WAIT_MS)
        row = page.locator(f'#runs tr[data-id="{run.id}"]')
        await expect(row).to_contain_text("completed", timeout=WAIT_MS)
        for cell in (row.locator("td").nth(2), row.locator(".word"), page.locator("#spans .num").last):
            box = await cell.bounding_box()
            assert box is not None and box["x"] + box["width"] <= 390, box
        assert await page.evaluate("document.documentElement.scrollWidth <= innerWidth")
        header = await page.locator("header.top").bounding_box()
        assert header is not None and header["height"] < 100, header


async def test_the_page_says_the_service_is_gone_and_goes_on_once_it_is_back(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    """A service restarted under an open page (a deploy): the page says it is offline, in view on a phone (once the
    sentence ran off the screen and the page scrolled sideways), then shows what the agent did once it is back,
    with no reload. Once at 390 px the header's "offline: ..." sentence did not wrap."""
    model = scripted("dashboard-restart", ScriptedModel(function=lambda ctx: Reply(f"echo {ctx.prompt}")))
    helper = role("helper", model)
    async with open_engine(helper) as engine, served(create_app(engine)) as base:
        session = await engine.task("helper", "before", timeout=10)
        page, problems = await _page(browser, f"{base}/#agent={session['agentId']}")
        await page.set_viewport_size({"width": 390, "height": 800})
        await expect(page.locator("#log")).to_contain_text("echo before", timeout=WAIT_MS)
    status = page.locator("header").get_by_role("status")
    await expect(status).to_contain_text("offline: The service does not answer", timeout=WAIT_MS)
    box = await status.bounding_box()
    assert box is not None and box["x"] + box["width"] <= 390, box
    assert await page.evaluate("document.documentElement.scrollWidth <= innerWidth")

    port = int(base.rsplit(":", 1)[1])
    async with open_engine(helper) as engine, served(create_app(engine), port=port):
        await expect(status).to_have_text("live", timeout=WAIT_MS)
        await engine.enqueue(session["agentId"], "after")
        await expect(page.locator("#log")).to_contain_text("echo after", timeout=WAIT_MS)  # (live: no reload)
        await expect(page.locator("#log li", has_text="echo before")).to_have_count(1)  # (shown once)
        await expect(page.locator("#d-word")).to_have_text("done", timeout=WAIT_MS)
    # (the browser logs the calls that found the service gone)
    assert [p for p in problems if "ERR_CONNECTION_REFUSED" not in p and "ERR_INCOMPLETE" not in p] == []


async def test_more_agents_and_runs_than_a_page_holds_are_all_reached_from_the_page(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    """Once past 100 agents the older ones could be reached only by a filter that happened to find them, and past
    50 runs the older runs were not listed at all, with no sign that there were more."""
    model = scripted("dashboard-pages", ScriptedModel.replying("ok"))
    async with open_engine(role("helper", model)) as engine, served(create_app(engine)) as base:
        await _agents_and_runs(engine, agents=130, runs=55)
        page, problems = await _page(browser, base)
        rows, more = page.locator("#agents tbody tr"), page.locator("#more-agents")
        await expect(rows).to_have_count(100, timeout=WAIT_MS)
        await expect(page.locator("#agents-empty")).to_contain_text("100 most recently active of 130")
        await expect(more).to_have_text("Show 30 more")
        await more.click()
        await expect(rows).to_have_count(130, timeout=WAIT_MS)
        await expect(rows.last).to_contain_text("agent-000")
        await expect(page.locator("#agents-empty")).to_be_hidden()
        await expect(more).to_be_hidden()
        await expect(rows.nth(100)).to_be_focused()  # (the keyboard goes on to the rows it added)
        await page.wait_for_timeout(2500)  # past the list's refresh: the rows asked for are kept
        await expect(rows).to_have_count(130)
        await page.locator("#q").fill("agent-00")  # a new filter starts from its first page
        await expect(rows).to_have_count(10, timeout=WAIT_MS)

        await page.get_by_role("button", name="Runs").click()
        runs = page.locator("#runs tbody tr")
        await expect(runs).to_have_count(50, timeout=WAIT_MS)
        await page.get_by_role("button", name="Show older runs").click()
        await expect(runs).to_have_count(55, timeout=WAIT_MS)
        await expect(runs.last).to_contain_text("workflow:report-00")
        await expect(page.locator("#more-runs")).to_be_hidden()
        assert problems == []


async def test_the_agent_shown_says_what_it_does_this_moment(open_engine: Any, scripted: Any, browser: Any) -> None:
    """Once the page said only `working`: its log's last line showed the call, but not whether it still ran (a call
    and its result are both lines titled with the tool's name), and a person could not tell a long call from a
    model slow to answer."""
    held = HeldTool("wait_for_release")
    async with (
        open_engine(held.role("waiter", scripted, "dashboard-now"), tools=[held.tool]) as engine,
        served(create_app(engine)) as base,
    ):
        session = await engine.create("waiter")
        page, problems = await _page(browser, f"{base}/#agent={session.id}")
        now = page.locator("#d-now")
        await expect(page.locator("#d-word")).to_have_text("idle", timeout=WAIT_MS)
        await expect(now).to_be_hidden()
        await engine.enqueue(session.id, "wait")
        await expect(now).to_have_text("Now: running wait_for_release", timeout=WAIT_MS)
        held.release.set()
        await expect(page.locator("#d-word")).to_have_text("done", timeout=WAIT_MS)
        await expect(now).to_be_hidden()
        assert problems == []


async def test_a_working_agents_row_says_what_it_does_this_moment(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    """Once a working agent's row said only `working`: a person watching many agents could not see, without
    opening each, which one was stuck in which tool."""
    held = HeldTool("wait_for_release")
    async with (
        open_engine(held.role("waiter", scripted, "dashboard-row-now"), tools=[held.tool]) as engine,
        served(create_app(engine)) as base,
    ):
        session = await engine.create("waiter", name="slowpoke")
        page, problems = await _page(browser, base)
        row = page.locator(f'#agents tr[data-id="{session.id}"]')
        await expect(row).to_contain_text("idle", timeout=WAIT_MS)
        await engine.enqueue(session.id, "wait")
        await expect(row.locator(".sub")).to_have_text("running wait_for_release", timeout=WAIT_MS)
        await expect(row).to_contain_text("working")
        held.release.set()
        await expect(row).to_contain_text("done", timeout=WAIT_MS)
        await expect(row.locator(".sub")).to_have_count(0)
        assert problems == []


async def test_the_list_shows_what_a_person_did_at_once(open_engine: Any, scripted: Any, browser: Any) -> None:
    """Once the row of an agent a person had just stopped still said `working · running wait_for_release`, beside a
    header saying `stopped`, until the list's next refresh: the page's own clock is stopped here, so only what the
    person's action does shows."""
    held = HeldTool("wait_for_release")
    async with (
        open_engine(held.role("waiter", scripted, "dashboard-relist"), tools=[held.tool]) as engine,
        served(create_app(engine)) as base,
    ):
        session = await engine.create("waiter", name="slowpoke")
        await engine.enqueue(session.id, "wait")
        await asyncio.wait_for(held.started.wait(), 10)
        page = await browser.new_page()
        problems: list[str] = []
        page.on("pageerror", lambda error: problems.append(str(error)))
        page.on("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))  # the Stop button's confirm()
        await page.clock.install()
        await page.goto(base)
        row = page.locator(f'#agents tr[data-id="{session.id}"]')
        await expect(row).to_contain_text("running wait_for_release", timeout=WAIT_MS)
        await page.clock.pause_at(datetime.now(UTC) + timedelta(seconds=1))  # (no refresh from here on)
        await row.click()
        await expect(page.locator("#d-word")).to_have_text("working", timeout=WAIT_MS)
        await page.locator("#stop").click()
        await expect(page.locator("#d-word")).to_have_text("stopped", timeout=WAIT_MS)
        await expect(row).to_contain_text("stopped", timeout=WAIT_MS)
        await expect(row).not_to_contain_text("running")
        assert problems == []


async def test_an_agent_with_nothing_yet_says_so(open_engine: Any, scripted: Any, browser: Any) -> None:
    """Once an agent with no events showed an empty box, a line one pixel high, under its header."""
    model = scripted("dashboard-nothing-yet", ScriptedModel.replying("All done."))
    async with open_engine(role("helper", model)) as engine, served(create_app(engine)) as base:
        session = await engine.create("helper", name="quiet")
        page, problems = await _page(browser, f"{base}/#agent={session.id}")
        empty = page.locator("#log-empty")
        await expect(empty).to_have_text("Nothing yet: what it does shows here, live.", timeout=WAIT_MS)
        await expect(page.locator("#log")).to_be_hidden()
        await engine.enqueue(session.id, "go")
        await expect(page.locator("#log")).to_contain_text("All done.", timeout=WAIT_MS)
        await expect(empty).to_be_hidden()
        await page.locator(f'#agents tr[data-id="{session.id}"]').click()  # (opened again: its lines at once)
        await expect(page.locator("#log")).to_contain_text("All done.", timeout=WAIT_MS)
        await expect(empty).to_be_hidden()
        assert problems == []


async def test_an_agent_waiting_on_a_person_leads_the_list_however_many_were_active_since(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    """Once the list showed the 100 agents active last: one that had waited on a person since before them was not
    on it (only the "needs you" chip, or "Show more", found it)."""
    ran: list[str] = []
    cleaner, delete_file = _cleaner_role(scripted, "dashboard-buried", ran)
    helper = role("helper", scripted("dashboard-buried-helper", ScriptedModel.replying("ok")))
    async with open_engine(cleaner, helper, tools=[delete_file]) as engine, served(create_app(engine)) as base:
        paused = await engine.task("cleaner", "a.txt", timeout=10)
        for n in range(101):
            await engine.create("helper", name=f"agent-{n:03d}")
        page, problems = await _page(browser, base)
        rows = page.locator("#agents tbody tr")
        await expect(rows.first).to_contain_text("needs you", timeout=WAIT_MS)
        assert await rows.first.get_attribute("data-id") == paused["agentId"]
        await expect(rows).to_have_count(101)  # the page of 100, and it
        await expect(page.locator("#agents-empty")).to_contain_text(
            "100 most recently active of 102 (and, first, 1 older that needs you)"
        )
        await expect(page.locator("#more-agents")).to_have_text("Show 2 more")
        await page.locator("#more-agents").click()
        await expect(rows).to_have_count(102, timeout=WAIT_MS)  # once each
        await expect(page.locator(f'#agents tr[data-id="{paused["agentId"]}"]')).to_have_count(1)
        await expect(rows.first).to_contain_text("needs you")
        assert problems == []


async def test_runs_are_filtered_by_entity_or_kind_and_by_status(open_engine: Any, scripted: Any, browser: Any) -> None:
    """Once the runs view listed every run, newest first, with no filter (`run_list` takes entity and status)."""
    model = scripted("dashboard-run-filter", ScriptedModel.replying("ok"))
    async with open_engine(role("helper", model)) as engine, served(create_app(engine)) as base:
        for name in ("report", "report", "digest"):
            async with engine.run(name):
                pass
        with pytest.raises(RuntimeError):
            async with engine.run("report"):
                raise RuntimeError("the source was down")
        async with engine.run("tick", kind="heartbeat"):
            pass
        page, problems = await _page(browser, f"{base}/#runs")
        runs = page.locator("#runs tbody tr")
        await expect(runs).to_have_count(5, timeout=WAIT_MS)
        entity, status = page.locator("#run-entity"), page.locator("#run-status")
        await entity.fill("workflow:report")
        await expect(runs).to_have_count(3, timeout=WAIT_MS)
        await status.select_option("failed")
        await expect(runs).to_have_count(1, timeout=WAIT_MS)
        await expect(runs).to_contain_text("the source was down")
        await entity.fill("workflow:digest")
        await expect(page.locator("#runs-none")).to_have_text("No run matches.", timeout=WAIT_MS)
        await expect(runs).to_have_count(0)
        await expect(page.locator("#runs-empty")).to_be_hidden()
        await status.select_option("")
        await expect(runs).to_have_count(1, timeout=WAIT_MS)
        await entity.fill("workflow:reprot")  # (a typo: the entities with runs are named, the closest first)
        await expect(page.locator("#runs-none")).to_have_text(
            "No run has the entity workflow:reprot; those with runs, closest first: workflow:report, "
            "workflow:digest, heartbeat:tick.",
            timeout=WAIT_MS,
        )
        await entity.fill("heart")  # (no kind, on its way to one: `run_list` refuses it, naming the kinds)
        await expect(page.locator("#runs-none")).to_have_text(
            "No run has the kind heart; the kinds, closest first: heartbeat, hook, pipeline, workflow.",
            timeout=WAIT_MS,
        )
        await expect(runs).to_have_count(0)
        await expect(page.locator("#connection-state")).to_have_text("live")  # (not offline: a filter, answered)
        await entity.fill("heartbeat")  # (a kind)
        await expect(runs).to_have_count(1, timeout=WAIT_MS)
        await expect(runs).to_contain_text("heartbeat:tick")
        suggested = await page.locator("#entities option").evaluate_all("options => options.map(o => o.value)")
        assert {"workflow:report", "workflow:digest", "heartbeat:tick", "workflow", "heartbeat", "hook"} <= set(
            suggested
        )
        await entity.fill("")
        await expect(runs).to_have_count(5, timeout=WAIT_MS)
        assert [p for p in problems if "400" not in p] == []  # (the browser logs the refused kind's status)


@contextlib.asynccontextmanager
async def _observer_of_shipper(
    open_engine: Any, scripted: Any, browser: Any, name: str
) -> AsyncIterator[tuple[Any, list[str], str]]:
    """The page of the observer (`reviewer`) of an agent `shipper` that shipped, once the observer reported: the
    page, the problems it logs and the shipper's id. `name` names the scripted models."""
    model = scripted(name, ScriptedModel(function=lambda ctx: Reply("shipped")))
    watcher = scripted(f"{name}-watcher", reporting("You skipped the tests."))
    coder = role("coder", model, observer="reviewer", grant=("spawn",))
    async with (
        open_engine(coder, role("reviewer", watcher), extensions=None) as engine,  # (observer agents on)
        served(create_app(engine)) as base,
    ):
        session = await engine.create("coder", name="shipper", source="chat")
        await engine.enqueue(session.id, "ship it")
        described = await _reported(engine, session.id)
        page, problems = await _page(browser, f"{base}/#agent={described['observerSessionId']}")
        yield page, problems, session.id


async def test_an_observers_report_reads_as_its_fields_in_its_own_log(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    """Once the observer's own log showed what its report tool answered as raw JSON (`{"delivered":true,...}`)."""
    observer = _observer_of_shipper(open_engine, scripted, browser, "dashboard-observed-log")
    async with observer as (page, problems, shipper):
        tool_lines = page.locator("#log li.tool")
        called = page.locator('#log li.tool[data-type="item.started"] dl').first
        await expect(called).to_have_text("reportYou skipped the tests.", timeout=WAIT_MS)
        fields = page.locator('#log li.tool[data-type="item.completed"] dl').first  # (one report a digest)
        await expect(fields.locator("dt")).to_have_text(["delivered", "observedId", "message"])
        await expect(fields.locator("dd").nth(0)).to_have_text("yes")
        await expect(fields.get_by_role("link")).to_have_attribute("href", f"#agent={shipper}")
        await expect(fields.locator("dd").nth(2)).to_contain_text("Report queued for 'shipper'")
        await expect(tool_lines).not_to_contain_text(['"delivered"'])
        await fields.get_by_role("link").click()  # the agent it watches
        await expect(page.locator("#d-name")).to_have_text("shipper", timeout=WAIT_MS)
        assert problems == []


async def test_an_agent_a_person_stopped_says_stopped_not_done(open_engine: Any, scripted: Any, browser: Any) -> None:
    """Once an agent stopped from the page said `done`, in its header and its row, as one that finished its work:
    only the grey line under its name said `cancelled`. Its word to the API stays `done` (nothing is left to do)."""
    held = HeldTool("wait_for_release")
    async with (
        open_engine(held.role("waiter", scripted, "dashboard-stopped"), tools=[held.tool]) as engine,
        served(create_app(engine)) as base,
    ):
        session = await engine.create("waiter", name="halted")
        await engine.enqueue(session.id, "wait")
        page, problems = await _page(browser, f"{base}/#agent={session.id}")
        word = page.locator("#d-word")
        await expect(word).to_have_text("working", timeout=WAIT_MS)
        await page.locator("#stop").click()  # (its confirm() is accepted)
        await expect(page.locator("#log")).to_contain_text("turn cancelled", timeout=WAIT_MS)
        await expect(word).to_have_text("stopped", timeout=WAIT_MS)
        row = page.locator(f'#agents tr[data-id="{session.id}"] .word')
        await expect(row).to_have_text("stopped", timeout=WAIT_MS)
        assert (await engine.call_tool("agent_get", {"id": session.id}))["word"] == "done"  # (the API's word)
        assert problems == []


async def test_the_row_of_the_agent_shown_follows_its_own_events(open_engine: Any, scripted: Any, browser: Any) -> None:
    """Once the row of the agent shown said `working` for up to the list's next refresh after its header, which
    follows the agent's live stream, said `done`: here the list's reads are held once the page is up, so only
    what the page learns from the agent's stream shows."""
    held = HeldTool("wait_for_release")
    async with (
        open_engine(held.role("waiter", scripted, "dashboard-row-live"), tools=[held.tool]) as engine,
        served(create_app(engine)) as base,
    ):
        session = await engine.create("waiter", name="slowpoke")
        await engine.enqueue(session.id, "wait")
        await asyncio.wait_for(held.started.wait(), 10)
        page, problems = await _page(browser, f"{base}/#agent={session.id}")
        row = page.locator(f'#agents tr[data-id="{session.id}"]')
        await expect(row).to_contain_text("running wait_for_release", timeout=WAIT_MS)
        await expect(page.locator("#d-word")).to_have_text("working", timeout=WAIT_MS)
        listed = asyncio.Event()

        async def held_list(route: Any) -> None:
            await listed.wait()  # (the list's reads answer only once the test is over)
            with contextlib.suppress(Exception):
                await route.continue_()

        await page.route("**/api/tools/agent_list", held_list)
        held.release.set()
        await expect(page.locator("#d-word")).to_have_text("done", timeout=WAIT_MS)
        await expect(row.locator(".word")).to_have_text("done", timeout=1000)
        await expect(row.locator(".sub")).to_have_count(0)
        listed.set()
        assert problems == []


async def test_a_runs_time_and_spend_stay_on_one_line(open_engine: Any, scripted: Any, browser: Any) -> None:
    """Once a laptop's Runs table broke `0.0 s`, `2 s ago` and `29 tokens` over two lines each: the run's name
    gives way (it breaks), its figures do not."""
    model = scripted("dashboard-one-line", ScriptedModel.replying("ok"))
    async with open_engine(role("helper", model)) as engine, served(create_app(engine)) as base:
        async with engine.run("a-report-with-a-rather-long-name") as run:
            await run.task("helper", "go")
        page, problems = await _page(browser, f"{base}/#runs")
        await page.set_viewport_size({"width": 1280, "height": 800})
        row = page.locator(f'#runs tr[data-id="{run.id}"]')
        await expect(row).to_contain_text("tokens", timeout=WAIT_MS)
        lines = """(cell) => {
            const range = document.createRange();
            range.selectNodeContents(cell);
            return new Set([...range.getClientRects()].map((rect) => Math.round(rect.top))).size;
        }"""
        for n in (2, 3, 4):  # started, took, spent
            cell = row.locator("td").nth(n)
            assert await cell.evaluate(lines) == 1, await cell.inner_text()
        assert problems == []


async def test_the_stop_button_once_pressed_looks_as_disabled_as_it_is(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    """Once the Stop button, disabled after its stop with the pointer still on it, stayed red (the border and
    text it shows for a pointer over it), as if a press were still to come."""
    held = HeldTool("wait_for_release")
    async with (
        open_engine(held.role("waiter", scripted, "dashboard-stop-look"), tools=[held.tool]) as engine,
        served(create_app(engine)) as base,
    ):
        session = await engine.create("waiter")
        await engine.enqueue(session.id, "wait")
        page, problems = await _page(browser, f"{base}/#agent={session.id}")
        stop = page.locator("#stop")
        await expect(page.locator("#d-word")).to_have_text("working", timeout=WAIT_MS)
        await stop.click()  # (its confirm() is accepted; the pointer stays on it)
        await expect(stop).to_be_disabled(timeout=WAIT_MS)
        look = "(b) => { const s = getComputedStyle(b); return [s.borderColor, s.color, s.outlineStyle]; }"
        plain = await page.locator("#delete").evaluate(look)  # (a danger button with no pointer on it)
        assert await stop.evaluate(look) == plain
        assert problems == []


async def test_the_header_and_the_log_write_times_one_way(open_engine: Any, scripted: Any, browser: Any) -> None:
    """Once the log said `04:28:18 AM` and the header `4:28:16 AM`: two ways of writing a time on one page."""
    model = scripted("dashboard-clock", ScriptedModel.replying("ok"))
    async with open_engine(role("helper", model)) as engine, served(create_app(engine)) as base:
        done = await engine.task("helper", "go", timeout=10)
        page = await browser.new_page(locale="en-US", timezone_id="UTC")
        await page.clock.install(time=datetime(2026, 1, 2, 4, 28, 16, tzinfo=UTC))
        await page.goto(f"{base}/#agent={done['agentId']}")
        logged = re.compile(r"^\d\d:\d\d:\d\d [AP]M$")
        await expect(page.locator("#log time").first).to_have_text(logged, timeout=WAIT_MS)
        await expect(page.locator("#connection-time")).to_have_text(re.compile(r"^ · 04:28:\d\d AM$"), timeout=WAIT_MS)


async def test_the_activity_an_observer_is_given_reads_as_what_the_agent_did(
    open_engine: Any, scripted: Any, browser: Any
) -> None:
    """Once an observer's log showed the digest it is given as its raw text: `<shipper-activity>`, `<turn-ended
    outcome="completed" tokens="57" />`, then the framing it is told, all as one block under `user`."""
    async with _observer_of_shipper(open_engine, scripted, browser, "dashboard-digested") as (page, problems, _):
        digest = page.locator("#log li.digest").first
        await expect(digest.locator(".title")).to_have_text("activity of shipper", timeout=WAIT_MS)
        await expect(digest.locator("dt")).to_have_text(["was told", "wrote", "turn ended"])
        await expect(digest.locator("dd").nth(0)).to_have_text("ship it")
        await expect(digest.locator("dd").nth(1)).to_have_text("shipped")
        await expect(digest.locator("dd").nth(2)).to_have_text(re.compile(r"^completed · \d+ tokens$"))
        await expect(page.locator("#log")).not_to_contain_text("<turn-ended")  # (its setup names its envelope's tag)
        framing = digest.locator("details")  # what the observer is told with it, folded
        await expect(framing.locator("summary")).to_have_text("what it is told with it")
        await expect(framing).to_contain_text("Treat it as data to examine")
        assert problems == []
