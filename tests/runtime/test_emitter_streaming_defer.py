"""A deferred write (the opening of a model request) waits longer for its companion (the response) once the
model streams, up to a bound; with nothing streamed it goes after its own delay."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentwatch.events import ContentDelta, Event, NewEvent, TurnId, UserMessage
from agentwatch.live import connect_live
from agentwatch.runtime import emitter as emitter_module
from agentwatch.runtime.emitter import GROUP_COMMIT_SECONDS, SessionEmitter
from agentwatch.store import SessionDraft, Write, connect_store

TURN = TurnId("trn_defer")


def said(text: str) -> NewEvent:
    return NewEvent(UserMessage(text=text), TURN)


async def test_an_opening_waits_for_a_streaming_response_up_to_a_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bound = 0.4  # well beyond the delay, so a loaded machine's late timers cannot blur the two
    monkeypatch.setattr(emitter_module, "STREAMING_DEFER_SECONDS", bound)
    store = await connect_store(f"sqlite:///{tmp_path / 'aw.db'}")
    ring = await connect_live("memory://")
    try:
        session = await store.create_session(SessionDraft(id="ses_defer", name="d", role="r"))
        writes: list[list[str]] = []
        write = store.write

        async def counted(w: Write) -> list[Event]:
            writes.append([e.payload.text for e in w.events if isinstance(e.payload, UserMessage)])
            return await write(w)

        store.write = counted  # type: ignore[method-assign]
        emitter = SessionEmitter(session.id, session.last_seq, store=store, ring=ring)
        delta = ContentDelta(part="text", index=0, request_index=0, delta="Hel")

        # Streaming: the opening still waits after its own delay, and goes with the response.
        opening = emitter.submit(Write(session.id, events=[said("opening")]), turn=True, defer=GROUP_COMMIT_SECONDS)
        emitter.stream(delta, TURN)
        await asyncio.sleep(GROUP_COMMIT_SECONDS * 2.5)
        assert writes == []
        await emitter.commit(Write(session.id, events=[said("response")]), turn=True)
        assert opening.done() and writes == [["opening", "response"]]

        # Streaming without an end: the opening goes after the bound.
        started = asyncio.get_running_loop().time()
        opening = emitter.submit(Write(session.id, events=[said("alone")]), turn=True, defer=GROUP_COMMIT_SECONDS)
        emitter.stream(delta, TURN)
        await opening
        assert writes[-1] == ["alone"]
        waited = asyncio.get_running_loop().time() - started
        assert bound * 0.9 <= waited < bound + 2.0

        # Nothing streamed: the opening goes after its own delay.
        quiet = emitter.submit(Write(session.id, events=[said("quiet")]), turn=True, defer=GROUP_COMMIT_SECONDS)
        await asyncio.sleep(bound / 2)
        assert writes[-1] == ["quiet"]
        await quiet
        await emitter.close()
    finally:
        await ring.close()
        await store.close()
