"""Tool servers: MCP servers whose tools an agent may call.

A definition lists them under `mcp_servers` (`mcpServers` too), each a local command spoken to over stdio or
a streamable-HTTP URL:

```yaml
mcp_servers:
  - {name: files, command: npx, args: [-y, "@modelcontextprotocol/server-filesystem", "."]}
  - {name: tracker, url: "https://mcp.example.com/mcp", headers: {X-Team: core}}
```

- **Names.** The model sees each tool as `<server>__<tool>` (`files__read_file`), so a server's tools never
  shadow ours or another server's.
- **Grant.** Listing a server in a definition grants its tools to that role; every call still goes through
  the policy chain under its prefixed name, like any tool (a policy can deny `files__write_file`, and
  `approval_tools: [files__write_file]` makes a person approve each call, one whose arguments the tool's
  `inputSchema` refuses failing at once instead).
- **Lifetime.** A session's connection to a server opens on the first turn that needs it, stays open across
  the session's turns, and closes when the session ends (completed, failed, stopped) or the engine closes (a
  stdio server's process ends then). A server that cannot
  be started or reached is a `runtime.error` naming it; the turn goes on without its tools.
- **Authorization.** An HTTP server that answers a call with 401 opens a request of kind `oauth` (stored,
  then `request.opened` and `auth.required` with the server's challenge); the call waits as `ask_user` does.
  Answer it with `{"token": "..."}` (or `"Bearer ..."`) to send that bearer token from then on, with any
  other answer (`"done"`) once authorized some other way, or with `{"approved": false}` to give up: the call
  is then run again, or reported declined. The token is kept in the request, never shown in an event.
  A server that answers 401 before it even lists its tools opens the same request, tied to no call: the turn
  goes on without that server, and the session's turns after the answer connect with the token.
- **Notifications.** Every notification the client receives from a server (log messages, progress, resource
  updates) becomes a durable `external.event` on the session (`source: mcp:<server>`, `name`: the method),
  readable with `agent_tail {types: [external.event]}`. A server speaking the modern, sessionless protocol
  sends them only while a call runs (it has no channel between calls); one on a session that keeps a stream
  open may send them at any time.

The MCP client itself is pydantic-ai's (`agentwatch.runtime.models._mcp`), loaded with the first server.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator, model_validator

from agentwatch.events import AuthRequired, ExternalEvent, NewEvent, Payload, RequestOpened, RuntimeNotice, new_id
from agentwatch.store import RequestDraft, SessionRecord, Write
from agentwatch.tools import check_schema_args

if TYPE_CHECKING:
    from agentwatch.runtime.models._mcp import ToolServerClient
    from agentwatch.runtime.roster import AgentDefinition
    from agentwatch.runtime.services import Runtime

__all__ = [
    "SEPARATOR",
    "OAuthAnswer",
    "ServerTool",
    "ToolServer",
    "ToolServerFailed",
    "ToolServers",
    "close_tool_servers",
    "is_server_tool",
    "read_oauth_answer",
    "servers_by_name",
    "shown_answer",
    "tool_servers",
]

log = logging.getLogger(__name__)

SEPARATOR = "__"
"""Between a server's name and its tool's name, in the name the model sees."""

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")


class ToolServer(BaseModel):
    """One MCP server a definition lists: a command spoken to over stdio, or a streamable-HTTP URL."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    """Prefix of its tools' names (`<name>__<tool>`): lowercase letters, digits and `-`."""
    command: str | None = None
    """The program that serves MCP on its stdin/stdout (stdio servers)."""
    args: tuple[str, ...] = ()
    """Its arguments."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables for it (added to none: the SDK passes a safe default set)."""
    cwd: str | None = None
    """Its working directory."""
    url: str | None = None
    """The streamable-HTTP endpoint (HTTP servers), e.g. `https://mcp.example.com/mcp`."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra HTTP headers sent with every request (HTTP servers)."""

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _NAME.match(value):
            hint = re.sub(r"[^a-z0-9-]+", "-", value.strip().lower()).strip("-") or "server"
            raise ValueError(
                f"{value!r} is not a tool server name; use lowercase letters, digits and '-' (e.g. {hint!r})"
            )
        return value

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} is not an http:// or https:// URL")
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> ToolServer:
        if self.command is not None and self.url is not None:
            raise ValueError(f"tool server {self.name!r} has both `command` and `url`; keep the one it is reached by")
        if self.command is None and self.url is None:
            raise ValueError(f"tool server {self.name!r} needs `command` (a stdio server) or `url` (an HTTP server)")
        if self.url is not None and (self.args or self.env or self.cwd):
            raise ValueError(f"tool server {self.name!r} has a url: `args`, `env` and `cwd` are for a command")
        if self.command is not None and self.headers:
            raise ValueError(f"tool server {self.name!r} has a command: `headers` are for a url")
        return self

    def __hash__(self) -> int:  # its mappings are not hashable; a definition holding it is
        mappings = (*sorted(self.env.items()), *sorted(self.headers.items()))
        return hash((self.name, self.command, self.args, self.cwd, self.url, mappings))

    @property
    def where(self) -> str:
        """The URL, or the command line, for messages."""
        return self.url if self.url is not None else " ".join([self.command or "", *self.args])


