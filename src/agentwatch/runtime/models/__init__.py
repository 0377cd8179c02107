"""The models adapter: one turn of a session on a model with tools, reported as our own payloads.

The engine hands `run_turn` a `TurnInput` (model ref, system prompt, stored history, prompt, tools, answers)
and a `TurnSink`; the adapter streams ephemeral payloads and commits durable ones together with the new
model-layer messages, which the engine stores and hands back as `history` next time. Those messages are
opaque JSON to everyone but this package, the only one that imports the model layer (pydantic-ai).

```python
from agentwatch.runtime.models import ModelResolver, TurnInput, run_turn

result = await run_turn(
    TurnInput(model="scripted:demo", instructions="Be brief.", history=stored, prompt="hello"),
    sink,
    models=ModelResolver(config.providers),
)
```
"""

from agentwatch.runtime.models._adapter import run_turn
from agentwatch.runtime.models._types import (
    PendingCall,
    ToolAnswer,
    ToolContext,
    ToolRunner,
    ToolSpec,
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

__all__ = [
    "BUILTIN_PREFIXES",
    "KNOWN_CONTEXT_WINDOWS",
    "CallTool",
    "Fail",
    "Hang",
    "ModelResolver",
    "PendingCall",
    "Reply",
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
    "TranscriptEntry",
    "TurnInput",
    "TurnResult",
    "TurnSink",
    "known_context_window",
    "register_scripted_model",
    "registered_scripted_model",
    "run_turn",
    "unregister_scripted_model",
]
