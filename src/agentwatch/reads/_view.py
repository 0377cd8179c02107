"""What the read tools need from an engine, stated as protocols so that reads never import the runtime.

The runtime's `Engine` satisfies `EngineView` structurally; tests and other surfaces may pass anything
else that does.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from agentwatch.config import Config
from agentwatch.errors import AgentwatchError, Invalid, NotFound
from agentwatch.live import LiveRing
from agentwatch.store import Store

__all__ = ["EngineView", "RoleView", "RosterView", "iso", "role_prompt_composer", "stuck_thresholds"]


class LimitsView(Protocol):
    """A role's limits, as the reads show them."""

    @property
    def requests(self) -> int: ...

    @property
    def tokens(self) -> int | None: ...

    @property
    def cost_usd(self) -> float | None: ...

    @property
    def agent_cost_usd(self) -> float | None: ...


class RoleView(Protocol):
    """The parts of an agent definition the reads show."""

    @property
    def kind(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def tools(self) -> tuple[str, ...]: ...

    @property
    def observer(self) -> str | None: ...

    @property
    def model(self) -> str | None: ...

    @property
    def instructions(self) -> str: ...

    @property
    def grant(self) -> tuple[str, ...]: ...

    @property
    def limits(self) -> LimitsView: ...


class RosterView(Protocol):
    """The agent definitions in force."""

    def get(self, name: str) -> RoleView:
        """The definition named `name`; raises `NotFound` when the roster lacks it."""

    def names(self) -> list[str]:
        """Every agent type, sorted."""

    def runnable(self) -> list[str]:
        """The agent types an agent can run as (rule observers left out), sorted."""


def role_problem(roster: RosterView, role: str) -> str | None:
    """Why an engine with `roster` cannot run an agent of `role` (its roster lacks the agent type), and what to do;
    None when it can."""
    try:
        roster.get(role)
    except NotFound as exc:
        return (
            f"{exc.message}; the agent's work waits for an engine that has agent type {role!r} (one open on this "
            "store takes it within a second): define the type for the service that should run it (`agentwatch "
            "agents check` checks an agents directory), or delete the agent"
        )
    return None


class EngineView(Protocol):
    """The engine surface the read tools use."""

    @property
    def config(self) -> Config: ...

    @property
    def store(self) -> Store: ...

    @property
    def ring(self) -> LiveRing: ...

    @property
    def roster(self) -> RosterView: ...

    @property
    def runs_agents(self) -> bool:
        """Whether the view's engine runs the agents of its roles (a service, `run`); a read of the store alone
        runs none."""

    def stuck_after(self, role: str) -> float:
        """The role's stuck threshold in seconds (role front matter, else project config, else 600)."""


def stuck_thresholds(view: EngineView) -> tuple[float, dict[str, float]]:
    """The default stuck threshold and the roles whose own threshold differs from it."""
    default = view.config.sessions.stuck_after_seconds
    by_role = {name: view.stuck_after(name) for name in view.roster.names()}
    return default, {name: seconds for name, seconds in by_role.items() if seconds != default}


def role_prompt_composer(view: EngineView) -> Callable[[str], str]:
    """A function giving the system prompt a role composes now; `Invalid` when the role no longer resolves."""

    def compose(role: str) -> str:
        try:
            return view.roster.get(role).instructions
        except AgentwatchError as exc:
            raise Invalid(f"role {role!r} no longer resolves ({exc.message}); there is no definition to diff") from None

    return compose


def iso(moment: datetime | None) -> str | None:
    """An aware datetime as ISO 8601 text (None stays None)."""
    return moment.isoformat() if moment is not None else None
