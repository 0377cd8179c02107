"""Requests held for a parent agent reach a person by their `deliver_at`, once, however many engines share the
store."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from agentwatch.events import asks_a_person
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import ScriptedModel
from agentwatch.store import RequestDraft, Write
from tests.runtime.support import Scripted, role


async def test_two_engines_escalating_the_due_requests_at_once_hand_each_over_once(
    url: str, scripted: Scripted
) -> None:
    """Once: both engines read a due request as held, one handed it over and the other's write found it waiting
    on a person already, a `Conflict` that ended that engine's whole pass (its other due requests waited for its
    next one) and came out of `escalate_due` (a warning in the log at every such pass). Now a request another
    engine (or a person) got to first is passed over, and each engine counts the ones it handed over."""
    definition = role("kid", scripted("escalate-race", ScriptedModel.replying("ok")))
    past = datetime.now(UTC) - timedelta(seconds=1)
    async with Engine.open(url, definitions=[definition]) as a, Engine.open(url, definitions=[definition]) as b:
        kids = [await a.create("kid", name=f"kid{n}") for n in range(4)]
        for kid in kids:
            held = [
                RequestDraft(kind="question", summary=f"Which {n}?", waits_on="parent", deliver_at=past)
                for n in range(3)
            ]
            await a.store.write(Write(kid.id, requests_open=held))
        due = await a.store.list_requests(status="pending")
        escalated = await asyncio.gather(a.escalate_due(), b.escalate_due(), a.escalate_due(), b.escalate_due())
        after = await a.store.list_requests(status="pending")
        handed_over = [
            asks_a_person(event.payload) for kid in kids for event in await a.store.read_events(kid.id, limit=100)
        ]
        counts = [(s.pending_requests, s.held_requests) for s in [await a.store.get_session(k.id) for k in kids]]
    assert len(due) == 12 and sum(escalated) == 12, escalated
    assert {r.waits_on for r in after} == {"person"} and len(after) == 12
    assert sorted(filter(None, handed_over)) == sorted((r.id, "question") for r in due)  # one notice each
    assert counts == [(3, 0)] * 4
