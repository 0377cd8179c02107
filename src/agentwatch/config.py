"""Project configuration: `agentwatch.toml` at the project root, overridden by `AGENTWATCH_*` variables.

```toml
store = ".agentwatch/agentwatch.db"             # a SQLite file (under the root), or postgresql://user@host:5432/db
live = "memory://"                               # or redis://127.0.0.1:6379/0
agents_dir = "agents"
setup = "myproject.agents:setup"                # your tools, policies, ... for serve, run and mcp

[sessions]
stuck_after_seconds = 600
continue_after_restart = 3
lease_seconds = 15                # a dead engine's turns continue elsewhere after this (plus ~1 s)

[retention]
heartbeat_ttl = "24h"
hook_ttl = "24h"
deleted_ttl = "7d"
run_ttl = "30d"                   # runs, with their spans and journal, after they ended
skipped_run_ttl = "24h"           # a heartbeat's skipped ticks

[observers]
enabled = true
allowed_types = ["reviewer", "loop-guard"]  # observer types that may be armed (default: any)
deny = ["agent_task(auditor)"]             # or "agent_task": no observer at all
delivery_timeout_seconds = 300             # one batch, the observer's turn included

[tracing]
enabled = true             # OpenTelemetry spans of turns, model requests, tool calls (OTLP: OTEL_* variables)

[notify]
webhook = "https://hooks.example.com/agentwatch"   # told each time an agent waits on a person
on = ["waiting", "report", "failed"]               # also observer reports and failed turns (default: waiting)

[server]
bind = "127.0.0.1:8765"
deploy_hold_minutes = 60   # on SIGTERM, how long running turns may go on (0 = do not wait)

[heartbeats.digest]         # a role run on a schedule: each tick a run of its own (agentwatch serve ticks it)
role = "digester"
every = "1h"
prompt = "Summarize what arrived since the last digest."

[hooks.deploy-check]        # a role run when something outside asks: hook_fire {name, input, key}
role = "checker"
prompt = "Check the deploy described in the input."

[providers.local]           # refs local:<model> go to this OpenAI-compatible server
base_url = "http://127.0.0.1:11434/v1"

[models]                    # short names a definition's `model:` may use (over the built-in sonnet/opus/haiku)
aliases = { sonnet = "anthropic:claude-sonnet-4-5", fast = "local:llama3.1", inherit = "openai:gpt-4o" }
```

`store` is what `--store` takes: a store URL (`sqlite:///data/aw.db`, `postgresql://...`) or the path of a SQLite
file; a relative path (or relative `sqlite:///` URL) is under the root, as `agents_dir` is.

Environment: `AGENTWATCH_STORE` (as `store`, a relative path being the working directory's), `AGENTWATCH_LIVE`,
`AGENTWATCH_AGENTS_DIR`, `AGENTWATCH_OBSERVER_AGENTS=0|1`,
`AGENTWATCH_BACKGROUND_TASKS=0` (turns every background task off, observer agents included),
`AGENTWATCH_LEASE_SECONDS`, `AGENTWATCH_DEPLOY_HOLD_MINUTES`, `AGENTWATCH_SETUP`, `AGENTWATCH_TRACING=0|1`,
`AGENTWATCH_NOTIFY_WEBHOOK`, `AGENTWATCH_NOTIFY_ON=waiting,report,failed` (and `AGENTWATCH_NOTIFY_SECRET`,
which `agentwatch.notify` reads itself).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
)

from agentwatch.errors import InvalidArgument, did_you_mean

__all__ = [
    "CONFIG_FILE",
    "DEFAULT_STORE_URL",
    "Config",
    "HeartbeatConfig",
    "ModelsConfig",
    "ProviderConfig",
    "RetentionConfig",
    "SessionDefaults",
    "env_store",
    "load_config",
    "parse_duration",
]

CONFIG_FILE = "agentwatch.toml"
DEFAULT_STORE_URL = "sqlite:///.agentwatch/agentwatch.db"

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, None: 1}


def parse_duration(value: object) -> timedelta:
    """`"24h"`, `"90m"`, `"7d"`, `"1.5s"` or a number of seconds, as a timedelta."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return timedelta(seconds=value)
    match = _DURATION.match(str(value)) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"{value!r} is not a duration; write it like 30s, 90m, 24h or 7d")
    return timedelta(seconds=float(match[1]) * _UNIT_SECONDS[match[2]])


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]


