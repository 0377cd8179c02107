"""count_by_state: one grouped query gives what status words derive from, the same on every backend."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from agentwatch.reads.words import count_words, status_word
from agentwatch.store import RequestDraft, SessionDraft, SessionFilter, SessionPatch, Store, Write


async def test_grouped_words_equal_each_sessions_own_word(store: Store) -> None:
    made = []
    for index, status in enumerate(["idle", "running", "running", "awaiting_input", "completed", "failed"]):
        session = await store.create_session(
            SessionDraft(name=f"s{index}", role="slow" if index == 2 else "chat", group_key=f"g{index % 3}")
        )
        await store.update_session(session.id, SessionPatch(status=status))  # type: ignore[arg-type]
        made.append(session.id)
    await store.write(Write(made[3], requests_open=[RequestDraft(kind="question", summary="which?")]))

    # Seen from an hour later: the running "chat" session is stuck, the "slow" role's is not (2h threshold).
    later = datetime.now(UTC) + timedelta(hours=1)
    sessions = [await store.get_session(session_id) for session_id in made]
    expected = Counter(status_word(s, now=later, stuck_after=7200 if s.role == "slow" else 600) for s in sessions)
    statuses, words = await count_words(store, SessionFilter(), now=later, stuck_after=600, by_role={"slow": 7200})
    assert {word: n for word, n in words.items() if n} == dict(expected)
    assert statuses == dict(Counter(s.status for s in sessions))
    assert words["stuck"] == 1 and words["needs_you"] == 1

    # Restricted to lineage heads: one count per group_key (its newest session).
    _, heads = await count_words(
        store, SessionFilter(heads_of="group_key"), now=later, stuck_after=600, by_role={"slow": 7200}
    )
    assert sum(heads.values()) == 3
