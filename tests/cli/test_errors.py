"""No traceback for any input: every bad invocation is a message that names the flag, with its exit code.

Exit codes: 2 for a usage error (the flag, argument or value is wrong), 1 for a refusal (not found, a store
that cannot be used); with `--json` the error is printed on stdout as `{"error": {...}}`.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentwatch.cli import cli
from agentwatch.events import NewEvent, PageCursor, StreamCursor, UserMessage
from agentwatch.store import SessionDraft, open_store
from tests.cli.test_cli import all_commands
from tests.store.test_damaged import tamper


@dataclass(frozen=True)
class Fixture:
    url: str
    session_id: str
    history_cursor: str
    """A real `nextCursor` of `history SESSION --limit 1`."""
    root: Path


@pytest.fixture(scope="module")
def fixture(tmp_path_factory: pytest.TempPathFactory) -> Fixture:
    root = tmp_path_factory.mktemp("cli-errors")
    url = f"sqlite:///{root / 'errors.db'}"

    async def fill() -> str:
        async with open_store(url) as store:
            for name in ("alpha", "beta", "gamma"):
                session = await store.create_session(SessionDraft(name=name, role="coder"))
                await store.append(session.id, [NewEvent(UserMessage(text=f"m{i}")) for i in range(3)])
            return session.id

    session_id = asyncio.run(fill())
    (root / "agents").mkdir()
    (root / "agents" / "coder.md").write_text("---\nmodel: openai:gpt-4o\n---\nYou write code.\n")
    page = invoke(["history", session_id, "--limit", "1", "--json", "--store", url], root)
    return Fixture(url, session_id, json.loads(page.stdout)["nextCursor"], root)


def invoke(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> Result:
    """Run the CLI in-process (as the script does, through `cli.main`), from `cwd`."""
    before = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner(env=env).invoke(cli, argv)
    finally:
        os.chdir(before)


def assert_no_traceback(result: Result, argv: list[str]) -> None:
    """The invariants of every invocation, good or bad."""
    shown = f"agentwatch {argv!a} exited {result.exit_code}:\n{result.output[-3000:]}"
    assert result.exception is None or isinstance(result.exception, SystemExit), f"{shown}\n{result.exc_info}"
    assert result.exit_code in (0, 1, 2), shown
    assert "Traceback" not in result.output, shown
    assert "(internal)" not in result.stderr and '"internal"' not in result.stdout, shown
    if result.exit_code != 0 and "--json" in argv:
        error = json.loads(result.stdout)["error"]
        assert error["code"] and error["message"], shown


def forged_stream_cursor(fixture: Fixture, seq: int) -> str:
    return StreamCursor(fixture.session_id, seq).encode()


def forged_page_cursor(fixture: Fixture, key: object) -> str:
    real = PageCursor.decode(fixture.history_cursor)
    return PageCursor(real.query, (key,)).encode()


LONG_NAME = "a" * 300
S = "{session}"

# (argv, exit code, what the message must name): each case once as text and once with --json.
CASES: list[tuple[list[str], int, str]] = [
    (["ls", "--role", "\udcff"], 2, "--role"),
    (["ls", "-q", "a\x00b"], 2, "-q"),
    (["ls", "--word", "needs\udcffyou"], 2, "--word"),
    (["ls", "--status", "bogus"], 2, "--status"),
    (["ls", "--limit", "0"], 2, "--limit"),
    (["ls", "--limit", "-1"], 2, "--limit"),
    (["ls", "--limit", str(2**70)], 2, "--limit"),
    (["ls", "--limit", "ten"], 2, "--limit"),
    (["ls", "--window", "99999999999999d"], 2, "--window"),
    (["ls", "--window", "soon"], 2, "--window"),
    (["ls", "--cursor", "garbage"], 2, "--cursor"),
    (["ls", "--group", "nothing"], 2, "--group"),
    (["ls", "--bogus"], 2, "--bogus"),
    (["summary", "--window", "99999999999999d"], 2, "--window"),
    (["summary", "--window", "-1d"], 2, "--window"),
    (["get", "ses_!!!"], 1, "ses_!!!"),
    (["get", "nobody"], 1, "nobody"),
    (["get", "\udcff"], 2, "AGENT"),
    (["get"], 2, "AGENT"),
    (["history", S, "--limit", "0"], 2, "--limit"),
    (["history", S, "--cursor", "{seq_overflow_page}"], 2, "--cursor"),
    (["history", S, "--cursor", "p1.garbage"], 2, "--cursor"),
    (["history", "ses_" + "x" * 5000], 2, "AGENT"),
    (["tail", S, "--max-chars", "0"], 2, "--max-chars"),
    (["tail", S, "--max-chars", str(10**30)], 2, "--max-chars"),
    (["tail", S, "--max-events", "-1"], 2, "--max-events"),
    (["tail", S, "--after", "{seq_overflow}"], 2, "--after"),
    (["tail", S, "--after", "garbage"], 2, "--after"),
    (["tail", S, "--types", "\udcff"], 2, "--types"),
    # An argument named by a plain word is the flag only where the message names the argument, not the word.
    (["tail", S, "--types", "nope"], 2, "--types: 'nope' names no event type; the types are "),
    (
        ["history", S, "--cursor", "garbage"],
        2,
        "--cursor: 'garbage' is not a page cursor; pass back exactly the cursor",
    ),
    (["prompt", S, "--against", "yesterday"], 2, "--against"),
    (["prompt", "nobody"], 1, "nobody"),
    (["export", "ses_garbage"], 1, "ses_garbage"),
    (["await", S, "--timeout", "nan"], 2, "--timeout"),
    (["await", S, "--timeout", "-1"], 2, "--timeout"),
    (["await", S, "--timeout", "1e309"], 2, "--timeout"),
    (["await", "ses_garbage", "--timeout", "0"], 1, "ses_garbage"),
    (["ls", "--store", f"sqlite:////tmp/{LONG_NAME}.db"], 1, LONG_NAME[:50]),
    (["ls", "--store", "sqlite:////etc/hostname/x.db"], 1, "/etc/hostname/x.db"),
    (["ls", "--store", "sqlite:///{root}/missing.db"], 1, "missing.db"),
    (["ls", "--store", "mysql://x/y"], 2, "mysql"),  # (a usage error of --store: once exit 1, naming no flag)
    (["ls", "--store", "postgresql:/x"], 2, "--store"),
    (["ls", "--store", "{root}/missing.db"], 1, "missing.db"),  # (a path: the SQLite file there, which is missing)
    (["ls", "--store", "\udcff"], 2, "--store"),
    (["db", "info", "--store", f"sqlite:////tmp/{LONG_NAME}.db"], 1, LONG_NAME[:50]),
    (["db", "info", "--store", "sqlite:////etc/hostname/x.db"], 1, "/etc/hostname/x.db"),
    (["agents", "check", "--dir", f"/tmp/{LONG_NAME}"], 1, LONG_NAME[:50]),
    (["agents", "check", "--tool", "\udcff"], 2, "--tool"),
    (["agents", "list", "--dir", f"/tmp/{LONG_NAME}"], 1, LONG_NAME[:50]),
    (["agents", "check", "--dir", "a\x00b"], 2, "--dir"),
    (["agents", "list", "--dir", "a\x00b"], 2, "--dir"),
    (["run", "greeter", "  "], 2, "PROMPT: the text is blank"),  # once exit 1, naming `prompt`
    (["run", "coder", "hi", "--timeout", "nan"], 2, "--timeout"),
    (["run", "coder", "hi", "--name", "\udcff"], 2, "--name"),
    (["run", "coder", "\x00"], 2, "PROMPT"),
    (["run", "nobody", "hi"], 1, "nobody"),
    (["serve", "--port", "-1"], 2, "--port"),
    (["serve", "--port", "65536"], 2, "--port"),
    (["serve", "--port", str(2**70)], 2, "--port"),
    (["serve", "--host", "\udcff"], 2, "--host"),
    (["serve", "--deploy-hold-minutes", "nan"], 2, "--deploy-hold-minutes"),
    (["serve", "--deploy-hold-minutes", "-1"], 2, "--deploy-hold-minutes"),
    (["mcp", "--store", "\udcff"], 2, "--store"),
    (["nothing"], 2, "nothing"),
]


def fill(argv: list[str], fixture: Fixture) -> list[str]:
    values = {
        "{session}": fixture.session_id,
        "{seq_overflow}": forged_stream_cursor(fixture, 2**64),
        "{seq_overflow_page}": forged_page_cursor(fixture, 2**64),
    }
    return [values.get(a, a.replace("{root}", str(fixture.root))) for a in argv]


def _json_commands(argv: list[str]) -> list[str]:
    """`argv`'s options if the command it names takes --json (else an error is text, as --json is unknown)."""
    group: click.Command = cli
    context = click.Context(cli)
    for word in argv:
        if not isinstance(group, click.Group):
            break
        found = group.get_command(context, word)
        if found is None:
            return []
        group = found
    return [opt for param in group.params for opt in getattr(param, "opts", [])]


