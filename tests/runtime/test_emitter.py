"""The session emitter on a real SQLite store: the turn's first failure kept in one place, writes of a turn
that share a commit, and the conversation it keeps between turns (trusted only while nobody else wrote)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agentwatch.errors import StoreError
from agentwatch.events import Event, NewEvent, RuntimeNotice, TurnId, UserMessage
from agentwatch.live import LiveRing, connect_live
from agentwatch.runtime.emitter import SessionEmitter
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.runtime.roster import RoleSessions
from agentwatch.runtime.thread_observer import EventCollector
from agentwatch.store import SessionDraft, SessionRecord, Store, Write, connect_store
from tests.runtime.support import OpenEngine, Scripted, role, until

TURN = TurnId("trn_emitter")


def said(text: str) -> NewEvent:
    return NewEvent(UserMessage(text=text), TURN)


def notice(text: str) -> NewEvent:
    return NewEvent(RuntimeNotice(type="runtime.info", message=text, source="test"))


def commits_of(store: Store) -> list[list[str]]:
    """The types of the events each `store.write` stores from now on, one list per write (a commit)."""
    commits: list[list[str]] = []
    write = store.write

    async def counted(w: Write) -> list[Event]:
        stored = await write(w)
        commits.append([e.type for e in stored])
        return stored

    store.write = counted  # type: ignore[method-assign]
    return commits


@asynccontextmanager
async def emitter_store(tmp_path: Path, session_id: str) -> AsyncIterator[tuple[Store, LiveRing, SessionRecord]]:
    """A real SQLite store and memory ring, with one session to emit for."""
    store = await connect_store(f"sqlite:///{tmp_path / 'aw.db'}")
    ring = await connect_live("memory://")
    try:
        yield store, ring, await store.create_session(SessionDraft(id=session_id, name="e", role="r"))
    finally:
        await ring.close()
        await store.close()


async def test_after_a_failed_write_of_the_turn_nothing_more_of_it_is_written_until_the_turn_ends(
    tmp_path: Path,
) -> None:
    async with emitter_store(tmp_path, "ses_emitter") as (store, ring, session):
        writes: list[list[str]] = []
        write = store.write

        async def failing(w: Write) -> list[Event]:
            texts = [e.payload.text for e in w.events if isinstance(e.payload, UserMessage)]
            if "two" in texts:
                raise StoreError("the disk is full")
            stored = await write(w)
            writes.append([e.type for e in stored])
            return stored

        store.write = failing  # type: ignore[method-assign]
        emitter = SessionEmitter(session.id, session.last_seq, store=store, ring=ring)
        one = await emitter.commit(Write(session.id, events=[said("one")]), turn=True)
        two = emitter.submit(Write(session.id, events=[said("two")]), turn=True)
        aside = emitter.submit(Write(session.id, events=[notice("not part of the turn")]))
        with pytest.raises(StoreError, match="the disk is full"):
            await emitter.commit(Write(session.id, events=[said("three")]), turn=True)
        with pytest.raises(StoreError, match="the disk is full"):
            await emitter.barrier()
        assert len(one) == 1 and two.exception() is not None and len(await aside) == 1
        assert writes == [["message.user"], ["runtime.info"]]  # `three` came after the failure: skipped

        failure = emitter.end_turn()
        assert isinstance(failure, StoreError)
        await emitter.commit(Write(session.id, events=[said("four")]), turn=True)  # the next turn writes again
        stored = await store.read_events(session.id, limit=100)
        assert [getattr(e.payload, "text", None) for e in stored] == ["one", None, "four"]
        await emitter.close()


async def test_writes_of_the_turn_waiting_together_share_one_commit_and_keep_their_order(tmp_path: Path) -> None:
    async with emitter_store(tmp_path, "ses_group") as (store, ring, session):
        commits: list[int] = []
        write = store.write

        async def counted(w: Write) -> list[Event]:
            commits.append(len(w.events))
            return await write(w)

        store.write = counted  # type: ignore[method-assign]
        emitter = SessionEmitter(session.id, session.last_seq, store=store, ring=ring)
        first = emitter.submit(Write(session.id, events=[said("a")], messages=[{"m": 1}]), turn=True, defer=60)
        second = emitter.submit(Write(session.id, events=[said("b"), said("c")], messages=[{"m": 2}]), turn=True)
        assert [e.seq for e in await first] == [1] and [e.seq for e in await second] == [2, 3]
        assert commits == [3]
        assert await store.read_messages(session.conversation_id) == [{"m": 1}, {"m": 2}]
        await emitter.close()


async def test_a_deferred_write_submitted_while_the_writer_runs_still_waits_for_its_companion(tmp_path: Path) -> None:
    async with emitter_store(tmp_path, "ses_held") as (store, ring, session):
        commits: list[int] = []
        write = store.write
        writing = asyncio.Event()
        go_on = asyncio.Event()

        async def counted(w: Write) -> list[Event]:
            commits.append(len(w.events))
            writing.set()
            await go_on.wait()
            return await write(w)

        store.write = counted  # type: ignore[method-assign]
        emitter = SessionEmitter(session.id, session.last_seq, store=store, ring=ring)
        first = emitter.submit(Write(session.id, events=[said("a")]), turn=True)
        await writing.wait()  # the first write is being written
        held = emitter.submit(Write(session.id, events=[said("b")]), turn=True, defer=math.inf)
        go_on.set()
        assert [e.seq for e in await first] == [1]
        await asyncio.sleep(0.05)
        assert commits == [1] and not held.done()  # the writer left it for its companion
        last = emitter.submit(Write(session.id, events=[said("c"), said("d")]), turn=True)
        assert [e.seq for e in await held] == [2] and [e.seq for e in await last] == [3, 4]
        assert commits == [1, 3]
        await emitter.close()


def responses_so_far(ctx: Any) -> Any:
    return Reply(f"{ctx.request_index} responses before this one")


async def test_a_turn_sees_what_another_engine_added_to_the_conversation(tmp_path: Path, scripted: Scripted) -> None:
    model = scripted("history-count", ScriptedModel(function=responses_so_far))
    url = f"sqlite:///{tmp_path / 'aw.db'}"
    definition = role("chat", model)
    async with Engine.open(url, root=tmp_path, definitions=[definition], extensions=[]) as a:
        session = await a.create("chat", source="chat")
        await a.enqueue(session.id, "one")
        await a.wait(session.id, 30)
        await asyncio.sleep(0.1)  # the turn loop lets the session's lease go
        async with Engine.open(url, root=tmp_path, definitions=[definition], extensions=[]) as b:
            await b.enqueue(session.id, "two")  # written by the other engine: a's emitter never sees it
            await b.wait(session.id, 30)
        await a.enqueue(session.id, "three")
        settled, _ = await a.wait(session.id, 30)
        assert settled.last_text == "2 responses before this one"
        await a.enqueue(session.id, "four")  # and the next turn of the same engine keeps counting
        settled, _ = await a.wait(session.id, 30)
    assert settled.last_text == "3 responses before this one"


class _OwnOnly(EventCollector[Any]):
    own_events_only = True


async def test_observers_are_given_what_other_engines_wrote_in_its_place_in_the_order(
    tmp_path: Path, scripted: Scripted
) -> None:
    """Once: an answer given through another process (the CLI on the store) and a turn another engine ran never
    reached this engine's observers: their stream had holes where those events were."""

    def asker(ctx: Any) -> Any:
        if ctx.tool_results:
            return Reply(f"got {ctx.tool_results[0].output}")
        return CallTool("ask_user", {"question": "Colour?"}) if ctx.prompt == "go" else Reply("fine")

    model = scripted("emitter-others", ScriptedModel(function=asker))
    url = f"sqlite:///{tmp_path / 'aw.db'}"
    definition = role("asker", model, tools=("ask_user",))
    everything: EventCollector[Any] = EventCollector()
    own = _OwnOnly()
    async with Engine.open(url, root=tmp_path, definitions=[definition], extensions=[]) as a:
        a.start_with_observer(lambda _sid: everything)
        a.start_with_observer(lambda _sid: own)
        paused = await a.task("asker", "go", timeout=10)
        agent = paused["agentId"]
        async with Engine.open(url, root=tmp_path, definitions=[definition], extensions=[], runs_turns=False) as b:
            await b.answer(paused["pendingHitl"]["hitlId"], "red")
        for _ in range(1500):  # a's turn goes on once it sees the answer
            if (await a.store.get_session(agent)).status == "completed":
                break
            await asyncio.sleep(0.02)
        # The turn loop lets the session's lease go, so c runs the next turn, not a (under load this once took over
        # the 5 s the test gave it, the test went on regardless, and a ran c's turn too).
        await until(lambda: not a.leases.holds(agent), 30)
        async with Engine.open(url, root=tmp_path, definitions=[definition], extensions=[]) as c:
            await c.enqueue(agent, "and now?")  # a whole turn run by another engine
            await c.wait(agent, 30)
        await a.enqueue(agent, "still there?")
        settled, _ = await a.wait(agent, 30)
        assert settled.last_text == "fine"
        await asyncio.sleep(0.1)  # the dispatcher hands the last events out
        stored = await a.store.read_events(agent, limit=1000)
    assert [e for sid, e in everything.events if sid == agent and e.durable] == stored
    mine = [e for sid, e in own.events if sid == agent and e.durable]
    assert "request.resolved" not in {e.type for e in mine} and len({e.turn_id for e in mine} - {None}) == 2
    assert [e.seq for e in mine] == sorted({e.seq for e in mine})


