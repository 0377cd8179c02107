"""Every way opening or asking the store can go wrong: the right class and code, a message that names the
problem and what to do, and nothing written."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from agentwatch.errors import (
    InvalidArgument,
    InvalidCursor,
    MissingDependency,
    NotADatabase,
    SchemaTooNew,
    StoreError,
    StoreUnavailable,
)
from agentwatch.events import NewEvent, TurnId, UserMessage
from agentwatch.store import (
    SCHEMA_VERSION,
    SessionDraft,
    SessionFilter,
    Store,
    Write,
    _sqlite_connection,
    connect_store,
    open_store,
)

from .databases import postgres_schema, sqlite_url


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("mysql://root@localhost/agents", "unknown store URL scheme 'mysql'"),
        ("agentwatch.db", "has no scheme"),
    ],
)
async def test_a_url_without_a_known_scheme_is_refused(url: str, named: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        await connect_store(url)
    assert caught.value.code == "invalid_argument"
    assert named in caught.value.message
    assert "sqlite:///" in caught.value.message
    assert "postgresql://" in caught.value.message


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("sqlite://", "names no file"),
        ("sqlite:///x.db?synchronous=sometimes", "synchronous='sometimes'"),
        ("sqlite:///x.db?journal=off", "unknown option(s) ['journal']"),
    ],
)
async def test_a_bad_sqlite_url_is_refused(url: str, named: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        await connect_store(url)
    assert named in caught.value.message


@pytest.mark.timeout(15)
async def test_unreachable_postgres_fails_fast_naming_the_address() -> None:
    # Port 1 on the loopback interface: nothing listens there, so the connection is refused at once.
    with pytest.raises(StoreUnavailable) as caught:
        await connect_store("postgresql://postgres:secret@127.0.0.1:1/agents")
    message = caught.value.message
    assert caught.value.code == "store_unavailable"
    assert "cannot reach PostgreSQL database 'agents' at 127.0.0.1:1" in message
    assert "is the server running" in message
    # Once with libpq's tab-indented "Is the server running ...?" as the reason, then ours again.
    assert "\t" not in message and message.lower().count("is the server running") == 1
    assert "postgresql://postgres:***@127.0.0.1:1/agents" in message
    assert "secret" not in message


async def test_a_postgres_url_without_a_database_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once: libpq took the user's name, and the schema went into the server's own `postgres` database."""
    monkeypatch.delenv("PGDATABASE", raising=False)
    with pytest.raises(InvalidArgument, match="names no database; name one"):
        await connect_store("postgresql://postgres@127.0.0.1:1/")


async def test_a_missing_postgres_database_says_to_create_it(postgres_url: str) -> None:
    """Once: "cannot reach ...; is the server running ...?", though the server had answered."""
    base = postgres_url.rsplit("/", 1)[0]
    with pytest.raises(StoreUnavailable) as caught:
        await connect_store(f"{base}/agentwatch_no_such_database")
    message = caught.value.message
    assert "PostgreSQL database 'agentwatch_no_such_database'" in message and "does not exist; create it" in message
    assert "is the server running" not in message


def test_missing_psycopg_names_the_extra_to_install() -> None:
    script = (
        "import asyncio, sys\n"
        "sys.modules['psycopg'] = None\n"  # what an install without the extra looks like
        "from agentwatch.errors import MissingDependency\n"
        "from agentwatch.store import connect_store\n"
        "try:\n"
        "    asyncio.run(connect_store('postgresql://postgres@127.0.0.1:5432/test'))\n"
        "except MissingDependency as error:\n"
        "    print(error.code, error.message)\n"
    )
    printed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert printed.startswith(f"{MissingDependency.code} ")
    assert "pip install 'agentwatch[postgres]'" in printed


@pytest.mark.parametrize("content", [b"name,role\nnova,chat\n" * 50, b"tiny"])
def test_a_file_that_is_not_a_database_is_refused_and_left_alone(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "notes.csv"
    path.write_bytes(content)

    with pytest.raises(NotADatabase) as caught:
        asyncio.run(connect_store(sqlite_url(path)))

    assert caught.value.code == "not_a_database"
    assert repr(str(path)) in caught.value.message
    assert "point the store URL at" in caught.value.message
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.csv"]


def test_a_database_of_another_program_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE things (id INTEGER PRIMARY KEY)")
    connection.close()
    before = path.read_bytes()

    with pytest.raises(NotADatabase, match="another program") as caught:
        asyncio.run(connect_store(sqlite_url(path)))

    assert "point the store URL at a new file" in caught.value.message
    assert path.read_bytes() == before


@pytest.mark.postgres
def test_a_postgres_database_of_another_program_is_refused_and_left_alone(postgres_url: str) -> None:
    """Once, its tables went in beside the other program's (by `agentwatch ls` too), and a table name both use
    failed the migration as "the store failed: relation "sessions" already exists"."""
    import psycopg

    with postgres_schema(postgres_url) as url:
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY, cookie TEXT)")

        with pytest.raises(NotADatabase, match="another program") as caught:
            asyncio.run(connect_store(url))

        assert "has 1 table(s) but no agentwatch schema" in caught.value.message
        assert "point the store URL at a new database" in caught.value.message
        with psycopg.connect(url, autocommit=True) as connection:
            tables = connection.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
            assert [row[0] for row in tables] == ["sessions"]


