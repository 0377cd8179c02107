"""The envelope every event shares, and the small value types payloads are built from."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar, Literal, Self, cast

from pydantic import BaseModel, ConfigDict

__all__ = ["BasePayload", "Origin", "OriginKind", "Usage"]


class BasePayload(BaseModel):
    """The typed fact an event carries; subclasses set `type` and say whether they are durable."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    durable: ClassVar[bool] = True
    """Durable payloads are committed to the store before anyone sees them; ephemeral ones (deltas,
    progress) live only in the live ring and add up to a durable event."""

    @classmethod
    def trusted(cls, **values: Any) -> Self:
        """A payload built without validation, for a hot path whose values are valid by construction (the
        models adapter's completions, whose response is JSON the model layer dumped itself: validating it
        walks it node by node).

        Equal to `cls(**values)` given the same values, with the same defaults and the same fields set;
        an unknown or a missing field raises `TypeError`, but values are not checked: anything that may be
        wrong must go through `cls(...)`. (A small payload of plain values validates about as fast.)
        """
        shape = _SHAPES.get(cls) or _shape_of(cls)
        if not shape.required <= values.keys() <= shape.names:
            missing, unknown = shape.required - values.keys(), values.keys() - shape.names
            raise TypeError(f"{cls.__name__}.trusted(): missing {sorted(missing)}, unknown {sorted(unknown)}")
        data = shape.template.copy()  # every field in order; updating keeps the order
        data.update(values)
        for name, make in shape.made:
            if name not in values:
                data[name] = make()
        payload = _new(cls)
        _set(payload, "__dict__", data)
        _set(payload, "__pydantic_fields_set__", set(values))
        _set(payload, "__pydantic_extra__", None)
        _set(payload, "__pydantic_private__", None)
        return payload


_new = object.__new__
_set = object.__setattr__


@dataclass(frozen=True, slots=True)
class _Shape:
    """What `BasePayload.trusted` needs of a payload class, worked out once."""

    names: frozenset[str]
    required: frozenset[str]
    template: dict[str, Any]
    """Every field in order, with its default (None for a required field or one made for each payload)."""
    made: tuple[tuple[str, Callable[[], Any]], ...]
    """Fields whose default is made for each payload: a default factory, or a mutable default copied (as
    pydantic does)."""


_SHAPES: dict[type[BasePayload], _Shape] = {}


def _shape_of(cls: type[BasePayload]) -> _Shape:
    template: dict[str, Any] = {}
    required: set[str] = set()
    made: list[tuple[str, Callable[[], Any]]] = []
    for name, info in cls.model_fields.items():
        template[name] = None
        if info.default_factory_takes_validated_data:
            raise TypeError(f"{cls.__name__}.{name}: a default made from the other fields is not supported")
        if info.default_factory is not None:
            made.append((name, cast(Callable[[], Any], info.default_factory)))
        elif info.is_required():
            required.add(name)
        elif _hashable(info.default):
            template[name] = info.default
        else:
            made.append((name, partial(copy.deepcopy, info.default)))
    shape = _SHAPES[cls] = _Shape(frozenset(template), frozenset(required), template, tuple(made))
    return shape


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


OriginKind = Literal["person", "chat", "session", "run", "heartbeat", "hook", "cycle", "observer", "engine"]


class Origin(BaseModel):
    """Where something came from: who started a session, or who sent a message."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    kind: OriginKind
    """What sort of source it is."""
    ref: str | None = None
    """Its identifier: a session or run id, a chat key, or `observer:<type>` for an observer's report."""


class Usage(BaseModel):
    """Tokens and cost of one model request, or a sum of them."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    input_tokens: int = 0
    """Prompt tokens, cached ones included."""
    output_tokens: int = 0
    """Completion tokens, reasoning included."""
    cache_read_tokens: int = 0
    """Prompt tokens read from the provider's cache."""
    cache_write_tokens: int = 0
    """Prompt tokens written to the provider's cache."""
    reasoning_tokens: int = 0
    """Output tokens spent on reasoning."""
    requests: int = 0
    """Model requests counted in this sum."""
    cost_usd: float | None = None
    """Cost in US dollars, when the price is known."""

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        cost = (
            None
            if self.cost_usd is None and other.cost_usd is None
            else ((self.cost_usd or 0.0) + (other.cost_usd or 0.0))
        )
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            requests=self.requests + other.requests,
            cost_usd=cost,
        )
