"""A TurnSink that records every commit and stream, and helpers that build turns on scripted models."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import JsonValue

from agentwatch.events import Payload
from agentwatch.runtime.models import ModelResolver, ScriptedModel, ToolSpec, TurnInput

REF = "scripted:test"
INSTRUCTIONS = "You are a careful coder."


@dataclass(frozen=True)
class Record:
    """One call the adapter made on the sink."""

    kind: Literal["commit", "stream"]
    payloads: tuple[Payload, ...]
    messages: tuple[JsonValue, ...] = ()
    wait: bool = True
    """For a commit: False when the adapter made it pipelined (it did not wait for it)."""


class RecordingSink:
    """Keeps every commit and stream in the order the adapter made them; committed messages go through JSON, as
    a store keeps them. Every commit is recorded when it is made (pipelined ones too: a sink applies commits in
    call order), and an empty waiting commit (the adapter waiting for its pipelined ones) is not recorded."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.settles = 0
        """Empty waiting commits: how often the adapter waited for its pipelined commits on their own."""

    async def commit(
        self, payloads: Sequence[Payload], messages: Sequence[JsonValue] = (), *, wait: bool = True
    ) -> None:
        if not payloads and not messages:
            assert wait, "an empty commit only makes sense as a wait"
            self.settles += 1
            await asyncio.sleep(0)
            return
        stored = json.loads(json.dumps(list(messages)))
        self.records.append(Record("commit", tuple(payloads), tuple(stored), wait))
        await asyncio.sleep(0)  # a real store yields to the loop while it writes

    def stream(self, payload: Payload) -> None:
        self.records.append(Record("stream", (payload,)))

    @property
    def commits(self) -> list[Record]:
        return [r for r in self.records if r.kind == "commit"]

    @property
    def messages(self) -> list[JsonValue]:
        """Every committed message, in order: the stored history."""
        return [m for r in self.commits for m in r.messages]

    @property
    def durable(self) -> list[Payload]:
        return [p for r in self.commits for p in r.payloads]

    @property
    def streamed(self) -> list[Payload]:
        return [p for r in self.records if r.kind == "stream" for p in r.payloads]


def shape(message: Any) -> tuple[str, list[str]]:
    """A message as (kind, part kinds), e.g. ("response", ["thinking", "tool-call"])."""
    return message["kind"], [p["part_kind"] for p in message["parts"]]


def turn(
    prompt: str | None = "What does a.py do?",
    *,
    history: Sequence[JsonValue] = (),
    tools: Sequence[ToolSpec] = (),
    **kwargs: Any,
) -> TurnInput:
    return TurnInput(model=REF, instructions=INSTRUCTIONS, history=history, prompt=prompt, tools=tools, **kwargs)


def resolver(model: ScriptedModel) -> ModelResolver:
    return ModelResolver(env={}, scripted={"test": model})


def reloaded(messages: Sequence[JsonValue]) -> list[JsonValue]:
    """The history as a new process would read it back."""
    loaded: list[JsonValue] = json.loads(json.dumps(list(messages)))
    return loaded


async def wait_for(condition: Any, timeout: float = 5.0) -> None:
    """Let the loop run until `condition()` holds."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.001)
