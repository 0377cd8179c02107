"""Cutting long text for display, always saying how much there was."""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["Truncated", "displayable", "truncate", "truncation_marker"]

_SURROGATE = re.compile("[\ud800-\udfff]")  # a str holds code points, so any surrogate in it is a lone one


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
    """`text` cut to at most `max_chars` characters, the marker included, when it is longer.

    A cap is read as the most a value holds (`capped at 1000 chars`), so the kept prefix leaves room for the
    marker; a cap shorter than the marker keeps what fits before a bare `…` (the `truncated` flag and
    `total_chars` still say how much there was).
    """
    if max_chars < 0:
        raise ValueError(f"max_chars must be >= 0, got {max_chars!r}")
    total = len(text)
    if total <= max_chars:
        return Truncated(text, False, total)
    marker = truncation_marker(total)
    if len(marker) > max_chars:
        marker = marker[: min(1, max_chars)]
    return Truncated(text[: max_chars - len(marker)] + marker, True, total)


def displayable(text: str) -> str:
    """`text` with each NUL character and lone surrogate shown as U+FFFD, for a preview kept in a plain text
    column (a session's last text, its error): those characters cannot be stored there on every backend, while
    the events and messages keep the exact text."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)
