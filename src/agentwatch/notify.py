"""Notifications: a webhook told each time an agent starts waiting on a person, and, when asked, each time an
observer reports on an agent or a turn fails.

`[notify] webhook = "https://hooks.example.com/agentwatch"` in agentwatch.toml (or `AGENTWATCH_NOTIFY_WEBHOOK`)
turns it on for every engine opened with the default extensions. `[notify] on` (`AGENTWATCH_NOTIFY_ON`) says what
it is told of, `["waiting"]` unless set:

- `waiting`: a turn opened a question, an approval, a grant or a choice for a person, or a request held for a
  sub-agent's parent was handed over to a person;
- `report`: an observer (an observer agent or a rule) reported on an agent;
- `failed`: a turn ended failed.

The engine that wrote the event POSTs one JSON document to the webhook:

```json
{"text": "coder (ses_...) asks you: Which branch should I push to?", "event": "request.waiting",
 "agentId": "ses_...", "name": "coder", "role": "coder", "parentId": null, "requestId": "req_...",
 "kind": "question", "summary": "Which branch should I push to?", "questions": null, "options": ["main", "dev"],
 "since": "..."}
{"text": "loop-guard on coder (ses_...): You called read_file with the same input 3 times.",
 "event": "observer.report", "agentId": "ses_...", "name": "coder", "role": "coder", "observer": "loop-guard",
 "report": "You called read_file with the same input 3 times.", "at": "..."}
{"text": "coder (ses_...): a turn failed: the model answered 500", "event": "turn.failed", "agentId": "ses_...",
 "name": "coder", "role": "coder", "turnId": "trn_...", "error": "the model answered 500", "reason": null,
 "at": "..."}
```

Each names the agent, and `parentId` the agent that spawned it (null for one a person started). `text` is a
sentence for a chat's incoming webhook (Slack and Mattermost show it as it is; it is cut at
`TEXT_MAX` characters, the whole report or error being in its own field); the rest is for a program. With
`AGENTWATCH_NOTIFY_SECRET` set, each POST carries `X-Agentwatch-Signature: sha256=<hex>`, the HMAC-SHA256 of its
body with that secret, so the receiver can tell it came from here.

A notice never holds up an agent: notices queue (1,000 at most; beyond, the newest are dropped and logged) and
background tasks send them, 4 at once, each tried 3 times (after 1 and 2 s) when the webhook fails or
answers 5xx or 429; a request's notice only while the request still waits (one answered or dismissed meanwhile
is not sent again). One that could not be sent is recorded on its agent as a `runtime.warning`, unless the agent
was deleted meanwhile. Each engine sends what it wrote, so a fleet of services on one store sends each notice
once; a notice still queued when its engine stops is sent for 3 s at most, then dropped.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import os
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from agentwatch.config import NoticeKind
from agentwatch.errors import NotFound
from agentwatch.events import Event, NewEvent, ObserverReported, RuntimeNotice, TurnEnded, asks_a_person
from agentwatch.store import Write

if TYPE_CHECKING:
    from agentwatch.runtime.services import Runtime

__all__ = ["SECRET_VARIABLE", "Notifications", "signature"]

log = logging.getLogger(__name__)

SECRET_VARIABLE: Final = "AGENTWATCH_NOTIFY_SECRET"
SIGNATURE_HEADER: Final = "X-Agentwatch-Signature"
QUEUED_MAX: Final = 1000
ATTEMPTS: Final = 3
FIRST_WAIT_SECONDS: Final = 1.0
SEND_TIMEOUT_SECONDS: Final = 10.0
CLOSE_SECONDS: Final = 3.0
TEXT_MAX: Final = 2000
"""The longest `text` (a chat shows it as it is; the whole report or error is in its own field)."""
SENDERS: Final = 4
"""How many notices are sent at once: a webhook slow to answer one does not hold up the next ones."""


def signature(secret: str, body: bytes) -> str:
    """The value of the signature header for `body`: `sha256=` and the hex HMAC-SHA256 of it with `secret`."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class _Notice:
    kind: NoticeKind
    session_id: str
    event: Event
    """What it tells of: the event that opened or handed over the request, the report, or the turn's end."""
    request_id: str | None = None
    """The request a `waiting` notice is about."""

    @property
    def subject(self) -> str:
        """What it is about, in words (for the log and a warning)."""
        payload = self.event.payload
        if isinstance(payload, ObserverReported):
            return f"of a report of {payload.observer_type}"
        if self.kind == "failed":
            return f"that turn {self.event.turn_id} failed"
        return f"that request {self.request_id} waits on a person"


