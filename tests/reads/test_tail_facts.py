"""How the tail finds the row of a payload: by its class, then by the classes it derives from."""

from __future__ import annotations

from agentwatch.events import PAYLOAD_TYPES, ToolResult
from agentwatch.reads.tail import _FACTS, _facts


class _LoudResult(ToolResult):
    pass


def test_a_payload_of_a_class_derived_from_one_with_a_row_reads_as_that_one() -> None:
    plain = ToolResult(tool_call_id="call_1", tool_name="read_file", output="notes", status="error")
    derived = _LoudResult(tool_call_id="call_1", tool_name="read_file", output="notes", status="error")
    assert _facts(derived) == _facts(plain) == ("read_file", "read_file", "notes", "error")


def test_every_row_is_for_a_payload_type() -> None:
    assert set(_FACTS) <= set(PAYLOAD_TYPES.values())
