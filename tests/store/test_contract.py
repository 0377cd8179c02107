"""The `Store` contract, run unchanged against every backend (see the `store` fixture)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from agentwatch.errors import Conflict, InvalidArgument, InvalidCursor, NotFound, UserError
from agentwatch.events import (
    AssistantMessage,
    ContentDelta,
    NewEvent,
    Origin,
    PageCursor,
    RequestOpened,
    TurnStarted,
    Usage,
    UserMessage,
)
from agentwatch.store import (
    SCHEMA_VERSION,
    InputDraft,
    JournalEntry,
    ObserverRef,
    RequestClose,
    RequestDraft,
    RunDraft,
    RunFilter,
    RunPatch,
    SessionDraft,
    SessionFilter,
    SessionPatch,
    SessionRecord,
    SpanDraft,
    SpanPatch,
    Store,
    UsageEntry,
    Write,
)
from agentwatch.store._sql import tenth_of
from agentwatch.store.records import TERMINAL_STATUSES


def said(text: str) -> NewEvent:
    return NewEvent(UserMessage(text=text))


async def names(store: Store, where: SessionFilter, **kwargs: object) -> list[str]:
    page = await store.list_sessions(where, limit=100, **kwargs)  # type: ignore[arg-type]
    return [session.name for session in page.items]


# -- sessions ---------------------------------------------------------------------------------------------


async def test_created_session_reads_back_whole(store: Store) -> None:
    draft = SessionDraft(
        name="nova",
        role="chat",
        scope="42:bot1",
        display_name="Nova",
        group_key="hb:digest",
        origin=Origin(kind="chat", ref="42:bot1"),
        settings={"grant": ["read"]},
    )
    created = await store.create_session(draft)

    assert created.id.startswith("ses_")
    assert created.conversation_id.startswith("cnv_")
    assert created.created_at == created.updated_at == created.last_active_at
    assert created.created_at.tzinfo is not None
    assert created == SessionRecord(
        id=created.id,
        name="nova",
        role="chat",
        scope="42:bot1",
        display_name="Nova",
        group_key="hb:digest",
        origin=Origin(kind="chat", ref="42:bot1"),
        settings={"grant": ["read"]},
        created_at=created.created_at,
        updated_at=created.created_at,
        last_active_at=created.created_at,
        conversation_id=created.conversation_id,
    )
    assert await store.get_session(created.id) == created
    [conversation] = await store.list_conversations(created.id)
    assert (conversation.id, conversation.ended_at, conversation.end_reason) == (created.conversation_id, None, None)


async def test_unknown_session_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound, match="ses_nope"):
        await store.get_session("ses_nope")
    with pytest.raises(NotFound):
        await store.read_events("ses_nope")
    with pytest.raises(NotFound):
        await store.append("ses_nope", [said("hi")])


async def test_name_is_unique_among_live_sessions_of_a_scope(store: Store) -> None:
    first = await store.create_session(SessionDraft(name="nova", role="chat"))
    with pytest.raises(Conflict, match=r"'nova'.*global scope") as caught:
        await store.create_session(SessionDraft(name="nova", role="other"))
    assert caught.value.code == "conflict"
    scoped = await store.create_session(SessionDraft(name="nova", role="chat", scope="42:bot1"))
    with pytest.raises(Conflict, match="scope '42:bot1'"):
        await store.create_session(SessionDraft(name="nova", role="chat", scope="42:bot1"))
    await store.create_session(SessionDraft(name="nova", role="chat", scope="43:bot1"))

    await store.soft_delete(first.id, reap_at=datetime.now(UTC) + timedelta(days=1))
    reused = await store.create_session(SessionDraft(name="nova", role="chat"))

    assert reused.id not in (first.id, scoped.id)
    assert await names(store, SessionFilter(name="nova"), sort="name") == ["nova", "nova", "nova"]


async def test_draft_with_an_existing_id_conflicts(store: Store) -> None:
    await store.create_session(SessionDraft(id="ses_fixed", name="a", role="chat"))
    with pytest.raises(Conflict, match="ses_fixed"):
        await store.create_session(SessionDraft(id="ses_fixed", name="b", role="chat"))


async def test_update_session_writes_only_the_fields_given(store: Store) -> None:
    session = await store.create_session(
        SessionDraft(name="nova", role="chat", model_ref="test:a", settings={"repo": "x"})
    )
    updated = await store.update_session(
        session.id, SessionPatch(status="running", current_turn_id="trn_1", context_fill={"state": "measured"})
    )

    assert updated == session.model_copy(
        update={
            "status": "running",
            "current_turn_id": "trn_1",
            "context_fill": {"state": "measured"},
            "updated_at": updated.updated_at,
            "last_active_at": updated.last_active_at,
        }
    )
    assert updated.updated_at > session.updated_at
    assert await store.get_session(session.id) == updated


async def test_a_store_says_whether_it_applies_writes_in_the_order_queued(store: Store) -> None:
    # SQLite's one writer thread takes every write from one queue; PostgreSQL's pool writes sessions at once.
    assert store.writes_in_order is store.url.startswith("sqlite:")


async def test_write_without_touch_keeps_last_active_at(store: Store) -> None:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    await store.write(Write(session.id, session=SessionPatch(last_text="hi"), touch=False))
    after = await store.get_session(session.id)
    assert (after.last_text, after.last_active_at) == ("hi", session.last_active_at)
    assert after.updated_at > session.updated_at


async def test_filters_are_all_anded(store: Store) -> None:
    now = datetime.now(UTC)
    parent = await store.create_session(SessionDraft(name="Boss-Alpha", role="boss", boss=True, source="cli"))
    await store.create_session(
        SessionDraft(name="alpha-worker", role="worker", parent_id=parent.id, feature="jobs", run_id="run_1")
    )
    await store.create_session(SessionDraft(name="beta_worker", role="worker", scope="42:bot1", group_key="g"))
    watcher = await store.create_session(
        SessionDraft(name="watcher", display_name="Night Watch", role="observer", is_observer=True)
    )
    await store.update_session(watcher.id, SessionPatch(status="completed", interception={"by": "ana"}))

    assert await names(store, SessionFilter(role=["worker"]), sort="name") == ["alpha-worker", "beta_worker"]
    assert await names(store, SessionFilter(role=["worker"], feature=["jobs"])) == ["alpha-worker"]
    assert await names(store, SessionFilter(q="ALPHA"), sort="name") == ["Boss-Alpha", "alpha-worker"]
    assert await names(store, SessionFilter(q="_")) == ["beta_worker"]  # `_` is a character, not a wildcard
    assert await names(store, SessionFilter(q="a%")) == []
    assert await names(store, SessionFilter(q="night w")) == ["watcher"]  # the display name too
    assert await names(store, SessionFilter(parent_id=parent.id)) == ["alpha-worker"]
    assert await names(store, SessionFilter(run_id="run_1")) == ["alpha-worker"]
    assert await names(store, SessionFilter(scope="42:bot1", group_key="g")) == ["beta_worker"]
    assert await names(store, SessionFilter(scope="42:bot1", role=["boss"])) == []
    assert await names(store, SessionFilter(is_observer=True)) == ["watcher"]
    assert await names(store, SessionFilter(intercepted=True)) == ["watcher"]
    assert len(await names(store, SessionFilter(intercepted=False))) == 3
    assert await names(store, SessionFilter(status=["completed", "failed"])) == ["watcher"]
    assert await names(store, SessionFilter(source=["cli"])) == ["Boss-Alpha"]
    assert await names(store, SessionFilter(ids=[parent.id, watcher.id]), sort="name") == ["Boss-Alpha", "watcher"]
    assert await names(store, SessionFilter(ids=[])) == []
    assert len(await names(store, SessionFilter(active_from=now - timedelta(minutes=1)))) == 4
    assert await names(store, SessionFilter(active_to=now - timedelta(minutes=1))) == []


async def test_every_sort_puts_the_boss_then_live_sessions_first(store: Store) -> None:
    created = []
    for name, status in [("delta", "completed"), ("alpha", "idle"), ("echo", "failed"), ("bravo", "running")]:
        session = await store.create_session(SessionDraft(name=name, role="chat"))
        created.append(await store.update_session(session.id, SessionPatch(status=status)))
    deleted = await store.create_session(SessionDraft(name="charlie", role="chat"))
    await store.soft_delete(deleted.id, reap_at=datetime.now(UTC) + timedelta(days=1))
    boss = await store.create_session(SessionDraft(name="zulu", role="boss", boss=True, status="completed"))

    assert await names(store, SessionFilter()) == ["zulu", "bravo", "alpha", "echo", "delta"]
    assert await names(store, SessionFilter(), sort="oldest") == ["zulu", "alpha", "bravo", "delta", "echo"]
    assert await names(store, SessionFilter(), sort="name") == ["zulu", "alpha", "bravo", "delta", "echo"]
    assert await names(store, SessionFilter(), sort="status") == ["zulu", "alpha", "bravo", "delta", "echo"]
    assert await names(store, SessionFilter(deleted=True), sort="name") == [
        "zulu",
        "alpha",
        "bravo",
        "charlie",
        "delta",
        "echo",
    ]
    assert boss.boss
    assert [session.status in TERMINAL_STATUSES for session in created] == [True, False, True, False]


@pytest.mark.parametrize("sort", ["newest", "oldest", "name", "status"])
async def test_keyset_pages_see_every_row_once_while_rows_are_added(store: Store, sort: str) -> None:
    originals = set()
    for i in range(23):
        session = await store.create_session(SessionDraft(name=f"s{i:02d}", role="chat"))
        if i % 3 == 0:
            await store.update_session(session.id, SessionPatch(status="completed"))
        originals.add(session.id)
    seen: list[str] = []
    cursor = None
    added = 0
    while True:
        page = await store.list_sessions(SessionFilter(), sort=sort, limit=4, cursor=cursor)  # type: ignore[arg-type]
        assert len(page.items) <= 4
        seen.extend(session.id for session in page.items)
        # Rows arrive between pages, sorting before and after the cursor.
        await store.create_session(SessionDraft(name=f"a-new{added}", role="chat"))
        await store.create_session(SessionDraft(name=f"z-new{added}", role="chat", status="failed"))
        added += 1
        if page.next_cursor is None:
            break
        cursor = page.next_cursor

    assert len(seen) == len(set(seen))
    assert originals <= set(seen)


@pytest.mark.parametrize("sort", ["newest", "oldest"])
async def test_activity_listings_page_in_exact_time_order_within_and_across_tenths(store: Store, sort: str) -> None:
    # PostgreSQL's listing indexes hold the tenth of a second of the activity, the pages order by the exact
    # time within it: sessions active in the same tenth and in different ones page through in time order.
    created = [await store.create_session(SessionDraft(name=f"s{i}", role="chat")) for i in range(12)]
    for round_ in range(3):
        for session in created[round_::3]:
            await store.append(session.id, [said("hi")])
        await asyncio.sleep(0.12)  # into another tenth
    listed: list[SessionRecord] = []
    cursor = None
    while True:
        page = await store.list_sessions(SessionFilter(), sort=sort, limit=2, cursor=cursor)  # type: ignore[arg-type]
        listed += page.items
        if page.next_cursor is None:
            break
        cursor = page.next_cursor

    expected = sorted(listed, key=lambda s: (s.last_active_at, s.id), reverse=sort == "newest")
    assert [s.id for s in listed] == [s.id for s in expected]
    assert sorted(s.id for s in listed) == sorted(s.id for s in created)
    assert len({tenth_of(s.last_active_at) for s in listed}) >= 3  # each round in a later tenth than the one before


async def test_last_page_has_no_cursor_and_an_exact_page_ends_cleanly(store: Store) -> None:
    for i in range(4):
        await store.create_session(SessionDraft(name=f"s{i}", role="chat"))
    first = await store.list_sessions(SessionFilter(), sort="name", limit=2)
    second = await store.list_sessions(SessionFilter(), sort="name", limit=2, cursor=first.next_cursor)

    assert [s.name for s in first.items + second.items] == ["s0", "s1", "s2", "s3"]
    assert second.next_cursor is None
    assert (await store.list_sessions(SessionFilter(), limit=100)).next_cursor is None


async def test_counts_equal_the_filtered_listings(store: Store) -> None:
    for i, status in enumerate(["idle", "idle", "running", "failed", "completed", "completed"]):
        session = await store.create_session(SessionDraft(name=f"s{i}", role="chat" if i % 2 else "worker"))
        await store.update_session(session.id, SessionPatch(status=status))  # type: ignore[arg-type]
    gone = await store.create_session(SessionDraft(name="gone", role="chat"))
    await store.soft_delete(gone.id, reap_at=datetime.now(UTC))

    for where in [SessionFilter(), SessionFilter(role=["chat"]), SessionFilter(deleted=True), SessionFilter(q="s")]:
        listed = (await store.list_sessions(where, limit=100)).items
        expected: dict[str, int] = {}
        for session in listed:
            expected[session.status] = expected.get(session.status, 0) + 1
        assert await store.count_sessions(where) == expected
    assert await store.count_sessions(SessionFilter()) == {"completed": 2, "failed": 1, "idle": 2, "running": 1}


async def test_page_cursors_are_bound_to_their_query(store: Store) -> None:
    for i in range(3):
        await store.create_session(SessionDraft(name=f"s{i}", role="chat"))
    page = await store.list_sessions(SessionFilter(), sort="name", limit=1)
    assert page.next_cursor is not None

    with pytest.raises(InvalidCursor, match="other filters"):
        await store.list_sessions(SessionFilter(), sort="newest", limit=1, cursor=page.next_cursor)
    with pytest.raises(InvalidCursor, match="other filters"):
        await store.list_sessions(SessionFilter(role=["chat"]), sort="name", limit=1, cursor=page.next_cursor)
    with pytest.raises(InvalidCursor, match="not a page cursor"):
        await store.list_sessions(SessionFilter(), sort="name", cursor="garbage")
    tampered = page.next_cursor[:-3] + ("AAA" if not page.next_cursor.endswith("AAA") else "BBB")
    with pytest.raises(InvalidCursor, match="altered"):
        await store.list_sessions(SessionFilter(), sort="name", cursor=tampered)
    wrong_shape = PageCursor(PageCursor.decode(page.next_cursor).query, ("x",)).encode()
    with pytest.raises(InvalidCursor, match="session listing position"):
        await store.list_sessions(SessionFilter(), sort="name", cursor=wrong_shape)


@pytest.mark.parametrize("limit", [0, 101, -1])
async def test_listing_limit_outside_1_to_100_is_refused(store: Store, limit: int) -> None:
    with pytest.raises(InvalidArgument, match="1 to 100") as caught:
        await store.list_sessions(SessionFilter(), limit=limit)
    assert caught.value.code == "invalid_argument"


# -- events ---------------------------------------------------------------------------------------------


async def test_seqs_start_at_one_without_gaps(store: Store) -> None:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    first = await store.append(session.id, [said("a"), said("b")])
    second = await store.append(session.id, [NewEvent(AssistantMessage(text="c"), turn_id="trn_1")])
    stored = await store.read_events(session.id)

    assert [e.seq for e in first + second] == [1, 2, 3]
    assert stored == first + second
    assert stored[2].turn_id == "trn_1"
    assert all(e.conversation_id == session.conversation_id for e in stored)
    assert (await store.get_session(session.id)).last_seq == 3


async def test_reading_events_after_before_by_type_and_conversation(store: Store) -> None:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    await store.append(
        session.id, [said(str(i)) if i % 2 else NewEvent(AssistantMessage(text=str(i))) for i in range(10)]
    )
    cleared = await store.write(Write(session.id, [said("after clear")], new_conversation="clear"))
    new_conversation = cleared[0].conversation_id

    after = await store.read_events(session.id, after_seq=7, limit=2)
    assert [e.seq for e in after] == [8, 9]
    assert [e.seq for e in await store.read_events_backward(session.id, limit=3)] == [11, 10, 9]
    assert [e.seq for e in await store.read_events_backward(session.id, before_seq=3)] == [2, 1]
    assert [e.seq for e in await store.read_events(session.id, types=["message.assistant"])] == [1, 3, 5, 7, 9]
    assert [e.seq for e in await store.read_events(session.id, types=["message.user"], after_seq=6)] == [8, 10, 11]
    assert [e.seq for e in await store.read_events(session.id, conversation_id=new_conversation)] == [11]
    assert len(await store.read_events(session.id, conversation_id=session.conversation_id)) == 10
    assert await store.read_events(session.id, after_seq=11) == []
    backward = await store.read_events_backward(session.id, types=["message.user"], conversation_id=new_conversation)
    assert [(e.seq, e.payload) for e in backward] == [(11, UserMessage(text="after clear"))]


async def test_get_event_by_id(store: Store) -> None:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    [event] = await store.append(session.id, [NewEvent(TurnStarted(model="test:a"), turn_id="trn_1")])
    assert await store.get_event(session.id, event.id) == event
    with pytest.raises(NotFound, match="evt_nope"):
        await store.get_event(session.id, "evt_nope")


@pytest.mark.parametrize("limit", [0, 10_001])
async def test_event_read_limit_outside_1_to_10000_is_refused(store: Store, limit: int) -> None:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    with pytest.raises(InvalidArgument, match="1 to 10000"):
        await store.read_events(session.id, limit=limit)
    with pytest.raises(InvalidArgument, match="1 to 10000"):
        await store.read_events_backward(session.id, limit=limit)


async def test_ephemeral_events_are_refused_and_nothing_is_written(store: Store) -> None:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    delta = NewEvent(ContentDelta(part="text", index=0, delta="he"))
    with pytest.raises(UserError, match=r"'content\.delta' events are ephemeral") as caught:
        await store.write(Write(session.id, [said("kept?"), delta], session=SessionPatch(status="running")))
    assert caught.value.code == "user_error"
    assert await store.read_events(session.id) == []
    assert await store.get_session(session.id) == session


async def test_a_write_naming_an_unknown_request_commits_nothing(store: Store) -> None:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    bad = Write(
        session.id,
        [said("hello")],
        session=SessionPatch(status="running", last_text="x"),
        inputs_add=[InputDraft(text="queued")],
        requests_open=[RequestDraft(kind="question", summary="why?")],
        requests_close=[RequestClose(request_id="req_unknown", status="resolved", answer="yes")],
        usage=[UsageEntry(usage=Usage(input_tokens=5, cost_usd=0.1))],
        messages=[{"role": "user"}],
    )
    with pytest.raises(NotFound, match="req_unknown"):
        await store.write(bad)

    assert await store.get_session(session.id) == session
    assert await store.read_events(session.id) == []
    assert await store.list_inputs(session.id) == []
    assert await store.list_requests(session_id=session.id, status=None) == []
    assert await store.read_messages(session.id) == []
    assert await store.read_messages(session.conversation_id) == []
    assert await store.usage_totals([session.id]) == {session.id: Usage()}
    # The session still takes writes, numbered from 1.
    assert [e.seq for e in await store.append(session.id, [said("again")])] == [1]


async def test_expect_status_guards_a_write(store: Store) -> None:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    with pytest.raises(Conflict, match="is 'idle'"):
        await store.write(Write(session.id, [said("x")], expect_status=["running"]))
    [event] = await store.write(
        Write(session.id, [said("x")], session=SessionPatch(status="running"), expect_status=["idle"])
    )
    assert event.seq == 1
    assert (await store.get_session(session.id)).status == "running"


async def _at_once(store: Store, write: Callable[[str], Write]) -> tuple[list[str], list[str]]:
    """Six writes `write(by)` at once (by: p0..p5): the `by` of those that went through, and the messages of
    those refused with `Conflict`."""

    async def attempt(by: str) -> str:
        try:
            await store.write(write(by))
        except Conflict as exc:
            return exc.message
        return by

    outcomes = await asyncio.gather(*(attempt(f"p{n}") for n in range(6)))
    won = [outcome for outcome in outcomes if outcome.startswith("p")]
    return won, [outcome for outcome in outcomes if outcome not in won]


async def test_expect_unheld_lets_exactly_one_of_concurrent_take_overs_win(store: Store) -> None:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))

    def take(by: str) -> Write:
        return Write(session.id, [said(by)], session=SessionPatch(interception={"by": by}), expect_unheld=True)

    won, refused = await _at_once(store, take)
    assert len(won) == 1
    assert all(f"is already held by {won[0]}" in message for message in refused)
    assert (await store.get_session(session.id)).interception == {"by": won[0]}
    assert [e.payload.text for e in await store.read_events(session.id)] == won  # the losers wrote nothing
    await store.write(Write(session.id, session=SessionPatch(interception=None)))  # handed back: free again
    await store.write(Write(session.id, session=SessionPatch(interception={"by": "ada"}), expect_unheld=True))
    assert (await store.get_session(session.id)).interception == {"by": "ada"}


async def test_delete_until_deletes_with_the_writes_events_and_only_once(store: Store) -> None:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    reap_at = datetime.now(UTC) + timedelta(days=1)

    won, refused = await _at_once(store, lambda by: Write(session.id, [said(by)], delete_until=reap_at, touch=False))
    assert len(won) == 1
    assert all("is deleted already" in message for message in refused)
    deleted = await store.get_session(session.id)
    assert deleted.deleted_at is not None and deleted.reap_at == reap_at
    assert [e.payload.text for e in await store.read_events(session.id)] == won  # the others wrote nothing
    assert deleted.last_seq == 1


async def test_new_conversation_archives_the_old_one_with_its_reason(store: Store) -> None:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    await store.write(Write(session.id, [said("one")], messages=[{"m": 1}, {"m": 2}]))
    compacted = await store.write(
        Write(session.id, [said("two")], new_conversation="compact", messages=[{"summary": "1 and 2"}])
    )
    cleared = await store.write(Write(session.id, [said("three")], new_conversation="clear"))
    conversations = await store.list_conversations(session.id)

    assert [(c.end_reason, c.ended_at is not None) for c in conversations] == [
        ("compact", True),
        ("clear", True),
        (None, False),
    ]
    assert conversations[0].id == session.conversation_id
    assert [compacted[0].conversation_id, cleared[0].conversation_id] == [c.id for c in conversations[1:]]
    assert (await store.get_session(session.id)).conversation_id == conversations[2].id
    assert await store.read_messages(conversations[0].id) == [{"m": 1}, {"m": 2}]
    assert await store.read_messages(conversations[1].id) == [{"summary": "1 and 2"}]
    assert await store.read_messages(conversations[2].id) == []


async def test_messages_append_in_order(store: Store) -> None:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    for turn in range(3):
        await store.write(Write(session.id, messages=[{"turn": turn, "part": "request"}, {"turn": turn, "part": "r"}]))
    assert await store.read_messages(session.conversation_id) == [
        {"turn": turn, "part": part} for turn in range(3) for part in ("request", "r")
    ]


# -- inbox, requests, ledger ----------------------------------------------------------------------------


async def test_inbox_counts_pending_inputs(store: Store) -> None:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    await store.write(
        Write(
            session.id,
            inputs_add=[
                InputDraft(text="one", origin=Origin(kind="person")),
                InputDraft(text="two", origin=Origin(kind="session", ref="ses_lead"), run_id="run_1"),
                InputDraft(text="note", meta=True),
            ],
        )
    )
    inputs = await store.list_inputs(session.id)
    assert [(i.text, i.meta, i.taken_at, i.run_id) for i in inputs] == [
        ("one", False, None, None),
        ("two", False, None, "run_1"),
        ("note", True, None, None),
    ]
    assert inputs[0].origin == Origin(kind="person")
    assert (await store.get_session(session.id)).pending_inputs == 3

    await store.write(Write(session.id, inputs_take=[inputs[0].id, inputs[1].id]))
    assert [i.text for i in await store.list_inputs(session.id)] == ["note"]
    assert [i.taken_at is not None for i in await store.list_inputs(session.id, pending_only=False)] == [
        True,
        True,
        False,
    ]
    assert (await store.get_session(session.id)).pending_inputs == 1

    with pytest.raises(Conflict, match="already taken"):
        await store.write(Write(session.id, inputs_take=[inputs[0].id, inputs[2].id]))
    with pytest.raises(NotFound, match="inp_nope"):
        await store.write(Write(session.id, inputs_take=["inp_nope"]))
    assert (await store.get_session(session.id)).pending_inputs == 1


async def test_inbox_counts_observer_reports_apart_from_inputs(store: Store) -> None:
    """A report of an observer waits in the inbox like an input, but is no work given to the session: it is
    counted in `pending_reports`, from its queueing to the turn that takes it."""
    session = await store.create_session(SessionDraft(name="vega", role="chat"))
    report = InputDraft(text="a report", origin=Origin(kind="observer", ref="observer:critic"), meta=True)
    await store.write(Write(session.id, inputs_add=[InputDraft(text="work"), report]))
    stored = await store.get_session(session.id)
    assert (stored.pending_inputs, stored.pending_reports, stored.inbox_size) == (1, 1, 2)

    work, queued = await store.list_inputs(session.id)
    await store.write(Write(session.id, inputs_take=[queued.id]))
    stored = await store.get_session(session.id)
    assert (stored.pending_inputs, stored.pending_reports) == (1, 0)
    await store.write(Write(session.id, inputs_add=[report], inputs_take=[work.id]))
    stored = await store.get_session(session.id)
    assert (stored.pending_inputs, stored.pending_reports) == (0, 1)


async def test_requests_move_through_their_lifecycle_with_counters(store: Store) -> None:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    deliver_at = datetime(2030, 1, 1, tzinfo=UTC)
    await store.write(
        Write(
            session.id,
            [NewEvent(RequestOpened(request_id="req_person", kind="question", summary="which?"))],
            requests_open=[
                RequestDraft(id="req_person", kind="question", summary="which?", questions=["a or b?"]),
                RequestDraft(id="req_held", kind="grant", summary="may I?", waits_on="parent", deliver_at=deliver_at),
                RequestDraft(id="req_moot", kind="approval", summary="run rm?", body={"tool_call": {"id": "t1"}}),
            ],
        )
    )
    counters = await store.get_session(session.id)
    assert (counters.pending_requests, counters.held_requests) == (2, 1)
    held = await store.get_request("req_held")
    assert (held.status, held.waits_on, held.deliver_at, held.session_id) == (
        "pending",
        "parent",
        deliver_at,
        session.id,
    )
    assert (await store.get_request("req_moot")).body == {"tool_call": {"id": "t1"}}
    # The held ones, and of those the ones due (the engine's pass asks for exactly these, however many others wait).
    assert [r.id for r in await store.list_requests(waits_on="person")] == ["req_moot", "req_person"]
    assert [r.id for r in await store.list_requests(waits_on="parent")] == ["req_held"]
    assert await store.list_requests(waits_on="parent", due_by=deliver_at - timedelta(seconds=1)) == []
    assert [r.id for r in await store.list_requests(waits_on="parent", due_by=deliver_at)] == ["req_held"]

    await store.write(Write(session.id, requests_escalate=["req_held"]))
    after_escalate = await store.get_session(session.id)
    assert (after_escalate.pending_requests, after_escalate.held_requests) == (3, 0)

    await store.write(
        Write(
            session.id,
            requests_close=[
                RequestClose(request_id="req_person", status="resolved", answer={"pick": "a"}, by="ana"),
                RequestClose(request_id="req_moot", status="dismissed"),
            ],
        )
    )
    answered = await store.get_request("req_person")
    assert (answered.status, answered.answer, answered.answered_by) == ("resolved", {"pick": "a"}, "ana")
    assert answered.closed_at is not None
    assert [r.id for r in await store.list_requests(session_id=session.id)] == ["req_held"]
    assert [r.id for r in await store.list_requests(status="dismissed")] == ["req_moot"]
    # Oldest first; requests opened by the same write come in id order.
    assert [r.id for r in await store.list_requests(session_id=session.id, status=None)] == [
        "req_held",
        "req_moot",
        "req_person",
    ]
    final = await store.get_session(session.id)
    assert (final.pending_requests, final.held_requests) == (1, 0)

    with pytest.raises(Conflict, match="already resolved"):
        await store.write(Write(session.id, requests_close=[RequestClose(request_id="req_person", status="dismissed")]))
    with pytest.raises(Conflict, match="waits on a person"):
        await store.write(Write(session.id, requests_escalate=["req_held"]))
    with pytest.raises(NotFound):
        await store.get_request("req_nope")


async def test_ledger_totals_survive_a_reap(store: Store) -> None:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    other = await store.create_session(SessionDraft(name="other", role="worker"))
    await store.write(
        Write(
            session.id,
            usage=[
                UsageEntry(
                    turn_id="trn_1",
                    model="test:a",
                    usage=Usage(input_tokens=10, output_tokens=5, requests=1, cost_usd=0.25),
                ),
                UsageEntry(usage=Usage(input_tokens=1, output_tokens=1, requests=1, cost_usd=0.5)),
            ],
        )
    )
    await store.write(Write(other.id, usage=[UsageEntry(usage=Usage(input_tokens=7, requests=1))]))
    charged = await store.get_session(session.id)
    assert (charged.tokens, charged.cost_usd) == (17, 0.75)

    await store.reap([session.id])

    totals = await store.usage_totals([session.id, other.id, "ses_never"])
    assert totals == {
        session.id: Usage(input_tokens=11, output_tokens=6, requests=2, cost_usd=0.75),
        other.id: Usage(input_tokens=7, requests=1),
        "ses_never": Usage(),
    }
    now = datetime.now(UTC)
    hour = timedelta(hours=1)
    assert await store.usage_between(now - hour, now + hour) == Usage(
        input_tokens=18, output_tokens=6, requests=3, cost_usd=0.75
    )
    assert await store.usage_between(now - hour, now + hour, roles=["worker"]) == Usage(input_tokens=7, requests=1)
    assert await store.usage_between(now + hour, now + 2 * hour) == Usage()


async def test_soft_delete_hides_and_reap_removes_the_transcript(store: Store) -> None:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    await store.write(
        Write(
            session.id,
            [said("hi")],
            inputs_add=[InputDraft(text="queued")],
            requests_open=[RequestDraft(id="req_1", kind="question", summary="?")],
            messages=[{"m": 1}],
        )
    )
    await store.set_observer_ref(ObserverRef(observed_session_id=session.id, observer_type="critic"))
    keep = await store.create_session(SessionDraft(name="keep", role="chat"))
    now = datetime.now(UTC)

    deleted = await store.soft_delete(session.id, reap_at=now + timedelta(seconds=1))

    assert deleted.deleted_at is not None
    assert deleted.reap_at == now + timedelta(seconds=1)
    assert await store.get_session(session.id) == deleted
    assert await names(store, SessionFilter()) == ["keep"]
    assert await names(store, SessionFilter(deleted=True), sort="name") == ["keep", "nova"]
    assert await store.due_for_reap(now) == []
    assert await store.due_for_reap(now + timedelta(seconds=2)) == [session.id]

    assert await store.reap([session.id, "ses_unknown"]) == 1

    with pytest.raises(NotFound):
        await store.get_session(session.id)
    with pytest.raises(NotFound):
        await store.read_events(session.id)
    with pytest.raises(NotFound):
        await store.get_request("req_1")
    assert await store.read_messages(session.conversation_id) == []
    assert await store.list_inputs(session.id, pending_only=False) == []
    assert await store.get_observer_ref(session.id) is None
    assert await store.due_for_reap(now + timedelta(seconds=2)) == []
    assert await store.get_session(keep.id) == keep
    assert await store.reap([]) == 0


async def test_due_for_reap_reads_on_past_a_session_it_gave(store: Store) -> None:
    now = datetime.now(UTC)
    deleted = []
    for name, ago in (("a", 3), ("b", 2), ("c", 2), ("d", 1)):
        session = await store.create_session(SessionDraft(name=name, role="chat"))
        deleted.append(await store.soft_delete(session.id, reap_at=now - timedelta(hours=ago)))
    ordered = [s.id for s in sorted(deleted, key=lambda s: (s.reap_at, s.id))]
    assert await store.due_for_reap(now) == ordered
    first, second = [await store.get_session(session_id) for session_id in ordered[:2]]
    assert first.reap_at is not None and second.reap_at is not None
    assert await store.due_for_reap(now, after=(first.reap_at, first.id), limit=2) == ordered[1:3]
    assert await store.due_for_reap(now, after=(second.reap_at, second.id)) == ordered[2:]  # the same reap_at too
    assert await store.due_for_reap(now - timedelta(minutes=90), after=(second.reap_at, second.id)) == ordered[2:3]


# -- observer refs, runs ---------------------------------------------------------------------------------


async def test_observer_ref_is_replaced_and_keeps_its_tombstone(store: Store) -> None:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    assert await store.get_observer_ref(session.id) is None

    paired = await store.set_observer_ref(
        ObserverRef(observed_session_id=session.id, observer_type="critic", observer_session_id="ses_obs")
    )
    assert await store.get_observer_ref(session.id) == paired
    assert paired.updated_at is not None
    assert not paired.stopped

    stopped = await store.set_observer_ref(
        ObserverRef(observed_session_id=session.id, observer_type="critic", stopped=True)
    )
    stored = await store.get_observer_ref(session.id)
    assert stored == stopped
    assert (stored.stopped, stored.stopped_at is not None, stored.observer_session_id) == (True, True, None)

    with pytest.raises(NotFound):
        await store.set_observer_ref(ObserverRef(observed_session_id="ses_nope", observer_type="critic"))


async def test_reaping_a_deleted_observer_leaves_its_ref_as_a_tombstone(store: Store) -> None:
    async def paired(name: str) -> tuple[str, str]:
        observed = await store.create_session(SessionDraft(name=name, role="chat"))
        draft = SessionDraft(name=f"{name}-critic", role="critic", parent_id=observed.id, is_observer=True)
        ref = ObserverRef(observed_session_id=observed.id, observer_type="critic")
        return observed.id, (await store.create_session(draft, observer_ref=ref)).id

    (deleted, deleted_observer), (lost, lost_observer), (stopped, stopped_observer) = [
        await paired(name) for name in ("deleted", "lost", "stopped")
    ]
    lost_ref = await store.get_observer_ref(lost)
    now = datetime.now(UTC)
    gone = await store.soft_delete(deleted_observer, reap_at=now)
    earlier = datetime(2020, 1, 1, tzinfo=UTC)
    await store.set_observer_ref(
        ObserverRef(
            observed_session_id=stopped,
            observer_type="critic",
            observer_session_id=stopped_observer,
            stopped=True,
            stopped_at=earlier,
        )
    )
    await store.soft_delete(stopped_observer, reap_at=now)

    assert await store.reap([deleted_observer, lost_observer, stopped_observer]) == 3

    # deleted (a person's stop): the ref says it was stopped, and when
    ref = await store.get_observer_ref(deleted)
    assert ref is not None
    assert (ref.stopped, ref.stopped_at, ref.observer_session_id) == (True, gone.deleted_at, deleted_observer)
    # reaped, never deleted: nothing says it was stopped (its context is lost)
    assert await store.get_observer_ref(lost) == lost_ref
    # a tombstone already: kept as it was
    ref = await store.get_observer_ref(stopped)
    assert ref is not None and (ref.stopped, ref.stopped_at) == (True, earlier)
    # each kept as its pairing's tombstone too
    for observed in (deleted, stopped):
        ref = await store.get_observer_ref(observed)
        assert ref is not None
        assert await store.get_observer_tombstone(observed, "critic") == ref.model_copy(update={"updated_at": None})
    assert await store.get_observer_tombstone(lost, "critic") is None


async def test_a_tombstone_holds_for_its_pairing_after_the_ref_names_another_observer_type(store: Store) -> None:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    assert await store.get_observer_tombstone(session.id, "critic") is None
    earlier = datetime(2020, 1, 1, tzinfo=UTC)
    stopped = await store.set_observer_ref(
        ObserverRef(
            observed_session_id=session.id,
            observer_type="critic",
            observer_session_id="ses_critic",
            stopped=True,
            stopped_at=earlier,
        )
    )
    draft = SessionDraft(name="nova-linter", role="linter", parent_id=session.id, is_observer=True)
    linter = await store.create_session(
        draft, observer_ref=ObserverRef(observed_session_id=session.id, observer_type="linter")
    )
    ref = await store.get_observer_ref(session.id)
    assert ref is not None and (ref.observer_type, ref.observer_session_id, ref.stopped) == ("linter", linter.id, False)
    tombstone = stopped.model_copy(update={"updated_at": None})
    assert await store.get_observer_tombstone(session.id, "critic") == tombstone
    assert await store.get_observer_tombstone(session.id, "linter") is None
    # a second stop of the pairing keeps the first one's tombstone
    await store.set_observer_ref(ObserverRef(observed_session_id=session.id, observer_type="critic", stopped=True))
    assert await store.get_observer_tombstone(session.id, "critic") == tombstone
    # gone with the observed session
    assert await store.reap([session.id]) == 1
    assert await store.get_observer_tombstone(session.id, "critic") is None


async def test_runs_spans_and_journal(store: Store) -> None:
    run = await store.create_run(RunDraft(kind="heartbeat", entity="heartbeat:digest", input={"tick": 1}))
    assert await store.get_run(run.id) == run
    assert (run.status, run.input, run.ended_at) == ("running", {"tick": 1}, None)

    ended_at = datetime.now(UTC)
    done = await store.update_run(
        run.id, RunPatch(status="failed", status_reason="boom", ended_at=ended_at, error={"x": 1})
    )
    assert done == run.model_copy(
        update={"status": "failed", "status_reason": "boom", "ended_at": ended_at, "error": {"x": 1}}
    )

    phase = await store.open_span(SpanDraft(run_id=run.id, kind="phase", label="gather", ref={"session": "ses_1"}))
    step = await store.open_span(
        SpanDraft(run_id=run.id, kind="step", label="fetch", parent_span_id=phase.id, attempt=2, attempt_of="spn_0")
    )
    closed = await store.update_span(step.id, SpanPatch(status="completed", ended_at=ended_at, cost_usd=0.1, tokens=9))
    assert closed == step.model_copy(update={"status": "completed", "ended_at": ended_at, "cost_usd": 0.1, "tokens": 9})
    assert await store.list_spans(run.id) == [phase, closed]

    first = await store.append_journal(JournalEntry(run_id=run.id, kind="retry", message="again", detail={"n": 1}))
    second = await store.append_journal(JournalEntry(run_id=run.id, kind="pause", message="waiting"))
    assert await store.read_journal(run.id) == [first, second]
    assert await store.read_journal(run.id, limit=1) == [first]

    with pytest.raises(NotFound, match="run_nope"):
        await store.get_run("run_nope")
    with pytest.raises(NotFound, match="spn_nope"):
        await store.update_span("spn_nope", SpanPatch(status="x"))
    with pytest.raises(InvalidArgument):
        await store.read_journal(run.id, limit=0)


async def test_runs_listed_newest_first_and_what_their_turns_billed(store: Store) -> None:
    first = await store.create_run(RunDraft(kind="workflow", entity="workflow:report"))
    other = await store.create_run(RunDraft(kind="heartbeat", entity="heartbeat:digest"))
    second = await store.create_run(RunDraft(kind="workflow", entity="workflow:report", status="completed"))
    assert [r.id for r in await store.list_runs(RunFilter())] == [second.id, other.id, first.id]
    assert [r.id for r in await store.list_runs(RunFilter(entity="workflow:report"))] == [second.id, first.id]
    assert [r.id for r in await store.list_runs(RunFilter(kind="heartbeat"))] == [other.id]
    assert [r.id for r in await store.list_runs(RunFilter(status=("completed",)))] == [second.id]
    assert [r.id for r in await store.list_runs(RunFilter(started_before=second.started_at))] == [other.id, first.id]
    page = await store.list_runs(RunFilter(), limit=2)
    rest = await store.list_runs(RunFilter(), limit=2, after=(page[-1].started_at, page[-1].id))
    assert [r.id for r in page + rest] == [second.id, other.id, first.id]
    assert await store.run_entities() == ["heartbeat:digest", "workflow:report"]  # (each once)
    assert await store.run_entities(limit=1) == ["heartbeat:digest"]
    assert await store.run_kinds() == ["heartbeat", "workflow"]  # (each once)
    assert await store.run_kinds(limit=1) == ["heartbeat"]

    session = await store.create_session(SessionDraft(name="researcher", role="researcher", run_id=first.id))
    at = datetime.now(UTC)
    billed = [
        UsageEntry(
            turn_id="trn_a", run_id=first.id, role="researcher", usage=Usage(input_tokens=10, cost_usd=0.5), at=at
        ),
        UsageEntry(
            turn_id="trn_a",
            run_id=first.id,
            role="researcher",
            usage=Usage(output_tokens=5),
            at=at + timedelta(seconds=2),
        ),
        UsageEntry(
            turn_id="trn_b",
            run_id=first.id,
            role="researcher",
            usage=Usage(input_tokens=1),
            at=at + timedelta(seconds=3),
        ),
        UsageEntry(turn_id="trn_c", run_id=other.id, usage=Usage(input_tokens=100)),
    ]
    await store.write(Write(session.id, usage=billed))
    turns = await store.run_usage(first.id)
    assert [(t.turn_id, t.usage.total_tokens, t.usage.cost_usd, t.role) for t in turns] == [
        ("trn_a", 15, 0.5, "researcher"),
        ("trn_b", 1, None, "researcher"),
    ]
    assert (turns[0].first_at, turns[0].last_at) == (at, at + timedelta(seconds=2))
    assert await store.run_usage("run_nope") == []
    claimed = await store.create_run(RunDraft(id="run_tick_1", kind="heartbeat", entity="heartbeat:digest"))
    with pytest.raises(Conflict, match="run_tick_1"):
        await store.create_run(RunDraft(id="run_tick_1", kind="heartbeat", entity="heartbeat:digest"))
    assert await store.get_run("run_tick_1") == claimed
    totals = await store.run_totals([first.id, other.id, second.id])
    assert {k: (v.total_tokens, v.cost_usd) for k, v in totals.items()} == {
        first.id: (16, 0.5),
        other.id: (100, None),
        second.id: (0, None),
    }
    with pytest.raises(InvalidArgument):
        await store.list_runs(RunFilter(), limit=0)


async def test_a_run_that_is_not_renewed_lapses_and_is_ended_interrupted_with_its_open_spans(store: Store) -> None:
    now = datetime.now(UTC)
    soon, later = now + timedelta(seconds=5), now + timedelta(seconds=60)
    lapsing = await store.create_run(RunDraft(kind="workflow", entity="workflow:a", expires_at=soon))
    renewed = await store.create_run(RunDraft(kind="workflow", entity="workflow:b", expires_at=soon))
    forever = await store.create_run(RunDraft(kind="workflow", entity="workflow:c"))
    open_span = await store.open_span(SpanDraft(run_id=lapsing.id, kind="task", label="t"))
    done = await store.open_span(SpanDraft(run_id=lapsing.id, kind="task", label="u"))
    await store.update_span(done.id, SpanPatch(status="completed", ended_at=now))
    await store.renew_runs([renewed.id], later)
    assert await store.end_lapsed_runs(now) == []
    assert await store.end_lapsed_runs(soon + timedelta(seconds=1)) == [lapsing.id]
    ended = await store.get_run(lapsing.id)
    assert (ended.status, ended.status_reason, ended.ended_at) == (
        "interrupted",
        "its process stopped before the run ended",
        soon + timedelta(seconds=1),
    )
    assert {(s.label, s.status) for s in await store.list_spans(lapsing.id)} == {
        ("t", "interrupted"),
        ("u", "completed"),
    }
    assert (await store.get_run(renewed.id)).status == (await store.get_run(forever.id)).status == "running"
    assert open_span.id in {s.id for s in await store.list_spans(lapsing.id) if s.status == "interrupted"}
    await store.update_run(renewed.id, RunPatch(status="completed", ended_at=now))
    await store.renew_runs([renewed.id], now - timedelta(seconds=1))  # an ended run is not moved
    assert await store.end_lapsed_runs(later + timedelta(seconds=1)) == []


async def test_runs_that_ended_long_ago_are_reaped_with_their_spans_and_journal(store: Store) -> None:
    now = datetime.now(UTC)
    old, recent = now - timedelta(days=40), now - timedelta(hours=2)

    async def ended(status: str, at: datetime) -> str:
        run = await store.create_run(RunDraft(kind="heartbeat", entity="heartbeat:h"))
        await store.open_span(SpanDraft(run_id=run.id, kind="task", label="t"))
        await store.append_journal(JournalEntry(run_id=run.id, kind="note", message="hi"))
        await store.end_run(run.id, RunPatch(status=status, ended_at=at))
        return run.id

    old_done, old_failed = await ended("completed", old), await ended("failed", old)
    recent_done, recent_skipped, old_skipped = (
        await ended("completed", recent),
        await ended("skipped", recent),
        await ended("skipped", now - timedelta(days=2)),
    )
    running = (await store.create_run(RunDraft(kind="workflow", entity="workflow:w"))).id

    assert await store.reap_runs(now - timedelta(days=30), now - timedelta(days=1), limit=2) == 2
    assert await store.reap_runs(now - timedelta(days=30), now - timedelta(days=1)) == 1
    assert await store.reap_runs(now - timedelta(days=30), now - timedelta(days=1)) == 0
    for gone in (old_done, old_failed, old_skipped):
        with pytest.raises(NotFound):
            await store.get_run(gone)
        assert await store.list_spans(gone) == [] and await store.read_journal(gone) == []
    kept = {run.id for run in await store.list_runs(RunFilter())}
    assert kept == {recent_done, recent_skipped, running}
    assert len(await store.list_spans(recent_done)) == 1 and len(await store.read_journal(recent_skipped)) == 1
    # Each kind by its own time: skipped ticks kept longer than other runs stay past the others' time.
    assert await store.reap_runs(now - timedelta(hours=1), now - timedelta(days=30)) == 1  # recent_done only
    assert {run.id for run in await store.list_runs(RunFilter())} == {recent_skipped, running}


async def test_ending_a_run_ends_its_open_spans_once(store: Store) -> None:
    run = await store.create_run(RunDraft(kind="workflow", entity="workflow:a"))
    open_span = await store.open_span(SpanDraft(run_id=run.id, kind="task", label="t"))
    done = await store.open_span(SpanDraft(run_id=run.id, kind="task", label="u"))
    at = datetime.now(UTC)
    await store.update_span(done.id, SpanPatch(status="completed", ended_at=at))
    assert await store.end_run(run.id, RunPatch(status="failed", status_reason="boom", ended_at=at)) is True
    ended = await store.get_run(run.id)
    assert (ended.status, ended.status_reason, ended.ended_at) == ("failed", "boom", at)
    spans = {s.id: (s.status, s.ended_at) for s in await store.list_spans(run.id)}
    assert spans == {open_span.id: ("failed", at), done.id: ("completed", at)}
    assert await store.end_run(run.id, RunPatch(status="completed")) is False  # ended already: left as it is
    assert (await store.get_run(run.id)).status == "failed"


async def test_info_reports_schema_and_sizes(store: Store, backend: str) -> None:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    await store.append(session.id, [said("a"), said("b")])
    info = await store.info()

    assert (info.backend, info.schema_version, info.code_schema_version, info.sessions, info.events) == (
        backend,
        SCHEMA_VERSION,
        SCHEMA_VERSION,
        1,
        2,
    )
    assert (info.path_bytes is not None and info.path_bytes > 0) == (backend == "sqlite")
    assert info.url == store.url


async def test_a_failing_write_among_concurrent_ones_fails_alone(store: Store) -> None:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    bad_close = [RequestClose(request_id="req_unknown", status="dismissed")]
    writes = [
        Write(session.id, [said(f"bad {i}")], requests_close=bad_close)
        if i % 4 == 0
        else Write(session.id, [said(str(i))])
        for i in range(20)
    ]

    outcomes = await asyncio.gather(*(store.write(write) for write in writes), return_exceptions=True)

    failed = [i for i, outcome in enumerate(outcomes) if isinstance(outcome, NotFound)]
    assert failed == [0, 4, 8, 12, 16]
    stored = await store.read_events(session.id)
    assert sorted(event.payload.text for event in stored) == sorted(str(i) for i in range(20) if i % 4)  # type: ignore[union-attr]
    assert [event.seq for event in stored] == list(range(1, 16))
