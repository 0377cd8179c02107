"""What every command shares: the store option, JSON output, and errors printed instead of tracebacks."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console

from agentwatch.config import Config, load_config
from agentwatch.errors import AgentwatchError

__all__ = ["console", "err_console", "print_json", "resolve_config", "run_async", "run_cli", "store_option"]

console = Console()
err_console = Console(stderr=True)
T = TypeVar("T")


def store_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`--store URL`: the store to use (default: AGENTWATCH_STORE, then agentwatch.toml, then ./.agentwatch)."""
    return click.option(
        "--store",
        "store_url",
        metavar="URL",
        default=None,
        help="Store URL (sqlite:///path.db or postgresql://...). Default: $AGENTWATCH_STORE, agentwatch.toml, "
        "then sqlite:///.agentwatch/agentwatch.db.",
    )(fn)


def resolve_config(store_url: str | None = None, root: Path | None = None) -> Config:
    """The project configuration, with `--store` applied over it."""
    config = load_config(root or Path("."))
    if store_url:
        config = config.model_copy(update={"store": store_url})
    return config


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine."""
    return asyncio.run(coro)


def print_json(value: Any) -> None:
    """Print a tool's dict as JSON, exactly."""
    click.echo(json.dumps(value, indent=2, default=str))


def run_cli(group: click.Group) -> None:
    """Run the CLI; an agentwatch error prints its message (or its JSON with --json) and exits 1."""
    try:
        group.main(standalone_mode=False)
    except click.exceptions.Abort:
        err_console.print("aborted")
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except AgentwatchError as exc:
        if "--json" in sys.argv:
            print_json(exc.to_dict())
        else:
            err_console.print(f"[bold red]error[/] ({exc.code}): {exc.message}")
        sys.exit(1)