async def test_on_the_redis_ring_watchers_see_every_event_once_in_stream_order_after_it_is_stored(
    open_engine: OpenEngine, scripted: Scripted, redis_url: str
) -> None:
    words = " ".join(f"word{i}" for i in range(20))
    model = scripted("redis-stream", ScriptedModel([Reply(f"Here: {words}.")], chunk_delay=0.001))
    async with open_engine(role("r", model), live=redis_url, extensions=[]) as engine:
        collector: EventCollector[Any] = EventCollector()
        engine.start_with_observer(lambda _sid: collector)
        session = await engine.create("r")
        await engine.enqueue(session.id, "go")
        settled, _ = await engine.wait(session.id, 30)
        assert settled.status == "completed"
        await asyncio.sleep(0.1)  # the dispatcher hands the last events out
        stored = await engine.store.read_events(session.id, limit=1000)
    seen = [e for sid, e in collector.events if sid == session.id]
    assert [e for e in seen if e.durable] == stored
    assert sum(e.type == "content.delta" for e in seen) > 1
    positions = [(e.seq, e.sub) for e in seen]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)


async def test_a_note_that_rides_shares_the_commit_of_the_next_write_and_goes_alone_when_none_comes(
    tmp_path: Path,
) -> None:
    async with emitter_store(tmp_path, "ses_rides") as (store, ring, session):
        commits = commits_of(store)
        emitter = SessionEmitter(session.id, session.last_seq, store=store, ring=ring)
        note = asyncio.ensure_future(
            emitter.commit(Write(session.id, events=[notice("armed")], touch=False), rides=True)
        )
        await asyncio.sleep(0)
        step = await emitter.commit(Write(session.id, events=[said("a")]), turn=True)
        assert [e.seq for e in await note] == [1] and [e.seq for e in step] == [2]
        assert commits == [["runtime.info", "message.user"]]  # one commit, in the order submitted

        alone = await emitter.commit(Write(session.id, events=[notice("nothing follows")], touch=False), rides=True)
        assert [e.seq for e in alone] == [3] and commits[-1] == ["runtime.info"]  # its wait ran out
        await emitter.close()


