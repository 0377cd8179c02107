"""Live attach over the network: `/api/agents/{id}/events?after=<cursor>` as a WebSocket or as SSE.

A client gets a snapshot (the session's committed history, the partial turn, in-progress thinking and
pending choices) and then every later event, exactly once relative to the snapshot. With `after` (or SSE's
`Last-Event-ID`) it gets every event after that cursor instead of a snapshot, so a client that reconnects
with the last id it saw misses nothing and sees nothing twice.

Frames are JSON objects told apart by `kind`:

- `{"kind": "snapshot", "cursor": ..., "history": [...], "partial": {...} | null, "pendingChoices": [...]}`
- `{"kind": "event", "event": {..., "cursor": ...}}`
- `{"kind": "error", "error": {"code": ..., "message": ...}}`, after which the server closes the stream.

A deleted agent's stream ends after its last event, the notice of its deletion (`runtime.info`, source
`deletion`): the WebSocket closes with 1000, the SSE response ends (and a reconnect after that event is
answered 204, which stops a browser's EventSource).

Over SSE the frame's `kind` is the SSE event name and its cursor the SSE `id`. Over a WebSocket the server
closes with code 4000 + the HTTP status of the error (4400, 4401, 4403, 4404), 1001 when the service
stops, or 1008 when the client sent something other than `{"type": "ping"}` (a message over the size limit
too: its error frame says `too_large`).

A client that falls behind (its queue in the broadcaster fills up) is cut loose by the broadcaster without
slowing the session; its stream then catches up from the store from the last event it was given and
attaches again, still with no gap.

The session may run in another process (several services on one store): right after attaching, the stream
catches up to the store's newest event and, with a live ring shared by the processes (Redis), to the ring's
(so a ring that lost its streams in a restart still leaves nothing out); it then fills from the ring (or the
store) any event missing before the next one it is given, so it is the same exactly-once stream on every
process. When nothing live comes for a while (`_QUIET_FIRST`, then less and less often), it looks in the store
too: the durable events of a turn whose writer could not publish to the ring (Redis down there), or that runs
in a process whose ring this one does not share (a memory ring), still come, late and without their deltas.
While the shared ring cannot be relayed here (Redis down for this process), a client still attaches and keeps
its stream: this process's own events come live as ever, the others' from the store every `_QUIET_UNRELAYED`,
and once the ring is back its relay starts again and their deltas come too.
A client that stops reading altogether is disconnected once a send has waited `send_timeout` seconds (one
watch per service looks every quarter of that).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from asyncio import FIRST_COMPLETED
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import JsonValue
from starlette.requests import Request
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from agentwatch.errors import AgentwatchError, InvalidArgument, InvalidCursor
from agentwatch.events import Event, StreamCursor, is_deletion_notice
from agentwatch.live import Lagged, cancel_and_wait
from agentwatch.service._wire import error, event_text, snapshot_text, status_for
from agentwatch.service.broadcast import LiveClient
from agentwatch.tools import MAX_ID_CHARS

if TYPE_CHECKING:
    from agentwatch.runtime.thread_observer import ReplaySnapshot
    from agentwatch.service.app import ServiceState

__all__ = ["Attachment", "Frame", "SendWatch", "events_sse", "events_websocket"]

log = logging.getLogger(__name__)

# SSE sends are bounded with `asyncio.timeout`, never `asyncio.wait_for`: on Python 3.11 wait_for can swallow
# a cancellation that lands as the send completes, and the stream would go on for a client that left.
# WebSocket sends are watched by the service's `SendWatch` instead.
_RING_LIMIT = 10_000
_QUIET_FIRST = 2.0
"""Seconds without a live event after which an attach first looks in the store for events no ring brought;
the wait doubles at each quiet look, up to `_QUIET_MOST`, and starts again at the next live event."""
_QUIET_MOST = 30.0
_QUIET_UNRELAYED = 1.0
"""Seconds between the store looks of an attach while the shared ring cannot be relayed (Redis down)."""
_PAGE = 500
_KEEPALIVE_SECONDS = 15.0


@dataclass(frozen=True, slots=True)
class Frame:
    """One message of an attach stream."""

    kind: Literal["snapshot", "event", "error"]
    cursor: str | None
    """The position a reconnect resumes after (the SSE id); None for an error."""
    body: dict[str, JsonValue]
    """The frame's fields but `kind` (empty when `text` is given)."""
    text: str = field(default="", compare=False)
    """The frame as JSON, encoded once however many clients it is sent to."""

    def json(self) -> str:
        if self.text:
            return self.text
        # ASCII only: SSE readers split lines on more than LF (U+2028 in a text would cut a frame).
        return json.dumps({"kind": self.kind, **self.body}, separators=(",", ":"))


