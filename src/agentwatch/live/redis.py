"""The live ring on Redis Streams: one stream per session, shared by every process that opens the same URL.

Each event is one stream entry whose id is its position, `f"{seq}-{sub}"`, holding the event's JSON and, beside
it, its type (so a read can pick events in Redis without decoding the others). Positions increase strictly
within a session, so they are valid stream ids, a cursor names exactly one entry id, and `XREAD` after a
cursor returns exactly the events after it. `XADD ... MAXLEN ~ ring_size` keeps the stream short (Redis
trims whole internal nodes, so a little more than `ring_size` may be kept), and every publish refreshes a
TTL so the streams of finished sessions go away on their own.

A subscription runs one reader task that blocks on `XREAD` and fills the subscription's bounded backlog,
so a slow subscriber is cut loose exactly as in the memory ring and the producer never waits on it.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
from collections.abc import Awaitable, Collection, Sequence
from typing import Any, Final, Self, TypeVar
from urllib.parse import urlsplit

from pydantic import ValidationError

from agentwatch.errors import InvalidArgument, MissingDependency, StoreUnavailable, UserError
from agentwatch.events import EVENT_ADAPTER, Event, StreamCursor
from agentwatch.live._subscription import BufferedSubscription, check_subscribe
from agentwatch.live.base import DEFAULT_BACKLOG, DEFAULT_RING_SIZE, cancel_and_wait, pick_recent

try:
    from redis import asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialBackoff
    from redis.exceptions import NoScriptError, RedisError, ResponseError
except ImportError as exc:  # pragma: no cover - exercised in a test that hides the package
    raise MissingDependency(
        "the Redis live ring needs the redis package; install it with `pip install 'agentwatch[redis]'`"
    ) from exc

__all__ = ["DEFAULT_KEY_PREFIX", "DEFAULT_STREAM_TTL", "RedisRing"]

DEFAULT_KEY_PREFIX: Final = "agentwatch:live:"
"""Stream keys are this prefix followed by the session id."""
DEFAULT_STREAM_TTL: Final = 24 * 3600
"""Seconds a session's stream lives after its last publish."""

_FIELD: Final = b"event"
_TYPE: Final = b"type"
_PICK: Final = """
local wanted = {}
for i = 3, #ARGV do wanted[ARGV[i]] = true end
local picked = {}
for i, entry in ipairs(redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', ARGV[1])) do
  local fields, kind, body = entry[2], false, false
  for j = 1, #fields, 2 do
    if fields[j] == 'type' then kind = fields[j + 1] elseif fields[j] == 'event' then body = fields[j + 1] end
  end
  if body and (i == 1 or not kind or wanted[kind]) then picked[#picked + 1] = body end
  if kind == ARGV[2] then break end
end
return picked
"""
"""`pick_recent` in Redis, on one stream (ARGV: limit, back_to or "", types...): the JSON of the events picked,
newest first. An entry written without its type is picked whatever it is (the caller picks again, decoded)."""
_PICK_SHA: Final = hashlib.sha1(_PICK.encode()).hexdigest()
"""The digest Redis knows `_PICK` by, once loaded."""
_BLOCK_MS: Final = 5000  # how long one XREAD waits; the reader simply asks again
_READ_COUNT: Final = 500  # entries per XREAD: large enough to catch up fast, small enough to stay responsive
_CONNECT_TIMEOUT: Final = 3.0

T = TypeVar("T")


