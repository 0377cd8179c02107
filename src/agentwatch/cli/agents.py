"""`agentwatch agents`: the agent definitions (roles) of the project."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from agentwatch.cli._common import AGENTS_DIR_HELP, DIRECTORY, resolve_config, setup_option

if TYPE_CHECKING:
    from agentwatch.config import Config
    from agentwatch.runtime.models.refs import ModelResolver
    from agentwatch.runtime.roster import DefinitionProblem, Roster

__all__ = ["agents"]


@click.group(short_help="The agent definitions in the agents directory.")
def agents() -> None:
    """The agent definitions in the agents directory.

    \b
    Examples:
      agentwatch agents list                  each agent type: model, tools, observer
      agentwatch agents check                 every problem of the definitions, with where and what to do
      agentwatch agents check --tool lookup   a tool your project registers in Python counts as known
    """


def _names(values: tuple[str, ...]) -> set[str]:
    """Repeated options, each maybe a comma-separated list."""
    return {name.strip() for value in values for name in value.split(",") if name.strip()}


@agents.command("check")
@click.option("--dir", "agents_dir", type=DIRECTORY, help=AGENTS_DIR_HELP)
@click.option(
    "--tool", "tools", multiple=True, help="A tool your project registers in Python (repeatable, or a, b, c)."
)
@click.option(
    "--scripted",
    "scripted",
    multiple=True,
    help="A scripted model your project hands the engine in Python, by name (repeatable, or a, b, c).",
)
@setup_option
def check(agents_dir: Path | None, tools: tuple[str, ...], scripted: tuple[str, ...], setup: str | None) -> None:
    """Run every check that loading and `run` do; list each problem (file, key, what to do); exit 1 on an error.

    What this accepts, `agentwatch run` runs: tools are checked against the built-in ones, those of the
    project's setup (--setup, or setup in agentwatch.toml) and those given with --tool, model refs and aliases
    against agentwatch.toml ([providers], [models] aliases), scripted models against the setup's and those
    given with --scripted, and observers, grants and session settings as the engine checks them.
    A key a model needs that is not set here (OPENAI_API_KEY, ...) is a warning: set it where the agents run.

    \b
    Examples:
      agentwatch agents check
      agentwatch agents check --dir agents --tool read_file,write_file --scripted coder
    """
    # Imported here, so that `agents --help` stays light.
    from rich.markup import escape

    from agentwatch.cli._common import console, err_console
    from agentwatch.errors import UserError
    from agentwatch.runtime.models.refs import ModelResolver
    from agentwatch.runtime.models.scripted import ScriptedModel
    from agentwatch.runtime.policy import as_policy
    from agentwatch.runtime.roster import DefinitionProblem, load_roster
    from agentwatch.runtime.setup import load_setup
    from agentwatch.runtime.tools import builtin_tools, project_tool

    config = resolve_config(setup=setup)
    directory = agents_dir or (config.root / config.agents_dir)
    project = load_setup(config)
    given: list[str] = []
    refused: list[DefinitionProblem] = []
    for item in project.get("tools", ()):
        try:
            given.append(project_tool(item).name)
        except UserError as exc:  # named as a built-in tool: the engine would refuse it
            refused.append(DefinitionProblem(Path(str(config.setup)), "tools", exc.message, "error"))
    for policy in project.get("policies", ()):
        try:
            as_policy(policy)
        except UserError as exc:  # not a policy nor a function: the engine would refuse it
            refused.append(DefinitionProblem(Path(str(config.setup)), "policies", exc.message, "error"))
    known = {t.name for t in builtin_tools()} | _names(tools) | set(given)
    # A declared scripted model stands in as an empty script: only its name matters to a check.
    models = {name: ScriptedModel([]) for name in _names(scripted)} | dict(project.get("models", {}))
    resolver = ModelResolver.from_config(config, models=models)
    roster = load_roster(
        directory, known_tools=known, extra=project.get("definitions", ()), models=resolver, check_models=True
    )
    _add_rule_observers(roster)
    problems = list(roster.problems)
    if not directory.exists():
        problems.insert(
            0,
            DefinitionProblem(
                directory, None, "no such directory; create it and add one <name>.md file per agent", "warning"
            ),
        )
    for index, problem in enumerate(problems):
        if problem.field in ("tools", "approval_tools") and problem.message.startswith("unknown tool"):
            declare = "; a tool your project registers in Python is declared here with --tool NAME"
            problems[index] = dataclasses.replace(problem, message=problem.message + declare)
        elif problem.field == "model" and problem.message.startswith("no scripted model"):
            declare = "; a scripted model your project hands the engine in Python is declared here with --scripted NAME"
            problems[index] = dataclasses.replace(problem, message=problem.message + declare)
    problems.extend(_observer_gate_problems(roster, config))
    problems.extend(_schedule_problems(roster, config, project))
    problems.extend(refused)
    notes = _missing_variables(roster, resolver)
    for problem in problems:
        style = "red" if problem.severity == "error" else "yellow"
        err_console.print(f"[{style}]{escape(str(problem))}[/]", soft_wrap=True)
    for note in notes:
        err_console.print(f"[yellow]{escape(note)}[/]", soft_wrap=True)
    errors = sum(1 for p in problems if p.severity == "error")
    if errors:
        err_console.print(f"[bold red]{errors} error(s)[/] in {escape(str(directory))}")
        sys.exit(1)
    files = sum(1 for definition in roster if definition.source_path is not None)
    defined = len(project.get("definitions", ()))
    also = f" and {defined} from the setup {escape(str(config.setup))}" if defined else ""
    console.print(f"[green]ok[/]: {files} agent definition(s) in {escape(str(directory))}{also}")


def _schedule_problems(roster: Roster, config: Config, project: dict[str, Any]) -> list[DefinitionProblem]:
    """A heartbeat or a hook (of agentwatch.toml, or of the setup) whose role is not defined: the engine would
    refuse to open."""
    from agentwatch.errors import did_you_mean
    from agentwatch.runtime.heartbeats import heartbeats_from_config
    from agentwatch.runtime.hooks import hooks_from_config
    from agentwatch.runtime.roster import DefinitionProblem

    declared = [
        *(("heartbeat", beat) for beat in [*heartbeats_from_config(config), *project.get("heartbeats", ())]),
        *(("hook", hook) for hook in [*hooks_from_config(config), *project.get("hooks", ())]),
    ]
    roles = roster.runnable()
    return [
        DefinitionProblem(
            config.root / "agentwatch.toml",
            f"{what}s.{item.name}.role",
            f"{what} {item.name!r} runs role {item.role!r}, which is "
            + ("a rule observer, which runs as no agent" if item.role in roster else "not defined")
            + did_you_mean(item.role, roles),
            "error",
        )
        for what, item in declared
        if item.role not in roles
    ]


def _observer_gate_problems(roster: Roster, config: Config) -> list[DefinitionProblem]:
    """What the observer gate will say when it arms each declared observer: `[observers]` of agentwatch.toml
    first, then what a background agent_task by the agent would be told (a model observer is armed only for an
    agent with the spawn grant)."""
    from agentwatch.runtime.roster import DefinitionProblem
    from agentwatch.watchers.pairing import configured_verdict

    problems = []
    for definition in roster:
        observer = definition.observer
        if observer is None or observer not in roster:
            continue
        unobserved = f"{definition.name!r} runs unobserved"
        verdict = configured_verdict(config.observers, observer)
        if not config.observer_agents_enabled:
            message = (
                "observer agents are off ([observers] enabled = false, AGENTWATCH_OBSERVER_AGENTS=0 or "
                f"AGENTWATCH_BACKGROUND_TASKS=0), so {unobserved}"
            )
        elif verdict is not None and verdict.decision == "deny":
            message = f"{verdict.reason} in agentwatch.toml, so {unobserved}"
        elif roster.get(observer).kind != "rule" and "spawn" not in definition.grant:
            message = (
                f"{observer!r} is a model observer, armed only for an agent that may spawn one; add "
                f"`grant: [spawn]` or {unobserved}"
            )
        else:
            continue
        problems.append(DefinitionProblem(definition.source_path, "observer", message, "warning", definition.name))
    return problems


def _missing_variables(roster: Roster, resolver: ModelResolver) -> list[str]:
    """One warning per environment variable a model needs that is not set here, naming the agents it stops."""
    needed: dict[str, list[str]] = {}
    for definition in roster:
        if definition.model is not None:
            for variable in resolver.missing_variables(definition.model):
                needed.setdefault(variable, []).append(definition.name)
    notes = []
    for variable, names in needed.items():
        also = " (or OPENAI_BASE_URL, for an OpenAI-compatible server)" if variable == "OPENAI_API_KEY" else ""
        notes.append(
            f"warning: {variable} is not set here; {', '.join(repr(n) for n in names)} cannot run until it is: "
            f"set it{also} where `agentwatch run` or `serve` runs"
        )
    return notes


def _add_rule_observers(roster: Roster) -> None:
    """Add the rule observers every engine carries, which a definition may name as its observer."""
    from agentwatch.watchers.rules import default_rules, rule_definition

    for name in default_rules():
        if name not in roster:
            roster.add(rule_definition(name))


@agents.command("list")
@click.option("--dir", "agents_dir", type=DIRECTORY, help=AGENTS_DIR_HELP)
def list_agents(agents_dir: Path | None) -> None:
    """Show the roles the agents directory defines.

    \b
    Example:
      agentwatch agents list --dir examples/demo/agents
    """
    from rich.markup import escape

    from agentwatch.cli._table import print_note, print_table
    from agentwatch.runtime.models.refs import ModelResolver
    from agentwatch.runtime.roster import load_roster

    config = resolve_config()
    directory = agents_dir or (config.root / config.agents_dir)
    if not directory.is_dir():
        print_note(f"[yellow]no agents directory at {escape(str(directory))}: create it (one <name>.md per agent)[/]")
        return
    roster = load_roster(directory, models=ModelResolver.from_config(config))
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
    _add_rule_observers(roster)  # (after the rows: the directory's own roles are listed)
    if problems := roster.problems:  # (checked without the project's tools: `check --tool NAME` declares them)
        print_note(
            f"[yellow]{len(problems)} problem(s) in these files; `agentwatch agents check` lists them, with what it "
            "checks beyond them (the setup's tools, agentwatch.toml, the observer gate)[/]"
        )