_FRAME_CACHE = 4096
_frames: OrderedDict[str, Frame] = OrderedDict()


def _event_frame(event: Event) -> Frame:
    """The frame of an event, shared by every client it is sent to (an event is encoded once, not once per
    attached client)."""
    frame = _frames.get(event.id)
    if frame is None:
        cursor = event.cursor.encode()
        frame = Frame("event", cursor, {}, f'{{"kind":"event","event":{event_text(event, cursor)}}}')
        _frames[event.id] = frame
        if len(_frames) > _FRAME_CACHE:
            _frames.popitem(last=False)
    return frame


def _snapshot_frame(snapshot: ReplaySnapshot) -> Frame:
    return Frame("snapshot", snapshot.position.encode(), {}, snapshot_text(snapshot))


class Attachment:
    """One client's attach: `open()` attaches (or raises, e.g. no such session), `frames()` yields a snapshot
    (or the events after `after`) and then every later event, until the session is deleted; `close()`
    detaches."""

    def __init__(self, state: ServiceState, session_id: str, after: StreamCursor | None) -> None:
        self.state = state
        self.session_id = session_id
        self.after = after
        self._client: LiveClient | None = None

    async def open(self) -> None:
        """Attach; raises `AgentwatchError` when the session cannot be attached to."""
        if len(self.session_id) > MAX_ID_CHARS:  # the tools' bound on an id, before the store is asked
            raise InvalidArgument(f"id: an agent's id is 1..{MAX_ID_CHARS} characters, got {len(self.session_id)}")
        self._client = client = await self.state.broadcaster.attach(self.state.engine, self.session_id)
        if self.after is not None and client.snapshot is not None:
            # A position past the newest event came from no stream of this agent (the checksum is no secret):
            # every event would be at or before it, and the stream would never send one.
            newest = max(
                client.snapshot.position.seq, (await self.state.engine.store.get_session(self.session_id)).last_seq
            )
            if self.after.seq > newest:
                self.close()
                raise InvalidCursor(
                    f"after: the cursor is past the agent's newest event (seq {newest}); pass back a cursor this "
                    "stream gave, or attach without one",
                    fields=["after"],
                )

    def close(self) -> None:
        """Detach (idempotent)."""
        if self._client is not None:
            self.state.broadcaster.detach(self._client)

    async def frames(self) -> AsyncGenerator[Frame, None]:
        engine, broadcaster = self.state.engine, self.state.broadcaster
        session_id = self.session_id
        cursor = self.after
        client = self._client
        try:
            while True:
                if client is None:
                    client = self._client = await broadcaster.attach(engine, session_id)
                snapshot, client.snapshot = client.snapshot, None
                assert snapshot is not None
                position = snapshot.position
                if cursor is None:
                    yield _snapshot_frame(snapshot)
                    cursor = position
                else:
                    async for event in _between(self.state, session_id, cursor, position):
                        yield _event_frame(event)
                        cursor = event.cursor
                    cursor = max(cursor, position)
                del snapshot  # sent: an attached client holds its queue, not its session's history
                shared = broadcaster.ring
                # Events this engine did not write (a turn running in another process): as far as the shared
                # ring's newest, and at least as far as the store's (a ring that lost its streams has none).
                session = await engine.store.get_session(session_id)
                head = StreamCursor(session_id, session.last_seq)
                if shared is not None and broadcaster.relaying(session_id):
                    try:
                        head = max(head, await shared.head(session_id) or head)
                    except Exception as exc:  # (the ring failed since: the store's head will do)
                        log.warning("the live ring could not be read for %s: %s", session_id, exc)
                if head > cursor:
                    async for event in _between(self.state, session_id, cursor, head):
                        if event.cursor > cursor:
                            yield _event_frame(event)
                            cursor = event.cursor
                if session.deleted_at is not None and cursor >= head:
                    return  # deleted, and every event given: nothing more will come
                # Live: (seq, sub) tuples rather than cursors, as this runs per client per event.
                last = (cursor.seq, cursor.sub)
                quiet = _QUIET_FIRST
                try:
                    while True:
                        relayed = broadcaster.relaying(session_id)
                        live = await client.next(quiet if relayed else _QUIET_UNRELAYED)
                        if live is None:
                            # Nothing live for a while: the store may hold events that no ring brought here
                            # (their writer's ring failed, or it is not shared with this process). Looked at less
                            # often the longer the session stays quiet; every `_QUIET_UNRELAYED` while the shared
                            # ring cannot be relayed here, asking for its relay again each time.
                            if relayed:
                                quiet = min(quiet * 2, _QUIET_MOST)
                            else:
                                await broadcaster.ensure_relayed(session_id)
                            try:
                                last_seq = (await engine.store.get_session(session_id)).last_seq
                            except Exception as exc:  # (a store blip: the live stream goes on; looked at again)
                                log.warning("an attach of %s could not look in the store: %s", session_id, exc)
                                continue
                            fill_to: StreamCursor | None = StreamCursor(session_id, last_seq)
                        else:
                            quiet, at = _QUIET_FIRST, (live.seq, live.sub)
                            if at <= last:
                                continue
                            # A durable event before it that no ring of ours brought (written elsewhere)?
                            fill_to = live.cursor if _missing_before(last, live) else None
                        if fill_to is not None:
                            cursor = StreamCursor(session_id, *last)
                            async for missed in _between(self.state, session_id, cursor, fill_to):
                                if missed.cursor > cursor:
                                    yield _event_frame(missed)
                                    cursor = missed.cursor
                                    if _ends_stream(missed):
                                        return
                            last = (cursor.seq, cursor.sub)
                        if live is None or at <= last:
                            continue
                        yield _event_frame(live)
                        last = at
                        if _ends_stream(live):
                            return
                except Lagged:
                    # The broadcaster cut this client loose: catch up from the store, then attach again.
                    cursor = StreamCursor(session_id, *last)
                    broadcaster.detach(client)
                    client = None
        finally:
            self.close()


