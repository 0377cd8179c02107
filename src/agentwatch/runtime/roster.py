"""The roster: the agent definitions (roles) a project declares, and the problems found while loading them.

A definition is a markdown file in the agents directory, YAML front matter between `---` lines and the
instructions (the system prompt) as the body:

```markdown
---
name: coder
description: Writes and tests code
model: scripted:coder
tools: [read_file, write_file, agent_task]
grant: [spawn]
observer: loop-guard
observer_message: Watch for repeated failing test runs.
sessions:
  stuck_after_seconds: 900
limits:
  tokens: 200000
  cost_usd: 2.0
---
You are a careful coder...
```

or an `AgentDefinition(...)` built in Python. `load_roster` reads every `*.md` file of the directory; one bad
file never stops the others. Each problem names its file and field: an **error** leaves that definition out of
the roster, a **warning** keeps it (an `observer` naming a type the roster lacks is a warning: the agent runs
unobserved).

Other spellings are read too: the seeds' camelCase keys (`observerMessage`, `approvalTools`,
`sessions: {stuckAfterSeconds, continueAfterRestart}`), and Claude Code's subagent files: `tools: Read, Grep`
(a comma-separated string is a list), `model: sonnet` (a model alias, mapped through `[models] aliases` of
`agentwatch.toml` over the built-in table, and written as the ref it stands for), and keys with no meaning here
(`color`, `permissionMode`, ...), which are a warning and ignored. Claude Code's own tool names (`Read`, `Bash`,
...) are a warning when the engine has no tool of that name: the agent runs without them, nothing is granted in
their place.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from agentwatch.config import SessionDefaults
from agentwatch.errors import Conflict, InvalidArgument, NotFound, did_you_mean
from agentwatch.runtime.models.refs import MODEL_ALIASES, not_a_model_ref, split_chain
from agentwatch.runtime.toolservers import SEPARATOR, ToolServer, servers_by_name

if TYPE_CHECKING:
    from agentwatch.runtime.models.refs import ModelResolver

__all__ = [
    "GRANTS",
    "AgentDefinition",
    "AgentKind",
    "DefinitionProblem",
    "RoleLimits",
    "RoleSessions",
    "Roster",
    "Severity",
    "capability_for",
    "check_agents",
    "load_roster",
]

AgentKind = Literal["llm", "rule"]
"""`llm`: a model runs the agent's turns. `rule`: an observer type implemented by a registered Python function."""

Severity = Literal["error", "warning"]
"""An `error` leaves the definition out of the roster; a `warning` keeps it."""

GRANTS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "spawn": frozenset(
            {
                "agent_task",
                "agent_create",
                "agent_enqueue",
                "agent_await",
                "agent_answer",
                "agent_escalate",
                "agent_stop",
                "agent_take_over",
                "agent_hand_back",
                "agent_delete",
                "hook_fire",
            }
        )
    }
)
"""Each capability a definition's `grant` can name, and the tools it allows."""


def capability_for(tool_name: str) -> str | None:
    """The capability a calling agent's role needs for `tool_name`; None for a grant-free tool."""
    return next((capability for capability, tools in GRANTS.items() if tool_name in tools), None)


_SLUG = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
# A model name may itself hold colons (`openai-chat:llama3:8b`), so only the provider part is constrained.
_MODEL_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*:\S+$")
_FENCE = "---"

CLAUDE_CODE_TOOLS: Mapping[str, str] = MappingProxyType(
    {
        **dict.fromkeys(
            [
                "Read", "Write", "Edit", "MultiEdit", "Glob", "Grep", "LS", "Bash", "BashOutput", "KillShell",
                "KillBash", "WebFetch", "WebSearch", "NotebookRead", "NotebookEdit", "TodoWrite", "Skill",
                "SlashCommand", "ExitPlanMode",
            ],
            "",
        ),
        "Task": "agent_task (with grant: [spawn]) runs a sub-agent",
        "Agent": "agent_task (with grant: [spawn]) runs a sub-agent",
    }
)  # fmt: skip
"""Claude Code's built-in tool names, each with the agentwatch tool that does its job ("" for none)."""

_IGNORED_KEYS: Mapping[str, str] = MappingProxyType(
    {
        "color": "a presentation key",
        "icon": "a presentation key",
        "emoji": "a presentation key",
        "permission_mode": "a Claude Code key (approval_tools names the calls that wait for a person)",
        "disallowed_tools": "a Claude Code key (an agent may call only the tools its tools list names)",
        "skills": "a Claude Code key",
        "hooks": "a Claude Code key (policies given to Engine.open decide each tool call)",
    }
)
"""Front-matter keys of other formats that mean nothing here (by their snake_case spelling): a warning each."""


