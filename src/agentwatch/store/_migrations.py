"""Versioned schema migrations, one SQL file per version and dialect (`migrations/<dialect>/NNNN_name.sql`).

Each backend runs `migrate` inside one transaction that it opened holding its migration lock (SQLite:
`BEGIN IMMEDIATE`; PostgreSQL: an advisory lock), so two processes opening a fresh database at once never
both migrate, and a failed migration leaves nothing behind. Every applied version is recorded in
`schema_migrations` (version, name, applied_at). A database recorded at a higher version than this code
knows is refused before anything is written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import Literal

from agentwatch.errors import SchemaTooNew
from agentwatch.store._sql import Dialect, Tx
from agentwatch.store.base import SCHEMA_VERSION

__all__ = ["Migration", "migrate", "migrations", "recorded_version"]

_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema version: its number, name and statements."""

    version: int
    name: str
    statements: tuple[str, ...]


@cache
def migrations(dialect: Literal["sqlite", "postgres"]) -> tuple[Migration, ...]:
    """Every migration of a dialect, in version order."""
    found: list[Migration] = []
    folder = resources.files("agentwatch.store") / "migrations" / dialect
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if match is None:
            continue
        text = entry.read_text(encoding="utf-8")
        lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
        # Statements end with ';' at the end of a line (a trigger's inner statement ends on its END's line); the
        # files hold no string literal with one.
        statements = tuple(part.strip() for part in "\n".join(lines).split(";\n") if part.strip().rstrip(";"))
        found.append(Migration(int(match[1]), match[2], tuple(s.rstrip(";") for s in statements)))
    found.sort(key=lambda migration: migration.version)
    assert [m.version for m in found] == list(range(1, len(found) + 1)), "migration versions must be 1, 2, ..."
    assert found[-1].version == SCHEMA_VERSION, "SCHEMA_VERSION must name the newest migration"
    return tuple(found)


async def recorded_version(tx: Tx, dialect: Dialect, *, where: str) -> int | None:
    """The schema version the database records (None when it has no agentwatch schema yet).

    Raises `SchemaTooNew` when a newer agentwatch wrote it; `where` names the database in the message.
    """
    if dialect.name == "sqlite":
        rows = await tx.fetch("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'")
    else:
        rows = await tx.fetch(
            "SELECT count(*) FROM pg_tables WHERE tablename = 'schema_migrations' AND schemaname = current_schema()"
        )
    if not rows[0][0]:
        return None
    version = (await tx.fetch("SELECT COALESCE(MAX(version), 0) FROM schema_migrations"))[0][0]
    if version > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"{where} was written by a newer agentwatch (schema {version}, this one knows {SCHEMA_VERSION}); "
            "upgrade agentwatch to open it"
        )
    return int(version)


async def migrate(tx: Tx, dialect: Dialect, *, where: str) -> int:
    """Bring the schema up to `SCHEMA_VERSION` and return how many migrations ran.

    Must run in a transaction that holds the backend's migration lock.
    """
    current = await recorded_version(tx, dialect, where=where)
    if current is None:
        await tx.execute(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
        )
        current = 0
    pending = [m for m in migrations(dialect.name) if m.version > current]
    for migration in pending:
        for statement in migration.statements:
            await tx.execute(statement)
        await tx.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
            (migration.version, migration.name, datetime.now(UTC).isoformat()),
        )
    return len(pending)