def _some_time(value: timedelta) -> timedelta:
    if value <= timedelta(0):
        raise ValueError(f"a turn needs some time: a timeout above 0, not {value.total_seconds():g} s")
    return value


TurnTimeout = Annotated[Duration, AfterValidator(_some_time)]


def setup_ref(value: str) -> str:
    """`value` when it is MODULE:NAME (the `setup` setting); raises `ValueError` saying what to write otherwise."""
    if not re.match(SETUP_REF, value):
        raise ValueError(
            f"{value!r} is not MODULE:NAME (a module of the project, a colon, a name in it: myproject.agents:setup)"
        )
    return value


"""How long a scheduled turn (a heartbeat's tick, a hook's fire) may take: a duration above 0."""
HEARTBEAT_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"
"""A heartbeat's name: 1-100 letters, digits, '_', '.' or '-' (it is part of its runs' entity and lineage)."""
SETUP_REF = r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$"
"""`setup`: a module, a colon, then a name in it (dots reach further in)."""
_STRICT = ConfigDict(extra="forbid", frozen=True)


class SessionDefaults(BaseModel):
    """Engine-wide session settings; a role's own `sessions:` front matter overrides them."""

    model_config = _STRICT

    stuck_after_seconds: float = Field(default=600, gt=0)
    """A running session with no activity for longer than this is `stuck`."""
    continue_after_restart: int = Field(default=3, ge=0)
    """How many times a turn cut off by a restart is continued before it ends `interrupted` (0 = never)."""
    hold_for_parent_seconds: float = Field(default=300, ge=0)
    """A sub-agent's request waits on its parent agent first, reaching a person after this long at the
    latest (0 = straight to a person)."""
    lease_seconds: float = Field(default=15, gt=0, le=86400)
    """How long an engine's ownership of a session's turns lasts unless renewed: when an engine dies, another
    continues its turns this long (plus about a second) later (`AGENTWATCH_LEASE_SECONDS`). Engine-wide."""
    lease_renew_seconds: float | None = Field(default=None, gt=0)
    """How often held leases are renewed (default a third of `lease_seconds`). Engine-wide."""


class RetentionConfig(BaseModel):
    """How long rows are kept."""

    model_config = _STRICT

    heartbeat_ttl: Duration = timedelta(hours=24)
    """Heartbeat sessions are reaped this long after their last activity."""
    hook_ttl: Duration = timedelta(hours=24)
    """Hook sessions are reaped this long after their last activity."""
    deleted_ttl: Duration = timedelta(days=7)
    """A soft-deleted session stays readable by id this long."""
    run_ttl: Duration = timedelta(days=30)
    """A run (a workflow's, a heartbeat tick's, a hook's fire) is reaped, with its spans and journal, this long
    after it ended."""
    skipped_run_ttl: Duration = timedelta(hours=24)
    """A skipped heartbeat tick's run is reaped this long after it was skipped."""


class HookConfig(BaseModel):
    """A role run when something outside asks: `hook_fire` (see `agentwatch.runtime.hooks`)."""

    model_config = _STRICT

    role: str = Field(min_length=1)
    prompt: str = Field(min_length=1)
    timeout: TurnTimeout = timedelta(minutes=10)
    """How long a fire's turn may take (a paused one included) before it is stopped and the run fails."""


class HeartbeatConfig(BaseModel):
    """A role run on a schedule (see `agentwatch.runtime.heartbeats`)."""

    model_config = _STRICT

    role: str = Field(min_length=1)
    every: Duration
    """How often it ticks (at least a second): ticks fall on the multiples of it since the Unix epoch."""
    prompt: str = Field(min_length=1)
    timeout: TurnTimeout = timedelta(minutes=10)
    """How long a tick's turn may take (a paused one included) before it is stopped and the tick fails."""

    @field_validator("every")
    @classmethod
    def _at_least_a_second(cls, value: timedelta) -> timedelta:
        if value < timedelta(seconds=1):
            raise ValueError(f"a heartbeat ticks at most once a second, not every {value.total_seconds():g} s")
        return value


class ProviderConfig(BaseModel):
    """A named model provider: refs `<name>:<model>` go to its OpenAI-compatible base URL."""

    model_config = _STRICT

    base_url: str
    api_key_env: str | None = None
    """The environment variable that holds its key (none for local servers)."""


_ALIAS_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_ONE_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*:[^\s,]+$")


