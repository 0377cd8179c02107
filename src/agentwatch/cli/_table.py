"""Tables for people on a terminal, tab-separated rows for everything else.

On a terminal a table is laid out by rich (aligned, styled, cut to the screen). Piped or redirected, it is
one line per row, cells separated by a tab, with nothing cut, padded or styled (`agentwatch ls | cut -f2`);
a header line comes first when the table has one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich.text import Text

from agentwatch.cli._common import console, err_console

__all__ = ["Cell", "plain", "print_note", "print_table"]

Cell = str | Text
"""A cell: rich markup (user text escaped) or a styled `Text`."""


def plain(cell: Cell) -> str:
    """The text of a cell, without markup, on one line (tabs and newlines become spaces)."""
    text = cell.plain if isinstance(cell, Text) else Text.from_markup(cell).plain
    return " ".join(text.replace("\t", " ").splitlines()) if text else ""


def print_table(
    headers: Sequence[str] | None,
    rows: Iterable[Sequence[Cell]],
    *,
    columns: Sequence[dict[str, Any]] | None = None,
    **table_options: Any,
) -> None:
    """Print `rows` under `headers` (None: no header line); `columns` are rich column options, per column."""
    rows = list(rows)
    if not console.is_terminal:
        lines = ([list(headers)] if headers else []) + [[plain(cell) for cell in row] for row in rows]
        for line in lines:
            console.file.write("\t".join(line) + "\n")
        console.file.flush()
        return
    from rich.table import Table

    width = len(headers) if headers else max((len(row) for row in rows), default=0)
    table = Table(show_header=headers is not None, **table_options)
    for index in range(width):
        options = columns[index] if columns and index < len(columns) else {}
        table.add_column(headers[index] if headers else "", **options)
    for row in rows:
        table.add_row(*row)
    console.print(table)


def print_note(markup: str) -> None:
    """A line about the output rather than of it (no rows, where the next page starts): on a terminal with
    the output, else on standard error, so that piped output holds only rows."""
    (console if console.is_terminal else err_console).print(markup, soft_wrap=True)
