"""The service's ASGI app, built by `create_app(engine, settings)` (tests build it inline)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute

from agentwatch.runtime.engine import Engine
from agentwatch.runtime.toolservers import is_server_tool
from agentwatch.service.access import MCP_PATH, Guard, ServiceSettings
from agentwatch.service.api import call_tool_endpoint, callable_tools, json_error, list_tools_endpoint
from agentwatch.service.attach import SendWatch, events_sse, events_websocket
from agentwatch.service.broadcast import Broadcaster, shared_ring
from agentwatch.service.dashboard import dashboard_routes
from agentwatch.service.mcp import mcp_http_app, mcp_server
from agentwatch.service.metrics import CONTENT_TYPE, ServiceMetrics
from agentwatch.service.openapi import openapi_document

__all__ = ["ServiceState", "create_app"]


@dataclass
class ServiceState:
    """What every route of one service shares."""

    engine: Engine
    settings: ServiceSettings
    broadcaster: Broadcaster
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the service stops: open attach streams end so the process can exit."""
    draining: bool = False
    """True once a stop was asked for: no tool that starts work is accepted."""
    sends: SendWatch = field(default_factory=SendWatch)
    """The sends in progress on the service's WebSockets, watched for a client that stopped reading."""
    _stopped: asyncio.Future[None] | None = field(default=None, repr=False)
    _stopped_watch: asyncio.Task[None] | None = field(default=None, repr=False)

    def stopped(self) -> asyncio.Future[None]:
        """A future resolved once `stopping` is set: every open stream waits on this one future, rather than
        each on a task of its own."""
        if self._stopped is None:
            future = self._stopped = asyncio.get_running_loop().create_future()

            async def watch() -> None:
                await self.stopping.wait()
                if not future.done():
                    future.set_result(None)

            self._stopped_watch = asyncio.create_task(watch(), name="agentwatch-service-stopping")
        return self._stopped


_HEALTH_TIMEOUT = 2.0
_PROBE_ID = "ses_health_probe"
"""A session id no session has: reading its lease and its live stream asks the store and the ring something."""
log = logging.getLogger(__name__)


async def health_answer(state: ServiceState) -> Response:
    """`GET /api/health`, a readiness probe for a load balancer or an orchestrator: 200 `ok` when the store and
    the live ring answer within 2 s; 503 `draining` once a stop was asked for (no new work here), or
    `unavailable` naming which failed (`store`, `live`: `ok` or `failing`; why goes to the service's log, not
    to this open path). `GET /api/health/live` is the liveness probe: 200 while the process serves, draining
    included (a deploy's hold must not get it killed)."""
    checks: dict[str, str] = {}
    engine = state.engine
    for name, probe in (
        ("store", lambda: engine.store.get_lease(_PROBE_ID)),
        ("live", lambda: engine.ring.head(_PROBE_ID)),
    ):
        try:
            async with asyncio.timeout(_HEALTH_TIMEOUT):
                await probe()
            checks[name] = "ok"
        except Exception as exc:
            said = str(exc) or type(exc).__name__  # (a timeout says nothing of itself)
            log.warning("health check: the %s failed: %s", "live ring" if name == "live" else name, said)
            checks[name] = "failing"
    failing = any(value != "ok" for value in checks.values())
    status = "draining" if state.draining else "unavailable" if failing else "ok"
    return JSONResponse({"status": status, **checks}, status_code=200 if status == "ok" else 503)


async def _role_of(engine: Engine, session_id: str) -> str:
    return (await engine.store.get_session(session_id)).role


def create_app(
    engine: Engine, settings: ServiceSettings | None = None, *, state: ServiceState | None = None
) -> Starlette:
    """The HTTP, WebSocket/SSE and MCP surfaces over a running `engine`.

    Installs the broadcaster's observer in the engine (every session's driver gets one). The app's lifespan
    runs the MCP session manager; the engine itself is opened and closed by the caller.
    """
    settings = settings or ServiceSettings()
    if state is None:
        broadcaster = Broadcaster(backlog=settings.client_backlog, ring=shared_ring(engine.ring))
        state = ServiceState(engine, settings, broadcaster)
        engine.start_with_observer(state.broadcaster.observer)
    mcp_app, manager = mcp_http_app(mcp_server(state), max_body_bytes=settings.max_body_bytes)
    metrics = ServiceMetrics(
        turns_running=lambda: len(engine.running_turns()),
        sessions_loaded=engine.sessions_loaded,
        draining=lambda: state.draining,
        known_tool=lambda name: name in engine.tools or is_server_tool(name, engine.roster.definitions.values()),
        role_of=lambda session_id: _role_of(engine, session_id),
    )
    engine.start_with_observer(metrics.observer)

    async def health(request: Request) -> Response:
        return await health_answer(state)

    async def alive(request: Request) -> Response:
        return JSONResponse({"status": "draining" if state.draining else "alive"})

    async def scrape(request: Request) -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    async def openapi(request: Request) -> Response:
        return JSONResponse(openapi_document(callable_tools(engine.tools)))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            try:
                yield
            finally:
                state.stopping.set()
                await state.broadcaster.close()

    app = Starlette(
        routes=[
            Route("/api/health", health, methods=["GET"]),
            Route("/api/health/live", alive, methods=["GET"]),
            Route("/api/openapi.json", openapi, methods=["GET"]),
            Route("/metrics", scrape, methods=["GET"]),
            Route("/api/tools", list_tools_endpoint, methods=["GET"]),
            Route("/api/tools/{name}", call_tool_endpoint, methods=["POST"]),
            Route("/api/agents/{id}/events", events_sse, methods=["GET"]),
            WebSocketRoute("/api/agents/{id}/events", events_websocket),
            Route(MCP_PATH, mcp_app),
            *dashboard_routes(),
        ],
        middleware=[*_cors(settings), Middleware(Guard, settings=settings)],
        exception_handlers={HTTPException: json_error, Exception: json_error},
        lifespan=lifespan,
    )
    app.state.service = state
    return app


def _cors(settings: ServiceSettings) -> list[Middleware]:
    """What lets the browser origins `allowed_origins` lists call the service (its preflights are answered before
    the token is asked for, as a browser sends none with them): nothing when it lists none."""
    if not settings.allowed_origins:
        return []
    from starlette.middleware.cors import CORSMiddleware

    return [
        Middleware(
            CORSMiddleware,
            allow_origins=list(settings.allowed_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["authorization", "content-type", "last-event-id"],
            max_age=600,
        )
    ]
