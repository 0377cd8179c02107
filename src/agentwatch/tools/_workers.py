"""The threads plain `def` tools run in: daemon threads, so that a process that stops (Ctrl-C, SIGTERM) does not
wait for a tool still running.

`asyncio.to_thread` runs in the loop's default executor, which `asyncio.run` joins on its way out (and
`concurrent.futures` joins every executor's threads at exit): an interrupted `agentwatch run` waited until its
slow tool returned. A tool cut off here is cut off as its turn is: the turn continues after a restart, and the
call is reported interrupted, never run twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["run_in_worker"]

MAX_WORKERS = 64
"""Sync tools mostly wait (on files, processes, the network): more of them than cores run at once."""

_Job = tuple[Callable[[], Any], asyncio.Future[Any], asyncio.AbstractEventLoop]
_jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
_lock = threading.Lock()
_workers = 0
_idle = 0
"""Workers waiting for a job that no job has claimed yet."""
_unclaimed = 0
"""Jobs queued while every worker was busy (at `MAX_WORKERS`): the next worker to finish takes one."""


def run_in_worker(fn: Callable[..., Any], /, **kwargs: Any) -> asyncio.Future[Any]:
    """`fn(**kwargs)` in a worker thread, in a copy of the caller's context; its outcome as a future of the
    running loop (cancelling it does not stop the call)."""
    global _workers, _idle, _unclaimed
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()
    _jobs.put((lambda: context.run(fn, **kwargs), future, loop))
    with _lock:
        if _idle > 0:
            _idle -= 1  # (claimed: the next job to come finds no idle worker unless another frees up)
            return future
        if _workers < MAX_WORKERS:
            _workers += 1
            threading.Thread(target=_work, name=f"agentwatch-tool-{_workers}", daemon=True).start()
        else:
            _unclaimed += 1
    return future


def _work() -> None:
    global _idle, _unclaimed
    while True:
        call, future, loop = _jobs.get()
        try:
            outcome, failed = call(), False
        except BaseException as exc:  # handed to the caller, whatever it is
            outcome, failed = exc, True
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits for it any more
            loop.call_soon_threadsafe(_settle, future, outcome, failed)
        del call, future, loop, outcome
        with _lock:
            if _unclaimed > 0:
                _unclaimed -= 1  # the job that waited for a worker: this one takes it
            else:
                _idle += 1


def _settle(future: asyncio.Future[Any], outcome: Any, failed: bool) -> None:
    if future.done():  # cancelled meanwhile (its turn was stopped)
        return
    if failed:
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
