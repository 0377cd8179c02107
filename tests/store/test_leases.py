"""Leases and observer creation, on every backend: one owner per session at a time, decided by the store's
one clock; one observer session per pairing, whatever races and crashes."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentwatch.errors import Conflict, InvalidArgument, NotFound
from agentwatch.events import new_id
from agentwatch.store import (
    InputDraft,
    LeaseClaim,
    LeaseRecord,
    ObserverRef,
    SessionDraft,
    SessionFilter,
    SessionPatch,
    Store,
    Write,
    connect_store,
)
from agentwatch.store._leases import claim_lease

SHORT = 0.3
"""A ttl that lapses within a test; waits use twice it."""


async def _session(store: Store, name: str | None = None) -> str:
    return (await store.create_session(SessionDraft(name=name or new_id("ses"), role="chat"))).id


async def test_a_free_lease_is_taken_and_held_until_it_expires(store: Store) -> None:
    session_id = await _session(store)
    assert await store.get_lease(session_id) is None

    before = datetime.now(UTC)
    assert await store.acquire_lease(session_id, "engine-a", 30)
    lease = await store.get_lease(session_id)

    assert lease is not None
    assert (lease.session_id, lease.owner, lease.expired) == (session_id, "engine-a", False)
    assert before + timedelta(seconds=29) < lease.expires_at < datetime.now(UTC) + timedelta(seconds=31)
    assert not await store.acquire_lease(session_id, "engine-b", 30)
    assert (await store.get_lease(session_id)) == lease  # the loser changed nothing
    assert await store.expired_leases() == []


async def test_the_holder_extends_its_own_lease_by_acquiring_again(store: Store) -> None:
    session_id = await _session(store)
    assert await store.acquire_lease(session_id, "engine-a", 5)
    first = await store.get_lease(session_id)
    assert await store.acquire_lease(session_id, "engine-a", 60)
    second = await store.get_lease(session_id)
    assert first is not None and second is not None
    assert second.owner == "engine-a"
    assert second.expires_at > first.expires_at + timedelta(seconds=50)


async def test_an_expired_lease_is_listed_and_taken_over_then_not_renewed_for_the_old_owner(store: Store) -> None:
    session_id = await _session(store)
    kept_id = await _session(store)
    assert await store.acquire_lease(session_id, "engine-a", SHORT)
    assert await store.acquire_lease(kept_id, "engine-a", 60)
    await asyncio.sleep(2 * SHORT)

    lease = await store.get_lease(session_id)
    assert lease is not None and lease.expired and lease.owner == "engine-a"
    assert [(item.session_id, item.owner, item.expired) for item in await store.expired_leases()] == [
        (session_id, "engine-a", True)
    ]

    assert await store.acquire_lease(session_id, "engine-b", 60)
    assert await store.renew_leases("engine-a", [session_id, kept_id], 60) == [kept_id]
    await store.release_lease(session_id, "engine-a")  # not its lease any more: nothing happens
    taken = await store.get_lease(session_id)
    assert taken is not None and (taken.owner, taken.expired) == ("engine-b", False)
    assert await store.expired_leases() == []


async def test_an_expired_lease_nobody_took_is_renewed_by_its_owner(store: Store) -> None:
    session_id = await _session(store)
    assert await store.acquire_lease(session_id, "engine-a", SHORT)
    await asyncio.sleep(2 * SHORT)
    assert await store.renew_leases("engine-a", [session_id], 60) == [session_id]
    lease = await store.get_lease(session_id)
    assert lease is not None and not lease.expired
    assert not await store.acquire_lease(session_id, "engine-b", 60)


async def test_a_lease_taken_over_for_a_note_is_handed_back_as_its_owner_left_it(store: Store) -> None:
    session_id = await _session(store)
    assert await store.acquire_lease(session_id, "engine-a", SHORT)
    await asyncio.sleep(2 * SHORT)
    left = await store.get_lease(session_id)
    assert left is not None and left.expired
    assert await store.take_lease(session_id, "engine-b", 60) == left

    assert not await store.hand_back_lease(session_id, "engine-c", left)  # not its lease: nothing changes
    held = await store.get_lease(session_id)
    assert held is not None and (held.owner, held.expired) == ("engine-b", False)
    assert await store.hand_back_lease(session_id, "engine-b", left)
    assert await store.get_lease(session_id) == left
    assert await store.expired_leases() == [left]
    assert await store.take_lease(session_id, "engine-c", 60) == left


async def test_expired_leases_read_on_past_the_last_one_given(store: Store) -> None:
    ids = [await _session(store) for _ in range(5)]
    for session_id in ids:
        assert await store.acquire_lease(session_id, "engine-a", SHORT)
    twin = await store.get_lease(ids[1])
    assert twin is not None and await store.hand_back_lease(ids[2], "engine-a", twin)  # two with one expiry
    await asyncio.sleep(2 * SHORT)
    expired = await store.expired_leases()
    assert sorted(lease.session_id for lease in expired) == sorted(ids)
    pages, after = [], None
    while page := await store.expired_leases(limit=2, after=after):
        pages.append(page)
        after = page[-1]
    assert [len(page) for page in pages] == [2, 2, 1]
    assert [lease for page in pages for lease in page] == expired  # in the same order, each once


async def test_renew_returns_only_the_leases_the_owner_holds_in_the_order_given(store: Store) -> None:
    ids = [await _session(store) for _ in range(4)]
    for session_id in ids[:3]:
        assert await store.acquire_lease(session_id, "engine-a", 60)
    assert await store.acquire_lease(ids[3], "engine-b", 60)

    wanted = [ids[2], ids[3], ids[0], "ses_unknown", ids[2]]
    assert await store.renew_leases("engine-a", wanted, 120) == [ids[2], ids[0]]
    assert await store.renew_leases("engine-a", [], 120) == []
    lease = await store.get_lease(ids[3])
    assert lease is not None and lease.owner == "engine-b"
    assert lease.expires_at < datetime.now(UTC) + timedelta(seconds=61)


async def test_a_stop_is_asked_of_the_live_lease_holder_and_taken_once(store: Store) -> None:
    held, other, free = await _session(store), await _session(store), await _session(store)
    assert await store.acquire_lease(held, "engine-a", 30)
    assert await store.acquire_lease(other, "engine-a", 30)

    asked = await store.request_stop(held, "ses_boss")
    assert asked is not None and (asked.session_id, asked.owner, asked.expired) == (held, "engine-a", False)
    assert await store.request_stop(free, "a person") is None  # nobody runs it: the caller stops it itself
    assert await store.take_stop_requests("engine-b") == {}
    assert await store.take_stop_requests("engine-a") == {held: "ses_boss"}
    assert await store.take_stop_requests("engine-a") == {}  # taken once

    short = await _session(store)
    assert await store.acquire_lease(short, "engine-a", SHORT)
    await asyncio.sleep(SHORT * 2)
    assert await store.request_stop(short, "a person") is None  # a lapsed lease runs nothing
    with pytest.raises(InvalidArgument):
        await store.request_stop(held, " ")


async def test_release_frees_the_lease_only_for_its_owner(store: Store) -> None:
    session_id = await _session(store)
    assert await store.acquire_lease(session_id, "engine-a", 60)
    await store.release_lease(session_id, "engine-b")
    assert (await store.get_lease(session_id)) is not None
    await store.release_lease(session_id, "engine-a")
    assert await store.get_lease(session_id) is None
    assert await store.acquire_lease(session_id, "engine-b", 60)


async def test_of_owners_racing_for_one_lease_exactly_one_wins(store_url: str) -> None:
    # Two store objects: two connections (SQLite: two writer threads on one file; PostgreSQL: two pools).
    stores = [await connect_store(store_url) for _ in range(2)]
    try:
        ids = [await _session(stores[0]) for _ in range(5)]
        for session_id in ids:
            results = await asyncio.gather(
                *(stores[n % 2].acquire_lease(session_id, f"engine-{n}", 60) for n in range(8))
            )
            assert sum(results) == 1
            lease = await stores[1].get_lease(session_id)
            assert lease is not None and lease.owner == f"engine-{results.index(True)}"
        # Racing for expired leases: again one winner each.
        for session_id in ids:
            assert await stores[0].acquire_lease(session_id, "short", SHORT) is False
        await stores[0].release_lease(ids[0], "engine-nobody")
    finally:
        for opened in stores:
            await opened.close()


async def test_racing_takeovers_of_an_expired_lease_have_one_winner(store_url: str) -> None:
    stores = [await connect_store(store_url) for _ in range(2)]
    try:
        ids = [await _session(stores[0]) for _ in range(3)]
        for session_id in ids:
            assert await stores[0].acquire_lease(session_id, "dead", SHORT)
        await asyncio.sleep(2 * SHORT)
        for session_id in ids:
            results = await asyncio.gather(
                *(stores[n % 2].acquire_lease(session_id, f"engine-{n}", 60) for n in range(6)),
                stores[0].renew_leases("dead", [session_id], 60),
            )
            won = [result for result in results[:-1] if result is True]
            renewed = results[-1] == [session_id]
            assert len(won) + int(renewed) == 1
    finally:
        for opened in stores:
            await opened.close()


def _claimed_input(session_id: str, owner: str, ttl: float = 60) -> Write:
    return Write(session_id, inputs_add=[InputDraft(text="queued")], claim=LeaseClaim(owner, ttl))


async def test_a_write_that_claims_the_lease_takes_it_only_when_nobody_holds_it(store: Store) -> None:
    free, held, lapsed = [await _session(store) for _ in range(3)]
    await store.write(_claimed_input(free, "engine-a"))
    lease = await store.get_lease(free)
    assert lease is not None and (lease.owner, lease.expired) == ("engine-a", False)
    assert [i.text for i in await store.list_inputs(free)] == ["queued"]

    assert await store.acquire_lease(held, "engine-b", 60)
    before = await store.get_lease(held)
    await store.write(_claimed_input(held, "engine-a"))
    assert await store.get_lease(held) == before  # another owner's live lease is left as it is
    assert [i.text for i in await store.list_inputs(held)] == ["queued"]

    assert await store.acquire_lease(lapsed, "engine-b", SHORT)
    await asyncio.sleep(2 * SHORT)
    await store.write(_claimed_input(lapsed, "engine-a"))
    lease = await store.get_lease(lapsed)
    assert lease is not None and (lease.owner, lease.expired) == ("engine-b", True)  # left for a sweep
    assert [item.session_id for item in await store.expired_leases()] == [lapsed]

    for bad in (LeaseClaim(" ", 60), LeaseClaim("engine-a", 0)):
        with pytest.raises(InvalidArgument):
            await store.write(Write(free, inputs_add=[InputDraft(text="not queued")], claim=bad))
    assert [i.text for i in await store.list_inputs(free)] == ["queued"]


async def test_a_release_beside_a_write_that_claims_the_lease_waits_for_its_commit(
    store_url: str, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner's release is followed by a look for work: it must see the work a write claiming the lease
    queued (the lease stood when the write read it, so the write left it to its owner)."""
    claimed = threading.Event()

    async def slow_claim(tx: Any, dialect: Any, session_id: str, claim: LeaseClaim) -> None:
        await claim_lease(tx, dialect, session_id, claim)
        claimed.set()
        if backend == "postgres":
            await asyncio.sleep(0.5)  # the transaction stays open, the lease row claimed
        else:
            time.sleep(0.5)  # (on the writer's thread, which holds the database's write lock)

    monkeypatch.setattr("agentwatch.store._events.claim_lease", slow_claim)
    stores = [await connect_store(store_url) for _ in range(2)]  # the queuing engine's, the owner's
    try:
        session_id = await _session(stores[0])
        assert await stores[1].acquire_lease(session_id, "engine-b", 60)
        writing = asyncio.create_task(stores[0].write(_claimed_input(session_id, "engine-a")))
        assert await asyncio.to_thread(claimed.wait, 10)
        await stores[1].release_lease(session_id, "engine-b")
        assert [i.text for i in await stores[1].list_inputs(session_id)] == ["queued"]
        await writing
        assert await stores[1].get_lease(session_id) is None
    finally:
        for opened in stores:
            await opened.close()


