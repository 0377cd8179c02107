"""The roster: agent definitions loaded from markdown or built in Python, and every problem they can have."""

from __future__ import annotations

import string
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from agentwatch.config import SessionDefaults
from agentwatch.errors import Conflict, InvalidArgument, NotFound
from agentwatch.runtime.roster import (
    AgentDefinition,
    DefinitionProblem,
    RoleLimits,
    RoleSessions,
    Roster,
    check_agents,
    load_roster,
)
from agentwatch.runtime.toolservers import ToolServer

AGENTS = Path("agents")
TOOLS = ["read_file", "write_file", "run_tests", "agent_task", "agent_await"]

WriteAgent = Callable[[str, str], Path]


@pytest.fixture
def write_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> WriteAgent:
    """Write `agents/<file>` under a fresh project root (the working directory, so paths read `agents/x.md`)."""
    monkeypatch.chdir(tmp_path)
    AGENTS.mkdir()

    def write(file_name: str, text: str) -> Path:
        path = AGENTS / file_name
        path.write_text(text, encoding="utf-8")
        return path

    return write


def messages(roster: Roster) -> list[str]:
    return [str(problem) for problem in roster.problems]


CODER = """\
---
name: coder
description: Writes and tests code
model: scripted:coder
tools: [read_file, write_file, agent_task]
grant: [spawn]
observer: loop-guard
observer_message: Watch for repeated failing test runs.
approval_tools: [write_file]
feature: builder
sessions:
  stuck_after_seconds: 900
---
You are a careful coder.

Run the tests before you say you are done.
"""

LOOP_GUARD = """\
---
kind: rule
description: Flags the same failing tool call three times in a row
---
"""


def test_a_definition_file_loads_every_field(write_agent: WriteAgent) -> None:
    path = write_agent("coder.md", CODER)
    write_agent("loop-guard.md", LOOP_GUARD)

    roster = load_roster(AGENTS, known_tools=TOOLS)

    assert roster.problems == []
    assert roster.names() == ["coder", "loop-guard"]
    coder = roster.get("coder")
    assert coder == AgentDefinition(
        name="coder",
        description="Writes and tests code",
        model="scripted:coder",
        instructions="You are a careful coder.\n\nRun the tests before you say you are done.",
        tools=("read_file", "write_file", "agent_task"),
        grant=("spawn",),
        observer="loop-guard",
        observer_message="Watch for repeated failing test runs.",
        approval_tools=("write_file",),
        feature="builder",
        sessions=RoleSessions(stuck_after_seconds=900),
    )
    assert coder.source_path == path
    assert roster.get("loop-guard") == AgentDefinition(
        name="loop-guard", kind="rule", description="Flags the same failing tool call three times in a row"
    )
    assert roster.observer_of("coder") == roster.get("loop-guard")
    assert roster.observer_of("loop-guard") is None


def test_the_name_defaults_to_the_file_stem(write_agent: WriteAgent) -> None:
    write_agent("reviewer.md", "---\nmodel: openai:gpt-4o\n---\nReview.\n")
    write_agent("blank-name.md", "---\nname: ''\nmodel: openai:gpt-4o\n---\n")

    roster = load_roster(AGENTS)

    assert roster.names() == ["blank-name", "reviewer"]
    assert roster.get("reviewer").instructions == "Review."


def test_front_matter_sessions_override_the_defaults_field_by_field(write_agent: WriteAgent) -> None:
    write_agent("coder.md", CODER)
    write_agent("chat.md", "---\nmodel: a:b\nsessions: {continue_after_restart: 0}\n---\n")
    write_agent("plain.md", "---\nmodel: a:b\n---\n")
    project = SessionDefaults(stuck_after_seconds=300, continue_after_restart=5)

    roster = load_roster(AGENTS)

    assert roster.get("coder").resolved_sessions(project) == SessionDefaults(
        stuck_after_seconds=900, continue_after_restart=5
    )
    assert roster.get("chat").resolved_sessions(project) == SessionDefaults(
        stuck_after_seconds=300, continue_after_restart=0
    )
    assert roster.get("plain").resolved_sessions(project) == project
    assert roster.get("plain").resolved_sessions(SessionDefaults()) == SessionDefaults(
        stuck_after_seconds=600, continue_after_restart=3
    )