class ToolServerFailed(Exception):
    """A tool server could not be started or reached; the message says why (and what it wrote, for stdio)."""


@dataclass(frozen=True)
class ServerTool:
    """A tool of a server as the model sees it."""

    name: str
    """`<server>__<tool>`."""
    description: str
    parameters: dict[str, JsonValue]
    call: Callable[[dict[str, Any]], Awaitable[JsonValue]]
    """Calls the tool on the server; raises `ToolWaits` when the server needs authorization first."""

    def check_args(self, args: object) -> None:
        """Raise `InvalidArgument` for arguments the tool's `inputSchema` refuses, without calling the server (a
        call a person is to approve is checked so before the person is asked)."""
        check_schema_args(self.parameters, self.name, args)


@dataclass(frozen=True)
class OAuthAnswer:
    """What an answer to an `oauth` request says."""

    approved: bool
    """False: the person gave up, and the call is reported declined."""
    token: str | None
    """A bearer token to send from now on, when one was given."""


def read_oauth_answer(answer: JsonValue) -> OAuthAnswer:
    """`{"token": ...}` or `"Bearer ..."`: use that token; `{"approved": false}`, `false`, `"no"`: give up;
    anything else: authorized some other way, try again."""
    if isinstance(answer, dict):
        token = answer.get("token")
        return OAuthAnswer(answer.get("approved") is not False, token if isinstance(token, str) and token else None)
    if isinstance(answer, str):
        text = answer.strip()
        if text.lower() in ("no", "deny", "denied", "decline", "cancel", "false"):
            return OAuthAnswer(False, None)
        if text.lower().startswith("bearer "):
            return OAuthAnswer(True, text[7:].strip() or None)
        return OAuthAnswer(True, None)
    return OAuthAnswer(answer is not False, None)


def shown_answer(kind: str, answer: JsonValue) -> JsonValue:
    """The answer as events show it: an `oauth` answer's token is left out."""
    if kind != "oauth" or read_oauth_answer(answer).token is None:
        return answer
    return {"approved": True, "token": "[not shown]"}


