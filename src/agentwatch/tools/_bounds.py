"""The bounds every tool argument is checked against before anything reaches the store.

Each limit is one constant here, published in the tools' JSON schemas (`maxLength`, `maximum`, ...) and in the
tool contract's table in the docs. Text is refused when it holds a NUL character or a lone surrogate (neither
can be stored the same way on SQLite and PostgreSQL, nor encoded as UTF-8), so both backends answer alike.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Mapping
from functools import cache
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, JsonValue, StringConstraints, TypeAdapter, ValidationError

from agentwatch.errors import InvalidArgument
from agentwatch.events import MAX_POSITION

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
    "BoundedJson",
    "Count",
    "Cursor",
    "Id",
    "Name",
    "Prompt",
    "Text",
    "TypedName",
    "check_agent_name",
    "check_prompt",
    "check_text",
    "problem_text",
]

MAX_ID_CHARS = 128
"""An id (`ses_...`, `evt_...`, `trn_...`, `req_...`, `cnv_...`): ours are 30 characters."""
MAX_NAME_CHARS = 200
"""A name, role, scope, lineage key, display name, filter text or tool name."""
MAX_PROMPT_CHARS = 100_000
"""A prompt or task given to an agent."""
MAX_TEXT_CHARS = 10_000
"""A question, or one option of it."""
MAX_CURSOR_CHARS = 1024
"""A cursor as a previous answer returned it (ours are under 200 characters)."""
MAX_LIST_ITEMS = 50
"""Items of a list argument (statuses, words, sources, types, options)."""
MAX_JSON_DEPTH = 16
"""Nesting of a free JSON argument (an answer to a request)."""
MAX_JSON_ITEMS = 10_000
"""Values (scalars, lists, objects) in a free JSON argument."""
MAX_JSON_CHARS = 100_000
"""Characters of text (strings and keys) in a free JSON argument."""
MAX_SEQ = MAX_POSITION
"""The largest event sequence number a cursor may name (a signed 64-bit integer, as both stores keep it)."""
MAX_ANSWER_CHARS = 1_000_000
"""About how large an `agent_history` page or the events of an `agent_export` may grow before the answer is
cut (with `nextCursor`, or a `truncated` marker)."""


def check_text(value: str) -> str:
    """`value`, when it can be stored alike on every backend; a ValueError naming the problem otherwise."""
    if "\x00" in value:
        raise ValueError(f"text holds a NUL character at position {value.index(chr(0))}; send text without it")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"text holds a lone surrogate at position {exc.start}; send valid Unicode") from None
    return value


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("the text is blank (only whitespace); pass the words themselves")
    return value


_INVISIBLE = frozenset("\u200b\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\ufeff")
"""Characters that change how a name shows, or show nothing, without being part of a word (a zero-width space,
bidi controls, a byte-order mark); a joiner in an emoji or a Persian name is part of a word and allowed."""


def check_typed_name(value: str) -> str:
    """`value`, when it can be typed back as it shows: no whitespace around it, no control character and no
    invisible one (`_INVISIBLE`); a ValueError otherwise."""
    if not value.strip():
        raise ValueError("a name is empty (or only whitespace); give one, or leave it out")
    if value != value.strip():
        raise ValueError(f"a name has no whitespace around it, got {value!r}; send {value.strip()!r}")
    odd = next((c for c in value if c in _INVISIBLE or unicodedata.category(c) == "Cc"), None)
    if odd is not None:
        raise ValueError(
            f"a name holds U+{ord(odd):04X} (a control or invisible character) at position {value.index(odd)}, "
            "which cannot be typed back; use letters, digits, spaces and punctuation"
        )
    return value


def check_agent_name(value: str) -> str:
    """`value`, when it can name an agent: typed back as it shows (`check_typed_name`) and never taken for an
    id (`ses_...`); a ValueError otherwise."""
    check_typed_name(value)
    if value.startswith("ses_"):
        raise ValueError(f"{value!r} looks like an agent id (ses_...): a name cannot, or it could not be found by it")
    return value


def _not_a_boolean(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError(f"a number is wanted, got {str(value).lower()}; send the number itself")
    return value


Count = Annotated[int, BeforeValidator(_not_a_boolean)]
"""A whole number argument (a limit, a timeout): what pydantic takes for an int ("5" too), but never a boolean
(`true` would be 1)."""
Id = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ID_CHARS), AfterValidator(check_text)]
"""An id: 1..128 characters."""
Name = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME_CHARS), AfterValidator(check_text)]
"""A name, role, scope or key: 1..200 characters."""
AgentName = Annotated[Name, AfterValidator(check_agent_name)]
"""An agent's name: a `Name` that can be typed back and is never taken for an id (`check_agent_name`)."""
TypedName = Annotated[Name, AfterValidator(check_typed_name)]
"""A name shown to people (who took an agent over, an agent's display name): a `Name` that can be typed back
(`check_typed_name`)."""
Prompt = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_PROMPT_CHARS),
    AfterValidator(check_text),
    AfterValidator(_not_blank),
]
"""A prompt: 1..100,000 characters, not only whitespace."""