def test_blank_observer_fields_mean_none(write_agent: WriteAgent) -> None:
    write_agent("a.md", "---\nmodel: a:b\nobserver: ''\nobserver_message: '   '\nfeature:\ntools:\n---\n")
    write_agent("b.md", "---\nmodel: a:b\nobserver:\nobserver_message:\nsessions:\n---\n")

    roster = load_roster(AGENTS)

    assert roster.problems == []
    assert roster.get("a") == AgentDefinition(name="a", model="a:b")
    assert roster.get("b") == AgentDefinition(name="b", model="a:b")
    assert roster.observer_of("a") is None


def test_unknown_keys_name_the_nearest_valid_key(write_agent: WriteAgent) -> None:
    write_agent(
        "coder.md",
        "---\nmodel: a:b\nobserverMesage: hi\nmodle: x\nflavour: sweet\n"
        "sessions: {stuckAfterSecs: 5}\ninstructions: be nice\n---\n",
    )

    roster = load_roster(AGENTS)

    keys = ", ".join(key for key in AgentDefinition.model_fields if key not in ("instructions", "source_path"))
    assert "coder" not in roster
    assert messages(roster) == [
        "agents/coder.md: instructions: is not a front-matter key; it is the body after the front matter",
        "agents/coder.md: sessions.stuckAfterSecs: unknown key (did you mean 'stuck_after_seconds'?)",
        "agents/coder.md: observerMesage: unknown key (did you mean 'observer_message'?)",
        "agents/coder.md: modle: unknown key (did you mean 'model'?)",
        f"agents/coder.md: flavour: unknown key; the keys are {keys}",
    ]


def test_wrong_types_name_the_field_and_the_value(write_agent: WriteAgent) -> None:
    write_agent(
        "t.md",
        "---\nmodel: a:b\ntools: {read_file: 1}\napproval_tools: [1]\ndescription: [x]\n"
        "sessions: {stuck_after_seconds: -1, continue_after_restart: true}\nkind: robot\n---\n",
    )
    write_agent("s.md", "---\nmodel: a:b\nsessions: 5\n---\n")

    roster = load_roster(AGENTS)

    assert len(roster) == 0
    assert messages(roster) == [
        "agents/s.md: sessions: should be keys and values, like {stuck_after_seconds: 900} (got 5)",
        "agents/t.md: kind: should be 'llm' or 'rule' (got 'robot')",
        "agents/t.md: description: should be a valid string (got ['x'])",
        "agents/t.md: tools: should be a list, like [a, b] (got {'read_file': 1})",
        "agents/t.md: sessions.stuck_after_seconds: should be greater than 0 (got -1)",
        "agents/t.md: sessions.continue_after_restart: should be a valid integer (got True)",
        "agents/t.md: approval_tools[0]: should be a valid string (got 1)",
    ]


def test_problems_in_limits_and_tool_servers_name_their_own_keys_as_the_file_spells_them(
    write_agent: WriteAgent,
) -> None:
    """Once: they were read as the definition's own keys (`limits.tokns` suggested `tools`, and listed the
    definition's keys), named in snake_case whatever the file wrote, and shown the sessions' example."""
    write_agent(
        "l.md",
        "---\nmodel: a:b\nlimits: {requests: '10', costUsd: -1, agentCostUsd: true, tokns: 5}\n"
        "mcp_servers: [{name: x, url: 'https://a.example', flavour: 1}, 5]\n---\n",
    )
    write_agent("n.md", "---\nmodel: a:b\nlimits: 5\n---\n")
    write_agent("r.md", "---\nmodel: a:b\nlimits: {agentCostUsd: 1, agent_cost_usd: 2}\n---\n")
    write_agent("z.md", "---\nmodel: a:b\nlimits:\n---\n")

    roster = load_roster(AGENTS)

    keys = ", ".join(ToolServer.model_fields)
    assert messages(roster) == [
        "agents/l.md: limits.requests: should be a valid integer (got '10')",
        "agents/l.md: limits.costUsd: should be greater than 0 (got -1)",
        "agents/l.md: limits.agentCostUsd: should be a valid number (got True)",
        "agents/l.md: limits.tokns: unknown key (did you mean 'tokens'?)",
        f"agents/l.md: mcp_servers[0].flavour: unknown key; the keys are {keys}",
        'agents/l.md: mcp_servers[1]: should be keys and values, like {name: tracker, url: "https://mcp.example.com/mcp"}'
        " (got 5)",
        "agents/n.md: limits: should be keys and values, like {tokens: 200000, cost_usd: 2.0} (got 5)",
        "agents/r.md: limits: 'agent_cost_usd' repeats 'agentCostUsd', spelled another way; keep one",
    ]
    assert roster.get("z").limits == RoleLimits()  # (no limits but the default, as an empty `sessions:`)