async def test_a_store_another_process_holds_locked_is_refused_as_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once refused as "cannot be read as a SQLite database ... check the store URL"."""
    path = tmp_path / "held.db"
    await (await connect_store(sqlite_url(path))).close()
    monkeypatch.setattr(_sqlite_connection, "_BUSY_TIMEOUT_MS", 100)  # (the wait for the lock: 5 s)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(StoreError, match="locked by another process") as caught:
            await connect_store(sqlite_url(path))
        assert not isinstance(caught.value, NotADatabase)
    finally:
        holder.close()
    await (await connect_store(sqlite_url(path))).close()  # once it lets go


async def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(NotADatabase, match="is a directory"):
        await connect_store(sqlite_url(tmp_path))


def _sqlite_contents(path: Path) -> list[str]:
    with sqlite3.connect(path) as connection:
        dump = list(connection.iterdump())
    connection.close()
    return dump


async def _create_one_session(url: str) -> None:
    async with open_store(url) as store:
        await store.create_session(SessionDraft(name="nova", role="chat"))


def test_a_database_from_a_newer_schema_is_refused_and_left_alone(store_url: str, backend: str) -> None:
    asyncio.run(_create_one_session(store_url))
    insert = "INSERT INTO schema_migrations (version, name, applied_at) VALUES (99, 'future', 'later')"
    if backend == "sqlite":
        path = Path(store_url.removeprefix("sqlite:///"))
        with sqlite3.connect(path) as connection:
            connection.execute(insert)
        connection.close()
        before: object = (path.read_bytes(), _sqlite_contents(path))
    else:
        import psycopg

        with psycopg.connect(store_url, autocommit=True) as connection:
            connection.execute(insert)
            before = connection.execute("SELECT * FROM schema_migrations ORDER BY version").fetchall()

    with pytest.raises(SchemaTooNew) as caught:
        asyncio.run(connect_store(store_url))

    assert caught.value.code == "schema_too_new"
    assert (
        f"written by a newer agentwatch (schema 99, this one knows {SCHEMA_VERSION}); upgrade agentwatch"
        in caught.value.message
    )
    if backend == "sqlite":
        assert (path.read_bytes(), _sqlite_contents(path)) == before
    else:
        with psycopg.connect(store_url, autocommit=True) as connection:
            assert connection.execute("SELECT * FROM schema_migrations ORDER BY version").fetchall() == before


@pytest.mark.parametrize(
    ("cursor", "named"),
    [
        ("garbage", "is not a page cursor"),
        ("p1.a", "not valid base64"),
        ("p1.aGVsbG8gd29ybGQ", "altered or cut short"),
    ],
)
async def test_a_malformed_cursor_is_refused(cursor: str, named: str) -> None:
    async with open_store("sqlite://:memory:") as store:
        with pytest.raises(InvalidCursor) as caught:
            await store.list_sessions(SessionFilter(), cursor=cursor)
    assert caught.value.code == "invalid_argument"
    assert named in caught.value.message
    assert "cursor" in caught.value.message


async def test_a_limit_out_of_range_says_the_range() -> None:
    async with open_store("sqlite://:memory:") as store:
        with pytest.raises(InvalidArgument) as caught:
            await store.list_sessions(SessionFilter(), limit=500)
        assert caught.value.to_dict() == {
            "error": {"code": "invalid_argument", "message": "limit must be an integer from 1 to 100, not 500"}
        }
        session = await store.create_session(SessionDraft(name="nova", role="chat"))
        with pytest.raises(InvalidArgument, match="from 1 to 10000, not 0"):
            await store.read_events(session.id, limit=0)
        with pytest.raises(InvalidArgument, match="a seq must be a whole number"):
            await store.read_events(session.id, after_seq=-1)


async def test_two_processes_opening_a_fresh_database_migrate_once(store_url: str) -> None:
    script = (
        "import asyncio, sys\n"
        "from agentwatch.store import open_store\n"
        "async def main():\n"
        "    async with open_store(sys.argv[1]) as store:\n"
        "        print((await store.info()).schema_version)\n"
        "asyncio.run(main())\n"
    )
    children = [
        await asyncio.create_subprocess_exec(sys.executable, "-c", script, store_url, stdout=subprocess.PIPE)
        for _ in range(3)
    ]
    outputs = [(await child.communicate())[0] for child in children]
    assert outputs == [f"{SCHEMA_VERSION}\n".encode()] * 3
    async with open_store(store_url) as store:
        assert (await store.info()).schema_version == SCHEMA_VERSION


async def test_an_event_that_is_not_a_payload_model_or_has_a_turn_id_that_is_not_text_is_refused(
    store: Store,
) -> None:
    session = await store.create_session(SessionDraft(name="nova", role="chat"))
    bad: list[NewEvent] = [
        NewEvent({"type": "message.user", "text": "hi"}),  # type: ignore[arg-type]
        NewEvent(UserMessage(text="hi"), turn_id=7),  # type: ignore[arg-type]
    ]
    for new in bad:
        with pytest.raises(InvalidArgument, match=r"payload must be an instance|turn_id must be text") as refused:
            await store.write(Write(session.id, [NewEvent(UserMessage(text="first")), new]))
        assert refused.value.code == "invalid_argument"
    assert await store.read_events(session.id) == []
    [stored] = await store.append(session.id, [NewEvent(UserMessage(text="ok"), turn_id=TurnId("trn_1"))])
    assert await store.read_events(session.id) == [stored]
    assert (stored.seq, stored.sub, stored.turn_id, stored.conversation_id) == (1, 0, "trn_1", session.conversation_id)
