"""A project's own Python for the commands that run agents (`setup = "module:name"`): `run`, `serve` and
`agents check` take its tools and scripted models from a package of the project, and a bad setup is an error
that says what is wrong, before anything runs."""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentwatch.cli._common import resolve_config
from agentwatch.cli.remote import discovery_file
from tests.cli.test_remote_serve import environment, stopped
from tests.fakes.otlp_collector import OtlpCollector

SETUP = '''
from agentwatch import AgentDefinition, CallTool, Fail, Reply, ScriptedModel


def shout(text: str) -> str:
    """Say it louder."""
    return text.upper() + "!"


def _script(ctx):
    if not ctx.tool_results:
        return CallTool("shout", {"text": ctx.prompt})
    return Reply(f"heard {ctx.tool_results[0].output}")


def setup():
    return {"tools": [shout], "models": {"shouter": ScriptedModel(function=_script)}}


WRONG = {"tool": [shout]}


def agent_get(id: str) -> str:
    """Not the built-in one."""
    return "mine"


def raising():
    raise ValueError("the tools are not ready")


def clashing():
    return {"tools": [agent_get]}


def unruly():
    return {**setup(), "policies": ["no_pushes"]}


async def nap() -> str:
    """Rest a long while."""
    import asyncio

    await asyncio.sleep(60)
    return "rested"


def napping():
    napper = AgentDefinition(name="napper", model="scripted:napper", instructions="Rest.", tools=["nap"])
    return {"tools": [nap], "definitions": [napper], "models": {"napper": ScriptedModel(function=_naps)}}


def shouting_and_napping():
    shouting, resting = setup(), napping()
    models = {**shouting["models"], **resting["models"]}
    return {"tools": [shout, nap], "definitions": resting["definitions"], "models": models}


def quickly_stuck():
    napper = AgentDefinition(
        name="napper", model="scripted:napper", instructions="Rest.", tools=["nap"], sessions={"stuck_after_seconds": 1}
    )
    return {"tools": [nap], "definitions": [napper], "models": {"napper": ScriptedModel(function=_naps)}}


def _naps(ctx):
    return Reply("rested") if ctx.tool_results else CallTool("nap", {})


def doze() -> str:
    """Rest a long while, blocking (a plain def: it runs in a worker thread)."""
    import time

    time.sleep(60)
    return "rested"


def dozing():
    dozer = AgentDefinition(name="dozer", model="scripted:dozer", instructions="Rest.", tools=["doze"])
    return {"tools": [doze], "definitions": [dozer], "models": {"dozer": ScriptedModel(function=_dozes)}}


def _dozes(ctx):
    return Reply("rested") if ctx.tool_results else CallTool("doze", {})


def failing_observer():
    writer = AgentDefinition(
        name="writer", model="scripted:writer", instructions="Write.", observer="failer", grant=["spawn"]
    )
    failer = AgentDefinition(name="failer", model="scripted:failer", instructions="Fail.")
    models = {"writer": ScriptedModel.replying("draft written"), "failer": ScriptedModel([Fail("boom")])}
    return {"definitions": [writer, failer], "models": models}


def with_a_role():
    sloppy = AgentDefinition(name="sloppy", model="scripted:shouter", instructions="Be sloppy.", tools=["shuot"])
    return {**setup(), "definitions": [sloppy]}
'''


RAISES_AT = SETUP.splitlines().index('    raise ValueError("the tools are not ready")') + 1
"""The line of `shop/agents.py` where `raising` raises (an error names it)."""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project whose `shouter` agent needs the tool and the scripted model its package's setup gives."""
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "__init__.py").write_text("")
    (tmp_path / "shop" / "agents.py").write_text(SETUP)
    (tmp_path / "shop" / "broken.py").write_text("import notinstalledlib\n\nsetup = {}\n")
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "shouter.md").write_text(
        textwrap.dedent(
            """\
            ---
            name: shouter
            model: scripted:shouter
            tools: [shout]
            ---
            You shout.
            """
        )
    )
    (tmp_path / "agentwatch.toml").write_text('setup = "shop.agents:setup"\n')
    return tmp_path


