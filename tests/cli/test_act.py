"""The acting commands (`answer`, `approve`, `deny`, `send`, `stop`, `escalate`, `delete`): each is a drive tool's
call on the store, with its JSON and exit codes; a write is left for the engine that owns the session, and the
command itself never runs a turn."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from agentwatch.cli import cli
from agentwatch.events import RequestDismissed, UserMessage
from agentwatch.runtime.leases import role_lack_said
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.store import RequestDraft, SessionDraft, SessionPatch, Store, Write, open_store
from tests.runtime.support import OpenEngine, Scripted, role
from tests.store.test_damaged import tamper


def invoke(*argv: str) -> Result:
    return CliRunner().invoke(cli, list(argv))


async def _waiting(store: Store, name: str, request: RequestDraft, parent_id: str | None = None) -> str:
    """A session named `name` whose turn is paused on `request`; returns the request's id."""
    session = await store.create_session(SessionDraft(name=name, role="coder", parent_id=parent_id))
    patch = SessionPatch(status="awaiting_input", current_turn_id="trn_test")
    draft = request.model_copy(update={"turn_id": "trn_test"})
    await store.write(Write(session.id, session=patch, requests_open=[draft]))
    (opened,) = await store.list_requests(session_id=session.id)
    return opened.id


@pytest.fixture
def waiting(store_url: str) -> dict[str, str]:
    """A store with agents paused on a question (asker), a choice (picker), an approval (deployer) and one held
    for its parent (scout); returns request ids by agent name."""

    async def prepare() -> dict[str, str]:
        async with open_store(store_url) as store:
            lead = await store.create_session(SessionDraft(name="lead", role="coder"))
            held = datetime.now(UTC) + timedelta(hours=1)
            return {
                "asker": await _waiting(store, "asker", RequestDraft(kind="question", summary="Q?", questions=["Q?"])),
                "picker": await _waiting(
                    store,
                    "picker",
                    RequestDraft(kind="choice", summary="Where?", questions=["Where?"], options=["dev", "staging"]),
                ),
                "deployer": await _waiting(store, "deployer", RequestDraft(kind="approval", summary="approve x()")),
                "scout": await _waiting(
                    store,
                    "scout",
                    RequestDraft(kind="question", summary="Which?", waits_on="parent", deliver_at=held),
                    parent_id=lead.id,
                ),
            }

    return asyncio.run(prepare())


def _json(result: Result) -> dict[str, Any]:
    value = json.loads(result.stdout)
    assert isinstance(value, dict)
    return value


async def _request(store_url: str, request_id: str) -> Any:
    async with open_store(store_url) as store:
        return await store.get_request(request_id)


def test_answer_by_agent_name_and_by_choice(store_url: str, waiting: dict[str, str]) -> None:
    result = invoke("answer", "asker", "Use the staging DB", "--store", store_url, "--json")
    assert result.exit_code == 0, result.output
    assert _json(result)["hitlId"] == waiting["asker"] and _json(result)["status"] == "resolved"
    assert asyncio.run(_request(store_url, waiting["asker"])).answer == "Use the staging DB"

    result = invoke("answer", waiting["picker"], "--choice", "2", "--store", store_url)
    assert result.exit_code == 0, result.output
    assert "answered" in result.stdout and "continues" in result.stdout
    assert asyncio.run(_request(store_url, waiting["picker"])).answer == "staging"

    again = invoke("answer", "asker", "twice", "--store", store_url, "--json")  # nothing pending any more
    assert again.exit_code == 1 and _json(again)["error"]["code"] == "not_found"
    again = invoke("answer", waiting["asker"], "twice", "--store", store_url, "--json")
    assert again.exit_code == 1 and _json(again)["error"]["code"] == "conflict"