def _cases() -> list[tuple[list[str], int, str, bool]]:
    """Each case as text, and with --json when its command takes --json."""
    return [
        (argv, code, named, as_json)
        for argv, code, named in CASES
        for as_json in (False, True)
        if not as_json or "--json" in _json_commands(argv)
    ]


@pytest.mark.parametrize(
    ("argv", "code", "named", "as_json"),
    _cases(),
    ids=[" ".join(argv)[:40] + (" --json" if as_json else "") for argv, _, _, as_json in _cases()],
)
def test_a_bad_invocation_is_a_message_naming_what_is_wrong(
    fixture: Fixture, argv: list[str], code: int, named: str, as_json: bool
) -> None:
    argv = fill(argv, fixture)
    if "--store" not in argv:
        argv += ["--store", fixture.url] if argv[0] not in ("agents", "nothing") and len(argv) > 1 else []
    if as_json:
        argv.append("--json")
    result = invoke(argv, fixture.root, env={"AGENTWATCH_AGENTS_DIR": str(fixture.root / "agents")})
    assert_no_traceback(result, argv)
    assert result.exit_code == code, result.output
    if as_json:
        error = json.loads(result.stdout)["error"]
        message = error["message"]
        if code == 2:
            assert error["code"] == "invalid_argument"
            assert named in error["details"]["flags"] or named in message
    else:
        message = result.stderr
    assert named in message or ascii(named).strip("'") in message, result.output