async def _between(
    state: ServiceState, session_id: str, cursor: StreamCursor, position: StreamCursor
) -> AsyncIterator[Event]:
    """The events after `cursor` up to `position`: from the live ring when it still holds all of them
    (deltas included), else the durable ones from the store."""
    if position <= cursor:
        return
    engine = state.engine
    try:
        retained = await engine.ring.recent(session_id, after=cursor, limit=_RING_LIMIT)
    except Exception as exc:  # the ring is a view (Redis down): the store has every durable event
        log.warning("the live ring could not be read for %s (%s): its events come from the store", session_id, exc)
        retained = []
    if retained and (cursor.seq + 1, 0) >= (retained[0].seq, retained[0].sub) and retained[-1].cursor >= position:
        for event in retained:
            if event.cursor > position:
                return
            yield event
        return
    after_seq = cursor.seq
    while after_seq < position.seq:
        page = await engine.store.read_events(session_id, after_seq=after_seq, limit=_PAGE)
        for event in page:
            if event.seq > position.seq:
                return
            yield event
        if len(page) < _PAGE:
            return
        after_seq = page[-1].seq


def _ends_stream(event: Event) -> bool:
    """Whether `event` is a session's last: the notice its deletion writes."""
    return is_deletion_notice(event.payload)


def _missing_before(last: tuple[int, int], event: Event) -> bool:
    """Whether a durable event lies between position `last` and `event` (which then came first from another
    way)."""
    return event.seq > last[0] + (1 if event.sub == 0 else 0)


def _parse_after(text: str | None, session_id: str) -> StreamCursor | None:
    if text is None or text == "":
        return None
    return StreamCursor.decode(text, session_id=session_id)


# -- WebSocket --------------------------------------------------------------------------------------------


