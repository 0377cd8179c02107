"""What every command shares: the store option, output, and the one place where errors become messages.

This module stays light (click and the error classes): `agentwatch --help` imports it and nothing heavier.
The store, the live ring, the roster and rich load inside the functions that need them.

Errors (`run_cli`) never print a traceback. Exit codes (`ExitCode`): 0 done, 1 failed or refused, 2 usage
(a bad flag, argument or flag value, named as the flag: `--max-chars`), 3 timed out, 130 interrupted. With
`--json` the error is printed to stdout as `{"error": {"code": ..., "message": ..., "details": ...}}`; a usage
error's code is `invalid_argument` and its `details.flags` names the flags (or ARGUMENTS) at fault. A call an
error suggests (`agentwatch.errors.Suggestion`, worded for a tool's caller: `run_list {entity: 'workflow:report'}`)
is worded as the command that makes it: `agentwatch runs ls --entity workflow:report` (`SUGGESTED_COMMANDS`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shlex
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple, NoReturn, TypeVar

import click

from agentwatch.errors import AgentwatchError, InvalidArgument, InvalidCursor, NotFound, Suggestion

if TYPE_CHECKING:
    from rich.console import Console

    from agentwatch.config import Config
    from agentwatch.live import LiveRing
    from agentwatch.runtime.roster import AgentDefinition, Roster
    from agentwatch.store import Store

    console: Console
    """Standard output, through rich (created on first use)."""
    err_console: Console
    """Standard error, through rich (created on first use)."""

__all__ = [
    "AGENTS_DIR_HELP",
    "MINUTES",
    "SECONDS",
    "SUGGESTED_COMMANDS",
    "TEXT",
    "TEXT_OR_STDIN",
    "ExitCode",
    "Reader",
    "SuggestedCommand",
    "call_tool",
    "command_for",
    "console",
    "err_console",
    "existing_store",
    "harden",
    "json_option",
    "open_reader",
    "print_json",
    "resolve_config",
    "resolve_id",
    "run_async",
    "run_cli",
    "store_option",
    "worded_as_commands",
    "worded_for_a_person",
]

T = TypeVar("T")


class ExitCode(IntEnum):
    """What the process's exit status says happened."""

    DONE = 0
    FAILED = 1
    """The command ran and failed, or what it asked was refused (not found, ambiguous, a store error, ...)."""
    USAGE = 2
    """The command line itself is wrong: an unknown flag, a missing argument, a value out of range."""
    TIMED_OUT = 3
    INTERRUPTED = 130


_consoles: dict[str, Console] = {}


