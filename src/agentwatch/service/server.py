"""`agentwatch serve`: one long-lived process that runs the engine and serves it.

The engine keeps running everything that must keep running (turns, observers, held requests reaching a
person at their time, retention); uvicorn serves the app of `create_app`.

While it serves, a discovery file (beside a SQLite store's file, else `.agentwatch/service.json`) tells the CLI
on this machine where it is; it is removed when the service stops.

Stopping (SIGTERM, or Ctrl-C) drains, as a deploy expects: no new turn starts and tools that start work are
refused (503 `unavailable`), reads and attach streams keep answering, and running turns go on for up to
`deploy_hold_minutes` counted from the signal (0 = do not wait). Then the service stops; a turn still
running is cut off and continues in another engine on the store (within about a second), or on the next
start, as after a crash. A second signal stops at once. Each signal delivered is counted, but the system keeps
one SIGTERM pending at a time: a second SIGTERM sent before the first was delivered is merged into it and never
reaches the process, which then drains; a SIGINT right after the SIGTERM is another signal, and stops at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import socket
import sys
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from agentwatch.cli.remote import remove_discovery, write_discovery
from agentwatch.config import Config
from agentwatch.errors import InvalidArgument
from agentwatch.runtime.engine import Engine
from agentwatch.service.access import ServiceSettings, is_loopback
from agentwatch.service.app import ServiceState, create_app
from agentwatch.store import hide_password
from agentwatch.tracing import Tracing

__all__ = ["Drain", "deploy_hold_minutes", "serve", "settings_from_env"]

log = logging.getLogger(__name__)


def deploy_hold_minutes(config: Config, override: float | None = None) -> float:
    """The hold: the option, else `[server] deploy_hold_minutes` (which `AGENTWATCH_DEPLOY_HOLD_MINUTES`
    overrides), default 60."""
    value: Any = override if override is not None else config.server.deploy_hold_minutes
    try:
        minutes = float(value)
    except ValueError:
        raise InvalidArgument(f"deploy_hold_minutes must be a number of minutes, not {value!r}") from None
    if minutes < 0:
        raise InvalidArgument(f"deploy_hold_minutes cannot be negative ({minutes})")
    return minutes


def settings_from_env(host: str, *, announce: Callable[[str], None]) -> ServiceSettings:
    """Tokens from `AGENTWATCH_TOKEN` / `AGENTWATCH_READ_TOKEN`; a non-loopback bind without one gets a
    generated token, announced once."""
    token = os.environ.get("AGENTWATCH_TOKEN") or None
    read_token = os.environ.get("AGENTWATCH_READ_TOKEN") or None
    origins = tuple(o for o in os.environ.get("AGENTWATCH_ALLOWED_ORIGINS", "").split(",") if o)
    if token is None and not is_loopback(host):
        token = secrets.token_urlsafe(24)
        announce(f"token (binding {host}, every request must carry it): {token}")
    return ServiceSettings(token=token, read_token=read_token, allowed_origins=origins)


class _HeadDeadline(HttpToolsProtocol):
    """uvicorn's HTTP connection, which must send each request's head within `seconds` (from when it opens, and
    from the end of each answer) or be closed. uvicorn's own keep-alive timeout starts only after a first answer
    and stops at the first byte of the next request: a connection that never sent a request, or sent its head a
    few bytes at a time, stayed open for good, each holding a file descriptor, and no token is asked before a
    request's head is read."""

    seconds = 10.0

    @classmethod
    def of(cls, seconds: float) -> type[_HeadDeadline]:
        return type(cls.__name__, (cls,), {"seconds": seconds})

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline: asyncio.TimerHandle | None = self.loop.call_later(self.seconds, self._late)

    def on_headers_complete(self) -> None:
        self._cancel_deadline()  # (first: a WebSocket upgrade hands the transport to another protocol here)
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._cancel_deadline()
            self._deadline = self.loop.call_later(self.seconds, self._late)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_deadline()
        super().connection_lost(exc)

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _late(self) -> None:
        self._deadline = None
        between_requests = self.cycle is None or self.cycle.response_complete
        if between_requests and not self.pipeline and not self.transport.is_closing():
            self.transport.close()


