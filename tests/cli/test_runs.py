"""`agentwatch runs`: the run reads on the command line, as JSON (the tools' dicts) and for people."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

from click.testing import CliRunner, Result

from agentwatch.cli import cli
from agentwatch.runtime.heartbeats import Heartbeat, Tick, tick
from agentwatch.runtime.models import Reply, ScriptedModel
from agentwatch.runtime.runs import TaskFailed
from agentwatch.store import JournalEntry, RunDraft, RunPatch, SessionFilter, SpanDraft
from tests.runtime.support import HeldTool, OpenEngine, Scripted, role


def invoke(*argv: str) -> Result:
    return CliRunner().invoke(cli, list(argv))


def _json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_runs_ls_trace_compare_and_history(open_engine: OpenEngine, scripted: Scripted, store_url: str) -> None:
    calls = [0]

    def script(ctx: Any) -> Any:
        calls[0] += 1
        if calls[0] == 2:
            raise RuntimeError("the provider is down")
        return Reply(f"notes on {ctx.prompt}")

    researcher = role("researcher", scripted("cli-runs", ScriptedModel(function=script)))
    broken = role("broken", scripted("cli-runs-broken", ScriptedModel(function=lambda ctx: 1 / 0)))

    async def record() -> list[str]:
        made = []
        async with open_engine(researcher, broken) as engine:
            for topic in ("tides", "moons"):
                async with engine.run("report", input={"topic": topic}) as run, run.span("Research") as research:
                    await research.task("researcher", topic, attempts=2, backoff_seconds=0)
                made.append(run.id)
            try:
                async with engine.run("doomed") as doomed:
                    await doomed.task("broken", "x", attempts=1)
            except TaskFailed:
                pass
        return made

    (first, second) = asyncio.run(record())[:2]
    listed = _json(invoke("runs", "ls", "--entity", "workflow:report", "--json", "--store", store_url))
    assert [r["id"] for r in listed["runs"]] == [second, first]

    trace = _json(invoke("runs", "trace", second, "--json", "--store", store_url))
    assert [s["status"] for s in trace["spans"] if s["kind"] == "task"] == ["failed", "completed"]
    shown = invoke("runs", "trace", second, "--store", store_url)
    assert shown.exit_code == 0, shown.output
    assert "workflow:report" in shown.output and "attempt 2/2" in shown.output and "phase Research" in shown.output

    compared = _json(invoke("runs", "compare", second, "--json", "--store", store_url))
    assert compared["against"]["id"] == first
    assert compared["input"] == [{"path": "topic", "this": "moons", "that": "tides"}]
    text = invoke("runs", "compare", second, "--store", store_url)
    assert "Research / researcher" in text.output and '"tides" → "moons"' in text.output  # JSON, not repr
    itself = invoke("runs", "compare", second, "--against", second, "--store", store_url)
    assert itself.exit_code == 2 and "--against: " in itself.output and "the run itself" in itself.output

    journal = _json(invoke("runs", "history", second, "--source", "journal", "--json", "--store", store_url))
    assert [e["title"] for e in journal["entries"]] == ["researcher: attempt 1 failed; trying again in 0 s"]
    agent = next(s["ref"]["agentId"] for s in trace["spans"] if s["kind"] == "task")
    nowhere = invoke("runs", "history", second, "--agent", agent, "--source", "journal", "--store", store_url)
    assert nowhere.exit_code == 2 and "--agent" in nowhere.output and "--source" in nowhere.output, nowhere.output
    table = invoke("runs", "history", second, "--store", store_url)
    assert table.exit_code == 0 and "run.started" not in table.output  # titles, not types, for people
    assert "workflow:report started" in table.output and "workflow workflow:" not in table.output  # (kind once)

    failed = _json(invoke("runs", "ls", "--status", "failed", "--json", "--store", store_url))
    assert [r["entity"] for r in failed["runs"]] == ["workflow:doomed"]
    why = invoke("runs", "ls", "--status", "failed", "--store", store_url)
    assert "WHY" in why.output and failed["runs"][0]["statusReason"][:20] in why.output  # why it failed

    missing = invoke("runs", "trace", "run_nope", "--store", store_url)
    assert missing.exit_code == 1 and "run_nope" in missing.output and "runs ls" in missing.output
    agent = invoke("runs", "trace", "ses_01jdq3v9c8k2m6n4p7r0s5t8w1", "--store", store_url)
    assert agent.exit_code == 1 and "an agent's id; its runId names the run" in agent.output
    entity = invoke("runs", "compare", "workflow:report", "--store", store_url)  # an entity, not one of its runs
    assert entity.exit_code == 1 and "runs ls --entity workflow:report" in entity.output, entity.output
    bare = invoke("runs", "ls", "--entity", "report", "--store", store_url)  # the kind left out
    assert bare.exit_code == 0 and "an entity is KIND:NAME: workflow:report" in bare.output, bare.output
    typo = invoke("runs", "ls", "--entity", "workflow:reprot", "--store", store_url)
    said = " ".join(typo.output.split())  # (as wrapped)
    assert typo.exit_code == 0 and "no runs of workflow:reprot: no run has that entity" in said, typo.output
    assert "closest first: workflow:report, workflow:doomed (`--entity workflow:report`)" in said, typo.output
    suggested = _json(invoke("runs", "ls", "--entity", "workflow:reprot", "--json", "--store", store_url))
    assert (suggested["runs"], suggested["entities"]) == ([], ["workflow:report", "workflow:doomed"])
    filtered = _json(invoke("runs", "ls", "--entity", "workflow:report", "--status", "skipped", "--json",
                            "--store", store_url))  # fmt: skip
    assert (filtered["runs"], filtered["entities"]) == ([], None)  # (it has runs: none skipped)
    kind = invoke("runs", "ls", "--kind", "workflw", "--store", store_url)
    said = " ".join(kind.output.split())  # (as wrapped)
    assert kind.exit_code == 2 and "--kind: 'workflw' is no kind of run" in said, kind.output
    assert "closest first: workflow, " in said and "no runs" not in said, kind.output
    bad = invoke("runs", "ls", "--limit", "0", "--store", store_url)
    assert bad.exit_code == 2 and "--limit" in bad.output


def test_a_run_whose_reason_is_a_code_shows_its_error_in_ls_trace_and_history(
    open_engine: OpenEngine, scripted: Scripted, store_url: str
) -> None:
    """A heartbeat whose gate raised ends `failed` with statusReason `gate_error`, a code: what the gate said is in
    its error, which people see beside the code (and `-q` finds), not only with --json."""

    async def broken(due: Tick) -> bool:
        raise ConnectionError("the mail server is down")

    digester = role("digester", scripted("cli-runs-gate", ScriptedModel.replying("digest")))

    async def record() -> str:
        async with open_engine(digester) as engine:
            run_id = await tick(engine, Heartbeat("mail", "digester", every=60, prompt="x", gate=broken), 3)
        assert run_id is not None
        return run_id

    run_id = asyncio.run(record())
    said = "gate_error: ConnectionError: the mail server is down"
    listed = invoke("runs", "ls", "--store", store_url)
    assert listed.exit_code == 0 and said in listed.output, listed.output
    traced = invoke("runs", "trace", run_id, "--store", store_url)
    assert traced.exit_code == 0 and said in traced.output, traced.output
    found = _json(invoke("runs", "history", run_id, "-q", "mail server", "--json", "--store", store_url))
    assert [(e["type"], e["detail"]) for e in found["entries"]] == [("run.ended", said)]
    table = invoke("runs", "history", run_id, "--store", store_url)
    assert said in table.output, table.output


def test_history_words_a_journal_lines_suggested_call_as_its_command(
    open_engine: OpenEngine, scripted: Scripted, store_url: str
) -> None:
    """A heartbeat's overlap line names the call that shows the earlier tick (`run_trace {id: ...}`, as an agent
    reads it); people read the command that makes it. A line stored before lines kept their calls reads as it
    was stored."""
    inbox = HeldTool("cli_slow_inbox", "3 new mails")
    beat = Heartbeat("digest", "digester", every=60, prompt="the inbox")

    async def record() -> tuple[str, str]:
        async with open_engine(inbox.role("digester", scripted, "cli-hb-slow"), tools=[inbox.tool]) as engine:
            first = asyncio.create_task(tick(engine, beat, 1))
            while not (
                await engine.store.list_sessions(SessionFilter(group_key="hb:digest", status=["running"]))
            ).items:
                await asyncio.sleep(0.02)
            skipped = await tick(engine, beat, 2)
            inbox.release.set()
            earlier = await first
            assert skipped is not None and earlier is not None
            old = "skipped: an earlier tick's agent is still running; `agentwatch runs trace run_x` shows it"
            await engine.store.append_journal(JournalEntry(run_id=skipped, kind="overlap", message=old))
        return skipped, earlier

    skipped, earlier = asyncio.run(record())
    table = invoke("runs", "history", skipped, "--source", "journal", "--store", store_url)
    said = " ".join(table.output.split())  # (as wrapped)
    assert table.exit_code == 0 and f"`agentwatch runs trace {earlier}` shows it" in said, table.output
    assert "run_trace {" not in said and "`agentwatch runs trace run_x` shows it" in said, table.output
    answer = _json(invoke("runs", "history", skipped, "--source", "journal", "--json", "--store", store_url))
    assert [e["suggestions"] for e in answer["entries"]] == [
        [{"tool": "run_trace", "arguments": {"id": earlier}}],
        None,
    ]
    assert f"run_trace {{id: '{earlier}'}} shows it" in answer["entries"][0]["title"]


def test_a_run_still_going_says_how_long_it_has_run(open_engine: OpenEngine, store_url: str) -> None:
    """A run (or span) still running has no duration yet: people are told how long it has run so far, which is
    what they ask of a run that seems slow, rather than `running` a second time."""

    async def record() -> str:
        async with open_engine() as engine:
            run = await engine.store.create_run(RunDraft(kind="workflow", entity="workflow:report"))
            await engine.store.open_span(SpanDraft(run_id=run.id, kind="phase", label="Research"))
        return run.id

    run_id = asyncio.run(record())
    listed = invoke("runs", "ls", "--store", store_url)
    assert listed.exit_code == 0 and " s so far" in listed.output, listed.output
    traced = invoke("runs", "trace", run_id, "--store", store_url)
    assert traced.exit_code == 0 and traced.output.count(" s so far") == 2, traced.output  # the run and its phase
    assert "running  running" not in traced.output


def test_compare_says_a_run_still_going_has_its_figures_so_far(open_engine: OpenEngine, store_url: str) -> None:
    async def record() -> tuple[str, str]:
        async with open_engine() as engine:
            done = await engine.store.create_run(RunDraft(kind="workflow", entity="workflow:report"))
            await engine.store.end_run(done.id, RunPatch(status="completed", ended_at=datetime.now(UTC)))
            going = await engine.store.create_run(RunDraft(kind="workflow", entity="workflow:report"))
        return done.id, going.id

    done, going = asyncio.run(record())
    compared = invoke("runs", "compare", going, "--store", store_url)
    assert compared.exit_code == 0, compared.output
    assert f"{going} is still running: its figures are so far; compare again once it ends" in compared.output
    assert f"{done} is still running" not in compared.output
