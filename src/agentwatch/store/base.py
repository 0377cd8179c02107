"""The `Store` contract: durable state that every backend keeps the same way.

One contract suite (`tests/store/test_contract.py`) runs unchanged against every backend.

Promises every backend keeps:

- `write()` is atomic: the events, the session patch, inbox, requests and ledger entries of one `Write`
  commit together or not at all, and the call returns only once they are durable.
- Each session's durable events are numbered 1, 2, 3, ... with no gap and no repeat, whatever the number of
  concurrent writers (in one process or, on PostgreSQL, many).
- Listings use keyset pagination (never OFFSET); a page cursor only works with the query it came from.
- A bad argument raises `InvalidArgument` and writes nothing.
- Leases (`acquire_lease` ...) are decided by ONE clock per store: PostgreSQL's server clock
  (`clock_timestamp()`), whatever the clocks of the processes using it; SQLite's local clock (one machine).
- At most one live observer session per pairing: `create_session(draft, observer_ref=ref)` creates the
  observer session and records the ref naming it in one transaction, so no crash leaves two.
- A tombstone (a stopped observer ref) holds for its pairing, the observed session and the observer type: it is
  kept (`get_observer_tombstone`) when the session's ref goes on to name an observer of another type.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple, Protocol, runtime_checkable

from pydantic import JsonValue

from agentwatch.events import Event, NewEvent, PageCursor, Payload, Usage, WaitsOn
from agentwatch.store.records import (
    ConversationRecord,
    InputRecord,
    JournalEntry,
    LeaseRecord,
    ObserverRef,
    Page,
    RequestRecord,
    RequestStatus,
    RunDraft,
    RunFilter,
    RunPatch,
    RunRecord,
    SessionDraft,
    SessionFilter,
    SessionGroup,
    SessionGroupBy,
    SessionPatch,
    SessionRecord,
    SessionSort,
    SpanDraft,
    SpanPatch,
    SpanRecord,
    StateCount,
    StoreInfo,
    TurnUsage,
    Write,
)

__all__ = ["SCHEMA_VERSION", "EventValues", "RunStore", "Store"]

SCHEMA_VERSION = 16
"""The schema version this code writes and reads; a database at a higher version is refused."""


class EventValues(NamedTuple):
    """A stored event as a reader shows it (`Store.read_event_values`): what its `Event` holds, but the time
    as text."""

    id: str
    seq: int
    at: str
    """When it happened, as the ISO 8601 text `Event.at.isoformat()` gives."""
    payload: Payload


@runtime_checkable
class RunStore(Protocol):
    """Runs, their spans and journal: a contract of its own (a run spans many sessions), which `Store`
    includes. Every backend keeps them in the same database as the sessions."""

    async def create_run(self, draft: RunDraft) -> RunRecord:
        """Record a new run; a given `id` that is taken raises `Conflict`."""

    async def get_run(self, run_id: str) -> RunRecord:
        """One run by id. Raises `NotFound`."""

    async def update_run(self, run_id: str, patch: RunPatch) -> RunRecord:
        """Change a run."""

    async def open_span(self, draft: SpanDraft) -> SpanRecord:
        """Record a span of a run."""

    async def update_span(self, span_id: str, patch: SpanPatch) -> SpanRecord:
        """Change a span (end it, set its cost)."""

    async def list_runs(
        self, where: RunFilter, *, limit: int = 50, after: tuple[datetime, str] | None = None
    ) -> list[RunRecord]:
        """Runs matching `where`, newest first (by start, then id); `after`: the (started_at, id) of the last run
        of the previous page."""

    async def run_entities(self, *, limit: int = 100) -> list[str]:
        """The entities that have runs (`workflow:report`), in text order, at most `limit`."""

    async def run_kinds(self, *, limit: int = 100) -> list[str]:
        """The kinds that runs have (`workflow`, `hook`), in text order, at most `limit`."""

    async def renew_runs(self, run_ids: Sequence[str], expires_at: datetime) -> None:
        """Move the expiry of the runs among `run_ids` that still run to `expires_at`."""

    async def end_lapsed_runs(self, now: datetime) -> list[str]:
        """End `interrupted` every run still running whose expiry passed by `now` (its process stopped before
        it ended the run), with its spans that had not ended; their ids."""

    async def reap_runs(self, ended_before: datetime, skipped_before: datetime, *, limit: int = 500) -> int:
        """Delete, with their spans and journal, up to `limit` runs that ended before `ended_before`, and
        skipped ones that ended before `skipped_before`, oldest first; how many went (not the ledger)."""

    async def end_run(self, run_id: str, patch: RunPatch) -> bool:
        """End a run that still runs with `patch`, and every span of it still open with the same status; False,
        writing nothing, when the run had ended already."""

    async def run_usage(self, run_id: str) -> list[TurnUsage]:
        """What each turn billed to the run, from the spend ledger (reaped sessions included), oldest first."""

    async def run_totals(self, run_ids: Sequence[str]) -> dict[str, Usage]:
        """What each run billed in all, from the spend ledger (a run that billed nothing: zero)."""

    async def list_spans(self, run_id: str) -> list[SpanRecord]:
        """A run's spans in start order."""

    async def append_journal(self, entry: JournalEntry) -> JournalEntry:
        """Add a line to a run's journal."""

    async def read_journal(self, run_id: str, *, limit: int = 100) -> list[JournalEntry]:
        """A run's journal, oldest first."""


