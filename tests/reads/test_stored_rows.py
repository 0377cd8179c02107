"""The read paths decode stored rows without validating them again: what they give equals validation's.

`session_from_row` (listings, `get_session`) and the events read back (`read_events`, `read_events_backward`,
`get_event`) skip pydantic's validation of values the store itself wrote. These tests hold every field of
what they give (value and type) equal to what validating the same row gives, on both backends, for rows
that set every field a session or event can have. The values the listing and the tail read instead
(`list_session_values`, `read_event_values`) are held equal to those records and events in JSON form.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentwatch.errors import InvalidArgument, NotFound
from agentwatch.events import (
    Event,
    NewEvent,
    Origin,
    Payload,
    RequestOpened,
    ToolCall,
    ToolResult,
    TurnId,
    TurnStarted,
    Usage,
    UserMessage,
    new_id,
)
from agentwatch.store import (
    RequestDraft,
    SessionDraft,
    SessionFilter,
    SessionPatch,
    SessionRecord,
    Store,
    UsageEntry,
    Write,
)
from agentwatch.store._sessions import session_from_row
from agentwatch.store._sql import SESSION_COLUMNS, SESSION_JSON, from_row


def _same(decoded: Any, validated: Any) -> None:
    """Equal field by field, each value of the same type (1 == True and 0.0 == 0 would hide a codec)."""
    assert type(decoded) is type(validated)
    for name in type(validated).model_fields:
        ours, theirs = getattr(decoded, name), getattr(validated, name)
        assert ours == theirs, name
        assert type(ours) is type(theirs), name
    assert decoded == validated
    assert decoded.model_dump(mode="json") == validated.model_dump(mode="json")


async def _full_session(store: Store) -> SessionRecord:
    """A session with every field the store can set away from its default (NUL and a lone surrogate in JSON)."""
    parent = await store.create_session(SessionDraft(name="lead", role="chat"))
    session = await store.create_session(
        SessionDraft(
            name="coder-1",
            role="coder",
            display_name="Coder ü",
            feature="engine",
            scope="42:bot1",
            status="running",
            source="chat",
            model_ref="openai:gpt-5",
            group_key="hb:digest",
            boss=True,
            parent_id=parent.id,
            origin=Origin(kind="chat", ref="42:bot1"),
            is_observer=True,
            settings={"grant": ["spawn"], "deep": {"n": 1.5, "none": None, "text": "nul\x00 and \ud800"}},
        )
    )
    await store.write(
        Write(
            session.id,
            events=[NewEvent(TurnStarted(trigger="input", attempt=1), turn_id=TurnId("trn_1"))],
            session=SessionPatch(
                model_override="anthropic:claude",
                current_turn_id="trn_1",
                turn_attempts=2,
                last_text="the last words, ünïcode",
                error="it broke",
                context_fill={"state": "measured", "tokens": 1200, "window": 200000, "share": 0.006},
                interception={"by": "person:ana", "at": "2026-12-01T10:00:00+00:00"},
            ),
            inputs_add=[],
            requests_open=[RequestDraft(kind="question", summary="which file?", questions=["which?"])],
            usage=[UsageEntry(usage=Usage(input_tokens=1000, output_tokens=234, requests=1, cost_usd=0.0125))],
        )
    )
    # deleted_at and reap_at, with a whole second (isoformat leaves the microseconds out).
    await store.soft_delete(session.id, reap_at=datetime(2027, 1, 1, 12, 0, 0, tzinfo=UTC))
    return await store.get_session(session.id)


async def _rows(store: Store, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    return await store._read(lambda tx: tx.fetch(sql, params))  # type: ignore[attr-defined,no-any-return]


async def test_session_rows_decode_as_validation_does(store: Store) -> None:
    full = await _full_session(store)
    plain = await store.create_session(SessionDraft(name="plain", role="chat"))
    assert full.deleted_at is not None and full.tokens == 1234 and full.pending_requests == 1
    select = f"SELECT {', '.join(SESSION_COLUMNS)} FROM sessions WHERE id = ?"
    for session in (full, plain):
        [row] = await _rows(store, select, [session.id])
        validated = from_row(SessionRecord, SESSION_COLUMNS, row, SESSION_JSON)
        _same(session_from_row(row), validated)
        _same(await store.get_session(session.id), validated)
    listed = await store.list_sessions(SessionFilter(deleted=True), limit=10)
    assert {record.id for record in listed.items} == {full.id, plain.id, full.parent_id}
    for record in listed.items:
        [row] = await _rows(store, select, [record.id])
        _same(record, from_row(SessionRecord, SESSION_COLUMNS, row, SESSION_JSON))


async def test_decoded_sessions_do_not_share_their_settings(store: Store) -> None:
    first = await store.create_session(SessionDraft(name="a", role="chat"))
    second = await store.create_session(SessionDraft(name="b", role="chat"))
    page = await store.list_sessions(SessionFilter(), limit=10)
    one, other = page.items
    assert one.settings == other.settings == {} and one.settings is not other.settings
    assert {first.id, second.id} == {one.id, other.id}


async def test_event_rows_decode_as_validation_does(store: Store) -> None:
    session = await store.create_session(SessionDraft(name="tail", role="chat"))
    payloads: list[Payload] = [
        UserMessage(text="hello \x00 there \ud800"),
        ToolCall(tool_call_id="call_1", tool_name="read_file", input={"path": "a.txt", "n": [1, 2.5, None]}),
        ToolResult(tool_call_id="call_1", tool_name="read_file", output="contents", status="ok"),
        RequestOpened(request_id="req_1", kind="question", summary="which?", questions=["which?"]),
    ]
    await store.append(session.id, [NewEvent(payload, turn_id=TurnId("trn_1")) for payload in payloads])
    await store.append(session.id, [NewEvent(UserMessage(text="no turn"))])
    select = "SELECT id, session_id, seq, at, turn_id, conversation_id, payload FROM events WHERE session_id = ?"
    rows = {row[0]: row for row in await _rows(store, select + " ORDER BY seq", [session.id])}
    forward = await store.read_events(session.id, limit=10)
    backward = await store.read_events_backward(session.id, limit=10)
    assert [event.id for event in forward] == list(rows) == [event.id for event in reversed(backward)]
    for event in [*forward, *backward]:
        event_id, session_id, seq, at, turn_id, conversation_id, payload = rows[event.id]
        validated = Event.model_validate(
            {
                "id": event_id,
                "session_id": session_id,
                "seq": seq,
                "at": at,
                "turn_id": turn_id,
                "conversation_id": conversation_id,
                "payload": json.loads(payload),
            }
        )
        _same(event, validated)
        _same(await store.get_event(session.id, event.id), validated)
        assert event.at.tzinfo is not None and event.at.utcoffset() == timedelta(0)


async def test_session_and_events_in_one_read(store: Store) -> None:
    session = await store.create_session(SessionDraft(name="both", role="chat"))
    payloads = [
        UserMessage(text=f"message {n}") if n % 2 else TurnStarted(trigger="input", attempt=1) for n in range(7)
    ]
    await store.append(session.id, [NewEvent(payload) for payload in payloads])
    record, newest = await store.read_session_events(session.id, limit=3)
    assert record == await store.get_session(session.id) and record.last_seq == 7
    assert newest == await store.read_events_backward(session.id, limit=3)
    assert [event.seq for event in newest] == [7, 6, 5]
    record, after = await store.read_session_events(session.id, after_seq=2, limit=10, types=["message.user"])
    assert after == await store.read_events(session.id, after_seq=2, limit=10, types=["message.user"])
    assert [event.seq for event in after] == [4, 6]
    _, none = await store.read_session_events(session.id, after_seq=7, limit=10)
    assert none == []
    with pytest.raises(NotFound, match="ses_nobody"):
        await store.read_session_events("ses_nobody", limit=10)
    with pytest.raises(InvalidArgument):
        await store.read_session_events(session.id, after_seq=-1, limit=10)


_SHARED_STORE = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=40)
# Text a plain column can keep (no NUL, no lone surrogate: the store refuses those outside JSON).
texts = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=20)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=4)


@settings(_SHARED_STORE)
@given(
    display_name=st.none() | texts,
    status=st.sampled_from(["idle", "running", "awaiting_input", "completed", "failed", "cancelled", "interrupted"]),
    boss=st.booleans(),
    origin=st.none() | st.builds(Origin, kind=st.sampled_from(["person", "chat", "run"]), ref=st.none() | texts),
    settings_=json_objects,
    context_fill=st.none() | json_objects,
    last_text=st.none() | texts,
)
async def test_any_stored_session_decodes_as_validation_does(
    store: Store,
    display_name: str | None,
    status: Any,
    boss: bool,
    origin: Origin | None,
    settings_: dict[str, Any],
    context_fill: dict[str, Any] | None,
    last_text: str | None,
) -> None:
    draft = SessionDraft(
        name=new_id("ses"), role="chat", display_name=display_name, boss=boss, origin=origin, settings=settings_
    )
    created = await store.create_session(draft)
    patch = SessionPatch(status=status, context_fill=context_fill, last_text=last_text)
    session = await store.update_session(created.id, patch)
    [row] = await _rows(store, f"SELECT {', '.join(SESSION_COLUMNS)} FROM sessions WHERE id = ?", [session.id])
    _same(session_from_row(row), from_row(SessionRecord, SESSION_COLUMNS, row, SESSION_JSON))
    _same(await store.get_session(session.id), session)


# -- listings in JSON form ----------------------------------------------------------------------------------


async def _whole_second(store: Store, session_id: str) -> None:
    """Set the session's times to whole seconds (whose `isoformat` leaves the microseconds out)."""
    moment = store._dialect.time_param(datetime(2026, 11, 30, 9, 15, 0, tzinfo=UTC))  # type: ignore[attr-defined]
    sql = "UPDATE sessions SET created_at = ?, last_active_at = ?, deleted_at = ? WHERE id = ?"
    await store._write(lambda tx: tx.execute(sql, [moment, moment, moment, session_id]))  # type: ignore[attr-defined]


