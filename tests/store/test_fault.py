"""Acknowledged appends survive `kill -9`: a child appends and reports each ack, the parent kills it at
random moments, and after every kill the log holds every acknowledged event, numbered 1, 2, 3, ... with no
gap, and the database opens without repair."""

from __future__ import annotations

import asyncio
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentwatch.store import SessionDraft, connect_store

APPENDER = Path(__file__).with_name("_appender.py")
KILLS = 20

pytestmark = pytest.mark.slow


async def _create_session(url: str) -> str:
    store = await connect_store(url)
    try:
        return (await store.create_session(SessionDraft(name="victim", role="chat"))).id
    finally:
        await store.close()


async def _stored_seqs(url: str, session_id: str) -> tuple[list[int], int]:
    store = await connect_store(url)  # a plain reopen: no repair step exists, none may be needed
    try:
        seqs: list[int] = []
        while batch := await store.read_events(session_id, after_seq=seqs[-1] if seqs else 0, limit=10_000):
            seqs.extend(event.seq for event in batch)
        return seqs, (await store.get_session(session_id)).last_seq
    finally:
        await store.close()


def _run_and_kill(url: str, session_id: str, delay: float, stderr: Path) -> list[int]:
    """Start an appender, kill it `delay` seconds after its first ack, return the seqs it acknowledged."""
    with stderr.open("wb") as errors:
        child = subprocess.Popen(
            [sys.executable, str(APPENDER), url, session_id, "forever"], stdout=subprocess.PIPE, stderr=errors
        )
    assert child.stdout is not None
    first = child.stdout.readline()
    assert first, f"the appender exited before its first ack: {stderr.read_text()}"
    time.sleep(delay)
    child.send_signal(signal.SIGKILL)
    rest = child.stdout.read()
    child.wait()
    child.stdout.close()
    lines = (first + rest).decode().split("\n")[:-1]  # a line cut by the kill has no newline: not an ack
    return [int(line.split()[1]) for line in lines]


def test_acknowledged_appends_survive_sigkill(store_url: str, backend: str, tmp_path: Path) -> None:
    rng = random.Random(20_241)
    session_id = asyncio.run(_create_session(store_url))
    acknowledged: set[int] = set()

    for _ in range(KILLS):
        acked = _run_and_kill(store_url, session_id, rng.uniform(0.0, 0.25), tmp_path / "stderr.txt")
        acknowledged.update(acked)

        if backend == "sqlite":
            path = store_url.removeprefix("sqlite:///")
            with sqlite3.connect(path) as connection:
                assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            connection.close()
        seqs, last_seq = asyncio.run(_stored_seqs(store_url, session_id))
        assert seqs == list(range(1, len(seqs) + 1))
        assert last_seq == len(seqs)
        assert acknowledged <= set(seqs), f"lost acknowledged seqs {sorted(acknowledged - set(seqs))[:10]}"

    assert len(acknowledged) > KILLS  # the kills landed while appends were flowing
