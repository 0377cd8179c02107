"""A real MCP tool server for tests, written with the official SDK (2.x names).

Tools: `add(a, b)`, `announce(text)` (sends a log notification, then answers), `crash()` (the process exits)
and `vault()`, which over
HTTP needs `Authorization: Bearer <VAULT_TOKEN>`: without it the HTTP app answers 401 with a
`WWW-Authenticate` challenge, as a server protected by OAuth does.

Run on stdio with `python tests/fakes/mcp_tool_server.py`; serve over streamable HTTP with `serve_http()`.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

VAULT_TOKEN = "vault-token-1"
"""The bearer token `vault` accepts over HTTP."""

Scope = dict[str, Any]


def build_server() -> MCPServer:
    """The server and its three tools."""
    server = MCPServer("fake-tools")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    async def announce(text: str, ctx: Context) -> str:
        """Tell the client something through a log notification, then answer."""
        await ctx.log("info", f"announcing {text}", logger_name="announcer")
        return f"announced {text}"

    @server.tool()
    def crash() -> str:
        """Exit at once, as a server that dies would."""
        os._exit(3)

    @server.tool()
    def vault() -> str:
        """Read the secret (needs authorization over HTTP)."""
        return "the secret is 42"

    return server


class _AuthGuard:
    """ASGI middleware: a `tools/call` of `vault` (with `everything`, any request) without the bearer token gets 401
    and a challenge."""

    def __init__(self, app: Any, port: int, *, everything: bool = False) -> None:
        self.app = app
        self.port = port
        self.everything = everything

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        headers = dict(scope["headers"])
        guarded = self.everything or _calls_vault(body)
        if guarded and headers.get(b"authorization") != f"Bearer {VAULT_TOKEN}".encode():
            challenge = (
                f'Bearer error="invalid_token", '
                f'resource_metadata="http://127.0.0.1:{self.port}/.well-known/oauth-protected-resource/mcp"'
            )
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [(b"www-authenticate", challenge.encode()), (b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": b'{"error": "invalid_token"}'})
            return
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            message: dict[str, Any] = await receive()
            return message

        await self.app(scope, replay, send)


def _calls_vault(body: bytes) -> bool:
    try:
        message = json.loads(body)
    except ValueError:
        return False
    return (
        isinstance(message, dict)
        and message.get("method") == "tools/call"
        and isinstance(message.get("params"), dict)
        and message["params"].get("name") == "vault"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def serve_http(*, guard_everything: bool = False) -> Iterator[str]:
    """Serve the tools over streamable HTTP (uvicorn, a free port, a thread); yields the URL. With
    `guard_everything`, every request needs the token (even the handshake), not only a call of `vault`."""
    import uvicorn

    port = free_port()
    app = _AuthGuard(build_server().streamable_http_app(host="127.0.0.1"), port, everything=guard_everything)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the MCP test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


if __name__ == "__main__":
    if sys.argv[1:] == ["--fail"]:
        sys.exit("this server refuses to start")
    build_server().run("stdio")
