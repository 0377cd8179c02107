"""A row changed behind the store's back (edited by hand, a restore gone wrong) reads as `DamagedRecord`, which names
the row and says what to do, on both backends; a damaged event reads as the store's notice in its place, so the rest
of its session stays readable."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentwatch.errors import DamagedRecord
from agentwatch.events import CompletionFinished, NewEvent, RuntimeNotice, ToolResult, Usage, UserMessage
from agentwatch.store import (
    RequestDraft,
    RunDraft,
    SessionDraft,
    SessionFilter,
    SessionPatch,
    SessionRecord,
    Store,
    UsageEntry,
    Write,
)


def tamper(store_url: str, sql: str, params: Sequence[Any]) -> None:
    """Run `sql` (with `?` placeholders) on the store's database, behind the store's back."""
    if store_url.startswith("sqlite:///"):
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as connection:
            connection.execute(sql, params)
        connection.close()
        return
    import psycopg

    with psycopg.connect(store_url, autocommit=True) as pg:
        pg.execute(sql.replace("?", "%s"), params)  # type: ignore[arg-type]


async def two_sessions(store: Store) -> tuple[SessionRecord, SessionRecord]:
    """`alpha` with five events and `beta` with three, each `said` its number."""
    alpha = await store.create_session(SessionDraft(name="alpha", role="coder"))
    await store.write(Write(alpha.id, events=[NewEvent(UserMessage(text=f"alpha {i}")) for i in range(1, 6)]))
    beta = await store.create_session(SessionDraft(name="beta", role="coder"))
    await store.write(Write(beta.id, events=[NewEvent(UserMessage(text=f"beta {i}")) for i in range(1, 4)]))
    return alpha, beta


def damage_third_event(store_url: str, session: SessionRecord, type_name: str, payload: str) -> None:
    """Make the session's event 3 one of `type_name` with `payload`, behind the store's back."""
    tamper(
        store_url,
        "UPDATE events SET payload = ?, type = ? WHERE session_id = ? AND seq = 3",
        [payload, type_name, session.id],
    )


# -- sessions ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("column", "stored", "said"),
    [
        ("settings", "garbage", "its settings value is not valid JSON"),
        ("settings", "[1, 2]", "its settings value "),  # (not an object: a list)
        ("origin", '{"channel": 5}', "its origin value does not fit its type"),
        ("context_fill", "{", "its context_fill value is not valid JSON"),
    ],
)
async def test_a_damaged_session_row_is_a_damaged_record_naming_the_session_and_column(
    store: Store, store_url: str, column: str, stored: str, said: str
) -> None:
    alpha, beta = await two_sessions(store)
    tamper(store_url, f"UPDATE sessions SET {column} = ? WHERE id = ?", [stored, alpha.id])

    for read in (
        lambda: store.get_session(alpha.id),
        lambda: store.list_sessions(SessionFilter()),
        lambda: store.read_session_events(alpha.id),
        lambda: store.list_session_values(SessionFilter(), ["name", column]),
        lambda: store.list_session_values(SessionFilter(), [column]),  # (the id is not among the fields)
        lambda: store.update_session(alpha.id, SessionPatch(display_name="A")),  # (it reads the row back)
    ):
        with pytest.raises(DamagedRecord) as caught:
            await read()
        error = caught.value
        assert error.code == "damaged_record"
        assert error.message.startswith(f"the stored session {alpha.id!r}"), error.message
        assert said in error.message and "restore the store from a backup" in error.message
        assert "pydantic" not in error.message
        assert error.details["session_id"] == alpha.id and error.details["column"] == column
    assert (await store.get_session(beta.id)).name == "beta"  # the others read as before
    (_, listed), _ = (await store.list_session_values(SessionFilter(), ["name", "status"])).items
    assert listed == "idle"


# -- events ------------------------------------------------------------------------------------------------

DAMAGED_PAYLOADS = [
    pytest.param("message.user", "{bad", "is not valid JSON", id="not-json"),
    pytest.param(
        "tool.call", '{"type":"tool.call"}', "does not fit its type (tool_call_id: Field required", id="misfit"
    ),
    pytest.param("no.such.type", '{"type":"no.such.type"}', "does not fit its type", id="unknown-type"),
]


@pytest.mark.parametrize(("type_name", "payload", "said"), DAMAGED_PAYLOADS)
async def test_a_damaged_event_reads_as_the_stores_notice_in_its_place(
    store: Store, store_url: str, type_name: str, payload: str, said: str
) -> None:
    alpha, _ = await two_sessions(store)
    damage_third_event(store_url, alpha, type_name, payload)
    intact = {event.seq: event for event in await store.read_events(alpha.id) if event.seq != 3}

    def check(events: Sequence[Any]) -> None:
        assert [event.seq for event in events] == [1, 2, 3, 4, 5]
        notice = events[2].payload
        assert isinstance(notice, RuntimeNotice) and notice.type == "runtime.error" and notice.source == "store"
        assert notice.message.startswith(f"event 3 ({type_name}) of session {alpha.id!r} is damaged"), notice.message
        assert said in notice.message and "restore the store from a backup" in notice.message
        assert notice.detail == {"damaged": {"seq": 3, "type": type_name, "reason": notice.detail["damaged"]["reason"]}}  # type: ignore[call-overload,index]
        assert [event.payload for event in events if event.seq != 3] == [intact[seq].payload for seq in (1, 2, 4, 5)]

    forward = await store.read_events(alpha.id)
    check(forward)
    check(list(reversed(await store.read_events_backward(alpha.id))))
    check((await store.read_session_events(alpha.id, after_seq=0))[1])
    check(await store.read_events(alpha.id, types=["message.user", type_name, "runtime.error"]))
    assert (await store.get_event(alpha.id, forward[2].id)).payload == forward[2].payload
    assert forward[2].id == (await store.read_events(alpha.id, after_seq=2, limit=1))[0].id  # its own id and seq
    _, values = await store.read_event_values(alpha.id, after_seq=0)
    assert [value.seq for value in values] == [1, 2, 3, 4, 5]
    assert values[2].payload == forward[2].payload and values[2].at == forward[2].at.isoformat()
    assert [value.payload for value in values[3:]] == [intact[4].payload, intact[5].payload]


@pytest.mark.parametrize(("type_name", "payload", "said"), DAMAGED_PAYLOADS)
async def test_a_read_of_other_types_than_the_notice_refuses_a_damaged_event(
    store: Store, store_url: str, type_name: str, payload: str, said: str
) -> None:
    """A read that asks for some types only (the runtime's scans) cannot be answered without the damaged event."""
    alpha, beta = await two_sessions(store)
    damage_third_event(store_url, alpha, type_name, payload)
    for read in (
        lambda: store.read_events(alpha.id, types=[type_name]),
        lambda: store.read_events_backward(alpha.id, types=[type_name, "message.user"]),
        lambda: store.read_event_values(alpha.id, types=[type_name]),
    ):
        with pytest.raises(DamagedRecord) as caught:
            await read()
        assert caught.value.message.startswith(f"the stored event 3 ({type_name}) of session {alpha.id!r} is damaged")
        assert said in caught.value.message and "or delete the agent" in caught.value.message
        assert caught.value.details == {"column": "payload", "session_id": alpha.id, "seq": 3, "type": type_name}
    assert [event.seq for event in await store.read_events(alpha.id, types=["message.user"], after_seq=3)] == [4, 5]
    assert len(await store.read_events(beta.id, types=["message.user"])) == 3


@pytest.mark.parametrize(
    ("payload", "at", "said"),
    [
        ("{", "yesterday", "Invalid isoformat"),
        # Once: a time without its offset read as a naive datetime (a local time to whatever compared it).
        ('{"type":"message.user","text":"alpha 2"}', "2026-01-01T00:00:00", "without its offset from UTC"),
    ],
)
async def test_an_event_whose_time_is_damaged_is_a_damaged_record(
    store: Store, store_url: str, backend: str, payload: str, at: str, said: str
) -> None:
    if backend != "sqlite":
        pytest.skip("PostgreSQL keeps an event's time as a timestamp, which holds nothing but times")
    alpha, _ = await two_sessions(store)
    tamper(store_url, "UPDATE events SET payload = ?, at = ? WHERE session_id = ? AND seq = 2", [payload, at, alpha.id])
    with pytest.raises(DamagedRecord) as caught:
        await store.read_events(alpha.id)
    assert caught.value.message.startswith(f"the stored event 2 of session {alpha.id!r} is damaged: its at value")
    assert said in caught.value.message


@pytest.mark.parametrize("column", ["created_at", "last_active_at"])
async def test_a_session_time_without_its_offset_is_a_damaged_record(
    store: Store, store_url: str, backend: str, column: str
) -> None:
    """Once: `2026-01-01T00:00:00` read as a naive datetime, which broke a comparison later or read as local time."""
    if backend != "sqlite":
        pytest.skip("PostgreSQL keeps a session's times as timestamps with their zone")
    alpha, beta = await two_sessions(store)
    tamper(store_url, f"UPDATE sessions SET {column} = '2026-01-01T00:00:00' WHERE id = ?", [alpha.id])
    for read in (
        lambda: store.get_session(alpha.id),
        lambda: store.list_sessions(SessionFilter()),
        lambda: store.list_session_values(SessionFilter(), ["name", column]),
    ):
        with pytest.raises(DamagedRecord) as caught:
            await read()
        assert caught.value.message.startswith(
            f"the stored session {alpha.id!r} (alpha) is damaged: its {column} value cannot be read "
            "('2026-01-01T00:00:00' is a time without its offset from UTC)"
        ), caught.value.message
        assert caught.value.details == {"column": column, "session_id": alpha.id}
    assert (await store.get_session(beta.id)).name == "beta"


# -- other records -----------------------------------------------------------------------------------------


async def test_a_damaged_request_or_message_is_a_damaged_record(store: Store, store_url: str) -> None:
    alpha, _ = await two_sessions(store)
    draft = RequestDraft(kind="question", summary="Which?", questions=["Which?"])
    await store.write(Write(alpha.id, requests_open=[draft], messages=[{"role": "user"}, {"role": "model"}]))
    (request,) = await store.list_requests(session_id=alpha.id)
    tamper(store_url, "UPDATE requests SET body = ? WHERE id = ?", ["{nope", request.id])
    with pytest.raises(DamagedRecord) as caught:
        await store.list_requests(session_id=alpha.id)
    assert caught.value.message.startswith(f"the stored request {request.id!r} is damaged: its body value is not")
    assert caught.value.details == {"request_id": request.id, "column": "body"}

    tamper(store_url, "UPDATE message_rows SET body = ? WHERE idx = 1", ["[unclosed"])
    with pytest.raises(DamagedRecord) as caught:
        await store.read_messages(alpha.conversation_id)
    assert caught.value.message.startswith(
        f"the stored model message 2 of conversation {alpha.conversation_id!r} is damaged: its body value is not"
    )


def test_the_damaged_record_is_a_store_error() -> None:
    from agentwatch.errors import AgentwatchError, StoreError

    error = DamagedRecord("x", seq=3)
    assert isinstance(error, StoreError)
    assert AgentwatchError.from_dict(error.to_dict()).__class__ is DamagedRecord  # a client raises it back


async def test_a_damaged_completion_keeping_a_model_message_is_a_damaged_record(store: Store, store_url: str) -> None:
    """A model response is kept once, in its completion.finished event: the messages read names that event."""
    alpha, _ = await two_sessions(store)
    response = {"kind": "response", "parts": [{"part_kind": "text", "content": "hi"}]}
    finished = CompletionFinished(request_index=0, model="m", usage=Usage(requests=1), response=response)
    [event] = await store.write(Write(alpha.id, [NewEvent(finished)], messages=[{"kind": "request"}, response]))
    tamper(store_url, "UPDATE events SET payload = ? WHERE session_id = ? AND seq = ?", ["{bad", alpha.id, event.seq])

    with pytest.raises(DamagedRecord) as caught:
        await store.read_messages(alpha.conversation_id)
    assert caught.value.message.startswith(
        f"the stored event 6 (completion.finished) of session {alpha.id!r} is damaged: its payload value is not valid"
    ), caught.value.message
    details = {"column": "payload", "session_id": alpha.id, "seq": 6, "type": "completion.finished"}
    assert caught.value.details == details


async def test_a_damaged_tool_output_kept_for_a_model_message_is_a_damaged_record(
    store: Store, store_url: str, backend: str
) -> None:
    if backend != "sqlite":
        pytest.skip("PostgreSQL keeps a tool's output in its model message as well")
    alpha, _ = await two_sessions(store)
    result = ToolResult(tool_call_id="c1", tool_name="lookup", output="found")
    returned = {"kind": "request", "parts": [{"part_kind": "tool-return", "tool_call_id": "c1", "content": "found"}]}
    await store.write(Write(alpha.id, [NewEvent(result)], messages=[returned]))

    tamper(store_url, "UPDATE message_rows SET body = ? WHERE event_path IS NOT NULL", ["{nope"])
    with pytest.raises(DamagedRecord) as caught:
        await store.read_messages(alpha.conversation_id)
    assert caught.value.message.startswith(
        f"the stored model message 1 of conversation {alpha.conversation_id!r} is damaged: its body value is not"
    ), caught.value.message

    tamper(
        store_url, "UPDATE message_rows SET body = ? WHERE event_path IS NOT NULL", ['{"kind":"request","parts":[{}]}']
    )
    tamper(store_url, "UPDATE events SET payload = ? WHERE session_id = ? AND seq = 6", ["{bad", alpha.id])
    with pytest.raises(DamagedRecord) as caught:
        await store.read_messages(alpha.conversation_id)
    assert caught.value.message.startswith(f"the stored event 6 (tool.result) of session {alpha.id!r} is damaged")


@pytest.mark.parametrize(("stored", "said"), [("garbage", "is not valid JSON"), ("[1, 2]", "cannot be read")])
async def test_a_write_that_expects_the_session_unheld_refuses_a_damaged_hold(
    store: Store, store_url: str, stored: str, said: str
) -> None:
    alpha, _ = await two_sessions(store)
    tamper(store_url, "UPDATE sessions SET interception = ? WHERE id = ?", [stored, alpha.id])
    with pytest.raises(DamagedRecord) as caught:
        await store.write(Write(alpha.id, session=SessionPatch(display_name="A"), expect_unheld=True))
    assert caught.value.message.startswith(f"the stored session {alpha.id!r} (alpha) is damaged: its interception")
    assert said in caught.value.message, caught.value.message
    assert caught.value.details == {"session_id": alpha.id, "column": "interception"}


@pytest.mark.parametrize(("stored", "said"), [("yesterday", "Invalid isoformat"), ("2026-01-01 10:00", "without its")])
async def test_a_damaged_time_in_the_spend_ledger_is_a_damaged_record(
    store: Store, store_url: str, backend: str, stored: str, said: str
) -> None:
    if backend != "sqlite":
        pytest.skip("PostgreSQL keeps a ledger entry's time as a timestamp, which holds nothing but times")
    run = await store.create_run(RunDraft(kind="task"))
    alpha = await store.create_session(SessionDraft(name="alpha", role="coder", run_id=run.id))
    await store.write(Write(alpha.id, usage=[UsageEntry(turn_id="trn_a", run_id=run.id, usage=Usage(requests=1))]))
    tamper(store_url, "UPDATE usage_ledger SET at = ? WHERE turn_id = 'trn_a'", [stored])
    with pytest.raises(DamagedRecord) as caught:
        await store.run_usage(run.id)
    assert caught.value.message.startswith(
        f"the stored spend of turn 'trn_a' of session {alpha.id!r} in run {run.id!r} is damaged: its at value"
    ), caught.value.message
    assert said in caught.value.message
    assert caught.value.details == {"column": "at", "run_id": run.id, "session_id": alpha.id, "turn_id": "trn_a"}


@pytest.mark.parametrize(
    ("column", "stored", "said"),
    [
        ("input_tokens", "lots", "'lots' is not a whole number"),
        ("requests", 1.5, "1.5 is not a whole number"),
        ("cost_usd", "lots", "'lots' is not a number"),
    ],
)
async def test_a_damaged_count_or_cost_in_the_spend_ledger_is_a_damaged_record_not_summed_as_zero(
    store: Store, store_url: str, backend: str, column: str, stored: Any, said: str
) -> None:
    if backend != "sqlite":
        pytest.skip("PostgreSQL keeps a ledger entry's numbers as numbers, which hold nothing else")
    run = await store.create_run(RunDraft(kind="task"))
    alpha = await store.create_session(SessionDraft(name="alpha", role="coder", run_id=run.id))
    spent = Usage(input_tokens=5, requests=1, cost_usd=0.5)
    await store.write(Write(alpha.id, usage=[UsageEntry(turn_id="trn_a", run_id=run.id, usage=spent)] * 2))
    with sqlite3.connect(store_url.removeprefix("sqlite:///")) as connection:
        [entry_id] = connection.execute("SELECT MIN(id) FROM usage_ledger").fetchone()
    connection.close()
    tamper(store_url, f"UPDATE usage_ledger SET {column} = ? WHERE id = ?", [stored, entry_id])
    now = datetime.now(UTC)
    for read in (
        lambda: store.usage_totals([alpha.id]),
        lambda: store.usage_between(now - timedelta(hours=1), now + timedelta(hours=1)),
        lambda: store.run_totals([run.id]),
        lambda: store.run_usage(run.id),
    ):
        with pytest.raises(DamagedRecord) as caught:
            await read()
        assert caught.value.message == (
            f"the stored spend entry {entry_id!r} (turn 'trn_a') of session {alpha.id!r} is damaged: its {column} "
            f"value cannot be read ({said}); restore the store from a backup, or "
            "correct that value by hand"
        )
        assert caught.value.details == {
            "column": column,
            "entry_id": entry_id,
            "session_id": alpha.id,
            "turn_id": "trn_a",
        }


@pytest.mark.parametrize("expires_at", ["1999-99-99", "1999-01-01T00:00:00"])  # (the second: without its offset)
async def test_a_damaged_lease_is_a_damaged_record(store: Store, store_url: str, backend: str, expires_at: str) -> None:
    if backend != "sqlite":
        pytest.skip("PostgreSQL keeps a lease's expiry as a timestamp, which holds nothing but times")
    alpha, _ = await two_sessions(store)
    assert await store.acquire_lease(alpha.id, "worker-1", 60)
    tamper(store_url, "UPDATE leases SET expires_at = ? WHERE session_id = ?", [expires_at, alpha.id])
    for read in (
        lambda: store.get_lease(alpha.id),
        lambda: store.expired_leases(),  # ('1999-...' is before now: it reads as expired)
        lambda: store.take_lease(alpha.id, "worker-2", 60),  # (it reads the lease it takes over)
    ):
        with pytest.raises(DamagedRecord) as caught:
            await read()
        assert caught.value.message.startswith(f"the stored lease of session {alpha.id!r} is damaged: its expires_at")
        assert caught.value.details == {"column": "expires_at", "session_id": alpha.id}