def __getattr__(name: str) -> Any:
    # rich costs ~0.2 s to import: the consoles are made when a command first prints, not for `--help`.
    if name in ("console", "err_console"):
        return _console(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _console(name: str) -> Console:
    if name not in _consoles:
        from rich.console import Console

        # No automatic highlighting: it coloured agents' own words as code (`request(s)` as a call); what
        # matters is styled by the markup that prints it.
        made = Console(stderr=name == "err_console", highlight=False)
        made.soft_wrap = not made.is_terminal  # piped or redirected: lines are never wrapped nor cut
        _consoles[name] = made
    return _consoles[name]


# -- options and parameter types -------------------------------------------------------------------------


def store_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`--store URL`: the store to use (default: AGENTWATCH_STORE, then agentwatch.toml, then ./.agentwatch)."""
    return click.option(
        "--store",
        "store_url",
        metavar="URL",
        type=StoreUrl(),
        default=None,
        help="Store URL (sqlite:///path.db or postgresql://...), or the path of a SQLite store file. Default: "
        "$AGENTWATCH_STORE, agentwatch.toml's store (either one a URL or a path too), then "
        ".agentwatch/agentwatch.db under the project root.",
    )(fn)


def json_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`--json`: print exactly the dict the matching tool returns (and errors as JSON)."""
    return click.option("--json", "as_json", is_flag=True, help="Print the tool's answer as JSON, exactly.")(fn)


class Text(click.types.StringParamType):
    """A string that can be stored: no NUL byte, no bytes that are not UTF-8 (lone surrogates in `argv`)."""

    name = "text"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = super().convert(value, param, ctx)
        if "\x00" in text:
            self.fail("contains a NUL byte", param, ctx)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            self.fail(f"{_safe(text)} is not valid UTF-8 text", param, ctx)
        return text


class StoreUrl(Text):
    """A store URL, or the path of a SQLite store file (`agentwatch.store.store_url`): as the store's URL."""

    name = "url"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = super().convert(value, param, ctx)
        if not text:
            return text  # (none given: the configured store)
        from agentwatch.store import store_url

        try:
            return store_url(text)
        except InvalidArgument as exc:
            self.fail(exc.message, param, ctx)


class TextOrStdin(Text):
    """`Text`, or `-` for what standard input holds (without its last newline): a long or many-line text that
    a shell could not pass as an argument."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value == "-":
            if sys.stdin.isatty():
                click.echo("reading it from standard input: end with Ctrl-D", err=True)
            try:
                value = sys.stdin.read()
            except UnicodeDecodeError:
                self.fail("standard input is not UTF-8 text", param, ctx)
            value = value.removesuffix("\n").removesuffix("\r")
        return super().convert(value, param, ctx)


class Directory(click.Path):
    """A directory's path: click's own path, refusing a NUL byte (the file system cannot name it)."""

    def __init__(self) -> None:
        super().__init__(file_okay=False, path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and "\x00" in value:
            self.fail("contains a NUL byte, which no path can hold", param, ctx)
        return super().convert(value, param, ctx)


class Span(click.types.FloatParamType):
    """A length of time in `unit`s: a finite number from 0 to `most` (click's own float takes nan and inf)."""

    def __init__(self, most: float, unit: str) -> None:
        self.most = most
        self.unit = unit
        self.name = unit

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number) or not 0 <= number <= self.most:
            self.fail(f"{value!s} is not a number of {self.unit} from 0 to {self.most:g}", param, ctx)
        return number


TEXT = Text()
TEXT_OR_STDIN = TextOrStdin()
DIRECTORY = Directory()
AGENTS_DIR_HELP = "The agents directory (default: agents_dir in agentwatch.toml, else agents/)."
SECONDS = Span(7 * 86400.0, "seconds")
"""A wait of up to a week."""
MINUTES = Span(7 * 24 * 60.0, "minutes")
"""A wait of up to a week, in minutes."""


def harden(command: click.Command) -> click.Command:
    """Give every plain string parameter of `command` (and of its subcommands) the `TEXT` type.

    Run on each command as the group loads it, so that no command can forget it: a lone surrogate or a NUL
    byte is refused as a usage error naming the flag, before anything reaches a tool or the store.
    """
    for param in command.params:
        if type(param.type) is click.types.StringParamType:
            param.type = TEXT
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            harden(sub)
    return command


# -- reading the store -----------------------------------------------------------------------------------


class Reader:
    """What the read commands need, without an engine: no turn is continued, no background work runs.

    The roster (the agent definitions, parsed from their files) is read on first use: `tail` and `history`
    never need it, `ls` and `get` do (each role's stuck threshold, its model and grant).
    """

    def __init__(self, config: Config, store: Store, ring: LiveRing, roster: Roster | None = None) -> None:
        self.config = config
        self.store = store
        self.ring = ring
        self._roster = roster
        self.runs_agents = False
        """It runs no agent: a role its roster lacks is no reason one does not run."""

    @property
    def roster(self) -> Roster:
        """The agent definitions of the project's agents directory, with its model aliases, and those its setup
        builds in Python (`setup`): the roles a service of the project runs, so a read says `stuck` as its
        engine would."""
        if self._roster is None:
            from agentwatch.runtime.models.refs import ModelResolver
            from agentwatch.runtime.roster import load_roster

            config = self.config
            agents_dir = config.agents_dir if config.agents_dir.is_absolute() else config.root / config.agents_dir
            extra = _setup_definitions(config)
            self._roster = load_roster(agents_dir, extra=extra, models=ModelResolver.from_config(config))
        return self._roster

    def stuck_after(self, role: str) -> float:
        """The role's stuck threshold in seconds."""
        return self.roster.session_settings(role, self.config.sessions).stuck_after_seconds


def _setup_definitions(config: Config) -> list[AgentDefinition]:
    """The agent definitions the project's setup builds in Python; none without a setup, or when it does not
    load (said on stderr: the roles it defines are then read with the project's default thresholds)."""
    if config.setup is None:
        return []
    from agentwatch.runtime.setup import load_setup

    try:
        return list(load_setup(config).get("definitions", ()))
    except AgentwatchError as exc:
        _warn_once(f"{exc}; the roles it defines are read with the project's defaults")
        return []


def existing_store(url: str) -> None:
    """Refuse a SQLite store file that does not exist, or is empty: reading must not create one (SQLite would
    take an empty file for a new database)."""
    from agentwatch.store import refuse_missing_file

    try:
        refuse_missing_file(url)
    except NotFound as exc:
        raise NotFound(f"{exc.message}; pass --store (or set AGENTWATCH_STORE) to read another one") from None


@contextlib.asynccontextmanager
async def open_reader(config: Config) -> AsyncIterator[Reader]:
    """Open an existing store (and the live ring when it is shared, i.e. Redis) for reading."""
    from agentwatch.live import connect_live
    from agentwatch.store import connect_store

    existing_store(config.store)
    store = await connect_store(config.store, create=False)
    try:
        try:
            ring = await connect_live(config.live)
        except AgentwatchError as exc:  # a view only: what the store holds is read all the same
            from rich.markup import escape

            _console("err_console").print(
                f"[yellow]{escape(str(exc))}; reading the store alone (no streamed events)[/]"
            )
            ring = await connect_live("memory://")
        try:
            yield Reader(config, store, ring)
        finally:
            await ring.close()
    finally:
        await store.close()


def project_root(start: Path) -> Path:
    """Where the project is for a command run at `start`: the nearest directory from it upwards that holds
    agentwatch.toml (a command run in a subdirectory of the project), else `start` itself."""
    from agentwatch.config import CONFIG_FILE

    here = start.resolve()
    for directory in (here, *here.parents):
        if (directory / CONFIG_FILE).is_file():
            return start if directory == here else directory
    return start


def resolve_config(
    store_url: str | None = None,
    root: Path | None = None,
    *,
    setup: str | None = None,
    agents_dir: Path | None = None,
    reading: bool = False,
) -> Config:
    """The project configuration, with `--store` (and `--setup`, `--agents-dir`) applied over it.

    `reading`: a command that only reads, given a store (`--store`, AGENTWATCH_STORE), reads it with the
    default settings when agentwatch.toml (or a variable) is broken, saying so: a broken file must not keep
    anyone from reading their agents (in an incident, say)."""
    from agentwatch.config import Config, env_store, load_config

    root = root or project_root(Path("."))
    try:
        config = load_config(root)
    except InvalidArgument as exc:
        try:
            store = store_url or env_store(os.environ)
        except InvalidArgument:
            store = None  # (the variable is what is broken: the error above says so)
        if not (reading and store):
            raise exc from None
        from agentwatch.store import hide_password

        _warn_once(f"{exc.message}; reading {hide_password(store)} with the default settings")
        config = Config(root=root, store=store)
    if store_url:
        config = config.model_copy(update={"store": store_url})
    if setup:
        from agentwatch.config import setup_ref

        try:
            config = config.model_copy(update={"setup": setup_ref(setup)})
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--setup") from None
    if agents_dir is not None:
        config = config.model_copy(update={"agents_dir": agents_dir})
    return config


_warned: set[str] = set()


def _warn_once(text: str) -> None:
    if text not in _warned:
        _warned.add(text)
        from rich.markup import escape

        _console("err_console").print(f"[yellow]{escape(text)}[/]", soft_wrap=True)


def setup_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`--setup MODULE:NAME`: the project's Python for the engine (see `agentwatch.runtime.setup`)."""
    return click.option(
        "--setup",
        "setup",
        metavar="MODULE:NAME",
        default=None,
        help="Your project's tools, policies, models, heartbeats, hooks or definitions for the engine: a mapping of "
        "them (or a function returning one) in a module of the project. Default: $AGENTWATCH_SETUP, then setup "
        "in agentwatch.toml.",
    )(fn)


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine."""
    import asyncio

    return asyncio.run(coro)


async def resolve_id(reader: Reader, agent: str, *, scope: str | None) -> str:
    """The session id `agent` names: an id as it is, a name resolved as `agent_get` does (ambiguity refused,
    with the candidates' ids)."""
    if agent.startswith("ses_"):
        return agent
    from agentwatch.reads.get import GetArgs, resolve_name
    from agentwatch.tools import Caller, parse_args

    try:
        args = parse_args(GetArgs, "agent_get", {"name": agent})
    except InvalidArgument as exc:
        raise flag_error(exc, {"name": "AGENT"}, {}) from None
    assert args.name is not None
    return await resolve_name(reader.store, args.name, caller=Caller(scope=scope))


def call_tool(
    store_url: str | None,
    tool: str,
    args: dict[str, Any],
    flags: Mapping[str, str],
    scope: str | None = None,
    *,
    agent: str | None = None,
) -> dict[str, Any]:
    """Run one read tool against the configured store and return its dict.

    `flags` maps the tool's argument names to the flags (or ARGUMENTS) that gave them: a refused argument
    is reported as the flag the person typed (`--max-chars`, not `maxChars`), as a usage error. `agent`
    names the argument that takes an agent's id, which the command also accepts as a name.
    """
    from agentwatch.reads.tools import read_tool
    from agentwatch.tools import Caller

    handler = read_tool(tool).handler

    async def main() -> dict[str, Any]:
        async with open_reader(resolve_config(store_url, reading=True)) as reader:
            if agent is not None:
                args[agent] = await resolve_id(reader, args[agent], scope=scope)
            result = await handler(reader, Caller(scope=scope), args)
            assert isinstance(result, dict)
            return result

    try:
        return run_async(main())
    except InvalidArgument as exc:
        raise flag_error(exc, flags, args) from None


_CURSOR_ARGS = ("cursor", "afterId")
"""The arguments that take a cursor: a refused cursor is theirs even when the error names no argument."""


def _argument_named(field: str) -> str:
    """Where a message names the argument `field`: a camelCase name (`maxChars`) anywhere; a plain word (`types`,
    `cursor`) only where it stands for the argument, at the message's start or in backquotes (`the types are ...`,
    `pass back the cursor` use it as a word, and read wrong as `the --types are ...`)."""
    name = re.escape(field)
    if field.lower() != field:
        return rf"(?<![\w-]){name}(?![\w-])"
    return rf"^{name}(?![\w-])|(?<=`){name}(?=`)"


def flag_error(error: InvalidArgument, flags: Mapping[str, str], args: Mapping[str, Any]) -> InvalidArgument:
    """`error` with the tool's argument names replaced by the CLI's flags, marked as a usage error. An error that
    names its flags already is a check of the command's own, in the command line's words: it stands as it is."""
    if error.details.get("flags"):
        return error
    problems = error.details.get("problems")
    named: list[str] = []
    if isinstance(error, InvalidCursor):
        named += [flags[name] for name in _CURSOR_ARGS if name in args and name in flags]
    if isinstance(problems, list) and problems and all(isinstance(p, str) for p in problems):
        lines = []
        for problem in problems:
            where, sep, what = problem.partition(": ")
            field = re.split(r"[.\[]", where, maxsplit=1)[0]
            if sep and field in flags:
                named.append(flags[field])
                lines.append(f"{flags[field]}: {what}")
            else:
                lines.append(problem)
        message = "; ".join(lines)
    else:
        message = error.message
        for field, flag in sorted(flags.items(), key=lambda item: -len(item[0])):
            pattern = _argument_named(field)
            if re.search(pattern, message):
                named.append(flag)
                message = re.sub(pattern, flag, message)
    fields = error.details.get("fields")
    if isinstance(fields, list):
        named += [flags[f] for f in fields if isinstance(f, str) and f in flags]
    details = {k: v for k, v in error.details.items() if k not in ("problems", "fields")}
    if not named:
        return error.reworded(message, **details)
    if not any(flag in message for flag in named):
        message = f"{', '.join(sorted(set(named)))}: {message}"
    return error.reworded(message, **details, flags=sorted(set(named)))


# -- suggested calls ---------------------------------------------------------------------------------------


class SuggestedCommand(NamedTuple):
    """The command that makes a tool's call: its words after `agentwatch`, and the flag (or ARGUMENT, in the
    order the command takes them) of each argument, as the command's `flags` map names them."""

    command: str
    flags: Mapping[str, str]
    then: tuple[str, ...] = ()
    """Words after the arguments (a flag that shows what the suggestion is about)."""


SUGGESTED_COMMANDS: Final[Mapping[str, SuggestedCommand]] = {
    "agent_list": SuggestedCommand("ls", {"q": "-q", "deleted": "--all", "groupKey": "--group-key", "role": "--role"}),
    "agent_get": SuggestedCommand("get", {"id": "AGENT", "name": "AGENT"}),
    # (its `conversations`, what it is suggested for, are in the answer, not in the transcript printed)
    "agent_history": SuggestedCommand("history", {"id": "AGENT", "conversationId": "--conversation"}, ("--json",)),
    "agent_delete": SuggestedCommand("delete", {"id": "AGENT"}),
    "run_list": SuggestedCommand("runs ls", {"entity": "--entity", "kind": "--kind", "status": "--status"}),
    "run_trace": SuggestedCommand("runs trace", {"id": "RUN"}),
}
"""The commands of the tools that errors suggest calling (`Suggestion`), by tool."""


def command_for(suggestion: Suggestion) -> str | None:
    """The command line that makes `suggestion`'s call, quoted for a shell; None when no command makes it as
    given (a tool, or an argument, that `SUGGESTED_COMMANDS` has no command or flag for)."""
    form = SUGGESTED_COMMANDS.get(suggestion.tool)
    if form is None:
        return None
    arguments: list[str] = []
    options: list[str] = []
    for name, value in suggestion.arguments.items():
        flag = form.flags.get(name)
        if flag is None:
            return None
        if not flag.startswith("-"):
            arguments.append(str(value))
        elif value is True:
            options.append(flag)
        elif isinstance(value, list):
            options += [word for item in value for word in (flag, str(item))]
        elif value is not None and value is not False:
            options += [flag, str(value)]
    return shlex.join(["agentwatch", *form.command.split(), *arguments, *options, *form.then])


def _as_is(text: str) -> Callable[[re.Match[str]], str]:
    """A replacement that is `text` as it is (a template would read a backslash in a name)."""
    return lambda _: text


def worded_as_commands(text: str, suggestions: Sequence[Suggestion]) -> str:
    """`text` with each of `suggestions` it words as a tool call worded as the command that makes it, in
    backquotes (where an agent reads `agent_list {q: 'nova'}`, a person reads `agentwatch ls -q nova`)."""
    for suggestion in sorted(suggestions, key=lambda s: len(str(s)), reverse=True):  # (`run_list {...}` first)
        command = command_for(suggestion)
        if command is not None:
            said = rf"(?<![\w`]){re.escape(str(suggestion))}(?![\w`])"
            text = re.sub(said, _as_is(f"`{command}`"), text)
    return text


def worded_for_a_person(error: AgentwatchError) -> AgentwatchError:
    """`error` with each call its message suggests worded as the command that makes it (`worded_as_commands`)."""
    message = worded_as_commands(error.message, error.suggestions)
    return error if message == error.message else error.reworded(message, **error.details)


# -- output ----------------------------------------------------------------------------------------------


def print_json(value: Any) -> None:
    """Print a tool's dict as JSON, exactly (ASCII-escaped, so any text prints)."""
    click.echo(json.dumps(value, indent=2, default=str))


def _safe(text: str, limit: int = 80) -> str:
    """`text` in repr form, cut to `limit`, printable whatever it holds."""
    return ascii(text) if len(text) <= limit else ascii(text[:limit]) + "…"


def _flag_of(param: click.Parameter | None) -> str | None:
    if param is None:
        return None
    if isinstance(param, click.Option):
        return max(param.opts, key=len)
    return (param.human_readable_name or "").upper() or None


def _usage_error(exc: click.UsageError) -> dict[str, Any]:
    details: dict[str, Any] = {}
    flag = _flag_of(getattr(exc, "param", None)) or getattr(exc, "option_name", None)
    if flag:
        details["flags"] = [flag]
    error: dict[str, Any] = {"code": "invalid_argument", "message": exc.format_message()}
    if details:
        error["details"] = details
    return {"error": error}


def _store_module(exc: BaseException) -> bool:
    return type(exc).__module__.split(".")[0] in ("sqlite3", "psycopg", "psycopg_pool", "redis")


def _report(error: dict[str, Any], text: str, as_json: bool) -> None:
    if as_json:
        print_json(error)
    else:
        click.echo(text, err=True)


def run_cli(group: click.Group, args: Sequence[str] | None = None, **extra: Any) -> NoReturn:
    """Run `group` as the `agentwatch` command: every error becomes a message and an `ExitCode`, never a
    traceback (set AGENTWATCH_DEBUG=1 to see the traceback of an unexpected error)."""
    argv = list(sys.argv[1:] if args is None else args)
    as_json = "--json" in argv
    extra.pop("standalone_mode", None)
    code: int = ExitCode.DONE
    try:
        result = click.Group.main(group, argv, standalone_mode=False, **extra)
        code = result if isinstance(result, int) else ExitCode.DONE
    except (click.exceptions.Abort, KeyboardInterrupt):
        # On stderr even with --json: standard output may be a stream of JSON lines (`tail -f --json`), which
        # a multi-line error object would break; the exit status (130) says it.
        click.echo("interrupted", err=True)
        code = ExitCode.INTERRUPTED
    except click.UsageError as exc:
        if as_json:
            print_json(_usage_error(exc))
        else:
            exc.show()
        code = ExitCode.USAGE
    except click.ClickException as exc:
        _report(
            {"error": {"code": "error", "message": exc.format_message()}}, f"Error: {exc.format_message()}", as_json
        )
        code = exc.exit_code
    except AgentwatchError as exc:
        shown = worded_for_a_person(exc)
        _report(shown.to_dict(), f"error ({shown.code}): {shown.message}", as_json)
        code = ExitCode.USAGE if "flags" in exc.details else ExitCode.FAILED
    except BrokenPipeError:
        # The reader went away (`agentwatch ls | head -1`): stop quietly, and keep Python from complaining
        # when it flushes standard output at exit.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = ExitCode.FAILED
    except OSError as exc:
        where = f": {exc.filename!s}" if exc.filename else ""
        message = f"{exc.strerror or exc}{where}"
        _report({"error": {"code": "os_error", "message": message}}, f"error (os_error): {message}", as_json)
        code = ExitCode.FAILED
    except Exception as exc:
        if os.environ.get("AGENTWATCH_DEBUG"):
            raise
        kind = "store_error" if _store_module(exc) else "internal"
        what = "the store failed" if kind == "store_error" else f"unexpected {type(exc).__name__}"
        message = f"{what}: {exc} (set AGENTWATCH_DEBUG=1 to see the traceback)"
        _report({"error": {"code": kind, "message": message}}, f"error ({kind}): {message}", as_json)
        code = ExitCode.FAILED
    sys.exit(code)
