"""The observer of a session, as `agent_get` shows it: read from the store alone.

The pairing itself lives in the watchers layer; what it leaves in the store (the observer ref with its
tombstone, the observer session, `observer.state` and `observer.report` events) is all this needs.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from agentwatch.errors import NotFound
from agentwatch.events import ObserverReported, ObserverStateChanged, PairingState
from agentwatch.reads.answers import ObserverEntry, ObserverReportEntry
from agentwatch.store import ObserverRef, SessionRecord, Store
from agentwatch.tools import dump

__all__ = [
    "ARMED_STATES",
    "STOPPED_FOR_GOOD",
    "describe_observer",
    "observer_entry",
    "stopped_by_person",
]

STOPPED_FOR_GOOD = "a person stopped this observer; it is not brought back"
"""Why a pairing a person's stop ended stays over (the tombstone), as `agent_get` and the pairing say it."""
ARMED_STATES = ("armed", "failing")
"""The states `agent_get` shows for an armed pairing: `failing` is one whose observer's latest turn failed."""


async def describe_observer(store: Store, session: SessionRecord, *, reports: int = 5) -> dict[str, Any] | None:
    """The observer of `session` as `agent_get` shows it, from the store alone; None when it has none.

    ```python
    {"observerType": "reviewer", "observerSessionId": "ses_...", "state": "armed",
     "reason": "observer started", "since": "2025-...", "stopped": False,
     "reports": [{"at": "...", "observerType": "reviewer", "observerSessionId": "ses_...", "report": "...",
                  "delivery": "queued"}]}
    ```

    `state` is the pairing's (`armed`, `denied`, `retired`, `stopped`, `blocked`), except that an armed pairing
    whose observer's latest turn failed shows as `failing`, with the error as its reason: the pairing stays
    armed underneath (every new batch is still tried, and the observed agent never waits on it), and shows as
    `armed` again once a turn of the observer goes through.

    `reports` holds the newest `reports` reports, oldest first; each one's `delivery` is `queued` while it waits
    in the agent's inbox (a finished task reads it at the next turn it is given) and `read` once a turn took it.
    """
    entry = await observer_entry(store, session, reports=reports)
    return dump(entry) if entry is not None else None


async def observer_entry(store: Store, session: SessionRecord, *, reports: int = 5) -> ObserverEntry | None:
    """The observer of `session` as the `ObserverEntry` of `describe_observer`; None when it has none."""
    ref = await store.get_observer_ref(session.id)
    states = await store.read_events_backward(session.id, types=["observer.state"], limit=1)
    if ref is None and not states:
        return None
    latest = states[0] if states else None
    changed = latest.payload if latest is not None and isinstance(latest.payload, ObserverStateChanged) else None
    state: PairingState | Literal["failing"] = changed.state if changed is not None else "armed"
    reason = changed.reason if changed else None
    since = latest.at.isoformat() if latest is not None else None
    over = state in ("stopped", "blocked")
    observer = await _observer_session(store, ref) if not over else None
    stop = _person_stop(ref, observer) if not over else None
    if stop is not None:
        state, reason, since = "stopped", STOPPED_FOR_GOOD, stop.isoformat()
    elif session.deleted_at is not None and state == "armed":
        # (not recorded: the notice of its deletion is a deleted session's last event)
        state, reason, since = "retired", "the observed agent was deleted", session.deleted_at.isoformat()
    elif state == "armed" and observer is not None and observer.status == "failed":
        # (not recorded either: the observer session's own status says it, and the next turn that goes through
        # clears it; each failure is recorded on the observed agent as a `runtime.warning`)
        state, reason, since = "failing", _failing_reason(observer), observer.updated_at.isoformat()
    found = await store.read_events_backward(session.id, types=["observer.report"], limit=reports) if reports else []
    inputs = await store.list_inputs(session.id) if found else []
    waiting = [i.text for i in inputs if i.origin and i.origin.kind == "observer"]
    listed: list[ObserverReportEntry] = []
    for event in found:  # newest first: the newest reports are the ones still waiting in the inbox
        if not isinstance(event.payload, ObserverReported):
            continue
        text = event.payload.report
        queued = next((i for i, waits in enumerate(waiting) if waits.endswith(text)), None)
        if queued is not None:
            del waiting[queued]
        entry = ObserverReportEntry(
            at=event.at.isoformat(),
            observer_type=event.payload.observer_type,
            observer_session_id=event.payload.observer_session_id,
            report=text,
            delivery="queued" if queued is not None else "read",
        )
        listed.insert(0, entry)
    observer_type = ref.observer_type if ref is not None else changed.observer_type if changed else None
    observer_session = (ref.observer_session_id if ref is not None else None) or (
        changed.observer_session_id if changed else None
    )
    return ObserverEntry(
        observer_type=observer_type,
        observer_session_id=observer_session,
        state=state,
        reason=reason,
        since=since,
        stopped=bool(ref and ref.stopped) or stop is not None,
        reports=listed,
    )


def _failing_reason(observer: SessionRecord) -> str:
    """Why an armed pairing shows as `failing`: its observer's latest turn failed, with the error."""
    return (
        f"the observer's latest turn failed ({observer.error or 'no error given'}), so the batch it had was "
        "dropped; each new batch is still tried"
    )


async def _observer_session(store: Store, ref: ObserverRef | None) -> SessionRecord | None:
    """The observer session the ref names, when it still exists (a reaped one: None)."""
    if ref is None or ref.observer_session_id is None:
        return None
    try:
        return await store.get_session(ref.observer_session_id)
    except NotFound:
        return None


def _person_stop(ref: ObserverRef | None, observer: SessionRecord | None) -> datetime | None:
    """When a person stopped the observer the ref names (its session: `observer`), though no `stopped` state
    records it yet; else None.

    The pairing's engine writes the tombstone, then the state: read between the two, the tombstone says it. A
    person who stops the observer while no engine runs the agent it watches (`agentwatch stop` on the store)
    only ends the observer session: the next engine to arm the pairing writes both, and till then the session
    says it. A reaped observer session is a lost context (a fresh observer takes over), unless its deletion
    left a tombstone."""
    if ref is None:
        return None
    if ref.stopped:
        return ref.stopped_at or ref.updated_at
    if observer is None or not stopped_by_person(observer):
        return None
    return observer.deleted_at or observer.updated_at


def stopped_by_person(session: SessionRecord) -> bool:
    """An observer session someone deleted, or whose turn someone stopped (the engine cancels one on its own
    only when it hung, and first takes it out of the observer ref; a shutdown leaves turns running, to be
    continued)."""
    return session.deleted_at is not None or session.status == "cancelled"