class RedisRing:
    """The live ring on Redis Streams; events published by any process reach every process's subscribers.

    Open it with `await RedisRing.open(url)` and `close()` it when done.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        address: str,
        ring_size: int = DEFAULT_RING_SIZE,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        stream_ttl: int | None = DEFAULT_STREAM_TTL,
    ) -> None:
        """Wrap a connected client; `open()` is the usual way in."""
        if ring_size < 1:
            raise InvalidArgument(f"ring_size must be at least 1, not {ring_size!r}")
        if stream_ttl is not None and stream_ttl < 1:
            raise InvalidArgument(f"stream_ttl must be at least 1 second or None, not {stream_ttl!r}")
        self.ring_size = ring_size
        """Events kept per session (approximately: Redis trims whole nodes)."""
        self.key_prefix = key_prefix
        """Prefix of every session's stream key."""
        self.stream_ttl = stream_ttl
        """Seconds a session's stream lives after its last publish (None: forever)."""
        self._client = client
        self._address = address
        self._readers: dict[BufferedSubscription, asyncio.Task[None]] = {}
        self._closed = False

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        ring_size: int = DEFAULT_RING_SIZE,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        stream_ttl: int | None = DEFAULT_STREAM_TTL,
        connect_timeout: float = _CONNECT_TIMEOUT,
    ) -> Self:
        """Connect to the Redis server at `url` (`redis://host:6379/0`) and check that it answers.

        Raises `StoreUnavailable` within about `connect_timeout` seconds when it does not.
        """
        parts = urlsplit(url)
        address = f"{parts.hostname or 'localhost'}:{parts.port or 6379}"
        client = aioredis.Redis.from_url(
            url,
            socket_connect_timeout=connect_timeout,
            # Longer than one blocking XREAD, so only a dead connection times out.
            socket_timeout=_BLOCK_MS / 1000 + 10,
            # A couple of quick retries ride out a dropped connection without stalling a publisher for long.
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), retries=2),
        )
        pool = client.connection_pool
        pool.connection_class = type(pool.connection_class.__name__, (_OwnContext, pool.connection_class), {})
        try:
            async with asyncio.timeout(connect_timeout + 1):
                await client.ping()
        except (RedisError, OSError, TimeoutError) as exc:
            await client.aclose()
            raise StoreUnavailable(
                f"cannot reach Redis at {address} for the live ring ({exc or type(exc).__name__}); "
                "start the Redis server, or set the redis:// URL of a running one as the live ring "
                "(AGENTWATCH_LIVE, or live in agentwatch.toml)"
            ) from None
        return cls(client, address=address, ring_size=ring_size, key_prefix=key_prefix, stream_ttl=stream_ttl)

    def _key(self, session_id: str) -> str:
        return f"{self.key_prefix}{session_id}"

    def _unavailable(self, exc: BaseException) -> StoreUnavailable:
        return StoreUnavailable(
            f"lost the Redis live ring at {self._address} ({exc or type(exc).__name__}); "
            "check that the Redis server is running"
        )

    async def publish(self, event: Event) -> None:
        """Append an event to its session's stream; subscribers in every process receive it."""
        if self._closed:
            raise UserError("publish() on a closed live ring; open a new one")
        key = self._key(event.session_id)
        pipe = self._client.pipeline(transaction=False)
        pipe.xadd(
            key,
            {_FIELD: EVENT_ADAPTER.dump_json(event), _TYPE: event.payload.type},
            id=f"{event.seq}-{event.sub}",
            maxlen=self.ring_size,
            approximate=True,
        )
        if self.stream_ttl is not None:
            pipe.expire(key, self.stream_ttl)
        try:
            results: list[Any] = await _surfaced(pipe.execute(raise_on_error=False))
        except (RedisError, OSError) as exc:
            raise self._unavailable(exc) from exc
        added = results[0]
        if isinstance(added, ResponseError):
            # Redis refuses an id at or below the stream's newest one (or 0-0).
            raise UserError(
                f"event at (seq={event.seq}, sub={event.sub}) of session {event.session_id!r} is not after "
                f"the last published one ({added}); publish each session's events once, in order"
            )
        if isinstance(added, Exception):
            raise self._unavailable(added)

    async def subscribe(
        self, session_id: str, *, after: StreamCursor | None = None, backlog: int = DEFAULT_BACKLOG
    ) -> BufferedSubscription:
        """Start receiving the session's events after `after` (or after the newest, when None).

        With a cursor older than the stream holds (a durable event after it was trimmed), the first read
        raises `Lagged(resume_from=after)`.
        """
        check_subscribe(closed=self._closed, session_id=session_id, after=after, backlog=backlog)
        key = self._key(session_id)
        try:
            newest = await _surfaced(self._client.xrevrange(key, count=1))
        except (RedisError, OSError) as exc:
            raise self._unavailable(exc) from exc
        head = _entry_position(newest[0][0]) if newest else (0, 0)
        if after is None:
            # The reader reads from this very entry id, so the position and the first delivery cannot drift
            # apart however many events are published meanwhile.
            start = head
            # An empty stream gives the placeholder (0, 0): the next event is not a gap.
            check_gap = bool(newest)
        else:
            start = (after.seq, after.sub)
            check_gap = True
        subscription = BufferedSubscription(
            session_id, StreamCursor(session_id, *start), backlog=backlog, on_close=self._stop_reader
        )
        task = asyncio.create_task(
            self._read(subscription, key, start, check_gap=check_gap, replay_until=head),
            name=f"agentwatch live reader {session_id}",
        )
        self._readers[subscription] = task
        task.add_done_callback(lambda _: self._readers.pop(subscription, None))
        return subscription

    async def _read(
        self,
        subscription: BufferedSubscription,
        key: str,
        start: tuple[int, int],
        *,
        check_gap: bool,
        replay_until: tuple[int, int],
    ) -> None:
        """Follow one stream from `start` into the subscription until it ends."""
        last = start
        last_id: bytes | str = f"{start[0]}-{start[1]}"
        client = self._client
        try:
            while not subscription.ended:
                response = await client.xread({key: last_id}, count=_READ_COUNT, block=_BLOCK_MS)
                if not response:
                    continue
                entries: Sequence[tuple[bytes, dict[bytes, bytes]]] = response[0][1]
                first = _entry_position(entries[0][0])
                if check_gap and (last[0] + 1, 0) < first and await self._trimmed_before(key, first):
                    # The durable event after `last` is not in the stream and the stream now starts at `first`:
                    # it was trimmed before this reader got to it. Resume from the store instead.
                    subscription.lag()
                    return
                check_gap = True
                for _, fields in entries:
                    event = EVENT_ADAPTER.validate_json(fields[_FIELD])
                    if (event.seq, event.sub) <= replay_until:
                        subscription.offer_replay(event)
                    elif not subscription.offer(event):
                        return
                last_id = entries[-1][0]
                last = _entry_position(last_id)
        except (RedisError, OSError) as exc:
            subscription.fail(self._unavailable(exc))
        except (ValidationError, KeyError, IndexError, ValueError) as exc:
            subscription.fail(
                StoreUnavailable(f"stream {key!r} at {self._address} holds an entry that is not an event ({exc})")
            )

    async def _trimmed_before(self, key: str, first: tuple[int, int]) -> bool:
        """Whether the stream starts at or after `first`, so what came before it may have been trimmed.

        When an older entry is still there, nothing between it and `first` was trimmed (trimming removes
        the oldest entries first), and the missing seqs were simply never published.
        """
        oldest = await self._client.xrange(key, count=1)
        return not oldest or _entry_position(oldest[0][0]) >= first

    async def _stop_reader(self, subscription: BufferedSubscription) -> None:
        task = self._readers.pop(subscription, None)
        if task is not None:
            await cancel_and_wait([task])

    async def recent(self, session_id: str, *, after: StreamCursor | None = None, limit: int = 100) -> list[Event]:
        """Retained events after `after` (the first `limit` of them), or the newest `limit`; oldest first."""
        if limit <= 0:
            return []
        key = self._key(session_id)
        try:
            if after is None:
                entries = list(reversed(await _surfaced(self._client.xrevrange(key, count=limit))))
            else:
                entries = await _surfaced(self._client.xrange(key, min=f"({after.seq}-{after.sub}", count=limit))
        except (RedisError, OSError) as exc:
            raise self._unavailable(exc) from exc
        return [EVENT_ADAPTER.validate_json(fields[_FIELD]) for _, fields in entries]

    async def recent_each(
        self, session_ids: Sequence[str], *, limit: int, types: Collection[str], back_to: str | None = None
    ) -> list[list[Event]]:
        """Of each session's newest `limit` retained events, the newest one and those of `types`, read back no
        further than the newest of type `back_to`; oldest first (see `pick_recent`). One round trip for all the
        sessions, and only the events picked (by the type kept beside each) cross it and are decoded."""
        if not session_ids or limit <= 0:
            return [[] for _ in session_ids]
        wanted = frozenset(types)
        args = (limit, back_to or "", *wanted)
        try:
            try:
                found = await self._picked(session_ids, args)
            except NoScriptError:  # (a server that does not know the script yet: restarted, or its scripts flushed)
                await _surfaced(self._client.script_load(_PICK))
                found = await self._picked(session_ids, args)
        except (RedisError, OSError) as exc:
            raise self._unavailable(exc) from exc
        return [
            pick_recent((EVENT_ADAPTER.validate_json(body) for body in bodies), wanted, back_to) for bodies in found
        ]

    async def _picked(self, session_ids: Sequence[str], args: tuple[Any, ...]) -> list[list[bytes]]:
        """`_PICK` on the stream of each session, in one round trip (by its digest, which the server keeps)."""
        pipe = self._client.pipeline(transaction=False)
        for session_id in session_ids:
            pipe.evalsha(_PICK_SHA, 1, self._key(session_id), *args)
        return await _surfaced(pipe.execute())

    async def head(self, session_id: str) -> StreamCursor | None:
        """The position of the newest retained event, or None when the stream holds none."""
        try:
            newest = await _surfaced(self._client.xrevrange(self._key(session_id), count=1))
        except (RedisError, OSError) as exc:
            raise self._unavailable(exc) from exc
        if not newest:
            return None
        return StreamCursor(session_id, *_entry_position(newest[0][0]))

    async def drop(self, session_ids: Sequence[str]) -> None:
        """Delete the streams of reaped sessions (a deleted agent's events would stay in Redis until their TTL)."""
        if not session_ids:
            return
        try:
            await _surfaced(self._client.delete(*(self._key(session_id) for session_id in session_ids)))
        except (RedisError, OSError) as exc:
            raise self._unavailable(exc) from exc

    async def close(self) -> None:
        """End every subscription, stop their readers and close the connections; idempotent."""
        if self._closed:
            return
        self._closed = True
        readers = list(self._readers.items())
        self._readers.clear()
        for subscription, _ in readers:
            subscription.end()
        await cancel_and_wait([task for _, task in readers])
        await self._client.aclose()