def test_answer_refusals_name_the_flag(store_url: str, waiting: dict[str, str]) -> None:
    out_of_range = invoke("answer", "picker", "--choice", "3", "--store", store_url, "--json")
    assert out_of_range.exit_code == 2
    error = _json(out_of_range)["error"]
    assert error["details"]["flags"] == ["--choice"] and "1. dev; 2. staging" in error["message"]
    not_an_option = invoke("answer", "picker", "production", "--store", store_url, "--json")
    assert not_an_option.exit_code == 2 and _json(not_an_option)["error"]["details"]["flags"] == ["TEXT"]
    twice = invoke("answer", "picker", "--choice", "1", "--choice", "2", "--store", store_url)
    assert twice.exit_code == 2 and "takes one option" in twice.output
    no_options = invoke("answer", "asker", "--choice", "1", "--store", store_url)
    assert no_options.exit_code == 2 and "offers no options" in no_options.output
    # The command's own refusal stands in its words (once "give the TEXT as text", blaming TEXT too).
    no_options = invoke("answer", "asker", "--choice", "1", "--store", store_url, "--json")
    assert _json(no_options)["error"] == {
        "code": "invalid_argument",
        "message": f"request {waiting['asker']} offers no options; give the answer as text",
        "details": {"flags": ["--choice"]},
    }
    both = invoke("answer", "picker", "dev", "--choice", "1", "--store", store_url)
    assert both.exit_code == 2
    neither = invoke("answer", "picker", "--store", store_url)
    assert neither.exit_code == 2
    assert asyncio.run(_request(store_url, waiting["picker"])).status == "pending"  # nothing was written
    for blank in ("", "   "):  # once: accepted, and the agent went on with nothing
        said_nothing = invoke("answer", "asker", blank, "--store", store_url, "--json")
        assert said_nothing.exit_code == 2 and _json(said_nothing)["error"]["details"]["flags"] == ["TEXT"]
        assert "TEXT: the answer is empty; give the reply itself" in _json(said_nothing)["error"]["message"]
    assert asyncio.run(_request(store_url, waiting["asker"])).status == "pending"


def test_approve_and_deny_answer_approvals_only(store_url: str, waiting: dict[str, str]) -> None:
    wrong = invoke("approve", "asker", "--store", store_url, "--json")
    assert wrong.exit_code == 1 and "not an approval" in _json(wrong)["error"]["message"]
    result = invoke("deny", "deployer", "--reason", "not today", "--store", store_url, "--json")
    assert result.exit_code == 0, result.output
    request = asyncio.run(_request(store_url, waiting["deployer"]))
    assert (request.status, request.answer) == ("resolved", {"approved": False, "message": "not today"})
    again = invoke("approve", waiting["deployer"], "--store", store_url)
    assert again.exit_code == 1


def test_escalate_hands_a_held_request_to_a_person(store_url: str, waiting: dict[str, str]) -> None:
    not_held = invoke("escalate", "asker", "--store", store_url, "--json")
    assert not_held.exit_code == 1 and "held for its parent" in _json(not_held)["error"]["message"]
    assert _json(not_held)["error"]["code"] == "conflict"  # it waits on a person already (once: not_found)
    assert f"{waiting['asker']} already wait(s) on a person" in _json(not_held)["error"]["message"]
    result = invoke("escalate", "scout", "--store", store_url, "--json")
    assert result.exit_code == 0, result.output
    assert _json(result) == {"hitlId": waiting["scout"], "agentId": _json(result)["agentId"], "status": "pending",
                             "waitsOn": "person"}  # fmt: skip
    assert asyncio.run(_request(store_url, waiting["scout"])).waits_on == "person"


def test_stop_and_delete_a_paused_agent(store_url: str, waiting: dict[str, str]) -> None:
    result = invoke("stop", "picker", "--store", store_url, "--json")
    assert result.exit_code == 0, result.output
    stopped = _json(result)
    assert (stopped["stopped"], stopped["status"], stopped["by"]) == (True, "cancelled", "a person")
    assert asyncio.run(_request(store_url, waiting["picker"])).status == "dismissed"
    again = invoke("stop", "picker", "--store", store_url)  # (once "ses_... had no turn to stop")
    assert again.exit_code == 0 and again.stdout == f"picker ({stopped['id']}) had no turn to stop (cancelled)\n"
    said = invoke("stop", stopped["id"], "--store", store_url)  # (named by its id: its name all the same)
    assert said.stdout == again.stdout
    deployer = invoke("stop", "deployer", "--store", store_url)
    assert deployer.exit_code == 0 and deployer.stdout.startswith("stopped deployer (ses_"), deployer.output
    assert deployer.stdout.endswith(" (by a person): cancelled\n"), deployer.output
    sent = invoke("send", "picker", "again", "--store", store_url)
    assert sent.exit_code == 0 and sent.stdout.startswith(f"queued for picker ({stopped['id']}), 1 waiting: ")

    deleted = invoke("delete", "asker", "--store", store_url, "--json")
    assert deleted.exit_code == 0, deleted.output
    assert _json(deleted)["deletedAt"] is not None
    lead = invoke("delete", "lead", "--store", store_url)
    assert lead.exit_code == 0 and lead.stdout.startswith("deleted lead (ses_"), lead.output
    assert asyncio.run(_request(store_url, waiting["asker"])).status == "dismissed"
    gone = invoke("send", "asker", "more", "--store", store_url, "--json")  # deleted names no longer resolve
    assert gone.exit_code == 1
    hidden = invoke("ls", "-q", "asker", "--store", store_url)  # (once a bare "no agents match")
    assert hidden.exit_code == 0 and "no agents match (deleted ones: --all)" in hidden.output
    shown = invoke("ls", "-q", "asker", "--all", "--store", store_url)
    assert shown.exit_code == 0 and "asker" in shown.output and "--all" not in shown.output