def agentwatch(
    project: Path, *argv: str, timeout: float = 60, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "agentwatch.cli", *argv]
    env = environment()
    env.pop("AGENTWATCH_STORE", None)
    return subprocess.run(command, cwd=project, env=env, input=stdin, capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip


def test_run_and_check_take_the_projects_tools_and_models_from_its_setup(project: Path) -> None:
    checked = agentwatch(project, "agents", "check")
    assert checked.returncode == 0, checked.stderr
    ran = agentwatch(project, "run", "shouter", "hello", "--server", "none", "--json")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["lastAssistantText"] == "heard HELLO!"


@contextlib.contextmanager
def serving(project: Path, **variables: str) -> Iterator[None]:
    """`agentwatch serve` in `project` (its default store, and `variables` in its environment), once it has
    announced itself; stopped with SIGTERM after, which it must exit 0 on."""
    store = f"sqlite:///{project / '.agentwatch' / 'agentwatch.db'}"
    found = discovery_file(resolve_config(store, project))
    command = [sys.executable, "-m", "agentwatch.cli", "serve", "--port", "0", "--deploy-hold-minutes", "0"]
    env = environment() | variables
    env.pop("AGENTWATCH_STORE", None)
    log = project / "serve.log"  # a file, not a pipe that nobody reads once it serves (it could fill and block)
    with log.open("w") as sink:
        service = subprocess.Popen(command, cwd=project, env=env, stderr=sink, text=True)
    try:
        deadline = time.monotonic() + 60
        while not found.exists():
            assert service.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.05)
        yield
        service.send_signal(signal.SIGTERM)
        assert service.wait(30) == 0
    finally:
        stopped(service)


def test_serve_takes_the_setup_and_run_hands_its_agent_over(project: Path) -> None:
    with serving(project):
        ran = agentwatch(project, "run", "shouter", "hello", "--json")
        assert ran.returncode == 0, ran.stderr
        assert "handed" in ran.stderr or "service" in ran.stderr  # it says where the turn ran
        assert json.loads(ran.stdout)["lastAssistantText"] == "heard HELLO!"


def test_serve_with_tracing_on_sends_each_turns_spans_to_the_collector(project: Path) -> None:
    collector = OtlpCollector()
    try:
        with serving(
            project, AGENTWATCH_TRACING="1", OTEL_EXPORTER_OTLP_ENDPOINT=collector.url, OTEL_SERVICE_NAME="shop"
        ):
            ran = agentwatch(project, "run", "shouter", "hello", "--json")
            assert ran.returncode == 0, ran.stderr
        said = (project / "serve.log").read_text()
    finally:
        collector.close()
    assert f"tracing: spans of every turn to {collector.url}/v1/traces (OTLP/HTTP)" in said
    # Sent when the service stopped at the latest (its provider's batches are flushed as the engine closes).
    assert sorted(collector.spans) == [
        ("shop", "chat shouter"),
        ("shop", "chat shouter"),
        ("shop", "execute_tool shout"),
        ("shop", "invoke_agent shouter"),
    ]


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("shop.missing:setup", "no module 'shop.missing'"),
        ("shop.agents:nothing", "'shop.agents' has no 'nothing'"),
        ("shop.agents:WRONG", "tool is not an option it may give; it may give any of: tools, definitions"),
        ("shop.agents:shout.__doc__", "gave a str; it must be a mapping of engine options"),
        ("shop.broken:setup", "importing 'shop.broken' failed: No module named 'notinstalledlib'; install what it"),
        ("shop.agents:clashing", "tool named 'agent_get', which is built in: give yours another name"),
        ("shop.agents:unruly", "policies: 'no_pushes' (a str) is not a policy; give a Policy(name, decide) or a"),
        ("shop.agents:raising", f"agents.py:{RAISES_AT}: ValueError: the tools are not ready"),
    ],
)
def test_a_bad_setup_is_an_error_that_says_what_is_wrong(project: Path, setup: str, message: str) -> None:
    for argv in (["run", "shouter", "hi", "--server", "none"], ["agents", "check"]):
        done = agentwatch(project, *argv, "--setup", setup)
        assert done.returncode == 1 and message in done.stderr, (argv, done.stderr)
        assert "Traceback" not in done.stderr