@runtime_checkable
class Store(RunStore, Protocol):
    """Durable state of sessions, their events and everything around them (runs included: `RunStore`)."""

    url: str
    """The store URL it was opened with (password hidden)."""
    writes_in_order: bool
    """Whether the store applies this process's writes one after another, in the order they were queued (SQLite's
    one writer thread): a write queued right after another is never stored before it, and may share its
    commit. False where writes of different sessions run at once (PostgreSQL's pool)."""

    async def close(self) -> None:
        """Flush pending writes and release connections."""

    async def info(self) -> StoreInfo:
        """Backend, schema version and sizes."""

    # -- sessions -------------------------------------------------------------------------------------

    async def create_session(self, draft: SessionDraft, *, observer_ref: ObserverRef | None = None) -> SessionRecord:
        """Create a session with its first conversation.

        Raises `Conflict` when a live session of the same scope already has the name.

        With `observer_ref`, the new session is the observer of `observer_ref.observed_session_id`: the ref
        is recorded (its `observer_session_id` set to the new session's id) in the same transaction, so a
        crash can never leave an observer session without its ref, nor two observer sessions for one
        pairing. If the observed session's ref already names a different observer session that is not
        stopped and still live (neither finished nor deleted), raises `Conflict` and writes nothing;
        `NotFound` when the observed session does not exist.
        """

    async def get_session(self, session_id: str) -> SessionRecord:
        """One session by id, soft-deleted ones included. Raises `NotFound` (also once reaped)."""

    async def update_session(self, session_id: str, patch: SessionPatch) -> SessionRecord:
        """Write the fields set on `patch`; same as `write(Write(session_id, session=patch))`."""

    async def list_sessions(
        self,
        where: SessionFilter,
        *,
        sort: SessionSort = "newest",
        limit: int = 20,
        cursor: str | None = None,
    ) -> Page[SessionRecord]:
        """A page of sessions: the boss first, then live ones, then by `sort`, then by id.

        `limit` is 1..100; `cursor` is a previous page's `next_cursor` for the same `where` and `sort`.
        """

    async def list_session_values(
        self,
        where: SessionFilter,
        fields: Sequence[str],
        *,
        sort: SessionSort = "newest",
        limit: int = 20,
        cursor: str | PageCursor | None = None,
    ) -> Page[list[Any]]:
        """`list_sessions` (the same rows, the same cursors, interchangeable), each session as the values of
        `fields` (`SessionRecord` field names), in that order, in JSON form: the record's values, but times as
        the ISO 8601 text `datetime.isoformat` gives (`+00:00`) and models (`origin`) as
        `model_dump(mode="json")` gives. Only the columns named are read and no record is built: for listings
        that show a few fields of many sessions. An unknown field is an `InvalidArgument`. `cursor` may be given
        decoded already (`PageCursor.decode`, by a caller that checked it)."""

    async def count_sessions(self, where: SessionFilter) -> dict[str, int]:
        """How many sessions match, per status (statuses with none are left out)."""

    async def count_by_state(self, where: SessionFilter) -> list[StateCount]:
        """How many sessions match per (status, waits on a person, quiet), in one query: what status words
        derive from. Quiet means last activity before `where.quiet_before` (or `quiet_before_by_role`)."""

    async def group_sessions(self, where: SessionFilter, by: SessionGroupBy) -> list[SessionGroup]:
        """How many sessions match per value of `by`, with the newest activity of each; ordered by value."""

    async def soft_delete(self, session_id: str, *, reap_at: datetime) -> SessionRecord:
        """Mark a session deleted; it stays readable by id until `reap_at`."""

    async def reap(self, session_ids: Sequence[str]) -> int:
        """Hard-delete sessions with their conversations, events, inbox and requests (not the ledger).

        An observer ref naming one of them that was soft-deleted becomes a tombstone (`stopped`, at its deletion
        time) in the same transaction: a person's deletion stops an observer for good, and the ref keeps saying
        so once the session is gone. Returns how many were removed.
        """

    async def due_for_reap(
        self, now: datetime, *, after: tuple[datetime, str] | None = None, limit: int = 100
    ) -> list[str]:
        """Ids of sessions whose `reap_at` has passed, by `reap_at` then id; `after` is the (`reap_at`, id) of a
        session a previous call gave, to read on past it (a reaper that skips the sessions a watch holds)."""

    # -- events and the state they describe -----------------------------------------------------------

    async def write(self, write: Write) -> list[Event]:
        """Apply one atomic change and return the events as stored (with ids, seqs and times)."""

    async def append(self, session_id: str, events: Sequence[NewEvent]) -> list[Event]:
        """Append durable events; same as `write(Write(session_id, events))`."""

    async def read_events(
        self,
        session_id: str,
        *,
        after_seq: int = 0,
        limit: int = 100,
        types: Sequence[str] | None = None,
        conversation_id: str | None = None,
        turn_id: str | None = None,
    ) -> list[Event]:
        """Events with seq > `after_seq`, oldest first, at most `limit` (1..10000); `types`, `conversation_id`
        and `turn_id` narrow them."""

    async def read_events_backward(
        self,
        session_id: str,
        *,
        before_seq: int | None = None,
        limit: int = 100,
        types: Sequence[str] | None = None,
        conversation_id: str | None = None,
        turn_id: str | None = None,
    ) -> list[Event]:
        """Events with seq < `before_seq` (or the newest), newest first, at most `limit` (1..10000)."""

    async def read_session_events(
        self,
        session_id: str,
        *,
        after_seq: int | None = None,
        limit: int = 100,
        types: Sequence[str] | None = None,
    ) -> tuple[SessionRecord, list[Event]]:
        """The session, then its events in the same read (one snapshot on SQLite): with `after_seq`, those
        after it, oldest first; without, the newest `limit` up to the session's `last_seq`, newest first.
        Raises `NotFound` for an unknown session."""

    async def read_event_values(
        self,
        session_id: str,
        *,
        after_seq: int | None = None,
        limit: int = 100,
        types: Sequence[str] | None = None,
    ) -> tuple[int, list[EventValues]]:
        """`read_session_events` for a reader that shows events rather than handles them: the session's
        `last_seq`, then the same events in the same order (one snapshot on SQLite), each as `EventValues`,
        without building an `Event` per row. Raises `NotFound` for an unknown session."""

    async def get_event(self, session_id: str, event_id: str) -> Event:
        """One event by id. Raises `NotFound`."""

    # -- conversations, inbox, requests, ledger -------------------------------------------------------

    async def list_conversations(self, session_id: str) -> list[ConversationRecord]:
        """Every conversation of the session, oldest first; the last one is current."""

    async def read_messages(self, conversation_id: str) -> list[JsonValue]:
        """The model-layer messages of a conversation, in the order they were written."""

    async def list_inputs(self, session_id: str, *, pending_only: bool = True) -> list[InputRecord]:
        """Inbox inputs, oldest first."""

    async def get_input(self, session_id: str, input_id: str) -> InputRecord:
        """One inbox input of a session, taken or not. Raises `NotFound`."""

    async def get_request(self, request_id: str) -> RequestRecord:
        """One request by id. Raises `NotFound`."""

    async def list_requests(
        self,
        *,
        session_id: str | None = None,
        status: RequestStatus | None = "pending",
        waits_on: WaitsOn | None = None,
        due_by: datetime | None = None,
        limit: int = 100,
    ) -> list[RequestRecord]:
        """Requests, oldest first; `waits_on` keeps those waiting on a person or held for a parent agent, `due_by`
        those whose `deliver_at` is at or before it."""

    async def usage_totals(self, session_ids: Sequence[str]) -> dict[str, Usage]:
        """Lifetime usage per session, from the ledger (reaped sessions included)."""

    async def usage_between(self, start: datetime, end: datetime, *, roles: Sequence[str] | None = None) -> Usage:
        """Total usage of ledger entries with start <= at < end."""

    # -- leases ---------------------------------------------------------------------------------------
    # Which process owns a session's turns. Expiry is decided by the store's one clock (see the module).

    async def acquire_lease(self, session_id: str, owner: str, ttl: float) -> bool:
        """Take the session's lease for `ttl` seconds (0 < ttl <= 86400) if it is free, expired, or already
        held by `owner` (then it is extended to now + `ttl`); True when `owner` holds it after the call.
        Atomic: of owners racing for one lease, exactly one wins. `NotFound` for an unknown session."""

    async def take_lease(self, session_id: str, owner: str, ttl: float) -> LeaseRecord | bool:
        """`acquire_lease`, saying from whom, in the same transaction: False when another owner's live lease
        stands; the other owner's expired lease when this call took it over; True when the lease was free or
        already `owner`'s."""

    async def renew_leases(self, owner: str, session_ids: Sequence[str], ttl: float) -> list[str]:
        """Extend to now + `ttl` the leases among `session_ids` still held by `owner` (an expired one too, as
        long as nobody took it over since); returns the ids held, in the order given. A lease taken over by
        another owner after it expired is not renewed (and not returned)."""

    async def request_stop(self, session_id: str, by: str) -> LeaseRecord | None:
        """Ask the engine holding the session's live lease to stop its turn, as `by` (it reads the request with
        `take_stop_requests`); that lease, or None when no live lease stands."""

    async def take_stop_requests(self, owner: str) -> dict[str, str]:
        """The stops asked of the leases `owner` holds (session id -> who asked), cleared as they are taken."""

    async def release_lease(self, session_id: str, owner: str) -> None:
        """Give up the session's lease if `owner` holds it; otherwise nothing changes."""

    async def hand_back_lease(self, session_id: str, owner: str, lease: LeaseRecord) -> bool:
        """Put the session's lease back as `lease` was (its owner and expiry) if `owner` holds it, as an owner that
        took a lease over only to write a note does: whoever takes it next sees the owner that left it, and since
        when. True when it was put back; otherwise nothing changes."""

    async def get_lease(self, session_id: str) -> LeaseRecord | None:
        """The session's lease, expired or not (see `LeaseRecord.expired`), or None when there is none."""

    async def expired_leases(
        self, *, limit: int = 100, roles: Sequence[str] | None = None, after: LeaseRecord | None = None
    ) -> list[LeaseRecord]:
        """Leases whose expiry has passed, longest expired first, at most `limit` (1..10000); with `roles`, only
        those of sessions of these roles (what an engine can run); with `after` (the last lease a previous call
        gave), only those past it in that order, to read them page after page."""

    # -- observer refs --------------------------------------------------------------------------------

    async def set_observer_ref(self, ref: ObserverRef) -> ObserverRef:
        """Record (or replace) the observer paired with `ref.observed_session_id`."""

    async def get_observer_ref(self, observed_session_id: str) -> ObserverRef | None:
        """The observer ref kept with a session, if any."""

    async def get_observer_tombstone(self, observed_session_id: str, observer_type: str) -> ObserverRef | None:
        """The tombstone of the pairing of the session with an observer of `observer_type`: a stopped ref (with no
        `updated_at`) naming the observer a person stopped (`set_observer_ref` with `stopped`, or its deletion,
        once reaped; the first stop's), kept after the session's ref names another observer type; None when no
        observer of that type was stopped on it."""
