"""Times and spend for people: `3m ago`, `2h ago`, `yesterday`; `1,200 tokens $0.0123`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

__all__ = ["ago", "spend"]


def spend(item: dict[str, Any]) -> str:
    """`tokens`, and `costUsd` when it is known, of a record, as a person reads them."""
    cost = f" ${item['costUsd']:.4f}" if item.get("costUsd") is not None else ""
    return f"{item['tokens']:,} tokens{cost}"


def ago(value: str | datetime | None, *, now: datetime | None = None) -> str:
    """A short relative time (`just now`, `42s ago`, `5m ago`, `3h ago`, `2d ago`), or `-` for none."""
    if value is None:
        return "-"
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    seconds = ((now or datetime.now(UTC)) - moment).total_seconds()
    if seconds < 0:
        return "in " + ago(moment, now=moment + (moment - (now or datetime.now(UTC)))).removesuffix(" ago")
    if seconds < 5:
        return "just now"
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return f"{int(seconds)}s ago"
