"""The webhook of `[notify]` (`agentwatch.notify`): told over real HTTP each time an agent starts waiting on a
person (a question, an approval, a held request handed to a person), and when asked of observer reports and
failed turns; signed when a secret is set, tried again when it fails, and said on the agent when it could not be
told; never told of what waits on a parent agent."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agentwatch import notify
from agentwatch.config import load_config
from agentwatch.errors import InvalidArgument
from agentwatch.events import RuntimeNotice
from agentwatch.notify import SIGNATURE_HEADER, Notifications, signature
from agentwatch.runtime.extensions import default_extensions
from agentwatch.runtime.models import CallTool, Fail, Reply, ScriptedModel
from agentwatch.watchers import RuleContext, observer_agents
from tests.runtime.support import HeldTool, OpenEngine, Scripted, asking_child, role, until


class Webhook:
    """A webhook receiver on 127.0.0.1 that answers each POST with the next status of `statuses` (then 204)."""

    def __init__(self, *statuses: int, delay: float = 0.0, hold_first: threading.Event | None = None) -> None:
        """`delay`: seconds each answer waits; `hold_first`: the first POST is answered once it is set."""
        self.received: list[tuple[dict[str, Any], bytes, dict[str, str]]] = []
        self.statuses = list(statuses)
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                hook.received.append((json.loads(body), body, {k.lower(): v for k, v in self.headers.items()}))
                if hold_first is not None and len(hook.received) == 1:
                    hold_first.wait(30)
                time.sleep(delay)
                self.send_response(hook.statuses.pop(0) if hook.statuses else 204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/agentwatch"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    hook = Webhook()
    yield hook
    hook.close()


@pytest.fixture(autouse=True)
def _short_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notify, "FIRST_WAIT_SECONDS", 0.05)


def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


def _deletes(ctx: Any) -> Any:
    return Reply(ctx.tool_results[0].output) if ctx.tool_results else CallTool("delete_file", {"path": "a.txt"})


def _asks(ctx: Any) -> Any:
    if not ctx.tool_results:
        return CallTool("ask_user", {"question": "Which branch?", "options": ["main", "dev"]})
    return Reply(f"Using {ctx.tool_results[0].output}.")


async def test_a_question_and_an_approval_are_each_told_once_signed(
    open_engine: OpenEngine, scripted: Scripted, webhook: Webhook
) -> None:
    cleaner = role(
        "cleaner", scripted("notify-cleaner", ScriptedModel(function=_deletes)), tools=("delete_file",),
        approval_tools=("delete_file",),
    )  # fmt: skip
    asker = role("asker", scripted("notify-asker", ScriptedModel(function=_asks)), tools=("ask_user",))
    notifications = Notifications(webhook.url, secret="s3cret")
    async with open_engine(cleaner, asker, tools=[delete_file], extensions=[notifications]) as engine:
        approval = await engine.task("cleaner", "Clean up.", timeout=10)
        question = await engine.task("asker", "Go on.", timeout=10)
        await until(lambda: len(webhook.received) == 2)
        await engine.answer(str(question["pendingHitl"]["hitlId"]), "dev")  # type: ignore[index]
        await engine.wait(str(question["agentId"]), 10)
        await asyncio.sleep(0.2)  # (an answer is no new wait: nothing more is sent)

    assert len(webhook.received) == 2
    told = {document["kind"]: (document, body, headers) for document, body, headers in webhook.received}
    document, body, headers = told["approval"]
    assert document["agentId"] == approval["agentId"] and document["role"] == "cleaner"
    assert document["requestId"] == approval["pendingHitl"]["hitlId"]  # type: ignore[index]
    assert document["event"] == "request.waiting" and document["since"]
    assert (
        document["text"] == f"{document['name']} ({approval['agentId']}) waits for your approval: {document['summary']}"
    )
    assert headers[SIGNATURE_HEADER.lower()] == signature("s3cret", body)
    assert headers["content-type"] == "application/json"
    document, body, headers = told["choice"]  # (a question with options)
    assert (document["agentId"], document["options"]) == (question["agentId"], ["main", "dev"])
    assert document["text"] == f"{document['name']} ({question['agentId']}) asks you: Which branch?"
    assert headers[SIGNATURE_HEADER.lower()] == signature("s3cret", body)


async def test_a_request_held_for_the_parent_is_told_only_once_a_person_has_it(
    open_engine: OpenEngine, scripted: Scripted, webhook: Webhook
) -> None:
    asker = scripted("notify-kid", ScriptedModel(function=_asks))
    busy = HeldTool("busy")
    async with open_engine(
        role("kid", asker, tools=("ask_user",)),
        busy.role("lead", scripted, "notify-lead"),
        tools=[busy.tool],
        extensions=[Notifications(webhook.url)],
    ) as engine:
        kid = await asking_child(engine, busy)
        snapshot = await engine.snapshot(kid)
        await asyncio.sleep(0.2)
        assert webhook.received == []  # held for its parent: no person is asked yet
        await engine.escalate(str(snapshot["pendingHitl"]["hitlId"]))  # type: ignore[index]
        await until(lambda: len(webhook.received) == 1)
        busy.release.set()
    [(document, _, headers)] = webhook.received
    assert (document["agentId"], document["kind"]) == (kid.id, "choice")
    assert document["parentId"] == kid.parent_id is not None  # whose sub-agent asks
    assert SIGNATURE_HEADER.lower() not in headers  # no secret, no signature


async def test_a_failing_webhook_is_tried_three_times_then_said_on_the_agent(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    for statuses, tries, said in (((500, 503, 502), 3, "it answered 502 (3 tries)"), ((404,), 1, "it answered 404")):
        hook = Webhook(*statuses)
        model = scripted(f"notify-failing-{tries}", ScriptedModel(function=_asks))
        try:
            async with open_engine(
                role("asker", model, tools=("ask_user",)), extensions=[Notifications(hook.url)]
            ) as engine:
                question = await engine.task("asker", "Go on.", timeout=10)
                agent_id = str(question["agentId"])
                for _ in range(200):
                    if await _warnings(engine, agent_id):
                        break
                    await asyncio.sleep(0.02)
                [warning] = await _warnings(engine, agent_id)
                status = (await engine.store.get_session(agent_id)).status
        finally:
            hook.close()
        assert len(hook.received) == tries
        assert warning.startswith("the webhook was not told that request ") and warning.endswith(said)
        assert status == "awaiting_input"  # the agent is as it was


async def _warnings(engine: Any, agent_id: str) -> list[str]:
    events = await engine.store.read_events(agent_id, limit=100, types=["runtime.warning"])
    return [e.payload.message for e in events if isinstance(e.payload, RuntimeNotice)]


async def test_the_setting_turns_it_on_for_an_engine_with_the_default_extensions(
    open_engine: OpenEngine, scripted: Scripted, webhook: Webhook, tmp_path: Path
) -> None:
    (tmp_path / "agentwatch.toml").write_text(f'[notify]\nwebhook = "{webhook.url}"\n')
    asker = role("asker", scripted("notify-default", ScriptedModel(function=_asks)), tools=("ask_user",))
    async with open_engine(asker, extensions=None) as engine:
        question = await engine.task("asker", "Go on.", timeout=10)
        await until(lambda: len(webhook.received) == 1)
    assert webhook.received[0][0]["agentId"] == question["agentId"]


async def test_a_notice_the_webhook_is_slow_to_take_does_not_hold_up_the_next_ones(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once: notices went one at a time, so one the webhook held (up to 33 s with its tries) held every later one."""
    released = threading.Event()
    hook = Webhook(hold_first=released)
    asker = role("asker", scripted("notify-held", ScriptedModel(function=_asks)), tools=("ask_user",))
    try:
        async with open_engine(asker, extensions=[Notifications(hook.url)]) as engine:
            first = await engine.task("asker", "Go on.", timeout=10)
            await until(lambda: len(hook.received) == 1)  # the webhook holds it, unanswered
            second = await engine.task("asker", "And on.", timeout=10)
            await until(lambda: len(hook.received) == 2)  # told while the first still waits for its answer
            released.set()
    finally:
        released.set()
        hook.close()
    assert [document["agentId"] for document, _, _ in hook.received] == [first["agentId"], second["agentId"]]


