"""The read commands: `ls`, `summary`, `get`, `history`, `tail`, `prompt`, `export`, `await`.

Each calls the read tool of the same name (`agent_list`, `agent_summary`, ...) exactly as an agent would;
`--json` prints that tool's dict and nothing else. With a running service (`--server`, `AGENTWATCH_SERVER`,
or a local `agentwatch serve` on the same store) the tool is called through it, and `tail -f` attaches to
its live stream; otherwise they open the store for reading only: no turn is continued and no background
work runs, so they are safe beside a running engine. The output is the same either way.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import click

from agentwatch.cli import collect_garbage
from agentwatch.cli._common import (
    SECONDS,
    ExitCode,
    json_option,
    open_reader,
    print_json,
    resolve_config,
    resolve_id,
    run_async,
    store_option,
)
from agentwatch.cli.remote import find_service, server_option
from agentwatch.cli.remote import read as call_tool

__all__ = ["READ_COMMANDS"]


def _emit(answer: dict[str, Any], as_json: bool, render: Callable[[dict[str, Any]], None]) -> None:
    if as_json:
        print_json(answer)
    else:
        render(answer)


# -- ls ---------------------------------------------------------------------------------------------------


@click.command("ls", short_help="List agents: the boss, then live ones, then the rest.")
@click.option("--status", multiple=True, help="Machine status (repeatable): running, awaiting_input, ...")
@click.option(
    "--word",
    multiple=True,
    help="Status word (repeatable): working, needs_you, stuck, failed, done (stopped ones too), idle.",
)
@click.option("--role", help="Only this agent type.")
@click.option(
    "--group",
    type=click.Choice(["none", "lineage", "run"]),
    default="none",
    show_default=True,
    help="One row per session, per lineage (groupKey) or per run.",
)
@click.option("--group-key", help="One lineage, e.g. hb:digest.")
@click.option("--parent", "parent_id", help="What this agent (a name or an id) spawned.")
@click.option("-q", "query", help="A part of the name or display name (A-Z in any case).")
@click.option("--window", help="Active within this long: 1h, 24h, 7d.")
@click.option(
    "--sort",
    type=click.Choice(["newest", "oldest", "name", "status"]),
    default="newest",
    show_default=True,
    help="Order after the boss and live agents.",
)
@click.option("--all", "deleted", is_flag=True, help="Include soft-deleted agents.")
@click.option("--intercepted", is_flag=True, help="Only agents a person took over (`take-over`).")
@click.option("--counts", is_flag=True, help="Add per-word counts.")
@click.option("--limit", default=20, show_default=True, help="Rows per page (1..100).")
@click.option("--cursor", help="The cursor a previous page printed.")
@store_option
@server_option
@json_option
def ls(store_url: str | None, as_json: bool, **options: Any) -> None:
    """List agents: the boss, then live ones, then the rest, newest activity first.

    \b
    Examples:
      agentwatch ls --word needs_you --word stuck
      agentwatch ls --group lineage --group-key hb:digest --json
    """
    names = {"group_key": "groupKey", "parent_id": "parentId", "query": "q"}
    args: dict[str, Any] = {}
    for key, value in options.items():
        if value is None or value is False or value == () or (key == "group" and value == "none"):
            continue
        args[names.get(key, key)] = list(value) if isinstance(value, tuple) else value
    from agentwatch.cli._views import render_list

    parent = "parentId" if "parentId" in args else None  # a name or an id, as every agent a command takes
    _emit(
        call_tool(store_url, "agent_list", args, _LS_FLAGS, agent=parent),
        as_json,
        partial(render_list, deleted_too=bool(args.get("deleted"))),
    )


_LS_FLAGS = {
    **{name: f"--{name}" for name in ("status", "word", "role", "group", "window", "sort", "counts", "limit")},
    "cursor": "--cursor",
    "groupKey": "--group-key",
    "parentId": "--parent",
    "q": "-q",
    "deleted": "--all",
    "intercepted": "--intercepted",
}


# -- summary ----------------------------------------------------------------------------------------------


@click.command("summary", short_help="Counts per status and word, a window's activity and spend.")
@click.option("--window", default="7d", show_default=True, help="The stretch of time for started/failed/spend.")
@click.option("--words", is_flag=True, help="With --json: add lineages by the word they say now (always shown else).")
@click.option("--by-role", is_flag=True, help="Each role's sessions and newest activity.")
@store_option
@server_option
@json_option
def summary(store_url: str | None, as_json: bool, window: str, words: bool, by_role: bool) -> None:
    """Counts without the rows: per status, working, lineages, a window's activity and spend.

    \b
    Example:
      agentwatch summary --window 24h --by-role
    """
    # A person reads how many are stuck or need them at a glance: the words come always, but in the exact answer.
    args: dict[str, Any] = {"window": window, "words": words or not as_json}
    if by_role:
        args["by"] = "role"
    flags = {"window": "--window", "words": "--words", "by": "--by-role"}
    from agentwatch.cli._views import render_summary

    _emit(call_tool(store_url, "agent_summary", args, flags), as_json, render_summary)


# -- get --------------------------------------------------------------------------------------------------


@click.command("get", short_help="Show one agent: its record and what it is doing now.")
@click.argument("agent")
@click.option(
    "--chat",
    "scope",
    help="The chat you are asking from (its agent of that name wins). Read from the store, even with a service "
    "running: its HTTP tools have no calling chat.",
)
@store_option
@server_option
@json_option
def get(agent: str, scope: str | None, store_url: str | None, as_json: bool) -> None:
    """Show one agent by id (ses_...) or name: its record and what it is doing now.

    \b
    Examples:
      agentwatch get ses_01jdq3v9c8k2m6n4p7r0s5t8w1
      agentwatch get nova --chat 42:bot1
    """
    args = {"id": agent} if agent.startswith("ses_") else {"name": agent}
    from agentwatch.cli._views import render_get

    _emit(call_tool(store_url, "agent_get", args, {"id": "AGENT", "name": "AGENT"}, scope), as_json, render_get)


# -- history and tail -------------------------------------------------------------------------------------


@click.command("history", short_help="Show an agent's transcript, a page at a time.")
@click.argument("agent_id", metavar="AGENT")
@click.option("--limit", default=50, show_default=True, help="Events per page (1..100).")
@click.option("--cursor", help="The cursor a previous page printed (reads further back).")
@click.option("--conversation", help="An archived conversation id to read.")
@store_option
@server_option
@json_option
def history(
    agent_id: str, limit: int, cursor: str | None, conversation: str | None, store_url: str | None, as_json: bool
) -> None:
    """Show an agent's transcript, newest page first (oldest first within the page).

    \b
    Example:
      agentwatch history coder --limit 20
    """
    args: dict[str, Any] = {"id": agent_id, "limit": limit}
    if cursor:
        args["cursor"] = cursor
    if conversation:
        args["conversationId"] = conversation
    flags = {"id": "AGENT", "limit": "--limit", "cursor": "--cursor", "conversationId": "--conversation"}
    from agentwatch.cli._views import render_history

    _emit(call_tool(store_url, "agent_history", args, flags, agent="id"), as_json, render_history)


@click.command("tail", short_help="Show an agent's recent events; with -f, follow them live.")
@click.argument("agent_id", metavar="AGENT")
@click.option("-f", "--follow", "follow_", is_flag=True, help="Keep printing new events as they happen.")
@click.option("--after", "after_id", help="Start strictly after this cursor (or event id).")
@click.option("--before", "before_id", help="Read back: the events before this event id (or cursor); not with -f.")
@click.option("--types", multiple=True, help="Event types or globs (repeatable): turn.*, item.completed, hitl.*, ...")
@click.option("--max-chars", default=500, show_default=True, help="Cap on each detail (1..4000).")
@click.option("--max-events", default=50, show_default=True, help="Events per read (1..200).")
@store_option
@server_option
@json_option
def tail(
    agent_id: str,
    follow_: bool,
    after_id: str | None,
    before_id: str | None,
    types: tuple[str, ...],
    max_chars: int,
    max_events: int,
    store_url: str | None,
    as_json: bool,
) -> None:
    """Show an agent's recent events as compact rows; with -f, follow it live.

    Following resumes from its cursor after a reconnect, with no gap and no repeat; stop it with Ctrl-C (exit
    130); it ends by itself (exit 0) when the agent is deleted. With a service running, -f attaches to its live
    stream; without one it follows the store. With -f, --json prints one row per line (the tool's rows), so
    `--after` can take the last row's id.

    \b
    Examples:
      agentwatch tail ses_01jdq3v9c8k2m6n4p7r0s5t8w1 -f
      agentwatch tail ses_01jdq3v9c8k2m6n4p7r0s5t8w1 --types 'runtime.*' --types item.completed --json
      agentwatch tail coder --before evt_...   (the page before that event: a row's id)
    """
    if before_id and follow_:
        raise click.UsageError("--before reads back; it cannot follow (-f): leave one out")
    args: dict[str, Any] = {"id": agent_id, "maxChars": max_chars, "maxEvents": max_events}
    if after_id:
        args["afterId"] = after_id
    if before_id:
        args["beforeId"] = before_id
    if types:
        args["types"] = list(types)
    flags = {
        "id": "AGENT",
        "afterId": "--after",
        "beforeId": "--before",
        "types": "--types",
        "maxChars": "--max-chars",
        "maxEvents": "--max-events",
    }
    from agentwatch.cli._views import follow_session, print_row, render_tail
    from agentwatch.events import StreamCursor
    from agentwatch.reads.tail import project, resolve_types

    answer = call_tool(store_url, "agent_tail", args, flags, agent="id")
    if not follow_:
        _emit(answer, as_json, render_tail)
        return
    collect_garbage()  # started without the collector (see WAITING_COMMANDS); following may last for hours
    # Following prints one row per line: JSON lines of the tool's rows with --json, else the human rows.
    for row in answer["events"]:
        print_row(row, as_json)
    session_id = StreamCursor.decode(answer["cursor"]).session_id  # AGENT may be a name
    wanted = resolve_types(list(types) or None)
    # Ctrl-C ends the follow as interrupted (exit 130), whichever way it follows.
    service = find_service(store_url)
    if service is not None:
        from agentwatch.cli.remote import stream_events

        for event in stream_events(service, session_id, answer["cursor"]):
            if event.type in wanted:
                print_row(project(event, max_chars=max_chars), as_json)
    else:

        async def main() -> None:
            async with open_reader(resolve_config(store_url, reading=True)) as reader:
                await follow_session(reader, session_id, answer["cursor"], wanted, max_chars, as_json)

        run_async(main())
    from agentwatch.cli._common import err_console

    # Either way the follow ends only with the agent's deletion, its last event.
    err_console.print(f"{session_id} was deleted: no more events will come", soft_wrap=True)


# -- prompt, export, await --------------------------------------------------------------------------------


@click.command("prompt", short_help="Show the exact prompt a turn was dispatched with.")
@click.argument("agent_id", metavar="AGENT")
@click.option("--event", "event_id", help="The user message event of the turn to show (default: the newest turn).")
@click.option("--against", type=click.Choice(["previous", "definition"]), help="Add a diff with this.")
@store_option
@server_option
@json_option
def prompt(agent_id: str, event_id: str | None, against: str | None, store_url: str | None, as_json: bool) -> None:
    """Show the exact system prompt and user text a turn was dispatched with.

    \b
    Example:
      agentwatch prompt coder --against definition
    """
    args: dict[str, Any] = {"id": agent_id}
    if event_id:
        args["eventId"] = event_id
    if against:
        args["against"] = against
    flags = {"id": "AGENT", "eventId": "--event", "against": "--against"}
    from agentwatch.cli._views import render_prompt

    _emit(call_tool(store_url, "agent_prompt", args, flags, agent="id"), as_json, render_prompt)


@click.command("export", short_help="Print an agent's whole record as one JSON document.")
@click.argument("agent_id", metavar="AGENT")
@store_option
@server_option
@click.option("--json", "as_json", is_flag=True, help="The record is JSON already; with it an error is JSON too.")
def export(agent_id: str, store_url: str | None, as_json: bool) -> None:
    """Print an agent's whole record (history, conversations, requests, usage) as one JSON document.

    \b
    Example:
      agentwatch export coder > agent.json
    """
    print_json(call_tool(store_url, "agent_export", {"id": agent_id}, {"id": "AGENT"}, agent="id"))


@click.command("await", short_help="Wait until an agent settles; show its snapshot.")
@click.argument("agent_id", metavar="AGENT")
@click.option("--timeout", type=SECONDS, default=60.0, show_default=True, help="Seconds to wait (up to a week).")
@store_option
@server_option
@json_option
def await_(agent_id: str, timeout: float, store_url: str | None, as_json: bool) -> None:
    """Wait until an agent settles (done, failed, stopped, idle, or waiting on you); show its snapshot.

    Exits 3 when the timeout passes first (the snapshot is printed all the same).

    \b
    Example:
      agentwatch await coder --timeout 300
    """

    from agentwatch.cli._views import render_await, wait_until_settled

    if timeout > 0:
        collect_garbage()  # started without the collector (see WAITING_COMMANDS); the wait may last for hours
    service = find_service(store_url)
    if service is not None:
        from agentwatch.cli.remote import await_settled

        snapshot = await_settled(service, service.resolve(agent_id), timeout, spinner=not as_json)
    else:

        async def main() -> dict[str, Any]:
            async with open_reader(resolve_config(store_url, reading=True)) as reader:
                session_id = await resolve_id(reader, agent_id, scope=None)
                return await wait_until_settled(reader, session_id, timeout, spinner=not as_json)

        snapshot = run_async(main())

    _emit(snapshot, as_json, render_await)
    if snapshot["timedOut"]:
        click.get_current_context().exit(ExitCode.TIMED_OUT)


READ_COMMANDS: list[click.Command] = [ls, summary, get, history, tail, prompt, export, await_]
"""The read commands, in the order `--help` lists them."""
