"""The `agentwatch` command line: one command (or group) per module, each imported only when it runs.

Every command takes `--store URL` (or `AGENTWATCH_STORE`); `--json` prints exactly what the matching tool
returns, and an error as `{"error": {...}}`. Run `agentwatch COMMAND --help` for an example of each.

`agentwatch --help` imports no command: the table below names each command's module and its one-line help
(a test checks that the line is the command's own). Only `run` loads the model layer.
"""

from __future__ import annotations

import gc
import os
import sys
from typing import Any

import click

from agentwatch import __version__
from agentwatch.cli._common import ExitCode, harden, run_cli

__all__ = [
    "COMMANDS",
    "LONG_SUBCOMMANDS",
    "SHORT_COMMANDS",
    "WAITING_COMMANDS",
    "ExitCode",
    "LazyGroup",
    "cli",
    "collect_garbage",
    "main",
    "starts_short",
]

COMMANDS: dict[str, tuple[str, str]] = {
    "agents": ("agentwatch.cli.agents:agents", "The agent definitions in the agents directory."),
    "answer": ("agentwatch.cli.act:answer", "Answer an agent's question (or pick an option with --choice)."),
    "approve": ("agentwatch.cli.act:approve", "Approve a tool call an agent waits on."),
    "await": ("agentwatch.cli.reads:await_", "Wait until an agent settles; show its snapshot."),
    "create": ("agentwatch.cli.act:create", "Create an agent, with a first input when given; returns at once."),
    "db": ("agentwatch.cli.db:db", "The store: where it is and what it holds."),
    "delete": ("agentwatch.cli.act:delete", "Delete an agent (stops its turn; readable by id until reaped)."),
    "deny": ("agentwatch.cli.act:deny", "Deny a tool call an agent waits on."),
    "escalate": ("agentwatch.cli.act:escalate", "Hand a question held for the parent agent to a person now."),
    "export": ("agentwatch.cli.reads:export", "Print an agent's whole record as one JSON document."),
    "get": ("agentwatch.cli.reads:get", "Show one agent: its record and what it is doing now."),
    "hand-back": ("agentwatch.cli.act:hand_back", "Hand back an agent you took over: its waiting inputs run."),
    "history": ("agentwatch.cli.reads:history", "Show an agent's transcript, a page at a time."),
    "ls": ("agentwatch.cli.reads:ls", "List agents: the boss, then live ones, then the rest."),
    "prompt": ("agentwatch.cli.reads:prompt", "Show the exact prompt a turn was dispatched with."),
    "mcp": ("agentwatch.cli.serve:mcp", "Serve the tools as an MCP server on stdin/stdout."),
    "run": ("agentwatch.cli.run:run", "Run an agent on a prompt and stream its turn."),
    "runs": (
        "agentwatch.cli.runs:runs",
        "Runs (workflows, heartbeats, hooks): read them; fire a hook.",
    ),
    "send": ("agentwatch.cli.act:send", "Queue input for an agent's next turn."),
    "serve": ("agentwatch.cli.serve:serve", "Run the engine as a service: HTTP tools, live attach and MCP."),
    "stop": ("agentwatch.cli.act:stop", "Stop an agent's turn (it ends cancelled)."),
    "summary": ("agentwatch.cli.reads:summary", "Counts per status and word, a window's activity and spend."),
    "take-over": ("agentwatch.cli.act:take_over", "Take an agent over: its inputs wait until you hand it back."),
    "tail": ("agentwatch.cli.reads:tail", "Show an agent's recent events; with -f, follow them live."),
}
"""Command name → (`module:attribute`, the short help `--help` lists): the command's own `short_help`,
which `tests/cli` keeps equal to this line."""


class LazyGroup(click.Group):
    """A group that imports a command's module only when that command is run or its help is shown.

    Errors never become tracebacks: `main` runs the command under the one error wrapper (`run_cli`), and
    every loaded command's string parameters refuse text that cannot be stored (`harden`).
    """

    def __init__(self, *args: Any, lazy: dict[str, tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            import importlib

            module, _, attribute = self.lazy[cmd_name][0].partition(":")
            command = getattr(importlib.import_module(module), attribute)
            assert isinstance(command, click.Command), f"{module}:{attribute} is not a click command"
            self.add_command(harden(command), cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from the table: listing the commands imports none of them."""
        rows = []
        for name in self.list_commands(ctx):
            if name in self.commands:
                rows.append((name, self.commands[name].get_short_help_str()))
            else:
                rows.append((name, self.lazy[name][1]))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def main(self, args: Any = None, prog_name: str | None = None, **extra: Any) -> Any:  # type: ignore[override]
        """Run the CLI with agentwatch's exit codes and errors (see `ExitCode`); never a traceback."""
        return run_cli(self, args, prog_name=prog_name, **extra)


@click.group(
    cls=LazyGroup,
    lazy=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog="Exit codes: 0 done, 1 failed or refused, 2 usage error, 3 timed out, 130 interrupted.",
)
@click.version_option(__version__, prog_name="agentwatch")
def cli() -> None:
    """agentwatch: run LLM agents that can be watched.

    \b
    Examples:
      agentwatch run coder "Fix the failing test"   run one agent, streaming its turn
      agentwatch ls --word needs_you                agents waiting on you
      agentwatch answer asker "Yes, go ahead"       answer the question an agent waits on
      agentwatch tail ses_... -f                    follow an agent live
      agentwatch agents check                       check the agent definitions
      agentwatch db info                            where the store is and what it holds
    """


SHORT_COMMANDS = frozenset(
    {"agents", "answer", "approve", "db", "delete", "deny", "escalate", "export", "get", "hand-back", "history"}
    | {"ls", "prompt", "runs", "send", "stop", "summary", "take-over"}
)
"""Commands that end as soon as they have done one thing. The `agentwatch` process runs them with the cyclic
garbage collector off: it would pause a few times while the command imports what it needs, with nothing to
collect after. The others may wait, follow or serve for hours (`run`, `serve`, `mcp`, `tail -f`, `await`)."""

WAITING_COMMANDS = frozenset({"tail", "await"})
"""Commands that start as the short ones do, with the collector off, and may then wait or follow for hours:
they turn it back on (`collect_garbage`) before they wait."""

LONG_SUBCOMMANDS = frozenset({("runs", "fire")})
"""Subcommands of a short command's group that run agents (the user's setup, models and tool servers) and
wait: they start as `run` does."""


def collect_garbage() -> None:
    """Turn the cyclic garbage collector back on: the command goes on for longer than its start."""
    gc.enable()


def starts_short(argv: list[str]) -> bool:
    """Whether the command line `argv` (without the program) starts as a short command: with the collector
    off and no pydantic plugin scan (see `main`)."""
    words = tuple(arg for arg in argv if not arg.startswith("-"))[:2]
    return bool(words) and words[0] in SHORT_COMMANDS | WAITING_COMMANDS and words not in LONG_SUBCOMMANDS


def main() -> None:
    """Entry point of the `agentwatch` script (and of `python -m agentwatch`)."""
    if starts_short(sys.argv[1:]):
        gc.disable()
        # pydantic looks for plugins (scanning every installed package's entry points) at the first model it
        # builds: a twentieth of such a command's start. These commands start no other process and load no
        # plugin-aware code of the user's, so they skip the scan unless the user says otherwise.
        os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    cli.main()
