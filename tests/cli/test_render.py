"""What `agentwatch run` prints while a turn streams: each kind of event a person should see has a line."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from rich.console import Console

from agentwatch.cli._render import LivePrinter
from agentwatch.events import (
    AssistantMessage,
    Event,
    EventId,
    ModelReroute,
    ObserverStateChanged,
    Payload,
    RuntimeRetry,
    SessionId,
    TurnId,
)


def printed(*payloads: Payload | tuple[str, Payload]) -> list[str]:
    """What the printer prints of `payloads` (each of session ses_1, or of the session a pair names)."""
    out = io.StringIO()
    printer = LivePrinter(Console(file=out, width=200, color_system=None), names={"ses_1": "coder"})
    for seq, given in enumerate(payloads, start=1):
        session, payload = given if isinstance(given, tuple) else ("ses_1", given)
        at = datetime(2026, 12, 1, tzinfo=UTC)
        printer.on_event(
            session, Event.trusted(EventId(f"evt_{seq}"), SessionId(session), seq, 0, at, TurnId("trn_1"), payload)
        )
    return out.getvalue().splitlines()


def test_a_retry_and_a_reroute_are_shown_as_they_happen() -> None:
    lines = printed(
        RuntimeRetry(message="429 Too Many Requests from openai", attempt=2, delay_seconds=1.5),
        ModelReroute(from_model="openai:gpt-4o", to_model="anthropic:claude-haiku-4-5", reason="still failing"),
    )
    assert lines == [
        "coder ↻ retry 2 in 1.5s: 429 Too Many Requests from openai",
        "coder ⇄ openai:gpt-4o → anthropic:claude-haiku-4-5: still failing",
    ]


def test_a_tail_row_whose_detail_is_its_title_says_it_once() -> None:
    """Once: `hitl.requested Pick one Pick one` (a question's title and detail are the same text)."""
    from agentwatch.cli._views import tail_line

    row = {
        "type": "hitl.requested",
        "title": "Pick one",
        "detail": "Pick one",
        "status": "",
        "at": "2026-12-04T10:11:12",
    }
    assert tail_line(row).count("Pick one") == 1
    other = {**row, "detail": "options: a, b"}
    assert "Pick one" in tail_line(other) and "options: a, b" in tail_line(other)


def test_an_observer_agents_lines_are_named_by_its_type_and_whom_it_watches() -> None:
    """Once: prefixed with the last 8 characters of its id (an observer starts no sub-task to learn a name from)."""
    lines = printed(
        ObserverStateChanged(observer_type="reviewer", observer_session_id="ses_01observer73gxx3wh", state="armed"),
        ("ses_01observer73gxx3wh", AssistantMessage(text="Looks fine so far.")),
    )
    assert lines == ["reviewer on coder Looks fine so far."]