@pytest.mark.parametrize("ttl", [0, -1, math.nan, math.inf, 86_401, True, "5"])
async def test_a_bad_ttl_is_refused_before_anything_is_written(store: Store, ttl: object) -> None:
    session_id = await _session(store)
    with pytest.raises(InvalidArgument, match="ttl"):
        await store.acquire_lease(session_id, "engine-a", ttl)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="ttl"):
        await store.renew_leases("engine-a", [session_id], ttl)  # type: ignore[arg-type]
    assert await store.get_lease(session_id) is None


async def test_bad_owners_and_unknown_sessions_are_refused(store: Store) -> None:
    session_id = await _session(store)
    for owner in ("", "   ", "x" * 201):
        with pytest.raises(InvalidArgument, match="owner"):
            await store.acquire_lease(session_id, owner, 60)
    with pytest.raises(NotFound, match="ses_nope"):
        await store.acquire_lease("ses_nope", "engine-a", 60)
    with pytest.raises(InvalidArgument):
        await store.renew_leases("engine-a", session_id, 60)
    with pytest.raises(InvalidArgument):
        await store.expired_leases(limit=0)
    assert await store.get_lease(session_id) is None
    assert await store.get_lease("ses_nope") is None


async def test_reaping_a_session_drops_its_lease(store: Store) -> None:
    session_id = await _session(store)
    assert await store.acquire_lease(session_id, "engine-a", SHORT)
    await asyncio.sleep(2 * SHORT)
    assert await store.reap([session_id]) == 1
    assert await store.get_lease(session_id) is None
    assert await store.expired_leases() == []


