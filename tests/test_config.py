"""Configuration: `agentwatch.toml` under the project root, `AGENTWATCH_*` variables over it, and errors that name
where the bad value came from."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentwatch.config import DEFAULT_STORE_URL, load_config
from agentwatch.errors import InvalidArgument
from agentwatch.runtime.engine import Engine


@pytest.mark.parametrize(
    ("name", "value", "field"),
    [
        ("AGENTWATCH_LEASE_SECONDS", "abc", "sessions.lease_seconds"),
        ("AGENTWATCH_DEPLOY_HOLD_MINUTES", "-1", "server.deploy_hold_minutes"),
    ],
)
def test_a_bad_variable_is_named_not_a_file_that_does_not_exist(
    tmp_path: Path, name: str, value: str, field: str
) -> None:
    """Once: "'agentwatch.toml' has problems: sessions.lease_seconds: ..." with no such file anywhere."""
    with pytest.raises(InvalidArgument) as caught:
        load_config(tmp_path, env={name: value})

    message = caught.value.message
    assert message.startswith(f"the configuration has problems: {name}={value!r}: "), message
    assert "agentwatch.toml" not in message and field not in message
    (tmp_path / "agentwatch.toml").write_text("[sessions]\nstuck_after_seconds = 60\n")  # a good file beside
    with pytest.raises(InvalidArgument) as beside:
        load_config(tmp_path, env={name: value})
    assert beside.value.message == message  # the file is not blamed for the variable


def test_a_variable_over_a_section_the_file_got_wrong_is_an_error_not_a_crash(tmp_path: Path) -> None:
    """Once: `sessions = 5` in the file and AGENTWATCH_LEASE_SECONDS set raised TypeError."""
    (tmp_path / "agentwatch.toml").write_text("sessions = 5\n")

    with pytest.raises(InvalidArgument) as caught:
        load_config(tmp_path, env={"AGENTWATCH_LEASE_SECONDS": "3"})

    assert caught.value.message.startswith(f"{str(tmp_path / 'agentwatch.toml')!r} has problems: sessions: ")


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ('stor = "sqlite:///x.db"\n', "stor: not a setting (did you mean 'store'?)"),
        ("[sessions]\nlease_second = 3\n", "sessions.lease_second: not a setting (did you mean 'lease_seconds'?)"),
        ("[server]\nzzz = 1\n", "server.zzz: not a setting"),
        # A hook's own settings, not the file's top level (once: "did you mean 'agents_dir'?").
        (
            '[hooks.deploy]\nrole = "r"\nprompt = "p"\npromt = "x"\n',
            "hooks.deploy.promt: not a setting (did you mean 'prompt'?)",
        ),
        # Once: pydantic's "String should match pattern '^[A-Za-z0-9]...'" at "hooks.bad name!.[key]".
        (
            '[heartbeats."bad name!"]\nrole = "r"\nprompt = "p"\nevery = "1h"\n',
            "heartbeats.bad name!: not a name: use "
            "letters, digits, '_', '.' and '-', starting with a letter or digit (at most 100)",
        ),
    ],
)
def test_an_unknown_setting_gets_the_nearest_one(tmp_path: Path, toml: str, expected: str) -> None:
    (tmp_path / "agentwatch.toml").write_text(toml)

    with pytest.raises(InvalidArgument) as caught:
        load_config(tmp_path, env={})

    assert caught.value.message.endswith(expected), caught.value.message


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ('[notify]\nwebhook = "https://hooks.example.com/x"\non = true\n', "notify.on: should be a list, like [a, b]"),
        ("[observers]\nallowed_types = 5\n", "observers.allowed_types: should be a list, like [a, b]"),
    ],
)
def test_a_setting_that_takes_a_list_says_so(tmp_path: Path, toml: str, expected: str) -> None:
    """Once: "Input should be a valid tuple" (a tuple inside; the file writes a list)."""
    (tmp_path / "agentwatch.toml").write_text(toml)

    with pytest.raises(InvalidArgument) as caught:
        load_config(tmp_path, env={})

    assert caught.value.message.endswith(expected), caught.value.message


def test_a_relative_sqlite_path_of_the_project_is_under_its_root(tmp_path: Path) -> None:
    """Once: `agents_dir` was read under the root and the store's file made in the working directory."""
    project = tmp_path / "proj"
    project.mkdir()
    assert load_config(project, env={}).store == f"sqlite:///{project}/.agentwatch/agentwatch.db"
    (project / "agentwatch.toml").write_text('store = "sqlite:///data/aw.db?synchronous=normal"\n')
    assert load_config(project, env={}).store == f"sqlite:///{project}/data/aw.db?synchronous=normal"
    # A variable is taken as given, as is an absolute path, another backend, and everything under root '.'.
    given = {"AGENTWATCH_STORE": "sqlite:///here.db"}
    assert load_config(project, env=given).store == "sqlite:///here.db"
    (project / "agentwatch.toml").write_text('store = "sqlite:////srv/aw.db"\n')
    assert load_config(project, env={}).store == "sqlite:////srv/aw.db"
    (project / "agentwatch.toml").write_text('store = "postgresql://u@h/db"\n')
    assert load_config(project, env={}).store == "postgresql://u@h/db"
    assert load_config(".", env={}).store == DEFAULT_STORE_URL
    odd = tmp_path / "odd?dir"  # a path a URL cannot carry: the store stays where it was (the working directory)
    odd.mkdir()
    assert load_config(odd, env={}).store == DEFAULT_STORE_URL


