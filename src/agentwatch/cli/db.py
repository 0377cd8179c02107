"""`agentwatch db`: the store itself."""

from __future__ import annotations

import click
from rich.table import Table

from agentwatch.cli._common import console, print_json, resolve_config, run_async, store_option
from agentwatch.store import StoreInfo, open_store

__all__ = ["db"]


@click.group(short_help="The store: where it is and what it holds.")
def db() -> None:
    """The store: where it is and what it holds."""


async def _info(url: str) -> StoreInfo:
    async with open_store(url) as store:
        return await store.info()


@db.command("info")
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON.")
def info(store_url: str | None, as_json: bool) -> None:
    """Show the store's backend, schema version and size (opening it creates and migrates it).

    \b
    Example:
      agentwatch db info --store sqlite:///.agentwatch/agentwatch.db
    """
    config = resolve_config(store_url)
    answer = run_async(_info(config.store))
    if as_json:
        print_json(answer.model_dump(mode="json"))
        return
    table = Table(show_header=False, box=None)
    table.add_row("[bold]store[/]", answer.url)
    table.add_row("backend", answer.backend)
    table.add_row("schema", f"{answer.schema_version} (this agentwatch writes {answer.code_schema_version})")
    table.add_row("sessions", f"{answer.sessions:,}")
    table.add_row("events", f"{answer.events:,}")
    if answer.path_bytes is not None:
        table.add_row("on disk", f"{answer.path_bytes / 1024:,.1f} KiB")
    console.print(table)