async def _listing_sessions(store: Store) -> list[SessionRecord]:
    full = await _full_session(store)
    plain = await store.create_session(SessionDraft(name="plain", role="chat"))
    rounded = await store.create_session(SessionDraft(name="rounded", role="chat", origin=Origin(kind="person")))
    await _whole_second(store, rounded.id)
    return [full, plain, await store.get_session(rounded.id)]


@pytest.mark.parametrize("sort", ["newest", "oldest", "name", "status"])
async def test_session_values_are_the_records_in_json_form(store: Store, sort: Any) -> None:
    await _listing_sessions(store)
    where = SessionFilter(deleted=True)
    fields = ["name", "origin", "boss", "created_at", "deleted_at", "cost_usd", "interception", "settings", "name"]
    records, values = [], []
    cursor: str | None = None
    while True:  # page by page, each cursor taken from the other listing
        page = await store.list_sessions(where, sort=sort, limit=2, cursor=cursor)
        other = await store.list_session_values(where, fields, sort=sort, limit=2, cursor=cursor)
        assert page.next_cursor == other.next_cursor
        records += page.items
        values += other.items
        cursor = other.next_cursor
        if cursor is None:
            break
    assert len(records) == 4
    for record, got in zip(records, values, strict=True):
        expected = {
            name: value.isoformat() if isinstance(value, datetime) else value
            for name, value in record.model_dump(include=set(fields)).items()
        }
        expected["origin"] = record.origin.model_dump(mode="json") if record.origin is not None else None
        assert len(got) == len(fields)  # the fields asked for, in their order, nothing more
        for name, value in zip(fields, got, strict=True):
            assert value == expected[name], name
            assert type(value) is type(expected[name]), name
    created = fields.index("created_at")
    assert any(got[created].endswith(":00+00:00") for got in values)  # a whole second, as isoformat writes it
    with pytest.raises(InvalidArgument, match="no_such_field"):
        await store.list_session_values(where, ["id", "no_such_field"])


