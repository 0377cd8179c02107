"""The SQLite store's jobs: a write or read queued for its threads, and its outcome, which goes back to the
caller's loop through the store's `Mailbox` of that loop (`agentwatch.pacing`).

A writer or reader thread that finished jobs posts them to their callers' mailboxes; `settle` sorts a
finished group by mailbox.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentwatch.pacing import Mailbox
from agentwatch.store._sql import Tx
from agentwatch.store.records import Write

__all__ = ["Job", "settle"]


@dataclass(eq=False, slots=True)
class Job:
    """A write or read queued for the store's threads, until its outcome is delivered to its caller."""

    fn: Callable[[Tx], Coroutine[Any, Any, Any]]
    mailbox: Mailbox
    future: asyncio.Future[Any]
    write: bool = True
    session_id: str | None = None
    """The one session a write changes (`_write_session`), or None when it may touch anything."""
    appends: Write | None = None
    """An append-only write, which the writer applies together with the others of its group."""
    alone: bool = False
    """Apply it by itself even if it is an append-only write (its group's statement lost the transaction)."""
    outcome: tuple[Any, BaseException | None] = field(default=(None, None))

    @property
    def grouped(self) -> bool:
        """Whether the writer applies it with the other append-only writes of its group."""
        return self.appends is not None and not self.alone

    def deliver(self) -> None:
        """Set the caller's future (on the caller's event loop)."""
        if self.future.done():
            return  # cancelled by its caller; the write itself stands
        value, error = self.outcome
        if error is None:
            self.future.set_result(value)
        else:
            self.future.set_exception(error)


def settle(jobs: Sequence[Job]) -> None:
    """Hand the outcomes to the callers' event loops (a caller may be gone: then nobody waits)."""
    by_mailbox: dict[Mailbox, list[Job]] = {}
    for job in jobs:
        by_mailbox.setdefault(job.mailbox, []).append(job)
    for mailbox, settled in by_mailbox.items():
        mailbox.post(settled)