async def test_a_note_made_while_the_turns_writes_wait_together_joins_their_commit(tmp_path: Path) -> None:
    # An observer's state arrives between a model request's opening (deferred for its response) and the
    # response: the three share one commit, in the order submitted, instead of the note splitting the two.
    async with emitter_store(tmp_path, "ses_between") as (store, ring, session):
        commits = commits_of(store)
        emitter = SessionEmitter(session.id, session.last_seq, store=store, ring=ring)
        opening = emitter.submit(Write(session.id, events=[said("opening")]), turn=True, defer=60)
        note = asyncio.ensure_future(
            emitter.commit(Write(session.id, events=[notice("armed")], touch=False), rides=True)
        )
        await asyncio.sleep(0)
        response = await emitter.commit(Write(session.id, events=[said("response")]), turn=True)
        assert [e.seq for e in await opening] == [1] and [e.seq for e in await note] == [2]
        assert [e.seq for e in response] == [3]
        assert commits == [["message.user", "runtime.info", "message.user"]]
        await emitter.close()


async def test_a_note_that_rides_does_not_join_a_turn_that_failed(tmp_path: Path) -> None:
    async with emitter_store(tmp_path, "ses_failed") as (store, ring, session):
        write = store.write

        async def failing(w: Write) -> list[Event]:
            if any(isinstance(e.payload, UserMessage) and e.payload.text == "bad" for e in w.events):
                raise StoreError("the disk is full")
            return await write(w)

        store.write = failing  # type: ignore[method-assign]
        emitter = SessionEmitter(session.id, session.last_seq, store=store, ring=ring)
        with pytest.raises(StoreError):
            await emitter.commit(Write(session.id, events=[said("bad")]), turn=True)
        note = asyncio.ensure_future(
            emitter.commit(Write(session.id, events=[notice("armed")], touch=False), rides=True)
        )
        await asyncio.sleep(0)
        skipped = emitter.submit(Write(session.id, events=[said("after")]), turn=True)
        assert len(await note) == 1  # kept, though the turn's next write fails with the turn's first failure
        with pytest.raises(StoreError):
            await skipped
        stored = await store.read_events(session.id, limit=10)
        assert [e.type for e in stored] == ["runtime.info"]
        emitter.end_turn()
        await emitter.close()


