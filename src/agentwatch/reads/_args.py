"""Argument types the read tools share: bounded page sizes, durations, cursors."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

from agentwatch.config import parse_duration

__all__ = ["Window"]


def _positive(value: timedelta) -> timedelta:
    if value <= timedelta(0):
        raise ValueError("a window must be longer than zero, like 24h or 7d")
    return value


Window = Annotated[timedelta, BeforeValidator(parse_duration), AfterValidator(_positive)]
"""A span of time: `"24h"`, `"90m"`, `"7d"`, or a number of seconds."""
