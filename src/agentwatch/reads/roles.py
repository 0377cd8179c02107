"""`agent_roles`: the agent types this engine runs, what `agent_create` and `agent_task` take as `role`.

A person starting an agent (the dashboard's "New agent", a CLI user) and an agent about to spawn one read the
same list: each role's name, what it is for, its model, tools, observer and limits. The rule observers, which no one
starts (the runtime pairs them with the agents that name them), are left out.
"""

from __future__ import annotations

from pydantic import Field

from agentwatch.reads._view import EngineView
from agentwatch.tools import Answer, Args, Caller

__all__ = ["RoleLimitsRow", "RoleRow", "RolesAnswer", "RolesArgs", "agent_roles"]


class RolesArgs(Args):
    """Arguments of `agent_roles`: none."""


class RoleRow(Answer):
    """One agent type."""

    name: str
    description: str = Field(description="What the agent is for (its definition's one line); empty if none.")
    model: str | None = Field(description="The model ref (a fallback chain joined by ', '); null: none yet.")
    tools: list[str]
    observer: str | None = Field(description="The observer type paired with each of its agents, if any.")
    limits: RoleLimitsRow = Field(description="What a turn may use, and an agent may spend, before it is stopped.")


class RoleLimitsRow(Answer):
    """A role's limits (null: none)."""

    requests: int = Field(description="Model requests per turn.")
    tokens: int | None = Field(description="Tokens per turn, input and output.")
    cost_usd: float | None = Field(description="Spend per turn, in US dollars.")
    agent_cost_usd: float | None = Field(description="Spend of one agent over all its turns, in US dollars.")


class RolesAnswer(Answer):
    """The `agent_roles` answer."""

    roles: list[RoleRow] = Field(description="Sorted by name.")


async def agent_roles(view: EngineView, caller: Caller, args: RolesArgs) -> RolesAnswer:
    rows = []
    for name in view.roster.runnable():
        role = view.roster.get(name)
        limits = role.limits
        rows.append(
            RoleRow(
                name=name,
                description=role.description,
                model=role.model,
                tools=list(role.tools),
                observer=role.observer,
                limits=RoleLimitsRow(
                    requests=limits.requests,
                    tokens=limits.tokens,
                    cost_usd=limits.cost_usd,
                    agent_cost_usd=limits.agent_cost_usd,
                ),
            )
        )
    return RolesAnswer(roles=rows)