class Drain:
    """The stop sequence: the first signal drains for up to the hold, a second one stops now."""

    def __init__(
        self,
        engine: Engine,
        state: ServiceState,
        server: uvicorn.Server,
        hold_seconds: float,
        announce: Callable[[str], None],
    ) -> None:
        self.engine = engine
        self.state = state
        self.server = server
        self.hold_seconds = hold_seconds
        self.announce = announce
        self.signals = 0
        self._task: asyncio.Task[None] | None = None

    def signal(self) -> None:
        """A stop was asked for."""
        self.signals += 1
        if self.signals > 1:
            self.announce("stopping now; running turns continue in another engine on the store, or on the next start")
            self._finish(force=True)
            return
        self.state.draining = True
        self.engine.drain()
        self._task = asyncio.get_running_loop().create_task(self._hold())

    async def _hold(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.hold_seconds
        running = len(self.engine.running_turns())
        if running and self.hold_seconds > 0:
            self.announce(
                f"draining: {running} turn(s) running; waiting up to {self.hold_seconds / 60:g} min "
                "(signal again to stop now)"
            )
        while self.hold_seconds > 0 and loop.time() < deadline:
            if not self.engine.running_turns():
                break
            await asyncio.sleep(0.1)
        left = len(self.engine.running_turns())
        if left:
            self.announce(
                f"hold over: {left} turn(s) cut off; they continue in another engine on the store, or on the next start"
            )
        elif running:
            self.announce("drained: every running turn ended; stopping")
        else:
            self.announce("stopping: no turn was running")
        self._finish(force=False)

    def _finish(self, *, force: bool) -> None:
        self.state.stopping.set()
        self.server.should_exit = True
        if force:
            self.server.force_exit = True


def _not_a_cancelled_lifespan(record: logging.LogRecord) -> bool:
    """False for uvicorn's report of the lifespan task cancelled by a stop at once (a second signal): the stop
    was asked for, and said so; its traceback is no error. (uvicorn logs the traceback Starlette sends it as
    text, as the loop cancels the task on its way out: after `serve` returns, so the filter stays.)"""
    error = record.exc_info[1] if record.exc_info else None
    if isinstance(error, asyncio.CancelledError):
        return False
    text = record.getMessage()
    return not (text.startswith("Traceback") and text.rstrip().endswith("CancelledError"))


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: `Drain` decides when to stop."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def bound_port(server: uvicorn.Server) -> int:
    """The port the server listens on (useful with port 0)."""
    for listener in server.servers:
        for sock in listener.sockets:
            name = sock.getsockname()
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                return int(name[1])
    raise RuntimeError("the server is not listening")


async def serve(
    *,
    host: str,
    port: int,
    config: Config,
    hold_minutes: float | None = None,
    settings: ServiceSettings | None = None,
    announce: Callable[[str], None] | None = None,
    engine_args: dict[str, Any] | None = None,
) -> None:
    """Open the engine on `config`'s store, serve it on `host:port` until stopped, drain, close."""
    say = announce or (lambda text: print(text, file=sys.stderr, flush=True))
    hold = deploy_hold_minutes(config, hold_minutes) * 60
    with _listen(host, port) as listeners:  # first: a host or port that cannot be had fails before anything else
        settings = settings or settings_from_env(host, announce=say)
        if settings.open and not is_loopback(host):
            raise InvalidArgument(f"binding {host!r} needs a token: set AGENTWATCH_TOKEN")
        await _serve_on(listeners, host, config, hold, settings, say, engine_args)


@contextlib.contextmanager
def _listen(host: str, port: int) -> Iterator[list[socket.socket]]:
    """The service's listening sockets, one per address `host` names (as uvicorn's own bind made them: `localhost`
    on 127.0.0.1 and ::1), all on one port; or an error that says why they cannot be had and what to do (uvicorn
    only logged its bind error, and the process exited 3, the code for a timeout). Closed on the way out."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        raise InvalidArgument(
            f"cannot serve on host {host!r} (no such name or address here); pass --host with a name or address of "
            "this machine"
        ) from None
    with contextlib.ExitStack() as stack:
        listeners: list[socket.socket] = []
        for family, kind, protocol, _, address in dict.fromkeys(found):
            listener = stack.enter_context(socket.socket(family, kind, protocol))
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # the IPv4 address is its own
            if listeners:  # port 0: every address on the port the first one got
                address = (address[0], listeners[0].getsockname()[1], *address[2:])
            try:
                listener.bind(address)
            except OSError as exc:
                reason = os.strerror(exc.errno) if exc.errno else str(exc)
                raise InvalidArgument(
                    f"cannot listen on {host}:{port} ({reason}); pass another --port (or --host), or stop what uses it"
                ) from None
            listener.listen(2048)
            listeners.append(listener)
        yield listeners


async def _serve_on(
    listeners: list[socket.socket],
    host: str,
    config: Config,
    hold: float,
    settings: ServiceSettings,
    say: Callable[[str], None],
    engine_args: dict[str, Any] | None,
) -> None:
    async with Engine.open(config=config, **(engine_args or {})) as engine:
        app = create_app(engine, settings)
        state: ServiceState = app.state.service
        server = _Server(
            uvicorn.Config(
                app,
                host=host,
                port=listeners[0].getsockname()[1],
                lifespan="on",
                log_level="warning",
                # Above the app's own limit, so that a message past it reaches the app, which answers it with
                # a `too_large` error frame and 1008 (uvicorn's own refusal is a bare 1009).
                ws_max_size=settings.max_message_bytes * 16,
                # Compressing each frame once per client costs more CPU than the whole fan-out of an event.
                ws_per_message_deflate=False,
                timeout_graceful_shutdown=5,
                http=_HeadDeadline.of(settings.request_head_seconds),
                server_header=False,
                proxy_headers=False,
            )
        )
        drain = Drain(engine, state, server, hold, say)
        found: Path | None = None
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, drain.signal)
        logging.getLogger("uvicorn.error").addFilter(_not_a_cancelled_lifespan)
        try:
            serving = asyncio.create_task(server.serve(sockets=listeners))
            # uvicorn offers no event for "listening"; its startup takes a few ms
            while not server.started and not serving.done():  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            if server.started:
                shown = f"[{host}]" if ":" in host else host
                url = f"http://{shown}:{bound_port(server)}"
                say(f"agentwatch serving on {url} (store {hide_password(config.store)})")
                say(f"dashboard {url}/ · tools {url}/api/tools · MCP {url}/mcp · metrics {url}/metrics")
                for tracing in (e for e in engine.extensions if isinstance(e, Tracing) and e.destination):
                    say(f"tracing: spans of every turn to {tracing.destination}")
                if config.live.startswith("memory:") and not config.store.startswith("sqlite:"):
                    # A store other processes may share, and a ring they cannot: their turns reach this
                    # service's watchers from the store alone.
                    say(
                        "note: the live ring is in memory, so turns that other services on this store run "
                        "reach watchers here late, from the store, without streamed text; give every service "
                        "the same Redis (AGENTWATCH_LIVE=redis://...) to stream them live"
                    )
                found = _announce(config, host, bound_port(server), token_needed=not settings.open)
            await serving
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)
            if found is not None:
                remove_discovery(found)


def _announce(config: Config, host: str, port: int, *, token_needed: bool) -> Path | None:
    """Write the discovery file through which the CLI finds this service (removed when it stops); a file
    that cannot be written leaves the CLI on the store, which is no reason to stop serving."""
    reach = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    shown = f"[{reach}]" if ":" in reach else reach
    try:
        return write_discovery(config, f"http://{shown}:{port}", token_needed=token_needed)
    except OSError as exc:
        log.warning("the discovery file for the CLI could not be written: %s", exc)
        return None
