"""Grouped appends on every backend: concurrent appends of many sessions share transactions, one session's
writes commit in the order they were made even when nobody waits in between, and a write that fails in a
group fails alone."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import JsonValue

from agentwatch.errors import Conflict, NotFound
from agentwatch.events import CompletionFinished, NewEvent, Usage, UserMessage
from agentwatch.store import RunStore, SessionDraft, SessionPatch, Store, UsageEntry, Write, connect_store


def said(text: str) -> list[NewEvent]:
    return [NewEvent(UserMessage(text=text))]


async def test_one_sessions_writes_commit_in_the_order_they_were_made(store: Store) -> None:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    writes = [
        Write(session.id, said(str(n)), session=SessionPatch(last_text=str(n)) if n % 3 == 0 else None)
        for n in range(30)
    ]
    # Every write is handed over before any has committed: a pipelining caller.
    tasks = [asyncio.ensure_future(store.write(write)) for write in writes]
    results = await asyncio.gather(*tasks)

    assert [events[0].seq for events in results] == list(range(1, 31))
    stored = await store.read_events(session.id)
    assert [event.payload.text for event in stored] == [str(n) for n in range(30)]  # type: ignore[union-attr]
    assert (await store.get_session(session.id)).last_text == "27"


async def test_concurrent_appends_of_many_sessions_keep_every_seq_and_failure_apart(store: Store) -> None:
    sessions = [await store.create_session(SessionDraft(name=f"s{n}", role="chat")) for n in range(40)]

    async def one(index: int) -> list[object]:
        outcomes: list[object] = []
        for round_ in range(5):
            session_id = sessions[index].id if (index + round_) % 7 else "ses_unknown"
            expect = ["running"] if (index * round_) % 11 == 5 else None
            try:
                outcomes.append(await store.write(Write(session_id, said(f"{index}:{round_}"), expect_status=expect)))
            except (NotFound, Conflict) as error:
                outcomes.append(error)
        return outcomes

    results = await asyncio.gather(*(one(index) for index in range(40)))

    for index, outcomes in enumerate(results):
        kept = [outcome for outcome in outcomes if isinstance(outcome, list)]
        stored = await store.read_events(sessions[index].id)
        assert [event.payload.text for event in stored] == [  # type: ignore[union-attr]
            events[0].payload.text  # type: ignore[index]
            for events in kept
        ]
        assert [event.seq for event in stored] == list(range(1, len(kept) + 1))
        for round_, outcome in enumerate(outcomes):
            if (index + round_) % 7 == 0:
                assert isinstance(outcome, NotFound)
            elif (index * round_) % 11 == 5:
                assert isinstance(outcome, Conflict)
            else:
                assert isinstance(outcome, list)


async def test_every_backend_keeps_runs_behind_their_own_contract(store: Store) -> None:
    assert isinstance(store, RunStore)


async def test_postgres_commits_concurrent_appends_in_groups(store: Store, backend: str) -> None:
    if backend != "postgres":
        pytest.skip("SQLite's writer groups its own way (see test_sqlite)")
    from agentwatch.store.postgres import PostgresStore

    assert isinstance(store, PostgresStore)
    sessions = [await store.create_session(SessionDraft(name=f"s{n}", role="chat")) for n in range(50)]
    before = list(store._group_counts)

    await asyncio.gather(*(store.append(session.id, said("hi")) for session in sessions for _ in range(3)))

    groups, writes = store._group_counts[0] - before[0], store._group_counts[1] - before[1]
    assert writes == 150
    assert groups <= 150 / 5  # dozens of appends per transaction, not one each


async def test_two_stores_appending_to_the_same_sessions_keep_seqs_contiguous(store: Store, store_url: str) -> None:
    # Two processes' stores (SQLite: two writers of one file; PostgreSQL: two pools) append to the same
    # sessions at once, in groups: every seq is handed out once, with no gap, and the rows count them all.
    sessions = [await store.create_session(SessionDraft(name=f"s{n}", role="chat")) for n in range(20)]
    other = await connect_store(store_url)
    try:

        async def appends(into: Store, tag: str) -> None:
            for round_ in range(4):
                await asyncio.gather(*(into.append(s.id, said(f"{tag}{round_}")) for s in sessions))

        await asyncio.gather(appends(store, "a"), appends(other, "b"))
    finally:
        await other.close()

    for session in sessions:
        stored = await store.read_events(session.id)
        assert [event.seq for event in stored] == list(range(1, 9))
        texts = [event.payload.text for event in stored]  # type: ignore[union-attr]
        assert sorted(texts) == sorted(f"{tag}{n}" for tag in "ab" for n in range(4))
        assert [t for t in texts if t[0] == "a"] == [f"a{n}" for n in range(4)]  # each store's in its order
        assert (await store.get_session(session.id)).last_seq == 8


async def test_grouped_appends_count_into_their_rows_and_fail_apart(store: Store) -> None:
    # Appends without usage or an expected status (PostgreSQL moves the rows' counters first for those):
    # the rows end with every event counted, an untouched write leaves the activity time, an unknown
    # session fails alone.
    sessions = [await store.create_session(SessionDraft(name=f"s{n}", role="chat")) for n in range(30)]
    writes = [
        Write(
            session.id if n % 9 else "ses_unknown",
            said(f"{n}") + said(f"{n}+"),
            touch=index % 2 == 0,
        )
        for n in range(3)
        for index, session in enumerate(sessions)
    ]
    outcomes = await asyncio.gather(*(store.write(write) for write in writes), return_exceptions=True)

    for write, outcome in zip(writes, outcomes, strict=True):
        if write.session_id == "ses_unknown":
            assert isinstance(outcome, NotFound)
        else:
            assert isinstance(outcome, list) and len(outcome) == 2
            assert outcome[1].seq == outcome[0].seq + 1
    for index, session in enumerate(sessions):
        expected = sum(2 for n in range(3) if n % 9)
        stored = await store.read_events(session.id)
        assert [event.seq for event in stored] == list(range(1, expected + 1))
        after = await store.get_session(session.id)
        assert (after.last_seq, after.tokens) == (expected, 0)
        if index % 2:
            assert after.last_active_at == session.last_active_at
        else:
            assert after.last_active_at > session.last_active_at


async def test_grouped_appends_with_spend_count_it_into_their_rows(store: Store) -> None:
    # Appends with ledger entries (PostgreSQL writes those rows after reading them, with one statement for
    # the group): each row ends with its tokens and cost summed, its last seq, and its activity time moved
    # only by the writes that touch it.
    sessions = [await store.create_session(SessionDraft(name=f"s{n}", role="chat")) for n in range(20)]

    def spent(index: int, n: int) -> Write:
        usage = Usage(input_tokens=index + 1, output_tokens=n, requests=1, cost_usd=0.125 * (index + 1))
        return Write(sessions[index].id, said(f"{index}:{n}"), usage=[UsageEntry(usage=usage)], touch=index % 2 == 0)

    await asyncio.gather(*(store.write(spent(index, n)) for n in range(3) for index in range(len(sessions))))

    for index, session in enumerate(sessions):
        after = await store.get_session(session.id)
        assert after.last_seq == 3
        assert after.tokens == 3 * (index + 1) + (0 + 1 + 2)
        assert after.cost_usd == pytest.approx(3 * 0.125 * (index + 1))
        if index % 2:
            assert after.last_active_at == session.last_active_at
        else:
            assert after.last_active_at > session.last_active_at


async def test_grouped_appends_with_model_messages_keep_them_whole_and_in_order(store: Store) -> None:
    # Concurrent appends carrying model messages, each response also the `response` of the write's
    # completion.finished event (stored once, in the event: the message points at the event's seq, which a
    # group numbers for all its writes at once): every conversation reads back its messages whole, in order.
    sessions = [await store.create_session(SessionDraft(name=f"s{n}", role="chat")) for n in range(20)]

    def messages(index: int, n: int) -> tuple[JsonValue, JsonValue]:
        request: JsonValue = {"kind": "request", "parts": [{"part_kind": "user-prompt", "content": f"{index}:{n}"}]}
        response: JsonValue = {"kind": "response", "parts": [{"part_kind": "text", "content": f"answer {index}:{n}"}]}
        return request, response

    async def turns(index: int) -> None:
        for n in range(3):
            request, response = messages(index, n)
            usage = Usage(input_tokens=5, output_tokens=2, requests=1)
            finished = NewEvent(CompletionFinished(request_index=n, model="m", usage=usage, response=response))
            write = Write(sessions[index].id, [*said(f"{index}:{n}"), finished], messages=[request, response])
            await store.write(write)

    await asyncio.gather(*(turns(index) for index in range(len(sessions))))

    for index, session in enumerate(sessions):
        expected = [message for n in range(3) for message in messages(index, n)]
        assert await store.read_messages(session.conversation_id) == expected
        stored = await store.read_events(session.id)
        assert [event.seq for event in stored] == list(range(1, 7))
        responses = [e.payload.response for e in stored if isinstance(e.payload, CompletionFinished)]
        assert responses == expected[1::2]
