"""The `agentwatch` command line: one command (or group) per module.

Every command takes `--store URL` (or `AGENTWATCH_STORE`); `--json` prints exactly what the matching tool
returns. Run `agentwatch COMMAND --help` for an example of each.
"""

from __future__ import annotations

import click

from agentwatch import __version__
from agentwatch.cli._common import run_cli
from agentwatch.cli.agents import agents
from agentwatch.cli.db import db
from agentwatch.cli.reads import READ_COMMANDS
from agentwatch.cli.run import run

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="agentwatch")
def cli() -> None:
    """agentwatch: run LLM agents that can be watched.

    \b
    Examples:
      agentwatch run coder "Fix the failing test"   run one agent, streaming its turn
      agentwatch ls --word needs_you                agents waiting on you
      agentwatch tail ses_... -f                    follow an agent live
      agentwatch agents check                       check the agent definitions
      agentwatch db info                            where the store is and what it holds
    """


cli.add_command(agents)
cli.add_command(db)
cli.add_command(run)
for command in READ_COMMANDS:
    cli.add_command(command)


def main() -> None:
    """Entry point of the `agentwatch` script."""
    run_cli(cli)