class Notifications:
    """The engine extension that sends the notices (see the module docs)."""

    def __init__(
        self, webhook: str | None = None, *, secret: str | None = None, on: Collection[NoticeKind] | None = None
    ) -> None:
        """`webhook`, `secret` and `on` (what it is told of) as given, else as the engine's settings say."""
        self._webhook = webhook
        self._secret = secret
        self._on = frozenset(on) if on is not None else None
        self._runtime: Runtime | None = None
        self._queue: asyncio.Queue[_Notice] | None = None
        self._senders: list[asyncio.Task[None]] = []
        self._unsent = 0  # queued or being sent

    @property
    def on(self) -> bool:
        """Whether this extension sends notices (it was given a webhook, or the setting names one)."""
        return self._queue is not None

    def install(self, engine: Runtime) -> None:
        webhook = self._webhook or engine.config.notify.webhook
        if webhook is None:
            return
        self._webhook = webhook
        if self._secret is None:
            self._secret = os.environ.get(SECRET_VARIABLE) or None
        if self._on is None:
            self._on = frozenset(engine.config.notify.on)
        self._runtime = engine
        self._queue = asyncio.Queue(QUEUED_MAX)
        engine.start_with_observer(lambda session_id: _Watch(self, self._on or frozenset()))

    def notice(self, notice: _Notice) -> None:
        """Queue a notice (from the engine's event loop); the sender starts with the first one."""
        assert self._queue is not None
        try:
            self._queue.put_nowait(notice)
        except asyncio.QueueFull:
            log.warning("a notice (%s) dropped: %d are waiting to be sent", notice.subject, QUEUED_MAX)
            return
        self._unsent += 1
        if not self._senders:
            loop = asyncio.get_running_loop()
            self._senders = [loop.create_task(self._send_all(), name="agentwatch-notify") for _ in range(SENDERS)]

    async def _send_all(self) -> None:
        """Send the notices as they come, one after another, for the engine's life (one of `SENDERS`)."""
        import httpx

        queue = self._queue
        assert queue is not None
        async with httpx.AsyncClient(timeout=SEND_TIMEOUT_SECONDS) as client:
            while True:
                notice = await queue.get()
                try:
                    await self._send(client, notice)
                except Exception:  # one notice that could not even be written up: the next ones still go
                    log.exception("could not send a notice (%s)", notice.subject)
                finally:
                    self._unsent -= 1
                    queue.task_done()

    async def _send(self, client: Any, notice: _Notice) -> None:
        assert self._webhook is not None
        document = await self._document(notice)
        if document is None:
            return  # answered before its notice went out, or its agent reaped: nobody needs to be told
        body = json.dumps(document).encode()
        headers = {"content-type": "application/json"}
        if self._secret:
            headers[SIGNATURE_HEADER] = signature(self._secret, body)
        failure = await _post(client, self._webhook, body, headers, lambda: self._waits(notice))
        if failure is not None and await self._waits(notice):
            await self._warn(notice, failure)

    async def _document(self, notice: _Notice) -> dict[str, Any] | None:
        """The JSON document of `notice` (None: its request no longer waits, or its agent was reaped)."""
        assert self._runtime is not None
        store = self._runtime.store
        try:
            session = await store.get_session(notice.session_id)
        except NotFound:
            return None
        name = session.display_name or session.name
        who = f"{name} ({session.id})"
        agent = {"agentId": session.id, "name": session.name, "role": session.role, "parentId": session.parent_id}
        payload, at = notice.event.payload, notice.event.at.isoformat()
        if isinstance(payload, ObserverReported):
            said = f"{payload.observer_type} on {who}: {payload.report}"
            return {"text": _cut(said), "event": "observer.report", **agent, "observer": payload.observer_type,
                    "report": payload.report, "at": at}  # fmt: skip
        if isinstance(payload, TurnEnded):
            said = f"{who}: a turn failed: {payload.error or payload.reason or 'no reason was given'}"
            return {"text": _cut(said), "event": "turn.failed", **agent, "turnId": notice.event.turn_id,
                    "error": payload.error, "reason": payload.reason, "at": at}  # fmt: skip
        assert notice.request_id is not None
        try:
            request = await store.get_request(notice.request_id)
        except NotFound:
            return None
        if request.status != "pending":
            return None
        said = f"{who} asks you: {request.summary}"
        if request.kind in ("approval", "grant"):
            said = f"{who} waits for your {request.kind}: {request.summary}"
        return {"text": _cut(said), "event": "request.waiting", **agent, "requestId": request.id,
                "kind": request.kind, "summary": request.summary, "questions": request.questions,
                "options": request.options, "since": request.created_at.isoformat()}  # fmt: skip

    async def _waits(self, notice: _Notice) -> bool:
        """Whether a request's notice is still news: its request still waits (not answered, nor dismissed as its
        turn was stopped or its agent deleted). A report or a failure stays news."""
        assert self._runtime is not None
        if notice.request_id is None:
            return True
        try:
            return (await self._runtime.store.get_request(notice.request_id)).status == "pending"
        except NotFound:
            return False

    async def _warn(self, notice: _Notice, failure: str) -> None:
        """Say on the notice's agent that the webhook was not told; nothing is written on an agent a person
        deleted (or retention reaped) meanwhile."""
        assert self._runtime is not None
        try:
            if (await self._runtime.store.get_session(notice.session_id)).deleted_at is not None:
                return
        except NotFound:
            return
        warning = RuntimeNotice(
            type="runtime.warning",
            message=f"the webhook was not told {notice.subject}: {failure}",
            source="notify",
            detail={"notice": notice.kind, "event_id": notice.event.id, "request_id": notice.request_id},
        )
        try:
            channel = await self._runtime.driver(notice.session_id)
            await channel.commit(Write(notice.session_id, events=[NewEvent(warning)], touch=False), rides=True)
        except NotFound:
            pass  # reaped since it was read

    async def close(self) -> None:
        senders, queue = self._senders, self._queue
        if not senders or queue is None:
            return
        try:
            await asyncio.wait_for(queue.join(), CLOSE_SECONDS)
        except TimeoutError:
            log.warning("%d notice(s) not sent as the engine closed (the webhook is slow or down)", self._unsent)
        for sender in senders:
            sender.cancel()
        await asyncio.gather(*senders, return_exceptions=True)


