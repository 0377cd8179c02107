"""`agentwatch runs`: the run reads (`run_list`, `run_trace`, `run_compare`, `run_history`) on the command line,
and `runs fire` (`hook_fire`).

Each read calls its tool exactly as an agent would (through a running service when there is one, else on the
store, read-only); `--json` prints the tool's dict and nothing else. `fire` hands the fire to a running
service, or, with none, runs it in this process and waits for its end (as `agentwatch run` does).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from agentwatch.cli._common import (
    SECONDS,
    ExitCode,
    json_option,
    print_json,
    resolve_config,
    run_async,
    setup_option,
    store_option,
    worded_as_commands,
)
from agentwatch.cli._time import spend
from agentwatch.cli.remote import find_service, server_option
from agentwatch.cli.remote import read as call_tool
from agentwatch.errors import Suggestion

if TYPE_CHECKING:
    from pydantic import JsonValue

    from agentwatch.cli.remote import Service
    from agentwatch.config import Config

__all__ = ["runs"]

_CODE = re.compile(r"[a-z_]+")
"""A statusReason that is a code (`gate`, `overlap`, `gate_error`) rather than a sentence."""

_Waited = tuple[str, bool]
"""How a wait for a run's end ended: the run's status, and whether --timeout passed first (the status then is
`running`, or what cutting the run off made it)."""


@click.group("runs", short_help="Runs (workflows, heartbeats, hooks): read them; fire a hook.")
def runs() -> None:
    """Runs: a workflow's phases and tasks (`engine.run` in Python), a heartbeat's tick, or a hook's fire. They
    are read from what outlives their agents (the run, its spans and journal, the spend ledger).

    \b
    Examples:
      agentwatch runs ls --entity workflow:report
      agentwatch runs trace run_...          the spans: phases, tasks, attempts, waits, turns, cost
      agentwatch runs compare run_...        against the previous finished run of the same entity
      agentwatch runs history run_... -q error
      agentwatch runs fire deploy-check '{"sha": "4f2a"}' --key 4f2a --wait
    """


@runs.command("ls", short_help="List runs, newest first.")
@click.option("--entity", help="Runs of one entity: workflow:report, heartbeat:digest.")
@click.option("--kind", help="workflow, pipeline, heartbeat, hook, or a kind a run has (any other is refused).")
@click.option("--status", multiple=True, help="Status (repeatable): running, completed, failed, skipped, ...")
@click.option("--limit", default=20, show_default=True, help="Runs per page (1..100).")
@click.option("--cursor", help="The cursor a previous page printed.")
@store_option
@server_option
@json_option
def ls(store_url: str | None, as_json: bool, entity: str | None, kind: str | None, status: tuple[str, ...],
       limit: int, cursor: str | None) -> None:  # fmt: skip
    """List runs, newest first (the `run_list` tool).

    \b
    Example:
      agentwatch runs ls --entity workflow:report --status failed
    """
    args: dict[str, Any] = {"limit": limit}
    for name, value in (("entity", entity), ("kind", kind), ("cursor", cursor)):
        if value is not None:
            args[name] = value
    if status:
        args["status"] = list(status)
    flags = {"entity": "--entity", "kind": "--kind", "status": "--status", "limit": "--limit", "cursor": "--cursor"}
    answer = call_tool(store_url, "run_list", args, flags)
    if as_json:
        print_json(answer)
        return
    from rich.markup import escape  # (a command's --help loads no rich)

    from agentwatch.cli._table import print_note, print_table

    rows = [
        [run["id"], escape(run["entity"] or run["kind"]), _status(run["status"]), run["startedAt"][:19],
         _took(run), spend(run), escape(_why(run))]
        for run in answer["runs"]
    ]  # fmt: skip
    if not rows:
        print_note(f"[dim]{escape(_no_runs(args.get('entity'), answer['entities']))}[/]")
        return
    columns: list[dict[str, Any]] = [{"no_wrap": True}, {"overflow": "ellipsis", "max_width": 32}]
    columns += [{"no_wrap": True}] * 4 + [{"overflow": "ellipsis", "max_width": 48}]
    headers = ["RUN", "ENTITY", "STATUS", "STARTED", "TOOK", "SPENT", "WHY"]
    print_table(headers, rows, columns=columns, box=None, header_style="bold")
    if answer["nextCursor"]:
        print_note(f"[dim]more: --cursor {answer['nextCursor']}[/]")


@runs.command("trace", short_help="A run's spans: phases, tasks, attempts, waits, turns, cost.")
@click.argument("run_id", metavar="RUN")
@store_option
@server_option
@json_option
def trace(run_id: str, store_url: str | None, as_json: bool) -> None:
    """A run's spans as a tree (the `run_trace` tool): phases and tasks with their attempts and back-offs, the
    requests its agents waited on and the turns they billed, each with its status, time and cost.

    \b
    Example:
      agentwatch runs trace run_...
    """
    answer = call_tool(store_url, "run_trace", {"id": run_id}, {"id": "RUN"})
    if as_json:
        print_json(answer)
        return
    from rich.markup import escape  # (a command's --help loads no rich)

    from agentwatch.cli._common import console
    from agentwatch.cli._table import print_note

    run = answer["run"]
    console.print(
        f"[bold]{escape(run['entity'] or run['kind'])}[/] [dim]{run['id']}[/]  {_status(run['status'])}  "
        f"{_took(run)}  {spend(run)}"
    )
    if run["statusReason"] and run["status"] != "completed":
        console.print(f"  [red]{escape(_why(run))}[/]")
    children: dict[str | None, list[dict[str, Any]]] = {}
    for span in answer["spans"]:
        children.setdefault(span["parentSpanId"], []).append(span)

    def show(parent: str | None, depth: int) -> None:
        for span in children.get(parent, []):
            attempt = f" (attempt {span['attempt']}/{span['attempts']})" if span["attempts"] > 1 else ""
            console.print(
                f"{'  ' * (depth + 1)}[dim]{span['kind']}[/] {escape(span['label'])}{attempt}  "
                f"{_status(span['status'])}  {_took(span)}  {spend(span)}",
                soft_wrap=True,
            )
            show(span["id"], depth + 1)

    show(None, 0)
    honesty = answer["honesty"]
    if honesty["reapedAgents"]:
        print_note(
            f"[dim]reaped agents (timing and cost kept, transcript gone): {', '.join(honesty['reapedAgents'])}[/]"
        )
    if honesty["costCoverage"] == "partial":
        print_note("[dim]cost coverage partial: the ledger no longer holds all the run billed[/]")
    if honesty["truncated"]:
        print_note("[dim]more turns than a trace draws[/]")


@runs.command("compare", short_help="Compare a run with the previous one of its entity (or --against).")
@click.argument("run_id", metavar="RUN")
@click.option("--against", help="The run to compare with (default: the previous finished run of the same entity).")
@store_option
@server_option
@json_option
def compare(run_id: str, against: str | None, store_url: str | None, as_json: bool) -> None:
    """What changed between two runs (the `run_compare` tool): time, cost, status, the spans aligned by their
    label path, the inputs leaf by leaf, the brain sha. A run still going is said to be: its figures are so far.

    \b
    Example:
      agentwatch runs compare run_... --against run_...
    """
    args: dict[str, Any] = {"id": run_id} | ({"against": against} if against else {})
    answer = call_tool(store_url, "run_compare", args, {"id": "RUN", "against": "--against"})
    if as_json:
        print_json(answer)
        return
    from rich.markup import escape  # (a command's --help loads no rich)

    from agentwatch.cli._common import console
    from agentwatch.cli._table import print_note, print_table

    if answer["against"] is None:
        print_note("[dim]nothing to compare with: no earlier finished run of the same entity[/]")
        return
    deltas = answer["deltas"]
    console.print(
        f"[bold]{answer['run']['id']}[/] against [bold]{answer['against']['id']}[/]: "
        f"time {_signed(deltas['durationMs'], 'ms')}, tokens {_signed(deltas['tokens'], '')}, "
        f"cost {_signed(deltas['costUsd'], '$')}, status {escape(deltas['status'])}"
    )
    for side in answer["stillRunning"]:
        run = answer["run" if side == "this" else "against"]
        console.print(f"[yellow]{run['id']} is still running: its figures are so far; compare again once it ends[/]")
    rows = [[escape(span["path"]), _side(span["this"]), _side(span["that"])] for span in answer["spans"]]
    if rows:
        print_table(["SPAN", "THIS RUN", "THAT RUN"], rows, box=None, header_style="bold")
    for change in answer["input"]:
        that, this = (json.dumps(change[side], ensure_ascii=False) for side in ("that", "this"))
        console.print(f"[dim]input[/] {escape(change['path'])}: {escape(that)} → {escape(this)}")
    if answer["brainSha"] and answer["brainSha"]["changed"]:
        console.print(f"[dim]brain[/] {answer['brainSha']['that']} → {answer['brainSha']['this']}")


@runs.command("history", short_help="A run's log: its agents, pipeline and journal, newest page first.")
@click.argument("run_id", metavar="RUN")
@click.option("--source", multiple=True, type=click.Choice(["agent", "pipeline", "journal"]), help="Only these logs.")
@click.option(
    "--agent", "agent_id", help="Only the events of this agent of the run, by id or name (and what it spawned)."
)
@click.option("-q", "query", help="Only entries whose text or type holds this.")
@click.option("--limit", default=50, show_default=True, help="Entries per page (1..200).")
@click.option("--max-chars", default=2000, show_default=True, help="Cap on each entry's detail (1..4000).")
@click.option("--cursor", help="The cursor a previous page printed (reads further back).")
@store_option
@server_option
@json_option
def history(run_id: str, source: tuple[str, ...], agent_id: str | None, query: str | None, limit: int,
            max_chars: int, cursor: str | None, store_url: str | None, as_json: bool) -> None:  # fmt: skip
    """A run's log (the `run_history` tool): its agents' events, the run and its spans starting and ending, and
    its journal (retries, notes), in one order; the newest page first.

    \b
    Example:
      agentwatch runs history run_... --source journal -q retry
    """
    args: dict[str, Any] = {"id": run_id, "limit": limit, "maxChars": max_chars}
    for name, value in (("agentId", agent_id), ("q", query), ("cursor", cursor)):
        if value is not None:
            args[name] = value
    if source:
        args["source"] = list(source)
    flags = {
        "id": "RUN",
        "agentId": "--agent",
        "q": "-q",
        "limit": "--limit",
        "cursor": "--cursor",
        "maxChars": "--max-chars",
        "source": "--source",
    }
    answer = call_tool(store_url, "run_history", args, flags)
    if as_json:
        print_json(answer)
        return
    from rich.markup import escape  # (a command's --help loads no rich)

    from agentwatch.cli._table import print_note, print_table

    rows = [
        [entry["at"][11:19], entry["source"], escape(_what(entry)),
         escape((entry["detail"] or "").replace("\n", " ")[:120])]
        for entry in answer["entries"]
    ]  # fmt: skip
    print_table(["AT", "SOURCE", "WHAT", "DETAIL"], rows, box=None, header_style="bold")
    if answer["nextCursor"]:
        print_note(f"[dim]older: --cursor {answer['nextCursor']}[/]")


def _what(entry: dict[str, Any]) -> str:
    """What a `run_history` entry says, each call it suggests worded as the command that makes it."""
    calls = [Suggestion.from_dict(call) for call in entry.get("suggestions") or []]
    return worded_as_commands(entry["title"] or entry["type"], [call for call in calls if call is not None])


@runs.command("fire", short_help="Fire a hook: start a run of its role with INPUT.")
@click.argument("hook")
@click.argument("input_json", metavar="[INPUT]", required=False)
@click.option("--key", help="Fire once per key: a key that fired before starts nothing and shows that run.")
@click.option("--wait", is_flag=True, help="With a service: wait until the run ends (alone, it always waits).")
@click.option(
    "--timeout",
    type=SECONDS,
    default=600.0,
    show_default=True,
    help="Seconds this command waits for the run to end (the hook's own timeout is its [hooks.<name>] timeout).",
)
@store_option
@server_option
@setup_option
@json_option
def fire(hook: str, input_json: str | None, key: str | None, wait: bool, timeout: float, store_url: str | None,
         setup: str | None, as_json: bool) -> None:  # fmt: skip
    """Fire HOOK ([hooks.<name>] in agentwatch.toml; the `hook_fire` tool): a run of its role, given the hook's
    prompt and INPUT (JSON; `-` reads it from standard input).

    With a service running (--server, AGENTWATCH_SERVER, or `agentwatch serve` on this store) the run starts
    there and this prints its id at once (`--wait` waits for its end). Alone, the run goes in this process,
    which waits for its end (a run still going at --timeout is cut off: it ends cancelled, its statusReason
    naming the timeout). Exits 1 when the run did not complete, 3 when the timeout passed first.

    With --json, a fire waited for prints the `hook_fire` answer with `status`, the run's (`timed_out`: the
    hook's own timeout passed, its agent stopped), and `waitTimedOut`, this command's (true: --timeout passed
    before the run ended; `status` is then the run's once it was cut off, `cancelled`, or with a service, where
    it goes on, `running`).

    \b
    Examples:
      agentwatch runs fire deploy-check '{"sha": "4f2a", "env": "prod"}' --key deploy-4f2a
      echo '"nightly"' | agentwatch runs fire digest - --wait
    """
    args: dict[str, Any] = {"name": hook}
    if input_json is not None:
        args["input"] = _json_input(input_json)
    if key is not None:
        args["key"] = key
    flags = {"name": "HOOK", "input": "INPUT", "key": "--key"}
    service = find_service(store_url)
    waited: _Waited | None
    if service is None:
        config = resolve_config(store_url, setup=setup)
        fired, waited = run_async(_fire_here(config, args, flags, timeout, as_json))
    else:
        if setup:
            from agentwatch.cli._common import err_console

            err_console.print(f"--setup is not used: the service at {service.url} fires the hook with its own setup")
        fired = _said(call_tool(store_url, "hook_fire", args, flags), as_json)  # (through `service`: found once)
        waited = run_async(_ended(_traced(service, fired["runId"]), timeout)) if wait else None
    if waited is None:
        if as_json:
            print_json(fired)
        return
    status, timed_out = waited
    if as_json:
        print_json({**fired, "status": status, "waitTimedOut": timed_out})
    elif not timed_out:
        from agentwatch.cli._common import console

        own = " (the hook's own timeout passed, not --timeout)" if status == "timed_out" else ""
        trace = f"`agentwatch runs trace {fired['runId']}` shows its spans"
        console.print(f"{fired['runId']} {_status(status)}{own}: {trace}", soft_wrap=True)
    if timed_out:
        from agentwatch.cli._common import err_console

        where = "it goes on in the service" if service is not None else f"it was cut off with this command ({status})"
        err_console.print(f"[yellow]--timeout passed before run {fired['runId']} ended: {where}[/]", soft_wrap=True)
        click.get_current_context().exit(ExitCode.TIMED_OUT)
    if status != "completed":
        click.get_current_context().exit(ExitCode.FAILED)


def _json_input(given: str) -> JsonValue:
    """INPUT as JSON (`-`: standard input's)."""
    text = sys.stdin.read() if given == "-" else given
    try:
        value: JsonValue = json.loads(text)
    except ValueError as exc:
        example = """'{"sha": "4f2a"}', or text quoted as a JSON string: '"nightly"'"""
        raise click.BadParameter(f"not JSON ({exc}); give an object, e.g. {example}", param_hint="INPUT") from None
    return value


def _said(fired: dict[str, Any], as_json: bool) -> dict[str, Any]:
    """`fired` (the `hook_fire` answer), said at once on a terminal's run (JSON is printed at the end)."""
    if not as_json:
        from agentwatch.cli._common import console

        if fired["duplicate"]:
            console.print(f"{fired['hook']} fired before with this key: its run is {fired['runId']} (none started)")
        else:
            console.print(f"fired {fired['hook']}: run {fired['runId']}")
    return fired


async def _fire_here(
    config: Config, args: dict[str, Any], flags: dict[str, str], timeout: float, as_json: bool
) -> tuple[dict[str, Any], _Waited]:
    """Fire in an engine of this process (no service runs) and wait for the run's end: its answer, and how the
    wait ended (a run still going at `timeout` is cancelled, and its status read once the cancel settled)."""
    from agentwatch.cli._common import err_console, flag_error
    from agentwatch.cli.act import OnStore
    from agentwatch.errors import InvalidArgument
    from agentwatch.runtime.engine import Engine
    from agentwatch.runtime.setup import load_setup

    async with Engine.open(config=config, recover=False, **load_setup(config)) as engine:
        try:
            fired = await OnStore(engine).call("hook_fire", args)
        except InvalidArgument as exc:
            raise flag_error(exc, flags, args) from None
        err_console.print("[dim]no service running: the run goes in this process, which waits for its end[/]")
        run_id = str(_said(fired, as_json)["runId"])

        async def status() -> str:
            return (await engine.store.get_run(run_id)).status

        ended, timed_out = await _ended(status, timeout)
        if timed_out and engine.hooks is not None:  # cut off with this command: cancelled, its agent stopped
            by = f"`agentwatch runs fire`: its --timeout ({timeout:g} s) passed before the run ended"
            await engine.hooks.cancel(run_id, by=by)  # (it waits for the run's end)
            ended = await status()  # `cancelled`; or how it ended, had it ended just before the cancel
        return fired, (ended, timed_out)


def _traced(service: Service, run_id: str) -> Callable[[], Awaitable[str]]:
    async def status() -> str:
        return str(service.answer("run_trace", {"id": run_id})["run"]["status"])

    return status


async def _ended(status: Callable[[], Awaitable[str]], timeout: float) -> _Waited:
    """The run's status once it is no longer `running`; or `running`, and True, when `timeout` passes first."""
    deadline = time.monotonic() + timeout
    while (now := await status()) == "running":
        if time.monotonic() >= deadline:
            return now, True
        await asyncio.sleep(0.2)
    return now, False


def _no_runs(entity: str | None, entities: list[str] | None) -> str:
    """What an empty `runs ls` says: when `--entity` names no entity that has runs, the ones that do (closest
    first, as `run_list` gives them)."""
    bare = f" (an entity is KIND:NAME: workflow:{entity}, hook:{entity}, ...)" if entity and ":" not in entity else ""
    if entities is None:
        return f"no runs{bare}"
    if not entities:
        return f"no runs of {entity}{bare}: no entity has runs yet"
    return (
        f"no runs of {entity}{bare}: no run has that entity; the entities with runs, closest first: "
        f"{', '.join(entities)} (`--entity {entities[0]}`)"
    )


def _status(status: str) -> str:
    from rich.markup import escape

    color = {"completed": "green", "failed": "red", "timed_out": "red", "running": "cyan"}.get(status, "yellow")
    return f"[{color}]{escape(status)}[/]"


def _why(run: dict[str, Any]) -> str:
    """Why the run ended as it did: its statusReason, and when that is only a code (`gate_error`), its error's
    message after it, which says what went wrong."""
    reason: str = run["statusReason"] or ""
    error = run["error"]
    message = error.get("message") if isinstance(error, dict) else None
    if message and _CODE.fullmatch(reason):
        return f"{reason}: {message}"
    return reason


def _took(item: dict[str, Any]) -> str:
    """How long a run or span took; while it runs (no duration yet), how long it has run so far."""
    if item["durationMs"] is not None:
        return _duration(item["durationMs"])
    started = datetime.fromisoformat(item["startedAt"])
    ms = max(0, round((datetime.now(UTC) - started).total_seconds() * 1000))
    return f"[cyan]{_duration(ms)} so far[/]"


def _duration(ms: int) -> str:
    return f"{ms / 1000:.1f} s" if ms < 120_000 else f"{ms / 60_000:.1f} min"


def _signed(value: float | int | None, unit: str) -> str:
    if value is None:
        return "?"
    if unit == "$":
        return f"{value:+.4f} $"
    return f"{value:+,}{(' ' + unit) if unit else ''}"


def _side(side: dict[str, Any] | None) -> str:
    if side is None:
        return "[dim]-[/]"
    attempts = f", {side['attempts']} attempts" if side["attempts"] > 1 else ""
    took = f" {_duration(side['durationMs'])}" if side["durationMs"] is not None else ""  # (none while it runs)
    return f"{_status(side['status'])}{took}{attempts}"
