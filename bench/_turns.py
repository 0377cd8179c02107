"""The two sides of every turn figure: a watched, durable turn through the engine, and bare pydantic-ai.

Both sides play the same script: `steps` of `Reply` and `CallTool` items, one step per model request, text
streamed word by word and each tool call as one delta, calling the same tool function (a cheap lookup).

- The engine side runs the script on the project's `ScriptedModel` (handed to the engine with
  `Engine.open(models=...)` where the engine takes it, else registered under a `scripted:` name), on a store
  URL the caller picks, with one `ThreadObserver` on every session that consumes every event. A turn is
  timed from `engine.enqueue` to the moment that observer receives the turn's `turn.ended`: the turn is
  durable and every watcher has seen all of it.
- The bare side is `pydantic_ai.Agent.iter` over a `FunctionModel` whose stream function plays the same
  steps (it finds its step by counting the responses since the last prompt, so its cost per request does not
  grow with the conversation), every model request streamed with `node.stream` and every event consumed,
  nothing stored. A chat passes `run.all_messages()` back as the next run's history.
- The floor (`DurableByHand`) is the bare side made durable by hand, the least a durable turn can cost: after
  each model response, before its tools run, the messages the run added since the last commit go to a SQLite
  file (WAL, `synchronous=FULL`) as one JSON row, in one transaction, on the loop's thread; the last ones when
  the run ends. No events, no watcher, no session state: only the transcript, durable before a tool runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import re
import sqlite3
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from agentwatch.events import Event
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel, ScriptStep
from agentwatch.runtime.roster import AgentDefinition

__all__ = [
    "INSTRUCTIONS",
    "PROMPT",
    "TOOL_CALLS",
    "BareChat",
    "DurableByHand",
    "EngineSide",
    "TurnWatcher",
    "bare_agent",
    "engine_side",
    "lookup",
    "one_tool_turn",
    "ten_tool_turn",
]

INSTRUCTIONS: Final = "You keep the team's notes. Look up what you need, then answer in a few sentences."
PROMPT: Final = "What do the notes say about the release?"
TOOL_CALLS: Final = 10
WAIT_S: Final = 300.0
"""A turn that takes longer than this is a failure, not a sample."""


def lookup(key: str) -> str:
    """Look a key up in the team's notes."""
    # Cheap on purpose: the figure is what runs around the tool, not the tool.
    return f"The note filed under {key} says the step is done and checked."


_ANSWER: Final = (
    "The notes agree: every step of the release is done and checked, the changelog is written, the version is "
    "tagged, and nothing is left but to announce it to the people who asked for it."
)


def ten_tool_turn() -> list[ScriptStep]:
    """Ten requests that each stream a sentence and call `lookup`, then one that streams a 35-word answer."""
    steps: list[ScriptStep] = [
        [Reply(f"Let me read note {index} before going on."), CallTool("lookup", {"key": f"note-{index}"})]
        for index in range(TOOL_CALLS)
    ]
    steps.append(Reply(_ANSWER))
    return steps


def one_tool_turn() -> list[ScriptStep]:
    """A short chat turn: a sentence and one tool call, then a streamed answer."""
    return [
        [Reply("Let me check the note first."), CallTool("lookup", {"key": "plan"})],
        Reply("The plan is done and nothing is left to do."),
    ]


# -- the bare side ------------------------------------------------------------------------------------------

_WORD: Final = re.compile(r"\s*\S+\s*")


def _items(step: ScriptStep) -> tuple[Any, ...]:
    return tuple(step) if isinstance(step, Sequence) else (step,)


