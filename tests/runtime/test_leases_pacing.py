"""Lease upkeep under load: one store call that answers many confirmations wakes their turns a few per
event-loop turn, and a slow sweep does not hold the renewals back."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentwatch.runtime import leases as leases_module
from agentwatch.runtime.leases import ANSWERS_PER_LOOP_TURN, Leases
from agentwatch.store import SessionDraft, open_store


async def test_confirmations_answered_at_once_wake_a_few_per_loop_turn(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path / 'aw.db'}") as store:
        leases = Leases(store, ttl=0.3)
        ids = []
        for index in range(40):
            session = await store.create_session(SessionDraft(name=f"s-{index}", role="any"))
            assert await leases.acquire(session.id)
            ids.append(session.id)
        await asyncio.sleep(0.35)  # past the local deadline: each confirmation asks the store
        assert not any(leases.holds(session_id) for session_id in ids)

        turn = 0

        def tick() -> None:
            nonlocal turn
            turn += 1
            if not done:
                asyncio.get_running_loop().call_soon(tick)

        woke: Counter[int] = Counter()

        async def confirm(session_id: str) -> None:
            assert await leases.confirm(session_id)
            woke[turn] += 1

        done = False
        tick()
        await asyncio.gather(*(confirm(session_id) for session_id in ids))
        done = True
        assert sum(woke.values()) == len(ids)
        assert max(woke.values()) <= ANSWERS_PER_LOOP_TURN, woke
        assert all(leases.holds(session_id) for session_id in ids)
        await leases.close()


class NoRuntime:
    async def driver(self, session_id: str) -> Any:
        raise AssertionError(f"nothing is taken over here ({session_id})")


async def test_a_slow_sweep_does_not_hold_the_renewals_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leases_module, "SWEEP_SECONDS", 0.02)
    async with open_store(f"sqlite:///{tmp_path / 'aw.db'}") as store:
        leases = Leases(store, ttl=0.6, renew_every=0.1)
        session = await store.create_session(SessionDraft(name="s-renewed", role="any"))
        assert await leases.acquire(session.id)
        sweeps = 0

        async def slow_sweep(runtime: Any) -> int:
            nonlocal sweeps
            sweeps += 1
            await asyncio.sleep(10)  # a store read stuck behind the turns' writes
            return 0

        renewals: list[float] = []
        renew = leases.renew

        async def counted_renew() -> list[str]:
            renewals.append(time.monotonic())
            return await renew()

        monkeypatch.setattr(leases, "sweep", slow_sweep)
        monkeypatch.setattr(leases, "renew", counted_renew)
        leases.start(NoRuntime(), sweep=True)  # type: ignore[arg-type]
        await asyncio.sleep(1.0)
        assert sweeps == 1  # one sweep at a time
        assert len(renewals) >= 5  # about every 0.1 s, the sweep notwithstanding
        assert leases.holds(session.id)
        await leases.close()
