"""The observer of a session, as `agent_get` shows it: read from the store alone.

The pairing itself lives in the watchers layer; what it leaves in the store (the observer ref with its
tombstone, `observer.state` and `observer.report` events) is all this needs.
"""

from __future__ import annotations

from typing import Any

from agentwatch.events import ObserverReported, ObserverStateChanged, PairingState
from agentwatch.reads.answers import ObserverEntry, ObserverReportEntry
from agentwatch.store import SessionRecord, Store
from agentwatch.tools import dump

__all__ = ["describe_observer", "observer_entry"]


async def describe_observer(store: Store, session: SessionRecord, *, reports: int = 5) -> dict[str, Any] | None:
    """The observer of `session` as `agent_get` shows it, from the store alone; None when it has none.

    ```python
    {"observerType": "reviewer", "observerSessionId": "ses_...", "state": "armed",
     "reason": "observer started", "since": "2025-...", "stopped": False,
     "reports": [{"at": "...", "observerType": "reviewer", "observerSessionId": "ses_...", "report": "...",
                  "delivery": "queued"}]}
    ```

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
    state: PairingState = changed.state if changed is not None else "armed"
    reason = changed.reason if changed else None
    since = latest.at.isoformat() if latest is not None else None
    if ref is not None and ref.stopped and state not in ("stopped", "blocked"):
        state = "stopped"
    elif session.deleted_at is not None and state == "armed":
        # (not recorded: the notice of its deletion is a deleted session's last event)
        state, reason, since = "retired", "the observed agent was deleted", session.deleted_at.isoformat()
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
        stopped=bool(ref and ref.stopped),
        reports=listed,
    )
