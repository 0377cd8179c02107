"""A model response is stored once: a message that is the `response` of a completion.finished event of the same
write is kept in that event's payload, and reads give it back as it was written, on both backends."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from agentwatch.events import CompletionFinished, NewEvent, ToolCall, Usage
from agentwatch.store import SessionDraft, Store, Write, connect_store

_RESPONSE: dict[str, JsonValue] = {
    "kind": "response",
    "parts": [{"part_kind": "text", "content": 'caf\u00e9 \U0001f600 "quoted" \\ back'}],
    "usage": {"input_tokens": 12, "output_tokens": 3, "audio_seconds": 0.0, "details": {}},
    "model_name": "scripted",
    "big": 2**70,
    "nested": [[], {}, None, True, 1.5e-7],
}
_REQUEST: dict[str, JsonValue] = {"kind": "request", "parts": [{"part_kind": "user-prompt", "content": "hi"}]}


def _finished(response: JsonValue) -> NewEvent:
    usage = Usage(input_tokens=12, output_tokens=3, requests=1)
    return NewEvent(CompletionFinished(request_index=0, model="scripted", usage=usage, response=response))


async def _body_columns(store: Store, conversation_id: str) -> list[tuple[bool, int | None]]:
    """Per message row: whether it holds its own body, and the event it points to."""

    async def read(tx: Any) -> list[tuple[bool, int | None]]:
        rows = await tx.fetch(
            "SELECT body IS NOT NULL, event_seq FROM message_rows WHERE conversation_id = ? ORDER BY idx",
            [conversation_id],
        )
        return [(bool(row[0]), row[1]) for row in rows]

    result: list[tuple[bool, int | None]] = await store._read(read)  # type: ignore[attr-defined]
    return result


async def test_a_response_written_with_its_event_is_stored_once_and_read_back_whole(store: Store) -> None:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    await store.write(Write(session.id, [], messages=[_REQUEST]))
    call = NewEvent(ToolCall(tool_call_id="c1", tool_name="lookup", input={"key": 1}))
    await store.write(Write(session.id, [call, _finished(_RESPONSE)], messages=[_RESPONSE, _REQUEST]))
    other = {**_RESPONSE, "model_name": "another"}  # not the event's response: kept as it is
    await store.write(Write(session.id, [_finished(_RESPONSE)], messages=[other]))

    assert await store.read_messages(session.conversation_id) == [_REQUEST, _RESPONSE, _REQUEST, other]
    assert await _body_columns(store, session.conversation_id) == [
        (True, None),
        (False, 2),  # the completion.finished event of the second write
        (True, None),
        (True, None),
    ]
    [event] = await store.read_events(session.id, types=["completion.finished"], limit=1)
    assert isinstance(event.payload, CompletionFinished) and event.payload.response == _RESPONSE


async def test_a_response_with_a_number_json_cannot_carry_keeps_its_own_body(store: Store) -> None:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    odd: dict[str, JsonValue] = {**_RESPONSE, "usage": {"audio_seconds": float("inf")}}
    await store.write(Write(session.id, [_finished(odd)], messages=[odd]))
    assert await _body_columns(store, session.conversation_id) == [(True, None)]
    assert await store.read_messages(session.conversation_id) == [odd]


async def test_messages_of_a_schema_4_file_move_with_their_bodies(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    store = await connect_store(f"sqlite:///{path}")
    try:
        session = await store.create_session(SessionDraft(name="nova", role="chat"))
        await store.write(Write(session.id, [_finished(_RESPONSE)], messages=[_REQUEST, _RESPONSE]))
    finally:
        await store.close()
    # Back to schema 4's table, with the rows as that version wrote them (every body in its row).
    connection = sqlite3.connect(path, isolation_level=None)
    connection.executescript(
        """
        BEGIN;
        CREATE TABLE messages_v4 (
            conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
            idx INTEGER NOT NULL, body TEXT NOT NULL, UNIQUE (conversation_id, idx));
        INSERT INTO messages_v4 SELECT conversation_id, idx, body FROM messages;
        DROP VIEW messages;
        DROP TABLE message_rows;
        ALTER TABLE messages_v4 RENAME TO messages;
        DELETE FROM schema_migrations WHERE version = 5;
        COMMIT;
        """
    )
    connection.close()
    store = await connect_store(f"sqlite:///{path}")
    try:
        assert await store.read_messages(session.conversation_id) == [_REQUEST, _RESPONSE]
        assert await _body_columns(store, session.conversation_id) == [(True, None), (True, None)]
        await store.write(Write(session.id, [_finished(_RESPONSE)], messages=[_RESPONSE]))
        assert await store.read_messages(session.conversation_id) == [_REQUEST, _RESPONSE, _RESPONSE]
        assert (await _body_columns(store, session.conversation_id))[-1] == (False, 2)
    finally:
        await store.close()
