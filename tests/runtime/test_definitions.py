"""Definitions in other spellings: the seeds' camelCase keys, Claude Code's subagent files, model aliases."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from agentwatch.config import load_config
from agentwatch.errors import InvalidArgument
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import ScriptedModel
from agentwatch.runtime.models.refs import MODEL_ALIASES, ModelResolver
from agentwatch.runtime.roster import AgentDefinition, RoleSessions, load_roster

SONNET = "anthropic:claude-sonnet-4-5"

CLAUDE_CODE_FILE = """---
name: code-reviewer
description: Reviews code for quality and security
tools: Read, Grep, Glob, ask_user
model: sonnet
color: blue
---
You are a senior code reviewer.
"""


def _project(tmp_path: Path, files: dict[str, str], toml: str = "") -> Path:
    agents = tmp_path / "agents"
    agents.mkdir()
    for name, text in files.items():
        (agents / name).write_text(text, encoding="utf-8")
    if toml:
        (tmp_path / "agentwatch.toml").write_text(toml, encoding="utf-8")
    return agents


def _messages(problems: object) -> list[str]:
    return [str(problem) for problem in problems]  # type: ignore[attr-defined]


def test_the_seeds_camel_case_keys_name_our_fields(tmp_path: Path) -> None:
    agents = _project(
        tmp_path,
        {
            "coder.md": "---\nmodel: openai:gpt-4o\ntools: [ask_user]\nobserver: loop-guard\n"
            "observerMessage: Watch the tests.\napprovalTools: [ask_user]\n"
            "sessions: { stuckAfterSeconds: 900, continueAfterRestart: 1 }\n---\nCode.\n"
        },
    )

    roster = load_roster(agents, known_tools=["ask_user"])

    assert _messages(roster.problems) == [
        f"{agents / 'coder.md'}: warning: observer: no agent type 'loop-guard' in the roster; 'coder' runs "
        "unobserved until it is defined"
    ]
    assert roster.get("coder") == AgentDefinition(
        name="coder",
        model="openai:gpt-4o",
        tools=("ask_user",),
        observer="loop-guard",
        observer_message="Watch the tests.",
        approval_tools=("ask_user",),
        sessions=RoleSessions(stuck_after_seconds=900, continue_after_restart=1),
        instructions="Code.",
    )


def test_a_key_given_in_two_spellings_is_an_error_naming_both(tmp_path: Path) -> None:
    agents = _project(
        tmp_path,
        {"coder.md": "---\nmodel: a:b\nobserver_message: one\nobserverMessage: two\n---\n"},
    )

    roster = load_roster(agents)

    assert "coder" not in roster
    assert _messages(roster.problems) == [
        f"{agents / 'coder.md'}: observerMessage: repeats 'observer_message', spelled another way; keep one"
    ]
    with pytest.raises(ValidationError, match="'stuckAfterSeconds' repeats 'stuck_after_seconds'"):
        RoleSessions.model_validate({"stuck_after_seconds": 1, "stuckAfterSeconds": 2})


def test_a_camel_case_key_with_a_bad_value_is_named_as_the_file_spells_it(tmp_path: Path) -> None:
    agents = _project(tmp_path, {"coder.md": "---\nmodel: a:b\nsessions: {stuckAfterSeconds: -1}\n---\n"})

    assert _messages(load_roster(agents).problems) == [
        f"{agents / 'coder.md'}: sessions.stuckAfterSeconds: should be greater than 0 (got -1)"
    ]


def test_a_claude_code_subagent_file_loads_with_warnings_that_say_what_is_left_out(tmp_path: Path) -> None:
    agents = _project(tmp_path, {"code-reviewer.md": CLAUDE_CODE_FILE})
    path = agents / "code-reviewer.md"

    roster = load_roster(agents, known_tools=["ask_user", "agent_task"])

    assert _messages(roster.problems) == [
        f"{path}: warning: color: is a presentation key agentwatch does not use; ignored",
        f"{path}: warning: tools: 'Glob', 'Grep', 'Read' are Claude Code tools agentwatch does not have: the agent "
        "runs without them and nothing is granted in their place; register a Python tool that does the job "
        "(Engine.open(tools=[...])) and list its name",
    ]
    definition = roster.get("code-reviewer")
    assert (definition.model, definition.tools, definition.description) == (
        SONNET,
        ("Read", "Grep", "Glob", "ask_user"),
        "Reviews code for quality and security",
    )


def test_claude_codes_task_tool_points_at_agent_task(tmp_path: Path) -> None:
    agents = _project(tmp_path, {"lead.md": "---\nmodel: haiku\ntools: Task, Bash\n---\n"})

    assert _messages(load_roster(agents, known_tools=["agent_task"]).problems) == [
        f"{agents / 'lead.md'}: warning: tools: 'Bash', 'Task' are Claude Code tools agentwatch does not have: the "
        "agent runs without them and nothing is granted in their place; register a Python tool that does the job "
        "(Engine.open(tools=[...])) and list its name (for 'Task', agent_task (with grant: [spawn]) runs a sub-agent)"
    ]


def test_a_project_tool_named_like_a_claude_code_tool_is_used(tmp_path: Path) -> None:
    agents = _project(tmp_path, {"reader.md": "---\nmodel: haiku\ntools: Read\n---\n"})

    roster = load_roster(agents, known_tools=["Read"])

    assert roster.problems == []
    assert roster.get("reader").tools == ("Read",)


def test_unknown_keys_that_are_not_another_formats_stay_errors(tmp_path: Path) -> None:
    agents = _project(tmp_path, {"coder.md": "---\nmodel: sonnet\nobsever: loop-guard\n---\n"})

    roster = load_roster(agents)

    assert "coder" not in roster
    assert _messages(roster.problems) == [f"{agents / 'coder.md'}: obsever: unknown key (did you mean 'observer'?)"]


@pytest.mark.parametrize(("alias", "ref"), sorted(MODEL_ALIASES.items()))
def test_the_built_in_aliases_are_claude_codes_model_names(tmp_path: Path, alias: str, ref: str) -> None:
    agents = _project(tmp_path, {"a.md": f"---\nmodel: {alias}\n---\n"})

    assert load_roster(agents).get("a").model == ref
    assert ref.startswith("anthropic:claude-")


def test_project_aliases_extend_and_override_the_built_in_ones(tmp_path: Path) -> None:
    toml = '[models]\naliases = { fast = "local:llama3.1", sonnet = "openai:gpt-4o" }\n'
    toml += '[providers.local]\nbase_url = "http://127.0.0.1:9/v1"\n'
    agents = _project(
        tmp_path,
        {"a.md": "---\nmodel: [fast, sonnet, opus]\n---\n", "b.md": "---\nmodel: fast\n---\n"},
        toml,
    )
    resolver = ModelResolver.from_config(load_config(tmp_path, env={}))

    roster = load_roster(agents, models=resolver)

    assert roster.problems == []
    assert roster.get("a").model == "local:llama3.1, openai:gpt-4o, anthropic:claude-opus-4-5"
    assert roster.get("b").model == "local:llama3.1"
    assert resolver.expand("fast") == "local:llama3.1"


def test_an_unknown_alias_and_an_unmapped_inherit_say_what_to_add(tmp_path: Path) -> None:
    agents = _project(tmp_path, {"a.md": "---\nmodel: gpt4\n---\n", "b.md": "---\nmodel: inherit\n---\n"})

    assert _messages(load_roster(agents).problems) == [
        f"{agents / 'a.md'}: model: 'gpt4' is not a model ref; write it as <provider>:<model>, e.g. 'openai:gpt-4o', "
        'or use a model alias (haiku, opus, sonnet; add one as gpt4 = "<provider>:<model>" to [models] aliases in '
        "agentwatch.toml)",
        f"{agents / 'b.md'}: model: 'inherit' (Claude Code's \"the main conversation's model\") means nothing here "
        'until agentwatch.toml says which model it is: add inherit = "<provider>:<model>" to [models] aliases',
    ]


def test_inherit_is_the_model_the_project_names_and_the_model_of_a_file_without_one(tmp_path: Path) -> None:
    agents = _project(
        tmp_path,
        {"a.md": "---\nmodel: inherit\n---\n", "b.md": "---\ndescription: no model\n---\n"},
        '[models]\naliases = {inherit = "openai:o3"}\n',
    )

    roster = load_roster(agents, models=ModelResolver.from_config(load_config(tmp_path, env={})))

    assert (roster.get("a").model, roster.get("b").model) == ("openai:o3", "openai:o3")
    assert roster.problems == []


@pytest.mark.parametrize(
    ("aliases", "message"),
    [
        ('{ fast = "llama" }', "alias 'fast' maps to 'llama', which is not one model ref"),
        ('{ fast = "a:b, c:d" }', "alias 'fast' maps to 'a:b, c:d', which is not one model ref"),
        ('{ "a:b" = "openai:gpt-4o" }', "alias 'a:b' is not a short name"),
    ],
)
def test_a_bad_alias_in_the_config_is_refused_with_what_to_write(tmp_path: Path, aliases: str, message: str) -> None:
    (tmp_path / "agentwatch.toml").write_text(f"[models]\naliases = {aliases}\n")

    with pytest.raises(InvalidArgument) as caught:
        load_config(tmp_path, env={})

    assert f"models.aliases: {message}" in caught.value.message
    assert "Value error" not in caught.value.message


def test_a_resolver_maps_an_alias_when_a_model_is_resolved() -> None:
    stand_in = ScriptedModel.replying("hi")
    resolver = ModelResolver(aliases={"fast": "local:m"}, models={"local:m": stand_in}, env={})

    resolver.check("fast")  # an override written as an alias resolves as the roster's would
    assert (resolver.unresolved("fast"), resolver.unresolved("nope")) == (
        None,
        "'nope' is not a model ref; write it as <provider>:<model>, e.g. 'openai:gpt-4o', or use a model alias "
        '(fast, haiku, opus, sonnet; add one as nope = "<provider>:<model>" to [models] aliases in agentwatch.toml)',
    )
    with pytest.raises(InvalidArgument, match="'nope' is not a model ref"):
        resolver.check("nope")


def test_missing_variables_are_the_keys_a_chain_needs_and_lacks() -> None:
    resolver = ModelResolver(env={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})

    assert resolver.missing_variables("openai:gpt-4o, sonnet, scripted:x, nowhere:m") == ("ANTHROPIC_API_KEY",)
    assert ModelResolver(env={}).missing_variables("openai-chat:m") == ("OPENAI_API_KEY",)
    assert ModelResolver(env={"ANTHROPIC_API_KEY": "k"}).missing_variables("opus") == ()


async def test_engine_open_applies_the_projects_aliases_and_runs_the_claude_code_file(tmp_path: Path) -> None:
    _project(tmp_path, {"code-reviewer.md": CLAUDE_CODE_FILE.replace("model: sonnet", "model: fast")})
    (tmp_path / "agentwatch.toml").write_text('[models]\naliases = { fast = "openai-chat:fast-one" }\n')
    model = ScriptedModel.replying("Looks good.")
    store = f"sqlite:///{tmp_path / 'a.db'}"

    async with Engine.open(store, root=tmp_path, models={"openai-chat:fast-one": model}, extensions=[]) as engine:
        snapshot = await engine.task("code-reviewer", "Review a.py", timeout=30)

    assert (snapshot["status"], snapshot["lastAssistantText"]) == ("completed", "Looks good.")
    assert [request.tools for request in model.requests] == [("ask_user",)]  # Read, Grep, Glob: nothing granted


def test_a_tool_servers_tools_may_need_approval_and_claude_codes_spelling_lists_the_servers(tmp_path: Path) -> None:
    agents = _project(
        tmp_path,
        {
            "a.md": "---\nmodel: sonnet\nmcpServers:\n  - {name: files, command: python3}\n"
            "approval_tools: [files__write_file]\n---\n",
            "b.md": "---\nmodel: sonnet\napproval_tools: [other__write_file]\n---\n",
            "c.md": "---\nmodel: sonnet\nmcp_servers: [{name: files}]\n---\n",
        },
    )

    roster = load_roster(agents, known_tools=["ask_user"])

    assert [server.name for server in roster.get("a").mcp_servers] == ["files"]
    assert roster.names() == ["a"]
    *problems, shape = _messages(roster.problems)
    assert problems == [
        f"{agents / 'b.md'}: approval_tools: unknown tool 'other__write_file'; register a tool of that name or "
        "remove it from approval_tools",
        f"{agents / 'b.md'}: warning: approval_tools: 'other__write_file' is not in tools, so the agent cannot call "
        "it and nothing waits for approval; add it to tools or remove it here",
    ]
    assert shape.startswith(f"{agents / 'c.md'}: mcp_servers[0]: tool server 'files' needs")  # its shape, named


def test_a_problem_found_after_loading_names_the_key_as_the_file_spells_it(tmp_path: Path) -> None:
    agents = _project(tmp_path, {"coder.md": "---\nmodel: sonnet\ntools: [ask_user]\napprovalTools: [rm_rf]\n---\n"})

    assert _messages(load_roster(agents, known_tools=["ask_user"]).problems) == [
        f"{agents / 'coder.md'}: approvalTools: unknown tool 'rm_rf'; register a tool of that name or remove it from "
        "approval_tools",
        f"{agents / 'coder.md'}: warning: approvalTools: 'rm_rf' is not in tools, so the agent cannot call it and "
        "nothing waits for approval; add it to tools or remove it here",
    ]