def test_invalid_yaml_names_the_line_of_the_file(write_agent: WriteAgent) -> None:
    write_agent("y.md", "---\nmodel: a:b\nfoo: 1\n  bar: 2\n---\nBody.\n")

    roster = load_roster(AGENTS)

    assert messages(roster) == [
        "agents/y.md: invalid YAML at line 4: mapping values are not allowed here; fix the front matter"
    ]
    assert roster.errors == [
        DefinitionProblem(
            Path("agents/y.md"),
            None,
            "invalid YAML at line 4: mapping values are not allowed here; fix the front matter",
        )
    ]


def test_front_matter_must_be_present_closed_and_a_mapping(write_agent: WriteAgent) -> None:
    write_agent("a-none.md", "You are a coder.\n")
    write_agent("b-open.md", "---\nmodel: a:b\nYou are a coder.\n")
    write_agent("c-list.md", "---\n- model\n---\n")
    write_agent("d-empty.md", "")

    assert messages(load_roster(AGENTS)) == [
        "agents/a-none.md: missing front matter; start the file with a '---' line, the YAML keys, then another '---'",
        "agents/b-open.md: front matter is not closed; add a '---' line after the YAML keys",
        "agents/c-list.md: front matter must be YAML keys and values, not a list",
        "agents/d-empty.md: missing front matter; start the file with a '---' line, the YAML keys, then another '---'",
    ]


def test_an_llm_agent_needs_a_model_ref(write_agent: WriteAgent) -> None:
    write_agent("a.md", "---\ndescription: no model\n---\n")
    write_agent("b.md", "---\nmodel: gpt-4o\n---\n")
    write_agent("c.md", "---\nmodel: '  '\n---\n")

    assert messages(load_roster(AGENTS)) == [
        "agents/a.md: model: missing; name the model this agent runs on, e.g. model: openai:gpt-4o",
        "agents/b.md: model: 'gpt-4o' is not a model ref; write it as <provider>:<model>, e.g. 'openai:gpt-4o', or "
        'use a model alias (haiku, opus, sonnet; add one as gpt-4o = "<provider>:<model>" to [models] aliases in '
        "agentwatch.toml)",
        "agents/c.md: model: missing; name the model this agent runs on, e.g. model: openai:gpt-4o",
    ]


@pytest.mark.parametrize(
    "ref", ["openai:gpt-4o", "openai-chat:llama3", "anthropic:claude-sonnet-4-5", "scripted:coder", "ollama:qwen2:7b"]
)
def test_model_refs_of_every_provider_are_accepted(ref: str) -> None:
    assert AgentDefinition(name="a", model=ref).model == ref


def test_unknown_tools_name_the_nearest_known_tool(write_agent: WriteAgent) -> None:
    write_agent("coder.md", "---\nmodel: a:b\ntools: [raed_file, write_file, zzz]\napproval_tools: [rm_rf]\n---\n")

    roster = load_roster(AGENTS, known_tools=TOOLS)

    assert "coder" not in roster
    assert messages(roster) == [
        "agents/coder.md: tools: unknown tool 'raed_file' (did you mean 'read_file'?)",
        "agents/coder.md: tools: unknown tool 'zzz'; register a tool of that name or remove it from tools",
        "agents/coder.md: approval_tools: unknown tool 'rm_rf'; register a tool of that name or remove it from "
        "approval_tools",
        "agents/coder.md: warning: approval_tools: 'rm_rf' is not in tools, so the agent cannot call it and nothing "
        "waits for approval; add it to tools or remove it here",
    ]


def test_tools_are_not_checked_without_known_tools(write_agent: WriteAgent) -> None:
    write_agent("coder.md", "---\nmodel: a:b\ntools: [raed_file]\n---\n")

    assert load_roster(AGENTS).get("coder").tools == ("raed_file",)