class ToolServers:
    """The tool-server connections of one engine: one per session and server."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._clients: dict[tuple[str, str], ToolServerClient] = {}
        self._tokens: dict[tuple[str, str], str] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}  # one per connection: a slow server delays no other
        self._closing: set[asyncio.Future[None]] = set()  # connections being closed after their session ended
        self._closed = False

    async def tools_for(
        self, session: SessionRecord, servers: Sequence[ToolServer], report: Report
    ) -> list[ServerTool]:
        """The tools of `servers` for a turn of `session`, connecting to each on first use, with the token of
        the session's latest answered `oauth` request for it. A server that fails is `report`ed (a
        `runtime.error`; an `oauth` request and `auth.required` when it wants authorization) and left out."""
        requests = await self._runtime.store.list_requests(session_id=session.id, status=None, limit=1000)
        waiting = set()
        for request in (r for r in requests if r.kind == "oauth"):
            named = request.body.get("server")
            token = read_oauth_answer(request.answer).token if request.status == "resolved" else None
            if isinstance(named, str) and token is not None and self._tokens.get((session.id, named)) != token:
                self._tokens[(session.id, named)] = token
                known = self._clients.get((session.id, named))
                if known is not None:
                    known.authorize(token)
            if request.status == "pending" and request.tool_call_id is None:
                waiting.add(named)
        tools: list[ServerTool] = []
        for server in servers:
            try:
                client = await self._client(session.id, server)
                listed = await client.tools()
            except Exception as exc:
                await _report_failure(report, server, exc, asked=server.name in waiting)
                continue
            prefix = f"{server.name}{SEPARATOR}"
            tools += [ServerTool(prefix + name, text, schema, _caller(client, name)) for name, text, schema in listed]
        return tools

    async def _client(self, session_id: str, server: ToolServer) -> ToolServerClient:
        key = (session_id, server.name)
        async with self._locks.setdefault(key, asyncio.Lock()):
            client = self._clients.get(key)
            if client is not None and client.server == server and not client.lost:
                return client
            if self._closed:
                raise RuntimeError("the engine is closing")
            if client is not None:  # the definition changed, or the server went away: connect anew
                del self._clients[key]
                await _close(client)
            client = _new_client(server, self._notice(session_id, server.name))
            token = self._tokens.get(key)
            if token is not None:
                client.authorize(token)
            await client.open()
            if self._closed:  # the engine closed while it connected
                await _close(client)
                raise RuntimeError("the engine is closing")
            self._clients[key] = client
            return client

    def _notice(self, session_id: str, server: str) -> Callable[[str, JsonValue], Awaitable[None]]:
        async def record(method: str, params: JsonValue) -> None:
            event = ExternalEvent(source=f"mcp:{server}", name=method, body=params)
            try:
                channel = await self._runtime.driver(session_id)
                await channel.commit(Write(session_id, events=[NewEvent(event)], touch=False))
            except Exception as exc:  # a notification that cannot be stored must not break the connection
                log.warning("could not record a notification of tool server %r: %s", server, exc)

        return record

    def release(self, session_id: str) -> None:
        """Start closing the connections of one session (it ended); its next turn, if any, connects anew. The
        closing is the pool's own task (`close` waits for it): a turn cut off meanwhile cannot leave it halfway."""
        for key in [key for key in self._clients if key[0] == session_id]:
            closing = asyncio.ensure_future(_close(self._clients.pop(key)))
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)
        # Nor are its locks and tokens kept (a long-running engine met many sessions): a next turn reads its
        # tokens back from its answered requests.
        for key in [key for key, lock in self._locks.items() if key[0] == session_id and not lock.locked()]:
            del self._locks[key]
        for key in [key for key in self._tokens if key[0] == session_id]:
            del self._tokens[key]

    async def close(self) -> None:
        """Close every connection (stdio servers' processes end); idempotent."""
        self._closed = True
        clients, self._clients = list(self._clients.values()), {}
        await asyncio.gather(*(_close(client) for client in clients), *self._closing)


def _new_client(server: ToolServer, on_notice: Callable[[str, JsonValue], Awaitable[None]]) -> ToolServerClient:
    # The MCP client (pydantic-ai's, FastMCP under it) loads with the first server.
    try:
        from agentwatch.runtime.models._mcp import ToolServerClient
    except ImportError as exc:
        raise ImportError(f"{exc}; install the MCP client with `pip install 'agentwatch[toolservers]'`") from None
    return ToolServerClient(server, on_notice)


