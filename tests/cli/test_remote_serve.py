"""The CLI beside a real `agentwatch serve` process: found through the discovery file it writes (and removes
when it stops), `tail -f` attached to its live stream with no store at hand, Ctrl-C exiting 130, and `run`
handing a session over to it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentwatch.cli._common import resolve_config
from agentwatch.cli.remote import discovery_file

ROOT = Path(__file__).resolve().parents[2]
PAUSE = 2.0
"""Seconds the worker's turn waits in its tool: a follower sees the call well before the turn ends."""


def cli(*argv: str) -> list[str]:
    return [sys.executable, "-m", "agentwatch.cli", *argv]


def running(cwd: Path, *argv: str) -> subprocess.Popen[str]:
    """The CLI started in `cwd` with `argv`, its output piped."""
    return subprocess.Popen(
        cli(*argv), cwd=cwd, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTWATCH_SERVER", "AGENTWATCH_TOKEN")}
    path = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env | {"PYTHONPATH": path, "AGENTWATCH_DEBUG": ""}


def start(store: str, root: Path) -> tuple[subprocess.Popen[str], str]:
    """Start a real service on `store`; returns it and its URL once it has announced itself. What it says on
    stderr goes to a file in `root`, not a pipe that nobody reads once it serves (a chatty service would fill
    it and block)."""
    found = discovery_file(resolve_config(store))
    log = root / f"serve-{time.monotonic_ns()}.log"
    with log.open("w") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.cli.remote_main", store, str(root), str(PAUSE)],
            cwd=ROOT,
            env=environment(),
            stderr=sink,
            text=True,
        )
    deadline = time.monotonic() + 60
    while (record := json.loads(found.read_text()) if found.exists() else {}).get("pid") != process.pid:
        if process.poll() is not None or time.monotonic() > deadline:
            stopped(process)
            raise AssertionError(f"serve did not announce itself: {log.read_text(errors='replace')}")
        time.sleep(0.05)
    assert record["token"] is False
    return process, str(record["url"])


def stop(process: subprocess.Popen[str], found: Path | None) -> None:
    """SIGTERM: the service drains (no hold), stops, and removes its discovery file (`found`; None: another
    service still runs, which the file then names)."""
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    assert found is None or not found.exists()
    stopped(process)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    """A real service on a SQLite store in `tmp_path`; yields (store URL, service URL, discovery file)."""
    store = f"sqlite:///{tmp_path / 'agentwatch.db'}"
    process, url = start(store, tmp_path)
    try:
        yield store, url, discovery_file(resolve_config(store))
        stop(process, discovery_file(resolve_config(store)))
    finally:
        stopped(process)