async def test_listed_rows_are_the_row_models_dumped(store: Store) -> None:
    from agentwatch.reads._rows import LISTED_FIELDS, listed_rows, oldest_request, row_fields
    from agentwatch.reads.answers import SessionRow
    from agentwatch.tools import dump

    from .support import StoreView, roster

    sessions = await _listing_sessions(store)
    await store.update_session(sessions[1].id, SessionPatch(status="running"))  # quiet for `chat`: stuck
    view = StoreView(store, roster(chat=0.001, coder=None))
    where = SessionFilter(deleted=True)
    records = (await store.list_sessions(where, limit=10)).items
    values = (await store.list_session_values(where, LISTED_FIELDS, limit=10)).items
    await asyncio.sleep(0.01)
    now = datetime.now(UTC)
    expected = [
        dump(
            SessionRow.trusted(
                **row_fields(
                    record,
                    now=now,
                    oldest=await oldest_request(view, record),
                    stuck_after=view.stuck_after(record.role),
                )
            )
        )
        for record in records
    ]  # the rows as agent_get's fields build them, dumped
    assert await listed_rows(view, values, now=now) == expected
    words = {row["name"]: row["word"] for row in expected}
    assert words["plain"] == "stuck" and words["coder-1"] == "needs_you"
    assert any(row["oldestRequest"] is not None for row in expected)


