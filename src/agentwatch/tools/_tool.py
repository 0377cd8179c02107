"""One shape for every tool: built-in (ask_user), drive (agent_task, ...), read and user tools.

It lives below the runtime so that `agentwatch.reads` can declare its tools without importing the runtime;
`agentwatch.runtime.tools.base` re-exports it.

A tool has one name and one JSON schema everywhere: as an agent's tool call, `engine.call_tool(name, args)`,
MCP, HTTP and the CLI. Arguments are validated by a pydantic model whose aliases spell the documented names
(`afterId`, `maxChars`, `agent_id`, ...); a bad argument is an `InvalidArgument` that says which and why.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError, create_model

from agentwatch.errors import InvalidArgument, UserError

__all__ = ["Args", "Caller", "Tool", "ToolHandler", "function_tool", "parse_args"]


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling a tool: an agent's turn, or nobody (Python, the CLI, the API)."""

    session_id: str | None = None
    """The calling session."""
    turn_id: str | None = None
    """The calling turn."""
    tool_call_id: str | None = None
    """The model's id for the call."""
    scope: str | None = None
    """The chat the call comes from (a chat's own agent wins name resolution)."""


ToolHandler = Callable[[Any, Caller, dict[str, Any]], Awaitable[JsonValue]]
"""`async (engine, caller, args) -> JSON`. The engine is typed `Any` here because this module sits below the
runtime; each family of tools states the engine surface it needs (the runtime's `Engine`, the reads'
`EngineView`)."""


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool as agents, Python and every surface see it."""

    name: str
    description: str
    parameters: dict[str, JsonValue]
    """JSON schema of the arguments object."""
    handler: ToolHandler
    grant: str | None = None
    """The capability a calling agent's role needs (`spawn`); None for grant-free tools."""
    requires_approval: bool = False
    """A person approves each call made by an agent before it runs."""
    asks_user: bool = False
    """The call is a question to a person; the answer is its result (`ask_user`)."""


class Args(BaseModel):
    """Base of tool argument models: unknown arguments are refused, documented names are aliases."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


A = TypeVar("A", bound=Args)


def parse_args(model: type[A], tool_name: str, args: object) -> A:
    """Validate `args` for `tool_name`; every problem is named in one `InvalidArgument`."""
    if not isinstance(args, dict):
        raise InvalidArgument(f"{tool_name} takes a JSON object of arguments, got {type(args).__name__}")
    try:
        return model.model_validate(args)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "arguments"
            message = "unknown argument" if err["type"] == "extra_forbidden" else err["msg"]
            problems.append(f"{where}: {message}")
        fields = ", ".join((info.alias or name) for name, info in model.model_fields.items())
        raise InvalidArgument(
            f"bad arguments for {tool_name}: {'; '.join(problems)} (it takes: {fields})",
            problems=problems,
        ) from None


def function_tool(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
) -> Tool:
    """A tool from a plain Python function (sync or async); its signature's type hints give the schema.

    ```python
    def read_file(path: str) -> str:
        "Read a text file of the project."
        return Path(path).read_text()

    engine.add_tool(function_tool(read_file))
    ```
    """
    tool_name = name or fn.__name__
    signature = inspect.signature(fn)
    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise UserError(f"tool function {tool_name!r} cannot take *args or **kwargs")
        annotation = param.annotation if param.annotation is not inspect.Parameter.empty else Any
        default = param.default if param.default is not inspect.Parameter.empty else ...
        fields[param.name] = (annotation, default)
    model = create_model(f"{tool_name}_args", __base__=Args, **fields)
    doc = description or inspect.getdoc(fn) or f"Run {tool_name}."

    async def handler(engine: Any, caller: Caller, args: dict[str, Any]) -> JsonValue:
        parsed = parse_args(model, tool_name, args)
        result = fn(**{key: getattr(parsed, key) for key in fields})
        if inspect.isawaitable(result):
            result = await result
        return result  # type: ignore[no-any-return]

    schema = model.model_json_schema()
    schema.pop("title", None)
    return Tool(tool_name, doc, schema, handler, requires_approval=requires_approval)
