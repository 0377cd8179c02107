"""The tools as an MCP server (the official `mcp` SDK, 2.x): `agentwatch mcp` on stdio, and streamable HTTP
at `/mcp` inside `agentwatch serve`.

Every tool a caller may reach from outside an agent's turn is listed with the same name, description and
JSON schema as `engine.call_tool`; a call answers the same dict, as structured content and as JSON text, and
a refused call is an MCP tool error whose content is the structured error. Over HTTP the caller's token
decides what it sees: a read-only token lists and calls only the read tools, and a read whose caller hung up
is cancelled (`_HangUps`), as at `/api/tools`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager

from agentwatch import __version__
from agentwatch.service._wire import error
from agentwatch.service.access import ACCESS_KEY, Access
from agentwatch.service.api import answer_while_connected, callable_tools, may_call, refusal_for

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from agentwatch.service.app import ServiceState

__all__ = ["mcp_http_app", "mcp_server", "run_stdio"]

SERVER_NAME = "agentwatch"
_GONE: Final = "agentwatch.hung_up"
"""The scope key of the event `_HangUps` sets once the HTTP caller of `/mcp` hung up."""


def mcp_server(state: ServiceState, *, default_access: Access = "full") -> Server[Any]:
    """An MCP server over the service's engine. `default_access` applies where no HTTP guard ran (stdio)."""

    def scope(ctx: ServerRequestContext[Any, Any]) -> dict[str, Any] | None:
        found = getattr(ctx.request, "scope", None)  # (over HTTP only)
        return found if isinstance(found, dict) else None

    def access(ctx: ServerRequestContext[Any, Any]) -> Access:
        found = scope(ctx)
        if found is not None:
            value: Access = found.get(ACCESS_KEY, "read")
            return value
        return default_access

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        level = access(ctx)
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=tool.name,
                    description=tool.description,
                    input_schema=dict(tool.parameters),
                    output_schema=_object_schema(tool.output_schema),
                )
                for tool in callable_tools(state.engine.tools)
                if may_call(tool, level)
            ]
        )

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        tool = state.engine.tools.get(params.name)
        answer = refusal_for(state, tool, access(ctx))
        gone = (scope(ctx) or {}).get(_GONE)
        if answer is None and isinstance(gone, asyncio.Event):
            answer = await answer_while_connected(state, tool, params.name, dict(params.arguments or {}), gone.wait)
            answer = answer or error("unavailable", "the caller hung up before the answer")  # (read by nobody)
        elif answer is None:
            answer = await state.engine.call_tool(params.name, dict(params.arguments or {}))
        failed = set(answer) == {"error"}
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(answer, ensure_ascii=False, default=str))],
            structured_content=answer,
            is_error=failed,
        )

    return Server(
        SERVER_NAME,
        version=__version__,
        instructions=(
            "Read and drive agentwatch agents: list them (agent_list), see what one is doing (agent_get, agent_tail), "
            "start one (agent_create, agent_task), answer what waits on a person (agent_answer), wait for one to "
            "settle (agent_await), and read runs (run_list, run_trace). Agents are named by id or by name."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def mcp_http_app(server: Server[Any], *, max_body_bytes: int) -> tuple[ASGIApp, StreamableHTTPSessionManager]:
    """The streamable HTTP endpoint (stateless, JSON answers) and the manager whose `run()` the app's
    lifespan must enter."""
    manager = StreamableHTTPSessionManager(
        app=server, stateless=True, json_response=True, max_request_body_size=max_body_bytes
    )
    return _HangUps(StreamableHTTPASGIApp(manager)), manager


class _HangUps:
    """Tells a call at `/mcp` that its HTTP caller hung up: an event in the scope (`_GONE`), set by the
    disconnect that follows the request's body. The SDK neither watches for it nor cancels the call (in
    stateless JSON mode it waits for the answer, then writes it to a closed connection)."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        gone = scope[_GONE] = asyncio.Event()
        body_read = asyncio.Event()

        async def body() -> Message:
            if body_read.is_set():  # (the app listens for the disconnect too: it comes through the watch)
                await gone.wait()
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.disconnect":
                gone.set()
            elif not message.get("more_body", False):
                body_read.set()
            return message

        async def watch() -> None:
            await body_read.wait()
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watching = asyncio.ensure_future(watch())
        try:
            await self._app(scope, body, send)
        finally:
            watching.cancel()


async def run_stdio(state: ServiceState, *, access: Access = "full") -> None:
    """Serve MCP on this process's stdin and stdout until the client closes them, and every request it sent
    before is answered."""
    from mcp.server.stdio import stdio_server

    server = mcp_server(state, default_access=access)
    async with stdio_server() as (read_stream, write_stream):
        await _answering_to_the_end(server, read_stream, write_stream)


async def _answering_to_the_end(server: Server[Any], read_stream: Any, write_stream: Any) -> None:
    """`server.run` on the two streams, whose input is held open past its end until every request read is
    answered (or cancelled by the client). A client that writes its requests and closes its end (a pipe, a
    script) gets every answer: the server's run ended with its input, dropping the calls still running."""
    from mcp.shared.message import SessionMessage

    unanswered: set[types.RequestId] = set()
    answered = anyio.Event()
    to_server, server_reads = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    server_writes, from_server = anyio.create_memory_object_stream[SessionMessage](0)

    async def read() -> None:
        async with to_server, read_stream:  # (closed at the end, as the server's run closes what it reads)
            async for item in read_stream:
                message = getattr(item, "message", None)
                if isinstance(message, types.JSONRPCRequest):
                    unanswered.add(message.id)
                elif isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled":
                    unanswered.discard((message.params or {}).get("requestId"))  # (a cancelled call is not answered)
                await to_server.send(item)
            while unanswered:
                await answered.wait()

    async def write() -> None:
        nonlocal answered
        async with from_server, write_stream:
            async for item in from_server:
                await write_stream.send(item)
                if isinstance(item.message, types.JSONRPCResponse | types.JSONRPCError):
                    unanswered.discard(item.message.id)
                    answered.set()
                    answered = anyio.Event()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read)
        tasks.start_soon(write)
        async with server_reads, server_writes:
            await server.run(server_reads, server_writes, server.create_initialization_options())


def _object_schema(schema: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A tool's answer schema as MCP's `outputSchema`, which must describe an object (a function tool that
    returns text has none there; a client then reads its text content)."""
    return dict(schema) if schema is not None and schema.get("type") == "object" else None