def stopped(process: subprocess.Popen[str]) -> None:
    """Kill the process if it still runs, and close its pipes."""
    if process.poll() is None:
        process.kill()
    process.wait()
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def call(url: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{url}/api/tools/{tool}", json.dumps(args).encode(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        answer = json.loads(response.read())
    assert isinstance(answer, dict)
    return answer


class Lines:
    """A subprocess's standard output, read line by line in a thread, each line with the time it came."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[tuple[float, str]] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append((time.monotonic(), line))

    def join(self) -> None:
        self._thread.join(10)

    def rows(self) -> list[tuple[float, dict[str, Any]]]:
        return [(at, json.loads(line)) for at, line in self.lines if line.startswith("{")]

    def wait_for(self, check: Any, seconds: float = 30.0) -> None:
        deadline = time.monotonic() + seconds
        while not check(self.rows()):
            assert self.process.poll() is None, f"exited {self.process.returncode}: {self.lines}"
            assert time.monotonic() < deadline, f"timed out: {self.lines}"
            time.sleep(0.05)


def test_tail_follow_attaches_to_the_service_live_and_ctrl_c_exits_130(
    service: tuple[str, str, Path], tmp_path: Path
) -> None:
    store, url, _ = service
    created = call(url, "agent_create", {"role": "worker", "name": "worker"})
    # No store at hand: every row it prints came through the service's attach stream.
    nowhere = f"sqlite:///{tmp_path / 'missing' / 'nothing.db'}"
    follower = subprocess.Popen(
        cli("tail", "worker", "-f", "--json", "--server", url, "--store", nowhere),
        cwd=tmp_path,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = Lines(follower)
    try:
        sent = subprocess.run(cli("send", "worker", "go", "--store", store), cwd=tmp_path, env=environment(),
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert sent.returncode == 0, sent.stderr
        assert sent.stdout.startswith(f"queued for worker ({created['agentId']}), 1 waiting: "), sent.stdout

        def turn_ended(rows: list[tuple[float, dict[str, Any]]]) -> bool:
            return any(row["type"].startswith("turn.") and row["status"] == "completed" for _, row in rows)

        lines.wait_for(turn_ended)
        rows = lines.rows()
        called = next(at for at, row in rows if row["type"] == "item.started" and "pause" in str(row["title"]))
        ended = next(at for at, row in rows if row["type"].startswith("turn.") and row["status"] == "completed")
        assert ended - called > PAUSE / 2  # the call was printed while the tool still ran: live, not after
        follower.send_signal(signal.SIGINT)
        assert follower.wait(30) == 130
        lines.join()
        # JSON Lines to the end: the interruption is said on stderr, not as an error object on stdout.
        assert all(json.loads(line) for _, line in lines.lines), lines.lines[-3:]
    finally:
        stopped(follower)


def test_when_one_of_two_services_stops_the_cli_finds_the_other(tmp_path: Path) -> None:
    """Once: the second service's discovery file replaced the first's and went with it, so commands ran on the
    store with the first service still running."""
    store = f"sqlite:///{tmp_path / 'agentwatch.db'}"
    found = discovery_file(resolve_config(store))
    first, first_url = start(store, tmp_path)
    try:
        second, second_url = start(store, tmp_path)
        try:
            assert json.loads(found.read_text())["url"] == second_url  # the newest announces itself
            stop(second, None)
        finally:
            stopped(second)
        assert json.loads(found.read_text())["url"] == first_url  # the one still running, not no file
        created = call(first_url, "agent_create", {"role": "worker", "name": "kept"})
        listed = subprocess.run(cli("ls", "--store", store, "--json"), cwd=tmp_path, env=environment(),
                                capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert [row["id"] for row in json.loads(listed.stdout)["agents"]] == [created["agentId"]], listed.stderr
        stop(first, found)
    finally:
        stopped(first)
    assert not list(tmp_path.glob(f".{found.name}.*"))  # every service withdrew its own record


def test_run_hands_the_session_to_the_service(service: tuple[str, str, Path], tmp_path: Path) -> None:
    store, url, _ = service
    done = subprocess.run(cli("run", "worker", "the report", "--name", "reporter", "--store", store), cwd=tmp_path,
                          env=environment(), capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "handed reporter" in done.stderr and f"service at {url}" in done.stderr
    assert "worked on the report" in done.stdout  # the turn, printed from the attach stream
    record = call(url, "agent_get", {"name": "reporter"})
    assert record["status"] == "completed" and record["current"]["lastAssistantText"] == "worked on the report"


def test_run_exits_1_when_the_handed_over_turn_is_stopped_from_elsewhere(
    service: tuple[str, str, Path], tmp_path: Path
) -> None:
    store, url, _ = service
    runner = subprocess.Popen(cli("run", "worker", "the report", "--name", "halted", "--store", store), cwd=tmp_path,
                              env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while (agent_id := _running(url, "halted")) is None:  # the turn waits PAUSE seconds in its tool
            assert runner.poll() is None and time.monotonic() < deadline, runner.stderr
            time.sleep(0.05)
        assert call(url, "agent_stop", {"id": agent_id})["stopped"] is True
        out, err = runner.communicate(timeout=60)
        assert runner.returncode == 1, err
        assert "cancelled" in out
    finally:
        stopped(runner)


def _running(url: str, name: str) -> str | None:
    """The id of the agent named `name` once its turn runs."""
    try:
        record = call(url, "agent_get", {"name": name})
    except urllib.error.HTTPError:
        return None  # not created yet
    return str(record["id"]) if record["status"] == "running" else None


def test_tail_follow_on_the_store_exits_130_on_ctrl_c(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'agentwatch.db'}"
    seeded = subprocess.run(
        [sys.executable, "-c", SEED, store], cwd=ROOT, env=environment(), capture_output=True, text=True, check=False
    )
    assert seeded.returncode == 0, seeded.stderr
    follower = subprocess.Popen(
        cli("tail", "quiet", "-f", "--store", store),
        cwd=tmp_path,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(2.0)  # well into following the store
        assert follower.poll() is None
        follower.send_signal(signal.SIGINT)
        assert follower.wait(30) == 130
        assert "Traceback" not in (follower.stderr.read() if follower.stderr else "")
        assert follower.stdout is not None and follower.stdout.read() == ""
    finally:
        stopped(follower)


SEED = """
import asyncio, sys
from agentwatch.store import SessionDraft, open_store

async def main() -> None:
    async with open_store(sys.argv[1]) as store:
        await store.create_session(SessionDraft(name="quiet", role="coder"))

asyncio.run(main())
"""


def test_await_through_the_service_shows_a_spinner_on_a_terminal_only(
    service: tuple[str, str, Path], tmp_path: Path
) -> None:
    import pty

    store, url, _ = service
    created = call(url, "agent_create", {"role": "worker", "name": "waiter", "prompt": "go"})
    deadline = time.monotonic() + 30
    while call(url, "agent_get", {"id": created["agentId"]})["status"] != "running":  # "go" taken alone
        assert time.monotonic() < deadline, "the first turn never started"
        time.sleep(0.02)
    call(url, "agent_enqueue", {"agentId": created["agentId"], "prompt": "more"})  # two turns: a long wait
    terminal, attached = pty.openpty()
    env = environment() | {"TERM": "xterm", "COLUMNS": "120"}
    process = subprocess.Popen(cli("await", "waiter", "--store", store), cwd=tmp_path, env=env, stdin=attached,
                               stdout=attached, stderr=attached)  # fmt: skip
    os.close(attached)
    shown = b""
    with contextlib.suppress(OSError):  # EIO once the process has gone and closed the terminal
        while chunk := os.read(terminal, 4096):
            shown += chunk
    os.close(terminal)
    assert process.wait(30) == 0
    text = shown.decode(errors="replace")
    assert re.search(r"waiting for waiter \((running|idle)\) · [1-9]s", text) and "worked on more" in text

    call(url, "agent_enqueue", {"agentId": created["agentId"], "prompt": "again"})
    piped = subprocess.run(cli("await", "waiter", "--store", store), cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=60, check=False)  # fmt: skip
    assert piped.returncode == 0 and "worked on again" in piped.stdout
    assert "waiting for" not in piped.stdout + piped.stderr


def test_tail_follow_resumes_across_a_restart_of_the_service(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'agentwatch.db'}"
    found = discovery_file(resolve_config(store))
    first, url = start(store, tmp_path)
    follower: subprocess.Popen[str] | None = None
    second: subprocess.Popen[str] | None = None
    try:
        created = call(url, "agent_create", {"role": "worker", "name": "worker", "prompt": "one"})
        follower = running(tmp_path, "tail", "worker", "-f", "--json", "--store", store)
        lines = Lines(follower)

        def turns(count: int) -> Any:
            def ended(rows: list[tuple[float, dict[str, Any]]]) -> bool:
                done: int = sum(row["type"] == "turn.ended" and row["status"] == "completed" for _, row in rows)
                return done >= count

            return ended

        lines.wait_for(turns(1))
        stop(first, found)
        second, url = start(store, tmp_path)  # another port: the follower finds it through the new file
        call(url, "agent_enqueue", {"agentId": created["agentId"], "prompt": "two"})
        lines.wait_for(turns(2), seconds=60)
        followed = [row["id"] for _, row in lines.rows()]
        stored = [row["id"] for row in call(url, "agent_tail", {"id": created["agentId"], "maxEvents": 200})["events"]]
        assert followed == stored  # every event once, in order: no gap and no repeat across the restart
        follower.send_signal(signal.SIGINT)
        assert follower.wait(30) == 130
        lines.join()
    finally:
        for process in (follower, first, second):
            if process is not None:
                stopped(process)


def test_await_rides_through_a_restart_of_the_service(tmp_path: Path) -> None:
    """Once: `await` (and `run`, which waits the same way) exited 1 as soon as the service went away, though
    the turn went on in the next one."""
    store = f"sqlite:///{tmp_path / 'agentwatch.db'}"
    found = discovery_file(resolve_config(store))
    first, url = start(store, tmp_path)
    waiter: subprocess.Popen[str] | None = None
    second: subprocess.Popen[str] | None = None
    try:
        call(url, "agent_create", {"role": "worker", "name": "worker", "prompt": "one"})
        waiter = running(tmp_path, "await", "worker", "--json", "--timeout", "60", "--store", store)
        time.sleep(0.5)  # (the turn waits in its tool for PAUSE seconds)
        stop(first, found)  # its turn is cut off and goes on in the next service
        second, url = start(store, tmp_path)
        out, err = waiter.communicate(timeout=60)
        assert waiter.returncode == 0, err
        assert json.loads(out)["status"] == "completed"
    finally:
        for process in (waiter, first, second):
            if process is not None:
                stopped(process)


def test_tail_follow_ends_when_the_agent_is_deleted(service: tuple[str, str, Path], tmp_path: Path) -> None:
    """Once: through the service it exited 1 saying the service refused to attach (HTTP 204: the stream of a
    deleted agent is over), and on the store it followed a deleted agent for good."""
    store, url, _ = service
    for server in (url, "none"):
        created = call(url, "agent_create", {"role": "worker", "name": f"doomed-{server[:4]}"})
        follower = running(tmp_path, "tail", created["agentId"], "-f", "--server", server, "--store", store)
        try:
            time.sleep(1.0)  # (following)
            assert follower.poll() is None
            call(url, "agent_delete", {"id": created["agentId"]})
            _, err = follower.communicate(timeout=30)
            assert follower.returncode == 0, err
            assert f"{created['agentId']} was deleted" in err
        finally:
            stopped(follower)
        # Following an agent deleted before: over at once.
        again = subprocess.run(cli("tail", created["agentId"], "-f", "--server", server, "--store", store),
                               cwd=tmp_path, env=environment(), capture_output=True, text=True, timeout=60,
                               check=False)  # fmt: skip
        assert again.returncode == 0 and f"{created['agentId']} was deleted" in again.stderr, again.stderr
