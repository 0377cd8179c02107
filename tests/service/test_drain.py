"""SIGTERM drains `agentwatch serve`: no new turn starts, running turns go on up to the hold, then are cut off
and continue on the next start; a second SIGTERM does not wait. Real processes, real signals."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import register_scripted_model, unregister_scripted_model
from tests.service.serve_main import pause_tool, slow_model, slow_role

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@asynccontextmanager
async def service(
    tmp_path: Path, hold_minutes: float, pause_seconds: float, *settings: str
) -> AsyncIterator[tuple[Any, str]]:
    """A real service; what it says on stderr goes to a file (`said`), not a pipe that nobody reads once it
    serves, which a chatty service (a failing turn's tracebacks) would fill until it blocks. `settings`: what
    `serve_main` takes after the pause."""
    with log_of(tmp_path).open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.service.serve_main",
            f"sqlite:///{tmp_path / 'serve.db'}",
            str(tmp_path),
            str(hold_minutes),
            str(pause_seconds),
            *settings,
            cwd=ROOT,
            stderr=log,
        )
    try:
        async with asyncio.timeout(60):
            while not (found := re.search(r"serving on (http://\S+)", said(tmp_path))):
                assert process.returncode is None, f"the service exited before it was serving: {said(tmp_path)}"
                await asyncio.sleep(0.05)
        yield process, found.group(1)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def log_of(tmp_path: Path) -> Path:
    return tmp_path / "serve.log"


def said(tmp_path: Path) -> str:
    """What the service wrote on stderr so far."""
    return log_of(tmp_path).read_text(errors="replace")


async def start_slow_turn(http: httpx.AsyncClient) -> str:
    created = (await http.post("/api/tools/agent_create", json={"role": "slow"})).json()
    agent_id = created["agentId"] if "agentId" in created else created["id"]
    queued = await http.post("/api/tools/agent_enqueue", json={"agentId": agent_id, "prompt": "go"})
    assert queued.status_code == 200, queued.text
    for _ in range(200):
        row = (await http.post("/api/tools/agent_get", json={"id": agent_id})).json()
        if row.get("status") == "running":
            return str(agent_id)
        await asyncio.sleep(0.05)
    raise AssertionError(f"the turn did not start: {row}")


async def draining_during_a_turn(process: Any, http: httpx.AsyncClient) -> str:
    """Start a slow turn, then SIGTERM the service (it drains); the turn's agent id."""
    agent_id = await start_slow_turn(http)
    process.send_signal(signal.SIGTERM)
    await asyncio.sleep(0.3)
    return agent_id


async def stopped(process: Any, within: float) -> float:
    started = time.monotonic()
    async with asyncio.timeout(within):
        await process.wait()
    return time.monotonic() - started


async def test_sigterm_lets_the_running_turn_finish_and_refuses_new_work(tmp_path: Path) -> None:
    async with service(tmp_path, hold_minutes=1, pause_seconds=3) as (process, base):
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            agent_id = await draining_during_a_turn(process, http)
            health = await http.get("/api/health")
            alive = await http.get("/api/health/live")
            refused = await http.post("/api/tools/agent_task", json={"role": "slow", "prompt": "more"})
            row = (await http.post("/api/tools/agent_get", json={"id": agent_id})).json()
            listed = (await http.post("/api/tools/agent_list", json={"word": ["working"]})).json()
            # Once refused with the tools that start work: a wait starts nothing (a `run` following it died).
            waited = await http.post("/api/tools/agent_await", json={"agentId": agent_id, "timeoutMs": 50})
        assert health.status_code == 503  # a load balancer sends no new work here
        assert health.json() == {"status": "draining", "store": "ok", "live": "ok"}
        assert alive.status_code == 200 and alive.json() == {"status": "draining"}  # a liveness probe stays green
        assert waited.status_code == 200 and waited.json()["timedOut"] is True
        assert [agent["id"] for agent in listed["agents"]] == [agent_id]
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "unavailable"
        assert row["status"] == "running" and row["word"] == "working"
        await stopped(process, within=30)
        assert process.returncode == 0
        assert "drained: every running turn ended; stopping" in said(tmp_path)  # (once it stopped without a word)
    status = await final_status(tmp_path, agent_id, recover=False)
    assert status == "completed"


async def test_a_draining_service_still_stops_the_turn_it_waits_for(tmp_path: Path) -> None:
    # The hold waits for running turns: a person (the dashboard's Stop) may still end one, and the drain with it.
    async with service(tmp_path, hold_minutes=60, pause_seconds=60) as (process, base):
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            agent_id = await draining_during_a_turn(process, http)
            refused = await http.post("/api/tools/agent_enqueue", json={"agentId": agent_id, "prompt": "more"})
            stop = await http.post("/api/tools/agent_stop", json={"id": agent_id})
        assert refused.status_code == 503  # work that would start a turn goes to another service
        assert stop.status_code == 200 and stop.json()["stopped"] is True, stop.text
        assert await stopped(process, within=20) < 10  # the drain ended with the turn, not after 60 minutes
        assert process.returncode == 0
    assert await final_status(tmp_path, agent_id, recover=False) == "cancelled"


async def test_with_no_hold_the_turn_is_cut_off_and_continues_on_the_next_start(tmp_path: Path) -> None:
    async with service(tmp_path, hold_minutes=0, pause_seconds=2) as (process, base):
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            agent_id = await start_slow_turn(http)
        process.send_signal(signal.SIGTERM)
        assert await stopped(process, within=20) < 10
        output = said(tmp_path)
        assert "cut off" in output and "Traceback" not in output, output
    assert await final_status(tmp_path, agent_id, recover=False) == "running"  # cut off, as after a crash
    assert await final_status(tmp_path, agent_id, recover=True) == "completed"  # continued on the next start


async def test_a_second_sigterm_does_not_wait(tmp_path: Path) -> None:
    async with service(tmp_path, hold_minutes=60, pause_seconds=60) as (process, base):
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            await start_slow_turn(http)
        process.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.5)
        assert process.returncode is None  # holding for the running turn
        process.send_signal(signal.SIGTERM)
        assert await stopped(process, within=20) < 10
        output = said(tmp_path)
        assert "stopping now" in output and "Traceback" not in output, output  # once: uvicorn's CancelledError


async def test_a_second_signal_in_the_same_instant_does_not_wait(tmp_path: Path) -> None:
    # Two signals sent in the same instant are two stops asked for, the second one now. (Two SIGTERMs cannot be
    # tested so: the system keeps one SIGTERM pending at a time and merges the second into the first before the
    # process sees either, whatever its handler; a SIGINT is another signal and is never merged with it.)
    async with service(tmp_path, hold_minutes=60, pause_seconds=60) as (process, base):
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            await start_slow_turn(http)
        os.kill(process.pid, signal.SIGTERM)
        os.kill(process.pid, signal.SIGINT)
        assert await stopped(process, within=20) < 10
        output = said(tmp_path)
        assert "stopping now" in output and "Traceback" not in output, output


async def final_status(tmp_path: Path, agent_id: str, *, recover: bool) -> str:
    register_scripted_model("slow", slow_model())
    try:
        async with Engine.open(
            f"sqlite:///{tmp_path / 'serve.db'}",
            root=tmp_path,
            agents_dir=tmp_path / "agents",
            definitions=[slow_role()],
            tools=[pause_tool(0.01)],
            extensions=[],
            recover=recover,
        ) as engine:
            if recover:
                await engine.wait(agent_id, 30)
            answer = await engine.call_tool("agent_get", {"id": agent_id})
            return str(answer["status"])
    finally:
        unregister_scripted_model("slow")
