"""Sizes and ranges are checked at the boundary: refused with the field named, before anything is written;
answers that could be megabytes are cut with a marker or paged."""

from __future__ import annotations

import re
import shlex
from typing import Any, get_args

import pytest

import agentwatch.reads.export
from agentwatch.cli._common import worded_for_a_person
from agentwatch.errors import AgentwatchError, InvalidArgument
from agentwatch.events import PageCursor, StreamCursor, is_durable_type, query_digest
from agentwatch.reads.runs import RunStatus
from agentwatch.reads.tail import PROJECTION
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.service._wire import status_for
from agentwatch.store import RUN_ENDINGS
from agentwatch.tools import MAX_ANSWER_CHARS, MAX_PROMPT_CHARS
from tests.runtime.support import OpenEngine, Scripted, role

BAD_PROMPTS = ["", "   \n\t", "a\x00b", "half \ud800 a surrogate", "x" * (MAX_PROMPT_CHARS + 1)]


@pytest.mark.parametrize("prompt", BAD_PROMPTS, ids=["empty", "blank", "nul", "surrogate", "too-long"])
@pytest.mark.parametrize("tool", ["agent_create", "agent_task", "agent_enqueue"])
async def test_a_bad_prompt_is_refused_before_any_session_is_created(
    open_engine: OpenEngine, scripted: Scripted, tool: str, prompt: str
) -> None:
    model = scripted("bounds-prompt", ScriptedModel(function=lambda ctx: Reply("ok")))
    async with open_engine(role("chat", model)) as engine:
        target = await engine.create("chat", name="target")
        before = await engine.store.info()
        args: dict[str, Any] = {"role": "chat", "prompt": prompt, "name": "child"}
        if tool == "agent_enqueue":
            args = {"agentId": target.id, "prompt": prompt}
        answer = await engine.call_tool(tool, args)
        assert answer["error"]["code"] == "invalid_argument"
        assert answer["error"]["details"]["fields"] == ["prompt"]
        assert answer["error"]["message"].startswith(f"bad arguments for {tool}: prompt: ")
        if not prompt:  # in our words (once pydantic's: "String should have at least 1 character")
            assert answer["error"]["message"].startswith(f"bad arguments for {tool}: prompt: the text is empty;")
        after = await engine.store.info()
        assert (after.sessions, after.events) == (before.sessions, before.events)
        assert len(answer["error"]["message"]) < 1000  # a 100 kB prompt is not echoed back


@pytest.mark.parametrize("prompt", BAD_PROMPTS, ids=["empty", "blank", "nul", "surrogate", "too-long"])
async def test_the_python_api_refuses_a_bad_prompt_as_the_tools_do_before_creating_anything(
    open_engine: OpenEngine, scripted: Scripted, prompt: str
) -> None:
    """Once: `engine.task` made the session, then refused the prompt, leaving an idle session behind each time;
    and it took a prompt over the tools' 100,000 characters."""
    model = scripted("bounds-api-prompt", ScriptedModel(function=lambda ctx: Reply("ok")))
    async with open_engine(role("chat", model)) as engine:
        target = await engine.create("chat", name="target")
        before = await engine.store.info()
        for call in (lambda: engine.task("chat", prompt), lambda: engine.enqueue(target.id, prompt)):
            with pytest.raises(
                InvalidArgument, match=r"^prompt: the text is empty" if not prompt else "^prompt: "
            ) as refused:
                await call()
            assert refused.value.details["fields"] == ["prompt"] and len(str(refused.value)) < 1000
        after = await engine.store.info()
        assert (after.sessions, after.events) == (before.sessions, before.events)


BAD_NAMES = {
    "blank": (" ", "a name is empty (or only whitespace)"),  # (once: "no whitespace around it ... send ''")
    "padded": ("  padded  ", "no whitespace around it"),
    "newline": ("a\nb", "U+000A"),
    "tab": ("a\tb", "U+0009"),
    "bidi-override": ("x\u202ey", "U+202E"),
    "an-id": ("ses_01m944ebaz6w8fg8jp3nbf9c4y", "looks like an agent id"),
}


