"""Text with NUL characters and lone surrogates behaves the same on every backend: inside JSON (event
payloads, messages, answers, settings) it is stored losslessly; in a plain text column (a name, an inbox
text, a filter) it is refused with `InvalidArgument` before anything is written. Never a traceback, never
half-written."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentwatch.errors import InvalidArgument
from agentwatch.events import AssistantMessage, NewEvent, ToolResult, UserMessage, new_id
from agentwatch.store import (
    InputDraft,
    RequestClose,
    RequestDraft,
    SessionDraft,
    SessionFilter,
    SessionPatch,
    Store,
    Write,
)

_SHARED_STORE = settings(deadline=None, max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])

awkward = st.text(
    alphabet=st.one_of(
        st.sampled_from(["\x00", "\ud800", "\udfff", "\udc80", "\u2028", "\x7f", '"', "\\", "é", "😀", "\ufeff"]),
        st.characters(codec="utf-8"),
    ),
    max_size=40,
)


def storable(text: str) -> bool:
    """What a plain text column can keep on every backend."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


async def _snapshot(store: Store, session_id: str) -> tuple[object, ...]:
    session = await store.get_session(session_id)
    return (
        session,
        await store.read_events(session_id, limit=10_000),
        await store.read_messages(session.conversation_id),
        await store.list_inputs(session_id, pending_only=False),
        await store.list_requests(session_id=session_id, status=None),
    )


@settings(_SHARED_STORE)
@given(text=awkward)
async def test_json_documents_keep_any_text_losslessly(store: Store, text: str) -> None:
    session = await store.create_session(SessionDraft(name=new_id("ses"), role="chat", settings={"note": text}))
    events = [
        NewEvent(UserMessage(text=text)),
        NewEvent(AssistantMessage(text=text + text)),
        NewEvent(ToolResult(tool_call_id="call_1", tool_name="read", output=text)),
    ]
    request = RequestDraft(kind="question", summary="a question", questions=[text], body={text: [text]})
    messages = [{"kind": "request", "parts": [{"content": text}]}, text]

    stored = await store.write(Write(session.id, events, requests_open=[request], messages=messages))
    [opened] = await store.list_requests(session_id=session.id)
    await store.write(
        Write(
            session.id,
            [NewEvent(UserMessage(text=text))],
            requests_close=[RequestClose(request_id=opened.id, status="resolved", answer={"said": text})],
        )
    )
    await store.append(session.id, [NewEvent(AssistantMessage(text=text))])  # the group path of appends

    read = await store.read_events(session.id)
    assert read[:3] == stored
    assert [event.payload.text for event in read[3:]] == [text, text]  # type: ignore[union-attr]
    assert await store.read_messages(session.conversation_id) == messages
    [closed] = await store.list_requests(session_id=session.id, status=None)
    assert (closed.questions, closed.body, closed.answer) == ([text], {text: [text]}, {"said": text})
    assert (await store.get_session(session.id)).settings == {"note": text}
    assert await store.get_event(session.id, stored[2].id) == stored[2]


@settings(_SHARED_STORE)
@given(text=awkward)
async def test_plain_text_columns_keep_valid_text_and_refuse_the_rest_before_writing(store: Store, text: str) -> None:
    keeper = await store.create_session(SessionDraft(name=new_id("ses"), role="chat"))
    before = await _snapshot(store, keeper.id)
    sessions_before = await store.count_sessions(SessionFilter(deleted=True))
    attempts = {
        "create": lambda: store.create_session(SessionDraft(name=text or "x", role="chat", display_name=text)),
        "patch": lambda: store.update_session(keeper.id, SessionPatch(last_text=text, display_name=text)),
        "input": lambda: store.write(
            Write(keeper.id, [NewEvent(UserMessage(text="hi"))], inputs_add=[InputDraft(text=text)])
        ),
        "request": lambda: store.write(
            Write(keeper.id, requests_open=[RequestDraft(kind="question", summary=text or "x")])
        ),
        "turn": lambda: store.append(keeper.id, [NewEvent(UserMessage(text="hi"), turn_id=text or "x")]),
    }
    for name, attempt in attempts.items():
        if storable(text or "x"):
            await attempt()
            continue
        with pytest.raises(InvalidArgument, match=r"NUL character|lone surrogate") as refused:
            await attempt()
        assert refused.value.code == "invalid_argument", name
        assert await _snapshot(store, keeper.id) == before, name  # nothing of it was written
        assert await store.count_sessions(SessionFilter(deleted=True)) == sessions_before, name

    if storable(text):
        created = await store.list_sessions(SessionFilter(name=text or "x"))
        assert [session.display_name for session in created.items] == [text]
        assert (await store.get_session(keeper.id)).last_text == text


@settings(_SHARED_STORE)
@given(text=awkward)
async def test_reads_with_any_text_answer_or_refuse(store: Store, text: str) -> None:
    """Filters and ids with such text: an answer (empty) or `InvalidArgument`, never a driver's error."""
    reads = [
        lambda: store.list_sessions(SessionFilter(name=text, q=text, scope=text)),
        lambda: store.count_sessions(SessionFilter(role=[text], ids=[text])),
        lambda: store.get_lease(text),
        lambda: store.read_messages(text),
        lambda: store.list_requests(session_id=text),
    ]
    for read in reads:
        if storable(text):
            await read()
        else:
            with pytest.raises(InvalidArgument):
                await read()
