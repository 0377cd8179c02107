"""Leases: which process owns a session's turns, and until when, decided by one clock per store.

PostgreSQL decides with the server's `clock_timestamp()`, so processes on machines whose clocks disagree
still agree on who holds a lease. SQLite is one machine: its local clock, read on the writer thread when the
change is applied (and on the reader thread for reads).

Taking a lease is one upsert whose `DO UPDATE ... WHERE` only takes over a row that is free, expired or
already the caller's: two owners racing for one lease both run it, and the database lets exactly one win.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, TypeVar

from agentwatch.errors import InvalidArgument, NotFound
from agentwatch.store._sql import DAMAGE, Dialect, Row, Tx, damaged_row, in_list, stored_time, utc_text
from agentwatch.store.records import LeaseClaim, LeaseRecord

__all__ = ["LeaseMethods", "claim_lease"]

T = TypeVar("T")

MAX_TTL_S: Final = 86_400.0
"""The longest lease one call may ask for (a day); renew a lease to keep it longer."""
_MAX_OWNER: Final = 200
_IN_LIST_MAX: Final = 500
_COLUMNS: Final = "session_id, owner, expires_at"


def _check_owner(owner: str) -> None:
    if not isinstance(owner, str) or not owner.strip() or len(owner) > _MAX_OWNER:
        raise InvalidArgument(f"a lease owner must be a non-blank text of at most {_MAX_OWNER} characters")


def _check_ttl(ttl: float) -> float:
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl) or not 0 < ttl <= MAX_TTL_S:
        raise InvalidArgument(f"a lease ttl must be a number of seconds above 0 and at most {MAX_TTL_S:g}, not {ttl!r}")
    return float(ttl)


def _expiry(dialect: Dialect, ttl: float) -> tuple[str, list[Any]]:
    """SQL for "now + ttl" by the store's one clock, and its parameters (build it where the statement runs)."""
    if dialect.name == "postgres":
        return "clock_timestamp() + make_interval(secs => ?)", [ttl]
    return "?", [utc_text(datetime.now(UTC) + timedelta(seconds=ttl))]


async def claim_lease(tx: Tx, dialect: Dialect, session_id: str, claim: LeaseClaim) -> None:
    """`Write.claim`, in the write's transaction: take the free lease of `session_id` for the claim's owner,
    or lock the lease that stands without changing it (a no-op update), so that its owner's release waits for
    the commit and its look after the release sees the work the write queued."""
    _check_owner(claim.owner)
    expiry, expiry_params = _expiry(dialect, _check_ttl(claim.ttl))
    await tx.execute(
        f"INSERT INTO leases (session_id, owner, expires_at) VALUES (?, ?, {expiry}) "
        "ON CONFLICT (session_id) DO UPDATE SET owner = leases.owner",
        [session_id, claim.owner, *expiry_params],
    )


def _record(row: Row) -> LeaseRecord:
    """A lease from a row selected as `_COLUMNS` and whether it expired; `DamagedRecord` for a damaged expiry
    (SQLite keeps it as text)."""
    session_id, owner, expires_at, expired = row
    try:
        moment = stored_time(expires_at)
        return LeaseRecord(session_id=session_id, owner=owner, expires_at=moment, expired=bool(expired))
    except DAMAGE as error:
        raise damaged_row(f"lease of session {session_id!r}", "expires_at", error, session_id=session_id) from None


