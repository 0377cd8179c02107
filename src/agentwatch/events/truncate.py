"""Cutting long text for display, always saying how much there was."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Truncated", "truncate", "truncation_marker"]


class Truncated(NamedTuple):
    """A text cut to fit, and whether it was."""

    text: str
    """The text, ending in the marker when it was cut."""
    truncated: bool
    """True when the original was longer than the limit."""
    total_chars: int
    """Length of the original text."""


def truncation_marker(total_chars: int) -> str:
    """The marker appended to cut text: `… [truncated, 1234 chars total]`."""
    return f"… [truncated, {total_chars} chars total]"


def truncate(text: str, max_chars: int) -> Truncated:
    """Keep the first `max_chars` characters of `text` and append the marker when anything was cut.

    The kept prefix is exactly `max_chars` long, so the result is at most `max_chars` plus the marker.
    """
    if max_chars < 0:
        raise ValueError(f"max_chars must be >= 0, got {max_chars!r}")
    total = len(text)
    if total <= max_chars:
        return Truncated(text, False, total)
    return Truncated(text[:max_chars] + truncation_marker(total), True, total)
