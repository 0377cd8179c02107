"""What a person (or a script) gets: complete tab-separated rows when piped, `python -m agentwatch`, and
read commands that never create a store."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agentwatch.cli import cli
from agentwatch.events import (
    AssistantMessage,
    NewEvent,
    Origin,
    StreamCursor,
    TurnId,
    TurnStarted,
    Usage,
    UserMessage,
)
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.store import InputDraft, SessionDraft, SessionPatch, UsageEntry, Write, open_store
from tests.runtime.support import Scripted, role

LONG_NAME = "a-name-much-longer-than-any-terminal-column-would-show-" + "x" * 40
LONG_TEXT = "word " * 120


async def _fill(url: str) -> str:
    async with open_store(url) as store:
        session = await store.create_session(SessionDraft(name=LONG_NAME, role="coder"))
        await store.append(session.id, [NewEvent(UserMessage(text=LONG_TEXT)), NewEvent(AssistantMessage(text="ok"))])
        spent = Usage(input_tokens=1000, output_tokens=200, requests=1, cost_usd=0.0123)
        await store.write(Write(session.id, usage=[UsageEntry(role="coder", model="openai:gpt-4o", usage=spent)]))
        await store.create_session(SessionDraft(name="short", role="coder"))
        return session.id


def _on_a_terminal(command: list[str], cwd: Path, env: Mapping[str, str] | None = None) -> tuple[bytes, int]:
    """What `command` printed on a terminal of its own (a pty), and its exit code."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(command, stdout=follower, stderr=follower, cwd=cwd, env=env)
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed: the process is done
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    return seen, process.wait(timeout=30)


def test_piped_ls_is_complete_tab_separated_rows(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'out.db'}"
    session_id = asyncio.run(_fill(url))
    result = CliRunner().invoke(cli, ["ls", "--store", url, "--limit", "1"])  # CliRunner's stdout is a pipe
    assert result.exit_code == 0, result.output
    header, *rows = result.stdout.splitlines()
    assert header.split("\t") == ["NAME", "ID", "ROLE", "WORD", "STATUS", "ACTIVE", "TOKENS", "WAITING", "PARENT"]
    assert len(rows) == 1
    name, shown_id, role, *_ = rows[0].split("\t")
    assert rows[0].count("\t") == 8
    assert (name, role) == ("short", "coder")
    assert shown_id.startswith("ses_") and len(shown_id) == len(session_id)
    assert "more: --cursor" in result.stderr  # notes go beside the rows, not among them
    everything = CliRunner().invoke(cli, ["ls", "--store", url])
    assert [line.split("\t")[0] for line in everything.stdout.splitlines()] == ["NAME", "short", LONG_NAME]


def test_ls_on_a_narrow_terminal_still_shows_each_agents_name(tmp_path: Path) -> None:
    """Once: below about 110 columns the NAME column was squeezed to nothing, and ids cut short were all a person
    had to tell the rows apart."""
    url = f"sqlite:///{tmp_path / 'out.db'}"
    asyncio.run(_fill(url))
    command = [sys.executable, "-m", "agentwatch", "ls", "--store", url]
    seen, code = _on_a_terminal(command, tmp_path, env=os.environ | {"COLUMNS": "80"})
    assert code == 0
    lines = re.sub(r"\x1b\[[0-9;]*m", "", seen.decode()).splitlines()
    names = [line.split()[0] for line in lines]
    assert names[:2] == ["NAME", "short"] and LONG_NAME.startswith(names[2].removesuffix("…"))
    assert max(len(line) for line in lines) <= 80