def test_bytes_that_are_not_utf8_in_argv_are_refused_naming_the_flag(fixture: Fixture) -> None:
    """A real process: argv bytes that are not UTF-8 reach Python as lone surrogates."""
    command = [sys.executable, "-m", "agentwatch.cli", "ls", "--role", b"\xff\xfe".decode("utf-8", "surrogateescape")]
    done = subprocess.run(
        [*command, "--store", fixture.url, "--json"], capture_output=True, cwd=fixture.root, check=False
    )
    assert done.returncode == 2
    assert b"Traceback" not in done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["details"]["flags"] == ["--role"]


# -- the fuzz: every command's every option, with values a person (or a script) could type -------------------

NASTY = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=40),  # lone surrogates and NUL included
    st.integers(min_value=-(2**80), max_value=2**80).map(str),
    st.sampled_from(["nan", "inf", "-inf", "1e309", "-0", "", " ", "99999999999999d", "0d", "-1h", "7d"]),
    st.sampled_from(["ses_", "ses_!!!", "c1.", "p1.", "c1.AAAA", "'; DROP TABLE events; --", "%s", "{}", "[]"]),
    st.text(max_size=3).map(lambda t: t * 2000),  # long values
)


def leaf_commands() -> list[tuple[str, click.Command]]:
    skip = {"run", "serve", "mcp"}  # they open an engine and keep running; their options are in CASES
    return [(n, c) for n, c in all_commands(cli) if not isinstance(c, click.Group) and n not in skip]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "command"), leaf_commands(), ids=[n for n, _ in leaf_commands()])
