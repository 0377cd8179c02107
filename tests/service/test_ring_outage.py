"""A live ring (Redis) that goes down while watchers are attached: the session goes on (the store has its
events), every watcher keeps its stream (this service's own events live, another process's from the store),
a new watcher still attaches, the log says so once rather than once per event or session, and once Redis is
back the ring is relayed again, deltas and all. A Redis server of the test's own is killed for real."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import ScriptedModel
from agentwatch.service import create_app
from tests.conftest import IN_CI
from tests.runtime.support import HeldTool, role, until
from tests.service.clients import Stream, attach
from tests.service.support import served


@dataclass
class RedisServer:
    """A Redis server of the test's own on a free port, keeping nothing on disk; `kill` and `start` it."""

    binary: str
    port: int
    folder: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen([*command, "--dir", str(self.folder)], stdout=subprocess.DEVNULL)
        for _ in range(200):
            with socket.socket() as client:
                if client.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            assert self.process.poll() is None, "redis-server did not start"
            subprocess.run(["sleep", "0.025"], check=True)
        raise AssertionError("redis-server did not listen")

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


@pytest.fixture
def redis_of_our_own(tmp_path: Path) -> Iterator[RedisServer]:
    binary = shutil.which("redis-server")
    if binary is None:
        message = "this test starts a Redis server of its own and needs redis-server on the PATH"
        if IN_CI:
            pytest.fail(f"CI=true and {message}", pytrace=False)
        pytest.skip(message)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = RedisServer(binary, port, tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.kill()


async def frames_until(
    stream: Stream, last: Callable[[dict[str, Any]], bool], timeout: float = 15
) -> list[dict[str, Any]]:
    """The frames of `stream` up to the first for which `last` holds (an error frame or the stream's end
    fails the test)."""
    frames: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout):
        while True:
            frame = await stream.next()
            assert frame["kind"] != "error", [*frames, frame]
            frames.append(frame)
            if last(frame):
                return frames


def ended(frame: dict[str, Any]) -> bool:
    return frame["kind"] == "event" and frame["event"]["type"] == "turn.ended"


def deltas(frames: list[dict[str, Any]]) -> int:
    return sum(f["kind"] == "event" and f["event"]["type"] == "content.delta" for f in frames)


async def test_watchers_keep_their_streams_while_the_ring_is_down_and_its_relay_comes_back_with_it(
    tmp_path: Path, scripted: Any, redis_of_our_own: RedisServer, caplog: Any
) -> None:
    """Once: every watcher got an error frame and its stream ended, and a new attach was refused (503) until
    Redis was back, though the store had every event and this service's own turns went on."""
    redis = redis_of_our_own
    held = HeldTool("wait_here", output="waited")
    definition = held.role("waiter", scripted, "outage-waiter")
    talker = role(
        "talker", scripted("outage-talker", ScriptedModel.replying("hello from the other engine", "and hello again"))
    )
    store = f"sqlite:///{tmp_path / 'aw.db'}"
    common: dict[str, Any] = {"live": redis.url, "root": tmp_path, "agents_dir": tmp_path / "agents", "extensions": []}
    app_of_a = None
    async with (
        Engine.open(store, definitions=[definition], tools=[held.tool], **common) as engine,
        Engine.open(store, definitions=[talker], **common) as other_engine,  # another process, as far as a is concerned
    ):
        app_of_a = create_app(engine)
        async with served(app_of_a) as base:
            session = await engine.create("waiter")
            elsewhere = await other_engine.create("talker")
            async with (
                attach("sse", base, session.id) as sse,
                attach("ws", base, session.id) as ws,
                attach("ws", base, elsewhere.id) as other,
            ):
                assert [(await s.next())["kind"] for s in (sse, ws, other)] == ["snapshot"] * 3
                await engine.enqueue(session.id, "go")
                await asyncio.wait_for(held.started.wait(), 10)
                redis.kill()
                with caplog.at_level(logging.WARNING):
                    held.release.set()  # the turn goes on, and every event it makes fails to reach the ring
                    settled, timed_out = await engine.wait(session.id, 20)
                    assert not timed_out and settled.status == "completed" and settled.last_text == "waited"
                    for stream in (sse, ws):  # each watcher sees the turn to its end, no error
                        assert any(ended(f) for f in await frames_until(stream, ended))
                    async with httpx.AsyncClient(base_url=base) as http:
                        health = await http.get("/api/health")
                    assert health.status_code == 503
                    assert health.json() == {"status": "unavailable", "store": "ok", "live": "failing"}
                    # Reads that need only the store still answer: the tool, and the command line beside it.
                    async with httpx.AsyncClient(base_url=base) as http:
                        tail = (await http.post("/api/tools/agent_tail", json={"id": session.id})).json()
                    assert tail["events"][-1]["type"] == "turn.ended", tail
                    command = [sys.executable, "-m", "agentwatch.cli", "tail", session.id, "--store", store]
                    env = {**os.environ, "AGENTWATCH_LIVE": redis.url}
                    done = await asyncio.to_thread(
                        subprocess.run, [*command, "--server", "none"], capture_output=True, text=True, env=env
                    )
                    assert done.returncode == 0 and "reading the store alone" in done.stderr, done.stderr
                    assert "waited" in done.stdout
                    # A new watcher attaches all the same.
                    async with attach("ws", base, session.id) as late:
                        snapshot = await asyncio.wait_for(late.next(), 10)
                    assert snapshot["kind"] == "snapshot" and snapshot["history"][-1]["type"] == "turn.ended"
                    # Another engine's turn reaches this service's watcher from the store, without deltas.
                    await other_engine.enqueue(elsewhere.id, "hi")
                    first = await frames_until(other, ended)
                    assert deltas(first) == 0 and any(f["event"]["type"] == "message.assistant" for f in first[:-1])
                down = [r for r in caplog.records if "cannot be relayed" in r.getMessage()]
                assert len(down) == 1  # once, not once per session or client
                published = [r for r in caplog.records if "live ring publish failed" in r.getMessage()]
                assert len(published) == 2  # once per engine, not once per event (a delta each)

                redis.start()  # back (empty): the relay starts again at a watcher's next look
                state = app_of_a.state.service
                await until(lambda: state.broadcaster.relaying(elsewhere.id), timeout=10)
                await other_engine.enqueue(elsewhere.id, "again")
                second = await frames_until(other, ended)
                assert deltas(second) > 0, second  # live again: deltas only ever come through the ring
                assert any("relayed again" in r.getMessage() for r in caplog.records)
