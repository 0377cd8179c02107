"""The tools over HTTP: `POST /api/tools/{name}` takes exactly the arguments of `engine.call_tool` and
answers its dict; `GET /api/tools` lists the tools with their JSON schemas.

The HTTP status follows the error code (`invalid_argument` 400, `unauthenticated` 401, `forbidden` and
`denied` 403, `not_found` 404, `conflict` and `ambiguous` 409, `too_large` 413, `invalid` 422, `tool_failed`
500 (a tool raised), 503 while the service drains or the store is down); a refused call is always a structured
error.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from pydantic_core import to_json
from starlette.requests import Request
from starlette.responses import Response

from agentwatch.service._wire import error, status_for
from agentwatch.service.access import access_of
from agentwatch.tools import Tool, json_kind

if TYPE_CHECKING:
    from agentwatch.service.app import ServiceState

__all__ = ["answer_while_connected", "call_tool_endpoint", "callable_tools", "list_tools_endpoint", "refusal_for"]

log = logging.getLogger(__name__)


def callable_tools(tools: dict[str, Tool]) -> list[Tool]:
    """The tools a caller can reach from outside an agent's turn (not `ask_user`, nor `ObserverReport`), sorted
    by name."""
    return sorted((t for t in tools.values() if not (t.asks_user or t.agents_only)), key=lambda t: t.name)


STARTS_NO_TURN: Final = frozenset({"agent_answer", "agent_escalate", "agent_stop", "agent_take_over", "agent_delete"})
"""The drive tools a draining service still takes: they end or hold work, or answer a request a turn waits on
(a turn the drain may be waiting for), and start no new turn. The others (create, enqueue, task, hand back,
fire) answer 503, so that the work goes to another service."""


def may_call(tool: Tool, access: str) -> bool:
    """Whether a caller of `access` may call `tool`: a read-only token only the tools that change nothing."""
    return access == "full" or tool.reads_only


def refusal_for(state: ServiceState, tool: Tool | None, access: str) -> dict[str, Any] | None:
    """Why this caller may not call `tool` now, or None (an unknown tool is left to `call_tool`)."""
    if tool is None:
        return None
    if not may_call(tool, access):
        return error(
            "forbidden",
            f"{tool.name} is not a read tool; this caller (a read-only token, or `agentwatch mcp --read-only`) calls "
            "only the read tools",
        )
    if tool.grant is not None and not tool.reads_only and tool.name not in STARTS_NO_TURN and state.draining:
        return error("unavailable", f"the service is draining for a restart; call {tool.name} again in a moment")
    return None


def _json(answer: dict[str, Any], status: int | None = None, headers: dict[str, str] | None = None) -> Response:
    # pydantic-core's encoder: the same compact UTF-8 JSON as json.dumps, in a third of the time.
    body = to_json(answer, fallback=str)
    return Response(body, status_code=status or status_for(answer), media_type="application/json", headers=headers)


async def call_tool_endpoint(request: Request) -> Response:
    """`POST /api/tools/{name}` with the JSON arguments object (an empty body means `{}`)."""
    state: ServiceState = request.app.state.service
    name = request.path_params["name"]
    tool = state.engine.tools.get(name)
    refusal = refusal_for(state, tool, access_of(request.scope))
    if refusal is not None:
        return _json(refusal)
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    body = await request.body()
    if body.strip() and content_type != "application/json":
        return _json(error("unsupported_media_type", "send the arguments as `Content-Type: application/json`"))
    try:
        args = json.loads(body) if body.strip() else {}
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        return _json(error("invalid_argument", f"the body is not JSON we read ({exc}); send the arguments object"))
    if not isinstance(args, dict):
        return _json(error("invalid_argument", f"{name} takes a JSON object of arguments, got {json_kind(args)}"))
    answer = await answer_while_connected(state, tool, name, args, lambda: _disconnected(request))
    return _json(answer) if answer is not None else Response(status_code=499)


async def answer_while_connected(
    state: ServiceState,
    tool: Tool | None,
    name: str,
    args: dict[str, Any],
    hung_up: Callable[[], Awaitable[object]],
) -> dict[str, Any] | None:
    """The engine's answer to a call of `name`, or None once the caller hung up first (what `hung_up` makes
    returned). A read
    (a long `agent_await`, say) is then cancelled, not left waiting for nobody: a caller could otherwise pile up
    waits of an hour each. A change runs to its end, whoever still waits for it."""
    call = state.engine.call_tool(name, args)
    if tool is None or not tool.reads_only:
        return await call
    work = asyncio.ensure_future(call)
    gone = asyncio.ensure_future(hung_up())
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not work.done():
            work.cancel()
        gone.cancel()
    return work.result() if work.done() and not work.cancelled() else None


async def _disconnected(request: Request) -> None:
    """Return once the client hangs up (its body was read already: what comes next is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def list_tools_endpoint(request: Request) -> Response:
    """`GET /api/tools`: every callable tool with its description, argument schema and grant."""
    state: ServiceState = request.app.state.service
    access = access_of(request.scope)
    return _json(
        {
            "tools": [
                {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                    "grant": tool.grant,
                    "callable": may_call(tool, access),
                }
                for tool in callable_tools(state.engine.tools)
            ]
        }
    )


async def json_error(request: Request, exc: Exception) -> Response:
    """Starlette's HTTP errors (an unknown path, a wrong method) as structured errors."""
    status = getattr(exc, "status_code", 500)
    if status == 404:
        return _json(error("not_found", f"nothing at {request.url.path!r}; the tools are under /api/tools"), 404)
    if status == 405:  # (with the Allow header Starlette names the methods in)
        refused = error("method_not_allowed", f"{request.method} is not allowed on {request.url.path!r}")
        return _json(refused, 405, getattr(exc, "headers", None))
    if status < 500:
        return _json(error("bad_request", str(getattr(exc, "detail", "bad request"))), status)
    log.exception("unexpected error serving %s %s", request.method, request.url.path, exc_info=exc)
    return _json(error("internal", "the service failed on this request; the failure is logged"), 500)
