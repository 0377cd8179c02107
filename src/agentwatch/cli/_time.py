"""Times for people: `3m ago`, `2h ago`, `yesterday`."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["ago"]


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
