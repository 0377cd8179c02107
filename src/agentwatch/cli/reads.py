"""The read commands: `ls`, `summary`, `get`, `history`, `tail`, `prompt`, `export`, `await`.

Each calls the read tool of the same name (`agent_list`, `agent_summary`, ...) exactly as an agent would;
`--json` prints that tool's dict and nothing else. They open the store for reading only: no turn is
continued and no background work runs, so they are safe beside a running engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

import click
from pydantic import JsonValue
from rich.markup import escape
from rich.text import Text

from agentwatch.cli._common import (
    SECONDS,
    ExitCode,
    Reader,
    call_tool,
    console,
    json_option,
    open_reader,
    print_json,
    resolve_config,
    resolve_id,
    run_async,
    store_option,
)
from agentwatch.cli._table import Cell, print_note, print_table
from agentwatch.cli._time import ago
from agentwatch.events import StreamCursor
from agentwatch.reads.current import is_settled, status_snapshot
from agentwatch.reads.follow import follow
from agentwatch.reads.tail import project, resolve_types

__all__ = ["READ_COMMANDS"]

WORD_STYLE = {
    "working": "cyan",
    "needs_you": "bold yellow",
    "stuck": "bold red",
    "failed": "red",
    "done": "green",
    "idle": "dim",
}


def _word(word: JsonValue) -> Text:
    return Text(str(word), style=WORD_STYLE.get(str(word), ""))


def _emit(answer: dict[str, Any], as_json: bool, render: Callable[[dict[str, Any]], None]) -> None:
    if as_json:
        print_json(answer)
    else:
        render(answer)


def _short(text: JsonValue, width: int = 60) -> str:
    """`text` on one line, cut to `width` on a terminal (piped output is never cut)."""
    value = "" if text is None else str(text).replace("\n", " ")
    return value if len(value) <= width or not console.is_terminal else value[: width - 1] + "…"


# -- ls ---------------------------------------------------------------------------------------------------


def _render_list(answer: dict[str, Any]) -> None:
    names = {row["id"]: row["name"] for row in answer["agents"]}
    rows: list[list[Cell]] = []
    for row in answer["agents"]:
        waiting = []
        if row["pendingInputs"]:
            waiting.append(f"{row['pendingInputs']} in")
        if row["pendingRequests"]:
            waiting.append(f"[yellow]{row['pendingRequests']} asks[/]")
        name = escape(row["name"]) + (f" [dim]×{row['sessionCount']}[/]" if row.get("sessionCount") else "")
        if row["deletedAt"]:
            name = f"[strike dim]{name}[/]"
        parent = row["parentId"] or ""
        rows.append(
            [
                name,
                f"[dim]{row['id']}[/]",
                escape(row["role"]),
                _word(row["word"]),
                row["status"],
                ago(row["lastActiveAt"]),
                f"{row['usage']['tokens']:,}",
                " ".join(waiting),
                escape(names.get(parent, parent[-8:])),
            ]
        )
    headers = ["NAME", "ID", "ROLE", "WORD", "STATUS", "ACTIVE", "TOKENS", "WAITING", "PARENT"]
    if rows:
        columns = [{"overflow": "ellipsis", "max_width": 24}] + [{"no_wrap": True}] * 8
        print_table(headers, rows, columns=columns, box=None, header_style="bold", pad_edge=False)
    else:
        print_note("[dim]no agents match[/]")
    if counts := answer.get("counts"):
        words = " · ".join(f"{w} {n}" for w, n in counts["words"].items() if n)
        print_note(f"[dim]{counts['total']} in all: {words}[/]")
    if answer.get("nextCursor"):
        print_note(f"[dim]more: --cursor {answer['nextCursor']}[/]")


@click.command("ls", short_help="List agents: the boss, then live ones, then the rest.")
@click.option("--status", multiple=True, help="Machine status (repeatable): running, awaiting_input, ...")
@click.option("--word", multiple=True, help="Status word (repeatable): working, needs_you, stuck, failed, done, idle.")
@click.option("--role", help="Only this agent type.")
@click.option(
    "--group",
    type=click.Choice(["none", "lineage", "run"]),
    default="none",
    show_default=True,
    help="One row per session, per lineage (groupKey) or per run.",
)
@click.option("--group-key", help="One lineage, e.g. hb:digest.")
@click.option("--parent", "parent_id", help="What this agent spawned.")
@click.option("-q", "query", help="A part of the name.")
@click.option("--window", help="Active within this long: 1h, 24h, 7d.")
@click.option(
    "--sort",
    type=click.Choice(["newest", "oldest", "name", "status"]),
    default="newest",
    show_default=True,
    help="Order after the boss and live agents.",
)
@click.option("--all", "deleted", is_flag=True, help="Include soft-deleted agents.")
@click.option("--counts", is_flag=True, help="Add per-word counts.")
@click.option("--limit", default=20, show_default=True, help="Rows per page (1..100).")
@click.option("--cursor", help="The cursor a previous page printed.")
@store_option
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
    _emit(call_tool(store_url, "agent_list", args, _LS_FLAGS), as_json, _render_list)


_LS_FLAGS = {
    **{name: f"--{name}" for name in ("status", "word", "role", "group", "window", "sort", "counts", "limit")},
    "cursor": "--cursor",
    "groupKey": "--group-key",
    "parentId": "--parent",
    "q": "-q",
    "deleted": "--all",
}


# -- summary ----------------------------------------------------------------------------------------------


def _render_summary(answer: dict[str, Any]) -> None:
    console.print(
        f"[bold]{answer['total']}[/] agents · [cyan]{answer['working']} working[/] · "
        f"{answer['lineages']} lineages · {answer['intercepted']} held by a person"
    )
    statuses = " · ".join(f"{status} {n}" for status, n in answer["statuses"].items())
    console.print(f"[dim]by status:[/] {statuses or '-'}")
    if words := answer.get("words"):
        console.print("[dim]lineages by word:[/] " + " · ".join(f"{w} {n}" for w, n in words.items()))
    window = answer["window"]
    previous = window["previous"]
    console.print(
        f"[dim]since {window['from'][:16]}:[/] started {window['started']} (before: {previous['started']}), "
        f"failed {window['failed']} ({previous['failed']}), waiting {window['waiting']}, "
        f"spent {window['spend']['tokens']:,} tokens (before: {previous['spend']['tokens']:,})"
    )
    if by_role := answer.get("byRole"):
        rows = [[escape(row["role"]), str(row["sessions"]), ago(row["lastActiveAt"])] for row in by_role]
        print_table(["ROLE", "SESSIONS", "LAST ACTIVE"], rows, box=None, header_style="bold")


@click.command("summary", short_help="Counts per status and word, a window's activity and spend.")
@click.option("--window", default="7d", show_default=True, help="The stretch of time for started/failed/spend.")
@click.option("--words", is_flag=True, help="Add lineages by the word they say now.")
@click.option("--by-role", is_flag=True, help="Each role's sessions and newest activity.")
@store_option
@json_option
def summary(store_url: str | None, as_json: bool, window: str, words: bool, by_role: bool) -> None:
    """Counts without the rows: per status, working, lineages, a window's activity and spend.

    \b
    Example:
      agentwatch summary --window 24h --by-role
    """
    args: dict[str, Any] = {"window": window, "words": words}
    if by_role:
        args["by"] = "role"
    flags = {"window": "--window", "words": "--words", "by": "--by-role"}
    _emit(call_tool(store_url, "agent_summary", args, flags), as_json, _render_summary)


# -- get --------------------------------------------------------------------------------------------------


def _render_get(record: dict[str, Any]) -> None:
    current = record["current"]
    console.print(
        f"[bold]{escape(record['name'])}[/] [dim]{record['id']}[/]  ", _word(record["word"]), f" {record['status']}"
    )
    fill = record["contextFill"]
    rows: list[tuple[str, Any]] = [
        ("role", escape(record["role"])),
        ("model", escape(record["modelRef"] or "-")),
        ("scope", escape(record.get("scope") or "global")),
        ("parent", record["parentId"] or "-"),
        ("active", ago(current["lastActivityAt"])),
        ("usage", f"{record['usage']['tokens']:,} tokens"),
        (
            "context",
            f"{fill.get('tokens', '-')} / {fill.get('window') or '?'} tokens"
            if fill["state"] == "measured"
            else fill["state"],
        ),
        ("now", escape(str(current["currentItem"]["title"])) if current["currentItem"] else "-"),
        ("last said", escape(_short(current["lastAssistantText"], 200)) or "-"),
        ("error", f"[red]{escape(record['error'])}[/]" if record["error"] else "-"),
        ("inbox", f"{record['pendingInputs']} waiting"),
        ("cursor", current["cursor"]),
    ]
    if hitl := current["pendingHitl"]:
        asks = "; ".join(hitl["questions"] or []) or hitl["kind"]
        rows.append(("asks", f"[yellow]{escape(asks)}[/] [dim]({hitl['hitlId']})[/]"))
    if observer := record.get("observer"):
        rows.append(("observer", escape(_short(json.dumps(observer), 200))))
    if record["deletedAt"]:
        rows.append(("deleted", f"{record['deletedAt']} (reaped {record['reapAt']})"))
    cells = [[key, str(value)] for key, value in rows]
    print_table(None, cells, columns=[{"style": "dim", "no_wrap": True}, {}], box=None, pad_edge=False)


@click.command("get", short_help="Show one agent: its record and what it is doing now.")
@click.argument("agent")
@click.option("--chat", "scope", help="The chat you are asking from (its agent of that name wins).")
@store_option
@json_option
def get(agent: str, scope: str | None, store_url: str | None, as_json: bool) -> None:
    """Show one agent by id (ses_...) or name: its record and what it is doing now.

    \b
    Examples:
      agentwatch get ses_01jdq3v9c8k2m6n4p7r0s5t8w1
      agentwatch get nova --chat 42:bot1
    """
    args = {"id": agent} if agent.startswith("ses_") else {"name": agent}
    _emit(call_tool(store_url, "agent_get", args, {"id": "AGENT", "name": "AGENT"}, scope), as_json, _render_get)


# -- history and tail -------------------------------------------------------------------------------------


def _tail_line(row: dict[str, Any]) -> str:
    style = {"failed": "red", "error": "red", "denied": "red", "interrupted": "magenta"}.get(str(row["status"]), "")
    kind = f"[{style}]{row['type']}[/]" if style else f"[bold]{row['type']}[/]"
    title = escape(str(row["title"] or ""))
    detail = escape(str(row["detail"] or "").replace("\n", " "))
    at = str(row["at"])[11:19]
    return f"[dim]{at}[/] {kind} {title} [dim]{detail}[/]"


def _render_history(answer: dict[str, Any]) -> None:
    for event in answer["events"]:
        row = event["payload"]
        text = row.get("text") or row.get("output") or row.get("summary") or row.get("message") or ""
        what = row.get("tool_name") or row.get("outcome") or ""
        console.print(
            f"[dim]{event['at'][11:19]} #{event['seq']}[/] [bold]{event['type']}[/] {escape(str(what))} "
            f"[dim]{escape(_short(text, 120))}[/]"
        )
    if answer.get("nextCursor"):
        console.print(f"[dim]older: --cursor {answer['nextCursor']}[/]")


@click.command("history", short_help="Show an agent's transcript, a page at a time.")
@click.argument("agent_id", metavar="AGENT")
@click.option("--limit", default=50, show_default=True, help="Events per page (1..100).")
@click.option("--cursor", help="The cursor a previous page printed (reads further back).")
@click.option("--conversation", help="An archived conversation id to read.")
@store_option
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
    _emit(call_tool(store_url, "agent_history", args, flags, agent="id"), as_json, _render_history)


async def _follow(
    reader: Reader, agent_id: str, after: str | None, types: list[str], max_chars: int, as_json: bool
) -> None:
    session = await reader.store.get_session(agent_id)
    cursor = StreamCursor.decode(after, session_id=agent_id) if after else StreamCursor(agent_id, session.last_seq)
    # The ring carries another process's events only when it is shared (Redis); otherwise poll the store.
    shared = reader.ring if reader.config.live.startswith("redis") else None
    wanted = set(types)
    async for event in follow(reader.store, shared, agent_id, after=cursor):
        if event.type not in wanted:
            continue
        _print_row(project(event, max_chars=max_chars), as_json)


def _render_tail(answer: dict[str, Any]) -> None:
    for row in answer["events"]:
        _print_row(row, as_json=False)


@click.command("tail", short_help="Show an agent's recent events; with -f, follow them live.")
@click.argument("agent_id", metavar="AGENT")
@click.option("-f", "--follow", "follow_", is_flag=True, help="Keep printing new events as they happen.")
@click.option("--after", "after_id", help="Start strictly after this cursor (or event id).")
@click.option("--types", multiple=True, help="Event types or globs (repeatable): turn.*, item.completed, hitl.*, ...")
@click.option("--max-chars", default=500, show_default=True, help="Cap on each detail (1..4000).")
@click.option("--max-events", default=50, show_default=True, help="Events per read (1..200).")
@store_option
@json_option
def tail(
    agent_id: str,
    follow_: bool,
    after_id: str | None,
    types: tuple[str, ...],
    max_chars: int,
    max_events: int,
    store_url: str | None,
    as_json: bool,
) -> None:
    """Show an agent's recent events as compact rows; with -f, follow it live.

    Following resumes from its cursor after a reconnect, with no gap and no repeat; stop it with Ctrl-C.
    With -f, --json prints one row per line (the tool's rows), so `--after` can take the last row's id.

    \b
    Examples:
      agentwatch tail ses_01jdq3v9c8k2m6n4p7r0s5t8w1 -f
      agentwatch tail ses_01jdq3v9c8k2m6n4p7r0s5t8w1 --types 'runtime.*' --types item.completed --json
    """
    args: dict[str, Any] = {"id": agent_id, "maxChars": max_chars, "maxEvents": max_events}
    if after_id:
        args["afterId"] = after_id
    if types:
        args["types"] = list(types)
    flags = {
        "id": "AGENT",
        "afterId": "--after",
        "types": "--types",
        "maxChars": "--max-chars",
        "maxEvents": "--max-events",
    }
    answer = call_tool(store_url, "agent_tail", args, flags, agent="id")
    if not follow_:
        _emit(answer, as_json, _render_tail)
        return
    # Following prints one row per line: JSON lines of the tool's rows with --json, else the human rows.
    for row in answer["events"]:
        _print_row(row, as_json)

    async def main() -> None:
        async with open_reader(resolve_config(store_url)) as reader:
            session_id = StreamCursor.decode(answer["cursor"]).session_id  # AGENT may be a name
            await _follow(reader, session_id, answer["cursor"], resolve_types(list(types) or None), max_chars, as_json)

    with contextlib.suppress(KeyboardInterrupt):
        run_async(main())


def _print_row(row: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(row))
    else:
        console.print(_tail_line(row), soft_wrap=True)


# -- prompt, export, await --------------------------------------------------------------------------------


def _render_prompt(answer: dict[str, Any]) -> None:
    system = answer["system"]
    console.print(f"[bold]system[/] [dim]sha256 {system['hash'][:16]}… turn {answer['turnId']}[/]")
    console.print(escape(system["text"]))
    console.print(f"\n[bold]user[/]\n{escape(answer['user'] or '')}")
    if against := answer.get("against"):
        console.print(f"\n[bold]against {against['kind']}[/]")
        hunks = against.get("diff") or []
        if not hunks:
            console.print("[green]no change[/]")
        for hunk in hunks:
            for line in str(hunk).splitlines():
                style = "green" if line.startswith("+") else "red" if line.startswith("-") else "dim"
                console.print(Text(line, style=style))


@click.command("prompt", short_help="Show the exact prompt a turn was dispatched with.")
@click.argument("agent_id", metavar="AGENT")
@click.option("--event", "event_id", help="The user message event of the turn to show (default: the newest turn).")
@click.option("--against", type=click.Choice(["previous", "definition"]), help="Add a diff with this.")
@store_option
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
    _emit(call_tool(store_url, "agent_prompt", args, flags, agent="id"), as_json, _render_prompt)


@click.command("export", short_help="Print an agent's whole record as one JSON document.")
@click.argument("agent_id", metavar="AGENT")
@store_option
@click.option("--json", "as_json", is_flag=True, help="The record is JSON already; with it an error is JSON too.")
def export(agent_id: str, store_url: str | None, as_json: bool) -> None:
    """Print an agent's whole record (history, conversations, requests, usage) as one JSON document.

    \b
    Example:
      agentwatch export coder > agent.json
    """
    print_json(call_tool(store_url, "agent_export", {"id": agent_id}, {"id": "AGENT"}, agent="id"))


async def wait_until_settled(reader: Reader, agent_id: str, timeout: float) -> dict[str, JsonValue]:
    """The `agent_await` snapshot, waiting (by polling the store) for a session another process runs."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        session = await reader.store.get_session(agent_id)
        timed_out = loop.time() >= deadline
        if is_settled(session) or timed_out:
            return await status_snapshot(
                reader.store, session, stuck_after=reader.stuck_after(session.role), timed_out=not is_settled(session)
            )
        await asyncio.sleep(min(0.5, max(0.0, deadline - loop.time())))


@click.command("await", short_help="Wait until an agent settles; show its snapshot.")
@click.argument("agent_id", metavar="AGENT")
@click.option("--timeout", type=SECONDS, default=60.0, show_default=True, help="Seconds to wait (up to a week).")
@store_option
@json_option
def await_(agent_id: str, timeout: float, store_url: str | None, as_json: bool) -> None:
    """Wait until an agent settles (done, failed, stopped, idle, or waiting on you); show its snapshot.

    Exits 3 when the timeout passes first (the snapshot is printed all the same).

    \b
    Example:
      agentwatch await coder --timeout 300
    """

    async def main() -> dict[str, JsonValue]:
        async with open_reader(resolve_config(store_url)) as reader:
            session_id = await resolve_id(reader, agent_id, scope=None)
            return await wait_until_settled(reader, session_id, timeout)

    snapshot = run_async(main())

    def render(answer: dict[str, Any]) -> None:
        late = " [yellow](timed out)[/]" if answer["timedOut"] else ""
        console.print(f"[bold]{escape(str(answer['name']))}[/] ", _word(answer["word"]), f" {answer['status']}{late}")
        if answer["lastAssistantText"]:
            console.print(escape(str(answer["lastAssistantText"])))

    _emit(snapshot, as_json, render)
    if snapshot["timedOut"]:
        click.get_current_context().exit(ExitCode.TIMED_OUT)


READ_COMMANDS: list[click.Command] = [ls, summary, get, history, tail, prompt, export, await_]
"""The read commands, in the order `--help` lists them."""
