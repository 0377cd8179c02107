"""Runs, their spans and journal: the `RunStore` half of `SqlStore`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypeVar

from agentwatch.errors import Conflict, NotFound, Suggestion
from agentwatch.events import Usage, new_id
from agentwatch.store._sql import (
    DAMAGE,
    Row,
    Tx,
    aware,
    check_limit,
    damaged_row,
    from_row,
    in_list,
    stored_time,
)
from agentwatch.store._sqlbase import (
    JOURNAL_COLUMNS,
    JOURNAL_JSON,
    LIST_LIMIT,
    RUN_COLUMNS,
    RUN_JSON,
    SPAN_COLUMNS,
    SPAN_JSON,
    SqlBase,
    patch_fields,
    select,
    usage_from_sums,
    utc_now,
)
from agentwatch.store.records import (
    JournalEntry,
    RunDraft,
    RunFilter,
    RunPatch,
    RunRecord,
    SpanDraft,
    SpanPatch,
    SpanRecord,
    TurnUsage,
)

__all__ = ["RunMethods"]

T = TypeVar("T")


class RunMethods(SqlBase):
    """The `RunStore` contract over `Tx`."""

    # -- runs -----------------------------------------------------------------------------------------

    async def create_run(self, draft: RunDraft) -> RunRecord:
        """Record a new run. A run given an `id` that is taken raises `Conflict` (of several processes that
        record the same run, one does: a heartbeat's tick)."""
        values = draft.model_dump() | {"id": draft.id or new_id("run"), "started_at": utc_now()}
        params = self._params(values, RUN_JSON)
        sql = (
            f"INSERT INTO runs ({', '.join(params)}) VALUES ({', '.join('?' * len(params))}) "
            "ON CONFLICT (id) DO NOTHING RETURNING id"
        )

        async def create(tx: Tx) -> RunRecord:
            if not await tx.fetch(sql, list(params.values())):
                raise Conflict(f"a run with id {values['id']!r} already exists; leave `id` unset for a new one")
            return await self._run(tx, values["id"])

        return await self._write(create)

    async def _run(self, tx: Tx, run_id: str) -> RunRecord:
        record: RunRecord = await self._one(
            tx, RunRecord, "runs", RUN_COLUMNS, RUN_JSON, ("id", run_id), _no_run(run_id)
        )
        return record

    async def get_run(self, run_id: str) -> RunRecord:
        """One run by id. Raises `NotFound`."""
        return await self._read(lambda tx: self._run(tx, run_id))

    async def update_run(self, run_id: str, patch: RunPatch) -> RunRecord:
        """Change a run."""

        async def update(tx: Tx) -> RunRecord:
            await self._run(tx, run_id)
            await self._update(tx, "runs", ("id", run_id), patch_fields(patch), RUN_JSON)
            return await self._run(tx, run_id)

        return await self._write(update)

    async def list_runs(
        self, where: RunFilter, *, limit: int = 50, after: tuple[datetime, str] | None = None
    ) -> list[RunRecord]:
        """Runs matching `where`, newest first (by start, then id); `after`: the (started_at, id) of the last run
        of the previous page."""
        check_limit(limit, LIST_LIMIT)
        time = self._dialect.time_param
        conditions: list[str] = []
        params: list[Any] = []
        for column in ("entity", "kind"):
            if (value := getattr(where, column)) is not None:
                conditions.append(f"{column} = ?")
                params.append(value)
        if where.status is not None:
            condition, values = in_list("status", list(where.status))
            conditions.append(condition)
            params += values
        if where.started_before is not None:
            conditions.append("started_at < ?")
            params.append(time(aware(where.started_before)))
        if after is not None:
            conditions.append("(started_at < ? OR (started_at = ? AND id < ?))")
            params += [time(aware(after[0])), time(aware(after[0])), after[1]]
        sql = select(RUN_COLUMNS, "runs")
        if conditions:
            sql += " WHERE " + " AND ".join(conditions)
        sql += " ORDER BY started_at DESC, id DESC LIMIT ?"
        rows = await self._read(lambda tx: tx.fetch(sql, [*params, limit]))
        return [from_row(RunRecord, RUN_COLUMNS, row, RUN_JSON) for row in rows]

    async def run_entities(self, *, limit: int = 100) -> list[str]:
        """The entities that have runs (`workflow:report`), in text order, at most `limit` (read from the index
        `runs_entity`)."""
        return await self._run_values("entity", limit)

    async def run_kinds(self, *, limit: int = 100) -> list[str]:
        """The kinds that runs have (`workflow`, `hook`), in text order, at most `limit` (no index holds them:
        this reads every run, as a listing of a kind that no run has does)."""
        return await self._run_values("kind", limit)

    async def _run_values(self, column: str, limit: int) -> list[str]:
        """The values of `column` that runs have, in text order, at most `limit`."""
        check_limit(limit, LIST_LIMIT)
        sql = f"SELECT DISTINCT {column} FROM runs WHERE {column} IS NOT NULL ORDER BY {column} LIMIT ?"
        rows = await self._read(lambda tx: tx.fetch(sql, [limit]))
        return [str(row[0]) for row in rows]

    async def renew_runs(self, run_ids: Sequence[str], expires_at: datetime) -> None:
        """Move the expiry of the runs among `run_ids` that still run to `expires_at`."""
        condition, params = in_list("id", list(run_ids))
        sql = f"UPDATE runs SET expires_at = ? WHERE {condition} AND status = 'running'"
        moment = self._dialect.time_param(aware(expires_at))
        await self._write(lambda tx: tx.execute(sql, [moment, *params]))

    async def end_lapsed_runs(self, now: datetime) -> list[str]:
        """End `interrupted` every run still running whose expiry passed by `now` (its process stopped before
        it ended the run), with its spans that had not ended; their ids."""
        moment = self._dialect.time_param(aware(now))
        reason = "its process stopped before the run ended"

        async def end(tx: Tx) -> list[str]:
            rows = await tx.fetch(
                "UPDATE runs SET status = 'interrupted', status_reason = ?, ended_at = ? "
                "WHERE status = 'running' AND expires_at IS NOT NULL AND expires_at < ? RETURNING id",
                [reason, moment, moment],
            )
            ended = [str(row[0]) for row in rows]
            await self._end_open_spans(tx, ended, "interrupted", moment)
            return ended

        return await self._write(end)

    async def reap_runs(self, ended_before: datetime, skipped_before: datetime, *, limit: int = 500) -> int:
        """Delete, with their spans and journal, up to `limit` runs that ended before `ended_before`, and
        skipped ones (a heartbeat's tick that did not run) that ended before `skipped_before`, oldest first; how
        many went. The spend ledger keeps what their turns billed."""
        check_limit(limit, 500)
        ended, skipped = (self._dialect.time_param(aware(moment)) for moment in (ended_before, skipped_before))

        async def reap(tx: Tx) -> int:
            rows = await tx.fetch(  # (the first bound keeps the index's walk to the runs that may be due)
                "SELECT id FROM runs WHERE ended_at IS NOT NULL AND ended_at < ? AND status <> 'running' "
                "AND ((status <> 'skipped' AND ended_at < ?) OR (status = 'skipped' AND ended_at < ?)) "
                "ORDER BY ended_at LIMIT ?",
                [max(ended, skipped), ended, skipped, limit],
            )
            run_ids = [str(row[0]) for row in rows]
            if run_ids:
                condition, params = in_list("run_id", run_ids)
                for table in ("spans", "journal"):
                    await tx.execute(f"DELETE FROM {table} WHERE {condition}", params)
                condition, params = in_list("id", run_ids)
                await tx.execute(f"DELETE FROM runs WHERE {condition}", params)
            return len(run_ids)

        return await self._write(reap)

    async def end_run(self, run_id: str, patch: RunPatch) -> bool:
        """End a run that still runs with `patch` (its status, why, when: now when it gives no time), and every
        span of it still open with the same status; False, writing nothing, when the run had ended already
        (another engine ended it `interrupted` when it lapsed)."""
        ended_at = patch.ended_at or utc_now()
        patch = patch.model_copy(update={"ended_at": ended_at})

        async def end(tx: Tx) -> bool:
            if (await self._run(tx, run_id)).status != "running":
                return False
            await self._end_open_spans(tx, [run_id], patch.status, self._dialect.time_param(aware(ended_at)))
            await self._update(tx, "runs", ("id", run_id), patch_fields(patch), RUN_JSON)
            return True

        return await self._write(end)

    async def _end_open_spans(self, tx: Tx, run_ids: Sequence[str], status: str | None, moment: Any) -> None:
        if run_ids:
            condition, params = in_list("run_id", list(run_ids))
            sql = f"UPDATE spans SET status = ?, ended_at = ? WHERE ended_at IS NULL AND {condition}"
            await tx.execute(sql, [status, moment, *params])

    async def run_usage(self, run_id: str) -> list[TurnUsage]:
        """What each turn billed to the run, from the spend ledger (reaped sessions included), oldest first."""
        keys = "session_id, turn_id, MIN(role), MIN(model), MIN(at), MAX(at)"
        grouping = " GROUP BY session_id, turn_id ORDER BY MIN(at), session_id"
        rows = await self._ledger_sums(keys, "run_id = ?", [run_id], grouping)
        return [_turn_usage(run_id, row) for row in rows]

    async def run_totals(self, run_ids: Sequence[str]) -> dict[str, Usage]:
        """What each run billed in all, from the spend ledger (a run that billed nothing: zero)."""
        return await self._usage_by("run_id", run_ids)

    async def open_span(self, draft: SpanDraft) -> SpanRecord:
        """Record a span of a run."""
        values = draft.model_dump() | {"id": draft.id or new_id("spn"), "started_at": draft.started_at or utc_now()}

        async def create(tx: Tx) -> SpanRecord:
            await self._run(tx, draft.run_id)
            await self._insert(tx, "spans", values, SPAN_JSON)
            return await self._span(tx, values["id"])

        return await self._write(create)

    async def _span(self, tx: Tx, span_id: str) -> SpanRecord:
        record: SpanRecord = await self._one(
            tx, SpanRecord, "spans", SPAN_COLUMNS, SPAN_JSON, ("id", span_id), NotFound(f"no span with id {span_id!r}")
        )
        return record

    async def update_span(self, span_id: str, patch: SpanPatch) -> SpanRecord:
        """Change a span (end it, set its cost)."""

        async def update(tx: Tx) -> SpanRecord:
            await self._span(tx, span_id)
            fields = {name: value for name, value in patch_fields(patch).items() if value is not None}
            await self._update(tx, "spans", ("id", span_id), fields, SPAN_JSON)
            return await self._span(tx, span_id)

        return await self._write(update)

    async def list_spans(self, run_id: str) -> list[SpanRecord]:
        """A run's spans in start order."""
        sql = f"{select(SPAN_COLUMNS, 'spans')} WHERE run_id = ? ORDER BY started_at, id"
        rows = await self._read(lambda tx: tx.fetch(sql, [run_id]))
        return [from_row(SpanRecord, SPAN_COLUMNS, row, SPAN_JSON) for row in rows]

    async def append_journal(self, entry: JournalEntry) -> JournalEntry:
        """Add a line to a run's journal."""
        values = entry.model_dump() | {"id": entry.id or new_id("jrn"), "at": entry.at or utc_now()}

        async def append(tx: Tx) -> None:
            await self._run(tx, entry.run_id)
            await self._insert(tx, "journal", values, JOURNAL_JSON)

        await self._write(append)
        return JournalEntry.model_validate(values)

    async def read_journal(self, run_id: str, *, limit: int = 100) -> list[JournalEntry]:
        """A run's journal, oldest first."""
        check_limit(limit, LIST_LIMIT)
        sql = f"{select(JOURNAL_COLUMNS, 'journal')} WHERE run_id = ? ORDER BY at, id LIMIT ?"
        rows = await self._read(lambda tx: tx.fetch(sql, [run_id, limit]))
        return [from_row(JournalEntry, JOURNAL_COLUMNS, row, JOURNAL_JSON) for row in rows]


def _turn_usage(run_id: str, row: Row) -> TurnUsage:
    """A turn's spend from a row of `run_usage`; `DamagedRecord` when a time of its ledger entries is damaged (a
    damaged count was refused by `_ledger_sums`)."""
    session_id, turn_id, role, model, first_at, last_at = row[:6]
    try:
        first, last = stored_time(first_at), stored_time(last_at)
    except DAMAGE as error:
        what = f"spend of turn {turn_id!r} of session {session_id!r} in run {run_id!r}"
        raise damaged_row(what, "at", error, run_id=run_id, session_id=session_id, turn_id=turn_id) from None
    usage = usage_from_sums(row[6:])
    return TurnUsage(
        session_id=session_id, turn_id=turn_id, role=role, model=model, first_at=first, last_at=last, usage=usage
    )


def _no_run(run_id: str) -> NotFound:
    """There is no run `run_id`, and what to do: an agent's id and an entity (`heartbeat:digest`) are told apart
    from a run's."""
    if run_id.startswith("ses_"):
        return NotFound(f"no run with id {run_id!r} (an agent's id; its runId names the run that started it)")
    if ":" in run_id and not run_id.startswith("run_"):
        its_runs = Suggestion("run_list", {"entity": run_id})
        message = f"no run with id {run_id!r}: that is an entity; {its_runs} lists its runs' ids"
        return NotFound(message, suggest=[its_runs])
    runs = Suggestion("run_list")
    return NotFound(f"no run with id {run_id!r}; {runs} lists the runs", suggest=[runs])