class ModelsConfig(BaseModel):
    """Model settings of the project: `[models]`."""

    model_config = _STRICT

    aliases: dict[str, str] = {}
    """Short names a definition's `model:` may use instead of a ref, each mapped to one `<provider>:<model>` ref
    (`sonnet = "anthropic:claude-sonnet-4-5"`). They extend and override the built-in table
    (`agentwatch.runtime.models.refs.MODEL_ALIASES`); Claude Code's `model: inherit` means the ref `inherit` maps to,
    and so does a definition without `model` when `inherit` is mapped."""

    @field_validator("aliases", mode="after")
    @classmethod
    def _check_aliases(cls, aliases: dict[str, str]) -> dict[str, str]:
        for name, ref in aliases.items():
            if not _ALIAS_NAME.match(name):
                raise ValueError(
                    f"alias {name!r} is not a short name; use letters, digits, '.', '-' and '_' (no ':' or spaces)"
                )
            if not _ONE_REF.match(ref.strip()):
                raise ValueError(
                    f"alias {name!r} maps to {ref!r}, which is not one model ref; write it as <provider>:<model>, "
                    "e.g. 'anthropic:claude-sonnet-4-5'"
                )
        return {name: ref.strip() for name, ref in aliases.items()}


class ObserverConfig(BaseModel):
    model_config = _STRICT

    enabled: bool = True
    """Observer agents on or off (`AGENTWATCH_OBSERVER_AGENTS` overrides)."""
    allowed_types: tuple[str, ...] | None = None
    """The observer types that may be armed (None: any); asked at arm time and before every batch."""
    deny: tuple[str, ...] = ()
    """Deny rules asked at arm time and before every batch: `agent_task` (no observer at all, as no background
    spawn) or `agent_task(<type>)` (that observer type)."""
    delivery_timeout_seconds: float = Field(default=300, gt=0)
    """How long one batch may take to reach an observer (its turn included) before it is given up on."""


def _webhook_url(value: str) -> str:
    if not re.match(r"^https?://[^/\s]+", value):
        raise ValueError(f"{value!r} is not an http(s) URL (https://hooks.example.com/agentwatch)")
    return value


class TracingConfig(BaseModel):
    model_config = _STRICT

    enabled: bool = False
    """OpenTelemetry spans of turns, model requests and tool calls (`AGENTWATCH_TRACING` overrides); see
    `agentwatch.tracing`."""


NoticeKind = Literal["waiting", "report", "failed"]
"""What a webhook may be told of: an agent started waiting on a person, an observer reported on an agent, a
turn failed."""


class NotifyConfig(BaseModel):
    model_config = _STRICT

    webhook: Annotated[str, AfterValidator(_webhook_url)] | None = None
    """Where to POST a notice each time an agent starts waiting on a person (`AGENTWATCH_NOTIFY_WEBHOOK`
    overrides); see `agentwatch.notify`."""
    on: tuple[NoticeKind, ...] = ("waiting",)
    """What the webhook is told of (`AGENTWATCH_NOTIFY_ON`, comma-separated, overrides): `waiting` (an agent waits
    on a person), `report` (an observer reported on an agent), `failed` (a turn failed)."""

    @field_validator("on", mode="before")
    @classmethod
    def _kinds(cls, value: object) -> object:
        """A text is a comma-separated list (as the variable gives it); each kind once, in the order given."""
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if not isinstance(value, list | tuple):
            return value  # (the type's own error)
        kinds = get_args(NoticeKind)
        unknown = [kind for kind in value if kind not in kinds]
        if unknown or not value:
            said = f"{unknown[0]!r} is not one of" if unknown else "name at least one of"
            raise ValueError(f"{said} {', '.join(kinds)}")
        return tuple(dict.fromkeys(value))


class ServerConfig(BaseModel):
    model_config = _STRICT

    bind: str = "127.0.0.1:8765"
    """HOST:PORT `agentwatch serve` listens on (an IPv6 host in brackets: `[::1]:8765`; port 0: any free one)."""
    deploy_hold_minutes: float = Field(default=60, ge=0)
    """On SIGTERM, how long `agentwatch serve` lets running turns go on before they are cut off (they continue
    on the next start, as after a crash); 0 = do not wait (`AGENTWATCH_DEPLOY_HOLD_MINUTES`)."""

    @field_validator("bind")
    @classmethod
    def _host_and_port(cls, value: str) -> str:
        host, colon, port = value.rpartition(":")
        bare_ipv6 = ":" in host and not (host.startswith("[") and host.endswith("]"))
        if not colon or bare_ipv6 or not host.strip("[]") or not port.isdigit() or int(port) > 65535:
            raise ValueError(
                f'{value!r} is not HOST:PORT with a port of 0..65535 (0: any free one); e.g. "127.0.0.1:8765"'
            )
        return value

    @property
    def host(self) -> str:
        """The host part of `bind`."""
        return self.bind.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        """The port part of `bind`."""
        return int(self.bind.rpartition(":")[2])