def test_unknown_tools_are_reported_with_the_other_errors_of_a_file(write_agent: WriteAgent) -> None:
    write_agent("coder.md", "---\nmodle: a:b\ntools: [raed_file]\n---\n")

    assert messages(load_roster(AGENTS, known_tools=TOOLS)) == [
        "agents/coder.md: model: missing; name the model this agent runs on, e.g. model: openai:gpt-4o",
        "agents/coder.md: modle: unknown key (did you mean 'model'?)",
        "agents/coder.md: tools: unknown tool 'raed_file' (did you mean 'read_file'?)",
    ]


def test_a_grant_names_known_capabilities(write_agent: WriteAgent) -> None:
    write_agent("boss.md", "---\nmodel: a:b\ngrant: [spwan]\n---\n")

    assert messages(load_roster(AGENTS)) == [
        "agents/boss.md: grant: unknown capability 'spwan' (did you mean 'spawn'?); the capabilities are 'spawn'"
    ]


def test_a_spawn_tool_without_the_spawn_grant_is_a_warning(write_agent: WriteAgent) -> None:
    write_agent("coder.md", "---\nmodel: a:b\ntools: [read_file, agent_task]\n---\n")

    roster = load_roster(AGENTS, known_tools=TOOLS)

    assert "coder" in roster
    assert messages(roster) == [
        "agents/coder.md: warning: tools: 'agent_task' needs the 'spawn' capability; add spawn to grant or it is "
        "refused"
    ]
    assert roster.get("coder").allowed_tools() == frozenset()


def test_a_name_defined_twice_keeps_the_first_file(write_agent: WriteAgent) -> None:
    write_agent("a.md", "---\nname: coder\nmodel: a:first\n---\n")
    write_agent("b.md", "---\nname: coder\nmodel: a:second\n---\n")

    roster = load_roster(AGENTS)

    assert roster.get("coder").model == "a:first"
    assert messages(roster) == ["agents/b.md: name: 'coder' is already defined by 'agents/a.md'; rename one of them"]


def test_names_must_be_lowercase_slugs(write_agent: WriteAgent) -> None:
    write_agent("My Agent.md", "---\nmodel: a:b\n---\n")
    write_agent("ok.md", "---\nname: Code Reviewer\nmodel: a:b\n---\n")
    write_agent("ses_helper.md", "---\nmodel: a:b\n---\n")  # (its agents' names, ses_helper-..., read as ids)

    assert messages(load_roster(AGENTS)) == [
        "agents/My Agent.md: name: 'My Agent' is not a valid agent type; use lowercase letters, digits, '-' and '_' "
        "(e.g. 'my-agent')",
        "agents/ok.md: name: 'Code Reviewer' is not a valid agent type; use lowercase letters, digits, '-' and '_' "
        "(e.g. 'code-reviewer')",
        "agents/ses_helper.md: name: 'ses_helper' is not a valid agent type: ses_ starts an agent's id; rename it",
    ]


def test_an_observer_missing_from_the_roster_is_a_warning_and_the_agent_runs_unobserved(
    write_agent: WriteAgent,
) -> None:
    write_agent("coder.md", "---\nmodel: a:b\nobserver: loop-gaurd\n---\n")
    write_agent("loop-guard.md", LOOP_GUARD)
    write_agent("writer.md", "---\nmodel: a:b\nobserver: critic\n---\n")

    roster = load_roster(AGENTS)

    assert roster.names() == ["coder", "loop-guard", "writer"]
    assert roster.errors == []
    assert messages(roster) == [
        "agents/coder.md: warning: observer: no agent type 'loop-gaurd' in the roster (did you mean 'loop-guard'?); "
        "'coder' runs unobserved until it is defined",
        "agents/writer.md: warning: observer: no agent type 'critic' in the roster; 'writer' runs unobserved until "
        "it is defined",
    ]
    assert roster.observer_of("coder") is None


