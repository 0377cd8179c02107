"""`current`: the monitoring snapshot of one session (what `agent_get` carries, and what `agent_await` and
`agent_task` return with `timedOut` and `deleted`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from agentwatch.errors import AgentwatchError
from agentwatch.events import (
    CompletionFinished,
    CompletionStarted,
    ContentDelta,
    Event,
    StreamCursor,
    ToolCall,
    ToolProgress,
    ToolResult,
    TurnEnded,
    TurnStarted,
    Usage,
    truncate,
)
from agentwatch.live import LiveRing
from agentwatch.reads._view import RosterView, role_problem
from agentwatch.reads.answers import CurrentItem, CurrentSnapshot, PartialUsage, PendingHitl, StatusSnapshot
from agentwatch.reads.words import status_word
from agentwatch.store import SessionRecord, Store
from agentwatch.tools import dump

__all__ = ["LAST_TEXT_CHARS", "current", "doing_now", "is_settled", "snapshot_answer", "status_snapshot"]

log = logging.getLogger(__name__)

LAST_TEXT_CHARS = 1000
_CALLS_SCAN = 100
"""Tool calls and results read back to find the calls still open (those of the newest response, at most)."""
_RING_SCAN = 1000
"""Events after the first open call read from the live ring to learn which open calls already ended."""
_ROW_SCAN = 200
"""The newest events of a running session read from the live ring for its `agent_list` row."""
_ROW_TYPES = ("turn.started", "tool.call", "tool.result", "tool.progress")
"""The events among them that tell which calls run (beside the newest, which tells what the model does)."""


def is_settled(session: SessionRecord) -> bool:
    """Whether a wait on the session is over: it is deleted, or no turn runs and its inbox is empty (done,
    failed, stopped, idle, or paused on a request)."""
    if session.deleted_at is not None:
        return True
    return session.inbox_size == 0 and session.status != "running"


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


async def current(store: Store, session: SessionRecord, ring: LiveRing | None = None) -> CurrentSnapshot:
    """`lastActivityAt`, `currentItem`, `lastAssistantText`, `pendingHitl`, `lastToolName`, `partialUsage`,
    `cursor`. With the live `ring`, `currentItem` leaves out the calls that ended beside calls still running
    (their results are not recorded yet); without it, such a call may still be named."""
    current_item: CurrentItem | None = None
    if session.status == "running":
        recent = await store.read_events_backward(session.id, limit=_CALLS_SCAN, types=["tool.call", "tool.result"])
        running = await _running_calls(ring, session.id, recent)
        names = [call.tool_name for call in running]
        current_item = _item(names, await _model_doing(ring, session.id) if not names else "")
    else:
        recent = await store.read_events_backward(session.id, limit=1, types=["tool.call"])
    last_call = next((e.payload for e in recent if isinstance(e.payload, ToolCall)), None)
    text = truncate(session.last_text, LAST_TEXT_CHARS).text if session.last_text else None
    return CurrentSnapshot(
        last_activity_at=_iso(session.last_active_at),
        current_item=current_item,
        last_assistant_text=text,
        pending_hitl=await _pending_hitl(store, session),
        last_tool_name=last_call.tool_name if last_call else None,
        partial_usage=await _last_turn_usage(store, session),
        cursor=StreamCursor(session.id, session.last_seq).encode(),
    )


async def _running_calls(ring: LiveRing | None, session_id: str, recent: list[Event]) -> list[ToolCall]:
    """The tool calls still running, in the order the model made them (so the first has run the longest), from
    the `recent` calls and results (newest first): the calls without a result, but for those the live ring says
    ended (see `ToolProgress.status`)."""
    open_calls = _open_calls(recent)
    if not open_calls:
        return []
    held: list[Event] = []
    if ring is not None and len(open_calls) > 1:
        try:
            held = await ring.recent(session_id, after=open_calls[0].cursor, limit=_RING_SCAN)
        except AgentwatchError as exc:  # the ring is a view: without it, the stored calls still answer
            log.warning("the current item of %s without the live ring's events: %s", session_id, exc)
    return _still_running(open_calls, held)


def _open_calls(recent: Sequence[Event]) -> list[Event]:
    """The calls among `recent` (newest first) without a result among them, oldest first."""
    answered = {e.payload.tool_call_id for e in recent if isinstance(e.payload, ToolResult)}
    return [e for e in reversed(recent) if isinstance(e.payload, ToolCall) and e.payload.tool_call_id not in answered]


def _still_running(open_calls: list[Event], held: Sequence[Event]) -> list[ToolCall]:
    """The `open_calls` but those the live ring's `held` events say ended: the results of calls made together are
    recorded once every one of them ended, while each call's end is in the ring at once."""
    ended = {e.payload.tool_call_id for e in held if isinstance(e.payload, ToolProgress) and e.payload.status}
    return [e.payload for e in open_calls if isinstance(e.payload, ToolCall) and e.payload.tool_call_id not in ended]