async def _post(
    client: Any, url: str, body: bytes, headers: Mapping[str, str], waits: Callable[[], Awaitable[bool]]
) -> str | None:
    """POST `body`, tried `ATTEMPTS` times while it fails or the webhook answers 5xx or 429 and `waits()` says its
    request still waits; None once it took it (or the request no longer waits), else what went wrong the last
    time."""
    import httpx

    wait = FIRST_WAIT_SECONDS
    failure = ""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            answer = await client.post(url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            failure = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        else:
            if answer.status_code < 300:
                return None
            failure = f"it answered {answer.status_code}"
            if answer.status_code < 500 and answer.status_code != 429:
                return failure  # it refused this notice: sending it again would not change that
        if attempt < ATTEMPTS:
            await asyncio.sleep(wait)
            wait *= 2
            if not await waits():
                return None  # answered or dismissed meanwhile: nobody needs to be told any more
    return f"{failure} ({ATTEMPTS} tries)"


def _cut(text: str) -> str:
    """`text` cut to `TEXT_MAX` characters for a chat."""
    return text if len(text) <= TEXT_MAX else text[: TEXT_MAX - 1] + "…"


class _Watch:
    """A session's ThreadObserver: queues a notice of each event the webhook is to be told of."""

    own_events_only = True
    """Another engine tells of what it wrote."""

    def __init__(self, notifications: Notifications, on: frozenset[NoticeKind]) -> None:
        self._notifications = notifications
        self._on = on

    def on_event(self, thread_id: str, event: Event) -> None:
        payload, on = event.payload, self._on
        if "report" in on and isinstance(payload, ObserverReported):
            self._notifications.notice(_Notice("report", thread_id, event))
        elif "failed" in on and isinstance(payload, TurnEnded) and payload.outcome == "failed":
            self._notifications.notice(_Notice("failed", thread_id, event))
        elif "waiting" in on and (asked := asks_a_person(payload)) is not None:
            self._notifications.notice(_Notice("waiting", thread_id, event, asked[0]))

    def on_subscribe(self, thread_id: str, request: Any, snapshot: Any) -> None:
        """Nothing to attach."""
