"""The MCP client of tool servers: pydantic-ai's `MCPToolset` (the FastMCP client under it), one per connection.

`agentwatch.runtime.toolservers` decides which servers a turn gets and what their calls and notifications
mean; this module only speaks the protocol. It imports pydantic-ai's MCP support (about a second, and the
`fastmcp` client), so it is imported the first time a definition with `mcp_servers` runs a turn.

- A stdio server's stderr goes to a temporary file, not to the terminal; when the server fails to start, the
  end of what it wrote there is part of the error.
- Every message the server sends on its own (log messages, resource updates, progress, list changes) goes
  to `on_notice(method, params)`; FastMCP's default log handler, which would print, is replaced.
- Over HTTP, an `httpx` auth hook sends the bearer token once one is given (`authorize`) and keeps the
  `WWW-Authenticate` challenge of a 401: a call the server refused for want of authorization raises
  `AuthorizationNeeded` instead of the SDK's bare "server returned an error response".
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Awaitable, Callable, Generator
from typing import IO, TYPE_CHECKING, Any, cast

import httpx2
from mcp.types import CONNECTION_CLOSED
from pydantic import JsonValue
from pydantic_ai.mcp import MCPToolset

from agentwatch.runtime.models._types import ToolWaits
from agentwatch.runtime.toolservers import ToolServerFailed

if TYPE_CHECKING:
    from agentwatch.runtime.toolservers import ToolServer

__all__ = ["AuthorizationNeeded", "ToolServerClient"]

# FastMCP gives its loggers terminal handlers of its own when imported: an engine's users own their terminal,
# so its records go up the standard logging tree like everyone else's.
for _name in ("fastmcp", "FastMCP"):
    _logger = logging.getLogger(_name)
    _logger.handlers.clear()
    _logger.propagate = True

Notice = Callable[[str, JsonValue], Awaitable[None]]
"""Receives a server's notification: its method (`notifications/message`, ...) and its params as JSON."""


class AuthorizationNeeded(ToolWaits):
    """The server answered 401: the call waits until a person authorizes it (request kind `oauth`)."""

    def __init__(self, server: str, url: str, challenge: str) -> None:
        super().__init__(
            "oauth",
            f"tool server {server!r} needs authorization",
            {"server": server, "url": url, "challenge": challenge, "resource_metadata": _resource_metadata(challenge)},
        )


class _Bearer(httpx2.Auth):
    """Adds the bearer token once there is one, and keeps the challenge of the last 401."""

    def __init__(self, headers: dict[str, str]) -> None:
        self.token: str | None = None
        self.challenge: str | None = None
        self._has_own = any(key.lower() == "authorization" for key in headers)

    def auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response, None]:
        if self.token is not None and not self._has_own:
            request.headers["Authorization"] = f"Bearer {self.token}"
        response = yield request
        if response.status_code == 401:
            self.challenge = response.headers.get("www-authenticate", "Bearer")