async def test_event_values_are_the_events_a_tail_shows(store: Store) -> None:
    session = await store.create_session(SessionDraft(name="values", role="chat"))
    payloads = [
        UserMessage(text=f"message {n} \ud800") if n % 2 else TurnStarted(trigger="input", attempt=1) for n in range(7)
    ]
    await store.append(session.id, [NewEvent(payload) for payload in payloads])
    # One event at a whole second, whose isoformat leaves the microseconds out.
    moment = store._dialect.time_param(datetime(2026, 11, 30, 9, 15, 0, tzinfo=UTC))  # type: ignore[attr-defined]
    update = "UPDATE events SET at = ? WHERE session_id = ? AND seq = 3"
    await store._write(lambda tx: tx.execute(update, [moment, session.id]))  # type: ignore[attr-defined]
    cases: list[dict[str, Any]] = [
        {"limit": 3},
        {"limit": 10, "types": ["message.user"]},
        {"after_seq": 2, "limit": 10},
        {"after_seq": 2, "limit": 2, "types": ["turn.started", "message.user"]},
        {"after_seq": 7, "limit": 10},
    ]
    for case in cases:
        record, events = await store.read_session_events(session.id, **case)
        last_seq, values = await store.read_event_values(session.id, **case)
        assert last_seq == record.last_seq == 7
        assert values == [(event.id, event.seq, event.at.isoformat(), event.payload) for event in events], case
        assert all(type(value.payload) is type(event.payload) for value, event in zip(values, events, strict=True))
    _, everything = await store.read_event_values(session.id, limit=10)
    assert [value.seq for value in everything] == [7, 6, 5, 4, 3, 2, 1]
    assert everything[4].at == "2026-11-30T09:15:00+00:00"
    with pytest.raises(NotFound, match="ses_nobody"):
        await store.read_event_values("ses_nobody", limit=10)
    with pytest.raises(InvalidArgument):
        await store.read_event_values(session.id, after_seq=-1, limit=10)


async def test_session_values_take_a_decoded_cursor_of_the_same_listing_only(store: Store) -> None:
    from agentwatch.errors import InvalidCursor
    from agentwatch.events import PageCursor

    for n in range(3):
        await store.create_session(SessionDraft(name=f"s{n}", role="chat"))
    first = await store.list_session_values(SessionFilter(), ["name"], sort="name", limit=1)
    assert first.next_cursor is not None
    decoded = PageCursor.decode(first.next_cursor)
    by_text = await store.list_session_values(SessionFilter(), ["name"], sort="name", limit=1, cursor=first.next_cursor)
    by_cursor = await store.list_session_values(SessionFilter(), ["name"], sort="name", limit=1, cursor=decoded)
    assert by_text == by_cursor and by_cursor.items == [["s1"]]
    with pytest.raises(InvalidCursor, match="other filters"):
        await store.list_session_values(SessionFilter(role=["chat"]), ["name"], sort="name", limit=1, cursor=decoded)