def test_piped_get_and_history_cut_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'out.db'}"
    session_id = asyncio.run(_fill(url))
    got = CliRunner().invoke(cli, ["get", session_id, "--store", url])
    assert got.exit_code == 0, got.output
    fields = dict(line.split("\t", 1) for line in got.stdout.splitlines()[1:])
    assert fields["role"] == "coder"
    assert fields["usage"] == "1,200 tokens $0.0123"  # what it spent, not only its tokens
    assert StreamCursor.decode(fields["cursor"]).session_id == session_id  # the whole cursor, not cut
    history = CliRunner().invoke(cli, ["history", session_id, "--store", url])
    assert LONG_TEXT.strip() in history.stdout
    assert all(len(line) > 0 for line in history.stdout.splitlines())
    # Once space-separated with no header, the next page's cursor among the rows: now as `ls` prints.
    header, *rows = history.stdout.splitlines()
    assert header.split("\t") == ["AT", "SEQ", "TYPE", "WHAT", "TEXT"]
    assert [row.split("\t")[2] for row in rows] == ["message.user", "message.assistant"]
    paged = CliRunner().invoke(cli, ["history", session_id, "--store", url, "--limit", "1"])
    assert len(paged.stdout.splitlines()) == 2 and "older: --cursor" in paged.stderr


def test_summary_shows_the_words_without_being_asked(tmp_path: Path) -> None:
    """Once: how many agents were stuck or needed a person showed only with --words (summary: "counts per
    status and word"); the exact answer (--json) still has them only when asked."""
    url = f"sqlite:///{tmp_path / 'out.db'}"
    asyncio.run(_fill(url))
    shown = CliRunner().invoke(cli, ["summary", "--store", url])
    assert shown.exit_code == 0, shown.output
    assert "lineages by word: idle 2" in shown.stdout
    exact = json.loads(CliRunner().invoke(cli, ["summary", "--store", url, "--json"]).stdout)
    assert "words" not in exact


