"""Acting commands: `create`, `answer`, `approve`, `deny`, `send`, `stop`, `escalate`, `take-over`, `hand-back`,
`delete`.

Each is one call of a drive tool (`agent_create`, `agent_answer`, `agent_enqueue`, `agent_stop`,
`agent_escalate`, `agent_take_over`, `agent_hand_back`, `agent_delete`) on the store, with the tool's JSON
(`--json`) and its errors. Every command takes an agent's name or id (`create` a role); `answer`, `approve`,
`deny` and `escalate` also take a request id (`req_...`), and given an agent they act on its one pending
request (several are refused, with their ids).

With a running service (`--server`, `AGENTWATCH_SERVER`, or a local `agentwatch serve` on the same store)
the tool is called through it (`POST /api/tools/{name}`), and the service's engine acts at once: it stops
its own running turns too. Otherwise the command writes through an engine that runs no turn
(`acting_engine`): an answer or an input is recorded and left for the engine that runs the session (a `run`
still going), which picks it up after its current turn; when no engine is running, the next one to start
continues the session. There `stop` and `delete` act at once on a session whose turn is paused or not
running; a turn running in another engine is stopped by that engine, asked through the store. The output
and exit codes are the same either way: one code path renders the tool's answer.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import click

from agentwatch.cli._common import (
    AGENTS_DIR_HELP,
    DIRECTORY,
    TEXT_OR_STDIN,
    existing_store,
    flag_error,
    json_option,
    print_json,
    resolve_config,
    run_async,
    setup_option,
    store_option,
)
from agentwatch.cli.remote import Service, find_service, server_option
from agentwatch.errors import AgentwatchError, Conflict, InvalidArgument, NotFound

if TYPE_CHECKING:
    from pathlib import Path

    from agentwatch.config import Config
    from agentwatch.runtime.engine import Engine
    from agentwatch.store import RequestRecord

__all__ = [
    "Link",
    "OnStore",
    "ThroughService",
    "acting_engine",
    "answer",
    "approve",
    "create",
    "delete",
    "deny",
    "escalate",
    "hand_back",
    "send",
    "stop",
    "take_over",
]


@contextlib.asynccontextmanager
async def acting_engine(config: Config, *, existing: bool = True, **options: Any) -> AsyncIterator[Engine]:
    """An engine on an existing store (a new one too, unless `existing`) that writes (answers, inputs, stops)
    but never runs a turn: it starts no turn loop, no sweep and no model layer, and takes no lease. Work it
    queues is left with an expired lease when the session has no live owner, so whichever engine runs (or
    starts next) takes it over at once; a live owner keeps its lease and picks the work up after its turn.
    `options` go to `Engine.open` (the project's setup, for the definitions it adds)."""
    from agentwatch.runtime.engine import Engine

    if existing:
        existing_store(config.store)
    async with Engine.open(config=config, runs_turns=False, **options) as engine:
        yield engine


class Link(Protocol):
    """Where an acting command acts: on the store through an `acting_engine`, or through a service."""

    async def session_id(self, agent: str) -> str:
        """The session id an agent's name or id names (`agent_get`'s resolution)."""
        ...

    async def pending(self, session_id: str) -> list[RequestRecord]:
        """The session's pending requests, oldest first."""
        ...

    async def request(self, request_id: str) -> RequestRecord:
        """One request by id."""
        ...

    async def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """Call the drive tool; its answer, or its error raised."""
        ...


class OnStore:
    """Acting on the store, through an engine that runs no turn."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def session_id(self, agent: str) -> str:
        from agentwatch.cli._common import Reader, resolve_id

        engine = self.engine
        return await resolve_id(Reader(engine.config, engine.store, engine.ring, engine.roster), agent, scope=None)

    async def pending(self, session_id: str) -> list[RequestRecord]:
        return await self.engine.store.list_requests(session_id=session_id, status="pending", limit=100)

    async def request(self, request_id: str) -> RequestRecord:
        return await self.engine.store.get_request(request_id)

    async def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        from agentwatch.tools import Caller

        result = await self.engine.tools[tool].handler(self.engine, Caller(), args)
        assert isinstance(result, dict)
        return result


class ThroughService:
    """Acting through a running service: every lookup is a tool call too, so no store is needed here."""

    def __init__(self, service: Service) -> None:
        self.service = service

    async def session_id(self, agent: str) -> str:
        return self.service.resolve(agent)

    async def pending(self, session_id: str) -> list[RequestRecord]:
        from agentwatch.store import RequestRecord

        export = self.service.answer("agent_export", {"id": session_id})
        found = [RequestRecord.model_validate(r) for r in export["requests"] if r.get("status") == "pending"]
        return sorted(found, key=lambda r: r.created_at)

    async def request(self, request_id: str) -> RequestRecord:
        # No tool reads a request by id: it is among the pending requests of a session waiting on one.
        cursor: str | None = None
        while True:
            args: dict[str, Any] = {"status": ["awaiting_input"], "limit": 100}
            if cursor:
                args["cursor"] = cursor
            page = self.service.answer("agent_list", args)
            for row in page["agents"]:
                for request in await self.pending(row["id"]):
                    if request.id == request_id:
                        return request
            cursor = page.get("nextCursor")
            if not cursor:
                raise NotFound(f"no pending request {request_id!r}: it was answered, dismissed, or never opened")

    async def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        return self.service.answer(tool, args)


@contextlib.asynccontextmanager
async def _link(store_url: str | None, config: Config | None = None) -> AsyncIterator[Link]:
    """The service when one runs, else the store; given `config` (a command that creates an agent), the
    store may be new, and the project's setup adds its definitions."""
    service = find_service(store_url)
    if service is not None:
        yield ThroughService(service)
        return
    if config is None:
        async with acting_engine(resolve_config(store_url)) as engine:
            yield OnStore(engine)
        return
    from agentwatch.runtime.setup import load_setup

    async with acting_engine(config, existing=False, **load_setup(config)) as engine:
        yield OnStore(engine)


Prepare = Callable[[Link, dict[str, Any]], Awaitable[None]]


def act(
    store_url: str | None,
    tool: str,
    args: dict[str, Any],
    flags: Mapping[str, str],
    *,
    agent: str | None = None,
    request: str | None = None,
    held: bool = False,
    prepare: Prepare | None = None,
    config: Config | None = None,
) -> dict[str, Any]:
    """Call the drive tool `tool` with `args` through the service, or on the store; returns its dict.

    `agent` names the argument that takes a session id (given as a name or an id); `request` the one that
    takes a request id (given as `req_...`, or an agent whose one pending request it is; `held` looks for one
    held for its parent). `prepare(link, args)` runs before the call (checks that need the requests).
    `config` (a command that creates an agent): on the store, it may be new, and the setup adds definitions.
    """

    async def main() -> dict[str, Any]:
        async with _link(store_url, config) as link:
            if agent is not None:
                args[agent] = await link.session_id(args[agent])
            if request is not None:
                args[request] = (await _request_of(link, args[request], held=held)).id
            if prepare is not None:
                await prepare(link, args)
            return await link.call(tool, args)

    try:
        return run_async(main())
    except InvalidArgument as exc:
        raise flag_error(exc, flags, args) from None


async def _request_of(link: Link, given: str, *, held: bool = False) -> RequestRecord:
    """The request `given` names: a request id, or an agent (name or id) with exactly one pending request."""
    if given.startswith("req_"):
        return await link.request(given)
    session_id = await link.session_id(given)
    pending = await link.pending(session_id)
    with_a_person = [r for r in pending if r.waits_on != "parent"]
    if held:
        pending = [r for r in pending if r.waits_on == "parent"]
    what = "request held for its parent" if held else "pending request"
    if not pending and held and with_a_person:  # escalated already (or asked of a person from the start)
        ids = ", ".join(r.id for r in with_a_person)
        raise Conflict(
            f"agent {given!r} has no {what}: {ids} already wait(s) on a person; answer with `agentwatch answer`"
        )
    if not pending:
        raise NotFound(f"agent {given!r} ({session_id}) has no {what}")
    if len(pending) > 1:
        ids = ", ".join(f"{r.id} ({r.summary[:60]})" for r in pending)
        raise Conflict(f"agent {given!r} has {len(pending)} {what}s; name one by its id: {ids}")
    return pending[0]


def _say(result: dict[str, Any], as_json: bool, text: str | Callable[[], str]) -> None:
    """The tool's answer with --json, else `text` (a function: made only then, when it asks the service)."""
    if as_json:
        print_json(result)
    else:
        click.echo(text() if callable(text) else text)


def _named(record: Mapping[str, Any]) -> str:
    """An agent as the commands name it (`created nova (ses_...)`): its name, then its id."""
    return f"{record['name']} ({record['id']})"


def _agent_named(store_url: str | None, session_id: str) -> str:
    """`_named` for the agent `session_id`, read where the command acted (the service, else the store); its id
    alone when it cannot be read (the action is done all the same: only the sentence is at stake)."""
    from agentwatch.cli.remote import read

    try:
        return _named(read(store_url, "agent_get", {"id": session_id}, {}))
    except AgentwatchError:
        return session_id


def _left(store_url: str | None, session_id: str, role: str | None = None) -> str:
    """Who takes the work up: the service it went through when it runs the agent's role (`role`, else read),
    else an engine that has the role; on the store, the engine that runs the agent."""
    service = find_service(store_url)  # (the one this command used: found once per command)
    if service is not None:
        try:
            role = role or str(service.answer("agent_get", {"id": session_id})["role"])
            roles = {row["name"] for row in service.answer("agent_roles", {})["roles"]}
        except AgentwatchError:  # (the work is handed over all the same: only the sentence is at stake)
            roles = {role}
        if role in roles:
            return f"the service at {service.url} continues it now"
        return (
            f"the service at {service.url} has no agent type {role!r}, so it leaves the work to an engine that has "
            "it (one open on this store takes it within a second, else the next one opened with it)"
        )
    return (
        "the engine that runs the agent continues it (a running `agentwatch run` after its turn; else the next "
        "engine to open the store: `agentwatch serve`)"
    )


# -- answer, approve, deny ------------------------------------------------------------------------------


@click.command("answer", short_help="Answer an agent's question (or pick an option with --choice).")
@click.argument("request_id", metavar="ID")
@click.argument("text", required=False, type=TEXT_OR_STDIN)
@click.option(
    "--choice",
    "choices",
    type=click.IntRange(min=1),
    multiple=True,
    metavar="N",
    help="Pick option N of a choice (1 is the first); repeat it for a choice that takes several.",
)
@store_option
@server_option
@json_option
def answer(request_id: str, text: str | None, choices: tuple[int, ...], store_url: str | None, as_json: bool) -> None:
    """Answer the request ID with TEXT (`-`: read it from standard input), or with option N of a choice
    (`--choice N`).

    ID is a request id (req_..., `current.pendingHitl.hitlId`) or an agent's name or id whose one pending
    request is answered. This is the `agent_answer` tool.

    \b
    Examples:
      agentwatch answer asker "Use the staging database"
      agentwatch answer picker --choice 2
    """
    if (text is None) == (not choices):
        raise click.UsageError("give the answer as TEXT or as --choice N (one of them)")

    async def pick(link: Link, args: dict[str, Any]) -> None:
        if not choices:
            return
        request = await link.request(args["hitlId"])
        options = request.options or []
        if not options:
            raise InvalidArgument(
                f"request {request.id} offers no options; give the answer as text", flags=["--choice"]
            )
        wrong = [n for n in choices if n > len(options)]
        if wrong:
            listed = "; ".join(f"{n}. {o}" for n, o in enumerate(options, 1))
            raise InvalidArgument(
                f"--choice {wrong[0]} is not an option of {request.id}; its options: {listed}", flags=["--choice"]
            )
        given = request.body.get("input")
        multiple = isinstance(given, dict) and given.get("multiple") is True
        if len(choices) > 1 and not multiple:
            raise InvalidArgument(f"request {request.id} takes one option; give --choice once", flags=["--choice"])
        picked = [options[n - 1] for n in choices]
        args["answer"] = picked if multiple else picked[0]

    args: dict[str, Any] = {"hitlId": request_id, "answer": text}
    result = act(
        store_url,
        "agent_answer",
        args,
        {"hitlId": "ID", "answer": "TEXT", "choice": "--choice"},
        request="hitlId",
        prepare=pick,
    )
    _say(
        result,
        as_json,
        lambda: f"answered {result['hitlId']} of {result['agentId']}: {_left(store_url, result['agentId'])}",
    )


def _approval(request_id: str, approved: bool, message: str | None, store_url: str | None, as_json: bool) -> None:
    async def is_approval(link: Link, args: dict[str, Any]) -> None:
        request = await link.request(args["hitlId"])
        if request.kind != "approval":
            raise Conflict(
                f"request {request.id} is a {request.kind}, not an approval; answer it with `agentwatch answer`"
            )

    verdict: dict[str, Any] = {"approved": approved}
    if message:
        verdict["message"] = message
    args: dict[str, Any] = {"hitlId": request_id, "answer": verdict}
    flags = {"hitlId": "ID", "answer": "--reason" if not approved else "--message"}
    result = act(store_url, "agent_answer", args, flags, request="hitlId", prepare=is_approval)
    word = "approved" if approved else "denied"
    _say(
        result,
        as_json,
        lambda: f"{word} {result['hitlId']} of {result['agentId']}: {_left(store_url, result['agentId'])}",
    )


@click.command("approve", short_help="Approve a tool call an agent waits on.")
@click.argument("request_id", metavar="ID")
@click.option("--message", help="A note for the agent with the approval.")
@store_option
@server_option
@json_option
def approve(request_id: str, message: str | None, store_url: str | None, as_json: bool) -> None:
    """Approve the approval request ID (req_..., or an agent's name or id with one pending request).

    This is the `agent_answer` tool with `{"approved": true}`.

    \b
    Example:
      agentwatch approve deployer
    """
    _approval(request_id, True, message, store_url, as_json)


@click.command("deny", short_help="Deny a tool call an agent waits on.")
@click.argument("request_id", metavar="ID")
@click.option("--reason", help="Why, for the agent (it sees it as the tool's refusal).")
@store_option
@server_option
@json_option
def deny(request_id: str, reason: str | None, store_url: str | None, as_json: bool) -> None:
    """Deny the approval request ID (req_..., or an agent's name or id with one pending request).

    This is the `agent_answer` tool with `{"approved": false, "message": REASON}`.

    \b
    Example:
      agentwatch deny deployer --reason "Not on the production database"
    """
    _approval(request_id, False, reason, store_url, as_json)


# -- create, send, stop, escalate, delete ----------------------------------------------------------------


@click.command("create", short_help="Create an agent, with a first input when given; returns at once.")
@click.argument("role")
@click.argument("prompt", required=False, type=TEXT_OR_STDIN)
@click.option("--name", help="A name for the new agent, unique among live agents (made up when absent).")
@click.option("--agents-dir", type=DIRECTORY, help=AGENTS_DIR_HELP)
@store_option
@server_option
@setup_option
@json_option
def create(
    role: str,
    prompt: str | None,
    name: str | None,
    agents_dir: Path | None,
    store_url: str | None,
    setup: str | None,
    as_json: bool,
) -> None:
    """Create an agent of ROLE (an agent type in the agents directory), with PROMPT (`-`: read it from
    standard input) queued as its first input when given, and return at once: `run` follows the turn
    instead. This is the `agent_create` tool.

    With a running service the agent is created there (its role from the service's agents directory) and its
    turn starts at once; otherwise it is created in the store, and the next engine to open the store
    (`agentwatch serve`) runs it.

    \b
    Example:
      agentwatch create coder "Fix the flaky test" --name fixer   (then: agentwatch tail fixer -f)
    """
    args: dict[str, Any] = {"role": role}
    if prompt is not None:
        args["prompt"] = prompt
    if name is not None:
        args["name"] = name
    service = find_service(store_url)
    if service is not None and (setup or agents_dir):
        from agentwatch.cli._common import err_console

        unused = " and ".join(flag for flag, given in (("--agents-dir", agents_dir), ("--setup", setup)) if given)
        err_console.print(f"{unused} not used: the service at {service.url} has its own roles and setup")

    config = resolve_config(store_url, setup=setup, agents_dir=agents_dir)
    result = act(store_url, "agent_create", args, {"role": "ROLE", "prompt": "PROMPT", "name": "--name"}, config=config)

    def created() -> str:
        waiting = f", with its first input waiting: {_left(store_url, result['agentId'], role)}"
        return f"created {result['name']} ({result['agentId']}){waiting if result['pendingInputs'] else ''}"

    _say(result, as_json, created)


# -- send, stop, escalate, delete -----------------------------------------------------------------------


@click.command("send", short_help="Queue input for an agent's next turn.")
@click.argument("agent")
@click.argument("text", type=TEXT_OR_STDIN)
@click.option("--key", help="Queue once per key: a key this agent was sent before queues nothing (safe to send again).")
@store_option
@server_option
@json_option
def send(agent: str, text: str, key: str | None, store_url: str | None, as_json: bool) -> None:
    """Queue TEXT (`-`: read it from standard input) for AGENT's (a name or an id) next turn. This is the
    `agent_enqueue` tool. With --key, a script or a scheduler may send the same input again (after a timeout,
    say) without the agent getting it twice; the same key with other text is refused.

    \b
    Examples:
      agentwatch send coder "Also update the changelog"
      agentwatch send coder "Also tag the release" --key release-1.4.2
    """
    args: dict[str, Any] = {"agentId": agent, "prompt": text}
    if key is not None:
        args["key"] = key
    flags = {"agentId": "AGENT", "prompt": "TEXT", "key": "--key"}
    result = act(store_url, "agent_enqueue", args, flags, agent="agentId")
    if as_json:
        print_json(result)
        return
    from agentwatch.cli.remote import read

    record = read(store_url, "agent_get", {"id": result["agentId"]}, {})
    if result["duplicate"]:
        click.echo(f"{_named(record)} was sent this key before: nothing queued, {result['pendingInputs']} waiting")
        return
    held = record.get("interception")
    then = (
        f"it waits until {held['by']} hands the agent back" if held else _left(store_url, record["id"], record["role"])
    )
    click.echo(f"queued for {_named(record)}, {result['pendingInputs']} waiting: {then}")


@click.command("stop", short_help="Stop an agent's turn (it ends cancelled).")
@click.argument("agent")
@store_option
@server_option
@json_option
def stop(agent: str, store_url: str | None, as_json: bool) -> None:
    """Stop AGENT's (a name or an id) turn: it ends `cancelled` and its pending requests are dismissed. An
    observer agent is stopped for good, between its turns too (it is never brought back). This is the
    `agent_stop` tool. A turn running in another engine (another service, a `run`) is stopped by that engine,
    asked through the store, and this waits until it has (about a second); exits 1 if it does not within its
    lease's time.

    \b
    Example:
      agentwatch stop coder
    """

    result = act(store_url, "agent_stop", {"id": agent}, {"id": "AGENT"}, agent="id")

    def said() -> str:
        named = _agent_named(store_url, result["id"])
        if result["stopped"]:
            return f"stopped {named} (by {result['by']}): {result['status']}"
        return f"{named} had no turn to stop ({result['status']})"

    _say(result, as_json, said)


@click.command("escalate", short_help="Hand a question held for the parent agent to a person now.")
@click.argument("request_id", metavar="ID")
@store_option
@server_option
@json_option
def escalate(request_id: str, store_url: str | None, as_json: bool) -> None:
    """Hand the request ID, held for its parent agent, over to a person now (ID: req_..., or a sub-agent's
    name or id with one held request). This is the `agent_escalate` tool.

    \b
    Example:
      agentwatch escalate scout
    """
    args: dict[str, Any] = {"hitlId": request_id}
    result = act(store_url, "agent_escalate", args, {"hitlId": "ID"}, request="hitlId", held=True)
    _say(result, as_json, f"{result['hitlId']} of {result['agentId']} now waits on a person")


@click.command("delete", short_help="Delete an agent (stops its turn; readable by id until reaped).")
@click.argument("agent")
@store_option
@server_option
@json_option
def delete(agent: str, store_url: str | None, as_json: bool) -> None:
    """Soft-delete AGENT (a name or an id): its turn is stopped, and it stays readable by id until it is
    reaped. This is the `agent_delete` tool. A turn running in another engine is stopped by that engine first,
    as `stop` does.

    \b
    Example:
      agentwatch delete coder
    """

    result = act(store_url, "agent_delete", {"id": agent}, {"id": "AGENT"}, agent="id")
    _say(result, as_json, lambda: f"deleted {_agent_named(store_url, result['id'])}, reaped after {result['reapAt']}")


@click.command("take-over", short_help="Take an agent over: its inputs wait until you hand it back.")
@click.argument("agent")
@click.option("--by", help="Who takes it over (your name); 'a person' when absent.")
@store_option
@server_option
@json_option
def take_over(agent: str, by: str | None, store_url: str | None, as_json: bool) -> None:
    """Take AGENT (a name or an id) over: its queued and new inputs wait, and what you `send` it is recorded as
    yours, until `hand-back`. A turn already running goes on to its end. This is the `agent_take_over` tool.

    \b
    Example:
      agentwatch take-over coder --by ada
    """
    args: dict[str, Any] = {"id": agent}
    if by is not None:  # (an empty one is refused, not taken for none)
        args["by"] = by
    result = act(store_url, "agent_take_over", args, {"id": "AGENT", "by": "--by"}, agent="id")
    held = result["interception"] or {}
    _say(result, as_json, f"{result['id']} is held by {held.get('by')}; `agentwatch hand-back` lets it run again")


@click.command("hand-back", short_help="Hand back an agent you took over: its waiting inputs run.")
@click.argument("agent")
@store_option
@server_option
@json_option
def hand_back(agent: str, store_url: str | None, as_json: bool) -> None:
    """Hand AGENT (a name or an id) back after `take-over`: the inputs that waited run. This is the
    `agent_hand_back` tool.

    \b
    Example:
      agentwatch hand-back held
    """
    result = act(store_url, "agent_hand_back", {"id": agent}, {"id": "AGENT"}, agent="id")
    waiting = f"{result['pendingInputs']} input(s) waiting"
    _say(result, as_json, lambda: f"{result['id']} is handed back ({waiting}): {_left(store_url, result['id'])}")