async def events_websocket(websocket: WebSocket) -> None:
    """`GET /api/agents/{id}/events` upgraded to a WebSocket."""
    state: ServiceState = websocket.app.state.service
    await websocket.accept()
    session_id = websocket.path_params["id"]
    try:
        after = _parse_after(websocket.query_params.get("after"), session_id)
    except AgentwatchError as exc:
        await _ws_refuse(websocket, exc.to_dict())
        return
    attachment = Attachment(state, session_id, after)
    try:
        await attachment.open()
    except AgentwatchError as exc:
        await _ws_refuse(websocket, exc.to_dict())
        return
    frames = attachment.frames()
    sending = _Sending()
    state.sends.watch(sending, state.settings.send_timeout)
    pump = asyncio.create_task(_ws_pump(websocket, frames, sending))
    listen = asyncio.create_task(_ws_listen(websocket, state.settings.max_message_bytes))
    stopped = state.stopped()
    try:
        # Two tasks per socket; the service's stop and a stalled send are futures shared or set by one watch.
        done, _ = await asyncio.wait((pump, listen, stopped, sending.stalled), return_when=FIRST_COMPLETED)
    finally:
        state.sends.forget(sending)
        await cancel_and_wait([pump, listen])
        await frames.aclose()
        attachment.close()
    if stopped in done:
        await _ws_close(websocket, 1001, "the service is stopping; reconnect with your last cursor")
        return
    if sending.stalled in done:
        await _ws_close(websocket, 1008, "the client did not read; reconnect with your last cursor")
        return
    if listen in done and not listen.cancelled() and listen.exception() is None:
        refusal = listen.result()
        if refusal is not None:
            await _ws_refuse(websocket, refusal, close_code=1008)
        return
    if pump in done and not pump.cancelled():
        failure = pump.exception()
        if failure is None:  # the stream ended: the agent was deleted
            await _ws_close(websocket, 1000, "the agent was deleted")
        elif isinstance(failure, AgentwatchError):
            await _ws_refuse(websocket, failure.to_dict())
        elif failure is not None and not isinstance(failure, WebSocketDisconnect | OSError):
            log.warning("attach stream of %s failed: %r", session_id, failure)
            await _ws_refuse(websocket, error("internal", "the attach stream failed; reconnect with your cursor"))


class _Sending:
    """When a socket's send in progress began, and a future set once one has waited too long."""

    __slots__ = ("since", "stalled")

    def __init__(self) -> None:
        self.since: float | None = None
        self.stalled: asyncio.Future[None] = asyncio.get_running_loop().create_future()


class SendWatch:
    """The sends in progress on every WebSocket of one service, looked at by one task every quarter of the
    send timeout: rather than each send arming a timer (the fan-out of an event to a hundred clients would
    arm and cancel a hundred), or each idle socket waking to look at its own."""

    def __init__(self) -> None:
        self._sends: dict[_Sending, float] = {}
        self._task: asyncio.Task[None] | None = None

    def watch(self, sending: _Sending, timeout: float) -> None:
        """Set `sending.stalled` once a send of it has waited more than `timeout` seconds."""
        self._sends[sending] = timeout
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="agentwatch-send-watch")

    def forget(self, sending: _Sending) -> None:
        """Stop watching `sending` (its socket is done); idempotent."""
        self._sends.pop(sending, None)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._sends:  # ends with the last socket, so no task outlives the sockets
                await asyncio.sleep(min(self._sends.values()) / 4)
                now = loop.time()
                for sending, timeout in list(self._sends.items()):
                    since = sending.since
                    if since is not None and now - since > timeout and not sending.stalled.done():
                        sending.stalled.set_result(None)
        finally:
            self._task = None


async def _ws_pump(websocket: WebSocket, frames: AsyncIterator[Frame], sending: _Sending) -> None:
    clock = asyncio.get_running_loop().time
    send = websocket.send
    async for frame in frames:
        sending.since = clock()
        await send({"type": "websocket.send", "text": frame.json()})
        sending.since = None
        del frame  # not kept while the next is awaited (the last may be a snapshot of many events)


async def _ws_listen(websocket: WebSocket, max_bytes: int) -> dict[str, JsonValue] | None:
    """Read what the client sends: pings only. Returns None when it goes away, else why it is refused."""
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return None
        data: Any = message.get("text")
        if data is None:
            data = message.get("bytes")
        if data is not None and len(data) > max_bytes:
            return error("too_large", f"a message to the server may be at most {max_bytes} bytes")
        try:
            parsed = json.loads(data) if data is not None else None
        except (ValueError, UnicodeDecodeError, RecursionError):
            parsed = None
        if parsed != {"type": "ping"}:
            return error("invalid_argument", 'the server only reads {"type": "ping"} on this socket')


async def _ws_refuse(websocket: WebSocket, refusal: dict[str, Any], *, close_code: int | None = None) -> None:
    frame = Frame("error", None, refusal)
    code = close_code or 4000 + status_for(refusal)
    with contextlib.suppress(Exception):
        async with asyncio.timeout(5.0):
            await websocket.send_text(frame.json())
    await _ws_close(websocket, code, str(refusal.get("error", {}).get("code", "error")))


