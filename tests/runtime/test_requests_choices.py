"""Choices: `ask_user` with options opens a `choice` request stored with its options before anyone sees it;
`current.pendingHitl` and the replay snapshot carry them; an answer must name an option; a request whose tool
call is interrupted (a stop, a turn cut off and continued) is dismissed with its own event. Also the drive
tools `agent_stop` and `agent_escalate`."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import JsonValue

from agentwatch.errors import InvalidArgument
from agentwatch.events import Event, RequestDismissed, RequestOpened, TurnEnded
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.runtime.tools.ask import check_choice
from agentwatch.store import SessionPatch, Write
from tests.runtime.support import HeldTool, OpenEngine, Scripted, asking_child, role


def _chooser(question: str, options: list[str], *, multiple: bool = False) -> ScriptedModel:
    def script(ctx: Any) -> Any:
        if not ctx.tool_results:
            return CallTool(
                "ask_user", {"question": question, "options": list[JsonValue](options), "multiple": multiple}
            )
        return Reply(f"Chosen: {ctx.tool_results[0].output}")

    return ScriptedModel(function=script)


async def _events(engine: Engine, session_id: str) -> list[Event]:
    return await engine.store.read_events(session_id, limit=1000)


class StoredFirst:
    """Checks, as each `request.opened` is shown, that the request is already stored with its options."""

    def __init__(self, db: Path) -> None:
        self.db = sqlite3.connect(db)
        self.seen: list[tuple[list[str] | None, bool, Any]] = []

    def on_event(self, thread_id: str, event: Event) -> None:
        if isinstance(event.payload, RequestOpened):
            row = self.db.execute("SELECT options FROM requests WHERE id = ?", (event.payload.request_id,)).fetchone()
            stored = json.loads(row[0]) if row and row[0] else None
            self.seen.append((event.payload.options, event.payload.multiple, stored))

    def on_subscribe(self, thread_id: str, request: object, snapshot: object) -> None:
        pass


async def test_a_choice_is_stored_shown_and_answered_with_one_of_its_options(
    open_engine: OpenEngine, scripted: Scripted, tmp_path: Path
) -> None:
    model = scripted("chooser", _chooser("Which colour?", ["red", "green", "blue"]))
    check = StoredFirst(tmp_path / "agentwatch.db")
    async with open_engine(role("chooser", model, tools=("ask_user",))) as engine:
        engine.start_with_observer(lambda _thread_id: check)
        snapshot = await engine.task("chooser", "pick a colour", timeout=10)
        assert (snapshot["status"], snapshot["word"]) == ("awaiting_input", "needs_you")
        hitl = snapshot["pendingHitl"]
        assert hitl["kind"] == "choice" and hitl["questions"] == ["Which colour?"]
        assert (hitl["options"], hitl["multiple"]) == (["red", "green", "blue"], False)
        assert check.seen == [(["red", "green", "blue"], False, ["red", "green", "blue"])]

        replay = await engine.subscribe(snapshot["agentId"], None)
        (pending,) = replay.pending_choices
        assert (pending.request_id, pending.kind, pending.options) == (
            hitl["hitlId"],
            "choice",
            ["red", "green", "blue"],
        )

        refused = await engine.call_tool("agent_answer", {"hitlId": hitl["hitlId"], "answer": "purple"})
        assert refused["error"]["code"] == "invalid_argument"
        assert "'red'" in refused["error"]["message"] and "'blue'" in refused["error"]["message"]
        assert (await engine.store.get_request(hitl["hitlId"])).status == "pending"  # nothing written

        answered = await engine.call_tool("agent_answer", {"hitlId": hitl["hitlId"], "answer": "green"})
        assert answered["status"] == "resolved"
        session, timed_out = await engine.wait(snapshot["agentId"], 10)
        assert (session.status, timed_out, session.last_text) == ("completed", False, "Chosen: green")
        assert (await engine.subscribe(session.id, None)).pending_choices == ()


async def test_a_multiple_choice_takes_a_list_of_distinct_options(open_engine: OpenEngine, scripted: Scripted) -> None:
    model = scripted("picker", _chooser("Which days?", ["mon", "tue", "wed"], multiple=True))
    async with open_engine(role("picker", model, tools=("ask_user",))) as engine:
        snapshot = await engine.task("picker", "pick days", timeout=10)
        hitl = snapshot["pendingHitl"]
        assert (hitl["options"], hitl["multiple"]) == (["mon", "tue", "wed"], True)
        (opened,) = [
            e.payload for e in await _events(engine, snapshot["agentId"]) if isinstance(e.payload, RequestOpened)
        ]
        assert opened.multiple is True
        for wrong in (["mon", "mon"], ["mon", "fri"], [], "fri", 3):
            refused = await engine.call_tool("agent_answer", {"hitlId": hitl["hitlId"], "answer": wrong})
            assert refused["error"]["code"] == "invalid_argument", wrong
        answered = await engine.call_tool("agent_answer", {"hitlId": hitl["hitlId"], "answer": ["mon", "wed"]})
        assert answered["status"] == "resolved"
        session, _ = await engine.wait(snapshot["agentId"], 10)
        assert session.status == "completed" and session.last_text is not None and "mon" in session.last_text


async def test_a_plain_question_takes_any_answer_and_shows_no_options(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    def script(ctx: Any) -> Any:
        if not ctx.tool_results:
            return CallTool("ask_user", {"question": "Name?", "options": ["", 3]})  # nothing usable: a question
        return Reply(f"Hello {ctx.tool_results[0].output}")

    model = scripted("namer", ScriptedModel(function=script))
    async with open_engine(role("namer", model, tools=("ask_user",))) as engine:
        snapshot = await engine.task("namer", "ask my name", timeout=10)
        hitl = snapshot["pendingHitl"]
        assert (hitl["kind"], hitl["options"], hitl["multiple"]) == ("question", None, None)
        answered = await engine.call_tool("agent_answer", {"hitlId": hitl["hitlId"], "answer": "Ada"})
        assert answered["status"] == "resolved"


async def test_stopping_dismisses_the_pending_choice_with_its_own_event(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    model = scripted("stopper", _chooser("Go on?", ["yes", "no"]))
    async with open_engine(role("stopper", model, tools=("ask_user",))) as engine:
        snapshot = await engine.task("stopper", "ask", timeout=10)
        hitl_id = snapshot["pendingHitl"]["hitlId"]
        stopped = await engine.call_tool("agent_stop", {"id": snapshot["agentId"]})
        assert stopped == {"id": snapshot["agentId"], "stopped": True, "status": "cancelled", "by": "a person"}
        events = await _events(engine, snapshot["agentId"])
        (dismissed,) = [e.payload for e in events if isinstance(e.payload, RequestDismissed)]
        assert dismissed.request_id == hitl_id and "stopped by a person" in dismissed.reason
        assert isinstance(events[-1].payload, TurnEnded) and events[-1].payload.outcome == "cancelled"
        assert (await engine.store.get_request(hitl_id)).status == "dismissed"
        assert (await engine.subscribe(snapshot["agentId"], None)).pending_choices == ()
        again = await engine.call_tool("agent_stop", {"id": snapshot["agentId"]})
        assert (again["stopped"], again["status"]) == (False, "cancelled")
        answer = await engine.call_tool("agent_answer", {"hitlId": hitl_id, "answer": "yes"})
        assert answer["error"]["code"] == "conflict"


async def test_a_turn_cut_off_with_a_pending_choice_dismisses_it_when_continued(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    model = scripted("cut", _chooser("Which?", ["a", "b"]))
    definition = role("cut", model, tools=("ask_user",))
    async with open_engine(definition) as engine:
        snapshot = await engine.task("cut", "ask", timeout=10)
        hitl_id = snapshot["pendingHitl"]["hitlId"]
        # The request was opened while the turn ran (as a tool server's would be) and the engine went away.
        await engine.store.write(Write(snapshot["agentId"], session=SessionPatch(status="running")))
    async with open_engine(definition) as engine:
        session, timed_out = await engine.wait(snapshot["agentId"], 10)
        assert not timed_out and session.status == "completed"
        events = await _events(engine, session.id)
        (dismissed,) = [e.payload for e in events if isinstance(e.payload, RequestDismissed)]
        assert dismissed.request_id == hitl_id and "interrupted" in dismissed.reason
        types = [e.type for e in events]
        assert types.index("request.dismissed") < types.index("turn.started", types.index("request.dismissed") - 1)
        assert (await engine.store.get_request(hitl_id)).status == "dismissed"
        assert session.pending_requests == 0


async def test_agent_escalate_hands_a_held_request_to_a_person(open_engine: OpenEngine, scripted: Scripted) -> None:
    kid_model = scripted("held-kid", _chooser("Which branch?", ["main", "dev"]))
    busy = HeldTool("busy")
    lead_role = busy.role("lead", scripted, "held-lead")
    async with open_engine(role("kid", kid_model, tools=("ask_user",)), lead_role, tools=[busy.tool]) as engine:
        kid = await asking_child(engine, busy)
        hitl_id = (await engine.snapshot(kid))["pendingHitl"]["hitlId"]
        escalated = await engine.call_tool("agent_escalate", {"hitlId": hitl_id})
        assert escalated == {"hitlId": hitl_id, "agentId": kid.id, "status": "pending", "waitsOn": "person"}
        kid = await engine.store.get_session(kid.id)
        assert (kid.pending_requests, kid.held_requests) == (1, 0)
        again = await engine.call_tool("agent_escalate", {"hitlId": hitl_id})
        assert again["error"]["code"] == "conflict" and "already waits on a person" in again["error"]["message"]
        busy.release.set()


@settings(max_examples=200, deadline=None)
@given(
    options=st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=5, unique=True),
    answer=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: st.lists(inner, max_size=4),
        max_leaves=6,
    ),
    multiple=st.booleans(),
)
def test_a_choice_accepts_exactly_its_options(options: list[str], answer: JsonValue, multiple: bool) -> None:
    chosen = answer if isinstance(answer, list) else [answer]
    if multiple:
        valid = bool(chosen) and all(isinstance(a, str) and a in options for a in chosen)
        valid = valid and len({str(a) for a in chosen}) == len(chosen)
    else:
        valid = isinstance(answer, str) and answer in options
    if valid:
        assert check_choice(options, multiple, answer) == (chosen if multiple else answer)
        return
    with pytest.raises(InvalidArgument) as refused:
        check_choice(options, multiple, answer)
    assert all(repr(o) in refused.value.message for o in options)  # the refusal lists every option
