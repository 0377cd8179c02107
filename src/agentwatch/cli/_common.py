"""What every command shares: the store option, JSON output, and errors printed instead of tracebacks."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console

from agentwatch.config import Config, load_config
from agentwatch.errors import AgentwatchError
from agentwatch.live import LiveRing, connect_live
from agentwatch.runtime.roster import Roster, load_roster
from agentwatch.store import Store, connect_store

__all__ = [
    "Reader",
    "console",
    "err_console",
    "json_option",
    "open_reader",
    "print_json",
    "resolve_config",
    "run_async",
    "run_cli",
    "store_option",
]

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


def json_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`--json`: print exactly the dict the matching tool returns."""
    return click.option("--json", "as_json", is_flag=True, help="Print the tool's answer as JSON, exactly.")(fn)


@dataclass
class Reader:
    """What the read commands need, without an engine: no turn is continued, no background work runs."""

    config: Config
    store: Store
    ring: LiveRing
    roster: Roster

    def stuck_after(self, role: str) -> float:
        """The role's stuck threshold in seconds."""
        return self.roster.session_settings(role, self.config.sessions).stuck_after_seconds


@asynccontextmanager
async def open_reader(config: Config) -> AsyncIterator[Reader]:
    """Open the store (and the live ring when it is shared, i.e. Redis) for reading."""
    agents_dir = config.agents_dir if config.agents_dir.is_absolute() else config.root / config.agents_dir
    roster = load_roster(agents_dir)
    store = await connect_store(config.store)
    try:
        ring = await connect_live(config.live)
        try:
            yield Reader(config, store, ring, roster)
        finally:
            await ring.close()
    finally:
        await store.close()


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