async def test_a_webhook_that_does_not_answer_holds_a_closing_engine_a_bounded_time(
    open_engine: OpenEngine, scripted: Scripted, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(notify, "CLOSE_SECONDS", 0.3)
    hook = Webhook(delay=5)
    asker = role("asker", scripted("notify-slow", ScriptedModel(function=_asks)), tools=("ask_user",))
    try:
        async with open_engine(asker, extensions=[Notifications(hook.url)]) as engine:
            await engine.task("asker", "Go on.", timeout=10)
            await until(lambda: len(hook.received) == 1)
    finally:
        hook.close()
    # The close waited its 0.3 s for the notice being sent, not the webhook's 5 s (nor the 10 s a send may take).
    assert "1 notice(s) not sent as the engine closed" in caplog.text


async def test_off_without_a_webhook_and_a_bad_one_is_refused_with_what_to_write(
    open_engine: OpenEngine, tmp_path: Path
) -> None:
    notifications = Notifications()
    async with open_engine(extensions=[notifications]):
        assert not notifications.on
    with pytest.raises(InvalidArgument, match="is not an http"):
        load_config(tmp_path, env={"AGENTWATCH_NOTIFY_WEBHOOK": "hooks.example.com/x"})
    config = load_config(tmp_path, env={"AGENTWATCH_NOTIFY_WEBHOOK": "https://hooks.example.com/x"})
    assert config.notify.webhook == "https://hooks.example.com/x"


@pytest.mark.parametrize("ended_by", ["answer", "delete"])
async def test_a_request_that_stopped_waiting_while_its_notice_is_tried_again_is_neither_told_nor_said(
    open_engine: OpenEngine, scripted: Scripted, monkeypatch: pytest.MonkeyPatch, ended_by: str
) -> None:
    monkeypatch.setattr(notify, "FIRST_WAIT_SECONDS", 0.5)
    hook = Webhook(503, 503, 503)
    asker = role("asker", scripted(f"notify-ended-{ended_by}", ScriptedModel(function=_asks)), tools=("ask_user",))
    try:
        async with open_engine(asker, extensions=[Notifications(hook.url)]) as engine:
            question = await engine.task("asker", "Go on.", timeout=10)
            agent_id = str(question["agentId"])
            await until(lambda: len(hook.received) == 1)
            if ended_by == "answer":
                await engine.answer(str(question["pendingHitl"]["hitlId"]), "dev")  # type: ignore[index]
                await engine.wait(agent_id, 10)
            else:
                await engine.delete(agent_id)
            await asyncio.sleep(2)  # past the other tries
            warnings = await _warnings(engine, agent_id)
    finally:
        hook.close()
    # Nobody is asked of a question answered (or dismissed) meanwhile, and nothing is written after a deletion.
    assert len(hook.received) == 1
    assert warnings == []


@pytest.mark.parametrize("gone_by", ["delete", "reap"])
async def test_a_failure_whose_agent_went_while_its_notice_was_tried_writes_nothing_on_it(
    open_engine: OpenEngine,
    scripted: Scripted,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    gone_by: str,
) -> None:
    """Once: a report's or a failure's notice the webhook never took was said on its agent even after a person
    deleted it, and on one reaped meanwhile the warning's write failed with a traceback in the log."""
    monkeypatch.setattr(notify, "FIRST_WAIT_SECONDS", 0.5)
    hook = Webhook(503, 503, 503)
    failing = role("failing", scripted(f"notify-gone-{gone_by}", ScriptedModel([Fail("the model is down")])))
    try:
        async with open_engine(failing, extensions=[Notifications(hook.url, on=["failed"])]) as engine:
            failed = await engine.task("failing", "Try.", timeout=10)
            agent_id = str(failed["agentId"])
            await until(lambda: len(hook.received) == 1)
            await engine.delete(agent_id)
            if gone_by == "reap":
                await engine.store.reap([agent_id])
            await until(lambda: len(hook.received) == 3)
            await asyncio.sleep(0.3)  # (past the last try's answer)
            warnings = [] if gone_by == "reap" else await _warnings(engine, agent_id)
    finally:
        hook.close()
    assert failed["status"] == "failed" and warnings == []
    assert "could not send a notice" not in caplog.text


def _without_notifications() -> list[Any]:
    """The default extensions but the notifications (this test brings its own)."""
    return [extension for extension in default_extensions() if not isinstance(extension, Notifications)]


def _todo_guard(ctx: RuleContext) -> str | None:
    texts = [item.text for item in ctx.items if item.kind == "assistant_text"]
    return "You left a TODO in your answer." if any("TODO" in text for text in texts) else None


def _reporting_and_failing(scripted: Scripted) -> tuple[Any, Any, Any]:
    """A writer whose answer a rule observer reports on, an agent whose model fails, and an asker."""
    writer = role("writer", scripted("notify-todo", ScriptedModel(function=lambda ctx: Reply("Done. TODO: tests"))),
                  observer="todo-guard")  # fmt: skip
    failing = role("failing", scripted("notify-fails", ScriptedModel([Fail("the model is down")])))
    asker = role("asker", scripted("notify-asks", ScriptedModel(function=_asks)), tools=("ask_user",))
    return writer, failing, asker


async def test_observer_reports_and_failed_turns_are_told_when_asked_and_only_what_was_asked(
    open_engine: OpenEngine, scripted: Scripted, webhook: Webhook
) -> None:
    writer, failing, asker = _reporting_and_failing(scripted)
    async with open_engine(
        writer,
        failing,
        asker,
        extensions=[*_without_notifications(), Notifications(webhook.url, on=["report", "failed"])],
    ) as engine:
        observer_agents(engine).register_rule("todo-guard", _todo_guard)
        written = await engine.task("writer", "Write it.", timeout=10)
        failed = await engine.task("failing", "Try.", timeout=10)
        await engine.task("asker", "Go on.", timeout=10)  # waits on a person: not asked for
        await until(lambda: len(webhook.received) == 2)
        [turn_end] = await engine.store.read_events(str(failed["agentId"]), limit=50, types=["turn.ended"])
        await asyncio.sleep(0.2)
    assert len(webhook.received) == 2
    told = {document["event"]: document for document, _, _ in webhook.received}
    report = told["observer.report"]
    assert (report["agentId"], report["role"], report["observer"]) == (written["agentId"], "writer", "todo-guard")
    assert report["report"] == "You left a TODO in your answer."
    assert report["text"] == f"todo-guard on {report['name']} ({written['agentId']}): You left a TODO in your answer."
    failure = told["turn.failed"]
    assert (failure["agentId"], failure["role"], failure["turnId"]) == (failed["agentId"], "failing", turn_end.turn_id)
    assert "the model is down" in failure["error"] and failure["at"]
    assert failure["text"] == f"{failure['name']} ({failed['agentId']}): a turn failed: {failure['error']}"


async def test_by_default_only_what_waits_on_a_person_is_told_and_the_variable_adds_the_rest(
    open_engine: OpenEngine, scripted: Scripted, webhook: Webhook, tmp_path: Path
) -> None:
    writer, failing, asker = _reporting_and_failing(scripted)
    (tmp_path / "agentwatch.toml").write_text(f'[notify]\nwebhook = "{webhook.url}"\n')
    async with open_engine(writer, failing, asker, extensions=None) as engine:
        observer_agents(engine).register_rule("todo-guard", _todo_guard)
        written = await engine.task("writer", "Write it.", timeout=10)
        failed = await engine.task("failing", "Try.", timeout=10)
        for _ in range(200):
            if await engine.store.read_events(str(written["agentId"]), limit=50, types=["observer.report"]):
                break
            await asyncio.sleep(0.02)
        question = await engine.task("asker", "Go on.", timeout=10)
        await until(lambda: len(webhook.received) == 1)
        await asyncio.sleep(0.3)
        reported = await engine.store.read_events(str(written["agentId"]), limit=50, types=["observer.report"])
    assert reported and failed["status"] == "failed"  # both happened; the webhook was told of neither
    assert [(d["event"], d["agentId"]) for d, _, _ in webhook.received] == [("request.waiting", question["agentId"])]
    config = load_config(tmp_path, env={"AGENTWATCH_NOTIFY_ON": "failed, report"})
    assert config.notify.on == ("failed", "report")


def test_what_to_tell_is_checked_with_what_may_be_named() -> None:
    with pytest.raises(
        InvalidArgument, match="AGENTWATCH_NOTIFY_ON='reports': 'reports' is not one of waiting, report, failed"
    ):
        load_config(".", env={"AGENTWATCH_NOTIFY_ON": "reports"})
    with pytest.raises(InvalidArgument, match="name at least one of waiting, report, failed"):
        load_config(".", env={"AGENTWATCH_NOTIFY_ON": " , "})
