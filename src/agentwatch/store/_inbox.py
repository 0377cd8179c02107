"""Inbox inputs, requests and the usage ledger of `SqlStore` (their writes go through `Write`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypeVar

from agentwatch.errors import NotFound
from agentwatch.events import Usage, WaitsOn
from agentwatch.store._sql import (
    check_limit,
    from_row,
    in_list,
)
from agentwatch.store._sqlbase import (
    INPUT_COLUMNS,
    INPUT_JSON,
    LIST_LIMIT,
    REQUEST_COLUMNS,
    REQUEST_JSON,
    SqlBase,
    select,
    usage_from_sums,
)
from agentwatch.store.records import (
    InputRecord,
    RequestRecord,
    RequestStatus,
)

__all__ = ["InboxMethods"]

T = TypeVar("T")


class InboxMethods(SqlBase):
    """Reads of inbox inputs, requests and the ledger over `Tx`."""

    async def list_inputs(self, session_id: str, *, pending_only: bool = True) -> list[InputRecord]:
        """Inbox inputs, oldest first."""
        sql = f"{select(INPUT_COLUMNS, 'inbox')} WHERE session_id = ?"
        if pending_only:
            sql += " AND taken_at IS NULL"
        rows = await self._read(lambda tx: tx.fetch(sql + " ORDER BY created_at, id", [session_id]))
        return [from_row(InputRecord, INPUT_COLUMNS, row, INPUT_JSON) for row in rows]

    async def get_input(self, session_id: str, input_id: str) -> InputRecord:
        """One inbox input of a session, taken or not. Raises `NotFound`."""
        missing = NotFound(f"session {session_id!r} has no input {input_id!r}")
        record: InputRecord = await self._read(
            lambda tx: self._one(tx, InputRecord, "inbox", INPUT_COLUMNS, INPUT_JSON, ("id", input_id), missing)
        )
        if record.session_id != session_id:
            raise missing
        return record

    async def get_request(self, request_id: str) -> RequestRecord:
        """One request by id. Raises `NotFound`."""
        record: RequestRecord = await self._read(
            lambda tx: self._one(
                tx,
                RequestRecord,
                "requests",
                REQUEST_COLUMNS,
                REQUEST_JSON,
                ("id", request_id),
                NotFound(f"no request with id {request_id!r}"),
            )
        )
        return record

    async def list_requests(
        self,
        *,
        session_id: str | None = None,
        status: RequestStatus | None = "pending",
        waits_on: WaitsOn | None = None,
        due_by: datetime | None = None,
        limit: int = 100,
    ) -> list[RequestRecord]:
        """Requests, oldest first (requests opened by the same write in id order)."""
        check_limit(limit, LIST_LIMIT)
        conditions: list[str] = []
        params: list[Any] = []
        if session_id is not None:
            conditions.append("session_id = ?")
            params.append(session_id)
        if status is not None:
            conditions.append("status = ?")
            params.append(status)
        if waits_on is not None:
            conditions.append("waits_on = ?")
            params.append(waits_on)
        if due_by is not None:
            conditions.append("deliver_at <= ?")
            params.append(self._dialect.time_param(due_by))
        sql = select(REQUEST_COLUMNS, "requests")
        if conditions:
            sql += " WHERE " + " AND ".join(conditions)
        rows = await self._read(lambda tx: tx.fetch(sql + " ORDER BY created_at, id LIMIT ?", [*params, limit]))
        return [from_row(RequestRecord, REQUEST_COLUMNS, row, REQUEST_JSON) for row in rows]

    async def usage_totals(self, session_ids: Sequence[str]) -> dict[str, Usage]:
        """Lifetime usage per session, from the ledger (reaped sessions included)."""
        return await self._usage_by("session_id", session_ids)

    async def usage_between(self, start: datetime, end: datetime, *, roles: Sequence[str] | None = None) -> Usage:
        """Total usage of ledger entries with start <= at < end."""
        conditions = ["at >= ?", "at < ?"]
        params: list[Any] = [self._dialect.time_param(start), self._dialect.time_param(end)]
        if roles is not None:
            condition, more = in_list("role", list(roles))
            conditions.append(condition)
            params.extend(more)
        [row] = await self._ledger_sums("", " AND ".join(conditions), params)
        return usage_from_sums(row)