@pytest.fixture
def away(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A project folder, and another one that is the working directory."""
    project, elsewhere = tmp_path / "proj", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return project, elsewhere


def test_the_variable_and_the_file_take_a_sqlite_file_path_as_store_does(
    tmp_path: Path, away: tuple[Path, Path]
) -> None:
    """Once: `--store aw.db` worked, but `AGENTWATCH_STORE=aw.db` and `store = "aw.db"` were stores with no scheme."""
    project, elsewhere = away
    (project / "agentwatch.toml").write_text('store = "data/aw.db"\n')
    assert load_config(project, env={}).store == f"sqlite:///{project}/data/aw.db"  # under the root
    (project / "agentwatch.toml").write_text(f'store = "{tmp_path}/srv/aw.db"\n')
    assert load_config(project, env={}).store == f"sqlite:///{tmp_path}/srv/aw.db"
    # The variable's relative path is the working directory's; a URL of a known scheme is as given.
    assert load_config(project, env={"AGENTWATCH_STORE": "here.db"}).store == f"sqlite:///{elsewhere}/here.db"
    given = {"AGENTWATCH_STORE": "postgresql://u@h/db"}
    assert load_config(project, env=given).store == "postgresql://u@h/db"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("redis://h/0", "unknown store URL scheme 'redis' in 'redis://h/0'; agentwatch stores live in sqlite:///"),
        ("postgresql:/h/db", "'postgresql:/h/db' is neither a store URL nor a file path; use sqlite:///"),
        ("aw.db?mode=ro", "the file path "),
    ],
)
def test_a_bad_store_is_named_with_where_it_came_from(tmp_path: Path, value: str, expected: str) -> None:
    with pytest.raises(InvalidArgument) as by_variable:
        load_config(tmp_path, env={"AGENTWATCH_STORE": value})
    said = by_variable.value.message
    assert said.startswith(f"the configuration has problems: AGENTWATCH_STORE={value!r}: {expected}"), said

    (tmp_path / "agentwatch.toml").write_text(f'store = "{value}"\n')
    with pytest.raises(InvalidArgument) as by_file:
        load_config(tmp_path, env={})
    said = by_file.value.message
    assert said.startswith(f"{str(tmp_path / 'agentwatch.toml')!r} has problems: store: {expected}"), said
    assert load_config(tmp_path, env={"AGENTWATCH_STORE": "aw.db"}).store.endswith("/aw.db")  # the variable wins


async def test_an_engine_opened_on_a_project_root_keeps_its_store_there(
    away: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    project, elsewhere = away
    for name in ("AGENTWATCH_STORE", "AGENTWATCH_AGENTS_DIR"):
        monkeypatch.delenv(name, raising=False)
    async with Engine.open(root=project, extensions=[]) as engine:
        assert engine.store.url == f"sqlite:///{project}/.agentwatch/agentwatch.db"
    assert (project / ".agentwatch" / "agentwatch.db").is_file()
    assert not (elsewhere / ".agentwatch").exists()


@pytest.mark.parametrize(
    "bind", ["127.0.0.1:99999", "127.0.0.1", "localhost:abc", ":8765", "127.0.0.1:-1", "::1", "fe80::1:8765"]
)
def test_a_bind_that_is_not_host_colon_port_is_refused_with_an_example(tmp_path: Path, bind: str) -> None:
    """Once: a port past 65535 bound another port, silently, and a bind without one crashed `serve`."""
    (tmp_path / "agentwatch.toml").write_text(f'[server]\nbind = "{bind}"\n')

    with pytest.raises(InvalidArgument) as caught:
        load_config(tmp_path)

    said = f"server.bind: {bind!r} is not HOST:PORT with a port of 0..65535 (0: any free one); e.g. "
    assert said in caught.value.message


@pytest.mark.parametrize(
    ("bind", "host", "port"),
    [("0.0.0.0:9000", "0.0.0.0", 9000), ("[::1]:8770", "::1", 8770), ("localhost:0", "localhost", 0)],
)
def test_bind_gives_the_host_and_port_serve_listens_on(tmp_path: Path, bind: str, host: str, port: int) -> None:
    (tmp_path / "agentwatch.toml").write_text(f'[server]\nbind = "{bind}"\n')

    server = load_config(tmp_path).server

    assert (server.host, server.port) == (host, port)