def _bare_model(turn: Sequence[ScriptStep]) -> FunctionModel:
    """A FunctionModel streaming `turn`'s steps the way `ScriptedModel` streams them (words, one delta per
    call); each turn of a conversation plays the same steps again."""
    steps = [_items(step) for step in turn]

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | dict[int, DeltaToolCall]]:
        # The step is the number of responses since the last prompt: a walk over this turn only.
        index = 0
        for message in reversed(messages):
            if isinstance(message, ModelResponse):
                index += 1
            elif any(isinstance(part, UserPromptPart) for part in message.parts):
                break
        part = 0
        calls = 0
        for item in steps[index]:
            if isinstance(item, Reply):
                for chunk in _WORD.findall(item.text):
                    yield chunk
            else:
                yield {
                    part: DeltaToolCall(
                        name=item.name, json_args=json.dumps(dict(item.args)), tool_call_id=f"call_{index}_{calls}"
                    )
                }
                calls += 1
                part += 1

    return FunctionModel(stream_function=stream, model_name="bench-bare")


def bare_agent(turn: Sequence[ScriptStep]) -> Agent[None, str]:
    """Bare pydantic-ai on `turn`'s script and the same tool function, built once (as a program would)."""
    return Agent(_bare_model(turn), instructions=INSTRUCTIONS, tools=[lookup])


async def bare_run(agent: Agent[None, str], history: list[ModelMessage] | None = None) -> list[ModelMessage]:
    """One run of `agent`, streaming every model request and consuming every event; returns all its messages."""
    async with agent.iter(PROMPT, message_history=history) as run:
        async for node in run:
            if Agent.is_model_request_node(node):
                async with node.stream(run.ctx) as stream:
                    async for _event in stream:
                        pass
        return run.all_messages()


def tool_returns(messages: Sequence[ModelMessage]) -> int:
    """How many tool results `messages` hold."""
    return sum(
        isinstance(part, ToolReturnPart)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
    )


@dataclass
class BareChat:
    """One bare pydantic-ai conversation: every run gets the messages of the runs before it."""

    agent: Agent[None, str]
    history: list[ModelMessage] = field(default_factory=list)

    async def turn(self) -> None:
        """Run one turn on the history so far and keep its messages."""
        self.history = await bare_run(self.agent, self.history or None)


class DurableByHand:
    """Bare pydantic-ai whose transcript is made durable by hand (see the module docs): the floor under any
    durable turn on SQLite at `synchronous=FULL`."""

    def __init__(self, agent: Agent[None, str], path: Path) -> None:
        self.agent = agent
        self.commits = 0
        self._connection = sqlite3.connect(path, isolation_level=None)
        self._connection.execute("PRAGMA journal_mode = WAL")
        self._connection.execute("PRAGMA synchronous = FULL")
        self._connection.execute(
            "CREATE TABLE IF NOT EXISTS steps (run_id TEXT, step INTEGER, messages TEXT, PRIMARY KEY (run_id, step))"
        )

    async def turn(self) -> list[ModelMessage]:
        """One run of the script, each model response durable before its tools run; returns its messages."""
        run_id, step, saved = uuid.uuid4().hex, 0, 0
        async with self.agent.iter(PROMPT) as run:
            async for node in run:
                if Agent.is_model_request_node(node):
                    async with node.stream(run.ctx) as stream:
                        async for _event in stream:
                            pass
                elif Agent.is_call_tools_node(node):  # the response is in; its tools run when the node does
                    saved, step = self._commit(run_id, step, run.all_messages(), saved), step + 1
            messages = run.all_messages()
        self._commit(run_id, step, messages, saved)
        return messages

    def _commit(self, run_id: str, step: int, messages: list[ModelMessage], saved: int) -> int:
        if len(messages) > saved:
            body = ModelMessagesTypeAdapter.dump_json(messages[saved:]).decode()
            self._connection.execute("BEGIN")
            self._connection.execute("INSERT INTO steps VALUES (?, ?, ?)", (run_id, step, body))
            self._connection.execute("COMMIT")
            self.commits += 1
        return len(messages)

    async def aclose(self) -> None:
        self._connection.close()


# -- the engine side ----------------------------------------------------------------------------------------