def test_no_option_value_makes_a_traceback(fixture: Fixture, name: str, command: click.Command) -> None:
    options = [p for p in command.params if isinstance(p, click.Option) and p.name not in ("follow_",)]
    arguments = [p for p in command.params if isinstance(p, click.Argument)]

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        positional=st.lists(
            st.one_of(st.just(fixture.session_id), NASTY), min_size=len(arguments), max_size=len(arguments)
        ),
        chosen=st.lists(st.sampled_from(options), max_size=4, unique_by=lambda p: p.name) if options else st.just([]),
        values=st.lists(NASTY, min_size=4, max_size=4),
        as_json=st.booleans(),
    )
    def run(positional: list[str], chosen: list[click.Option], values: list[str], as_json: bool) -> None:
        argv = [*name.split(), *positional]
        for option, value in zip(chosen, values, strict=False):
            flag = max(option.opts, key=len)
            if option.is_flag:
                argv.append(flag)
            elif option.name == "store_url":
                argv += [flag, value if not value.startswith(("sqlite", "postgres")) else "x"]
            elif option.name == "timeout":
                argv += [flag, value if value.strip() not in ("inf",) else "0"]
            else:
                argv += [flag, value]
        if "--store" not in argv and name.split()[0] not in ("agents",):
            argv += ["--store", fixture.url]
        if as_json and "--json" in _json_commands(argv[: len(name.split())]):
            argv.append("--json")
        result = invoke(argv, fixture.root, env={"AGENTWATCH_AGENTS_DIR": str(fixture.root / "agents")})
        assert_no_traceback(result, argv)

    run()


def test_a_run_name_that_would_read_as_an_id_is_a_usage_error_of_its_flag() -> None:
    done = CliRunner().invoke(cli, ["run", "coder", "hi", "--name", "ses_x"])
    assert done.exit_code == 2 and "Invalid value for --name" in done.output and "looks like an agent id" in done.output


def test_a_damaged_row_is_one_line_naming_it_and_the_rest_reads_on(tmp_path: Path) -> None:
    """Rows edited behind the store's back: what cannot be read is a `damaged_record` error (exit 1, one line on
    stderr, no pydantic dump); a damaged event reads as the store's notice in its place, but for a read of its
    type alone (`get` scans the newest tool call)."""
    url = f"sqlite:///{tmp_path / 'damaged.db'}"

    async def fill() -> list[str]:
        async with open_store(url) as store:
            ids = []
            for name in ("alpha", "beta", "gamma"):
                session = await store.create_session(SessionDraft(name=name, role="coder"))
                await store.append(session.id, [NewEvent(UserMessage(text=f"m{i}")) for i in range(4)])
                ids.append(session.id)
            return ids

    alpha, beta, gamma = asyncio.run(fill())
    tamper(url, "UPDATE sessions SET settings = 'garbage' WHERE id = ?", [alpha])
    tamper(url, "UPDATE events SET payload = '{bad' WHERE session_id = ? AND seq = 2", [beta])
    call = """UPDATE events SET payload = '{"type":"tool.call"}', type = 'tool.call' WHERE session_id = ? AND seq = 2"""
    tamper(url, call, [gamma])

    damaged = {
        ("get", "alpha"): f"the stored session {alpha!r} (alpha) is damaged: its settings value is not valid JSON",
        ("history", "alpha"): "its settings value",
        ("export", "alpha"): "its settings value",
        ("get", "gamma"): f"the stored event 2 (tool.call) of session {gamma!r} is damaged: its payload value",
    }
    for argv, named in damaged.items():
        result = invoke([*argv, "--store", url], tmp_path)
        assert_no_traceback(result, list(argv))
        assert result.exit_code == 1, result.output
        (line,) = result.stderr.splitlines()
        assert line.startswith("error (damaged_record): the stored ") and named in line, line
        assert "restore the store from a backup" in line and "pydantic" not in line
        as_json = invoke([*argv, "--store", url, "--json"], tmp_path)
        assert as_json.exit_code == 1 and json.loads(as_json.stdout)["error"]["code"] == "damaged_record"

    for argv in (["history", "beta"], ["tail", "beta"], ["export", "beta"], ["get", "beta"], ["history", "gamma"]):
        result = invoke([*argv, "--store", url], tmp_path)
        assert result.exit_code == 0, result.output
        if argv[0] != "get":
            assert "m0" in result.stdout and "m3" in result.stdout, result.stdout
            assert "event 2 (" in result.stdout and "is damaged" in result.stdout, result.stdout