@pytest.mark.parametrize(("name", "said"), BAD_NAMES.values(), ids=BAD_NAMES.keys())
async def test_a_name_that_could_not_be_typed_back_or_looks_like_an_id_is_refused(
    open_engine: OpenEngine, scripted: Scripted, name: str, said: str
) -> None:
    """Once: a name of another agent's id made that agent unreachable by it (the id wins), and names with a
    tab or a newline could not be typed back from `ls`."""
    model = scripted("bounds-name", ScriptedModel(function=lambda ctx: Reply("ok")))
    async with open_engine(role("chat", model)) as engine:
        before = await engine.store.info()
        for tool in ("agent_create", "agent_task"):
            answer = await engine.call_tool(tool, {"role": "chat", "prompt": "hi", "name": name})
            assert answer["error"]["code"] == "invalid_argument" and answer["error"]["details"]["fields"] == ["name"]
            assert said in answer["error"]["message"]
        with pytest.raises(InvalidArgument, match=r"^name: ") as refused:
            await engine.create("chat", name=name)
        assert said in refused.value.message
        taken = await engine.create("chat", name="fine name, with spaces")
        await engine.create("chat", name="👩\u200d💻 coder")  # a joiner inside an emoji is part of a word
        held = await engine.call_tool("agent_take_over", {"id": taken.id, "by": name})
        if name.startswith("ses_"):  # an agent takes over as its own id
            assert held["interception"]["by"] == name
        else:
            assert held["error"]["details"]["fields"] == ["by"]
        after = await engine.store.info()
        assert after.sessions == before.sessions + 2


async def test_an_error_about_many_bad_arguments_stays_small(open_engine: OpenEngine) -> None:
    """Once it named every one: 110,000 unknown keys (1.6 MB) answered a 6.8 MB error."""
    async with open_engine() as engine:
        answer = await engine.call_tool("agent_list", {f"bogus{i}": 1 for i in range(5_000)})
    error = answer["error"]
    assert error["code"] == "invalid_argument" and error["message"].endswith(
        "(it takes: " + error["message"].split("(it takes: ")[1]
    )
    assert "and 4980 more" in error["message"] and len(error["details"]["problems"]) == 21
    assert len(str(answer)) < 5_000


async def test_a_tool_that_raises_answers_tool_failed_from_outside_a_turn(open_engine: OpenEngine) -> None:
    """Once: `engine.call_tool` of a user tool that raised raised the tool's exception (a traceback; the
    service answered 500 `internal`). Now the answer says which tool failed and how."""

    def boom() -> str:
        """Fails, as a buggy tool would."""
        raise RuntimeError("kaboom")

    async def aboom() -> str:
        """Fails too, on the loop."""
        raise KeyError("missing")

    async with open_engine(tools=[boom, aboom]) as engine:
        for name, shown in (("boom", "RuntimeError: kaboom"), ("aboom", "KeyError: 'missing'")):
            answer = await engine.call_tool(name, {})
            assert set(answer) == {"error"} and answer["error"]["code"] == "tool_failed"
            assert f"the tool {name!r} failed: {shown}" in answer["error"]["message"]
            assert status_for(answer) == 500
        assert "agents" in await engine.call_tool("agent_list", {})  # the engine goes on