@cache
def _prompt_adapter() -> TypeAdapter[str]:
    return TypeAdapter(Prompt)  # built on first use: importing the tools builds no validator


def problem_text(error: Mapping[str, Any]) -> str:
    """One of pydantic's validation errors (`ValidationError.errors()`) in our words, where pydantic's read
    like its internals ("String should have at least 1 character" for a text left empty)."""
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown argument"
    if kind == "string_too_short" and (error.get("ctx") or {}).get("min_length") == 1:
        return "the text is empty; pass the words themselves"
    return str(error["msg"]).removeprefix("Value error, ")


def check_prompt(text: str) -> str:
    """`text`, when it is a `Prompt` (what the tools take); `InvalidArgument` naming the problem otherwise. For
    the Python API, which takes a prompt without a tool's argument model."""
    try:
        return _prompt_adapter().validate_python(text)
    except ValidationError as exc:
        problem = problem_text(exc.errors(include_input=False, include_url=False)[0])
        raise InvalidArgument(f"prompt: {problem}", fields=["prompt"]) from None


Cursor = Annotated[str, StringConstraints(min_length=1, max_length=MAX_CURSOR_CHARS), AfterValidator(check_text)]
"""A cursor a previous answer returned: 1..1024 characters (its content is checked where it is decoded)."""
Text = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_TEXT_CHARS),
    AfterValidator(check_text),
    AfterValidator(_not_blank),
]
"""A question or an option of it: 1..10,000 characters, not only whitespace."""


def _check_json(value: object) -> object:
    """Walk a free JSON value without recursion: depth, size, text and numbers within bounds."""
    stack: list[tuple[object, int]] = [(value, 1)]
    items = chars = 0
    while stack:
        node, depth = stack.pop()
        items += 1
        if depth > MAX_JSON_DEPTH:
            raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
        if items > MAX_JSON_ITEMS:
            raise ValueError(f"JSON of more than {MAX_JSON_ITEMS} values")
        if isinstance(node, str):
            chars += len(node)
            check_text(node)
        elif isinstance(node, bool) or node is None:
            pass
        elif isinstance(node, int):
            if abs(node) > MAX_SEQ:
                raise ValueError("a JSON integer beyond 64 bits")
        elif isinstance(node, float):
            if not math.isfinite(node):
                raise ValueError("a JSON number must be finite (no NaN or infinity)")
        elif isinstance(node, list | tuple):
            stack += [(item, depth + 1) for item in node]
        elif isinstance(node, dict):
            for key, item in node.items():
                if not isinstance(key, str):
                    raise ValueError("JSON object keys must be strings")
                chars += len(key)
                check_text(key)
                stack.append((item, depth + 1))
        else:
            raise ValueError(f"{type(node).__name__} is not a JSON value")
        if chars > MAX_JSON_CHARS:
            raise ValueError(f"JSON holding more than {MAX_JSON_CHARS} characters of text")
    return value


BoundedJson = Annotated[JsonValue, BeforeValidator(_check_json)]
"""Any JSON value, at most 16 deep, 10,000 values and 100,000 characters of text."""
