"""Ids: sortable, unique, and the same characters whichever part of the count changed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentwatch.events import ids, new_id


def _counting_from(monkeypatch: pytest.MonkeyPatch, value: int) -> None:
    """Make the next ids count up from `value` within one millisecond (one that lies ahead of the clock)."""
    monkeypatch.setattr(ids, "_last_ms", 2**47)
    monkeypatch.setattr(ids, "_last_ms_text", ids._encode(2**47, 10))
    monkeypatch.setattr(ids, "_last_random", value)


@settings(max_examples=50)
@given(start=st.integers(min_value=0, max_value=(1 << 79) - 1))  # a start has headroom (see `new_id`)
def test_ids_counting_up_spell_their_whole_count_and_sort_in_order(start: int) -> None:
    # Counting up rewrites the low 4 characters only, until a carry reaches the 12 above them.
    with pytest.MonkeyPatch.context() as monkeypatch:
        boundary = (start | (2**20 - 1)) - 2  # a few counts before a carry into the high 60 bits
        _counting_from(monkeypatch, boundary if boundary >= start else start)
        first = ids._last_random
        made = [new_id("evt") for _ in range(6)]
    assert made == sorted(made) and len(set(made)) == 6
    assert [m.removeprefix("evt_")[10:] for m in made] == [ids._encode(first + n, 16) for n in range(1, 7)]


def test_ids_of_a_new_millisecond_spell_their_new_count() -> None:
    before = new_id("evt")
    after = new_id("evt")
    assert before < after
    assert after.removeprefix("evt_")[10:] == ids._encode(ids._last_random, 16)
