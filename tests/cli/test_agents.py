"""`agentwatch agents check` runs the checks that loading and `run` do: what it accepts, `run` runs."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from agentwatch.cli import cli
from agentwatch.config import load_config
from agentwatch.errors import AgentwatchError
from agentwatch.events import Origin
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import ScriptedModel, register_scripted_model, unregister_scripted_model

TOML = """
[models]
aliases = { fast = "local:llama3.1" }

[providers.local]
base_url = "http://127.0.0.1:9/v1"
"""
"""The project of the corpus: one alias, one named provider."""

PROVIDER_REFS = ("openai:gpt-4o", "anthropic:claude-sonnet-4-5", "anthropic:claude-haiku-4-5", "local:llama3.1")
"""The refs whose provider is known: a test stands a scripted model in for each (it calls no provider)."""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "agents").mkdir()
    return tmp_path


def _check(*args: str) -> Result:
    return CliRunner().invoke(cli, ["agents", "check", *args])


def _flat(result: Result) -> str:
    return " ".join(result.output.split())


def test_agents_check_lists_every_problem_and_fails_only_on_errors(project: Path) -> None:
    agents = project / "agents"
    (agents / "good.md").write_text("---\nmodel: openai-chat:m\ntools: [ask_user, grep]\nobserver: loop-guard\n---\nHi")

    refused = _check()
    assert refused.exit_code == 1  # `run` leaves out a definition naming a tool the engine lacks
    assert (
        "agents/good.md: tools: unknown tool 'grep'; register a tool of that name or remove it from tools; a tool "
        "your project registers in Python is declared here with --tool NAME"
    ) in _flat(refused)
    ok = _check("--tool", "grep")
    assert ok.exit_code == 0, ok.output
    assert "grep" not in ok.output and "loop-guard" not in ok.output  # the built-in rule observers are known
    assert "ok: 1 agent definition(s) in agents" in ok.output
    (agents / "bad.md").write_text(
        "---\nmodel: openai-chat:m\nobserverMessage: x\nsessions: {stuck_after_seconds: -1}\n---\n"
    )
    bad = _check("--tool", "grep,other")
    assert bad.exit_code == 1
    assert "agents/bad.md: sessions.stuck_after_seconds: should be greater than 0 (got -1)" in _flat(bad)
    assert "observerMessage" not in bad.output  # the seeds' spelling of observer_message
    assert "1 error(s)" in bad.output


def test_check_reports_what_run_refuses_approval_tools_and_an_unknown_provider(project: Path) -> None:
    """The two the issue found: `check` said ok, `run` refused."""
    agents = project / "agents"
    (agents / "a.md").write_text("---\nmodel: openai:gpt-4o\ntools: [ask_user]\napproval_tools: [write_file]\n---\n")
    (agents / "b.md").write_text("---\nmodel: nowhere:m\n---\n")

    done = _check()

    assert done.exit_code == 1
    flat = _flat(done)
    assert (
        "agents/a.md: approval_tools: unknown tool 'write_file'; register a tool of that name or remove it from "
        "approval_tools"
    ) in flat
    assert (
        "agents/b.md: model: model ref 'nowhere:m': no provider 'nowhere' (known: openai, openai-chat, "
        "openai-responses, anthropic, scripted); add a [providers.nowhere] section with base_url (and api_key_env) "
        "to agentwatch.toml; until then each of its turns fails"
    ) in flat
    assert "2 error(s)" in flat


def test_check_resolves_the_projects_aliases_and_declared_scripted_models(project: Path) -> None:
    agents = project / "agents"
    (project / "agentwatch.toml").write_text(TOML)
    (agents / "a.md").write_text("---\nmodel: [fast, scripted:coder]\n---\n")

    undeclared = _check()
    assert undeclared.exit_code == 1
    assert "agents/a.md: model: no scripted model 'coder' (model ref 'scripted:coder') was given or registered" in (
        _flat(undeclared)
    )
    # What to do here, as for a tool: the Python way alone left a reader of `check` without the flag.
    assert (
        _flat(undeclared).count(
            "until then each of its turns fails; a scripted model your project hands the engine in Python is declared "
            "here with --scripted NAME"
        )
        == 1
    )
    declared = _check("--scripted", "coder")
    assert declared.exit_code == 0, declared.output
    unknown = CliRunner().invoke(cli, ["agents", "check"], env={"AGENTWATCH_AGENTS_DIR": "elsewhere"})
    assert "elsewhere: warning: no such directory" in _flat(unknown)


def test_a_missing_key_is_one_warning_naming_the_agents_it_stops(project: Path) -> None:
    agents = project / "agents"
    for name in ("a", "b"):
        (agents / f"{name}.md").write_text("---\nmodel: openai-chat:m\n---\n")
    (agents / "c.md").write_text("---\nmodel: sonnet\n---\n")

    done = _check()

    assert done.exit_code == 0, done.output
    assert _flat(done).count("warning:") == 2
    assert (
        "warning: OPENAI_API_KEY is not set here; 'a', 'b' cannot run until it is: set it (or OPENAI_BASE_URL, for "
        "an OpenAI-compatible server) where `agentwatch run` or `serve` runs"
    ) in _flat(done)
    assert "warning: ANTHROPIC_API_KEY is not set here; 'c' cannot run until it is" in _flat(done)
    keyed = CliRunner().invoke(cli, ["agents", "check"], env={"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"})
    assert "warning" not in keyed.output


def test_a_bad_config_is_an_error_from_check_too(project: Path) -> None:
    (project / "agentwatch.toml").write_text('[models]\naliases = { fast = "llama" }\n')
    bad_alias = _check()
    (project / "agentwatch.toml").write_text('[providers.openai]\nbase_url = "http://127.0.0.1:9/v1"\n')
    clash = _check()

    assert (bad_alias.exit_code, clash.exit_code) == (1, 1)
    assert "models.aliases: alias 'fast' maps to 'llama', which is not one model ref" in _flat(bad_alias)
    assert "provider name 'openai' is a built-in model prefix; rename the [providers.openai] section" in _flat(clash)


def test_a_named_providers_key_is_a_warning_when_it_is_not_set(project: Path) -> None:
    (project / "agentwatch.toml").write_text(
        '[providers.corp]\nbase_url = "http://127.0.0.1:9/v1"\napi_key_env = "CORP_KEY"\n'
    )
    (project / "agents" / "a.md").write_text("---\nmodel: corp:m\n---\n")

    unset = _check()
    keyed = CliRunner().invoke(cli, ["agents", "check"], env={"CORP_KEY": "k"})

    assert (unset.exit_code, keyed.exit_code) == (0, 0)
    assert "warning: CORP_KEY is not set here; 'a' cannot run until it is" in _flat(unset)
    assert "warning" not in keyed.output


def test_check_says_which_observers_the_projects_config_leaves_unarmed(project: Path) -> None:
    agents = project / "agents"
    (agents / "coder.md").write_text("---\nmodel: sonnet\ngrant: [spawn]\nobserver: reviewer\n---\n")
    (agents / "fetcher.md").write_text("---\nmodel: sonnet\nobserver: loop-guard\n---\n")
    (agents / "reviewer.md").write_text("---\nmodel: sonnet\n---\n")
    (project / "agentwatch.toml").write_text('[observers]\nallowed_types = ["loop-guard"]\n')
    env = {"ANTHROPIC_API_KEY": "k"}

    allowed = CliRunner().invoke(cli, ["agents", "check"], env=env)
    (project / "agentwatch.toml").write_text('[observers]\ndeny = ["agent_task(loop-guard)"]\n')
    denied = CliRunner().invoke(cli, ["agents", "check"], env=env)
    off = CliRunner().invoke(cli, ["agents", "check"], env={**env, "AGENTWATCH_OBSERVER_AGENTS": "0"})

    assert (allowed.exit_code, denied.exit_code, off.exit_code) == (0, 0, 0)
    assert _flat(allowed).split(" ok:")[0] == (
        "agents/coder.md: warning: observer: 'reviewer' is not in [observers] allowed_types (loop-guard) in "
        "agentwatch.toml, so 'coder' runs unobserved"
    )
    assert _flat(denied).split(" ok:")[0] == (
        "agents/fetcher.md: warning: observer: agent_task(loop-guard) is denied by [observers] deny in "
        "agentwatch.toml, so 'fetcher' runs unobserved"
    )
    assert _flat(off).count("observer agents are off") == 2


def test_run_applies_the_projects_aliases(project: Path) -> None:
    (project / "agentwatch.toml").write_text('[models]\naliases = { quick = "scripted:alias-run" }\n')
    (project / "agents" / "greeter.md").write_text("---\nmodel: quick\n---\nYou greet.\n")
    register_scripted_model("alias-run", ScriptedModel.replying("Hello from the alias."))
    try:
        checked = _check()
        ran = CliRunner().invoke(cli, ["run", "greeter", "Say hello", "--store", f"sqlite:///{project / 'a.db'}"])
    finally:
        unregister_scripted_model("alias-run")

    assert checked.exit_code == 0, checked.output
    assert ran.exit_code == 0, ran.output
    assert "Hello from the alias." in ran.output


# -- the corpus: what check accepts, run runs; what run refuses, check reports ------------------------------------


@dataclass(frozen=True)
class Case:
    model: str
    tools: tuple[str, ...]
    tools_as_text: bool
    approval_tools: tuple[str, ...]
    grant: str
    observer: str | None
    extra: str
    camel: bool
    stuck_after: int

    def markdown(self) -> str:
        lines = [f"model: {self.model}"]
        if self.tools:
            lines.append(
                f"tools: {', '.join(self.tools)}" if self.tools_as_text else f"tools: [{', '.join(self.tools)}]"
            )
        if self.approval_tools:
            lines.append(f"{'approvalTools' if self.camel else 'approval_tools'}: [{', '.join(self.approval_tools)}]")
        if self.grant:
            lines.append(f"grant: [{self.grant}]")
        if self.observer:
            lines.append(f"observer: {self.observer}")
            lines.append(f"{'observerMessage' if self.camel else 'observer_message'}: Watch closely.")
        lines.append(
            f"sessions: {{{'stuckAfterSeconds' if self.camel else 'stuck_after_seconds'}: {self.stuck_after}}}"
        )
        if self.extra:
            lines.append(self.extra)
        return "---\n" + "\n".join(lines) + "\n---\nYou work.\n"


CASES = st.builds(
    Case,
    model=st.sampled_from(
        [
            "openai:gpt-4o",
            "sonnet",
            "haiku",
            "fast",
            "scripted:corpus",
            "[fast, openai:gpt-4o]",
            "nowhere:m",
            "inherit",
            "scripted:ghost",
            "gpt4",
            "[openai:gpt-4o, nowhere:m]",
            "'openai:'",
        ]
    ),
    tools=st.lists(
        st.sampled_from(["ask_user", "agent_list", "agent_task", "Read", "Grep", "Task", "grep"]),
        unique=True,
        max_size=3,
    ).map(tuple),
    tools_as_text=st.booleans(),
    approval_tools=st.lists(st.sampled_from(["ask_user", "agent_list", "rm_rf"]), unique=True, max_size=2).map(tuple),
    grant=st.sampled_from(["", "spawn", "fly"]),
    observer=st.sampled_from([None, "loop-guard", "helper", "ghost", "subject"]),
    extra=st.sampled_from(["", "color: blue", "permissionMode: default", "flavour: sweet"]),
    camel=st.booleans(),
    stuck_after=st.sampled_from([900, 0]),
)


@pytest.fixture
def corpus_models() -> Iterator[dict[str, ScriptedModel]]:
    register_scripted_model("corpus", ScriptedModel.replying("done"))
    yield {ref: ScriptedModel.replying("done") for ref in PROVIDER_REFS}
    unregister_scripted_model("corpus")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=CASES)
def test_what_check_accepts_run_runs_and_what_run_refuses_check_reports(
    case: Case, corpus_models: dict[str, ScriptedModel], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    root = Path(tempfile.mkdtemp(dir=tmp_path))
    (root / "agents").mkdir()
    (root / "agentwatch.toml").write_text(TOML)
    (root / "agents" / "helper.md").write_text("---\nmodel: openai:gpt-4o\n---\nYou help.\n")
    (root / "agents" / "subject.md").write_text(case.markdown())
    before = os.getcwd()
    os.chdir(root)
    try:
        checked = _check()
    finally:
        os.chdir(before)
    refusal = asyncio.run(_run(root, corpus_models))

    assert checked.exit_code in (0, 1), checked.output
    event("check accepts" if checked.exit_code == 0 else "check refuses")
    event("run refuses" if refusal else "run runs")
    if checked.exit_code == 0:
        assert refusal is None, f"check accepted {case.markdown()!r}, run refused: {refusal}\n{checked.output}"
    if refusal is not None:
        assert checked.exit_code == 1, f"run refused {case.markdown()!r} ({refusal}), check said:\n{checked.output}"
        assert "agents/subject.md:" in checked.output


async def _run(root: Path, models: dict[str, ScriptedModel]) -> str | None:
    """What `agentwatch run subject "..."` does, on this project, with scripted stand-ins for the providers:
    None when the turn completes, else why it did not."""
    config = load_config(root).model_copy(update={"store": f"sqlite:///{root / 'run.db'}"})
    async with Engine.open(config=config, models=models) as engine:
        try:
            session = await engine.create("subject", source="cli", origin=Origin(kind="person"))
        except AgentwatchError as exc:
            return exc.message
        await engine.enqueue(session.id, "Do the work.", origin=Origin(kind="person"))
        session, timed_out = await engine.wait(session.id, 30)
        if timed_out or session.status != "completed":
            return f"the turn ended {session.status}: {session.error}"
    return None


def test_list_and_run_say_when_the_agents_directory_is_missing_or_a_file_is_left_out(project: Path) -> None:
    """Once: `agents list --dir nosuch` printed an empty table; a bad file was left out with no word; `run`
    with a missing directory listed the rule observers as the roster and said nothing of the directory, and
    `run loop-guard` made a session that failed on a blank model ref."""
    (project / "agents" / "bad.md").write_text("---\nname: bad\nmodle: y\n---\nx\n")
    (project / "agents" / "good.md").write_text("---\nname: good\nmodel: openai:gpt-4o\n---\nx\n")
    listed = CliRunner().invoke(cli, ["agents", "list"])
    assert listed.exit_code == 0
    assert [line.split("\t")[0] for line in listed.stdout.splitlines()] == ["name", "good"]
    assert "`agentwatch agents check` lists them" in listed.stderr
    (project / "agents" / "bad.md").unlink()
    (project / "agents" / "watched.md").write_text(
        "---\nname: watched\nmodel: openai:gpt-4o\nobserver: loop-guard\n---\nx\n"
    )
    fine = CliRunner().invoke(cli, ["agents", "list"])  # a built-in rule observer is no problem (as `check` says)
    assert fine.exit_code == 0 and fine.stderr == "", fine.stderr
    assert [line.split("\t")[0] for line in fine.stdout.splitlines()] == ["name", "good", "watched"]
    missing = CliRunner().invoke(cli, ["agents", "list", "--dir", "nosuch"])
    assert missing.exit_code == 0 and missing.stdout == "" and "no agents directory at nosuch" in missing.stderr
    store = ["--store", f"sqlite:///{project / 'run.db'}"]
    nowhere = CliRunner().invoke(cli, ["run", "greeter", "hi", "--agents-dir", "nosuch", *store])
    assert nowhere.exit_code == 1
    assert "the agents directory 'nosuch' does not exist" in _flat(nowhere) and "guard" not in nowhere.output
    rule = CliRunner().invoke(cli, ["run", "loop-guard", "hi", *store])
    assert rule.exit_code == 1 and "'loop-guard' is a rule observer" in _flat(rule)
    ls = CliRunner().invoke(cli, ["ls", *store, "--json"])
    assert '"agents":[]' in ls.stdout.replace(" ", "")  # no session was made for either
