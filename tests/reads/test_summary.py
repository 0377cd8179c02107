"""agent_summary over both backends: counts per status and word, lineages, holds, a window beside the one before
it, and each role's sessions."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from agentwatch.events import Usage
from agentwatch.reads.summary import SummaryArgs, summarize
from agentwatch.store import RequestDraft, Store, UsageEntry, Write

from .support import StoreView, make_session, roster


async def test_the_summary_counts_what_the_list_would_show(store: Store) -> None:
    view = StoreView(store, roster(fast=0.001, slow=None))
    await make_session(store, "done", role="slow", status="completed")
    failed = await make_session(store, "broke", role="slow", status="failed")
    await make_session(store, "quiet", role="fast", status="running")  # stuck once a millisecond has passed
    asker = await make_session(store, "asker", role="slow", status="awaiting_input")
    await store.write(Write(asker.id, requests_open=[RequestDraft(kind="question", summary="which?")], touch=False))
    await make_session(store, "first", role="slow", status="completed", group_key="nightly")
    await make_session(store, "second", role="slow", status="idle", group_key="nightly")  # the lineage's newest
    await make_session(store, "held", role="slow", status="idle", interception={"by": "ana"})
    gone = await make_session(store, "gone", role="slow", status="completed")
    deleted = Write(gone.id, touch=False, delete_until=datetime.now(UTC) + timedelta(days=1))
    await store.write(deleted)  # left out of every count
    spent = Usage(input_tokens=30, output_tokens=12, cost_usd=0.25)
    await store.write(Write(failed.id, usage=[UsageEntry(role="slow", usage=spent)], touch=False))
    await asyncio.sleep(0.01)  # past the fast role's threshold

    now = datetime.now(UTC)
    summary = await summarize(view, SummaryArgs(words=True, by="role"), now=now)
    assert summary["statuses"] == {"awaiting_input": 1, "completed": 2, "failed": 1, "idle": 2, "running": 1}
    assert (summary["total"], summary["working"], summary["intercepted"]) == (7, 0, 1)
    assert summary["lineages"] == 6  # the two of the `nightly` group are one
    assert summary["words"] == {"idle": 2, "working": 0, "needs_you": 1, "stuck": 1, "failed": 1, "done": 1}
    window = summary["window"]
    assert (window["started"], window["failed"], window["waiting"]) == (7, 1, 1)
    assert window["spend"] == {"costUsd": 0.25, "tokens": 42}
    assert (window["previous"]["started"], window["previous"]["spend"]["tokens"]) == (0, 0)
    assert {(r["role"], r["sessions"]) for r in summary["byRole"]} == {("fast", 1), ("slow", 6)}
    assert "words" not in await summarize(view, SummaryArgs(), now=now)

    # A week on, all of it lies in the window before: the window counts nothing, its previous everything.
    later = await summarize(view, SummaryArgs.model_validate({"window": "7d"}), now=now + timedelta(days=8))
    assert (later["window"]["started"], later["window"]["spend"]["tokens"]) == (0, 0)
    assert (later["window"]["previous"]["started"], later["window"]["previous"]["spend"]["tokens"]) == (7, 42)
    assert later["total"] == 7  # the counts by status are of now, not of a window
