"""The tools as an MCP server (the official `mcp` SDK, 2.x): `agentwatch mcp` on stdio, and streamable HTTP
at `/mcp` inside `agentwatch serve`.

Every tool a caller may reach from outside an agent's turn is listed with the same name, description and
JSON schema as `engine.call_tool`; a call answers the same dict, as structured content and as JSON text, and
a refused call is an MCP tool error whose content is the structured error. Over HTTP the caller's token
decides what it sees: a read-only token lists and calls only the read tools.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager

from agentwatch import __version__
from agentwatch.service.access import ACCESS_KEY, Access
from agentwatch.service.api import callable_tools, may_call, refusal_for

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

    from agentwatch.service.app import ServiceState

__all__ = ["mcp_http_app", "mcp_server", "run_stdio"]

SERVER_NAME = "agentwatch"


def mcp_server(state: ServiceState, *, default_access: Access = "full") -> Server[Any]:
    """An MCP server over the service's engine. `default_access` applies where no HTTP guard ran (stdio)."""

    def access(ctx: ServerRequestContext[Any, Any]) -> Access:
        request = ctx.request
        scope = getattr(request, "scope", None)
        if isinstance(scope, dict):
            value: Access = scope.get(ACCESS_KEY, "read")
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
        if answer is None:
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


def mcp_http_app(
    server: Server[Any], *, max_body_bytes: int
) -> tuple[StreamableHTTPASGIApp, StreamableHTTPSessionManager]:
    """The streamable HTTP endpoint (stateless, JSON answers) and the manager whose `run()` the app's
    lifespan must enter."""
    manager = StreamableHTTPSessionManager(
        app=server, stateless=True, json_response=True, max_request_body_size=max_body_bytes
    )
    return StreamableHTTPASGIApp(manager), manager


async def run_stdio(state: ServiceState, *, access: Access = "full") -> None:
    """Serve MCP on this process's stdin and stdout until the client closes them."""
    from mcp.server.stdio import stdio_server

    server = mcp_server(state, default_access=access)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def _object_schema(schema: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A tool's answer schema as MCP's `outputSchema`, which must describe an object (a function tool that
    returns text has none there; a client then reads its text content)."""
    return dict(schema) if schema is not None and schema.get("type") == "object" else None