def test_a_setup_that_is_not_module_colon_name_is_a_usage_error(project: Path) -> None:
    done = agentwatch(project, "run", "shouter", "hi", "--setup", "shop.agents")
    assert done.returncode == 2 and "is not MODULE:NAME" in done.stderr


def test_agents_check_checks_the_roles_the_setup_gives(project: Path) -> None:
    done = agentwatch(project, "agents", "check", "--setup", "shop.agents:with_a_role")
    assert done.returncode == 1 and "shuot" in done.stderr, done.stderr
    fine = agentwatch(project, "agents", "check", "--setup", "shop.agents:shouting_and_napping")
    assert fine.returncode == 0, fine.stderr  # (once: "ok: 1 agent definition(s) in agents", the setup's unsaid)
    assert "ok: 1 agent definition(s) in agents and 1 from the setup shop.agents:shouting_and_napping" in fine.stdout


def test_a_setup_in_agentwatch_toml_that_is_not_module_colon_name_says_what_to_write(project: Path) -> None:
    (project / "agentwatch.toml").write_text('setup = "shop.agents"\n')
    done = agentwatch(project, "agents", "check")
    assert done.returncode == 1 and "'shop.agents' is not MODULE:NAME" in done.stderr, done.stderr


def test_agents_check_refuses_a_heartbeat_or_hook_whose_role_is_not_defined(project: Path) -> None:
    (project / "agentwatch.toml").write_text(
        'setup = "shop.agents:setup"\n'
        '[heartbeats.ping]\nrole = "shoutre"\nevery = "1h"\nprompt = "ping"\n'
        '[hooks.deploy]\nrole = "shouter"\nprompt = "deploy"\n'
        '[hooks.guard]\nrole = "loop-guard"\nprompt = "guard"\n'
    )
    done = agentwatch(project, "agents", "check")
    assert done.returncode == 1, done.stderr
    assert "heartbeat 'ping' runs role 'shoutre', which is not defined (did you mean 'shouter'?)" in done.stderr
    assert "hook 'guard' runs role 'loop-guard', which is a rule observer, which runs as no agent" in done.stderr
    assert "hook 'deploy'" not in done.stderr


def test_a_command_run_in_a_subdirectory_finds_the_project_above_it(project: Path) -> None:
    deeper = project / "sub" / "deeper"
    deeper.mkdir(parents=True)
    checked = agentwatch(deeper, "agents", "check")
    assert checked.returncode == 0 and "1 agent definition(s)" in checked.stdout, checked.stderr
    ran = agentwatch(deeper, "run", "shouter", "hello", "--server", "none", "--json")
    assert ran.returncode == 0 and json.loads(ran.stdout)["lastAssistantText"] == "heard HELLO!", ran.stderr
    assert (project / ".agentwatch" / "agentwatch.db").exists() and not (deeper / ".agentwatch").exists()