def test_an_observer_left_out_for_errors_says_so(write_agent: WriteAgent) -> None:
    write_agent("coder.md", "---\nmodel: a:b\nobserver: critic\n---\n")
    write_agent("critic.md", "---\nmodel: nonsense\n---\n")

    roster = load_roster(AGENTS)

    assert messages(roster) == [
        "agents/coder.md: warning: observer: 'critic' was left out because its definition has errors; 'coder' runs "
        "unobserved until they are fixed",
        "agents/critic.md: model: 'nonsense' is not a model ref; write it as <provider>:<model>, e.g. "
        "'openai:gpt-4o', or use a model alias (haiku, opus, sonnet; add one as nonsense = \"<provider>:<model>\" to "
        "[models] aliases in agentwatch.toml)",
    ]
    with pytest.raises(NotFound) as caught:
        roster.get("critic")
    assert caught.value.message == (
        "agent type 'critic' was left out because 'agents/critic.md' has errors; `agentwatch agents check` lists them"
    )


def test_an_agent_cannot_observe_itself(write_agent: WriteAgent) -> None:
    write_agent("coder.md", "---\nmodel: a:b\nobserver: coder\n---\n")

    roster = load_roster(AGENTS)

    assert "coder" not in roster
    assert messages(roster) == [
        "agents/coder.md: observer: 'coder' cannot observe itself; name another agent type or remove observer"
    ]


def test_observers_are_never_chained_and_the_observed_agent_is_observed_all_the_same(
    write_agent: WriteAgent,
) -> None:
    write_agent("coder.md", "---\nmodel: a:b\nobserver: critic\n---\n")
    write_agent("critic.md", "---\nmodel: a:b\nobserver: loop-guard\n---\n")
    write_agent("loop-guard.md", LOOP_GUARD)

    roster = load_roster(AGENTS)

    assert messages(roster) == [
        "agents/coder.md: warning: observer: 'critic' has an observer of its own ('loop-guard'), which a 'critic' "
        "session observing 'coder' ignores (observers are not chained): 'coder' is observed by 'critic', and "
        "'loop-guard' watches only 'critic' sessions that observe nothing"
    ]
    assert roster.observer_of("coder") == roster.get("critic")
    assert roster.observer_of("critic") == roster.get("loop-guard")  # a critic session that observes nothing
    assert roster.observer_of("critic", is_observer=True) is None  # a critic session observing coder
    assert roster.observer_of("coder", is_observer=True) is None


def test_an_observer_message_without_an_observer_is_a_warning(write_agent: WriteAgent) -> None:
    write_agent("coder.md", "---\nmodel: a:b\nobserver_message: Watch the tests.\n---\n")

    roster = load_roster(AGENTS)

    assert roster.warnings == [
        DefinitionProblem(
            Path("agents/coder.md"),
            "observer_message",
            "is set but no observer is declared; add observer or remove it",
            "warning",
            "coder",
        )
    ]
    assert "coder" in roster


def test_a_rule_observer_takes_no_model_tools_or_observer(write_agent: WriteAgent) -> None:
    write_agent("r.md", "---\nkind: rule\nmodel: a:b\ntools: [read_file]\nobserver: other\n---\n")

    rule = "a rule observer runs a registered Python function and takes no {}; remove it or set kind: llm"
    assert messages(load_roster(AGENTS)) == [
        f"agents/r.md: model: {rule.format('model')}",
        f"agents/r.md: tools: {rule.format('tools')}",
        f"agents/r.md: observer: {rule.format('observer')}",
    ]


def test_one_bad_file_never_stops_the_others(write_agent: WriteAgent) -> None:
    write_agent("a-good.md", "---\nmodel: a:b\n---\nFirst.\n")
    write_agent("b-bad-yaml.md", "---\nmodel: [a\n---\n")
    write_agent("c-bad-bytes.md", "")
    (AGENTS / "c-bad-bytes.md").write_bytes(b"---\nmodel: \xff\n---\n")
    write_agent("d-good.md", "---\nmodel: a:b\n---\nLast.\n")
    write_agent(".e-swap.md", "not a definition")
    write_agent("notes.txt", "not a definition either")

    roster = load_roster(AGENTS)

    assert roster.names() == ["a-good", "d-good"]
    assert [(problem.path, problem.field) for problem in roster.errors] == [
        (Path("agents/b-bad-yaml.md"), None),
        (Path("agents/c-bad-bytes.md"), None),
    ]
    assert str(roster.errors[1]) == (
        "agents/c-bad-bytes.md: is not UTF-8 text (invalid start byte at byte 11); save it as UTF-8"
    )


