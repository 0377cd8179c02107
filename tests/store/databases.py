"""Throwaway databases for the store tests: a SQLite file, or a fresh PostgreSQL schema per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BACKENDS = ("sqlite", "postgres")


def sqlite_url(path: Path) -> str:
    """The store URL of a SQLite file (an absolute path: four slashes)."""
    return f"sqlite:///{path}"


@contextmanager
def postgres_schema(base_url: str) -> Iterator[str]:
    """A store URL whose tables live in a new schema of their own, dropped afterwards.

    A schema per test keeps tests apart at a fraction of the cost of a database per test.
    """
    import psycopg
    from psycopg import sql

    name = f"aw_test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(base_url, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    try:
        separator = "&" if "?" in base_url else "?"
        yield f"{base_url}{separator}options=-csearch_path%3D{name}"
    finally:
        with psycopg.connect(base_url, autocommit=True) as connection:
            connection.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))
