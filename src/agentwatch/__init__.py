"""agentwatch: an engine for running LLM agents that can be watched.

```python
from agentwatch import Engine

async with Engine.open(agents_dir="agents") as engine:
    snapshot = await engine.task("coder", "Add a --verbose flag")
```

The public names below are imported on first use, so `import agentwatch` stays light. Neither it nor
`from agentwatch import Engine` loads the model layer: pydantic-ai loads when a turn first runs a model, and a
vendor's SDK (openai, anthropic) when a model of that vendor is first used. Tests hand the engine scripted
models: `Engine.open(..., models={"coder": ScriptedModel([...])})` for roles whose model is `scripted:coder`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agentwatch.runtime.extensions import register_default_extension

if TYPE_CHECKING:
    from agentwatch.errors import AgentwatchError
    from agentwatch.runtime.engine import Engine, run_task
    from agentwatch.runtime.heartbeats import Heartbeat, Tick
    from agentwatch.runtime.hooks import Hook
    from agentwatch.runtime.models import (
        CallTool,
        Fail,
        Hang,
        Reply,
        ScriptContext,
        ScriptedModel,
        ScriptStep,
        Think,
        register_scripted_model,
    )
    from agentwatch.runtime.policy import Policy, PolicyChain, ToolRequest, Verdict
    from agentwatch.runtime.roster import AgentDefinition
    from agentwatch.runtime.runs import TaskFailed
    from agentwatch.runtime.thread_observer import EventCollector, ReplaySnapshot, ThreadObserver
    from agentwatch.tools import Tool, function_tool
    from agentwatch.watchers import register_rule_observer, rule_observer

__version__ = "0.1.0.dev0"

_EXPORTS: dict[str, str] = {
    "AgentDefinition": "agentwatch.runtime.roster",
    "AgentwatchError": "agentwatch.errors",
    "CallTool": "agentwatch.runtime.models",
    "Engine": "agentwatch.runtime.engine",
    "EventCollector": "agentwatch.runtime.thread_observer",
    "Fail": "agentwatch.runtime.models",
    "Hang": "agentwatch.runtime.models",
    "Heartbeat": "agentwatch.runtime.heartbeats",
    "Hook": "agentwatch.runtime.hooks",
    "Policy": "agentwatch.runtime.policy",
    "PolicyChain": "agentwatch.runtime.policy",
    "Reply": "agentwatch.runtime.models",
    "ReplaySnapshot": "agentwatch.runtime.thread_observer",
    "ScriptContext": "agentwatch.runtime.models",
    "ScriptStep": "agentwatch.runtime.models",
    "ScriptedModel": "agentwatch.runtime.models",
    "TaskFailed": "agentwatch.runtime.runs",
    "Think": "agentwatch.runtime.models",
    "ThreadObserver": "agentwatch.runtime.thread_observer",
    "Tick": "agentwatch.runtime.heartbeats",
    "Tool": "agentwatch.tools",
    "ToolRequest": "agentwatch.runtime.policy",
    "Verdict": "agentwatch.runtime.policy",
    "function_tool": "agentwatch.tools",
    "register_rule_observer": "agentwatch.watchers",
    "register_scripted_model": "agentwatch.runtime.models",
    "rule_observer": "agentwatch.watchers",
    "run_task": "agentwatch.runtime.engine",
}

__all__ = [
    "AgentDefinition",
    "AgentwatchError",
    "CallTool",
    "Engine",
    "EventCollector",
    "Fail",
    "Hang",
    "Heartbeat",
    "Hook",
    "Policy",
    "PolicyChain",
    "ReplaySnapshot",
    "Reply",
    "ScriptContext",
    "ScriptStep",
    "ScriptedModel",
    "TaskFailed",
    "Think",
    "ThreadObserver",
    "Tick",
    "Tool",
    "ToolRequest",
    "Verdict",
    "__version__",
    "function_tool",
    "register_rule_observer",
    "register_scripted_model",
    "rule_observer",
    "run_task",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agentwatch' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


# Observer agents come with every engine (the `observers.enabled` switch and AGENTWATCH_OBSERVER_AGENTS turn them
# off); they are named by spec so that importing agentwatch stays light and the runtime never imports watchers.
register_default_extension("agentwatch.watchers:ObserverAgents")
# OpenTelemetry spans, when `[tracing] enabled` (or AGENTWATCH_TRACING) says so: off, it imports nothing.
register_default_extension("agentwatch.tracing:Tracing")
# A webhook told when an agent waits on a person, when `[notify] webhook` names one.
register_default_extension("agentwatch.notify:Notifications")