class Config(BaseModel):
    """Everything configurable, with its default."""

    model_config = _STRICT

    root: Path = Path(".")
    """The project root (where `agentwatch.toml` is)."""
    store: str = DEFAULT_STORE_URL
    live: str = "memory://"
    agents_dir: Path = Path("agents")
    background_tasks: bool = True
    sessions: SessionDefaults = SessionDefaults()
    retention: RetentionConfig = RetentionConfig()
    observers: ObserverConfig = ObserverConfig()
    tracing: TracingConfig = TracingConfig()
    notify: NotifyConfig = NotifyConfig()
    server: ServerConfig = ServerConfig()
    heartbeats: dict[Annotated[str, StringConstraints(pattern=HEARTBEAT_NAME)], HeartbeatConfig] = {}
    hooks: dict[Annotated[str, StringConstraints(pattern=HEARTBEAT_NAME)], HookConfig] = {}
    providers: dict[str, ProviderConfig] = {}
    models: ModelsConfig = ModelsConfig()
    setup: Annotated[str, AfterValidator(setup_ref)] | None = None
    """`module:name` of the project's Python for the commands that run agents (`serve`, `run`, `mcp`): tools,
    policies, models, ... as `Engine.open` takes them (see `agentwatch.runtime.setup`)."""

    @property
    def observer_agents_enabled(self) -> bool:
        """Observer agents run only when they are on and background tasks are too."""
        return self.background_tasks and self.observers.enabled