class TurnWatcher:
    """A ThreadObserver on every session: counts every event and wakes whoever waits for a `turn.ended`."""

    def __init__(self) -> None:
        self.events = 0
        self._waiting: dict[str, asyncio.Future[Event]] = {}

    def expect_end(self, thread_id: str) -> asyncio.Future[Event]:
        """A future resolved with the next `turn.ended` event of `thread_id` this observer receives."""
        future: asyncio.Future[Event] = asyncio.get_running_loop().create_future()
        self._waiting[thread_id] = future
        return future

    def on_event(self, thread_id: str, event: Event) -> None:
        """Count the event; resolve the waiter of a `turn.ended`."""
        self.events += 1
        if event.type == "turn.ended":
            future = self._waiting.pop(thread_id, None)
            if future is not None and not future.done():
                future.set_result(event)

    def on_subscribe(self, thread_id: str, request: Any, snapshot: Any) -> None:
        """Never asked: the benchmarks do not attach clients."""


@dataclass
class EngineSide:
    """An open engine with one role playing a script, watched by a `TurnWatcher`."""

    engine: Engine
    role: str
    watcher: TurnWatcher

    async def new_session(self) -> str:
        """Create a session of the role; returns its id (its driver is started)."""
        session = await self.engine.create(self.role)
        await self.engine.driver(session.id)
        return session.id

    async def turn(self, session_id: str) -> Event:
        """Give the session the prompt and wait until the watcher has the turn's `turn.ended`."""
        ended = self.watcher.expect_end(session_id)
        await self.engine.enqueue(session_id, PROMPT)
        event = await asyncio.wait_for(ended, WAIT_S)
        outcome = getattr(event.payload, "outcome", None)
        if outcome not in (None, "completed"):
            raise RuntimeError(f"the engine's turn ended {outcome!r}: {event.payload!r}")
        return event

    async def tool_results(self, session_id: str) -> int:
        """How many `tool.result` events the session's log holds."""
        events = await self.engine.store.read_events(session_id, limit=10_000)
        return sum(event.type == "tool.result" for event in events)


def _takes_models() -> bool:
    """Whether `Engine.open` takes model objects (`models=`); older engines resolve registered names only."""
    return "models" in inspect.signature(Engine.open).parameters


@contextlib.asynccontextmanager
async def engine_side(
    root: Path,
    steps: Sequence[ScriptStep],
    *,
    synchronous: str = "full",
    store_url: str | None = None,
    extensions: list[Any] | None = None,
) -> AsyncIterator[EngineSide]:
    """An engine on its own SQLite file under `root` (WAL, `synchronous` full or normal) or on `store_url`,
    one role playing `steps` on a `ScriptedModel`, a `TurnWatcher` on every session. No extensions unless
    given: the figures are the engine itself."""
    root.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 (before the engine starts; nothing else runs)
    url = store_url or f"sqlite:///{root / 'agentwatch.db'}?synchronous={synchronous}"
    scripted = ScriptedModel(steps)
    name = f"bench-{uuid.uuid4().hex[:8]}"
    open_args: dict[str, Any] = {}
    registered = False
    if _takes_models():
        open_args["models"] = {name: scripted}  # the engine's own models, as FunctionModel is given an Agent
    else:
        from agentwatch.runtime.models import register_scripted_model

        register_scripted_model(name, scripted)
        registered = True
    model_ref = f"scripted:{name}"
    definition = AgentDefinition(name="notes", model=model_ref, instructions=INSTRUCTIONS, tools=("lookup",))
    watcher = TurnWatcher()
    try:
        async with Engine.open(
            url,
            agents_dir=root / "agents",
            root=root,
            definitions=[definition],
            tools=[lookup],
            extensions=[] if extensions is None else extensions,
            **open_args,
        ) as engine:
            engine.start_with_observer(lambda thread_id: watcher)
            yield EngineSide(engine, definition.name, watcher)
    finally:
        if registered:
            from agentwatch.runtime.models import unregister_scripted_model

            unregister_scripted_model(name)
