"""Who may connect, and how much they may send: one ASGI guard in front of every route.

- **Tokens.** With a token configured (`AGENTWATCH_TOKEN`), every request and socket must carry it, as
  `Authorization: Bearer <token>` or, where a browser cannot set headers (EventSource, WebSocket), as
  `?token=<token>`. A read-only token (`AGENTWATCH_READ_TOKEN`) may call only the read tools. Without any
  token the service must bind a loopback address (`agentwatch serve` refuses otherwise), and then only
  requests addressed to a loopback host name are served, which defeats DNS rebinding.
- **Origins.** A request that names an `Origin` other than the service's own, or one of `allowed_origins`,
  is refused: CORS is closed by default, and this also stops cross-site WebSockets, which CORS does not
  cover. Tool calls must be `application/json`, so a cross-site form cannot make one without a preflight.
- **The dashboard's page** (`/` and `/dashboard/...`) is served without a token: it holds no data, and asks
  for the token before it shows any.
- **Sizes.** A request body larger than `max_body_bytes` is refused with 413 before it is read in full.

Every refusal is a structured error `{"error": {"code", "message"}}` (a WebSocket is accepted first, told
why, and closed with 4000 + the HTTP status).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentwatch.service._wire import error, status_for
from agentwatch.service.dashboard import is_page

__all__ = ["ACCESS_KEY", "Access", "Guard", "ServiceSettings", "access_of", "is_loopback"]

Access = Literal["full", "read"]
"""What a caller may do: call every tool, or only the read tools (`Tool.reads_only`)."""

ACCESS_KEY = "agentwatch.access"
"""The ASGI scope key under which the guard records the caller's `Access`."""

_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
_OPEN_PATHS = frozenset({"/api/health", "/api/health/live"})


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or a name) stays on this machine: `localhost`, or a loopback address
    (127.0.0.0/8, ::1). A name that merely starts like one (`127.0.0.1.example.com`) is not."""
    if host in _LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    """How the service admits callers, and its limits."""

    token: str | None = None
    """The full-access token; None with no read token means no token (loopback only)."""
    read_token: str | None = None
    """A token that may call only the read tools."""
    allowed_origins: tuple[str, ...] = ()
    """Browser origins besides the service's own that may call it (`https://dash.example.com`)."""
    max_body_bytes: int = 2_000_000
    """The largest request body accepted: room for the longest text a tool takes (a prompt of 100,000
    characters) however it is escaped (`\\ud83d\\ude00`, 12 bytes for one character outside the BMP)."""
    max_message_bytes: int = 65_536
    """The largest message a WebSocket client may send."""
    send_timeout: float = 10.0
    """Seconds a send to an attached client may wait before the client is disconnected."""
    client_backlog: int = 1000
    """Events an attached client may have waiting before it is cut loose (and resumes from the store)."""
    request_head_seconds: float = 10.0
    """Seconds a connection has to send a request's head (its line and headers), when it opens and after each
    answer; one that has not is closed."""
    extra_hosts: tuple[str, ...] = field(default=())
    """Host names besides loopback ones that tokenless requests may be addressed to."""

    @property
    def open(self) -> bool:
        """No token at all: only loopback callers (and host names) are served."""
        return self.token is None and self.read_token is None


def access_of(scope: Scope) -> Access:
    """The caller's access, as the guard recorded it."""
    access: Access = scope.get(ACCESS_KEY, "read")
    return access


class Guard:
    """The ASGI middleware that applies `ServiceSettings` to every HTTP request and WebSocket."""

    def __init__(self, app: ASGIApp, settings: ServiceSettings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        refusal, access = self._check(scope, headers)
        if refusal is not None:
            await _refuse(scope, receive, send, refusal)
            return
        scope[ACCESS_KEY] = access
        if scope["type"] == "http" and scope.get("method") not in ("GET", "HEAD"):
            length = headers.get("content-length")
            limit = self.settings.max_body_bytes
            if length is not None and (not length.isdigit() or int(length) > limit):
                await _refuse(scope, receive, send, _too_large(limit))
                return
            body = await _read_body(receive, limit)
            if body is None:
                await _refuse(scope, receive, send, _too_large(limit))
                return
            receive = _replay(body, receive)
        await self.app(scope, receive, send)

    def _check(self, scope: Scope, headers: dict[str, str]) -> tuple[dict[str, Any] | None, Access]:
        settings = self.settings
        host = headers.get("host", "")
        origin = headers.get("origin")
        if origin is not None and origin not in settings.allowed_origins and not _same_origin(origin, host, scope):
            return error("forbidden", f"requests from origin {origin!r} are not allowed"), "read"
        if scope["path"] in _OPEN_PATHS:
            return None, "read"
        if settings.open:
            hostname = _hostname(host)
            if not (is_loopback(hostname) or hostname in settings.extra_hosts):
                return error("forbidden", f"this service answers only to loopback host names, not {host!r}"), "read"
            return None, "full"
        if scope["type"] == "http" and is_page(scope["path"]):
            return None, "read"  # the dashboard's page holds no data: what it shows, it asks for with the token
        presented = _presented_token(scope, headers)
        if presented is None:
            return error(
                "unauthenticated",
                "pass the service's token as `Authorization: Bearer <token>` (or, where a browser cannot set a "
                "header, as an EventSource or a WebSocket, as `?token=<token>`)",
            ), "read"
        if settings.token is not None and hmac.compare_digest(presented.encode(), settings.token.encode()):
            return None, "full"
        if settings.read_token is not None and hmac.compare_digest(presented.encode(), settings.read_token.encode()):
            return None, "read"
        return error("unauthenticated", "the token is not valid for this service"), "read"


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or None once it passes `limit` bytes (the rest is not read)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)  # the client went away; the app sees an empty or partial body
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


MCP_PATH = "/mcp"
"""Where the service serves MCP over streamable HTTP."""
_MCP_ERROR = {"code": -32001}
"""The JSON-RPC error code of a request the service refused before MCP saw it (the server-defined range); its
`data` holds the service's own error."""


def _too_large(limit: int) -> dict[str, Any]:
    return error("too_large", f"the request body may be at most {limit} bytes")


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}


def _hostname(host: str) -> str:
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _same_origin(origin: str, host: str, scope: Scope) -> bool:
    scheme = "https" if scope.get("scheme") in ("https", "wss") else "http"
    return origin == f"{scheme}://{host}"


def _presented_token(scope: Scope, headers: dict[str, str]) -> str | None:
    authorization = headers.get("authorization", "")
    if authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    if scope["type"] == "websocket" or scope.get("method") == "GET":
        from urllib.parse import parse_qs

        values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token")
        if values:
            return str(values[0])
    return None


async def _refuse(scope: Scope, receive: Receive, send: Send, refusal: dict[str, Any]) -> None:
    status = status_for(refusal)
    if scope["type"] == "websocket":
        message = await receive()
        if message["type"] != "websocket.connect":
            return
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": json.dumps({"kind": "error", **refusal})})
        await send({"type": "websocket.close", "code": 4000 + status, "reason": refusal["error"]["code"]})
        return
    if scope["path"].rstrip("/") == MCP_PATH:
        # An MCP client reads a refused request's body only as a JSON-RPC error (the request's id is not read
        # yet: null, which the client matches to its request).
        why = refusal["error"]
        refusal = {"jsonrpc": "2.0", "id": None, "error": {**_MCP_ERROR, "message": why["message"], "data": why}}
    body = json.dumps(refusal).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