class LeaseMethods(ABC):
    """The lease half of the `Store` contract, over `Tx`."""

    _dialect: Dialect

    @abstractmethod
    async def _read(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        """Run `fn` on a connection that sees every committed write."""

    @abstractmethod
    async def _write(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        """Run `fn` in a transaction; return once it committed (or raise, with nothing written)."""

    def _clock(self) -> tuple[str, list[Any]]:
        """SQL for "now" by the store's one clock, and its parameters (call it where the statement runs)."""
        if self._dialect.name == "postgres":
            return "clock_timestamp()", []
        return "?", [utc_text(datetime.now(UTC))]

    async def acquire_lease(self, session_id: str, owner: str, ttl: float) -> bool:
        """Take `session_id`'s lease for `ttl` seconds if it is free, expired or already `owner`'s (then it is
        extended); True when `owner` holds it after the call. Atomic: of owners racing, exactly one wins.
        Raises `NotFound` for an unknown session."""
        return await self.take_lease(session_id, owner, ttl) is not False

    async def take_lease(self, session_id: str, owner: str, ttl: float) -> LeaseRecord | bool:
        """`acquire_lease`, saying from whom: False when another owner's live lease stands; the other owner's
        lease (marked expired) when this call took it over; True when it was free or already `owner`'s. The
        lease is read and taken in one transaction, so a takeover is never mistaken for a free lease."""
        _check_owner(owner)
        seconds = _check_ttl(ttl)

        async def take(tx: Tx) -> LeaseRecord | bool:
            if not await tx.fetch("SELECT 1 FROM sessions WHERE id = ?", [session_id]):
                raise NotFound(f"no session with id {session_id!r} (it may have been reaped)")
            now, now_params = self._clock()
            lock = " FOR UPDATE" if self._dialect.name == "postgres" else ""  # SQLite's writer is one at a time
            before = await tx.fetch(
                f"SELECT {_COLUMNS}, expires_at <= {now} FROM leases WHERE session_id = ?{lock}",
                [*now_params, session_id],
            )
            expiry, expiry_params = _expiry(self._dialect, seconds)
            now, now_params = self._clock()
            rows = await tx.fetch(
                f"INSERT INTO leases (session_id, owner, expires_at) VALUES (?, ?, {expiry}) "
                "ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at "
                f"WHERE leases.owner = excluded.owner OR leases.expires_at <= {now} RETURNING owner",
                [session_id, owner, *expiry_params, *now_params],
            )
            if not rows:
                return False
            previous = _record(before[0]) if before else None
            if previous is None or previous.owner == owner:
                return True
            return previous.model_copy(update={"expired": True})  # it expired by the time it was taken

        return await self._write(take)

    async def renew_leases(self, owner: str, session_ids: Sequence[str], ttl: float) -> list[str]:
        """Extend, to now + `ttl`, the leases among `session_ids` that `owner` still holds (an expired one too,
        as long as nobody took it over); returns the ids it holds, in the order given."""
        _check_owner(owner)
        seconds = _check_ttl(ttl)
        if isinstance(session_ids, str):
            raise InvalidArgument("session_ids must be a list of session ids, not one string")
        wanted = list(dict.fromkeys(session_ids))
        if not wanted:
            return []

        async def renew(tx: Tx) -> set[str]:
            held: set[str] = set()
            for start in range(0, len(wanted), _IN_LIST_MAX):
                condition, params = in_list("session_id", wanted[start : start + _IN_LIST_MAX])
                expiry, expiry_params = _expiry(self._dialect, seconds)
                rows = await tx.fetch(
                    f"UPDATE leases SET expires_at = {expiry} WHERE owner = ? AND {condition} RETURNING session_id",
                    [*expiry_params, owner, *params],
                )
                held.update(row[0] for row in rows)
            return held

        held = await self._write(renew)
        return [session_id for session_id in wanted if session_id in held]

    async def request_stop(self, session_id: str, by: str) -> LeaseRecord | None:
        """Ask the engine holding `session_id`'s live lease to stop its turn, as `by`; that lease, or None when
        no live lease stands (nobody runs the turn: the caller stops it itself). The holder reads the request
        with `take_stop_requests`; one that lets its lease lapse first leaves it to the lease's next holder."""
        if not isinstance(by, str) or not by.strip() or len(by) > _MAX_OWNER:
            raise InvalidArgument(f"who asks for a stop must be a non-blank text of at most {_MAX_OWNER} characters")

        async def ask(tx: Tx) -> list[Row]:
            now, now_params = self._clock()
            return await tx.fetch(
                f"UPDATE leases SET stop_by = ? WHERE session_id = ? AND expires_at > {now} "
                f"RETURNING {_COLUMNS}, 1 = 0",
                [by, session_id, *now_params],
            )

        rows = await self._write(ask)
        return _record(rows[0]) if rows else None

    async def take_stop_requests(self, owner: str) -> dict[str, str]:
        """The stops asked of the leases `owner` holds (session id -> who asked), cleared as they are taken."""
        _check_owner(owner)
        sql = "SELECT session_id, stop_by FROM leases WHERE owner = ? AND stop_by IS NOT NULL"
        rows = await self._read(lambda tx: tx.fetch(sql, [owner]))
        if not rows:
            return {}
        asked = {str(row[0]): str(row[1]) for row in rows}
        clear = "UPDATE leases SET stop_by = NULL WHERE session_id = ? AND owner = ? AND stop_by = ?"

        async def take(tx: Tx) -> None:  # each as it was read: a request asked meanwhile stays for the next look
            for session_id, by in asked.items():
                await tx.execute(clear, [session_id, owner, by])

        await self._write(take)
        return asked

    async def release_lease(self, session_id: str, owner: str) -> None:
        """Give up `session_id`'s lease if `owner` holds it (expired or not); otherwise change nothing."""
        _check_owner(owner)
        await self._write(
            lambda tx: tx.execute("DELETE FROM leases WHERE session_id = ? AND owner = ?", [session_id, owner])
        )

    async def hand_back_lease(self, session_id: str, owner: str, lease: LeaseRecord) -> bool:
        """Put `session_id`'s lease back as `lease` was (its owner and expiry) if `owner` holds it; True when it
        did, otherwise nothing changes."""
        _check_owner(owner)
        _check_owner(lease.owner)
        sql = "UPDATE leases SET owner = ?, expires_at = ? WHERE session_id = ? AND owner = ? RETURNING session_id"
        params = [lease.owner, self._dialect.time_param(lease.expires_at), session_id, owner]
        return bool(await self._write(lambda tx: tx.fetch(sql, params)))

    async def get_lease(self, session_id: str) -> LeaseRecord | None:
        """The session's lease (expired or not), or None when nobody holds one."""

        async def read(tx: Tx) -> list[Row]:
            now, params = self._clock()
            return await tx.fetch(
                f"SELECT {_COLUMNS}, expires_at <= {now} FROM leases WHERE session_id = ?", [*params, session_id]
            )

        rows = await self._read(read)
        return _record(rows[0]) if rows else None

    async def expired_leases(
        self, *, limit: int = 100, roles: Sequence[str] | None = None, after: LeaseRecord | None = None
    ) -> list[LeaseRecord]:
        """Leases whose expiry has passed, the longest expired first, at most `limit` (1..10000); with `roles`,
        only those of sessions of these roles; with `after` (the last lease of a previous call), those past it."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
            raise InvalidArgument(f"limit must be an integer from 1 to 10000, not {limit!r}")
        of_roles, role_params = ("1 = 1", []) if roles is None else in_list("s.role", list(roles))
        past, past_params = "", []
        if after is not None:
            moment = self._dialect.time_param(after.expires_at)
            past = " AND (expires_at > ? OR (expires_at = ? AND session_id > ?))"
            past_params = [moment, moment, after.session_id]

        async def read(tx: Tx) -> list[Row]:
            now, params = self._clock()
            return await tx.fetch(
                f"SELECT {_COLUMNS}, 1 = 1 FROM leases JOIN sessions s ON s.id = leases.session_id "
                f"WHERE expires_at <= {now} AND {of_roles}{past} ORDER BY expires_at, session_id LIMIT ?",
                [*params, *role_params, *past_params, limit],
            )

        return [_record(row) for row in await self._read(read)]
