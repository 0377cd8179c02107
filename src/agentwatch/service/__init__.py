"""The service: the engine in one long-lived process that anything can reach.

- `create_app(engine, settings)`: the ASGI app (Starlette) with the tools over HTTP
  (`POST /api/tools/{name}`, `GET /api/tools`), live attach over WebSocket and SSE
  (`/api/agents/{id}/events`), MCP over streamable HTTP (`/mcp`), and Prometheus metrics (`GET /metrics`).
- `serve(...)`: open the engine, serve the app on uvicorn, drain on SIGTERM (`agentwatch serve`).
- `Broadcaster`: the ThreadObserver that fans events out to attached clients.

Needs the `service` extra: `pip install 'agentwatch[service]'`.
"""

from __future__ import annotations

from agentwatch.service.access import ServiceSettings
from agentwatch.service.app import ServiceState, create_app
from agentwatch.service.broadcast import Broadcaster, LiveClient

__all__ = ["Broadcaster", "LiveClient", "ServiceSettings", "ServiceState", "create_app"]
