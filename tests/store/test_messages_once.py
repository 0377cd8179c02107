"""A model response is stored once: a message that is the `response` of a completion.finished event of the same
write is kept in that event's payload, and reads give it back as it was written, on both backends. On SQLite a
tool's output is stored once too: the tool return of a message keeps it in the tool.result event of its write."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from agentwatch.events import CompletionFinished, NewEvent, ToolCall, ToolResult, Usage
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


_UNDO_LATER = """
    DROP TRIGGER sessions_tenth_inserted;
    DROP TRIGGER sessions_tenth_moved;
    DROP INDEX sessions_by_newest;
    DROP INDEX sessions_by_oldest;
    ALTER TABLE sessions DROP COLUMN active_tenth;
    CREATE INDEX sessions_by_newest ON sessions (boss, live, last_active_at, id, status, role, deleted_at);
    CREATE INDEX sessions_by_oldest ON sessions (boss DESC, live DESC, last_active_at, id, status, role, deleted_at);
    ALTER TABLE inbox DROP COLUMN run_id;
    ALTER TABLE sessions DROP COLUMN pending_reports;
    DROP TABLE observer_tombstones;
    ALTER TABLE leases DROP COLUMN stop_by;
    DROP INDEX runs_ended;
    DROP INDEX runs_open;
    ALTER TABLE runs DROP COLUMN expires_at;
    DROP INDEX runs_newest;
    DROP INDEX usage_ledger_run;
"""
"""What the migrations after the ones these tests undo added (9 to 16), undone too: the file is then as the
older version left it, and opening it applies them again."""


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
        DELETE FROM schema_migrations WHERE version >= 5;
        COMMIT;
        """
        + _UNDO_LATER
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


_OUTPUT = 'caf\u00e9 \U0001f600 "quoted" \\ back\nline\ttab \u0001 </end>' * 3


def _tool_return(call_id: str, content: JsonValue) -> dict[str, JsonValue]:
    part: dict[str, JsonValue] = {
        "part_kind": "tool-return",
        "tool_name": "lookup",
        "content": content,
        "tool_call_id": call_id,
        "timestamp": "2026-12-01T07:00:00Z",
        "metadata": None,
    }
    return {"kind": "request", "parts": [{"part_kind": "retry-prompt", "content": "x"}, part], "run_id": "r1"}


def _result(call_id: str, output: str) -> NewEvent:
    return NewEvent(ToolResult(tool_call_id=call_id, tool_name="lookup", output=output))


async def test_a_tool_output_written_with_its_event_is_stored_once_and_read_back_whole(
    store: Store, backend: str
) -> None:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    returned = _tool_return("c1", _OUTPUT)
    await store.write(Write(session.id, [_result("c1", _OUTPUT)], messages=[returned]))
    cut = _tool_return("c2", _OUTPUT)  # the event holds a shortened output: the message keeps its own
    await store.write(Write(session.id, [_result("c2", _OUTPUT[:10])], messages=[cut]))
    other = _tool_return("c3", _OUTPUT)  # no event of its write answers c3
    await store.write(Write(session.id, [_result("c4", _OUTPUT)], messages=[other, _REQUEST]))
    odd = {**_tool_return("c5", _OUTPUT), "score": float("nan")}  # SQLite's JSON functions refuse NaN
    nul = _tool_return("c6", "a\x00b")
    await store.write(Write(session.id, [_result("c5", _OUTPUT), _result("c6", "a\x00b")], messages=[odd, nul]))

    messages = await store.read_messages(session.conversation_id)
    assert json.dumps(messages) == json.dumps([returned, cut, other, _REQUEST, odd, nul])  # key order too
    first = (True, 1) if backend == "sqlite" else (True, None)  # SQLite: the body is the template
    assert await _body_columns(store, session.conversation_id) == [first] + [(True, None)] * 5
    if backend == "sqlite":
        bodies = await store._read(  # type: ignore[attr-defined]
            lambda tx: tx.fetch("SELECT body, event_path FROM message_rows ORDER BY idx LIMIT 1")
        )
        assert _OUTPUT[:20] not in bodies[0][0] and bodies[0][1] == "$.parts[1].content"


async def test_a_tool_output_that_spells_a_non_finite_number_is_stored_once_too(store: Store, backend: str) -> None:
    # Only the rest of the message is looked at for non-finite numbers: the output is a string.
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    spelled = "NaN and -Infinity are the answers " + _OUTPUT
    returned = _tool_return("c1", spelled)
    await store.write(Write(session.id, [_result("c1", spelled)], messages=[returned]))
    assert json.dumps(await store.read_messages(session.conversation_id)) == json.dumps([returned])
    first = (True, 1) if backend == "sqlite" else (True, None)  # SQLite: the body is the template
    assert await _body_columns(store, session.conversation_id) == [first]


async def test_messages_of_a_schema_5_file_keep_their_bodies(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    store = await connect_store(f"sqlite:///{path}")
    try:
        session = await store.create_session(SessionDraft(name="nova", role="chat"))
        returned = _tool_return("c1", _OUTPUT)
        await store.write(Write(session.id, [_finished(_RESPONSE)], messages=[_REQUEST, _RESPONSE]))
    finally:
        await store.close()
    # Back to schema 5: its view, without the column (the rows as schema 5 wrote them).
    connection = sqlite3.connect(path, isolation_level=None)
    connection.executescript(
        """
        BEGIN;
        DROP VIEW messages;
        ALTER TABLE message_rows DROP COLUMN event_path;
        CREATE VIEW messages (conversation_id, idx, body) AS
            SELECT m.conversation_id, m.idx, COALESCE(m.body, (
                SELECT json_extract(e.payload, '$.response') FROM conversations c
                JOIN events e ON e.session_id = c.session_id AND e.seq = m.event_seq
                WHERE c.id = m.conversation_id))
            FROM message_rows m;
        DELETE FROM schema_migrations WHERE version >= 6;
        COMMIT;
        """
        + _UNDO_LATER
    )
    connection.close()
    store = await connect_store(f"sqlite:///{path}")
    try:
        assert await store.read_messages(session.conversation_id) == [_REQUEST, _RESPONSE]
        await store.write(Write(session.id, [_result("c1", _OUTPUT)], messages=[returned]))
        assert await store.read_messages(session.conversation_id) == [_REQUEST, _RESPONSE, returned]
        assert await _body_columns(store, session.conversation_id) == [(True, None), (False, 1), (True, 2)]
    finally:
        await store.close()
