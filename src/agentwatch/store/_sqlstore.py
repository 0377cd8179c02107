"""`SqlStore`: the whole `Store` contract written once over `Tx`, for every SQL backend.

A backend only says how to run a function in a read (`_read`) and in a write transaction (`_write`), and
which `Dialect` it speaks. Everything a write does happens inside the function it passes to `_write`, so it
commits together or not at all. The contract is assembled from one part per aggregate: sessions
(`_sessions`), events with the writes that append them (`_events`, rows built by `_appends`), inbox,
requests and ledger (`_inbox`), runs (`_runs`) and leases (`_leases`).
"""

from __future__ import annotations

from abc import ABC

from agentwatch.store._events import EventMethods
from agentwatch.store._inbox import InboxMethods
from agentwatch.store._leases import LeaseMethods
from agentwatch.store._runs import RunMethods
from agentwatch.store._sessions import SessionMethods
from agentwatch.store._sql import Tx
from agentwatch.store.base import SCHEMA_VERSION
from agentwatch.store.records import StoreInfo

__all__ = ["SqlStore"]


class SqlStore(SessionMethods, EventMethods, InboxMethods, RunMethods, LeaseMethods, ABC):
    """The `Store` contract over SQL; subclasses provide transactions, the dialect and `open`."""

    writes_in_order: bool = False

    # -- info -----------------------------------------------------------------------------------------

    async def info(self) -> StoreInfo:
        """Backend, schema version and sizes."""

        async def count(tx: Tx) -> tuple[int, int, int]:
            version = (await tx.fetch("SELECT COALESCE(MAX(version), 0) FROM schema_migrations"))[0][0]
            sessions = (await tx.fetch("SELECT count(*) FROM sessions"))[0][0]
            events = (await tx.fetch("SELECT count(*) FROM events"))[0][0]
            return int(version), int(sessions), int(events)

        version, sessions, events = await self._read(count)
        return StoreInfo(
            backend=self._dialect.name,
            url=self.url,
            schema_version=version,
            code_schema_version=SCHEMA_VERSION,
            sessions=sessions,
            events=events,
            path_bytes=await self._path_bytes(),
        )