def _caller(client: ToolServerClient, tool: str) -> Callable[[dict[str, Any]], Awaitable[JsonValue]]:
    async def call(args: dict[str, Any]) -> JsonValue:
        return await client.call(tool, args)

    return call


async def _close(client: ToolServerClient) -> None:
    try:
        await client.close()
    except Exception as exc:  # a server that dies while closing is closed all the same
        log.warning("closing tool server %r failed: %s", client.server.name, exc)


Report = Callable[..., Awaitable[None]]
"""Commits payloads durably in the turn (`report(payloads, requests_open=[...])`)."""


async def _report_failure(report: Report, server: ToolServer, exc: Exception, *, asked: bool) -> None:
    """A server that wants a sign-in opens an `oauth` request (unless one already waits); any other failure is
    a `runtime.error`."""
    from agentwatch.runtime.models import ToolWaits

    if isinstance(exc, ToolWaits):
        if not asked:
            payloads, draft = _sign_in(server, exc.detail)
            await report(payloads, requests_open=[draft])
        return
    reason = str(exc) if isinstance(exc, ToolServerFailed) else f"{type(exc).__name__}: {exc}".rstrip(": ")
    notice = RuntimeNotice(
        type="runtime.error",
        message=f"tool server {server.name!r} ({server.where}) could not be used: {reason}; "
        "this turn goes on without its tools",
        source=f"mcp:{server.name}",
        detail={"server": server.name, "where": server.where},
    )
    await report([notice])


def _sign_in(server: ToolServer, detail: dict[str, JsonValue]) -> tuple[list[Payload], RequestDraft]:
    """The `oauth` request (tied to no call) for a server that wants a sign-in before anything else."""
    where = detail.get("resource_metadata") or server.url
    url = where if isinstance(where, str) else None
    question = (
        f"Tool server {server.name!r} needs authorization before its tools can be used"
        + (f" (see {url})" if url else "")
        + '. Answer {"token": "..."} to send that bearer token from the next turn on, or "done" once authorized '
        "otherwise."
    )
    draft = RequestDraft(
        id=new_id("req"),
        kind="oauth",
        summary=f"authorize tool server {server.name!r}",
        questions=[question],
        body=dict(detail),
    )
    opened = RequestOpened(request_id=draft.id, kind="oauth", summary=draft.summary, questions=[question])
    signal = AuthRequired(
        provider=f"mcp:{server.name}", url=url, message=f"tool server {server.name!r} needs authorization"
    )
    return [opened, signal], draft


_POOLS: WeakKeyDictionary[Any, ToolServers] = WeakKeyDictionary()


def tool_servers(runtime: Runtime) -> ToolServers:
    """The tool-server connections of `runtime`'s engine (made on first use)."""
    pool = _POOLS.get(runtime)
    if pool is None:
        pool = _POOLS[runtime] = ToolServers(runtime)
    return pool


async def close_tool_servers(runtime: Runtime) -> None:
    """Close the engine's tool-server connections, if it made any (`Engine.close` calls it)."""
    pool = _POOLS.pop(runtime, None)
    if pool is not None:
        await pool.close()


def servers_by_name(servers: Sequence[ToolServer]) -> Mapping[str, ToolServer]:
    """`servers` by name; raises ValueError when two share one."""
    named: dict[str, ToolServer] = {}
    for server in servers:
        if server.name in named:
            raise ValueError(f"two tool servers are named {server.name!r}; give each its own name")
        named[server.name] = server
    return named


def is_server_tool(name: str, definitions: Iterable[AgentDefinition]) -> bool:
    """Whether `name` (`<server>__<tool>`) names a tool of a tool server one of `definitions` lists."""
    server, separator, _ = name.partition(SEPARATOR)
    return bool(separator) and any(listed.name == server for d in definitions for listed in d.mcp_servers)
