"""A live ring (Redis) that goes down while watchers are attached: the session goes on (the store has its
events), every watcher is told with an error frame before its stream ends, over SSE as over a WebSocket, and
the log says so once rather than once per event. A Redis server of the test's own is killed for real."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentwatch.runtime.engine import Engine
from agentwatch.service import create_app
from tests.conftest import IN_CI
from tests.runtime.support import HeldTool
from tests.service.clients import attach
from tests.service.support import served


@pytest.fixture
def redis_of_our_own(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A Redis server on a free port that keeps nothing on disk: its URL and its process (to kill)."""
    binary = shutil.which("redis-server")
    if binary is None:
        message = "this test starts a Redis server of its own and needs redis-server on the PATH"
        if IN_CI:
            pytest.fail(f"CI=true and {message}", pytrace=False)
        pytest.skip(message)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    process = subprocess.Popen([*command, "--dir", str(tmp_path)], stdout=subprocess.DEVNULL)
    try:
        for _ in range(200):
            with socket.socket() as client:
                if client.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert process.poll() is None, "redis-server did not start"
            subprocess.run(["sleep", "0.025"], check=True)
        yield f"redis://127.0.0.1:{port}/0", process
    finally:
        process.kill()
        process.wait()


async def test_watchers_are_told_when_the_ring_goes_down_and_the_turn_goes_on(
    tmp_path: Path, scripted: Any, redis_of_our_own: tuple[str, subprocess.Popen[bytes]], caplog: Any
) -> None:
    url, redis_server = redis_of_our_own
    held = HeldTool("wait_here", output="waited")
    definition = held.role("waiter", scripted, "outage-waiter")
    store = f"sqlite:///{tmp_path / 'aw.db'}"
    async with (
        Engine.open(
            store,
            live=url,
            root=tmp_path,
            agents_dir=tmp_path / "agents",
            definitions=[definition],
            tools=[held.tool],
            extensions=[],
        ) as engine,
        served(create_app(engine)) as base,
    ):
        session = await engine.create("waiter")
        async with attach("sse", base, session.id) as sse, attach("ws", base, session.id) as ws:
            assert (await sse.next())["kind"] == (await ws.next())["kind"] == "snapshot"
            await engine.enqueue(session.id, "go")
            await asyncio.wait_for(held.started.wait(), 10)
            redis_server.kill()
            redis_server.wait()
            with caplog.at_level(logging.WARNING, logger="agentwatch.runtime.emitter"):
                held.release.set()  # the turn goes on, and every event it makes fails to reach the ring
                settled, timed_out = await engine.wait(session.id, 20)
            assert not timed_out and settled.status == "completed" and settled.last_text == "waited"
            async with httpx.AsyncClient(base_url=base) as http:
                health = await http.get("/api/health")
            assert health.status_code == 503
            assert health.json() == {"status": "unavailable", "store": "ok", "live": "failing"}
            # Reads that need only the store still answer: the tool, and the command line beside the service.
            async with httpx.AsyncClient(base_url=base) as http:
                tail = (await http.post("/api/tools/agent_tail", json={"id": session.id})).json()
            assert tail["events"][-1]["type"] == "turn.ended", tail
            command = [sys.executable, "-m", "agentwatch.cli", "tail", session.id, "--store", store, "--server", "none"]
            env = {**os.environ, "AGENTWATCH_LIVE": url}
            done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, env=env)
            assert done.returncode == 0 and "reading the store alone" in done.stderr, done.stderr
            assert "waited" in done.stdout
            for stream in (sse, ws):
                frames = []
                while True:
                    try:
                        frames.append(await asyncio.wait_for(stream.next(), 10))
                    except (EOFError, Exception) as ended:
                        if isinstance(ended, asyncio.TimeoutError):
                            raise AssertionError(f"the stream neither failed nor ended: {frames}") from None
                        break
                errors = [f for f in frames if f["kind"] == "error"]
                assert len(errors) == 1 and errors[0]["error"]["code"] == "store_unavailable", frames
    published = [r for r in caplog.records if "live ring publish failed" in r.getMessage()]
    assert len(published) == 1  # once, not once per event (a delta each)
