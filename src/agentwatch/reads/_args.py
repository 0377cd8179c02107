"""Argument types the read tools share: durations and moments, within the bounds both stores can hold."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import AfterValidator, AwareDatetime, BeforeValidator, WithJsonSchema

from agentwatch.config import parse_duration
from agentwatch.errors import InvalidArgument, InvalidCursor

__all__ = ["EARLIEST", "LATEST", "MAX_WINDOW", "Moment", "Window", "cursor_moment", "field_named"]

MAX_WINDOW = timedelta(days=3650)
"""The longest window a read takes: ten years."""
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
"""The earliest moment a read takes."""
LATEST = datetime(9999, 1, 1, tzinfo=UTC)
"""The moment every read takes is before."""
_EARLIEST, _LATEST = EARLIEST, LATEST


@contextmanager
def field_named(name: str) -> Iterator[None]:
    """Prefix the message of an `InvalidArgument` raised inside with the argument at fault, and list it in
    `details.fields` (a cursor is checked where it is decoded, after the arguments were parsed)."""
    try:
        yield
    except InvalidArgument as exc:
        if exc.details.get("fields"):
            raise
        kind = InvalidCursor if isinstance(exc, InvalidCursor) else InvalidArgument
        raise kind(f"{name}: {exc.message}", suggest=exc.suggestions, **{**exc.details, "fields": [name]}) from None


def _duration(value: object) -> timedelta:
    if isinstance(value, str) and len(value) > 40:
        raise ValueError("a duration is a short text like 30s, 90m, 24h or 7d")
    try:
        return parse_duration(value)
    except (OverflowError, ValueError):
        raise ValueError(
            "not a duration: a number with s, m, h, d or w (30s, 90m, 24h, 7d, 2w), at most 3650d"
        ) from None


def _window(value: timedelta) -> timedelta:
    if value <= timedelta(0):
        raise ValueError("a window must be longer than zero, like 24h or 7d")
    if value > MAX_WINDOW:
        raise ValueError("a window can be at most 3650d (ten years)")
    return value


def _moment(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("a moment needs an offset (Z or +HH:MM)")
    try:
        utc = value.astimezone(UTC)
    except (OverflowError, ValueError):
        utc = None
    if utc is None or not _EARLIEST <= utc < _LATEST:
        raise ValueError("a moment must fall between 1970-01-01 and 9999-01-01")
    return value


def cursor_moment(text: str) -> datetime | None:
    """The moment a cursor's key holds as ISO text, when it is one a read could have put there (with an offset,
    between 1970 and 9999); None for anything else (cursors can be forged: the checksum is no secret)."""
    try:
        return _moment(datetime.fromisoformat(text))
    except ValueError:
        return None


_WINDOW_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*(ms|s|m|h|d|w)?\s*$", "examples": ["90m", "24h", "7d"]},
        {"type": "number", "exclusiveMinimum": 0, "description": "seconds"},
    ]
}
"""What a window is in a tool's JSON schema: what `_duration` takes (not ISO 8601, which pydantic would claim for
a timedelta)."""

Window = Annotated[
    timedelta, BeforeValidator(_duration), AfterValidator(_window), WithJsonSchema(_WINDOW_SCHEMA, mode="validation")
]
"""A span of time: `"24h"`, `"90m"`, `"7d"`, or a number of seconds; above zero and at most ten years."""

Moment = Annotated[AwareDatetime, AfterValidator(_moment)]
"""An aware moment (ISO 8601 with an offset) between 1970 and 9999."""