def test_an_agent_whose_row_is_damaged_is_deleted_by_its_name(store_url: str) -> None:
    """Once: naming it read its whole row, so only its id could delete it."""

    async def prepare() -> str:
        async with open_store(store_url) as store:
            return (await store.create_session(SessionDraft(name="broken", role="coder"))).id

    broken = asyncio.run(prepare())
    tamper(store_url, "UPDATE sessions SET settings = ? WHERE id = ?", ["garbage", broken])
    looked = invoke("get", "broken", "--store", store_url, "--json")  # (a read still says it is damaged)
    assert looked.exit_code == 1 and _json(looked)["error"]["code"] == "damaged_record", looked.output
    assert _json(looked)["error"]["message"].endswith(f"(`agentwatch delete {broken}`)"), looked.output
    deleted = invoke("delete", "broken", "--store", store_url)
    assert deleted.exit_code == 0, deleted.output
    # (named by its id: its name is in the row that cannot be read)
    assert deleted.stdout.startswith(f"deleted {broken}, reaped after "), deleted.output
    listed = invoke("ls", "--store", store_url)
    assert listed.exit_code == 0 and "broken" not in listed.output


def test_send_with_a_key_queues_once(store_url: str, waiting: dict[str, str]) -> None:
    first = invoke("send", "picker", "Use staging", "--key", "pick-1", "--store", store_url)
    assert first.exit_code == 0 and first.stdout.startswith("queued for picker (ses_"), first.output
    again = invoke("send", "picker", "Use staging", "--key", "pick-1", "--store", store_url)  # a script's retry
    assert again.exit_code == 0, again.output
    assert again.stdout.endswith(" was sent this key before: nothing queued, 1 waiting\n"), again.output
    other = invoke("send", "picker", "Use dev", "--key", "pick-1", "--store", store_url, "--json")
    assert other.exit_code == 1 and _json(other)["error"]["code"] == "conflict", other.output
    unkeyed = invoke("send", "picker", "Use staging", "--store", store_url, "--json")
    assert _json(unkeyed)["pendingInputs"] == 2


def test_acting_on_a_missing_store_creates_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'typo.db'}"
    result = invoke("send", "coder", "hello", "--store", url)
    assert result.exit_code == 1 and "no store at" in result.output
    assert not (tmp_path / "typo.db").exists()


