"""The wire format of every tool: one base class, one camelCase alias rule, one dump at the boundary.

Arguments and answers are pydantic models derived from `Wire`. A field is named in Python's snake_case and
spelled on the wire by `to_camel` (`max_chars` → `maxChars`); a field may still be passed by its Python
name (`agent_id` for `agentId`). Answers are dumped once, where a tool call leaves the engine
(`Tool.handler`), with `dump`: by alias, in JSON mode, and with the fields declared `Omitted` left out when
they are None (the contract's optional parts: `counts`, `words`, `byRole`, `against`, `truncated`). Every
other None is sent as `null`, so a reader always finds the same keys.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = ["Answer", "Args", "Wire", "dump", "omitted"]


class Wire(BaseModel):
    """Base of every tool argument and answer model: snake_case in Python, camelCase on the wire."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class Args(Wire):
    """Base of tool argument models: unknown arguments are refused, documented names are aliases."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Answer(Wire):
    """Base of tool answer models. Built by the tool from its own typed values, so not validated again on
    the way out; `dump` gives the JSON the caller receives."""

    model_config = ConfigDict(extra="forbid")


def _is_none(value: object) -> bool:
    return value is None


def omitted(description: str) -> Any:
    """A field left out of the answer when it is None (instead of sent as `null`)."""
    return Field(None, description=description, exclude_if=_is_none)


def dump(answer: BaseModel) -> dict[str, Any]:
    """The JSON object an answer is on the wire: by alias, JSON types, `omitted()` fields dropped when None."""
    return answer.model_dump(mode="json", by_alias=True)
