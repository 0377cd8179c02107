"""The OpenAPI document of the HTTP surface, generated from the tools' own JSON schemas.

`docs/openapi.json` is this document for an engine with the built-in tools; a test regenerates it and
fails on drift. Regenerate it with
`python -c "from agentwatch.service.openapi import main; main()" > docs/openapi.json`.
"""

from __future__ import annotations

import asyncio
import copy
import json
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from agentwatch import __version__
from agentwatch.service._wire import STATUS_BY_CODE
from agentwatch.service.api import callable_tools
from agentwatch.tools import Tool

__all__ = ["openapi_document"]

_ERROR_STATUSES = ("400", "401", "403", "404", "409", "413", "415", "422", "500", "503")


def openapi_document(tools: Iterable[Tool], *, version: str = __version__) -> dict[str, Any]:
    """OpenAPI 3.1 for `/api/tools`, each tool's `POST /api/tools/{name}`, and the attach stream."""
    components: dict[str, Any] = {
        "Error": {
            "type": "object",
            "required": ["error"],
            "properties": {
                "error": {
                    "type": "object",
                    "required": ["code", "message"],
                    "properties": {
                        "code": {"type": "string", "enum": [*sorted(STATUS_BY_CODE), "internal"]},
                        "message": {"type": "string"},
                        "details": {"type": "object"},
                    },
                }
            },
        }
    }
    error_responses = {
        status: {
            "description": "A refused call",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
        }
        for status in _ERROR_STATUSES
    }
    health = {"type": "object", "properties": {k: {"type": "string"} for k in ("status", "store", "live")}}
    paths: dict[str, Any] = {
        "/api/health": {
            "get": {
                "operationId": "health",
                "summary": "ok when the store and the live ring answer; draining or unavailable otherwise (no token)",
                "responses": {
                    status: {"description": text, "content": {"application/json": {"schema": health}}}
                    for status, text in (("200", "Ready"), ("503", "Draining, or the store or the live ring failing"))
                },
            }
        },
        "/api/health/live": {
            "get": {
                "operationId": "alive",
                "summary": "200 while the process serves, draining included: a liveness probe (no token)",
                "responses": {"200": {"description": "Alive", "content": {"application/json": {}}}},
            }
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus metrics of this service: turns, model requests, tokens, spend, tool calls",
                "responses": {"200": {"description": "The metrics", "content": {"text/plain": {}}}},
            }
        },
        "/api/tools": {
            "get": {
                "operationId": "list_tools",
                "summary": "Every tool with its description, argument schema and grant",
                "responses": {"200": {"description": "The tools", "content": {"application/json": {}}}},
            }
        },
        "/api/agents/{id}/events": {
            "get": {
                "operationId": "attach",
                "summary": "Live attach: a snapshot then every later event (SSE; the same path takes a WebSocket)",
                "parameters": [
                    {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}},
                    {"name": "after", "in": "query", "required": False, "schema": {"type": "string"}},
                    {"name": "Last-Event-ID", "in": "header", "required": False, "schema": {"type": "string"}},
                ],
                "responses": {
                    "200": {"description": "The event stream", "content": {"text/event-stream": {}}},
                    "204": {"description": "A reconnect after the deleted agent's last event: nothing more comes"},
                    **{s: error_responses[s] for s in ("400", "401", "403", "404")},
                },
            }
        },
    }
    for tool in sorted(tools, key=lambda t: t.name):
        if tool.asks_user:
            continue
        arguments = _hoisted(components, f"{tool.name}.args", f"{tool.name}.", tool.parameters)
        answer = {"type": "object"}  # (a function tool whose answer is not modelled)
        if tool.output_schema is not None:
            answer = _hoisted(components, f"{tool.name}.answer", f"{tool.name}.answer.", tool.output_schema)
        operation: dict[str, Any] = {
            "operationId": tool.name,
            "summary": tool.description.split("\n", 1)[0],
            "description": tool.description,
            "requestBody": {
                # An empty body is `{}`: needed only when the tool has required arguments.
                "required": bool(tool.parameters.get("required")),
                "content": {"application/json": {"schema": arguments}},
            },
            "responses": {
                "200": {"description": "The tool's answer", "content": {"application/json": {"schema": answer}}},
                **error_responses,
            },
        }
        if tool.grant is not None:
            operation["x-agentwatch-grant"] = tool.grant
        paths[f"/api/tools/{tool.name}"] = {"post": operation}
    return {
        "openapi": "3.1.0",
        "info": {"title": "agentwatch", "version": version},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"token": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{}, {"token": []}],
    }


def _hoisted(components: dict[str, Any], name: str, prefix: str, schema: Mapping[str, Any]) -> dict[str, str]:
    """Put `schema` among the `components` as `name`, its `$defs` beside it (each as `<prefix><def>`); a
    reference to it."""
    body = copy.deepcopy(dict(schema))
    defs = body.pop("$defs", None)
    for def_name, definition in sorted((defs if isinstance(defs, dict) else {}).items()):
        components[prefix + def_name] = _rebase(definition, prefix)
    components[name] = _rebase(body, prefix)
    return {"$ref": f"#/components/schemas/{name}"}


def _rebase(node: Any, prefix: str) -> Any:
    """Point `#/$defs/X` references at the hoisted `#/components/schemas/<prefix>X`."""
    if isinstance(node, dict):
        out = {key: _rebase(value, prefix) for key, value in node.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            out["$ref"] = f"#/components/schemas/{prefix}{ref[len('#/$defs/') :]}"
        return out
    if isinstance(node, list):
        return [_rebase(item, prefix) for item in node]
    return node


async def _default_document() -> dict[str, Any]:
    from agentwatch.runtime.engine import Engine

    with tempfile.TemporaryDirectory() as root:
        store = f"sqlite:///{Path(root) / 'openapi.db'}"
        async with Engine.open(store, root=root, agents_dir=Path(root) / "agents", recover=False) as engine:
            return openapi_document(callable_tools(engine.tools))


def main() -> None:
    """Print the document for an engine with the built-in tools."""
    sys.stdout.write(json.dumps(asyncio.run(_default_document()), indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
