"""One wire format: every built-in tool's arguments and answer are models, and what a call returns is exactly
its answer model dumped, valid against the output schema that `tool_schemas` publishes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import jsonschema
import pytest

from agentwatch.errors import InvalidArgument, UserError
from agentwatch.reads.answers import SessionRow, StatusSnapshot
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.runtime.tools import builtin_tools
from agentwatch.tools import (
    Answer,
    Args,
    Tool,
    Wire,
    check_schema_args,
    dump,
    function_tool,
    omitted,
    tool_schemas,
)
from tests.runtime.support import OpenEngine, Scripted, role

if TYPE_CHECKING:
    from decimal import Decimal

CAMEL = re.compile(r"^[a-z][a-zA-Z0-9]*$")


def test_tool_schemas_lists_every_tool_with_both_schemas() -> None:
    listed = tool_schemas(builtin_tools())
    assert [entry["name"] for entry in listed] == sorted(tool.name for tool in builtin_tools())
    for entry in listed:
        assert set(entry) == {"name", "description", "inputSchema", "outputSchema"}
        assert entry["description"]
        for schema in (entry["inputSchema"], entry["outputSchema"]):
            assert isinstance(schema, dict)
            jsonschema.Draft202012Validator.check_schema(schema)
        inputs = entry["inputSchema"]
        assert isinstance(inputs, dict) and inputs["type"] == "object"
        assert inputs.get("additionalProperties") is False, entry["name"]


def test_every_argument_and_answer_field_is_spelled_in_camel_case() -> None:
    def names(schema: Any) -> list[str]:
        found: list[str] = []
        if isinstance(schema, dict):
            for key, value in schema.items():
                if key == "properties" and isinstance(value, dict):
                    found += list(value)
                found += names(value)
        elif isinstance(schema, list):
            for item in schema:
                found += names(item)
        return found

    stored = {"payload", "contextFill", "interception", "origin", "requests", "usage"}  # stored state, as stored
    for tool in builtin_tools():
        assert tool.args_model is not None and issubclass(tool.args_model, Args), tool.name
        assert tool.answer_model is not None, tool.name
        wrong = [n for n in names(tool.parameters) + names(tool.output_schema) if not CAMEL.match(n)]
        assert wrong == [], (tool.name, wrong)
        assert stored.isdisjoint(n for n in names(tool.parameters)), tool.name


def test_the_wire_base_aliases_fields_and_leaves_out_only_omitted_nones() -> None:
    class Row(Answer):
        max_chars: int
        last_text: str | None
        counts: int | None = omitted("only when asked")

    assert dump(Row(max_chars=3, last_text=None)) == {"maxChars": 3, "lastText": None}
    assert dump(Row(max_chars=3, last_text="x", counts=2)) == {"maxChars": 3, "lastText": "x", "counts": 2}
    assert Row.model_validate({"max_chars": 1, "lastText": None}).max_chars == 1  # the Python name is accepted
    assert issubclass(Row, Wire) and issubclass(Args, Wire)


def test_a_function_tool_keeps_its_parameter_names_and_documents_its_return_type() -> None:
    def read_file(file_path: str, max_lines: int = 10) -> list[str]:
        """Read lines of a file."""
        return []

    tool = function_tool(read_file)
    assert sorted(tool.parameters["properties"]) == ["file_path", "max_lines"]  # type: ignore[arg-type]
    assert tool.output_schema == {"items": {"type": "string"}, "type": "array"}


def open_file(path: Path, mode: Literal["read", "append"] = "read") -> Path:
    """Open a file of the project."""
    return path


def price(amount: Decimal) -> str:
    return str(amount)


def test_a_function_tool_of_a_module_with_postponed_annotations_resolves_them_where_it_was_written() -> None:
    # This module has `from __future__ import annotations`: the hints are strings naming its own imports.
    tool = function_tool(open_file)
    assert tool.parameters["properties"] == {  # type: ignore[index]
        "path": {"format": "path", "title": "Path", "type": "string"},
        "mode": {"default": "read", "enum": ["read", "append"], "title": "Mode", "type": "string"},
    }
    assert tool.output_schema == {"format": "path", "type": "string"}


def test_a_function_tool_whose_hint_does_not_resolve_says_which_and_what_to_do() -> None:
    with pytest.raises(UserError) as raised:
        function_tool(price)
    assert str(raised.value) == (
        "tool function 'price': the type hint 'Decimal' of its parameter 'amount' does not resolve (name "
        "'Decimal' is not defined); import what it names at the top of its module, not under TYPE_CHECKING"
    )


def lookup(key: str) -> str:
    return f"value of {key}"


def test_a_tool_checks_arguments_without_running_as_its_handler_would_and_a_bare_schema_is_checked_too() -> None:
    def delete_file(path: str) -> str:
        raise AssertionError("a check runs nothing")

    typed = function_tool(delete_file)
    typed.check_args({"path": "a.txt"})
    with pytest.raises(InvalidArgument) as refused:
        typed.check_args({"path": 3, "force": True})
    assert refused.value.details == {
        "problems": ["path: Input should be a valid string", "force: unknown argument"],
        "fields": ["force", "path"],
    }
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    }
    bare = Tool("add", "Add two integers.", schema, typed.handler)
    bare.check_args({"a": 1, "b": 2})
    with pytest.raises(InvalidArgument) as refused:
        bare.check_args({"a": "x" * 1000})
    assert refused.value.message.startswith("bad arguments for add: a: 'xxx")
    problems = refused.value.details["problems"]
    assert problems[1] == "arguments: 'b' is a required property" and len(problems[0]) < 210
    assert refused.value.details["fields"] == ["a", "arguments"]
    with pytest.raises(InvalidArgument, match="add takes a JSON object of arguments, got an array"):
        check_schema_args(schema, "add", [1, 2])
    check_schema_args({"type": "not a type"}, "add", {"a": 1})  # (a server's broken schema: the server decides)


async def test_every_answer_is_its_model_dumped_and_valid_against_its_output_schema(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    model = scripted(
        "wire",
        ScriptedModel(function=lambda ctx: Reply("done") if ctx.tool_results else CallTool("lookup", {"key": "a"})),
    )
    asker = scripted("wire-ask", ScriptedModel([CallTool("ask_user", {"question": "Which?"}), Reply("thanks")]))
    definitions = [
        role("chat", model, tools=("lookup",)),
        role("asker", asker, tools=("ask_user",)),
    ]
    async with open_engine(*definitions, tools=[lookup]) as engine:
        schemas = {entry["name"]: entry["outputSchema"] for entry in tool_schemas(engine.tools.values())}
        task = await engine.call_tool("agent_task", {"role": "chat", "prompt": "look it up", "name": "looker"})
        sid = task["agentId"]
        asking = await engine.call_tool("agent_create", {"role": "asker", "prompt": "ask", "name": "ask"})
        waited = await engine.call_tool("agent_await", {"agentId": asking["agentId"], "timeoutMs": 10_000})
        calls: list[tuple[str, dict[str, Any]]] = [
            ("agent_list", {"counts": True}),
            ("agent_list", {"group": "lineage", "limit": 1}),
            ("agent_summary", {"words": True, "by": "role"}),
            ("agent_get", {"id": sid}),
            ("agent_get", {"name": "ask"}),
            ("agent_history", {"id": sid, "limit": 2}),
            ("agent_tail", {"id": sid}),
            ("agent_prompt", {"id": sid, "against": "previous"}),
            ("agent_prompt", {"id": sid, "against": "definition"}),
            ("agent_export", {"id": sid}),
            ("agent_enqueue", {"agentId": sid, "prompt": "again"}),
            ("agent_await", {"agentId": sid}),
            ("agent_answer", {"hitlId": waited["pendingHitl"]["hitlId"], "answer": "the first"}),
            ("agent_delete", {"id": sid}),
        ]
        answers = [("agent_task", task), ("agent_create", asking), ("agent_await", waited)]
        for name, args in calls:
            answers.append((name, await engine.call_tool(name, args)))
        for name, answer in answers:
            assert set(answer) != {"error"}, (name, answer)
            jsonschema.validate(answer, schemas[name])
            answer_model = engine.tools[name].answer_model
            assert answer_model is not None
            assert dump(answer_model.model_validate(answer)) == answer, name
        # The one shape of a session: a listing row is the record's first fields.
        row = (await engine.call_tool("agent_list", {"deleted": True}))["agents"][0]
        assert set(row) == {field.alias or name for name, field in SessionRow.model_fields.items()}
        assert set(waited) == {field.alias or name for name, field in StatusSnapshot.model_fields.items()}


@pytest.mark.parametrize(
    ("tool", "answer_model"),
    [(tool.name, tool.answer_model) for tool in builtin_tools()],
)
def test_every_answer_model_is_a_wire_model(tool: str, answer_model: type[Any] | None) -> None:
    assert answer_model is not None
    if tool != "ask_user":  # its answer is whatever JSON the person gave
        assert issubclass(answer_model, Answer)