def _snake(word: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", word).replace("-", "_").lower()


def _our_key(key: str, fields: Collection[str]) -> str:
    """The field `key` names: itself, or the field its camelCase (or kebab-case) spelling stands for."""
    if key in fields:
        return key
    snake = _snake(key)
    return snake if snake in fields else key


def _respelled(value: object, fields: Collection[str]) -> object:
    """Front matter (or a dict given in Python) with each key spelled as our field; ValueError for a key given
    twice in two spellings."""
    if not isinstance(value, dict):
        return value
    respelled: dict[object, object] = {}
    spelled: dict[object, object] = {}  # our key -> the key as given first
    for key, item in value.items():
        ours = _our_key(key, fields) if isinstance(key, str) else key
        if ours in respelled:
            raise ValueError(f"{key!r} repeats {spelled[ours]!r}, spelled another way; keep one")
        respelled[ours] = item
        spelled[ours] = key
    return respelled


class _RoleTable(BaseModel):
    """A table of a definition with settings of its own (`sessions`, `limits`), read in the seeds' spellings too."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _other_spellings(cls, value: object) -> object:
        return _respelled(value, cls.model_fields)


class RoleSessions(_RoleTable):
    """A role's own session settings; None leaves the project (or engine) default in force."""

    stuck_after_seconds: float | None = Field(default=None, gt=0, strict=True)
    """A running session of this role with no activity for longer than this is `stuck`."""
    continue_after_restart: int | None = Field(default=None, ge=0, strict=True)
    """How many times a turn cut off by a restart is continued before it ends `interrupted` (0 = never)."""


class RoleLimits(_RoleTable):
    """What one turn of a role may use before the engine stops it, and what one agent of the role may spend in
    all. A turn over a limit ends `failed` once the model response that crossed it is stored, before the tools it
    calls run (a final answer is kept: nothing more would follow it); an agent over its spend fails each new turn
    at its start. None: no limit."""

    requests: int = Field(default=50, ge=1, strict=True)
    """Model requests per turn."""
    tokens: int | None = Field(default=None, ge=1, strict=True)
    """Tokens per turn, input and output."""
    cost_usd: float | None = Field(default=None, gt=0, strict=True)
    """Spend per turn, in US dollars (counted where the model's price is known)."""
    agent_cost_usd: float | None = Field(default=None, gt=0, strict=True)
    """Spend of one agent over all its turns, in US dollars."""


_SECTIONS: Mapping[str, type[RoleSessions | RoleLimits]] = MappingProxyType(
    {"sessions": RoleSessions, "limits": RoleLimits}
)
"""The keys of a definition whose value is settings of their own (with their own other spellings)."""


class AgentDefinition(BaseModel):
    """A named agent type: the model it runs on, its instructions, tools, grant, observer and session settings.

    Two definitions are equal when everything but `source_path` is equal.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    """The agent type, a lowercase slug (`coder`, `loop-guard`); a file's stem when its front matter has none."""
    kind: AgentKind = "llm"
    """`rule` marks an observer type run by a registered Python function: it takes no model, tools or grant."""
    description: str = ""
    """One line saying what the agent is for, shown in listings."""
    model: str | None = Field(default=None, validate_default=True)
    """The model ref, `<provider>:<model>` (`openai:gpt-4o`, `anthropic:claude-sonnet-4-5`, `scripted:coder`, or
    a provider named in the project config), or a model alias (`sonnet`; see `[models] aliases`), which the roster
    replaces with its ref; required for `llm` agents. A list (`model: [openai:gpt-4o,
    anthropic:claude-sonnet-4-5]`) is an ordered fallback chain, kept as its refs joined by `, `: when a model
    still fails after its retries, the next one takes over (`model.reroute`)."""
    instructions: str = ""
    """The system prompt: the markdown body after the front matter."""
    tools: tuple[str, ...] = ()
    """Names of the tools the agent may call."""
    observer: str | None = None
    """The agent type auto-spawned to watch this agent's turns and report one-way; None for none."""
    observer_message: str | None = None
    """Extra guidance appended to each activity digest sent to the observer."""
    sessions: RoleSessions = RoleSessions()
    """Session settings that override the project's defaults for this role."""
    limits: RoleLimits = RoleLimits()
    """What a turn may use, and an agent may spend, before the engine stops it."""
    approval_tools: tuple[str, ...] = ()
    """Tools whose every call waits for a person's approval before it runs."""
    grant: tuple[str, ...] = ()
    """Capabilities beyond the grant-free tools (`spawn` allows `agent_task`, `agent_create`, ...)."""
    feature: str | None = None
    """The feature that ships this role, for grouping and filtering sessions."""
    mcp_servers: tuple[ToolServer, ...] = ()
    """MCP servers whose tools the agent may call, as `<server>__<tool>` (see `agentwatch.runtime.toolservers`)."""
    source_path: Path | None = Field(default=None, exclude=True)
    """The file the definition was loaded from; None when built in Python. Not part of equality."""

    @model_validator(mode="before")
    @classmethod
    def _other_spellings(cls, value: object) -> object:
        # The seeds and other tools write our keys in camelCase (`observerMessage`); they name the same fields.
        return _respelled(value, cls.model_fields)

    @field_validator("name", "observer", mode="after")
    @classmethod
    def _check_slug(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and not _SLUG.match(value):
            slug = re.sub(r"[^a-z0-9_-]+", "-", value.strip().lower()).strip("-_") or "agent"
            raise ValueError(
                f"{value!r} is not a valid agent type; use lowercase letters, digits, '-' and '_' (e.g. {slug!r})"
            )
        if value is not None and value.startswith("ses_"):  # its agents' made-up names would read as ids
            raise ValueError(f"{value!r} is not a valid agent type: ses_ starts an agent's id; rename it")
        if info.field_name == "observer" and value is not None and value == info.data.get("name"):
            raise ValueError(f"{value!r} cannot observe itself; name another agent type or remove observer")
        return value

    @field_validator("observer", "observer_message", "feature", "model", mode="before")
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        # Front matter like `observer:` or `observer: ""` means "no observer", not an agent type named "".
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        return value.strip() if isinstance(value, str) else value

    @field_validator("tools", "approval_tools", "grant", mode="before")
    @classmethod
    def _null_is_empty(cls, value: object) -> object:
        # A bare `tools:` key parses as null; read it as an empty list rather than a type error. Claude Code
        # writes lists as one comma-separated string (`tools: Read, Grep`).
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return () if value is None else value

    @field_validator("sessions", "limits", mode="before")
    @classmethod
    def _null_settings(cls, value: object, info: ValidationInfo) -> object:
        return _SECTIONS[str(info.field_name)]() if value is None else value

    @field_validator("mcp_servers", mode="before")
    @classmethod
    def _null_servers(cls, value: object) -> object:
        return () if value is None else value

    @field_validator("mcp_servers", mode="after")
    @classmethod
    def _distinct_servers(cls, value: tuple[ToolServer, ...]) -> tuple[ToolServer, ...]:
        servers_by_name(value)  # two servers of one name would give their tools the same names
        return value

    @field_validator("tools", "approval_tools", mode="after")
    @classmethod
    def _check_tool_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for tool in value:
            if not tool.strip():
                raise ValueError("a tool name is blank; remove the empty entry")
        return value

    @field_validator("instructions", mode="after")
    @classmethod
    def _normalize_instructions(cls, value: str) -> str:
        # The body is read from text files: line endings and the blank lines around it carry no meaning.
        value = value.replace("\r\n", "\n").replace("\r", "\n")
        return re.sub(r"\A(?:[ \t]*\n)+", "", value).rstrip()

    @field_validator("model", mode="after")
    @classmethod
    def _check_model(cls, value: str | None, info: ValidationInfo) -> str | None:
        kind = info.data.get("kind")
        # An alias (`sonnet`) stays as written here; the roster writes the ref it stands for in its place.
        aliases: Mapping[str, str] = (info.context or {}).get("model_aliases", MODEL_ALIASES)
        if value is None:
            if kind == "llm" and "inherit" in aliases:
                return "inherit"  # as Claude Code reads a subagent file without `model`: the project's model
            if kind == "llm":
                raise ValueError("missing; name the model this agent runs on, e.g. model: openai:gpt-4o")
            return None
        if kind == "rule":
            raise ValueError(_rule_takes_no("model"))
        refs = [ref.strip() for ref in value.split(",")]
        for ref in refs:
            if not _MODEL_REF.match(ref) and ref not in aliases:
                raise ValueError(not_a_model_ref(ref, aliases))
        return ", ".join(refs)

    @field_validator("model", mode="before")
    @classmethod
    def _model_chain(cls, value: object) -> object:
        # `model: [a, b]` is a fallback chain; the turn takes it as one string of refs (see runtime.models).
        if isinstance(value, list | tuple) and all(isinstance(ref, str) for ref in value):
            return ", ".join(ref.strip() for ref in value if ref.strip())
        return value

    @field_validator("grant", mode="after")
    @classmethod
    def _check_grant(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for capability in value:
            if capability not in GRANTS:
                raise ValueError(
                    f"unknown capability {capability!r}{_did_you_mean(capability, GRANTS)}; "
                    f"the capabilities are {_quoted(GRANTS)}"
                )
        return value

    @field_validator("tools", "approval_tools", "grant", "observer", "observer_message", mode="after")
    @classmethod
    def _nothing_for_rules(cls, value: object, info: ValidationInfo) -> object:
        if value and info.data.get("kind") == "rule":
            raise ValueError(_rule_takes_no(str(info.field_name)))
        return value

    def resolved_sessions(self, defaults: SessionDefaults) -> SessionDefaults:
        """The session settings in force for this role: its own front matter over `defaults`, field by field."""
        overrides = self.sessions.model_dump(exclude_none=True)
        return SessionDefaults.model_validate({**defaults.model_dump(), **overrides})

    def allowed_tools(self) -> frozenset[str]:
        """The tools this definition's `grant` allows beyond the grant-free ones."""
        return frozenset().union(*(GRANTS[capability] for capability in self.grant))

    def to_markdown(self) -> str:
        """The definition as a markdown file that `load_roster` reads back into an equal definition."""
        front: dict[str, Any] = {"name": self.name}
        for key, value in self.model_dump(mode="json", exclude_defaults=True, exclude={"instructions"}).items():
            if key != "name":
                front[key] = value
        import yaml

        header = yaml.safe_dump(front, sort_keys=False, allow_unicode=True, width=1_000_000)
        body = f"{self.instructions}\n" if self.instructions else ""
        return f"{_FENCE}\n{header}{_FENCE}\n{body}"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AgentDefinition):
            return NotImplemented
        return self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def _identity(self) -> tuple[object, ...]:
        return tuple(getattr(self, field) for field in type(self).model_fields if field != "source_path")


@dataclass(frozen=True)
class DefinitionProblem:
    """Something wrong with one agent definition, naming its file (or agent) and field.

    `str()` reads `agents/coder.md: tools: unknown tool 'raed_file' (did you mean 'read_file'?)`; a warning
    says so after the location.
    """

    path: Path | None
    """The definition's file; None for a definition built in Python."""
    field: str | None
    """The front-matter key at fault (`sessions.stuck_after_seconds`, `tools[2]`); None for the whole file."""
    message: str
    """What went wrong, and what to do about it."""
    severity: Severity = "error"
    """`error` leaves the definition out of the roster; `warning` keeps it."""
    agent: str | None = None
    """The agent type concerned, when known."""

    def __str__(self) -> str:
        location = str(self.path) if self.path is not None else f"agent {self.agent!r}"
        parts = [location]
        if self.severity == "warning":
            parts.append("warning")
        if self.field is not None:
            parts.append(self.field)
        parts.append(self.message)
        return ": ".join(parts)


class Roster:
    """The agent definitions in force, by name, and the problems found while loading or adding them.

    Iterating yields the definitions in name order. `problems` is recomputed on each read, because whether an
    `observer` resolves depends on every definition added so far.
    """

    def __init__(
        self,
        definitions: Iterable[AgentDefinition] = (),
        *,
        known_tools: Collection[str] | None = None,
        models: ModelResolver | None = None,
        check_models: bool = False,
    ) -> None:
        """`known_tools` are the tools the engine has; `models` is its resolver, whose aliases replace a
        definition's alias with its ref. With `check_models`, a model ref the resolver cannot resolve is an error
        (`agentwatch agents check`, where no model will be added later); an engine leaves that to the turn, which
        fails saying why (a scripted model may still be registered in its process)."""
        self.known_tools: frozenset[str] | None = None if known_tools is None else frozenset(known_tools)
        """The tool names definitions are checked against; None skips the check."""
        self.models: ModelResolver | None = models
        """The model resolver whose aliases apply to definitions (and, with `check_models`, that checks refs)."""
        self.check_models: bool = check_models
        """Whether a model ref that does not resolve is an error."""
        self._definitions: dict[str, AgentDefinition] = {}
        self._static_problems: list[DefinitionProblem] = []
        # Definitions left out because of errors, so a lookup (or an observer naming one) can say why.
        self._left_out: dict[str, Path | None] = {}
        # ... and those of them that parsed: their observer is checked too, so one pass lists every problem.
        self._refused: dict[str, AgentDefinition] = {}
        self.missing_directory: Path | None = None
        """The agents directory `load_roster` was given, when it does not exist (a lookup says so)."""
        for definition in definitions:
            self.add(definition)

    @property
    def definitions(self) -> Mapping[str, AgentDefinition]:
        """A read-only view of the definitions by name."""
        return MappingProxyType(self._definitions)

    def names(self) -> list[str]:
        """The agent types in the roster, sorted."""
        return sorted(self._definitions)

    def runnable(self) -> list[str]:
        """The agent types an agent can run as, sorted: rule observers are in the roster for the agents that name
        them, and run as no agent."""
        return sorted(name for name, definition in self._definitions.items() if definition.kind != "rule")

    def get(self, name: str) -> AgentDefinition:
        """The definition named `name`; `NotFound` lists the known names, nearest first."""
        try:
            return self._definitions[name]
        except KeyError:
            pass
        known = _nearest_first(name, self.runnable())
        if name in self._left_out:
            where = self._left_out[name]
            if where is not None:
                message = (
                    f"agent type {name!r} was left out because {str(where)!r} has errors; `agentwatch agents check` "
                    "lists them"
                )
            else:  # `agents check` reads the agents directory only: the problems are in the roster (and the log)
                message = (
                    f"agent type {name!r} was left out because its Python definition has errors; "
                    "`engine.roster.problems` lists them (they were logged when the engine opened)"
                )
        elif known:
            message = f"no agent type {name!r}; the roster has {', '.join(repr(n) for n in known)}"
        else:
            message = f"no agent type {name!r}; the roster is empty: add {name}.md to the agents directory"
        if self.missing_directory is not None and name not in self._left_out:
            message += (
                f" (the agents directory {str(self.missing_directory)!r} does not exist: create it, or name yours "
                "with agents_dir in agentwatch.toml or AGENTWATCH_AGENTS_DIR; `run` and `create` also take "
                "--agents-dir)"
            )
        raise NotFound(message, known=known)

    def session_settings(self, name: str, defaults: SessionDefaults) -> SessionDefaults:
        """The session settings in force for role `name`: its front matter over `defaults` (just `defaults`
        for a role the roster does not have, such as one whose file was removed)."""
        definition = self._definitions.get(name)
        return definition.resolved_sessions(defaults) if definition is not None else defaults

    def add(self, definition: AgentDefinition) -> None:
        """Add a definition built in Python, checked like a file: its tools, its name, its observer.

        Raises `Conflict` when the name is taken and `InvalidArgument` for an unknown tool; warnings go to
        `problems`. A model alias is replaced with its ref.
        """
        definition = self._with_refs(definition)
        problems = self._check(definition)
        errors = [problem for problem in problems if problem.severity == "error"]
        if errors:
            detail = "; ".join(str(problem) for problem in errors)
            raise (Conflict if any(problem.field == "name" for problem in errors) else InvalidArgument)(detail)
        self._keep(definition, problems)

    def observer_of(self, name: str, *, is_observer: bool = False) -> AgentDefinition | None:
        """The definition of the observer to spawn for a session of agent type `name`, or None when the session
        runs unobserved: `name` declares no observer, or names a type the roster lacks (`problems` holds a
        warning), or the session runs as an observer itself (`is_observer`).

        Observers are not chained, as the seeds resolve it: a session that is itself an observer ignores its own
        declaration (the observer subsystem records a warning on it), and nothing else does. So an observer
        type that declares an observer of its own is still returned: the agent it watches is observed all the
        same, and that declaration only takes effect in sessions of the type that observe nothing.
        """
        observer = self.get(name).observer
        if is_observer or observer is None:
            return None
        return self._definitions.get(observer)

    @property
    def problems(self) -> list[DefinitionProblem]:
        """Every problem found, errors and warnings, files first in load order, then Python-built definitions."""
        found = [*self._static_problems, *self._observer_problems()]
        return sorted(found, key=_location_key)

    @property
    def errors(self) -> list[DefinitionProblem]:
        """The problems that left a definition out of the roster."""
        return [problem for problem in self.problems if problem.severity == "error"]

    @property
    def warnings(self) -> list[DefinitionProblem]:
        """The problems of definitions that were kept."""
        return [problem for problem in self.problems if problem.severity == "warning"]

    def __contains__(self, name: object) -> bool:
        return name in self._definitions

    def __iter__(self) -> Iterator[AgentDefinition]:
        return iter([self._definitions[name] for name in self.names()])

    def __len__(self) -> int:
        return len(self._definitions)

    def __repr__(self) -> str:
        return f"Roster({self.names()!r}, errors={len(self.errors)}, warnings={len(self.warnings)})"

    def _admit(
        self,
        definition: AgentDefinition,
        warnings: Iterable[DefinitionProblem] = (),
        written: Mapping[str, str] | None = None,
    ) -> None:
        """Check a parsed definition against the roster (with the `warnings` its parsing found, each key named as
        its file spells it, `written`); keep it unless there is an error."""
        definition = self._with_refs(definition)
        spelled = written or {}
        checked = [replace(p, field=spelled.get(p.field, p.field)) if p.field else p for p in self._check(definition)]
        problems = [*warnings, *checked]
        if any(problem.severity == "error" for problem in problems):
            self._static_problems.extend(problems)
            if definition.name not in self._definitions:
                self._left_out[definition.name] = definition.source_path
                self._refused[definition.name] = definition
        else:
            self._keep(definition, problems)

    def _keep(self, definition: AgentDefinition, warnings: list[DefinitionProblem]) -> None:
        self._definitions[definition.name] = definition
        self._left_out.pop(definition.name, None)
        self._refused.pop(definition.name, None)
        self._static_problems.extend(warnings)

    def _with_refs(self, definition: AgentDefinition) -> AgentDefinition:
        """`definition` with each model alias of its `model` replaced by the ref it stands for."""
        if definition.model is None:
            return definition
        if self.models is not None:
            model = self.models.expand(definition.model)
        else:
            model = ", ".join(MODEL_ALIASES.get(ref, ref) for ref in split_chain(definition.model))
        return definition if model == definition.model else definition.model_copy(update={"model": model})

    def _check(self, definition: AgentDefinition) -> list[DefinitionProblem]:
        """What is wrong with `definition` in this roster: a name taken, unknown tools, a tool not granted, a
        model that does not resolve."""
        problems: list[DefinitionProblem] = []

        def problem(field: str | None, message: str, severity: Severity = "error") -> None:
            problems.append(DefinitionProblem(definition.source_path, field, message, severity, definition.name))

        taken = self._definitions.get(definition.name)
        if taken is not None:
            by = f"{str(taken.source_path)!r}" if taken.source_path is not None else "a definition built in Python"
            problem("name", f"{definition.name!r} is already defined by {by}; rename one of them")
        # A tool server's tools (`<server>__<tool>`) are known only once it answers; its name is what can be checked.
        served = tuple(f"{server.name}{SEPARATOR}" for server in definition.mcp_servers)
        if self.known_tools is not None:
            for field in ("tools", "approval_tools"):
                listed = [tool for tool in getattr(definition, field) if not tool.startswith(served)]
                for message in _unknown_tools(listed, field, self.known_tools):
                    problem(field, message)
                foreign = [tool for tool in listed if tool in CLAUDE_CODE_TOOLS and tool not in self.known_tools]
                if foreign:
                    problem(field, _claude_code_tools(foreign), "warning")
        for tool in definition.approval_tools:
            if tool not in definition.tools and not tool.startswith(served):
                problem(
                    "approval_tools",
                    f"{tool!r} is not in tools, so the agent cannot call it and nothing waits for approval; add it "
                    "to tools or remove it here",
                    "warning",
                )
        if self.check_models and self.models is not None and definition.model is not None:
            reason = self.models.unresolved(definition.model)
            if reason is not None:
                problem("model", f"{reason}; until then each of its turns fails")
        granted = definition.allowed_tools()
        for capability, allowed in GRANTS.items():
            for tool in definition.tools:
                if tool in allowed and tool not in granted:
                    problem(
                        "tools",
                        f"{tool!r} needs the {capability!r} capability; add {capability} to grant or it is refused",
                        "warning",
                    )
        if definition.observer_message is not None and definition.observer is None:
            problem("observer_message", "is set but no observer is declared; add observer or remove it", "warning")
        return problems

    def _observer_problems(self) -> list[DefinitionProblem]:
        problems: list[DefinitionProblem] = []
        for definition in [*self._definitions.values(), *self._refused.values()]:
            observer = definition.observer
            if observer is None:
                continue
            kept = definition.name in self._definitions
            unobserved = f"{definition.name!r} {'runs' if kept else '(left out for its errors) would run'} unobserved"
            if observer in self._definitions:
                chained = self._definitions[observer].observer
                if chained is None:
                    continue
                message = (
                    f"{observer!r} has an observer of its own ({chained!r}), which a {observer!r} session observing "
                    f"{definition.name!r} ignores (observers are not chained): {definition.name!r} is observed by "
                    f"{observer!r}, and {chained!r} watches only {observer!r} sessions that observe nothing"
                )
            elif observer in self._left_out:
                message = (
                    f"{observer!r} was left out because its definition has errors; {unobserved} until they are fixed"
                )
            else:
                hint = _did_you_mean(observer, self._definitions)
                message = f"no agent type {observer!r} in the roster{hint}; {unobserved} until it is defined"
            problems.append(DefinitionProblem(definition.source_path, "observer", message, "warning", definition.name))
        return problems


def load_roster(
    agents_dir: Path,
    *,
    known_tools: Collection[str] | None = None,
    extra: Iterable[AgentDefinition] = (),
    models: ModelResolver | None = None,
    check_models: bool = False,
) -> Roster:
    """Load every `*.md` definition in `agents_dir` (sorted by file name), then the `extra` Python-built ones.

    Never raises for a bad definition: it is left out and its problems are in `Roster.problems`. When two
    definitions share a name the one loaded first is kept. A missing directory gives an empty roster.
    `known_tools`, `models` and `check_models` are as `Roster` takes them: `Engine.open` passes its tools and
    its resolver, `agentwatch agents check` the same ones as `agentwatch run` would have, with `check_models`.
    """
    roster = Roster(known_tools=known_tools, models=models, check_models=check_models)
    aliases = models.aliases if models is not None else MODEL_ALIASES
    if agents_dir.exists() and not agents_dir.is_dir():
        roster._static_problems.append(
            DefinitionProblem(agents_dir, None, "is not a directory; point agents_dir at the folder of *.md files")
        )
    elif not agents_dir.exists():
        roster.missing_directory = agents_dir
    else:
        for path in sorted(agents_dir.glob("*.md")):
            # Editors leave hidden swap and backup copies next to the real file.
            if path.name.startswith(".") or not path.is_file():
                continue
            definition, problems, written = _parse_file(path, roster.known_tools, aliases)
            if definition is None:
                roster._static_problems.extend(problems)
                roster._left_out.setdefault(_name_for_left_out(path, problems), path)
            else:
                roster._admit(definition, problems, written)
    for definition in extra:
        roster._admit(definition)
    return roster


def check_agents(
    agents_dir: Path, known_tools: Collection[str] | None = None, *, models: ModelResolver | None = None
) -> list[DefinitionProblem]:
    """Every problem of the definitions in `agents_dir`, checked against `known_tools` and `models` as
    `agentwatch agents check` checks them (a model ref that does not resolve is an error).

    The command exits non-zero when any of them is an error.
    """
    if not agents_dir.exists():
        return [
            DefinitionProblem(
                agents_dir, None, "no such directory; create it and add one <name>.md file per agent", "warning"
            )
        ]
    return load_roster(agents_dir, known_tools=known_tools, models=models, check_models=True).problems


def _parse_file(
    path: Path, known_tools: Collection[str] | None, aliases: Mapping[str, str] = MODEL_ALIASES
) -> tuple[AgentDefinition | None, list[DefinitionProblem], Mapping[str, str]]:
    """Read one markdown definition: the definition and its warnings, or None and every problem that keeps it
    out; and how the file spells each key it gives (our key to its spelling). A `model` may be one of `aliases`.

    Tools are checked against `known_tools` here only when the definition fails validation, so that one run of
    `agentwatch agents check` reports them along with the other errors; `Roster` checks valid ones.
    """

    def fail(field: str | None, message: str) -> tuple[None, list[DefinitionProblem], Mapping[str, str]]:
        return None, [DefinitionProblem(path, field, message, "error", None)], {}

    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        return fail(None, f"is not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8")
    except OSError as exc:
        return fail(None, f"cannot be read ({exc.strerror}); check its permissions")
    lines = text.removeprefix("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].rstrip() != _FENCE:
        return fail(None, "missing front matter; start the file with a '---' line, the YAML keys, then another '---'")
    closing = next((i for i in range(1, len(lines)) if lines[i].rstrip() == _FENCE), None)
    if closing is None:
        return fail(None, "front matter is not closed; add a '---' line after the YAML keys")
    header, body = "".join(lines[1:closing]), "".join(lines[closing + 1 :])
    import yaml  # loaded with the first definition file, not with the module

    try:
        front = yaml.safe_load(header)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        # Line 1 of the file is the opening '---', so the header's first line is line 2.
        at = f" at line {mark.line + 2}" if mark is not None else ""
        return fail(None, f"invalid YAML{at}: {exc.problem or exc.context}; fix the front matter")
    except yaml.YAMLError as exc:
        return fail(None, f"invalid YAML: {exc}; fix the front matter")
    if front is None:
        front = {}
    if not isinstance(front, dict):
        return fail(None, f"front matter must be YAML keys and values, not a {type(front).__name__}")

    problems: list[DefinitionProblem] = []
    fields: dict[str, Any] = {}
    written: dict[str, str] = {}  # our key -> the key as the file spells it (`observerMessage`)
    ignored: list[str] = []
    for raw_key, value in front.items():
        key = str(raw_key)
        ours = _our_key(key, AgentDefinition.model_fields)
        if ours in ("instructions", "source_path"):
            what = "the body after the front matter" if ours == "instructions" else "set by the loader"
            problems.append(DefinitionProblem(path, key, f"is not a front-matter key; it is {what}"))
        elif ours in fields:
            problems.append(DefinitionProblem(path, key, f"repeats {written[ours]!r}, spelled another way; keep one"))
        elif ours not in AgentDefinition.model_fields and _snake(key) in _IGNORED_KEYS:
            ignored.append(key)
        else:
            fields[ours] = value
            written[ours] = key
    name = fields.get("name")
    if name is None or (isinstance(name, str) and not name.strip()):
        fields["name"] = path.stem
    agent = fields["name"] if isinstance(fields["name"], str) else None
    problems.extend(
        DefinitionProblem(
            path, key, f"is {_IGNORED_KEYS[_snake(key)]} agentwatch does not use; ignored", "warning", agent
        )
        for key in ignored
    )
    for section, settings in _SECTIONS.items():
        given = fields.get(section)
        if isinstance(given, dict):
            written.update({f"{section}.{_our_key(str(k), settings.model_fields)}": f"{k}" for k in given})
    context = {"model_aliases": aliases}
    try:
        definition = AgentDefinition.model_validate(
            {**fields, "instructions": body, "source_path": path}, context=context
        )
    except ValidationError as exc:
        problems.extend(_problems_from(exc, path, agent, written))
        if known_tools is not None:
            for field in ("tools", "approval_tools"):
                listed = fields.get(field)
                if isinstance(listed, str):
                    listed = listed.split(",")
                if isinstance(listed, list):
                    names = [tool.strip() for tool in listed if isinstance(tool, str) and tool.strip()]
                    problems.extend(
                        DefinitionProblem(path, written.get(field, field), message, "error", agent)
                        for message in _unknown_tools(names, field, known_tools)
                    )
        return None, problems, written
    if any(problem.severity == "error" for problem in problems):
        return None, problems, written
    return definition, problems, written


def _problems_from(
    exc: ValidationError, path: Path | None, agent: str | None, written: Mapping[str, str] | None = None
) -> list[DefinitionProblem]:
    """A problem per validation error, its field spelled as the file spells it (`written`: our key, or
    `<section>.<key>` of `_SECTIONS`, to the file's spelling)."""
    written = written or {}
    problems = []
    for error in exc.errors(include_url=False):
        loc = error["loc"]
        spelled: list[str | int] = list(loc)
        if spelled and isinstance(spelled[0], str):
            spelled[0] = written.get(spelled[0], spelled[0])
            if loc[0] in _SECTIONS and len(loc) > 1:
                spelled[1] = written.get(f"{loc[0]}.{loc[1]}", loc[1])
        field = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in spelled).lstrip(".") or None
        if error["type"] == "extra_forbidden":
            valid = [key for key in _keys_of(loc[:-1]).model_fields if key not in ("instructions", "source_path")]
            key = str(loc[-1])
            hint = _did_you_mean(key, valid) or f"; the keys are {', '.join(valid)}"
            message = f"unknown key{hint}"
        elif error["type"] == "value_error":
            message = str(error["ctx"]["error"])
        elif error["type"] == "missing":
            message = "missing; add it to the front matter"
        elif error["type"] == "tuple_type":
            # Our lists are tuples inside, but the file author writes YAML lists.
            message = f"should be a list, like [a, b] (got {error['input']!r})"
        elif error["type"] in ("model_type", "dict_type"):
            like = _EXAMPLES.get(tuple(part for part in loc if isinstance(part, str)))
            message = f"should be keys and values{f', like {like}' if like else ''} (got {error['input']!r})"
        else:
            message = f"{error['msg'].removeprefix('Input ')} (got {error['input']!r})"
        problems.append(DefinitionProblem(path, field, message, "error", agent))
    return problems


def _keys_of(loc: tuple[str | int, ...]) -> type[BaseModel]:
    """The model whose keys the front matter gives at `loc` (the definition's own, a section's, a tool server's)."""
    if len(loc) == 1 and loc[0] in _SECTIONS:
        return _SECTIONS[str(loc[0])]
    if len(loc) == 2 and loc[0] == "mcp_servers":
        return ToolServer
    return AgentDefinition


_EXAMPLES: Mapping[tuple[str, ...], str] = {
    ("sessions",): "{stuck_after_seconds: 900}",
    ("limits",): "{tokens: 200000, cost_usd: 2.0}",
    ("mcp_servers",): '{name: tracker, url: "https://mcp.example.com/mcp"}',
}
"""What the keys a front-matter key holds look like, for the error that says it holds none."""


def _unknown_tools(tools: Iterable[str], field: str, known_tools: Collection[str]) -> list[str]:
    """An error for each tool the engine lacks; Claude Code's are left to `_claude_code_tools`, a warning."""
    messages = []
    for tool in tools:
        if tool not in known_tools and tool not in CLAUDE_CODE_TOOLS:
            hint = _did_you_mean(tool, known_tools) or f"; register a tool of that name or remove it from {field}"
            messages.append(f"unknown tool {tool!r}{hint}")
    return messages


def _claude_code_tools(tools: list[str]) -> str:
    instead = [f"for {tool!r}, {CLAUDE_CODE_TOOLS[tool]}" for tool in tools if CLAUDE_CODE_TOOLS[tool]]
    also = f" ({'; '.join(instead)})" if instead else ""
    return (
        f"{_quoted(tools)} {'is a Claude Code tool' if len(tools) == 1 else 'are Claude Code tools'} agentwatch "
        f"does not have: the agent runs without {'it' if len(tools) == 1 else 'them'} and nothing is granted in "
        f"their place; register a Python tool that does the job (Engine.open(tools=[...])) and list its name"
        f"{also}"
    )


def _name_for_left_out(path: Path, problems: list[DefinitionProblem]) -> str:
    for problem in problems:
        if problem.agent is not None:
            return problem.agent
    return path.stem


def _rule_takes_no(field: str) -> str:
    return f"a rule observer runs a registered Python function and takes no {field}; remove it or set kind: llm"


def _did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the nearest candidate, or "" when none is near."""
    candidates = list(candidates)
    # Seeds and other tools spell keys in camelCase (`observerMessage`); map those straight to our snake_case.
    if _snake(word) in candidates and _snake(word) != word:
        return f" (did you mean {_snake(word)!r}?)"
    return did_you_mean(word, candidates)


def _nearest_first(word: str, candidates: Iterable[str]) -> list[str]:
    import difflib

    return sorted(candidates, key=lambda name: (-difflib.SequenceMatcher(None, word, name).ratio(), name))


def _quoted(names: Iterable[str]) -> str:
    return ", ".join(repr(name) for name in sorted(names))


def _location_key(problem: DefinitionProblem) -> tuple[int, str]:
    # Files first, in the order they load; Python-built definitions after them.
    if problem.path is not None:
        return (0, str(problem.path))
    return (1, problem.agent or "")
