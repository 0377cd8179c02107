"""agent_list over both backends: ordering, keyset paging over changing data, filters, groups, counts."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentwatch.events import new_id
from agentwatch.reads.listing import ListArgs, list_agents
from agentwatch.reads.words import WORDS, status_word
from agentwatch.store import RequestDraft, RunDraft, SessionPatch, Store, Write

from .support import StoreView, make_session, roster

SORTS = ["newest", "oldest", "name", "status"]


def view_of(store: Store) -> StoreView:
    # `fast` sessions count as stuck after a millisecond of quiet, `slow` ones after the project default.
    return StoreView(store, roster(fast=0.001, slow=None))


async def listed(view: StoreView, **args: Any) -> list[dict[str, Any]]:
    """Every row of a listing, page after page."""
    rows: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = await list_agents(view, ListArgs.model_validate({**args, "limit": 3, "cursor": cursor}))
        rows += page["agents"]
        cursor = page["nextCursor"]
        if cursor is None:
            return rows


@pytest.mark.parametrize("sort", SORTS)
async def test_boss_then_live_sessions_lead_every_sort(store: Store, sort: str) -> None:
    view = view_of(store)
    await make_session(store, "b-done", status="completed")
    await make_session(store, "a-idle", status="idle")
    await make_session(store, "c-failed", status="failed")
    await make_session(store, "d-running", status="running")
    await make_session(store, "z-boss", boss=True, status="completed")

    rows = await listed(view, sort=sort)

    names = [row["name"] for row in rows]
    assert names[0] == "z-boss"
    assert set(names[1:3]) == {"a-idle", "d-running"}
    expected_rest = {
        "newest": ["c-failed", "b-done"],
        "oldest": ["b-done", "c-failed"],
        "name": ["b-done", "c-failed"],
        "status": ["b-done", "c-failed"],  # completed < failed
    }[sort]
    assert names[3:] == expected_rest
    if sort == "name":
        assert names[1:3] == ["a-idle", "d-running"]


@pytest.mark.parametrize("sort", ["newest", "name"])
async def test_pages_over_changing_data_have_no_gaps_and_no_repeats(store: Store, sort: str) -> None:
    view = view_of(store)
    originals = [(await make_session(store, f"s{i:02}", status="completed")).id for i in range(10)]
    seen: list[str] = []
    cursor = None
    step = 0
    while True:
        page = await list_agents(view, ListArgs(sort=sort, limit=3, cursor=cursor))  # type: ignore[arg-type]
        seen += [row["id"] for row in page["agents"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
        # Between pages: new sessions arrive, and old ones change status without changing their sort keys.
        step += 1
        await make_session(store, f"new{step}", status="completed")
        await store.write(Write(originals[step], session=SessionPatch(status="failed"), touch=False))
    assert len(seen) == len(set(seen)), "a row was listed twice"
    assert set(originals) <= set(seen), "a row that stayed put was skipped"


async def test_a_cursor_only_works_under_the_same_filters_group_and_sort(store: Store) -> None:
    view = view_of(store)
    for i in range(3):
        await make_session(store, f"s{i}")
    page = await list_agents(view, ListArgs(limit=1))
    again = await list_agents(view, ListArgs(limit=2, cursor=page["nextCursor"]))  # a new page size is fine
    assert [row["name"] for row in again["agents"]] == ["s1", "s0"]
    with pytest.raises(Exception, match="other filters") as refused:
        await list_agents(view, ListArgs(limit=1, sort="name", cursor=page["nextCursor"]))
    assert refused.value.code == "invalid_argument"  # type: ignore[attr-defined]


async def test_filters_are_anded(store: Store) -> None:
    view = view_of(store)
    run = await store.create_run(RunDraft(kind="heartbeat", entity="heartbeat:digest"))
    parent = await make_session(store, "parent", role="slow")
    await make_session(store, "tick-1", role="slow", source="heartbeat", run_id=run.id, group_key="hb:digest")
    await make_session(store, "tick-2", role="fast", source="heartbeat", run_id=run.id, status="failed")
    await make_session(store, "child", role="slow", parent_id=parent.id, interception={"by": "ana"})

    async def names(**args: Any) -> list[str]:
        return sorted(row["name"] for row in await listed(view, **args))

    assert await names(entity="heartbeat:digest") == ["tick-1", "tick-2"]
    assert await names(entity="heartbeat:other") == []
    assert await names(run=run.id, role="slow") == ["tick-1"]
    assert await names(source=["heartbeat"], word=["failed"]) == ["tick-2"]
    assert await names(groupKey="hb:digest") == ["tick-1"]
    assert await names(parentId=parent.id) == ["child"]
    assert await names(intercepted=True) == ["child"]
    assert await names(q="TICK", status=["idle"]) == ["tick-1"]
    assert await names(window="1h") == ["child", "parent", "tick-1", "tick-2"]
    assert await names(**{"from": "2000-01-01T00:00:00Z", "to": "2001-01-01T00:00:00Z"}) == []


async def test_q_finds_a_part_of_a_name_as_written_and_a_to_z_in_any_case_on_every_backend(store: Store) -> None:
    """Once: `q` was lowered in full while the store's lower() folds A-Z alone, so `q: "NÖVA"`, the name's own
    spelling, missed the agent named NÖVA-1 (on both backends), and a display name folded differently on each."""
    view = view_of(store)
    for name in ("NÖVA-1", "Élan", "plain"):
        await make_session(store, name)
    await make_session(store, "shown", display_name="Ωmega")

    async def names(q: str) -> list[str]:
        return sorted(row["name"] for row in await listed(view, q=q))

    assert await names("NÖVA") == await names("nÖva-") == ["NÖVA-1"]
    assert await names("ÉLAN") == ["Élan"]
    assert await names("ΩMEGA") == await names("Ωmega") == ["shown"]
    assert await names("PLAIN") == ["plain"]
    assert await names("növa") == await names("ωmega") == []  # beyond A-Z, a letter's case is part of it


async def test_deleted_sessions_are_listed_only_when_asked(store: Store) -> None:
    view = view_of(store)
    gone = await make_session(store, "gone")
    await make_session(store, "kept")
    await store.soft_delete(gone.id, reap_at=datetime.now(UTC) + timedelta(days=1))
    assert [row["name"] for row in await listed(view)] == ["kept"]
    rows = await listed(view, deleted=True, sort="name")
    # The deleted one is not live, so the live one leads even under name order.
    assert [(row["name"], row["deletedAt"] is not None) for row in rows] == [("kept", False), ("gone", True)]


async def test_a_lineage_row_counts_its_sessions_and_shows_the_one_saying_the_word(store: Store) -> None:
    view = view_of(store)
    failed = await make_session(store, "tick-1", group_key="hb:digest", status="failed")
    await make_session(store, "tick-2", group_key="hb:digest", status="completed")
    newest = await make_session(store, "tick-3", group_key="hb:digest", status="completed")
    alone = await make_session(store, "alone", status="completed")

    rows = await listed(view, group="lineage")
    assert [(r["id"], r["groupKey"], r["sessionCount"]) for r in rows] == [
        (alone.id, None, 1),
        (newest.id, "hb:digest", 3),
    ]
    assert [entry["name"] for entry in rows[1]["recent"]] == ["tick-3", "tick-2", "tick-1"]

    failing = await listed(view, group="lineage", word=["failed"], counts=True)
    assert [(r["id"], r["word"], r["sessionCount"]) for r in failing] == [(failed.id, "failed", 3)]


async def test_a_run_row_groups_the_sessions_one_run_started(store: Store) -> None:
    view = view_of(store)
    run = await store.create_run(RunDraft(kind="workflow"))
    await make_session(store, "a", run_id=run.id)
    await make_session(store, "b", run_id=run.id)
    await make_session(store, "c")
    rows = await listed(view, group="run")
    assert {(r["runId"], r["sessionCount"]) for r in rows} == {(run.id, 2), (None, 1)}


async def test_a_session_waiting_on_a_person_says_needs_you_never_stuck(store: Store) -> None:
    view = view_of(store)
    waiting = await make_session(store, "asker", role="fast", status="running")
    await store.write(
        Write(waiting.id, requests_open=[RequestDraft(kind="question", summary="which colour?")], touch=False)
    )
    await make_session(store, "quiet", role="fast", status="running")
    await make_session(store, "busy", role="slow", status="running")
    await asyncio.sleep(0.01)  # past the fast role's threshold
    rows = {row["name"]: row for row in await listed(view)}
    assert {name: row["word"] for name, row in rows.items()} == {
        "asker": "needs_you",
        "quiet": "stuck",
        "busy": "working",
    }
    assert rows["asker"]["oldestRequest"]["summary"] == "which colour?"
    assert [row["name"] for row in await listed(view, word=["stuck"])] == ["quiet"]


statuses = st.sampled_from(["idle", "running", "awaiting_input", "completed", "failed", "cancelled", "interrupted"])
session_specs = st.lists(
    st.tuples(statuses, st.sampled_from(["fast", "slow", "gone"]), st.booleans(), st.sampled_from([None, "a", "b"])),
    min_size=1,
    max_size=12,
)


@settings(deadline=None, max_examples=12, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=session_specs, group=st.sampled_from(["none", "lineage"]), words=st.sampled_from([None, ["stuck"]]))
async def test_counts_equal_what_the_same_call_filtered_to_each_word_lists(
    store: Store, specs: list[tuple[str, str, bool, str | None]], group: str, words: list[str] | None
) -> None:
    view = view_of(store)
    prefix = new_id("ses")[-10:]  # each example lists only its own sessions
    for i, (status, role, waits, lineage) in enumerate(specs):
        session = await make_session(
            store, f"{prefix}-{i}", role=role, status=status, group_key=f"{prefix}{lineage}" if lineage else None
        )
        if waits:
            await store.write(Write(session.id, requests_open=[RequestDraft(kind="grant", summary="?")], touch=False))
    args: dict[str, Any] = {"q": prefix, "group": group, "word": words}
    # Past the fast role's threshold now, so no word changes between the counted call and the re-listings.
    await asyncio.sleep(0.005)

    first = await list_agents(view, ListArgs.model_validate({**args, "counts": True, "limit": 100}))
    counts = first["counts"]

    assert counts["total"] == len(await listed(view, **args))
    for word in WORDS:
        narrowed = await listed(view, **{**args, "word": [word] if words is None or word in words else words})
        expected = [row for row in narrowed if row["word"] == word] if words is None or word in words else []
        assert counts["words"][word] == len(expected), word
        if words is None:
            assert all(row["word"] == word for row in narrowed)
    if group == "none" and words is None:
        assert sum(counts["words"].values()) == counts["total"]  # each session says exactly one word
        moment = datetime.fromisoformat(counts["at"])
        for row in first["agents"]:
            session = await store.get_session(row["id"])
            assert row["word"] == status_word(session, now=moment, stuck_after=view.stuck_after(session.role))