def test_a_missing_directory_is_an_empty_roster(tmp_path: Path) -> None:
    roster = load_roster(tmp_path / "nowhere")

    assert (len(roster), roster.problems) == (0, [])


def test_a_missing_directory_is_named_with_the_settings_every_engine_reads() -> None:
    # `serve`, `mcp` and `Engine.open` take no --agents-dir: the way to name the directory that they all read
    # comes first, the flag of the two commands that have it after.
    roster = load_roster(Path("nowhere"))

    with pytest.raises(NotFound) as caught:
        roster.get("planner")

    assert caught.value.message == (
        "no agent type 'planner'; the roster is empty: add planner.md to the agents directory (the agents "
        "directory 'nowhere' does not exist: create it, or name yours with agents_dir in agentwatch.toml or "
        "AGENTWATCH_AGENTS_DIR; `run` and `create` also take --agents-dir)"
    )


def test_get_lists_the_known_names_nearest_first(write_agent: WriteAgent) -> None:
    for name in ("coder", "reviewer", "coordinator"):
        write_agent(f"{name}.md", "---\nmodel: a:b\n---\n")
    roster = load_roster(AGENTS)

    with pytest.raises(NotFound) as caught:
        roster.get("codr")

    assert caught.value.message == "no agent type 'codr'; the roster has 'coder', 'coordinator', 'reviewer'"
    assert caught.value.details == {"known": ["coder", "coordinator", "reviewer"]}
    with pytest.raises(NotFound, match=r"^no agent type 'x'; the roster is empty: add x\.md to the agents directory$"):
        Roster().get("x")


def test_a_roster_iterates_its_definitions_in_name_order() -> None:
    b, a = AgentDefinition(name="b", model="a:b"), AgentDefinition(name="a", model="a:b")

    roster = Roster([b, a])

    assert (list(roster), roster.names(), "a" in roster, "c" in roster, len(roster)) == (
        [a, b],
        ["a", "b"],
        True,
        False,
        2,
    )
    assert dict(roster.definitions) == {"a": a, "b": b}


def test_python_built_definitions_are_checked_like_files(write_agent: WriteAgent) -> None:
    write_agent("coder.md", "---\nmodel: a:b\nobserver: guard\n---\n")
    guard = AgentDefinition(name="guard", kind="rule")
    clash = AgentDefinition(name="coder", model="a:c")
    typo = AgentDefinition(name="typo", model="a:b", tools=("raed_file",), observer="nobody")

    roster = load_roster(AGENTS, known_tools=TOOLS, extra=[guard, clash, typo])

    assert roster.names() == ["coder", "guard"]
    assert roster.observer_of("coder") is guard
    assert messages(roster) == [
        "agent 'coder': name: 'coder' is already defined by 'agents/coder.md'; rename one of them",
        "agent 'typo': tools: unknown tool 'raed_file' (did you mean 'read_file'?)",
        "agent 'typo': warning: observer: no agent type 'nobody' in the roster; 'typo' (left out for its errors) "
        "would run unobserved until it is defined",
    ]


def test_roster_add_raises_on_errors_and_keeps_warnings() -> None:
    roster = Roster(known_tools=TOOLS)
    roster.add(AgentDefinition(name="coder", model="a:b", observer="guard"))

    with pytest.raises(Conflict, match=r"^agent 'coder': name: 'coder' is already defined by a definition built in"):
        roster.add(AgentDefinition(name="coder", model="a:c"))
    with pytest.raises(InvalidArgument, match=r"^agent 'x': tools: unknown tool 'raed_file' \(did you mean"):
        roster.add(AgentDefinition(name="x", model="a:b", tools=("raed_file",)))
    assert messages(roster) == [
        "agent 'coder': warning: observer: no agent type 'guard' in the roster; 'coder' runs unobserved until it "
        "is defined"
    ]

    # The warning goes away once the observer is added: observers resolve against the roster as it is now.
    roster.add(AgentDefinition(name="guard", kind="rule"))

    assert (roster.names(), roster.problems) == (["coder", "guard"], [])
    assert roster.get("coder").model == "a:b"


def test_python_built_definitions_fail_fast_on_bad_fields() -> None:
    with pytest.raises(ValidationError, match="missing; name the model this agent runs on"):
        AgentDefinition(name="coder")
    with pytest.raises(ValidationError, match="'coder' cannot observe itself"):
        AgentDefinition(name="coder", model="a:b", observer="coder")
    with pytest.raises(ValidationError, match="extra_forbidden"):
        AgentDefinition.model_validate({"name": "coder", "model": "a:b", "flavour": "x"})