def _env_flag(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise InvalidArgument(f"{name}={value!r} is not a switch; set it to 1 or 0")


_ENV_FIELDS: dict[str, tuple[str, ...]] = {
    "AGENTWATCH_LIVE": ("live",),
    "AGENTWATCH_AGENTS_DIR": ("agents_dir",),
    "AGENTWATCH_LEASE_SECONDS": ("sessions", "lease_seconds"),
    "AGENTWATCH_DEPLOY_HOLD_MINUTES": ("server", "deploy_hold_minutes"),
    "AGENTWATCH_SETUP": ("setup",),
    "AGENTWATCH_NOTIFY_WEBHOOK": ("notify", "webhook"),
    "AGENTWATCH_NOTIFY_ON": ("notify", "on"),
}
"""The variables that set a field as given (the switches are read by `_env_flag`, the store by `env_store`), by
the field they set."""
_STORE_VARIABLE = "AGENTWATCH_STORE"


def load_config(root: str | Path = ".", env: Mapping[str, str] | None = None) -> Config:
    """Read `agentwatch.toml` under `root` (when present), then apply `AGENTWATCH_*` variables.

    The store is named as `--store` names it (`agentwatch.store.store_url`): a URL, or the path of a SQLite file.
    A relative SQLite path in the file (or the default store's) is under `root`, as `agents_dir` is; one in
    `AGENTWATCH_STORE` is relative to the working directory."""
    env = os.environ if env is None else env
    root = Path(root)
    path = root / CONFIG_FILE
    raw: dict[str, Any] = {}
    if path.is_file():
        import tomllib  # only a project with a config file pays for the parser

        try:
            raw = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise InvalidArgument(f"{str(path)!r} is not valid TOML: {exc}") from None
    given = env_store(env)
    raw["store"] = given if given is not None else _file_store(raw.get("store", DEFAULT_STORE_URL), root, path)
    raw["root"] = root
    for name, (*sections, field) in _ENV_FIELDS.items():
        if name in env:
            _set(raw, sections, field, env[name])
    if "AGENTWATCH_BACKGROUND_TASKS" in env:
        raw["background_tasks"] = _env_flag("AGENTWATCH_BACKGROUND_TASKS", env["AGENTWATCH_BACKGROUND_TASKS"])
    if "AGENTWATCH_OBSERVER_AGENTS" in env:
        enabled = _env_flag("AGENTWATCH_OBSERVER_AGENTS", env["AGENTWATCH_OBSERVER_AGENTS"])
        _set(raw, ["observers"], "enabled", enabled)
    if "AGENTWATCH_TRACING" in env:
        _set(raw, ["tracing"], "enabled", _env_flag("AGENTWATCH_TRACING", env["AGENTWATCH_TRACING"]))
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        from_env = {fields: name for name, fields in _ENV_FIELDS.items() if name in env}
        errors = exc.errors()
        problems = "; ".join(_problem(err, from_env, env) for err in errors)
        by_file = path.is_file() and not any(tuple(map(str, err["loc"])) in from_env for err in errors)
        where = f"{str(path)!r} has problems" if by_file else "the configuration has problems"
        raise InvalidArgument(f"{where}: {problems}") from None


def _set(raw: dict[str, Any], sections: list[str], field: str, value: object) -> None:
    """Set `field` of the table `sections` names in `raw` (made when missing). A section the file gave another
    type keeps it, and is reported as the file's error."""
    table = raw
    for section in sections:
        inner = table.setdefault(section, {})
        if not isinstance(inner, dict):
            return
        table[section] = inner = dict(inner)
        table = inner
    table[field] = value


def _problem(err: Any, from_env: Mapping[tuple[str, ...], str], env: Mapping[str, str]) -> str:
    """One validation error in words: the variable that set the field, or the field's place in the file."""
    loc = tuple(str(part) for part in err["loc"])
    message = err["msg"].removeprefix("Value error, ")
    if loc in from_env:
        return f"{from_env[loc]}={env[from_env[loc]]!r}: {message}"
    if err["type"] == "extra_forbidden":
        message = f"not a setting{did_you_mean(loc[-1], _table_at(loc[:-1]).model_fields)}"
    elif err["type"] == "tuple_type":  # (a tuple inside; the file writes a list)
        message = "should be a list, like [a, b]"
    elif loc[-1:] == ("[key]",) and err["type"] == "string_pattern_mismatch":  # a heartbeat's or hook's name
        loc = loc[:-1]
        message = "not a name: use letters, digits, '_', '.' and '-', starting with a letter or digit (at most 100)"
    return f"{'.'.join(loc)}: {message}"


def _table_at(loc: tuple[str, ...]) -> type[BaseModel]:
    """The settings model of the table at `loc` (as far as it names one): `hooks.NAME` is a hook's."""
    model: type[BaseModel] = Config
    parts = iter(loc)
    for part in parts:
        annotation = model.model_fields[part].annotation if part in model.model_fields else None
        if get_origin(annotation) is dict:  # a table of named tables: the next part is a name
            annotation = get_args(annotation)[1]
            if next(parts, None) is None:
                break
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            break
        model = annotation
    return model


def env_store(env: Mapping[str, str]) -> str | None:
    """The store URL `AGENTWATCH_STORE` names in `env` (None when it is not set), read as `--store` reads it: a
    relative path is the working directory's. A bad value is refused (`InvalidArgument`) naming the variable."""
    if _STORE_VARIABLE not in env:
        return None
    value = env[_STORE_VARIABLE]
    return _store_url(value, None, f"the configuration has problems: {_STORE_VARIABLE}={value!r}")


def _file_store(value: object, root: Path, path: Path) -> object:
    """The store URL the file's `store` names, read as `--store` reads it, with a relative path (or relative
    `sqlite:///` URL) under `root`. A bad value is refused (`InvalidArgument`) naming the file."""
    if not isinstance(value, str):
        return value  # (the type's own error, reported as the file's)
    return _under_root(_store_url(value, root, f"{str(path)!r} has problems: store"), root)


def _store_url(value: str, base: Path | None, where: str) -> str:
    from agentwatch.store import store_url  # (the store package loads only for a configuration)

    try:
        return store_url(value, base)
    except InvalidArgument as exc:
        raise InvalidArgument(f"{where}: {exc.message}") from None


def _under_root(url: object, root: Path) -> object:
    """`url` with a relative `sqlite:///` path put under `root` (other URLs, and `root` '.', as they are)."""
    if (
        not isinstance(url, str)
        or root == Path(".")
        or not url.startswith("sqlite:///")
        or url.startswith("sqlite:////")
        or any(mark in str(root) for mark in "?#")  # (a URL cannot carry them in its path: left as it was)
    ):
        return url
    return f"sqlite:///{root / url.removeprefix('sqlite:///')}"