class _OwnContext:
    """Opens a connection's socket in a context of its own (mixed into the connection class the URL chooses).

    The client opens a connection whenever every one it has is busy, that is inside whichever task sends a command
    then: a turn publishing its events. asyncio hands the socket's reader callback a copy of that task's context,
    kept as long as the connection lives in the pool (the engine's life), and with it what the turn had in its
    context: pydantic-ai's run context, the run's messages and model with it."""

    async def _connect(self) -> None:
        opening = super()._connect()  # type: ignore[misc]
        await asyncio.create_task(opening, context=contextvars.Context())


async def _surfaced(command: Awaitable[T]) -> T:
    """Await a Redis command, and raise the caller's cancellation should the command have swallowed it.

    redis-py sends each command through `asyncio.wait_for`, which on Python 3.11 returns the command's result
    when a cancellation lands just as the send completes: the caller (an attach stream whose client left, a
    relay being stopped) would then go on as if it had never been cancelled, and whoever cancelled it wait for
    it for ever. A cancellation asked for during the command and not undone shows in `Task.cancelling()`."""
    task = asyncio.current_task()
    asked = task.cancelling() if task is not None else 0
    result = await command
    if task is not None and task.cancelling() > asked:
        raise asyncio.CancelledError
    return result


def _entry_position(entry_id: bytes | str) -> tuple[int, int]:
    """The (seq, sub) an entry id such as `b"12-3"` stands for."""
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    seq, _, sub = text.partition("-")
    return int(seq), int(sub)