async def _until(check: Any, seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_an_answer_is_left_for_the_engine_that_runs_the_session(
    open_engine: OpenEngine, scripted: Scripted, store_url: str
) -> None:
    def script(ctx: Any) -> Any:
        if not ctx.tool_results:
            return CallTool("ask_user", {"question": "Where?", "options": ["dev", "staging"]})
        return Reply(f"Deploying to {ctx.tool_results[0].output}")

    model = scripted("cli-chooser", ScriptedModel(function=script))
    async with open_engine(role("chooser", model, tools=("ask_user",)), extensions=[]) as engine:
        snapshot = await engine.task("chooser", "deploy", name="chooser", timeout=10)
        assert snapshot["pendingHitl"]["options"] == ["dev", "staging"]
        result = await asyncio.to_thread(invoke, "answer", "chooser", "--choice", "2", "--store", store_url, "--json")
        assert result.exit_code == 0, result.output

        async def done() -> bool:
            current = await engine.store.get_session(snapshot["agentId"])
            return bool(current.status == "completed")

        await _until(done)  # this engine (the owner) took the answer up and ran the turn
        session = await engine.store.get_session(snapshot["agentId"])
        assert session.last_text == "Deploying to staging"


async def test_input_sent_while_another_engine_runs_a_turn_waits_for_it(
    open_engine: OpenEngine, scripted: Scripted, store_url: str
) -> None:
    release = asyncio.Event()

    async def slow() -> str:
        """Takes until the test lets it go."""
        await release.wait()
        return "slow done"

    def script(ctx: Any) -> Any:
        if ctx.prompt == "first" and not ctx.tool_results:
            return CallTool("slow", {})
        return Reply(f"answered {ctx.prompt}")

    model = scripted("cli-slow", ScriptedModel(function=script))
    definition = role("worker", model, tools=("slow",))
    async with open_engine(definition, tools=[slow], extensions=[]) as engine:
        session = await engine.create("worker", name="worker", source="chat")
        await engine.enqueue(session.id, "first")

        async def in_tool() -> bool:
            events = await engine.store.read_events(session.id, limit=100)
            return any(e.type == "tool.call" for e in events)

        await _until(in_tool)
        sent = await asyncio.to_thread(invoke, "send", "worker", "second", "--store", store_url, "--json")
        assert sent.exit_code == 0, sent.output
        assert _json(sent) == {"agentId": session.id, "pendingInputs": 1, "duplicate": False}
        assert (await engine.store.get_session(session.id)).status == "running"  # the input waits its turn
        release.set()

        async def second_done() -> bool:
            current = await engine.store.get_session(session.id)
            return bool(current.status == "idle" and current.last_text == "answered second")

        await _until(second_done)
        events = await engine.store.read_events(session.id, limit=1000)
        texts = [e.payload.text for e in events if isinstance(e.payload, UserMessage)]
        assert texts == ["first", "second"]
        assert not [e for e in events if isinstance(e.payload, RequestDismissed)]


async def test_a_person_takes_an_agent_over_and_hands_it_back(
    open_engine: OpenEngine, scripted: Scripted, store_url: str
) -> None:
    model = scripted("cli-held", ScriptedModel(function=lambda ctx: Reply(f"got {ctx.prompt}")))
    async with open_engine(role("helper", model), extensions=[]) as engine:
        session = await engine.create("helper", name="helper", source="chat")
        await engine.enqueue(session.id, "one")

        async def idle() -> bool:
            current = await engine.store.get_session(session.id)
            return bool(current.status == "idle" and current.last_text == "got one")

        await _until(idle)
        nobody = await asyncio.to_thread(invoke, "take-over", "helper", "--by", "", "--store", store_url, "--json")
        assert nobody.exit_code == 2 and _json(nobody)["error"]["details"]["flags"] == ["--by"]  # (once: "a person")
        assert (await engine.store.get_session(session.id)).interception is None
        taken = await asyncio.to_thread(invoke, "take-over", "helper", "--by", "ada", "--store", store_url, "--json")
        assert taken.exit_code == 0, taken.output
        assert _json(taken)["interception"]["by"] == "ada"
        twice = await asyncio.to_thread(invoke, "take-over", "helper", "--store", store_url, "--json")
        assert twice.exit_code == 1 and "already held by ada" in _json(twice)["error"]["message"]

        sent = await asyncio.to_thread(invoke, "send", "helper", "two", "--store", store_url)
        assert sent.exit_code == 0, sent.output
        assert "it waits until ada hands the agent back" in sent.output  # (once: "... continues it")
        await engine.enqueue(session.id, "three")  # the owner's own input waits too
        await asyncio.sleep(1.0)  # the owner's sweep and loop had time to run it, and did not
        held = await engine.store.get_session(session.id)
        assert (held.status, held.pending_inputs, held.last_text) == ("idle", 2, "got one")
        listed = await asyncio.to_thread(invoke, "ls", "--intercepted", "--store", store_url, "--json")
        assert [row["name"] for row in _json(listed)["agents"]] == ["helper"]
        summary = await asyncio.to_thread(invoke, "summary", "--store", store_url, "--json")
        assert _json(summary)["intercepted"] == 1
        shown = await asyncio.to_thread(invoke, "get", "helper", "--store", store_url)
        assert "held by" in shown.output and "ada" in shown.output  # for people too, not only in --json

        back = await asyncio.to_thread(invoke, "hand-back", "helper", "--store", store_url, "--json")
        assert back.exit_code == 0, back.output
        assert (_json(back)["interception"], _json(back)["pendingInputs"]) == (None, 2)

        async def ran() -> bool:
            current = await engine.store.get_session(session.id)
            return bool(current.pending_inputs == 0 and current.status == "idle" and current.last_text != "got one")

        await _until(ran)
        events = await engine.store.read_events(session.id, limit=1000)
        messages = [e.payload for e in events if isinstance(e.payload, UserMessage)]
        assert [m.text for m in messages] == ["one", "two", "three"]
        assert messages[1].origin is not None and (messages[1].origin.kind, messages[1].origin.ref) == ("person", "ada")
        notes = [e.payload.message for e in events if e.type == "runtime.info" and "ada" in str(e.payload)]
        assert len(notes) == 2  # taken over, handed back
        again = await asyncio.to_thread(invoke, "hand-back", "helper", "--store", store_url)
        assert again.exit_code == 1

        # Once: a deleted agent held by a person was "handed back" with its inputs, which never ran.
        await asyncio.to_thread(invoke, "take-over", "helper", "--store", store_url)
        await engine.enqueue(session.id, "four")
        await engine.delete(session.id)
        gone = await asyncio.to_thread(invoke, "hand-back", session.id, "--store", store_url, "--json")
        assert gone.exit_code == 1 and "was deleted" in _json(gone)["error"]["message"]


def test_await_waits_for_a_paused_turn_whose_answer_no_engine_took_up_yet(
    store_url: str, waiting: dict[str, str]
) -> None:
    """Once: an answered request left the session `awaiting_input` (word `working`) until an engine took it up,
    and `await` returned at once as if the agent had settled. Its turn goes on: `await` waits for it."""
    before = _json(invoke("await", "deployer", "--timeout", "5", "--json", "--store", store_url))
    assert (before["word"], before["timedOut"]) == ("needs_you", False)
    assert invoke("approve", "deployer", "--store", store_url).exit_code == 0
    started = time.monotonic()
    after = _json(invoke("await", "deployer", "--timeout", "1", "--json", "--store", store_url))
    assert (after["status"], after["word"], after["timedOut"]) == ("awaiting_input", "working", True)
    assert time.monotonic() - started >= 1


async def test_create_makes_the_agent_at_once_and_the_next_engine_runs_it(
    open_engine: OpenEngine, scripted: Scripted, store_url: str, tmp_path: Path
) -> None:
    model = scripted("cli-created", ScriptedModel.replying("made it"))
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "maker.md").write_text(role("maker", model).to_markdown())
    flags = ("--agents-dir", str(agents), "--store", store_url)  # a new store: create makes it, as run does
    created = await asyncio.to_thread(invoke, "create", "maker", "go", "--name", "m1", *flags, "--json")
    assert created.exit_code == 0, created.output
    answer = _json(created)
    assert (answer["name"], answer["status"], answer["pendingInputs"]) == ("m1", "idle", 1)
    said = await asyncio.to_thread(invoke, "create", "maker", *flags)  # no prompt: nothing waits
    assert said.exit_code == 0 and said.output.startswith("created ") and "waiting" not in said.output
    taken = await asyncio.to_thread(invoke, "create", "maker", "again", "--name", "m1", *flags, "--json")
    assert taken.exit_code == 1 and _json(taken)["error"]["code"] == "conflict"
    unknown = await asyncio.to_thread(invoke, "create", "nobody", *flags, "--json")
    assert unknown.exit_code == 1 and "no agent type 'nobody'" in _json(unknown)["error"]["message"]
    empty = await asyncio.to_thread(invoke, "create", "maker", "", *flags)
    assert empty.exit_code == 2 and "PROMPT: the text is empty" in empty.output
    # Idle, yet not settled: `await` says why it waits in vain (once: "idle (timed out)", and nothing more).
    waited = await asyncio.to_thread(invoke, "await", "m1", "--timeout", "0.2", "--store", store_url)
    assert waited.exit_code == 3 and "1 input(s) of m1 wait for an engine to run them" in waited.stderr, waited.output
    async with open_engine() as engine:  # the next engine to open the store runs it

        async def done() -> bool:
            return (await engine.store.get_session(answer["agentId"])).status == "completed"

        await _until(done)
        session = await engine.store.get_session(answer["agentId"])
        assert session.last_text == "made it" and session.origin is not None and session.origin.kind == "person"


