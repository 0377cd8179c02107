"""Observer agents: agents that watch another agent's turns and speak up, one way, only when it matters.

Declare an observer on any agent definition; every engine carries the subsystem, so there is nothing to wire:

```markdown
---
name: coder
model: openai:gpt-4o
observer: reviewer              # an agent type of the roster, or a rule observer such as loop-guard
observer_message: Watch for tests that are skipped instead of fixed.
---
```

When a `coder` session runs, the engine arms a pairing (asking what a background `agent_task` by the coder,
with its own grant, would be told: a model observer needs the coder's `spawn` grant; see `pairing`), starts
a `reviewer` session in the background (source `observer`, parent the coder, marked `is_observer`), and after
each turn (and within long ones) hands it a digest of what the coder did, framed as data. The reviewer says
nothing, or calls `ObserverReport`; the report reaches the coder at its next turn as a meta input (a task
whose turn ended keeps it until it is given one; a parent still working hears of it too), and is recorded as
an `observer.report` event on the coder's session. Nothing of this ever waits, pauses or rolls back the
coder: it runs in background tasks, each batch bounded in time, and its failures are recorded as warnings
and dropped.

**The switch.** Observer agents are on by default: they cost nothing until a definition declares one, and
declaring one is the opt-in. `[observers] enabled = false` in `agentwatch.toml`, `AGENTWATCH_OBSERVER_AGENTS=0`
or `AGENTWATCH_BACKGROUND_TASKS=0` turns them off; declared observers are then simply not started.

**Rule observers** are observer types written in Python (`rules`); five are built in. **Reading the state**:
`describe(store, session)` gives the observer type, its session, the pairing state and the latest reports
from the store alone (`agent_get` shows it). Modules: `pairing` (registry and states), `digest` (the tap's
vocabulary and the envelope), `delivery` (batches and their failure paths), `report` (the one-way tool),
`rules`, `observers` (the engine extension).
"""

from agentwatch.watchers.delivery import Courier, ObserverLost, ObserverStopped, SessionCourier, framing_prompt
from agentwatch.watchers.digest import (
    ActivityItem,
    ActivityRecorder,
    AssistantTextItem,
    Batch,
    Digest,
    ToolCallItem,
    ToolResultItem,
    TurnEndedItem,
    UserMessageItem,
    escape_tags,
    postamble,
    render_batch,
    render_digest,
)
from agentwatch.watchers.observers import ActivityTap, ObserverAgents, observer_agents
from agentwatch.watchers.pairing import Pairing, PairingRegistry, describe
from agentwatch.watchers.report import REPORT_TOOL, ReportNotDelivered, send_report
from agentwatch.watchers.rules import (
    BUILTIN_RULES,
    RuleBook,
    RuleContext,
    RuleFunction,
    budget_guard,
    failure_guard,
    loop_guard,
    register_rule_observer,
    rule_observer,
    secret_guard,
)

__all__ = [
    "BUILTIN_RULES",
    "REPORT_TOOL",
    "ActivityItem",
    "ActivityRecorder",
    "ActivityTap",
    "AssistantTextItem",
    "Batch",
    "Courier",
    "Digest",
    "ObserverAgents",
    "ObserverLost",
    "ObserverStopped",
    "Pairing",
    "PairingRegistry",
    "ReportNotDelivered",
    "RuleBook",
    "RuleContext",
    "RuleFunction",
    "SessionCourier",
    "ToolCallItem",
    "ToolResultItem",
    "TurnEndedItem",
    "UserMessageItem",
    "budget_guard",
    "describe",
    "escape_tags",
    "failure_guard",
    "framing_prompt",
    "loop_guard",
    "observer_agents",
    "postamble",
    "register_rule_observer",
    "render_batch",
    "render_digest",
    "rule_observer",
    "secret_guard",
    "send_report",
]
