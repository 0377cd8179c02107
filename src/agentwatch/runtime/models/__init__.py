"""The models adapter: one turn of a session on a model with tools, reported as our own payloads.

The engine hands `run_turn` a `TurnInput` (model ref, system prompt, stored history, prompt, tools, answers)
and a `TurnSink`; the adapter streams ephemeral payloads and commits durable ones together with the new
model-layer messages, which the engine stores and hands back as `history` next time. Those messages are
opaque JSON to everyone but this package, the only one that imports the model layer (pydantic-ai).

```python
from agentwatch.runtime.models import ModelResolver, ScriptedModel, TurnInput, run_turn

result = await run_turn(
    TurnInput(model="scripted:demo", instructions="Be brief.", history=stored, prompt="hello"),
    sink,
    models=ModelResolver(config.providers, models={"demo": ScriptedModel.replying("Hi.")}),
)
```

Importing this package does not import the model layer: pydantic-ai is imported when a turn first runs (or a
scripted model is first resolved), and a vendor's SDK when a model of that vendor is first resolved.
"""

from collections.abc import Coroutine as _Coroutine
from collections.abc import Sequence as _Sequence
from typing import Any as _Any

from pydantic import JsonValue as _JsonValue

from agentwatch.events import Payload as _Payload
from agentwatch.events import ToolResult as _ToolResult
from agentwatch.runtime.models._types import (
    PendingCall,
    RetryPolicy,
    ToolAnswer,
    ToolContext,
    ToolRunner,
    ToolSpec,
    ToolWaits,
    TurnInput,
    TurnResult,
    TurnSink,
)
from agentwatch.runtime.models.refs import BUILTIN_PREFIXES, KNOWN_CONTEXT_WINDOWS, ModelResolver, known_context_window
from agentwatch.runtime.models.scripted import (
    CallTool,
    Fail,
    Hang,
    Reply,
    ScriptContext,
    ScriptedModel,
    ScriptedModelError,
    ScriptItem,
    ScriptStep,
    Think,
    ToolOutcome,
    TranscriptEntry,
    register_scripted_model,
    registered_scripted_model,
    unregister_scripted_model,
)


def run_turn(
    turn: TurnInput, sink: TurnSink, *, models: ModelResolver | None = None
) -> _Coroutine[_Any, _Any, TurnResult]:
    """Run one turn (or the continuation of one) on its model, committing every durable step through `sink`.

    Returns how the run ended: `completed` with the final text, `paused` with the calls that wait on a person,
    or `failed` with the error (a provider error, a model that raised, the request limit). A provider error worth
    retrying is retried first as the resolver's `RetryPolicy` says, each retry committed as `runtime.retry`; a
    chain of refs moves on to its next model with a `model.reroute`; a run its model(s) or its tool layer
    failed commits a `runtime.error` (for the models: each one tried, its provider and URL, as the error says). Raises
    `InvalidArgument` for a model ref that does not resolve and `Invalid` for a history that does not load,
    both before anything is committed. Cancelling the task commits what was recovered and re-raises.
    `models` resolves the ref (a `ModelResolver()` on the process environment when None).

    The coroutine returned is the model layer's own, not one that awaits it: each time the turn resumes, the
    event loop passes through one frame less.
    """
    # The model layer loads here, on the first turn, not when the engine is imported.
    from agentwatch.runtime.models._adapter import run_turn as run_on_model_layer

    return run_on_model_layer(turn, sink, models=models)


def close_open_calls(
    history: _Sequence[_JsonValue], *, answers: _Sequence[ToolAnswer] = (), results: _Sequence[_ToolResult] = ()
) -> tuple[list[_Payload], list[_JsonValue]]:
    """The `tool.result` payloads and the closing model message for the calls the stored `history` (model-layer
    messages) leaves open, for a turn that ends without running them (stopped where it was not running, or
    refused at a limit): each call closed with its stored result among `results` (no payload: it is stored), or
    with its answer among `answers`, else `interrupted`, as a run cut off in its tools writes it."""
    from agentwatch.runtime.models._adapter import close_open_calls as close_on_model_layer

    return close_on_model_layer(history, answers=answers, results=results)


__all__ = [
    "BUILTIN_PREFIXES",
    "KNOWN_CONTEXT_WINDOWS",
    "CallTool",
    "Fail",
    "Hang",
    "ModelResolver",
    "PendingCall",
    "Reply",
    "RetryPolicy",
    "ScriptContext",
    "ScriptItem",
    "ScriptStep",
    "ScriptedModel",
    "ScriptedModelError",
    "Think",
    "ToolAnswer",
    "ToolContext",
    "ToolOutcome",
    "ToolRunner",
    "ToolSpec",
    "ToolWaits",
    "TranscriptEntry",
    "TurnInput",
    "TurnResult",
    "TurnSink",
    "close_open_calls",
    "known_context_window",
    "register_scripted_model",
    "registered_scripted_model",
    "run_turn",
    "unregister_scripted_model",
]
