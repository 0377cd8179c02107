"""`agentwatch agents`: the agent definitions (roles) of the project."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.table import Table

from agentwatch.cli._common import console, err_console, resolve_config
from agentwatch.runtime.roster import check_agents, load_roster
from agentwatch.runtime.tools import builtin_tools

__all__ = ["agents"]


@click.group()
def agents() -> None:
    """The agent definitions in the agents directory."""


def _agents_dir(agents_dir: Path | None) -> Path:
    config = resolve_config()
    return agents_dir or (config.root / config.agents_dir)


@agents.command("check")
@click.option("--dir", "agents_dir", type=click.Path(path_type=Path), help="The agents directory (default: agents/).")
def check(agents_dir: Path | None) -> None:
    """List every problem in the agent definitions; exit 1 when one is an error.

    \b
    Example:
      agentwatch agents check --dir examples/agents
    """
    directory = _agents_dir(agents_dir)
    problems = check_agents(directory, known_tools={t.name for t in builtin_tools()} | _user_tool_names())
    for problem in problems:
        style = "red" if problem.severity == "error" else "yellow"
        err_console.print(f"[{style}]{problem}[/]", soft_wrap=True)
    errors = sum(1 for p in problems if p.severity == "error")
    if errors:
        err_console.print(f"[bold red]{errors} error(s)[/] in {directory}")
        sys.exit(1)
    roster = load_roster(directory)
    console.print(f"[green]ok[/]: {len(roster)} agent definition(s) in {directory}")


def _user_tool_names() -> set[str]:
    # Tools a project registers in Python are not known to the CLI; the engine checks them when it opens.
    return set()


@agents.command("list")
@click.option("--dir", "agents_dir", type=click.Path(path_type=Path), help="The agents directory (default: agents/).")
def list_agents(agents_dir: Path | None) -> None:
    """Show the roles the agents directory defines.

    \b
    Example:
      agentwatch agents list --dir examples/agents
    """
    roster = load_roster(_agents_dir(agents_dir))
    table = Table("name", "model", "tools", "observer", "description")
    for definition in roster:
        table.add_row(
            definition.name,
            definition.model or f"[dim]{definition.kind}[/]",
            ", ".join(definition.tools),
            definition.observer or "",
            definition.description,
        )
    console.print(table)