async def test_an_in_memory_ring_that_refuses_an_event_is_logged_and_the_observers_still_get_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with emitter_store(tmp_path, "ses_ring_refuses") as (store, ring, session):
        collector: EventCollector[Any] = EventCollector()
        emitter = SessionEmitter(session.id, session.last_seq, store=store, ring=ring, observers=[collector])
        await ring.close()  # a closed ring refuses every publish
        stored = await emitter.commit(Write(session.id, events=[said("one")]), turn=True)
        emitter.stream(RuntimeNotice(type="runtime.info", message="ephemeral", source="test"), TURN)
        await emitter.close()
    seen = [event for _, event in collector.events]
    assert seen[:-1] == stored
    assert (seen[-1].seq, seen[-1].sub) == (stored[-1].seq, 1)  # the ephemeral one, right after
    assert caplog.text.count("live ring publish failed") == 1  # a ring that refuses every event says so once


async def test_a_session_that_only_streams_is_active_and_never_reads_stuck(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Even under a stuck threshold shorter than `STREAM_TOUCH_SECONDS` (once a healthy streaming session read
    `stuck` there: its activity time moved on only every 5 s)."""
    model = scripted("slow-talker", ScriptedModel([Reply("word " * 30)], chunk_delay=0.1))  # about 3 s of deltas
    talker = role("talker", model, sessions=RoleSessions(stuck_after_seconds=0.6))
    async with open_engine(talker) as engine:
        session = await engine.create("talker", source="chat")
        await engine.enqueue(session.id, "talk")
        words = []
        while (await engine.store.get_session(session.id)).status in ("idle", "running") and len(words) < 12:
            await asyncio.sleep(0.25)
            (row,) = (await engine.call_tool("agent_list", {}))["agents"]
            if row["status"] == "running":
                words.append(row["word"])
        assert len(words) >= 6 and set(words) == {"working"}, words