def test_definitions_are_equal_whatever_file_they_came_from() -> None:
    here = AgentDefinition(name="a", model="a:b", source_path=Path("agents/a.md"))
    there = AgentDefinition(name="a", model="a:b")

    assert (here == there, hash(here) == hash(there), here == here.model_copy(update={"model": "a:c"})) == (
        True,
        True,
        False,
    )
    assert "source_path" not in here.model_dump()


def test_check_agents_lists_every_problem(write_agent: WriteAgent) -> None:
    write_agent("coder.md", "---\nmodel: a:b\ntools: [raed_file]\nobserver: critic\n---\n")
    write_agent("writer.md", "---\nmodel: a:b\nobserver: critic\n---\n")

    problems = check_agents(AGENTS, known_tools=TOOLS)

    assert [str(problem) for problem in problems] == [
        "agents/coder.md: tools: unknown tool 'raed_file' (did you mean 'read_file'?)",
        # (a file left out for an error has its observer checked all the same: one pass lists everything)
        "agents/coder.md: warning: observer: no agent type 'critic' in the roster; 'coder' (left out for its "
        "errors) would run unobserved until it is defined",
        "agents/writer.md: warning: observer: no agent type 'critic' in the roster; 'writer' runs unobserved until "
        "it is defined",
    ]
    assert [problem.severity for problem in problems] == ["error", "warning", "warning"]


def test_check_agents_warns_about_a_missing_directory(tmp_path: Path) -> None:
    assert check_agents(tmp_path / "agents") == [
        DefinitionProblem(
            tmp_path / "agents", None, "no such directory; create it and add one <name>.md file per agent", "warning"
        )
    ]


_SLUGS = st.from_regex(r"[a-z0-9][a-z0-9_-]{0,15}", fullmatch=True)
_TEXT = st.text(st.characters(codec="utf-8", categories=("L", "N", "P", "S", "Zs")), max_size=40)
_TOOLS = st.lists(st.text(string.ascii_letters + string.digits + "_", min_size=1, max_size=12), max_size=4).map(tuple)


@st.composite
def definitions(draw: st.DrawFn) -> AgentDefinition:
    """Any valid definition, with text that YAML must quote (`yes`, `1.5`, `: `, `#`) among what is drawn."""
    kind = draw(st.sampled_from(["llm", "rule"]))
    name = draw(_SLUGS)
    is_llm = kind == "llm"
    observer = draw(st.none() | _SLUGS.filter(lambda other: other != name)) if is_llm else None
    lines = st.lists(_TEXT | st.sampled_from(["---", "", "  indented", "# heading", "yes"]), max_size=5)
    return AgentDefinition(
        name=name,
        kind=kind,
        description=draw(_TEXT | st.sampled_from(["yes", "1.5", "a: b", "#x", "null"])),
        model=draw(st.sampled_from(["openai:gpt-4o", "ollama:qwen2:7b", "scripted:x"])) if is_llm else None,
        instructions="\n".join(draw(lines)),
        tools=draw(_TOOLS) if is_llm else (),
        observer=observer,
        observer_message=draw(st.none() | _TEXT) if observer else None,
        sessions=RoleSessions(
            stuck_after_seconds=draw(st.none() | st.floats(min_value=0.001, max_value=1e9)),
            continue_after_restart=draw(st.none() | st.integers(min_value=0, max_value=100)),
        ),
        approval_tools=draw(_TOOLS) if is_llm else (),
        grant=draw(st.sampled_from([(), ("spawn",)])) if is_llm else (),
        feature=draw(st.none() | _SLUGS),
    )


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(definition=definitions())
def test_a_definition_rendered_to_markdown_loads_back_equal(tmp_path: Path, definition: AgentDefinition) -> None:
    agents = tmp_path / "roundtrip"
    agents.mkdir(exist_ok=True)
    for old in agents.iterdir():
        old.unlink()
    (agents / "any-stem.md").write_text(definition.to_markdown(), encoding="utf-8")

    roster = load_roster(agents)

    assert roster.errors == []
    assert list(roster) == [definition]