def _item(running: list[str], model_doing: str) -> CurrentItem:
    """The call that has run the longest among the tools `running` (and how many run beside it), or else what the
    model does."""
    if not running:
        return CurrentItem(type="message", tool_name=None, title=model_doing)
    first = running[0]
    title = f"{first} +{len(running) - 1} more" if len(running) > 1 else first
    return CurrentItem(type="tool", tool_name=first, title=title)


async def _model_doing(ring: LiveRing | None, session_id: str) -> str:
    """What the model does while no call runs, as the live ring's newest event says: `thinking` or `writing` (the
    part it streams), or `waiting for the model` (asked, nothing streamed yet); `writing` without the ring."""
    if ring is None:
        return "writing"
    try:
        newest = await ring.recent(session_id, limit=1)
    except AgentwatchError as exc:  # (a view: the stored state still answers)
        log.warning("what the model of %s does, without the live ring's events: %s", session_id, exc)
        return "writing"
    return _model_word(newest[-1] if newest else None)


def _model_word(newest: Event | None) -> str:
    payload = newest.payload if newest is not None else None
    if isinstance(payload, ContentDelta):
        return "thinking" if payload.part == "thinking" else "writing"
    return "waiting for the model" if isinstance(payload, CompletionStarted) else "writing"


async def doing_now(ring: LiveRing, session_ids: Sequence[str]) -> dict[str, CurrentItem]:
    """What running sessions do now, as the live ring alone says it: `agent_list`'s `currentItem`, read without a
    query of the store per row (a listing page is mostly one query), and in one read of the ring for the whole page
    (one round trip on Redis). By session: the calls of its current turn that have not ended, else what its model
    does; a session of which the ring holds no event (it runs in another process that shares no ring with this
    one) has none. Of its newest `_ROW_SCAN` events, only those of its current turn that tell which calls run
    (its start, the calls, their results and progress) and the newest one are read: a call made before them that
    still runs is known by its progress among them, and a call among them has its end after it, among them too."""
    try:
        held = await ring.recent_each(session_ids, limit=_ROW_SCAN, types=_ROW_TYPES, back_to="turn.started")
    except AgentwatchError as exc:  # (a view: the rows still answer without it)
        log.warning("what %d agents do now, without the live ring's events: %s", len(session_ids), exc)
        return {}
    return {session_id: _doing(events) for session_id, events in zip(session_ids, held, strict=True) if events}


def _doing(held: Sequence[Event]) -> CurrentItem:
    """`doing_now` of one session, from its newest event and the events of its current turn that tell which calls
    run (`_ROW_TYPES`), oldest first."""
    starts = [i for i, e in enumerate(held) if isinstance(e.payload, TurnStarted)]
    turn = held[starts[-1] :] if starts else held
    calls = [e for e in reversed(turn) if isinstance(e.payload, ToolCall | ToolResult)]
    running = _still_running(_open_calls(calls), turn)
    seen = {e.payload.tool_call_id for e in calls if isinstance(e.payload, ToolCall | ToolResult)}
    earlier = {  # calls made before the events read, still running (by call, in the order they reported)
        e.payload.tool_call_id: e.payload.tool_name or e.payload.message
        for e in turn
        if isinstance(e.payload, ToolProgress) and e.payload.tool_call_id not in seen
    }
    ended = {e.payload.tool_call_id for e in turn if isinstance(e.payload, ToolProgress) and e.payload.status}
    names = [name for call_id, name in earlier.items() if call_id not in ended] + [c.tool_name for c in running]
    return _item(names, _model_word(turn[-1]))


async def _pending_hitl(store: Store, session: SessionRecord) -> PendingHitl | None:
    if session.pending_requests == 0 and session.held_requests == 0:
        return None
    requests = await store.list_requests(session_id=session.id, status="pending", limit=1)
    if not requests:
        return None
    request = requests[0]
    return PendingHitl(
        hitl_id=request.id,
        kind=request.kind,
        questions=list(request.questions) if request.questions else None,  # what a question or oauth asks
        options=list(request.options) if request.kind == "choice" and request.options else None,
        multiple=_multiple(request.body) if request.kind == "choice" else None,
        deliver_at=_iso(request.deliver_at) if request.waits_on == "parent" else None,
    )


def _multiple(body: dict[str, Any]) -> bool:
    args = body.get("input")
    return isinstance(args, dict) and args.get("multiple") is True


async def _last_turn_usage(store: Store, session: SessionRecord) -> PartialUsage | None:
    ended = await store.read_events_backward(session.id, limit=1, types=["turn.ended"])
    if not ended or not isinstance(ended[0].payload, TurnEnded):
        return None
    spent, duration = await _whole_turn(store, ended[0], ended[0].payload)
    return PartialUsage(tokens=spent.total_tokens, cost_usd=spent.cost_usd, duration_ms=duration)