def test_python_m_agentwatch_is_the_cli(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentwatch", "--help"], capture_output=True, text=True, cwd=tmp_path, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "Usage: python -m agentwatch" in done.stdout and "  ls " in done.stdout


@pytest.mark.parametrize(
    "argv",
    [
        ["ls"],
        ["summary"],
        ["get", "coder"],
        ["history", "ses_00000000000000000000000000"],
        ["tail", "ses_00000000000000000000000000"],
        ["prompt", "ses_00000000000000000000000000"],
        ["export", "ses_00000000000000000000000000"],
        ["await", "ses_00000000000000000000000000", "--timeout", "0"],
        ["db", "info"],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_read_commands_never_create_a_store(tmp_path: Path, argv: list[str]) -> None:
    missing = tmp_path / "typo" / "agentwatch.db"
    empty = tmp_path / "empty.db"  # once made into a store: SQLite takes an empty file for a new database
    empty.touch()
    for path in (missing, empty):
        result = CliRunner().invoke(cli, [*argv, "--store", f"sqlite:///{path}", "--json"])
        assert result.exit_code == 1
        error = json.loads(result.stdout)["error"]
        assert error["code"] == "not_found"
        assert str(path) in error["message"]
    assert not missing.parent.exists() and empty.stat().st_size == 0


@pytest.mark.parametrize("command", ["history", "tail", "prompt", "export", "await"])
def test_every_agent_command_takes_a_name_or_an_id(tmp_path: Path, command: str) -> None:
    url = f"sqlite:///{tmp_path / 'out.db'}"
    session_id = asyncio.run(_fill(url))
    by_id = CliRunner().invoke(cli, [command, session_id, "--store", url, "--json"])
    by_name = CliRunner().invoke(cli, [command, "short", "--store", url, "--json"])
    by_long_name = CliRunner().invoke(cli, [command, LONG_NAME, "--store", url, "--json"])
    assert by_id.exit_code == by_long_name.exit_code, by_long_name.output
    if command not in ("export", "await"):  # answers that hold the moment they were made
        assert json.loads(by_id.stdout) == json.loads(by_long_name.stdout)
    assert by_name.exit_code == by_id.exit_code
    assert session_id not in by_name.stdout


def test_a_name_that_several_agents_share_is_refused_with_their_ids(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'out.db'}"

    async def twins() -> list[str]:
        async with open_store(url) as store:
            return [(await store.create_session(SessionDraft(name="twin", role="r", scope=s))).id for s in "ab"]

    ids = asyncio.run(twins())
    result = CliRunner().invoke(cli, ["history", "twin", "--store", url, "--json"])
    assert result.exit_code == 1
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "ambiguous"
    assert all(session_id in error["message"] for session_id in ids)


def test_await_exits_3_when_the_timeout_passes_first(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'out.db'}"
    session_id = _running_session(url)
    result = CliRunner().invoke(cli, ["await", "busy", "--timeout", "0.2", "--store", url, "--json"])
    assert result.exit_code == 3, result.output
    assert json.loads(result.stdout)["agentId"] == session_id
    assert json.loads(result.stdout)["timedOut"] is True


def test_shell_completion_completes_commands_and_flags() -> None:
    """The README's completion recipe: the shell asks the command itself (`_AGENTWATCH_COMPLETE`)."""

    def complete(words: str) -> list[str]:
        env = {"_AGENTWATCH_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1)}
        result = CliRunner(env=env).invoke(cli, [], prog_name="agentwatch")
        return result.stdout.split()

    assert complete("agentwatch hi") == ["plain,history"]
    assert complete("agentwatch ls --group-") == ["plain,--group-key"]


def _running_session(url: str) -> str:
    async def running() -> str:
        async with open_store(url) as store:
            session = await store.create_session(SessionDraft(name="busy", role="r"))
            await store.update_session(session.id, SessionPatch(status="running"))
            return session.id

    return asyncio.run(running())


def test_await_shows_what_it_waits_for_on_a_terminal_only(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'out.db'}"
    _running_session(url)
    command = [sys.executable, "-m", "agentwatch", "await", "busy", "--timeout", "1.5", "--store", url]
    seen, code = _on_a_terminal(command, tmp_path)
    assert code == 3
    assert b"waiting for busy (running)" in seen
    piped = subprocess.run(command, capture_output=True, cwd=tmp_path, check=False, timeout=30)
    assert piped.returncode == 3
    assert b"waiting for" not in piped.stdout + piped.stderr


def test_a_reader_that_goes_away_stops_the_output_quietly(tmp_path: Path) -> None:
    """`agentwatch history big | head -c 10`: no traceback when the pipe closes under the writer."""
    url = f"sqlite:///{tmp_path / 'out.db'}"

    async def big() -> None:
        async with open_store(url) as store:
            session = await store.create_session(SessionDraft(name="big", role="r"))
            await store.append(session.id, [NewEvent(UserMessage(text=f"{i} " + "x" * 3000)) for i in range(100)])

    asyncio.run(big())
    command = [sys.executable, "-m", "agentwatch", "history", "big", "--limit", "100", "--store", url]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.read(10)
    process.stdout.close()
    errors = process.stderr.read()
    process.stderr.close()
    assert process.wait(timeout=60) == 1
    assert errors == b""


def test_run_without_a_terminal_leaves_a_question_pending_and_says_how_to_answer(
    scripted: Scripted, tmp_path: Path
) -> None:
    def script(ctx: Any) -> Any:
        if not ctx.tool_results:
            return CallTool("ask_user", {"question": "Which colour?"})
        return Reply(f"You chose {ctx.tool_results[0].output}.")

    model = scripted("cli-asker", ScriptedModel(function=script))
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "asker.md").write_text(role("asker", model, tools=("ask_user",)).to_markdown())
    url = f"sqlite:///{tmp_path / 'run.db'}"
    argv = [
        "run",
        "asker",
        "pick a colour",
        "--name",
        "asker",
        "--agents-dir",
        str(tmp_path / "agents"),
        "--store",
        url,
    ]
    result = CliRunner().invoke(cli, argv, input="")  # stdin is not a terminal
    assert result.exit_code == 0, result.output
    assert "asker waits on you: Which colour?" in result.stderr
    assert "stays pending" in result.stderr
    listed = CliRunner().invoke(cli, ["ls", "--word", "needs_you", "--store", url, "--json"])
    assert [row["name"] for row in json.loads(listed.stdout)["agents"]] == ["asker"]
    # The command it prints answers the request.
    hint = re.search(r"`(agentwatch answer (req_\w+) TEXT)`", result.stderr)
    assert hint is not None, result.stderr
    answered = CliRunner().invoke(cli, ["answer", hint.group(2), "green", "--store", url, "--json"])
    assert answered.exit_code == 0, answered.output
    assert json.loads(answered.stdout)["status"] == "resolved"


def test_run_leaves_other_agents_cut_off_turns_alone(scripted: Scripted, tmp_path: Path) -> None:
    """Once: every `run` took over the store's cut-off turns, printed them as its own, and cut them off again
    as it exited, so a few short runs used up another agent's `continue_after_restart` and ended its turn."""
    model = scripted("cli-greeter", ScriptedModel.replying("Hello."))
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "greeter.md").write_text(role("greeter", model).to_markdown())
    url = f"sqlite:///{tmp_path / 'run.db'}"

    async def cut_off() -> tuple[str, int]:
        """What a process that died mid-turn leaves: a running turn whose lease nobody renews."""
        async with open_store(url) as store:
            session = await store.create_session(SessionDraft(name="other", role="greeter"))
            turn = TurnId("trn_cut")
            await store.write(
                Write(
                    session.id,
                    events=[NewEvent(TurnStarted(), turn), NewEvent(UserMessage(text="go"), turn)],
                    session=SessionPatch(status="running", current_turn_id=turn, turn_attempts=1),
                )
            )
            await store.acquire_lease(session.id, "a-dead-process", 0.01)
            return session.id, (await store.get_session(session.id)).last_seq

    other, last_seq = asyncio.run(cut_off())
    argv = ["run", "greeter", "hi", "--agents-dir", str(tmp_path / "agents"), "--store", url]
    for _ in range(4):
        result = CliRunner().invoke(cli, argv, input="")
        assert result.exit_code == 0, result.output
        assert "Hello." in result.stdout and "go" not in result.stdout.split()

    async def left() -> tuple[int, int, str]:
        async with open_store(url) as store:
            session = await store.get_session(other)
            return session.last_seq, session.turn_attempts, session.status

    assert asyncio.run(left()) == (last_seq, 1, "running")  # untouched: the next `serve` continues it


def test_db_info_json_is_camel_case_as_every_json_answer(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'out.db'}"
    asyncio.run(_fill(url))
    info = CliRunner().invoke(cli, ["db", "info", "--store", url, "--json"])
    assert info.exit_code == 0, info.output
    answer = json.loads(info.stdout)
    assert set(answer) == {"backend", "url", "schemaVersion", "codeSchemaVersion", "sessions", "events", "pathBytes"}
    assert answer["schemaVersion"] == answer["codeSchemaVersion"] and answer["sessions"] == 2


def test_a_refused_argument_says_why_without_pydantics_prefix(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'out.db'}"
    asyncio.run(_fill(url))
    refused = CliRunner().invoke(cli, ["ls", "--window", "0s", "--store", url])
    assert refused.exit_code == 2
    assert "--window" in refused.output and "Value error" not in refused.output


def test_ls_parent_takes_a_name_or_an_id(tmp_path: Path) -> None:
    """Once: `ls --parent NAME` matched nothing, silently (only the id worked)."""
    url = f"sqlite:///{tmp_path / 'out.db'}"

    async def family() -> str:
        async with open_store(url) as store:
            boss = await store.create_session(SessionDraft(name="boss", role="coder"))
            await store.create_session(SessionDraft(name="kid", role="coder", parent_id=boss.id))
            await store.create_session(SessionDraft(name="loner", role="coder"))
            return boss.id

    boss_id = asyncio.run(family())
    for parent in ("boss", boss_id):
        listed = CliRunner().invoke(cli, ["ls", "--parent", parent, "--store", url, "--json"])
        assert listed.exit_code == 0, listed.output
        assert [row["name"] for row in json.loads(listed.stdout)["agents"]] == ["kid"]
    unknown = CliRunner().invoke(cli, ["ls", "--parent", "nobody", "--store", url, "--json"])
    assert unknown.exit_code == 1 and json.loads(unknown.stdout)["error"]["code"] == "not_found"


def test_ls_shows_an_agents_observer_reports_beside_its_inputs(tmp_path: Path) -> None:
    """Once: `ls` said `1 in` of an agent with an input and an observer's report waiting (`pendingReports`,
    which `agent_list` and the dashboard carry), and nothing of one with only a report."""
    url = f"sqlite:///{tmp_path / 'out.db'}"
    report = InputDraft(text="a report", origin=Origin(kind="observer", ref="observer:critic"), meta=True)

    async def reported() -> None:
        async with open_store(url) as store:
            both = await store.create_session(SessionDraft(name="both", role="chat"))
            await store.write(Write(both.id, inputs_add=[InputDraft(text="work"), report]))
            alone = await store.create_session(SessionDraft(name="alone", role="chat"))
            await store.write(Write(alone.id, inputs_add=[report]))

    asyncio.run(reported())
    listed = CliRunner().invoke(cli, ["ls", "--store", url])
    assert listed.exit_code == 0, listed.output
    header, *rows = (line.split("\t") for line in listed.stdout.splitlines())
    waiting = {row[0]: row[header.index("WAITING")] for row in rows}
    assert waiting == {"both": "1 in 1 report(s)", "alone": "1 report(s)"}


def test_an_agent_someone_stopped_says_stopped_once(tmp_path: Path) -> None:
    """Once the read commands said `done` of an agent whose turn someone stopped (`cancelled`), as of one that
    finished its work; the dashboard says `stopped`. A line of one agent says it in one word, not `stopped
    cancelled`: its status is said beside its word only where it says more (`failed interrupted`)."""
    url = f"sqlite:///{tmp_path / 'out.db'}"

    async def ended() -> dict[str, str]:
        async with open_store(url) as store:
            ids = {}
            for name, status in (("halted", "cancelled"), ("finished", "completed"), ("cut", "interrupted")):
                session = await store.create_session(SessionDraft(name=name, role="coder"))
                await store.update_session(session.id, SessionPatch(status=status))
                ids[name] = session.id
            return ids

    ids = asyncio.run(ended())
    listed = CliRunner().invoke(cli, ["ls", "--store", url])
    header, *rows = (line.split("\t") for line in listed.stdout.splitlines())
    assert {row[0]: (row[header.index("WORD")], row[header.index("STATUS")]) for row in rows} == {
        "halted": ("stopped", "cancelled"),  # (the table's STATUS column is the machine status, for scripts)
        "finished": ("done", "completed"),
        "cut": ("failed", "interrupted"),
    }
    said = {"halted": ["stopped"], "finished": ["done"], "cut": ["failed", "interrupted"]}
    for name, words in said.items():
        got = CliRunner().invoke(cli, ["get", name, "--store", url])
        assert got.exit_code == 0, got.output
        assert got.stdout.splitlines()[0].split() == [name, ids[name], *words]
        awaited = CliRunner().invoke(cli, ["await", name, "--timeout", "0", "--store", url])
        assert awaited.stdout.splitlines()[0].split() == [name, *words]
    exact = json.loads(CliRunner().invoke(cli, ["get", "halted", "--store", url, "--json"]).stdout)
    assert (exact["word"], exact["status"]) == ("done", "cancelled")  # (the API's word stays done)
