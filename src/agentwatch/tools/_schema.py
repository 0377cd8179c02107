"""Every tool's name, description and schemas, as the service serves them over HTTP and MCP."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import JsonValue

from agentwatch.tools._tool import Tool

__all__ = ["tool_schemas"]


def tool_schemas(tools: Iterable[Tool]) -> list[dict[str, JsonValue]]:
    """`[{name, description, inputSchema, outputSchema}]`, sorted by name (MCP's `tools/list` spelling).

    ```python
    for entry in tool_schemas(engine.tools.values()):
        print(entry["name"], sorted(entry["inputSchema"]["properties"]))
    ```

    `outputSchema` is None for a tool whose answer is not modelled (a function tool without a return type).
    """
    return [
        {
            "name": tool.name,
            "description": tool.description,
            "inputSchema": tool.parameters,
            "outputSchema": tool.output_schema,
        }
        for tool in sorted(tools, key=lambda tool: tool.name)
    ]
