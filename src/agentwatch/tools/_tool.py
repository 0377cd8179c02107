"""The `Tool` shape, the typed tool constructor, function tools and the one boundary every call crosses."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar, cast, overload

from pydantic import BaseModel, ConfigDict, JsonValue, TypeAdapter, ValidationError, create_model

from agentwatch.errors import AgentwatchError, InvalidArgument, NotFound, ToolError, UserError
from agentwatch.pacing import Mailboxes
from agentwatch.tools._bounds import MAX_NAME_CHARS, problem_text
from agentwatch.tools._wire import dump
from agentwatch.tools._workers import run_in_worker

__all__ = [
    "Caller",
    "FunctionArgs",
    "Tool",
    "ToolHandler",
    "call_tool",
    "check_schema_args",
    "function_tool",
    "json_kind",
    "json_tool",
    "parse_args",
    "typed_tool",
]

log = logging.getLogger(__name__)


_mailboxes = Mailboxes()
"""The sync tools' own mailbox of each loop (their callers go on to a model request: dear ones)."""


async def _in_thread(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """Run a sync tool in a worker thread; its caller resumes among a mailbox's chunks, a few per loop turn.

    A thread's outcome otherwise wakes its caller in the next loop turn, and the outcomes of many tools that
    finished while the loop was busy all at once: hundreds of turns then take their next steps (the tool's
    result, the next model request and its stream) in step, in the same loop turns, keeping the loop from
    everything else for the sum of them (with 1,000 turns at once, loop turns of 30-80 ms)."""
    value = await run_in_worker(fn, **kwargs)
    return await _mailboxes.of(asyncio.get_running_loop()).hand_back(value)


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
    run_id: str | None = None
    """The run the calling turn works for and bills (None: no run): work it sends an agent of that run is the
    run's, even when that agent's turn on it begins after the run ended."""


ToolHandler = Callable[[Any, Caller, dict[str, Any]], Awaitable[JsonValue]]
"""`async (engine, caller, args) -> JSON`: the raw boundary, JSON in and JSON out. The engine is typed `Any`
here because this module sits below the runtime; each family of tools states the engine surface it needs
(the runtime's `Runtime`, the reads' `EngineView`)."""


Schema = dict[str, JsonValue]
"""A JSON schema."""
S = TypeVar("S")


class _SchemaField(Generic[S]):
    """A `Tool` field that holds a JSON schema, or a function that makes it when the field is first read.

    A typed tool's schemas come from its models, and making them costs milliseconds a tool: most processes
    (a CLI command, an engine whose agents call a few tools) never read most of them.
    """

    def __init__(self, *, required: bool) -> None:
        self.required = required
        self.key = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = f"_{name}"

    @overload
    def __get__(self, tool: None, owner: type) -> S: ...
    @overload
    def __get__(self, tool: Tool, owner: type | None = None) -> S: ...
    def __get__(self, tool: Tool | None, owner: type | None = None) -> S:
        if tool is None:  # the dataclass asks for the field's default
            if self.required:
                raise AttributeError(self.key[1:])
            return cast(S, None)
        value = tool.__dict__[self.key]
        if callable(value):
            value = value()
            tool.__dict__[self.key] = value
        return cast(S, value)

    def __set__(self, tool: Tool, value: S | Callable[[], S]) -> None:
        tool.__dict__[self.key] = value


@dataclass(frozen=True)
class Tool:
    """A tool as agents, Python and every surface see it.

    `parameters` and `output_schema` may be given as functions that make the schema: each runs once, when
    the schema is first read (`typed_tool` does this).
    """

    name: str
    description: str
    parameters: _SchemaField[Schema] = _SchemaField(required=True)
    """JSON schema of the arguments object."""
    handler: ToolHandler  # type: ignore[misc]  # `parameters` has no default: its field raises when asked for one
    grant: str | None = None
    """The capability a calling agent's role needs (`spawn`); None for grant-free tools."""
    requires_approval: bool = False
    """A person approves each call made by an agent before it runs."""
    asks_user: bool = False
    """The call is a question to a person; the answer is its result (`ask_user`)."""
    agents_only: bool = False
    """Only an agent calls it, from inside its turn (`ObserverReport`): the service does not offer it (nor an
    `asks_user` tool)."""
    reads_only: bool = False
    """The tool changes nothing (the read tools): a read-only token of the service may call it. A tool of the
    project's own is not one, whatever its grant."""
    args_model: type[BaseModel] | None = None
    """The model its arguments are validated by (None for a tool built from a bare schema)."""
    answer_model: type[BaseModel] | None = None
    """The model of its answer, before it is dumped to JSON (None when the answer is not modelled)."""
    output_schema: _SchemaField[Schema | None] = _SchemaField(required=False)
    """JSON schema of the answer (None when unknown)."""

    def check_args(self, args: object) -> None:
        """Raise `InvalidArgument` for arguments its handler would refuse, without running anything: by its
        `args_model`, or (a tool built from a bare schema) against `parameters`. A call a person is to approve
        is checked so before the person is asked."""
        if self.args_model is not None:
            parse_args(self.args_model, self.name, args)
        else:
            check_schema_args(self.parameters, self.name, args)


class FunctionArgs(BaseModel):
    """Base of a function tool's argument model: the function's own parameter names, unknown ones refused.

    A user's function names its parameters; they are its wire names as written (no camelCase alias).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)


A = TypeVar("A", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)


def json_kind(value: object) -> str:
    """What JSON value `value` is, in JSON's words (`an array`, `null`), for an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    kinds = ((dict, "an object"), (list, "an array"), (str, "a string"), ((int, float), "a number"))
    return next((kind for types, kind in kinds if isinstance(value, types)), type(value).__name__)


def _shown(part: object) -> str:
    """A location part as an error message shows it: short, printable, whatever it was."""
    text = part if isinstance(part, str) else repr(part)
    text = text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")
    return text if len(text) <= 64 else text[:61] + "..."


def parse_args(model: type[A], tool_name: str, args: object) -> A:
    """Validate `args` for `tool_name`; every problem is named in one `InvalidArgument`.

    `details.fields` lists the arguments at fault, by their wire names.
    """
    if not isinstance(args, dict):
        raise InvalidArgument(
            f"{tool_name} takes a JSON object of arguments, got {json_kind(args)}", fields=["arguments"]
        )
    try:
        return model.model_validate(args)
    except ValidationError as exc:
        errors = exc.errors(include_input=False, include_url=False)
        found = [(err["loc"], problem_text(err)) for err in errors]
        accepted = [(info.alias or name) for name, info in model.model_fields.items()]
        raise _bad_arguments(tool_name, found, accepted) from None


def check_schema_args(schema: Schema, tool_name: str, args: object) -> None:
    """Validate `args` for `tool_name` against its JSON `schema` (a tool server's `inputSchema`): every problem
    is named in one `InvalidArgument`, as `parse_args` names them.

    Nothing is checked against a schema that is not a valid one: the tool itself still refuses what it cannot
    take, when it runs. (`jsonschema` is imported here, by the first such check: most processes make none.)
    """
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    if not isinstance(args, dict):
        raise InvalidArgument(
            f"{tool_name} takes a JSON object of arguments, got {json_kind(args)}", fields=["arguments"]
        )
    validator = validator_for(schema)
    try:
        validator.check_schema(schema)
    except SchemaError:
        return  # (a server's own mistake: it decides on the arguments itself)
    found = [(tuple(err.absolute_path), _bounded(err.message)) for err in validator(schema).iter_errors(args)]
    if found:
        properties = schema.get("properties")
        raise _bad_arguments(tool_name, found, list(properties) if isinstance(properties, dict) else [])


def _bounded(text: str, limit: int = 200) -> str:
    """A problem's text, short: a JSON-schema message quotes the value at fault, whatever its size."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _bad_arguments(
    tool_name: str, found: Sequence[tuple[Sequence[object], str]], accepted: Sequence[str]
) -> InvalidArgument:
    """The error for the problems `found` (where each is, what is wrong) in the arguments of `tool_name`, which
    takes the arguments `accepted`. `details.fields` lists the arguments at fault, by their wire names."""
    problems, fields = [], []
    for loc, problem in found[:_PROBLEMS_SHOWN]:
        problems.append(f"{'.'.join(_shown(p) for p in loc) or 'arguments'}: {problem}")
        fields.append(_shown(loc[0]) if loc else "arguments")
    if len(found) > _PROBLEMS_SHOWN:  # (an answer never many times the size of the request)
        problems.append(f"and {len(found) - _PROBLEMS_SHOWN} more")
    return InvalidArgument(
        f"bad arguments for {tool_name}: {'; '.join(problems)} (it takes: {', '.join(accepted)})",
        problems=problems,
        fields=sorted(set(fields)),
    )


_PROBLEMS_SHOWN = 20
"""The problems of bad arguments an error names, at most."""


def _schema(model: type[BaseModel], mode: str) -> dict[str, JsonValue]:
    schema: dict[str, JsonValue] = model.model_json_schema(by_alias=True, mode=mode)  # type: ignore[arg-type]
    schema.pop("title", None)
    return schema


def typed_tool(
    name: str,
    description: str,
    run: Callable[[Any, Caller, A], Awaitable[R]],
    *,
    args: type[A],
    answer: type[R],
    grant: str | None = None,
    asks_user: bool = False,
    requires_approval: bool = False,
    reads_only: bool = False,
) -> Tool:
    """A tool whose arguments and answer are models: `run(engine, caller, args) -> answer`.

    The handler validates the JSON arguments into `args`, runs, and dumps the answer once (`dump`: by alias,
    `omitted()` fields left out when None); both schemas come from the models.
    """

    async def handler(engine: Any, caller: Caller, raw: dict[str, Any]) -> JsonValue:
        return dump(await run(engine, caller, parse_args(args, name, raw)))

    return _model_tool(
        name,
        description,
        handler,
        args,
        answer,
        grant=grant,
        requires_approval=requires_approval,
        asks_user=asks_user,
        reads_only=reads_only,
    )


def json_tool(
    name: str,
    description: str,
    run: Callable[[Any, Caller, A], Awaitable[dict[str, Any]]],
    *,
    args: type[A],
    answer: type[BaseModel],
    reads_only: bool = False,
) -> Tool:
    """`typed_tool` for a `run` that makes its answer as JSON itself, exactly as `dump` would give it from the
    `answer` model (an answer of many rows, where building a model per row only to dump it again would be
    most of the cost); both schemas still come from the models."""

    async def handler(engine: Any, caller: Caller, raw: dict[str, Any]) -> JsonValue:
        return await run(engine, caller, parse_args(args, name, raw))

    return _model_tool(name, description, handler, args, answer, reads_only=reads_only)


def _model_tool(
    name: str, description: str, handler: ToolHandler, args: type[BaseModel], answer: type[BaseModel], **options: Any
) -> Tool:
    return Tool(
        name,
        description,
        partial(_schema, args, "validation"),
        handler,
        args_model=args,
        answer_model=answer,
        output_schema=partial(_schema, answer, "serialization"),
        **options,
    )


async def call_tool(
    tools: Mapping[str, Tool], engine: Any, name: object, args: object, caller: Caller | None = None
) -> dict[str, Any]:
    """Call the tool `name` from outside a turn: its answer, or `{"error": {...}}`; never raises for a bad call,
    nor when the tool itself fails (`tool_failed`, its traceback logged).

    This is `engine.call_tool`; MCP, HTTP and the CLI go through it.
    """
    try:
        if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS:
            raise InvalidArgument(
                f"name: a tool name is a string of 1..{MAX_NAME_CHARS} characters, got {_shown(name)}",
                fields=["name"],
            )
        tool = tools.get(name)
        if tool is None:
            known = ", ".join(sorted(n for n, t in tools.items() if not (t.asks_user or t.agents_only)))
            raise NotFound(f"no tool named {_shown(name)!r}; the tools are: {known}")
        if tool.asks_user:
            raise InvalidArgument(f"{name} opens a request from inside an agent's turn; an agent calls it")
        result = await tool.handler(engine, caller or Caller(), args)  # type: ignore[arg-type]
    except AgentwatchError as exc:
        return exc.to_dict()
    except Exception as exc:  # the tool's own fault: its caller gets an answer, the log the traceback
        log.warning("tool %s raised", name, exc_info=exc)
        failed = ToolError(
            f"the tool {name!r} failed: {type(exc).__name__}: {exc}; the failure is in the tool (see the engine's "
            "log), not in the call"
        )
        return failed.to_dict()
    return result if isinstance(result, dict) else {"result": result}


def _resolved_hint(fn: Callable[..., Any], hint: Any) -> Any:
    """`hint` as a type: a string one (a module with `from __future__ import annotations`) evaluated in the
    globals of the module `fn` was written in, as `inspect.get_annotations(eval_str=True)` does. Left as a
    string, pydantic would look its names up in this module instead."""
    if not isinstance(hint, str):
        return hint
    written_in = getattr(inspect.unwrap(fn), "__globals__", None) or {}
    return eval(hint, written_in)  # (the function's own hint, as the standard library does)


def function_tool(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
) -> Tool:
    """A tool from a plain Python function (sync or async); its signature's type hints give the schema.

    A plain `def` runs in a worker thread (a daemon one: `agentwatch.tools._workers`), so a slow one never pauses other
    sessions; an `async def` runs on the event loop and must not block it.

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
        try:
            annotation = _resolved_hint(fn, param.annotation) if param.annotation is not param.empty else Any
        except Exception as exc:
            raise UserError(
                f"tool function {tool_name!r}: the type hint {param.annotation!r} of its parameter {param.name!r} "
                f"does not resolve ({exc}); import what it names at the top of its module, not under TYPE_CHECKING"
            ) from None
        default = param.default if param.default is not inspect.Parameter.empty else ...
        fields[param.name] = (annotation, default)
    model = create_model(f"{tool_name}_args", __base__=FunctionArgs, **fields)
    doc = description or inspect.getdoc(fn) or f"Run {tool_name}."
    is_async = inspect.iscoroutinefunction(fn)

    async def handler(engine: Any, caller: Caller, args: dict[str, Any]) -> JsonValue:
        parsed = parse_args(model, tool_name, args)
        kwargs = {key: getattr(parsed, key) for key in fields}
        result = await fn(**kwargs) if is_async else await _in_thread(fn, kwargs)
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, BaseModel):
            return dump(result)
        return result  # type: ignore[no-any-return]

    output: dict[str, JsonValue] | None = None
    try:  # (the answer's schema is documentation only: a return hint that does not resolve leaves it out)
        if signature.return_annotation is not signature.empty:
            returns = _resolved_hint(fn, signature.return_annotation)
            output = TypeAdapter(returns).json_schema(mode="serialization", by_alias=True)
    except Exception:
        output = None
    schema = model.model_json_schema()
    schema.pop("title", None)
    return Tool(
        tool_name, doc, schema, handler, requires_approval=requires_approval, args_model=model, output_schema=output
    )