# -- one observer session per pairing ------------------------------------------------------------------------


async def _observer_sessions(store: Store) -> list[str]:
    page = await store.list_sessions(SessionFilter(is_observer=True), limit=100)
    return sorted(session.id for session in page.items)


async def test_an_observer_session_is_created_with_its_ref(store: Store) -> None:
    observed = await _session(store, "nova")
    ref = ObserverRef(observed_session_id=observed, observer_type="loop-guard")

    created = await store.create_session(
        SessionDraft(name="nova-watch", role="watch", is_observer=True), observer_ref=ref
    )

    stored = await store.get_observer_ref(observed)
    assert stored is not None
    assert (stored.observer_type, stored.observer_session_id, stored.stopped) == ("loop-guard", created.id, False)
    assert stored.updated_at is not None


async def test_a_second_observer_for_a_live_pairing_is_refused_and_writes_nothing(store: Store) -> None:
    observed = await _session(store, "nova")
    ref = ObserverRef(observed_session_id=observed, observer_type="loop-guard")
    first = await store.create_session(SessionDraft(name="watch-1", role="watch", is_observer=True), observer_ref=ref)

    with pytest.raises(Conflict, match="already has a live observer session"):
        await store.create_session(SessionDraft(name="watch-2", role="watch", is_observer=True), observer_ref=ref)

    assert await _observer_sessions(store) == [first.id]
    stored = await store.get_observer_ref(observed)
    assert stored is not None and stored.observer_session_id == first.id
    # Creating the same observer again (same id) is not a second observer: only the clash on the name stops it.
    with pytest.raises(Conflict, match="already exists"):
        await store.create_session(
            SessionDraft(id=first.id, name="watch-1b", role="watch", is_observer=True), observer_ref=ref
        )


