"""`agentwatch runs fire`: a hook fired from the command line, in this process when no service runs (it waits
for the run's end), through the service when one does; once per key; bad INPUT and unknown hooks refused with
what to do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_setup import agentwatch, project, serving

__all__ = ["project"]  # (the fixture)

HOOK = '[hooks.deploy]\nrole = "shouter"\nprompt = "deploy"\n'


@pytest.fixture
def hooked(project: Path) -> Path:
    """The setup test's project, with a hook `deploy` that runs its `shouter`."""
    (project / "agentwatch.toml").write_text('setup = "shop.agents:setup"\n' + HOOK)
    return project


def test_fire_alone_runs_the_hook_here_and_waits_for_its_end_once_per_key(hooked: Path) -> None:
    argv = ["runs", "fire", "deploy", '{"sha": "4f2a"}', "--key", "4f2a", "--server", "none"]
    fired = agentwatch(hooked, *argv, "--json")
    assert fired.returncode == 0, fired.stderr
    answer = json.loads(fired.stdout)
    assert (answer["hook"], answer["duplicate"], answer["status"], answer["waitTimedOut"]) == (
        "deploy", False, "completed", False
    )  # fmt: skip
    assert "no service running" in fired.stderr
    trace = json.loads(agentwatch(hooked, "runs", "trace", answer["runId"], "--json").stdout)
    assert trace["run"]["input"] == {"sha": "4f2a"} and trace["run"]["entity"] == "hook:deploy"

    again = agentwatch(hooked, *argv)
    assert again.returncode == 0, again.stderr
    assert f"fired before with this key: its run is {answer['runId']}" in again.stdout
    assert "completed" in again.stdout


def test_fire_hands_the_run_to_the_service_and_waits_when_asked(hooked: Path) -> None:
    with serving(hooked):
        at_once = agentwatch(hooked, "runs", "fire", "deploy", "--json")
        assert at_once.returncode == 0 and "no service running" not in at_once.stderr, at_once.stderr
        assert set(json.loads(at_once.stdout)) == {"runId", "hook", "duplicate"}  # no wait: no status

        waited = agentwatch(hooked, "runs", "fire", "deploy", "-", "--wait", "--json", stdin='"nightly"')
        assert waited.returncode == 0, waited.stderr
        answer = json.loads(waited.stdout)
        assert answer["status"] == "completed" and answer["duplicate"] is False
        trace = json.loads(agentwatch(hooked, "runs", "trace", answer["runId"], "--json").stdout)
        assert trace["run"]["input"] == "nightly"


def test_fire_refuses_input_that_is_not_json_and_a_hook_that_is_not_declared(hooked: Path) -> None:
    bad = agentwatch(hooked, "runs", "fire", "deploy", "{sha: 4f2a}", "--server", "none")
    assert bad.returncode == 2 and "INPUT" in bad.stderr and "not JSON" in bad.stderr, bad.stderr
    unknown = agentwatch(hooked, "runs", "fire", "deplyo", "--server", "none")
    assert unknown.returncode == 1 and "no hook named 'deplyo'; the hooks are deploy" in unknown.stderr
    assert "Traceback" not in bad.stderr + unknown.stderr
    # Nothing ran: no run was recorded by either.
    listed = json.loads(agentwatch(hooked, "runs", "ls", "--json").stdout)
    assert listed["runs"] == []


def test_fire_alone_cut_off_by_its_timeout_says_so_and_exits_3(hooked: Path) -> None:
    done = agentwatch(hooked, "runs", "fire", "deploy", "--server", "none", "--timeout", "0")
    assert done.returncode == 3, done.stderr
    assert "--timeout passed before run run_" in done.stderr and "cut off with this command" in done.stderr


