"""What each built-in rule catches and what it leaves alone, on activity items (the efficacy test plays the
same kinds of trajectories through an engine)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from agentwatch.events import Event, EventId, SessionId, ToolCall, ToolResult, TurnEnded, TurnId
from agentwatch.watchers.digest import (
    ActivityRecorder,
    AssistantTextItem,
    ToolCallItem,
    ToolResultItem,
    TurnEndedItem,
    fingerprint,
    render_digest,
)
from agentwatch.watchers.rules import (
    RuleContext,
    command_guard,
    destructive_commands,
    failure_guard,
    find_secrets,
    loop_guard,
    run_rule,
    secret_guard,
)


def context(*items: Any, memory: dict[str, Any] | None = None) -> RuleContext:
    return RuleContext("ses_x", "coder", tuple(items), "", {} if memory is None else memory)


def call(name: str, args: dict[str, Any], call_id: str) -> ToolCallItem:
    return ToolCallItem(name, json.dumps(args), fingerprint(name, args), call_id=call_id)


def result(name: str, output: str, call_id: str, status: str = "ok") -> ToolResultItem:
    return ToolResultItem(name, output, status, call_id=call_id)


async def test_the_loop_guard_compares_inputs_as_canonical_json_and_needs_the_result_to_repeat() -> None:
    rule = loop_guard()
    orders = [{"q": "x", "page": 2}, {"page": 2, "q": "x"}, {"q": "x", "page": 2}]
    same = [
        item for n, a in enumerate(orders) for item in (call("search", a, f"c{n}"), result("search", "none", f"c{n}"))
    ]
    assert len(await run_rule(rule, context(*same))) == 1
    polling = [
        item
        for n, state in enumerate(["10%", "50%", "90%", "done"])
        for item in (call("status", {"job": "7"}, f"p{n}"), result("status", state, f"p{n}"))
    ]
    assert await run_rule(rule, context(*polling)) == []


async def test_rules_read_the_whole_text_not_the_digests_cut() -> None:
    output = "x" * 3000 + " key sk_live_51HqLyjWDarjtT1zdp7dcXyZ3"
    (segment,) = _record(
        [ToolCall(tool_call_id="c", tool_name="bash", input={"command": "env"})],
        [ToolResult(tool_call_id="c", tool_name="bash", output=output)],
    )
    item = segment[-1]
    assert isinstance(item, ToolResultItem) and item.full_content == output and "sk_live" not in item.content
    assert "sk_live" not in render_digest("coder", segment)
    assert len(await run_rule(secret_guard(), context(*segment))) == 1


def _record(*batches: list[Any]) -> list[tuple[Any, ...]]:
    recorder = ActivityRecorder(max_results=1)
    segments = []
    payloads = [p for batch in batches for p in batch] + [TurnEnded(outcome="completed")]
    for seq, payload in enumerate(payloads, 1):
        event = Event(
            id=EventId(f"evt_{seq}"),
            session_id=SessionId("s"),
            seq=seq,
            at=datetime.now(UTC),
            turn_id=TurnId("t"),
            payload=payload,
        )
        closed = recorder.record(event)
        if closed is not None:
            segments.append(closed)
    # With max_results 1 (rule observers) the call closes its own segment, before its result.
    assert [s[0].kind for s in segments] == ["tool_call", "tool_result", "turn_ended"]
    return [segments[1]]


async def test_the_failure_guard_counts_non_zero_exit_codes_but_not_in_what_a_reader_reads() -> None:
    rule = failure_guard()
    codes = ["build failed\nexit code: 1", json.dumps({"returncode": 2}), "npm: not found\nExit status 127"]
    assert len(await run_rule(rule, context(*(result("bash", c, f"c{n}") for n, c in enumerate(codes))))) == 1
    zero = [result("bash", "done\nexit code: 0", f"z{n}") for n in range(3)]
    assert await run_rule(rule, context(*zero)) == []
    logs = [result("read_file", "exit code: 1", f"r{n}") for n in range(3)]
    assert await run_rule(rule, context(*logs)) == []


def test_the_secret_guard_finds_keys_and_passwords_and_leaves_placeholders_alone() -> None:
    found = find_secrets(
        "STRIPE=sk_live_51HqLyjWDarjtT1zdp7dcXyZ3 G=AIzaSyD3kq9Xw2Lm8Rt5Vb7Np4Hc6Jz1Qe0Ys-U\n"
        'DB_PASSWORD="Tr0ub4dor-horse"\npostgres://app:Gr4ss-Kn0ll@db/app'
    )
    assert [value for _, value in found] == [
        "sk_live_51HqLyjWDarjtT1zdp7dcXyZ3",
        "AIzaSyD3kq9Xw2Lm8Rt5Vb7Np4Hc6Jz1Qe0Ys-U",
        "Tr0ub4dor-horse",
        "Gr4ss-Kn0ll",
    ]
    clean = (
        "OPENAI_API_KEY=sk-your-openai-api-key-goes-here\nAPI_KEY=xxxxxxxxxxxx\nkey: <your-key>\n"
        "id 550e8400-e29b-41d4-a716-446655440000 commit 3f2a1b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a\n"
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl me\n"
        '-----BEGIN PUBLIC KEY-----\npassword = os.environ["PW"]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE'
    )
    assert find_secrets(clean) == []
    named = "PWD=/home/me\nsecretName: tls-cert\npassword_hash: 1a2b3c4d5e\nsecretary = 'Johnson'\n"
    named += "password: ${{ secrets.PW }}"
    assert find_secrets(named) == []


async def test_the_secret_guard_reads_the_agents_own_answer() -> None:
    answer = AssistantTextItem("Use GITHUB_TOKEN=ghp_R8kLm2Qx7Vb4Nz9Tc1Hs5Jd3Fg6Yp0WeAaUo")
    (report,) = await run_rule(secret_guard(), context(answer))
    assert report.startswith("Secret guard: your own answer holds what looks like a GitHub token")


async def test_the_command_guard_reports_destructive_commands_once_per_turn() -> None:
    rule = command_guard()
    memory: dict[str, Any] = {}
    rm = call("bash", {"command": "rm -rf /"}, "c1")
    assert await run_rule(rule, context(rm, rm, memory=memory)) == [
        "Command guard: your call to bash runs a recursive delete of a whole tree (rm -r): `rm -rf /`. It cannot "
        "be undone; make sure the user asked for exactly this, and say so if it was a mistake."
    ]
    assert len(await run_rule(rule, context(TurnEndedItem("completed"), rm, memory=memory))) == 1


def test_what_the_command_guard_counts_as_destructive() -> None:
    def kinds(tool: str, **args: str) -> list[str]:
        return [what for what, _ in destructive_commands(tool, json.dumps(args))]

    assert (
        kinds("bash", command="rm -rf ~") and kinds("bash", command="git push -f") and kinds("sql", query="TRUNCATE t")
    )
    assert kinds("sql", query="DELETE FROM users;") == ["a DELETE with no WHERE"]
    assert kinds("bash", command="mkfs.ext4 /dev/sdb1") and kinds("bash", command="dd if=x of=/dev/sda")
    assert kinds("db_tool", query="DROP TABLE users") == ["a table, database or schema drop"]
    for harmless in ("rm -rf ./build", "git push --force-with-lease", 'grep -rn "DROP TABLE" .', "dd of=/dev/null"):
        assert kinds("bash", command=harmless) == [], harmless
    assert kinds("sql", query="DELETE FROM users WHERE id = 3") == []
    assert kinds("write_file", path="m.sql", content="DROP TABLE old;") == []
