"""One shape for every tool: built-in (ask_user), drive (agent_task, ...), read and user tools.

It lives below the runtime so that `agentwatch.reads` can declare its tools without importing the runtime;
`agentwatch.runtime.tools.base` re-exports it.

A tool has one name and one JSON schema everywhere: as an agent's tool call, `engine.call_tool(name, args)`,
MCP, HTTP and the CLI. Its arguments and its answer are pydantic models on one base, `Wire`, whose single
alias rule spells every field in camelCase on the wire (`afterId`, `maxChars`, `agentId`); the answer is
dumped to JSON once, by the tool's handler (`dump`). Every argument has a bound (`MAX_*`), checked before
anything reaches the store; a bad argument is an `InvalidArgument` that names the field and says why.
`tool_schemas` lists every tool with its input and output schema, as the service serves them.
"""

from __future__ import annotations

from agentwatch.tools._bounds import (
    MAX_ANSWER_CHARS,
    MAX_CURSOR_CHARS,
    MAX_ID_CHARS,
    MAX_JSON_CHARS,
    MAX_JSON_DEPTH,
    MAX_JSON_ITEMS,
    MAX_LIST_ITEMS,
    MAX_NAME_CHARS,
    MAX_PROMPT_CHARS,
    MAX_SEQ,
    MAX_TEXT_CHARS,
    AgentName,
    BoundedJson,
    Count,
    Cursor,
    Id,
    Name,
    Prompt,
    Text,
    TypedName,
    check_agent_name,
    check_prompt,
    check_text,
)
from agentwatch.tools._schema import tool_schemas
from agentwatch.tools._tool import (
    Caller,
    FunctionArgs,
    Tool,
    ToolHandler,
    call_tool,
    check_schema_args,
    function_tool,
    json_kind,
    json_tool,
    parse_args,
    typed_tool,
)
from agentwatch.tools._wire import Answer, Args, Wire, dump, omitted

__all__ = [
    "MAX_ANSWER_CHARS",
    "MAX_CURSOR_CHARS",
    "MAX_ID_CHARS",
    "MAX_JSON_CHARS",
    "MAX_JSON_DEPTH",
    "MAX_JSON_ITEMS",
    "MAX_LIST_ITEMS",
    "MAX_NAME_CHARS",
    "MAX_PROMPT_CHARS",
    "MAX_SEQ",
    "MAX_TEXT_CHARS",
    "AgentName",
    "Answer",
    "Args",
    "BoundedJson",
    "Caller",
    "Count",
    "Cursor",
    "FunctionArgs",
    "Id",
    "Name",
    "Prompt",
    "Text",
    "Tool",
    "ToolHandler",
    "TypedName",
    "Wire",
    "call_tool",
    "check_agent_name",
    "check_prompt",
    "check_schema_args",
    "check_text",
    "dump",
    "function_tool",
    "json_kind",
    "json_tool",
    "omitted",
    "parse_args",
    "tool_schemas",
    "typed_tool",
]