_PART_TYPES = [
    "turn.started",
    "message.user",
    "completion.started",
    "completion.finished",
    "thinking.completed",
    "message.assistant",
    "tool.call",
    "tool.result",
    "request.opened",
    "subtask.started",
    "subtask.ended",
]
"""What a part of a turn writes while it runs: the newest of them bounds a part a restart cut off. What the
engine writes when it picks the turn up again (the requests it dismisses, a notice, the end of a turn it does not
continue) is not the part's time."""
_PARTS_SCAN = 1000
"""Parts of one turn read back (a turn is continued a few times at most, and paused once per request)."""


async def _whole_turn(store: Store, end: Event, ended: TurnEnded) -> tuple[Usage, int | None]:
    """What the turn `end` closes spent and how long it ran, across its parts: a turn a restart cut off goes on
    in a new part (`turn.started` with `trigger: continue`), one paused on a request in a new part once it is
    answered (`trigger: answer`), all under its turn id, while each `turn.ended` counts only its own part (and
    the end of a turn a restart did not continue counts none). Each part counts from its start to its end, or,
    when a restart cut it off, to the last thing it wrote: the time the engine was down or a person took to
    answer is no part's. The duration is None for a turn without a recorded start."""
    if end.turn_id is None:  # (a stop that found no turn)
        started = await store.read_events_backward(end.session_id, before_seq=end.seq, limit=1, types=["turn.started"])
        return ended.usage, _ms(started[0].at, end.at) if started else None
    starts = await store.read_events_backward(
        end.session_id, before_seq=end.seq, limit=_PARTS_SCAN, types=["turn.started"], turn_id=end.turn_id
    )
    if not starts:
        return ended.usage, None
    spent = ended.usage
    if len(starts) > 1 or _cut_off(ended):  # the model requests of every part (a turn makes a few dozen)
        spent = await turn_spent(store, end.session_id, end.turn_id, before_seq=end.seq)
    total, bound = 0, end
    for start in starts:  # newest first: each part ran until the next one started (or the turn ended)
        if bound is end and not _cut_off(ended):
            total += _ms(start.at, end.at)
        else:
            total += await _part_ms(store, start, bound)
        bound = start
    return spent, total


async def turn_spent(store: Store, session_id: str, turn_id: str, *, before_seq: int | None = None) -> Usage:
    """What a turn's model requests used (before event `before_seq`), across its parts: each part's `turn.ended`
    counts its own, and a part a restart cut off has none."""
    finished = await store.read_events(session_id, limit=10_000, types=["completion.finished"], turn_id=turn_id)
    bound = before_seq if before_seq is not None else float("inf")
    return sum(
        (e.payload.usage for e in finished if e.seq < bound and isinstance(e.payload, CompletionFinished)), Usage()
    )


def _cut_off(ended: TurnEnded) -> bool:
    """Whether the end was written by a restart that did not continue the turn (its last part was cut off)."""
    return ended.outcome == "interrupted"


async def _part_ms(store: Store, start: Event, bound: Event) -> int:
    """The time of the part that began at `start` and was over before `bound`: to its `turn.ended` when it
    paused, else to the last thing it wrote before a restart cut it off."""
    kinds = ["turn.ended", *_PART_TYPES]
    newest = await store.read_events_backward(
        start.session_id, before_seq=bound.seq, limit=1, types=kinds, turn_id=start.turn_id
    )
    last = newest[0] if newest and newest[0].seq >= start.seq else start
    return _ms(start.at, last.at)


def _ms(start: datetime, end: datetime) -> int:
    return max(0, int((end - start).total_seconds() * 1000))


async def snapshot_answer(
    store: Store,
    session: SessionRecord,
    *,
    stuck_after: float,
    timed_out: bool = False,
    ring: LiveRing | None = None,
    roster: RosterView | None = None,
) -> StatusSnapshot:
    """What `agent_await` / `agent_task` return: the `current` snapshot with the agent's id, status and word,
    plus `timedOut` and `deleted`; and, when the wait timed out, why the engine of `roster` (one that runs
    agents) cannot run the agent's role, if it cannot."""
    now = await current(store, session, ring)
    return StatusSnapshot(
        agent_id=session.id,
        name=session.name,
        status=session.status,
        word=status_word(session, now=datetime.now(UTC), stuck_after=stuck_after),
        error=session.error,
        **dict(now),
        timed_out=timed_out,
        deleted=session.deleted_at is not None,
        role_problem=role_problem(roster, session.role) if timed_out and roster is not None else None,
    )


async def status_snapshot(
    store: Store,
    session: SessionRecord,
    *,
    stuck_after: float,
    timed_out: bool = False,
    ring: LiveRing | None = None,
    roster: RosterView | None = None,
) -> dict[str, Any]:
    """`snapshot_answer` as the JSON object the tools return (for Python callers and the CLI)."""
    snapshot = await snapshot_answer(
        store, session, stuck_after=stuck_after, timed_out=timed_out, ring=ring, roster=roster
    )
    return dump(snapshot)
