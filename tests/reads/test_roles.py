"""`agent_roles`: the agent types an engine runs, for a person or an agent about to start one."""

from __future__ import annotations

from agentwatch.runtime.models import ScriptedModel
from agentwatch.watchers.rules import rule_definition
from tests.runtime.support import OpenEngine, Scripted, role


async def test_agent_roles_lists_what_can_be_started_and_not_the_rule_observers(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    model = scripted("roles-helper", ScriptedModel.replying("ok"))
    helper = role(
        "helper", model, tools=("agent_list",), observer="loop-guard", description="Helps out.",
        limits={"tokens": 50_000, "agent_cost_usd": 5},
    )  # fmt: skip
    unlimited = {"requests": 50, "tokens": None, "costUsd": None, "agentCostUsd": None}
    async with open_engine(helper, role("aide", model), rule_definition("loop-guard")) as engine:
        answer = await engine.call_tool("agent_roles", {})
        assert answer == {
            "roles": [
                {"name": "aide", "description": "", "model": model, "tools": [], "observer": None, "limits": unlimited},
                {
                    "name": "helper",
                    "description": "Helps out.",
                    "model": model,
                    "tools": ["agent_list"],
                    "observer": "loop-guard",
                    "limits": {**unlimited, "tokens": 50_000, "agentCostUsd": 5.0},
                },
            ]
        }
        assert engine.roster.get("loop-guard").kind == "rule"  # in the roster, but no one starts a rule observer
        refused = await engine.call_tool("agent_roles", {"role": "helper"})
        assert refused["error"]["code"] == "invalid_argument" and refused["error"]["details"]["fields"] == ["role"]
