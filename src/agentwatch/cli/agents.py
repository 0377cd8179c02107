"""`agentwatch agents`: the agent definitions (roles) of the project."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from agentwatch.cli._common import resolve_config

__all__ = ["agents"]


@click.group(short_help="The agent definitions in the agents directory.")
def agents() -> None:
    """The agent definitions in the agents directory."""


def _agents_dir(agents_dir: Path | None) -> Path:
    config = resolve_config()
    return agents_dir or (config.root / config.agents_dir)


@agents.command("check")
@click.option("--dir", "agents_dir", type=click.Path(path_type=Path), help="The agents directory (default: agents/).")
@click.option("--tool", "tools", multiple=True, help="A tool your project registers in Python (repeatable).")
def check(agents_dir: Path | None, tools: tuple[str, ...]) -> None:
    """List every problem in the agent definitions; exit 1 when one is an error.

    Tools a project registers in Python are not known here: a tool that is neither built in nor given with
    --tool is a warning (the engine checks it for real when it opens).

    \b
    Example:
      agentwatch agents check --dir examples/demo/agents --tool read_file --tool write_file
    """
    # Imported here, so that `agents --help` stays light.
    from rich.markup import escape

    from agentwatch.cli._common import console, err_console
    from agentwatch.runtime.roster import DefinitionProblem, check_agents, load_roster
    from agentwatch.runtime.tools import builtin_tools
    from agentwatch.watchers.rules import default_rules, rule_definition

    directory = _agents_dir(agents_dir)
    known = {t.name for t in builtin_tools()} | set(tools)
    roster = load_roster(directory)
    for name in default_rules():  # the rule observers every engine carries
        if name not in roster:
            roster.add(rule_definition(name))
    problems = [*check_agents(directory)[: 0 if directory.is_dir() else 1], *roster.problems]
    for definition in roster:
        for name in definition.tools:
            if name not in known:
                problems.append(
                    DefinitionProblem(
                        definition.source_path,
                        "tools",
                        f"{name!r} is not a built-in tool; if your project registers it in Python, declare it "
                        f"with --tool {name}",
                        severity="warning",
                        agent=definition.name,
                    )
                )
    for definition in roster:  # the observer gate asks what a background agent_task by the agent would be told
        observer = definition.observer
        if observer is None or observer not in roster or "spawn" in definition.grant:
            continue
        if roster.get(observer).kind != "rule":
            problems.append(
                DefinitionProblem(
                    definition.source_path,
                    "observer",
                    f"{observer!r} is a model observer, armed only for an agent that may spawn one; add "
                    f"`grant: [spawn]` or {definition.name!r} runs unobserved",
                    severity="warning",
                    agent=definition.name,
                )
            )
    for problem in problems:
        style = "red" if problem.severity == "error" else "yellow"
        err_console.print(f"[{style}]{escape(str(problem))}[/]", soft_wrap=True)
    errors = sum(1 for p in problems if p.severity == "error")
    if errors:
        err_console.print(f"[bold red]{errors} error(s)[/] in {directory}")
        sys.exit(1)
    files = sum(1 for definition in roster if definition.source_path is not None)
    console.print(f"[green]ok[/]: {files} agent definition(s) in {directory}")


@agents.command("list")
@click.option("--dir", "agents_dir", type=click.Path(path_type=Path), help="The agents directory (default: agents/).")
def list_agents(agents_dir: Path | None) -> None:
    """Show the roles the agents directory defines.

    \b
    Example:
      agentwatch agents list --dir examples/demo/agents
    """
    from rich.markup import escape

    from agentwatch.cli._table import print_table
    from agentwatch.runtime.roster import load_roster

    roster = load_roster(_agents_dir(agents_dir))
    rows = [
        [
            escape(definition.name),
            escape(definition.model) if definition.model else f"[dim]{definition.kind}[/]",
            escape(", ".join(definition.tools)),
            escape(definition.observer or ""),
            escape(definition.description),
        ]
        for definition in roster
    ]
    print_table(["name", "model", "tools", "observer", "description"], rows)