def test_fire_alone_cut_off_by_its_timeout_ends_its_run_cancelled_and_its_agent_stopped(project: Path) -> None:
    """What `--timeout` says happens, happens: the run ends `cancelled` and its agent is stopped, not left
    `interrupted` with a turn that the next engine to open the store would continue past the timeout."""
    _napping(project)
    cut = agentwatch(project, "runs", "fire", "nap", "--server", "none", "--timeout", "1", "--json")
    assert cut.returncode == 3, cut.stderr
    assert "cut off with this command (cancelled)" in cut.stderr
    run_id = json.loads(cut.stdout)["runId"]
    # Once `"status": null`: the run's status is said once its cancel settled, beside the wait that timed out.
    assert (json.loads(cut.stdout)["status"], json.loads(cut.stdout)["waitTimedOut"]) == ("cancelled", True)
    trace = json.loads(agentwatch(project, "runs", "trace", run_id, "--json").stdout)
    assert trace["run"]["status"] == "cancelled", trace["run"]
    assert trace["run"]["statusReason"] == (
        "cancelled by `agentwatch runs fire`: its --timeout (1 s) passed before the run ended"
    )  # (what cancelled it, not only that it was)
    (task,) = [span for span in trace["spans"] if span["kind"] == "task"]
    agent = json.loads(agentwatch(project, "get", task["ref"]["agentId"], "--json").stdout)
    assert agent["status"] == "cancelled", agent


def test_fire_waited_for_past_its_timeout_with_a_service_says_the_run_goes_on(project: Path) -> None:
    """With a service the run is not cut off at --timeout: `status` is its status then, `running`, as --help
    says (once null, as if the run had none)."""
    _napping(project)
    with serving(project):
        waited = agentwatch(project, "runs", "fire", "nap", "--wait", "--timeout", "1", "--json")
        assert waited.returncode == 3, waited.stderr
        answer = json.loads(waited.stdout)
        assert (answer["status"], answer["waitTimedOut"]) == ("running", True)
        assert "it goes on in the service" in waited.stderr
    said = agentwatch(project, "runs", "fire", "--help").stdout
    assert "`status` is then the run's once it was cut off, `cancelled`" in " ".join(said.split())


def _napping(project: Path) -> None:
    """The setup test's project with a hook `nap` whose role's model never answers."""
    (project / "shop" / "slow.py").write_text(
        "from agentwatch import ScriptedModel\n\nsetup = {'models': {'sleeper': ScriptedModel.hang()}}\n"
    )
    (project / "agents" / "sleeper.md").write_text("---\nname: sleeper\nmodel: scripted:sleeper\n---\nYou sleep.\n")
    (project / "agentwatch.toml").write_text(
        'setup = "shop.slow:setup"\n[hooks.nap]\nrole = "sleeper"\nprompt = "nap"\n'
    )


def test_fire_alone_whose_hook_timed_out_says_which_timeout_passed(project: Path) -> None:
    """Once `--json` answered `"status": "timed_out"` beside `"timedOut": false`: the run's status (the hook's own
    timeout passed) beside the command's wait (which had not), under one word. The wait's is `waitTimedOut`."""
    (project / "shop" / "slow.py").write_text(
        "from agentwatch import ScriptedModel\n\nsetup = {'models': {'sleeper': ScriptedModel.hang()}}\n"
    )
    (project / "agents" / "sleeper.md").write_text("---\nname: sleeper\nmodel: scripted:sleeper\n---\nYou sleep.\n")
    (project / "agentwatch.toml").write_text(
        'setup = "shop.slow:setup"\n[hooks.nap]\nrole = "sleeper"\nprompt = "nap"\ntimeout = "1s"\n'
    )
    late = agentwatch(project, "runs", "fire", "nap", "--server", "none", "--json")
    assert late.returncode == 1, late.stderr
    answer = json.loads(late.stdout)
    assert (answer["status"], answer["waitTimedOut"], "timedOut" in answer) == ("timed_out", False, False)
    said = agentwatch(project, "runs", "fire", "nap", "--server", "none")
    assert said.returncode == 1, said.stderr
    assert "timed_out (the hook's own timeout passed, not --timeout)" in said.stdout, said.stdout