async def test_a_finished_deleted_or_stopped_observer_can_be_replaced(store: Store) -> None:
    observed = await _session(store, "nova")
    ref = ObserverRef(observed_session_id=observed, observer_type="loop-guard")
    draft = SessionDraft(name="watch-1", role="watch", is_observer=True)
    first = await store.create_session(draft, observer_ref=ref)

    await store.update_session(first.id, SessionPatch(status="completed"))
    second = await store.create_session(draft.model_copy(update={"name": "watch-2"}), observer_ref=ref)
    await store.soft_delete(second.id, reap_at=datetime.now(UTC) + timedelta(days=1))
    third = await store.create_session(draft.model_copy(update={"name": "watch-3"}), observer_ref=ref)
    await store.set_observer_ref(ref.model_copy(update={"observer_session_id": third.id, "stopped": True}))
    fourth = await store.create_session(draft.model_copy(update={"name": "watch-4"}), observer_ref=ref)

    stored = await store.get_observer_ref(observed)
    assert stored is not None and (stored.observer_session_id, stored.stopped) == (fourth.id, False)


async def test_an_observer_of_an_unknown_session_is_not_created(store: Store) -> None:
    ref = ObserverRef(observed_session_id="ses_nope", observer_type="loop-guard")
    with pytest.raises(NotFound, match="ses_nope"):
        await store.create_session(SessionDraft(name="watch", role="watch", is_observer=True), observer_ref=ref)
    assert await _observer_sessions(store) == []


async def test_racing_observer_creations_leave_one_observer_session(store_url: str) -> None:
    stores = [await connect_store(store_url) for _ in range(2)]
    try:
        for round_ in range(3):
            observed = await _session(stores[0])
            ref = ObserverRef(observed_session_id=observed, observer_type="loop-guard")
            outcomes = await asyncio.gather(
                *(
                    stores[n % 2].create_session(
                        SessionDraft(name=f"watch-{round_}-{n}", role="watch", is_observer=True), observer_ref=ref
                    )
                    for n in range(6)
                ),
                return_exceptions=True,
            )
            created = [outcome for outcome in outcomes if not isinstance(outcome, BaseException)]
            assert len(created) == 1
            assert all(isinstance(outcome, Conflict) for outcome in outcomes if isinstance(outcome, BaseException))
            stored = await stores[1].get_observer_ref(observed)
            assert stored is not None and stored.observer_session_id == created[0].id
        assert len(await _observer_sessions(stores[0])) == 3
    finally:
        for opened in stores:
            await opened.close()


async def test_taking_a_lease_says_whose_expired_lease_it_took_over(store: Store) -> None:
    session_id = await _session(store)
    assert await store.take_lease(session_id, "engine-a", SHORT) is True  # free
    assert await store.take_lease(session_id, "engine-a", SHORT) is True  # already its own
    assert await store.take_lease(session_id, "engine-b", 60) is False  # live, another owner's
    await asyncio.sleep(2 * SHORT)
    # The lease is read and taken in one transaction: the caller learns whose expired lease it took over.
    previous = await store.take_lease(session_id, "engine-b", 60)
    assert isinstance(previous, LeaseRecord)
    assert (previous.owner, previous.expired) == ("engine-a", True)
    lease = await store.get_lease(session_id)
    assert lease is not None and lease.owner == "engine-b" and not lease.expired
    await store.release_lease(session_id, "engine-b")
    assert await store.take_lease(session_id, "engine-a", 60) is True  # released: free, nobody's takeover
