"""`agentwatch db`: the store itself."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from agentwatch.cli._common import existing_store, print_json, resolve_config, run_async, store_option

if TYPE_CHECKING:
    from agentwatch.store import StoreInfo

__all__ = ["db"]


@click.group(short_help="The store: where it is and what it holds.")
def db() -> None:
    """The store: where it is and what it holds.

    \b
    Examples:
      agentwatch db info          the project's store (agentwatch.toml's, else .agentwatch/agentwatch.db)
      agentwatch db info --json   the same, as the exact answer
    """


async def _info(url: str) -> StoreInfo:
    from agentwatch.store import open_store

    existing_store(url)  # looking must not create one
    async with open_store(url, create=False) as store:
        return await store.info()


@db.command("info")
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON.")
def info(store_url: str | None, as_json: bool) -> None:
    """Show the store's backend, schema version and size; a store file that does not exist is an error.

    \b
    Example:
      agentwatch db info --store sqlite:///.agentwatch/agentwatch.db
    """
    config = resolve_config(store_url, reading=True)
    answer = run_async(_info(config.store))
    if as_json:  # camelCase, as every other --json answer (the record itself is stored state: snake_case)
        from pydantic.alias_generators import to_camel

        print_json({to_camel(key): value for key, value in answer.model_dump(mode="json").items()})
        return
    from rich.markup import escape

    from agentwatch.cli._table import print_table

    rows = [
        ["[bold]store[/]", escape(answer.url)],
        ["backend", answer.backend],
        ["schema", f"{answer.schema_version} (this agentwatch writes {answer.code_schema_version})"],
        ["sessions", f"{answer.sessions:,}"],
        ["events", f"{answer.events:,}"],
    ]
    if answer.path_bytes is not None:
        rows.append(["on disk", f"{answer.path_bytes / 1024:,.1f} KiB"])
    print_table(None, rows, box=None)
