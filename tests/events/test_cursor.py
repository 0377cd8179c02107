"""Cursors are checked but not secret: a forged one (its checksum made right) is refused as a bad cursor,
never failing the call that reads it."""

from __future__ import annotations

import json

import pytest

from agentwatch.errors import InvalidCursor
from agentwatch.events import MAX_POSITION, PageCursor, StreamCursor
from tests.events.support import forged


@pytest.mark.parametrize("kind", [StreamCursor, PageCursor])
def test_a_cursor_nested_past_the_recursion_limit_is_a_bad_cursor(kind: type[StreamCursor | PageCursor]) -> None:
    """Once: the JSON decoder's RecursionError escaped (an internal error; over SSE, a 500)."""
    text = forged(kind.PREFIX, b"[" * 1530 + b"]" * 1530)
    assert len(text) <= 4096
    with pytest.raises(InvalidCursor, match="does not decode"):
        kind.decode(text)


@pytest.mark.parametrize(
    "fields", [["ses_x", True, 0], ["ses_x", 1, False], ["ses_x", MAX_POSITION + 1, 0], ["ses_x", 0, 10**30]]
)
def test_a_stream_position_is_a_whole_number_a_store_can_hold(fields: list[object]) -> None:
    """Once: `true` read as seq 1, and a seq past 2**63 - 1 reached the store (an overflow)."""
    with pytest.raises(InvalidCursor, match="does not decode to a stream cursor"):
        StreamCursor.decode(forged(StreamCursor.PREFIX, json.dumps(fields).encode()))
    assert StreamCursor.decode(StreamCursor("ses_x", MAX_POSITION, MAX_POSITION).encode()).seq == MAX_POSITION


def test_a_refused_cursor_is_not_repeated_whole() -> None:
    """Once: the error repeated the whole cursor, up to 4 KB of it."""
    with pytest.raises(InvalidCursor) as refused:
        StreamCursor.decode("c1." + "A" * 4000)
    assert len(str(refused.value)) < 200
