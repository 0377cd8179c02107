"""Attach through one service to a session whose turn runs in another engine, over a shared Redis ring.

Two engines on one store and one Redis live ring (in one process here; `test_many_processes.py` does the
same with real processes): engine A runs the turn, the app of engine B serves the watchers. Every event,
streamed deltas included, reaches them through the ring, once.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.service import create_app
from tests.service.clients import attach, ws_url
from tests.service.support import role, served

pytestmark = pytest.mark.redis


async def lookup(key: str) -> str:
    """Look a key up, slowly."""
    await asyncio.sleep(0.2)
    return f"value of {key}"


def script() -> ScriptedModel:
    text = " ".join(f"word{i}" for i in range(40))
    return ScriptedModel(
        [CallTool("lookup", {"key": "a"}), [Reply(f"Found: {text}."), CallTool("lookup", {"key": "b"})], Reply(text)],
        chunk_delay=0.001,
    )


async def collect(kind: str, base: str, agent_id: str, frames: list[dict[str, Any]]) -> None:
    if kind == "ws":
        async with connect(ws_url(base, agent_id), max_size=2**24) as connection:
            async for message in connection:
                frames.append(json.loads(message))
        return
    async with attach("sse", base, agent_id) as stream:
        while True:
            frames.append(await stream.next())


def engine_args(tmp_path: Path, redis_url: str, model: str) -> dict[str, Any]:
    """Engine options for one store and one Redis ring, with the `finder` role on `model`."""
    return {
        "store": f"sqlite:///{tmp_path / 'aw.db'}",
        "live": redis_url,
        "root": tmp_path,
        "agents_dir": tmp_path / "agents",
        "definitions": [role("finder", model, tools=("lookup",))],
        "tools": [lookup],
        "extensions": [],
    }


async def test_a_watcher_on_another_engine_sees_every_event_once(tmp_path: Path, redis_url: str, scripted: Any) -> None:
    args = engine_args(tmp_path, redis_url, scripted("shared-finder", script()))
    async with Engine.open(**args) as runner, Engine.open(**args) as server:
        app = create_app(server)
        async with served(app) as base:
            session = await runner.create("finder")
            watched: dict[str, list[dict[str, Any]]] = {"ws": [], "sse": [], "late": []}
            tasks = [asyncio.create_task(collect(kind, base, session.id, watched[kind])) for kind in ("ws", "sse")]
            await asyncio.sleep(0.5)  # both attached (their snapshots are empty)
            await runner.enqueue(session.id, "find a and b")
            await asyncio.sleep(0.3)  # the turn runs: a watcher attached now gets a snapshot, then the rest
            tasks.append(asyncio.create_task(collect("ws", base, session.id, watched["late"])))
            settled, timed_out = await runner.wait(session.id, 20)
            assert not timed_out
            log = await runner.store.read_events(session.id, limit=1000)
            async with httpx.AsyncClient(base_url=base) as http:  # the engine serving knows no turn of it
                assert server.running_turns() == []
                row = (await http.post("/api/tools/agent_get", json={"id": session.id})).json()
            assert row["status"] == settled.status

            def seen(frames: list[dict[str, Any]]) -> list[str]:
                history = [e for f in frames if f["kind"] == "snapshot" for e in f["history"]]
                return [e["id"] for e in history + [f["event"] for f in frames if f["kind"] == "event"]]

            for _ in range(100):
                if all(set(seen(frames)) >= {e.id for e in log} for frames in watched.values()):
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)  # a doubled event would arrive now
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    durable = [e.id for e in log]
    for kind, frames in watched.items():
        assert [f["kind"] for f in frames if f["kind"] != "event"] == ["snapshot"], kind
        ids = seen(frames)
        assert len(ids) == len(set(ids)), f"{kind}: an event twice"
        events = [f["event"] for f in frames if f["kind"] == "event"]
        assert [e for e in ids if e in set(durable)] == durable, f"{kind}: not the store's log"
        cursors = [(e["seq"], e["sub"]) for e in events]
        assert cursors == sorted(cursors), f"{kind}: out of order"
    deltas = [f for f in watched["ws"] if f["kind"] == "event" and f["event"]["sub"] > 0]
    assert deltas, "the streamed text did not reach the watcher through the ring"


async def test_after_the_ring_lost_its_streams_a_watcher_on_another_engine_gets_the_stored_log(
    tmp_path: Path, redis_url: str, scripted: Any
) -> None:
    """Once: after a Redis restart (its streams gone), an attach through a service that did not run the turn got an
    empty snapshot at seq 0 and then nothing, for ever: it caught up only as far as the ring's newest event."""
    import redis.asyncio as redis

    args = engine_args(tmp_path, redis_url, scripted("shared-lost", script()))
    async with Engine.open(**args) as runner, Engine.open(**args) as server, served(create_app(server)) as base:
        session = await runner.create("finder")
        early: list[dict[str, Any]] = []  # a watcher before the turn: the serving engine makes its driver
        watching = asyncio.create_task(collect("sse", base, session.id, early))
        await asyncio.sleep(0.5)
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
        assert [f["kind"] for f in early] == ["snapshot"]
        await runner.enqueue(session.id, "find a and b")
        _, timed_out = await runner.wait(session.id, 20)
        assert not timed_out
        client = redis.from_url(redis_url)
        try:
            await client.flushdb()  # as a restart of a Redis that keeps nothing on disk
        finally:
            await client.aclose()
        durable = [e.id for e in await runner.store.read_events(session.id, limit=1000)]
        for kind in ("sse", "ws"):
            frames: list[dict[str, Any]] = []
            task = asyncio.create_task(collect(kind, base, session.id, frames))
            for _ in range(100):
                history = [e["id"] for f in frames if f["kind"] == "snapshot" for e in f["history"]]
                ids = history + [f["event"]["id"] for f in frames if f["kind"] == "event"]
                if len(ids) >= len(durable):
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.2)  # a doubled event would arrive now
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            history = [e["id"] for f in frames if f["kind"] == "snapshot" for e in f["history"]]
            assert history + [f["event"]["id"] for f in frames if f["kind"] == "event"] == durable, kind
