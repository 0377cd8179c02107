"""The digest that binds an agent_list cursor to its listing, kept per argument values."""

from __future__ import annotations

from typing import Any

import pytest

from agentwatch.events import query_digest
from agentwatch.reads.listing import ListArgs, _digest


def _dumped(args: ListArgs) -> str:
    return query_digest(args.model_dump(mode="json", exclude={"cursor", "limit", "counts"}))


@pytest.mark.parametrize(
    "raw",
    [
        {},
        {"status": ["running", "failed"], "role": "coder"},
        {"word": ["stuck"], "q": "x", "group": "lineage", "sort": "name"},
        {"window": "24h", "deleted": True},
        {"from": "2026-01-01T00:00:00+01:00", "to": "2026-02-01T00:00:00+00:00"},
    ],
)
def test_the_digest_is_that_of_the_arguments_a_cursor_is_bound_to(raw: dict[str, Any]) -> None:
    args = ListArgs.model_validate(raw)
    assert _digest(args) == _dumped(args)
    assert _digest(ListArgs.model_validate(raw)) == _dumped(args)  # kept, and the same
    # The page size and the counts switch are not part of it.
    assert _digest(ListArgs.model_validate({**raw, "limit": 5, "counts": True})) == _digest(args)


def test_one_moment_in_two_offsets_gives_two_digests_as_its_dumps_differ() -> None:
    here = ListArgs.model_validate({"from": "2026-01-01T00:00:00+01:00"})
    there = ListArgs.model_validate({"from": "2025-12-31T23:00:00+00:00"})
    assert here.from_ == there.from_
    assert _digest(here) == _dumped(here)
    assert _digest(there) == _dumped(there)
    assert _dumped(here) != _dumped(there)


def test_a_filter_that_does_not_depend_on_the_time_is_kept_and_one_that_does_is_not() -> None:
    from datetime import UTC, datetime, timedelta

    from agentwatch.reads.listing import _filter, _key, listing_filter

    view: Any = None  # neither filter reads the view: no word to judge
    now = datetime.now(UTC)
    args = ListArgs.model_validate({"status": ["running"], "role": "coder", "group": "lineage"})
    kept = _filter(view, args, _key(args), now)
    assert kept == listing_filter(view, args, now=now)
    again = ListArgs.model_validate({"status": ["running"], "role": "coder", "group": "lineage", "limit": 5})
    assert _filter(view, again, _key(again), now + timedelta(hours=1)) is kept
    windowed = ListArgs.model_validate({"window": "24h"})
    first = _filter(view, windowed, _key(windowed), now)
    later = _filter(view, windowed, _key(windowed), now + timedelta(hours=1))
    assert first.active_from == now - timedelta(hours=24)
    assert later.active_from == now - timedelta(hours=23)