def test_a_broken_agentwatch_toml_does_not_keep_a_read_from_a_given_store(project: Path) -> None:
    """Once: `ls --store URL` failed on the file's error, so nobody could read their agents (in an incident,
    say) without moving the file away first."""
    store = f"sqlite:///{project / '.agentwatch' / 'agentwatch.db'}"
    ran = agentwatch(project, "run", "shouter", "hello", "--server", "none", "--json")
    assert ran.returncode == 0, ran.stderr
    (project / "agentwatch.toml").write_text('setup = "shop.agents:setup"\n[sessions\n')
    listed = agentwatch(project, "ls", "--store", store, "--server", "none", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [row["role"] for row in json.loads(listed.stdout)["agents"]] == ["shouter"]
    assert "is not valid TOML" in listed.stderr and "with the default settings" in listed.stderr
    for argv in (["ls", "--server", "none"], ["run", "shouter", "hi", "--store", store, "--server", "none"]):
        refused = agentwatch(project, *argv)  # no store given, or a command that runs agents: the error stands
        assert refused.returncode == 1 and "is not valid TOML" in refused.stderr, (argv, refused.stderr)


def test_a_local_run_cut_off_by_its_timeout_says_what_becomes_of_the_turn(project: Path) -> None:
    """Once: it printed the snapshot (`working`) and exited 3, the session left `running` with no word of who
    would run it on."""
    ran = agentwatch(project, "run", "napper", "go", "--setup", "shop.agents:napping", "--server", "none",
                     "--timeout", "1")  # fmt: skip
    assert ran.returncode == 3, ran.stderr
    assert "'s turn is cut off with this command; it goes on when an engine next opens the store" in ran.stderr


def test_a_local_run_says_a_failed_delivery_to_its_observer_once(project: Path) -> None:
    """The failure is recorded on the agent (a `runtime.warning`), which `run` prints with its events; it was
    logged as a warning too, which the command (no logging set up) printed a second time on stderr, by id."""
    ran = agentwatch(project, "run", "writer", "go", "--setup", "shop.agents:failing_observer", "--server", "none")
    assert ran.returncode == 0, ran.stderr
    said = ran.stdout + ran.stderr
    assert said.count("delivery to the observer failed") == 1, said
    assert "runtime.warning: delivery to the observer failed" in " ".join(ran.stdout.split())


def test_the_stop_command_a_cut_off_run_prints_runs_as_printed(project: Path) -> None:
    """Once: `agentwatch stop NAME` pasted a name with a space bare, which a shell splits into two arguments."""
    ran = agentwatch(project, "run", "napper", "go", "--name", "slow one", "--setup", "shop.agents:napping",
                     "--server", "none", "--timeout", "1")  # fmt: skip
    assert ran.returncode == 3, ran.stderr
    [command] = re.findall(r"`(agentwatch stop [^`]*)`", " ".join(ran.stderr.split()))
    assert shlex.split(command) == ["agentwatch", "stop", "slow one"]


def test_reading_the_store_says_stuck_as_the_engine_would_for_a_role_the_setup_defines(project: Path) -> None:
    """Once: `ls --server none` read the agents directory alone, so a role built in Python read with the
    project's default threshold (600 s): `working` where the service said `stuck`."""
    ran = agentwatch(project, "run", "napper", "go", "--setup", "shop.agents:quickly_stuck", "--server", "none",
                     "--timeout", "1")  # fmt: skip
    assert ran.returncode == 3, ran.stderr
    time.sleep(1.5)  # past the role's 1 s: its cut-off turn has shown no activity since
    (project / "agentwatch.toml").write_text('setup = "shop.agents:quickly_stuck"\n')
    listed = agentwatch(project, "ls", "--server", "none", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [(row["role"], row["word"]) for row in json.loads(listed.stdout)["agents"]] == [("napper", "stuck")]
    stuck = agentwatch(project, "ls", "--word", "stuck", "--server", "none", "--json")
    assert [row["role"] for row in json.loads(stuck.stdout)["agents"]] == ["napper"]
    # A setup that does not load leaves the reads to the agents directory, and says so.
    (project / "agentwatch.toml").write_text('setup = "shop.broken:setup"\n')
    listed = agentwatch(project, "ls", "--server", "none", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [row["word"] for row in json.loads(listed.stdout)["agents"]] == ["working"]
    assert "No module named 'notinstalledlib'" in listed.stderr and "read with the project's defaults" in listed.stderr


def test_ctrl_c_ends_a_local_run_while_a_plain_def_tool_still_runs(project: Path) -> None:
    """Once: the interrupted process waited for the tool's thread to return (here, a minute)."""
    command = [sys.executable, "-m", "agentwatch.cli", "run", "dozer", "go", "--setup", "shop.agents:dozing",
               "--server", "none"]  # fmt: skip
    env = environment()
    env.pop("AGENTWATCH_STORE", None)
    runner = subprocess.Popen(command, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert runner.stdout is not None
        deadline = time.monotonic() + 60
        for line in runner.stdout:  # the live lines of the turn: the call shows once it runs
            if "doze" in line:
                break
            assert time.monotonic() < deadline
        time.sleep(0.5)
        runner.send_signal(signal.SIGINT)
        started = time.monotonic()
        assert runner.wait(30) == 130
        assert time.monotonic() - started < 15  # not the tool's minute
    finally:
        stopped(runner)