class ToolServerClient:
    """One open connection to a tool server: its tools, calls to them, and what it sends on its own."""

    def __init__(self, server: ToolServer, on_notice: Notice) -> None:
        self.server = server
        self._on_notice = on_notice
        self._bearer: _Bearer | None = None
        self._stderr: IO[str] | None = None
        self._toolset = self._build()
        self._open = False
        self.lost = False
        """The connection closed under a call (a stdio server that exited): connect anew before using it."""

    def _build(self) -> MCPToolset[None]:
        server = self.server
        common: dict[str, Any] = {
            "message_handler": self._message,
            "log_handler": _ignore,  # the message handler sees log messages too; FastMCP's default prints them
            "tool_error_behavior": "error",
            "cache_tools": True,
        }
        if server.url is not None:
            self._bearer = _Bearer(server.headers)
            return MCPToolset(server.url, auth=self._bearer, headers=dict(server.headers) or None, **common)
        from fastmcp.client.transports import StdioTransport

        # Open as long as the connection (closed by `close`), so not in a `with`.
        self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        transport = StdioTransport(
            command=server.command or "",
            args=list(server.args),
            env=dict(server.env) or None,
            cwd=server.cwd,
            keep_alive=False,
            log_file=cast(Any, self._stderr),
        )
        return MCPToolset(transport, **common)

    async def open(self) -> None:
        """Start (stdio) or reach (HTTP) the server and initialize the session; raises when it cannot."""
        try:
            await self._toolset.__aenter__()
        except Exception as exc:
            self._raise_if_unauthorized(exc)
            wrote = self._stderr_tail()
            self._close_stderr()
            said = f"; it wrote: {wrote}" if wrote else ""
            raise ToolServerFailed(f"{type(exc).__name__}: {exc}{said}") from exc
        self._open = True

    async def tools(self) -> list[tuple[str, str, dict[str, JsonValue]]]:
        """The server's tools: name, description and the JSON schema of their arguments."""
        listed = await self._toolset.list_tools()
        return [
            (tool.name, tool.description or "", cast(dict[str, JsonValue], dict(tool.input_schema or {})))
            for tool in listed
        ]

    async def call(self, name: str, args: dict[str, Any]) -> JsonValue:
        """Call a tool; its result as text or JSON. Raises `AuthorizationNeeded` on a 401, and the server's
        error (its message) when the tool failed."""
        if self._bearer is not None:
            self._bearer.challenge = None
        try:
            result = await self._toolset.direct_call_tool(name, args)
        except Exception as exc:
            self._raise_if_unauthorized(exc)
            if getattr(exc, "code", None) == CONNECTION_CLOSED:
                self.lost = True
                raise ToolServerFailed(
                    f"tool server {self.server.name!r} closed the connection; it is restarted for the next turn"
                ) from exc
            raise
        return cast(JsonValue, _jsonable(result))

    def authorize(self, token: str) -> None:
        """Send `Authorization: Bearer <token>` with every later request (HTTP servers)."""
        if self._bearer is not None:
            self._bearer.token = token

    async def close(self) -> None:
        """Close the session (a stdio server's process ends); idempotent."""
        if self._open:
            self._open = False
            try:
                await self._toolset.__aexit__(None, None, None)
            finally:
                self._close_stderr()

    def _stderr_tail(self, limit: int = 500) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0)
            text = self._stderr.read()
        except (OSError, ValueError):
            return ""
        text = " ".join(text.split())
        return text if len(text) <= limit else "…" + text[-limit:]

    def _close_stderr(self) -> None:
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def _raise_if_unauthorized(self, exc: BaseException) -> None:
        bearer = self._bearer
        if bearer is not None and bearer.challenge is not None:
            challenge, bearer.challenge = bearer.challenge, None
            raise AuthorizationNeeded(self.server.name, self.server.url or "", challenge) from exc

    async def _message(self, message: Any) -> None:
        notification = getattr(message, "root", message)
        method = getattr(notification, "method", None)
        if not isinstance(method, str):
            return  # a request from the server or an exception the session saw: not a notification
        params = getattr(notification, "params", None)
        body = params.model_dump(mode="json", by_alias=True, exclude_none=True) if params is not None else None
        await self._on_notice(method, cast(JsonValue, body))


async def _ignore(message: Any) -> None:
    return None


def _jsonable(value: Any) -> Any:
    """A tool result as JSON: text and JSON stay; anything else (images, audio) is described in a line."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list):
        return [_jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    media = getattr(value, "media_type", None)
    return f"[{media or type(value).__name__} content]"


def _resource_metadata(challenge: str) -> str | None:
    """The `resource_metadata` URL of a `WWW-Authenticate: Bearer ...` challenge (where to learn how to sign in)."""
    marker = "resource_metadata="
    start = challenge.find(marker)
    if start < 0:
        return None
    rest = challenge[start + len(marker) :].lstrip()
    if rest.startswith('"'):
        end = rest.find('"', 1)
        return rest[1:end] if end > 0 else rest[1:]
    return rest.split(",")[0].strip() or None