@pytest.mark.parametrize(
    ("tool", "args", "field"),
    [
        ("agent_list", {"window": "99999999999999d"}, "window"),
        ("agent_list", {"window": 1e30}, "window"),
        ("agent_list", {"window": "3651d"}, "window"),
        ("agent_list", {"from": "0001-01-01T00:00:00+14:00"}, "from"),
        ("agent_list", {"q": "x" * 201}, "q"),
        ("agent_list", {"q": "a\x00"}, "q"),
        ("agent_list", {"source": ["chat"] * 51}, "source"),
        ("agent_summary", {"window": float("inf")}, "window"),
        ("agent_get", {"name": "\udfff"}, "name"),
        ("agent_get", {"id": "s" * 129}, "id"),
        ("agent_tail", {"id": "{sid}", "afterId": "{forged}"}, "afterId"),
        ("agent_tail", {"id": "{sid}", "afterId": "c1." + "A" * 2000}, "afterId"),
        ("agent_history", {"id": "{sid}", "cursor": "{forged_page}"}, "cursor"),
        ("agent_await", {"agentId": "{sid}", "timeoutMs": 2**64}, "timeoutMs"),
        ("agent_await", {"agentId": "{sid}", "timeoutMs": True}, "timeoutMs"),  # (once: a 1 ms wait)
        ("agent_list", {"limit": True}, "limit"),
        ("agent_list", {"from": "2030-01-01T00:00:00Z", "to": "2020-01-01T00:00:00Z"}, "from"),  # (once: [])
        ("run_list", {"status": ["complete"]}, "status"),  # (once: no runs, for a typo)
        ("agent_tail", {"id": "{sid}", "maxEvents": False}, "maxEvents"),
        ("run_history", {"id": "run_x", "maxChars": True}, "maxChars"),
        ("agent_answer", {"hitlId": "req_x", "answer": {"a": [[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]}}, "answer"),
        ("agent_answer", {"hitlId": "req_x", "answer": float("nan")}, "answer"),
        ("agent_answer", {"hitlId": "req_x", "answer": {"k\x00": 1}}, "answer"),
        ("agent_answer", {"hitlId": "req_x", "answer": ["y" * 60_000, "z" * 60_000]}, "answer"),
        ("agent_create", {"role": "chat", "name": "n" * 201}, "name"),
        ("agent_create", {"role": "chat", "scope": "a\ud800"}, "scope"),
        ("agent_create", {"role": "chat", "displayName": "\u202eredoc"}, "displayName"),  # (once: shown reversed)
        ("agent_create", {"role": "chat", "displayName": "  "}, "displayName"),
    ],
)
async def test_every_out_of_bounds_argument_is_refused_with_its_field(
    open_engine: OpenEngine, scripted: Scripted, tool: str, args: dict[str, Any], field: str
) -> None:
    model = scripted("bounds-args", ScriptedModel(function=lambda ctx: Reply("ok")))
    async with open_engine(role("chat", model)) as engine:
        sid = (await engine.task("chat", "hi"))["agentId"]
        filled = {
            "{sid}": sid,
            "{forged}": StreamCursor(sid, 2**64).encode(),
            "{forged_page}": PageCursor(
                query_digest({"history": {"id": sid, "conversation_id": None, "episode_id": None}}), (2**63,)
            ).encode(),
        }
        before = await engine.store.info()
        answer = await engine.call_tool(
            tool, {k: filled.get(v, v) if isinstance(v, str) else v for k, v in args.items()}
        )
        assert set(answer) == {"error"}, answer
        assert answer["error"]["code"] == "invalid_argument", answer
        assert field in answer["error"]["details"]["fields"], answer
        after = await engine.store.info()
        assert (after.sessions, after.events) == (before.sessions, before.events)


async def test_a_tool_name_of_any_kind_is_a_structured_refusal(open_engine: OpenEngine) -> None:
    async with open_engine() as engine:
        for name in (["agent_list"], {"a": 1}, None, 3, "", "x" * 10_000, "agent_list\x00", "\ud800"):
            answer = await engine.call_tool(name, {})  # type: ignore[arg-type]
            assert set(answer) == {"error"} and answer["error"]["code"] in ("invalid_argument", "not_found"), name


def big(size: int) -> str:
    return "x" * size


async def test_history_pages_by_size_and_previews_an_event_too_large_to_send(
    open_engine: OpenEngine, scripted: Scripted, monkeypatch: pytest.MonkeyPatch
) -> None:
    huge, large = MAX_ANSWER_CHARS + 200_000, MAX_ANSWER_CHARS * 6 // 10
    model = scripted(
        "bounds-big",
        ScriptedModel([CallTool("big", {"size": huge}), CallTool("big", {"size": large}), Reply("done")]),
    )
    async with open_engine(role("chat", model, tools=("big",)), tools=[big]) as engine:
        sid = (await engine.task("chat", "make it big"))["agentId"]
        stored = [e.seq for e in await engine.store.read_events(sid, limit=1000)]
        pages: list[dict[str, Any]] = []
        cursor = None
        while True:
            page = await engine.call_tool(
                "agent_history", {"id": sid, "limit": 100} | ({"cursor": cursor} if cursor else {})
            )
            pages.append(page)
            cursor = page["nextCursor"]
            if cursor is None:
                break
        seen = [e["seq"] for page in reversed(pages) for e in page["events"]]
        assert seen == stored  # every event once, in order, over the pages
        assert len(pages) >= 3  # the two large results cannot share a page with each other
        truncated = [e for page in pages for e in page["events"] if e.get("truncated")]
        assert len(truncated) == 1 and truncated[0]["type"] == "tool.result"
        assert truncated[0]["payload"]["chars"] > huge and len(truncated[0]["payload"]["preview"]) == 2000
        assert all(sum(len(str(e["payload"])) for e in page["events"]) <= MAX_ANSWER_CHARS for page in pages)
        whole = await engine.call_tool("agent_export", {"id": sid})
        assert "truncated" not in whole and len(whole["history"]) == len(stored)
        monkeypatch.setattr(agentwatch.reads.export, "MAX_EXPORT_CHARS", large // 2)
        cut = await engine.call_tool("agent_export", {"id": sid})
        truncated = cut["truncated"]
        assert truncated["historyEvents"] == len(cut["history"]) < len(stored)
        assert "agent_history" in truncated["reason"]
        # What was left out, and from where to read it (once: only how many events it held, no seq, no cursor).
        assert truncated["lastSeq"] == cut["history"][-1]["seq"] == truncated["historyEvents"]
        assert truncated["leftOut"] == len(stored) - len(cut["history"])
        assert f"the {truncated['leftOut']} after seq {truncated['lastSeq']} are left out" in truncated["reason"]
        durable = [name for name in PROJECTION if is_durable_type(name)]
        rest = await engine.call_tool("agent_tail", {"id": sid, "afterId": truncated["cursor"], "types": durable})
        assert len(rest["events"]) == truncated["leftOut"] and not rest["hasMore"]


async def test_a_name_where_an_id_goes_is_told_how_to_find_the_id(open_engine: OpenEngine) -> None:
    """Once: `agent_history {id: "d1"}` said only that the session may have been reaped."""
    async with open_engine() as engine:
        for tool, key in (("agent_history", "id"), ("agent_tail", "id"), ("agent_await", "agentId")):
            named = await engine.call_tool(tool, {key: "d1"})
            assert named["error"]["code"] == "not_found"
            assert (
                "an agent's id starts with ses_; find one by its name with agent_get {name: 'd1'}"
                in (named["error"]["message"])
            )
        gone = await engine.call_tool("agent_history", {"id": "ses_01m944ebaz6w8fg8jp3nbf9c4y"})
        assert "(it may have been reaped); agent_list {deleted: true} lists the ids" in gone["error"]["message"]


async def test_an_event_id_of_another_agent_is_refused_saying_what_to_pass(
    open_engine: OpenEngine, scripted: Scripted
) -> None:
    """Once: only "session ... has no event ...", with nothing to do about it (an agent tailing with an id it kept
    from another agent, or from a delta the live ring has let go of)."""
    model = scripted("bounds-events", ScriptedModel(function=lambda ctx: Reply("ok")))
    async with open_engine(role("chat", model)) as engine:
        one, other = [(await engine.task("chat", "hi"))["agentId"] for _ in range(2)]
        (message,) = await engine.store.read_events(one, limit=10, types=["message.user"])
        tail = await engine.call_tool("agent_tail", {"id": other, "afterId": message.id})
        assert tail["error"]["code"] == "not_found" and tail["error"]["details"]["fields"] == ["afterId"]
        assert "pass the `cursor` of the answer it came in, or agent_get's current.cursor" in tail["error"]["message"]
        prompt = await engine.call_tool("agent_prompt", {"id": other, "eventId": message.id})
        assert prompt["error"]["code"] == "not_found" and prompt["error"]["details"]["fields"] == ["eventId"]
        assert "pass the id of one of its user messages" in prompt["error"]["message"]


async def test_the_command_a_not_found_suggests_runs_as_printed(open_engine: OpenEngine) -> None:
    """Once: a name with a space or a quote was pasted bare into `agentwatch get NAME` and `agentwatch ls -q NAME`,
    which a shell splits (or waits on the open quote for)."""
    name = "my agent's"
    async with open_engine() as engine:
        by_id = await engine.call_tool("agent_tail", {"id": name})
        by_name = await engine.call_tool("agent_get", {"name": name})
    # A tool's caller is told the call to make; the CLI words it as the command that makes it.
    errors = [AgentwatchError.from_dict(answer) for answer in (by_id, by_name)]
    assert [str(error.suggestions[0]) for error in errors if error] == [
        'agent_get {name: "my agent\'s"}',
        'agent_list {q: "my agent\'s"}',
    ]
    worded = [worded_for_a_person(error).message for error in errors if error]
    suggested = [re.findall(r"`(agentwatch [^`]*)`", message) for message in worded]
    assert [shlex.split(command) for [command] in suggested] == [
        ["agentwatch", "get", name],
        ["agentwatch", "ls", "-q", name],
    ]


def test_run_list_takes_exactly_the_statuses_a_run_has() -> None:
    assert get_args(RunStatus) == ("running", *RUN_ENDINGS)