async def _ws_close(websocket: WebSocket, code: int, reason: str) -> None:
    with contextlib.suppress(Exception):
        await websocket.close(code, reason[:120])


# -- Server-sent events -----------------------------------------------------------------------------------


async def events_sse(request: Request) -> _SSEResponse:
    """`GET /api/agents/{id}/events` as a `text/event-stream` (`Last-Event-ID` wins over `after`)."""
    state: ServiceState = request.app.state.service
    session_id = request.path_params["id"]
    text = request.headers.get("last-event-id") or request.query_params.get("after")
    return _SSEResponse(state, session_id, text)


class _SSEResponse:
    """An SSE stream written straight to ASGI, so each write has a timeout and a disconnect ends it."""

    def __init__(self, state: ServiceState, session_id: str, after: str | None) -> None:
        self.state = state
        self.session_id = session_id
        self.after = after

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = self.state
        try:
            after = _parse_after(self.after, self.session_id)
            attachment = Attachment(state, self.session_id, after)
            await attachment.open()
        except AgentwatchError as exc:
            await _send_json_error(send, exc.to_dict())
            return
        if after is not None and await self._past_the_end(after):
            # A deleted agent's stream that has had every event: 204 tells a browser's EventSource, which
            # reconnects whenever a stream ends, to stop.
            attachment.close()
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        frames = attachment.frames()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-store"),
                    (b"x-accel-buffering", b"no"),
                ],
            }
        )
        pump = asyncio.create_task(self._pump(send, frames))
        gone = asyncio.create_task(_disconnected(receive))
        refusal: dict[str, Any] | None = None
        try:
            await asyncio.wait((pump, gone, state.stopped()), return_when=FIRST_COMPLETED)
            if pump.done() and not pump.cancelled() and pump.exception() is not None:
                failure = pump.exception()
                if isinstance(failure, AgentwatchError):  # the live ring or the store failed: say so, as a socket does
                    refusal = failure.to_dict()
                elif not isinstance(failure, TimeoutError | OSError):  # (those two: the client is gone)
                    log.warning("attach stream of %s failed: %r", self.session_id, failure, exc_info=failure)
                    refusal = error("internal", "the attach stream failed; reconnect with your cursor")
        finally:
            await cancel_and_wait([pump, gone])
            await frames.aclose()
            attachment.close()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1.0):
                if refusal is not None:
                    await send(_sse_chunk(Frame("error", None, refusal)))
                await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _past_the_end(self, after: StreamCursor) -> bool:
        """Whether a reconnect `after` comes after a deleted agent's last event (a store error: not known, so
        the stream goes on, and says it)."""
        try:
            session = await self.state.engine.store.get_session(self.session_id)
        except AgentwatchError:
            return False
        return session.deleted_at is not None and after.seq >= session.last_seq

    async def _pump(self, send: Send, frames: AsyncGenerator[Frame, None]) -> None:
        timeout = self.state.settings.send_timeout
        ready: asyncio.Queue[Frame | Exception | None] = asyncio.Queue(maxsize=1)

        async def produce() -> None:
            try:
                async for frame in frames:
                    await ready.put(frame)
            except Exception as exc:  # handed on at once: the stream ends now, not at the next keep-alive
                await ready.put(exc)
            else:
                await ready.put(None)  # the frames ended (the agent was deleted): so does the response

        producer = asyncio.create_task(produce())
        try:
            while True:
                try:
                    async with asyncio.timeout(_KEEPALIVE_SECONDS):
                        frame = await ready.get()
                except TimeoutError:
                    async with asyncio.timeout(timeout):
                        await send(_KEEPALIVE)
                    continue
                if frame is None:
                    return
                if isinstance(frame, Exception):
                    raise frame
                async with asyncio.timeout(timeout):
                    await send(_sse_chunk(frame))
        finally:
            await cancel_and_wait([producer])


_KEEPALIVE = {"type": "http.response.body", "body": b": keepalive\n\n", "more_body": True}


def _sse_chunk(frame: Frame) -> dict[str, Any]:
    lines = []
    if frame.cursor is not None:
        lines.append(f"id: {frame.cursor}")
    lines.append(f"event: {frame.kind}")
    lines.append(f"data: {frame.json()}")
    return {"type": "http.response.body", "body": ("\n".join(lines) + "\n\n").encode(), "more_body": True}


async def _disconnected(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _send_json_error(send: Send, refusal: dict[str, Any]) -> None:
    body = json.dumps(refusal).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status_for(refusal),
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