async def test_await_says_why_an_idle_agents_input_is_not_run_as_the_store_tells_it(
    open_engine: OpenEngine, scripted: Scripted, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`await` told to start `agentwatch serve` whenever an idle agent's input waited, though an engine may hold the
    agent (it runs it next) or run on the store without the agent's type (another serve would not help)."""
    agents = tmp_path / "project-agents"  # (not the engine's: it runs no agent of this type)
    agents.mkdir()
    (agents / "maker.md").write_text(role("maker", scripted("await-hint", ScriptedModel.replying("ok"))).to_markdown())
    made = await asyncio.to_thread(
        invoke, "create", "maker", "go", "--name", "m1", "--agents-dir", str(agents), "--store", store_url, "--json"
    )
    agent_id = _json(made)["agentId"]

    async def hint() -> str:
        waited = await asyncio.to_thread(invoke, "await", "m1", "--timeout", "0", "--store", store_url)
        assert waited.exit_code == 3, waited.output
        assert "input(s) of m1 wait for an engine to run them" in waited.stderr, waited.stderr
        return " ".join(waited.stderr.split())

    # Just queued, its lease handed back: an engine with the type takes it within a second, if one is open.
    said = await hint()
    assert "no engine took them up yet" in said and "start `agentwatch serve`" in said
    # Long unclaimed (an engine without the type would have said so by now): no engine is open on the store.
    monkeypatch.setattr("agentwatch.runtime.leases.UNCLAIMED_SECONDS", -60.0)
    said = await hint()
    assert "no engine open on this store runs this agent; start `agentwatch serve`" in said
    monkeypatch.undo()

    # An engine holds the agent: it runs the input once it gets to it.
    async with open_store(store_url) as store:
        assert await store.acquire_lease(agent_id, "own_busy_engine", 60.0)
        said = await hint()
        assert "engine own_busy_engine holds this agent" in said and "serve" not in said
        await store.release_lease(agent_id, "own_busy_engine")

    # An engine open on the store without the agent's type said so on the agent: another serve would not help.
    async with open_engine() as engine:
        await engine.enqueue(agent_id, "again")

        async def handed_back() -> bool:
            lease = await engine.store.get_lease(agent_id)
            return await role_lack_said(engine.store, agent_id) and (lease is None or lease.expired)

        await _until(handed_back)
        said = await hint()
    assert "an engine open on this store has no agent type 'maker'" in said, said
    assert "agents check" in said and "start `agentwatch serve`" not in said


def test_a_text_of_dash_is_read_from_standard_input(store_url: str, waiting: dict[str, str]) -> None:
    """A long or many-line text that a shell could not pass as an argument (once: only as an argument)."""
    text = "first line\nsecond line, with ünïcode\n" + "x" * 50_000 + "\n"
    sent = CliRunner().invoke(cli, ["send", "asker", "-", "--store", store_url, "--json"], input=text)
    assert sent.exit_code == 0, sent.output
    answered = CliRunner().invoke(cli, ["answer", "asker", "-", "--store", store_url, "--json"], input="staging\n")
    assert answered.exit_code == 0, answered.output

    async def stored() -> tuple[list[str], Any]:
        async with open_store(store_url) as store:
            session = await store.get_session(_json(sent)["agentId"])
            inputs = [i.text for i in await store.list_inputs(session.id)]
            return inputs, await store.get_request(waiting["asker"])

    inputs, request = asyncio.run(stored())
    assert inputs == [text.removesuffix("\n")]  # as typed, without the last newline
    assert request.answer == "staging"
    empty = CliRunner().invoke(cli, ["send", "asker", "-", "--store", store_url], input="")
    assert empty.exit_code == 2 and "TEXT: the text is empty" in empty.output
    latin = CliRunner().invoke(cli, ["send", "asker", "-", "--store", store_url], input=b"caf\xe9\n")
    assert latin.exit_code == 2 and "standard input is not UTF-8 text" in latin.output  # (once: a traceback)


def test_ls_shows_a_question_held_for_the_parent(store_url: str, waiting: dict[str, str]) -> None:
    """Once: a question held for the parent left WAITING empty (and the word `working`): a person could not
    see what would come to them at its deliverAt."""
    listed = invoke("ls", "--store", store_url, "--json")
    rows = {row["name"]: row for row in _json(listed)["agents"]}
    assert (rows["scout"]["heldRequests"], rows["scout"]["pendingRequests"]) == (1, 0)
    assert (rows["asker"]["heldRequests"], rows["asker"]["pendingRequests"]) == (0, 1)
    table = invoke("ls", "--store", store_url)
    (scout,) = [line for line in table.stdout.splitlines() if line.startswith("scout\t")]
    assert "1 held" in scout.split("\t")
    (deployer,) = [line for line in table.stdout.splitlines() if line.startswith("deployer\t")]
    assert "1 for you" in deployer.split("\t")  # an approval (once: "1 asks")


def test_get_says_which_engine_owns_a_turn_and_when_it_is_gone(store_url: str) -> None:
    """Once: a turn whose every engine had died read `working`, `running`, as if it ran on."""

    async def orphan() -> str:
        async with open_store(store_url) as store:
            session = await store.create_session(SessionDraft(name="orphan", role="coder"))
            await store.write(Write(session.id, session=SessionPatch(status="running", current_turn_id="trn_x")))
            assert await store.acquire_lease(session.id, "own_host_1_dead", 0.05)
            return session.id

    session_id = asyncio.run(orphan())
    time.sleep(0.1)  # the lease runs out: nobody renews it
    record = _json(invoke("get", "orphan", "--store", store_url, "--json"))
    assert record["id"] == session_id and record["lease"]["owner"] == "own_host_1_dead"
    assert record["lease"]["expired"] is True
    shown = invoke("get", "orphan", "--store", store_url)
    assert "own_host_1_dead (gone: its lease ran out" in " ".join(shown.stdout.split())

    async def settle() -> None:
        async with open_store(store_url) as store:
            await store.write(Write(session_id, session=SessionPatch(status="idle", current_turn_id=None)))

    asyncio.run(settle())  # idle, with the lease a command left (a `send`'s): no turn runs anywhere to name
    assert "runs on" not in invoke("get", "orphan", "--store", store_url).stdout


@pytest.mark.postgres
def test_reading_an_empty_postgres_database_creates_nothing(postgres_url: str) -> None:
    """Once `agentwatch ls` (or `db info`, `tail`, `mcp --read-only`) on a database nothing had run with made the
    whole schema there, as no read of a SQLite file does: the store URL may name the wrong database."""
    import psycopg

    from tests.store.databases import postgres_schema

    with postgres_schema(postgres_url) as url:
        for argv in (("ls",), ("db", "info"), ("tail", "coder")):
            result = invoke(*argv, "--store", url)
            assert result.exit_code == 1 and "no agentwatch store in PostgreSQL database" in result.output, argv
        command = [sys.executable, "-m", "agentwatch", "mcp", "--read-only", "--store", url]
        served = subprocess.run(command, input=b"", capture_output=True, timeout=60, check=False)
        assert served.returncode == 1 and b"no agentwatch store in PostgreSQL database" in served.stderr
        with psycopg.connect(url, autocommit=True) as connection:
            tables = connection.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
            assert list(tables) == []
        assert invoke("create", "nobody", "--store", url).exit_code == 1  # (a command that writes makes it)
        with psycopg.connect(url, autocommit=True) as connection:
            tables = connection.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
            assert "sessions" in {row[0] for row in tables}


def test_get_says_how_full_the_context_is_and_when_the_window_is_unknown(store_url: str) -> None:
    """Once: `context  265 / ? tokens` for a model whose window nobody knows."""

    async def fill(name: str, context_fill: dict[str, Any]) -> None:
        async with open_store(store_url) as store:
            session = await store.create_session(SessionDraft(name=name, role="coder"))
            await store.update_session(session.id, SessionPatch(context_fill=context_fill))

    asyncio.run(fill("unknown", {"state": "measured", "tokens": 1265, "window": None}))
    asyncio.run(fill("known", {"state": "measured", "tokens": 50_000, "window": 200_000}))

    def context_line(name: str) -> str:
        shown = invoke("get", name, "--store", store_url)
        return next(line for line in shown.stdout.splitlines() if line.startswith("context"))

    assert context_line("unknown").split(None, 1)[1] == "1,265 tokens (the model's window is not known)"
    assert context_line("known").split(None, 1)[1] == "50,000 / 200,000 tokens (25%)"
