"""Cursors: opaque strings that name a position, checked so garbage or an edited cursor is refused.

Two kinds share one encoding:

- `StreamCursor` names a position in one session's event stream: after durable event `seq`, and after the
  `sub`-th ephemeral event that followed it (0 for the durable event itself). Tail and subscribe take it.
- `PageCursor` names where a keyset page stopped, bound to the query it came from (`query` is a digest of
  the filters and sort), so it cannot be replayed against a different listing.

The checksum is an integrity check (it catches truncation, typos and hand edits), not a secret: cursors
are not a security boundary.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Self

from agentwatch.errors import InvalidCursor

__all__ = ["MAX_POSITION", "PageCursor", "StreamCursor", "query_digest"]

_KEY: Final = b"agentwatch-cursor-v1"
_MAC_BYTES: Final = 6
MAX_POSITION: Final = 2**63 - 1
"""The largest seq (and sub) a stream position can hold: what a store's integer column holds."""
_SHOWN: Final = 40
"""Characters of a refused cursor that its error repeats (a cursor may be 4 KB)."""


def _shown(text: object) -> str:
    shown = repr(text)
    return shown if len(shown) <= _SHOWN else f"{shown[:_SHOWN]}…"


def _mac(body: bytes) -> bytes:
    return hashlib.blake2b(body, key=_KEY, digest_size=_MAC_BYTES).digest()


def _seal(kind: str, fields: list[Any]) -> str:
    body = json.dumps(fields, separators=(",", ":"), sort_keys=True).encode()
    token = base64.urlsafe_b64encode(body + _mac(body)).rstrip(b"=").decode()
    return f"{kind}{token}"


def _open(kind: str, text: object, what: str) -> list[Any]:
    shown = _shown(text)
    if not isinstance(text, str) or not text.startswith(kind) or len(text) > 4096:
        raise InvalidCursor(f"{shown} is not a {what}; pass back exactly the cursor a previous call returned")
    token = text[len(kind) :]
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError):
        raise InvalidCursor(f"{shown} is not a {what} (not valid base64); pass back the cursor unchanged") from None
    body, mac = raw[:-_MAC_BYTES], raw[-_MAC_BYTES:]
    if len(raw) <= _MAC_BYTES or mac != _mac(body):
        raise InvalidCursor(f"{shown} was altered or cut short (checksum mismatch); pass back the cursor unchanged")
    try:
        fields = json.loads(body)
    except (ValueError, RecursionError):  # (the checksum is no secret: a forged cursor may nest deep)
        raise InvalidCursor(f"{shown} does not decode to a {what}") from None
    if not isinstance(fields, list):
        raise InvalidCursor(f"{shown} does not decode to a {what}")
    return fields


def _position(value: object) -> bool:
    """Whether `value` is a seq or sub a stream can hold (a whole number, not a boolean)."""
    return type(value) is int and 0 <= value <= MAX_POSITION


@dataclass(frozen=True, order=True, slots=True)
class StreamCursor:
    """A position in one session's stream: after durable event `seq`, then `sub` ephemeral events."""

    PREFIX: ClassVar[str] = "c1."

    session_id: str = field(compare=False)
    """The session whose stream this is."""
    seq: int
    """The durable event at or before the position (0 = before the first event)."""
    sub: int = 0
    """How many ephemeral events after `seq` the position is past (0 = right after the durable event)."""

    def __post_init__(self) -> None:
        if self.seq < 0 or self.sub < 0:
            raise InvalidCursor(f"a stream position cannot be negative (seq={self.seq}, sub={self.sub})")

    def encode(self) -> str:
        """The opaque string form, as tools return it."""
        return _seal(self.PREFIX, [self.session_id, self.seq, self.sub])

    def __str__(self) -> str:
        return self.encode()

    @classmethod
    def decode(cls, text: object, *, session_id: str | None = None) -> Self:
        """Parse a cursor; with `session_id`, also refuse a cursor of another session's stream."""
        fields = _open(cls.PREFIX, text, "stream cursor")
        match fields:
            case [str(sid), seq, sub] if _position(seq) and _position(sub):
                cursor = cls(sid, seq, sub)
            case _:
                raise InvalidCursor(f"{_shown(text)} does not decode to a stream cursor")
        if session_id is not None and cursor.session_id != session_id:
            raise InvalidCursor(
                f"the cursor belongs to session {cursor.session_id!r}, not {session_id!r}; "
                "use a cursor returned for this session"
            )
        return cursor


def query_digest(query: Any) -> str:
    """A short stable digest of a query's filters and sort, for binding a `PageCursor` to it."""
    text = json.dumps(query, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


@dataclass(frozen=True, slots=True)
class PageCursor:
    """Where a keyset page stopped: the sort key of its last row, bound to its query."""

    PREFIX: ClassVar[str] = "p1."

    query: str
    """`query_digest` of the filters, group and sort the page was read with."""
    key: tuple[Any, ...]
    """The sort key of the last row on the page (JSON scalars only)."""

    def encode(self) -> str:
        """The opaque string form, as `nextCursor`."""
        return _seal(self.PREFIX, [self.query, list(self.key)])

    def __str__(self) -> str:
        return self.encode()

    @classmethod
    def decode(cls, text: object, *, query: str | None = None) -> Self:
        """Parse a page cursor; with `query`, refuse one that came from a different listing."""
        fields = _open(cls.PREFIX, text, "page cursor")
        match fields:
            case [str(digest), list(key)]:
                cursor = cls(digest, tuple(key))
            case _:
                raise InvalidCursor(f"{_shown(text)} does not decode to a page cursor")
        if query is not None and cursor.query != query:
            raise InvalidCursor(
                "the cursor came from another call (another agent or run, other filters, group or sort); "
                "repeat the same call with it, or drop the cursor to start from the first page"
            )
        return cursor
