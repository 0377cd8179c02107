"""How the read commands show a tool's answer to a person, and the two that keep reading (`tail -f`, `await`).

Imported only when a read command runs, so that `agentwatch COMMAND --help` stays light.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape
from rich.text import Text

from agentwatch.cli._common import Reader, console
from agentwatch.cli._table import Cell, print_note, print_table
from agentwatch.cli._time import ago, spend

if TYPE_CHECKING:
    from pydantic import JsonValue

    from agentwatch.store import SessionRecord

__all__ = [
    "follow_session",
    "print_row",
    "render_await",
    "render_get",
    "render_history",
    "render_list",
    "render_prompt",
    "render_summary",
    "render_tail",
    "shown_word",
    "wait_until_settled",
]

WORD_STYLE = {
    "working": "cyan",
    "needs_you": "bold yellow",
    "stuck": "bold red",
    "failed": "red",
    "done": "green",
    "stopped": "magenta",
    "idle": "dim",
}

_SAID_BY_THE_WORD = {
    "idle": "idle",
    "running": "working",
    "completed": "done",
    "cancelled": "stopped",
    "failed": "failed",
}
"""Per status, the word (`shown_word`) that says it already: shown beside it, the status would only repeat it."""


def shown_word(agent: dict[str, Any]) -> str:
    """The word an agent (an `agent_list` row, an `agent_get` record, an `agent_await` snapshot) is shown with, as
    the dashboard shows it: its status word, except that an agent whose turn someone stopped (`cancelled`) says
    `stopped`. The API's word for it is `done` (nothing is left for it to do), but a person who stopped an agent
    must not read it as one that finished its work."""
    word = str(agent["word"])
    return "stopped" if agent["status"] == "cancelled" and word == "done" else word


def _word(word: str) -> Text:
    return Text(word, style=WORD_STYLE.get(word, ""))


def _standing(agent: dict[str, Any]) -> Text:
    """How an agent stands, in one line: its word, and its status beside it only where the status says more
    (`needs_you awaiting_input`, `failed interrupted`); `stopped`, not `stopped cancelled`."""
    word = shown_word(agent)
    status = str(agent["status"])
    return _word(word) if _SAID_BY_THE_WORD.get(status) == word else Text.assemble(_word(word), f" {status}")


def _short(text: JsonValue, width: int = 60) -> str:
    """`text` on one line, cut to `width` on a terminal (piped output is never cut)."""
    value = "" if text is None else str(text).replace("\n", " ")
    return value if len(value) <= width or not console.is_terminal else value[: width - 1] + "…"


def render_list(answer: dict[str, Any], *, deleted_too: bool = True) -> None:
    names = {row["id"]: row["name"] for row in answer["agents"]}
    rows: list[list[Cell]] = []
    for row in answer["agents"]:
        waiting = []
        if row["pendingInputs"]:
            waiting.append(f"{row['pendingInputs']} in")
        if row["pendingReports"]:  # its observer's, for its next turn
            waiting.append(f"{row['pendingReports']} report(s)")
        if row["pendingRequests"]:
            waiting.append(f"[yellow]{row['pendingRequests']} for you[/]")  # (questions and approvals alike)
        if row["heldRequests"]:  # asked of its parent first: a person's later
            waiting.append(f"{row['heldRequests']} held")
        name = escape(row["name"]) + (f" [dim]×{row['sessionCount']}[/]" if row.get("sessionCount") else "")
        if row["deletedAt"]:
            name = f"[strike dim]{name}[/]"
        parent = row["parentId"] or ""
        rows.append(
            [
                name,
                f"[dim]{row['id']}[/]",
                escape(row["role"]),
                _word(shown_word(row)),
                row["status"],
                ago(row["lastActiveAt"]),
                f"{row['usage']['tokens']:,}",
                " ".join(waiting),
                escape(names.get(parent, parent)),  # (a parent not on the page: its whole id, to `get`)
            ]
        )
    headers = ["NAME", "ID", "ROLE", "WORD", "STATUS", "ACTIVE", "TOKENS", "WAITING", "PARENT"]
    if rows:
        # The name is what a person tells the rows by: on a narrow terminal it is cut short with the rest,
        # never squeezed out (a column that may wrap is the first rich takes width from, down to nothing).
        columns = [{"overflow": "ellipsis", "no_wrap": True, "min_width": 8, "max_width": 24}] + [{"no_wrap": True}] * 8
        print_table(headers, rows, columns=columns, box=None, header_style="bold", pad_edge=False)
    else:
        print_note("[dim]no agents match[/]" if deleted_too else "[dim]no agents match (deleted ones: --all)[/]")
    if counts := answer.get("counts"):
        words = " · ".join(f"{w} {n}" for w, n in counts["words"].items() if n)
        print_note(f"[dim]{counts['total']} in all: {words}[/]")
    if answer.get("nextCursor"):
        print_note(f"[dim]more: --cursor {answer['nextCursor']}[/]")


def render_summary(answer: dict[str, Any]) -> None:
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


def render_get(record: dict[str, Any]) -> None:
    current = record["current"]
    console.print(f"[bold]{escape(record['name'])}[/] [dim]{record['id']}[/]  ", _standing(record))
    fill = record["contextFill"]
    rows: list[tuple[str, Any]] = [
        ("role", escape(record["role"])),
        ("model", escape(record["modelRef"] or "-")),
        ("scope", escape(record.get("scope") or "global")),
        ("parent", record["parentId"] or "-"),
        ("active", ago(current["lastActivityAt"])),
        ("usage", spend({**record["usage"], "costUsd": record["usage"]["costUsd"] or None})),  # (no price: no cost)
        ("context", _context(fill)),
        ("now", escape(str(current["currentItem"]["title"])) if current["currentItem"] else "-"),
        ("last said", escape(_short(current["lastAssistantText"], 200)) or "-"),
        ("error", f"[red]{escape(record['error'])}[/]" if record["error"] else "-"),
        ("inbox", _inbox(record)),
        ("cursor", current["cursor"]),
    ]
    if problem := record.get("roleProblem"):  # (the engine answering cannot run it: why, and what to do)
        rows.insert(1, ("not run", f"[yellow]{escape(problem)}[/]"))
    if hitl := current["pendingHitl"]:
        asks = "; ".join(hitl["questions"] or []) or hitl["kind"]
        rows.append(("asks", f"[yellow]{escape(asks)}[/] [dim]({hitl['hitlId']})[/]"))
    if observer := record.get("observer"):
        rows.extend(_observer_rows(observer))
    if held := record.get("interception"):
        rows.append(("held by", f"[yellow]{escape(str(held.get('by')))}[/] since {held.get('since', '?')}"))
    if (lease := record.get("lease")) and record["status"] == "running":  # (a lease left by a command says nothing)
        runs_on = escape(str(lease["owner"]))
        if lease["expired"]:  # its engine stopped (or lost the store): the next one to sweep continues it
            ran_out = ago(lease["expiresAt"])
            runs_on += f" [yellow](gone: its lease ran out {ran_out}; a running service continues it)[/]"
        rows.append(("runs on", runs_on))
    if record["deletedAt"]:
        rows.append(("deleted", f"{record['deletedAt']} (readable until {record['reapAt']})"))
    cells = [[key, str(value)] for key, value in rows]
    print_table(None, cells, columns=[{"style": "dim", "no_wrap": True}, {}], box=None, pad_edge=False)


def _context(fill: dict[str, Any]) -> str:
    """The context line of `get`: the tokens of the last request, out of the model's window when it is known."""
    if fill["state"] != "measured":
        return str(fill["state"])
    tokens, window = fill.get("tokens"), fill.get("window")
    if tokens is None:
        return "-"
    if not window:
        return f"{tokens:,} tokens (the model's window is not known)"
    return f"{tokens:,} / {window:,} tokens ({tokens / window:.0%})"


def _inbox(record: dict[str, Any]) -> str:
    """The inbox line of `get`: the inputs waiting, and apart from them its observer's reports for its next turn."""
    reports = record.get("pendingReports") or 0
    also = f", and {reports} observer report(s) for its next turn" if reports else ""
    return f"{record['pendingInputs']} waiting{also}"


def waiting_inbox(inputs: int, reports: int) -> str:
    """What waits in an agent's inbox, in words: `2 input(s)`, `1 observer report(s)`, or both."""
    said = [f"{inputs} input(s)"] if inputs or not reports else []
    if reports:
        said.append(f"{reports} observer report(s)")
    return " and ".join(said)


def _observer_rows(observer: dict[str, Any]) -> list[tuple[str, str]]:
    """The observer line (type, pairing state, why) and one line per latest report with its delivery state."""
    state = str(observer["state"])
    color = "green" if state == "armed" else "red" if state in ("denied", "blocked", "failing") else "yellow"
    kind = escape(str(observer["observerType"] or "?"))
    reason = f" [dim]({escape(_short(observer['reason'], 120))})[/]" if observer.get("reason") else ""
    rows = [("observer", f"{kind} [{color}]{state}[/]{reason}")]
    for report in observer.get("reports") or []:
        delivery = str(report.get("delivery", "?"))
        tag = "[yellow]queued[/]" if delivery == "queued" else f"[dim]{escape(delivery)}[/]"
        rows.append(("report", f"{tag} {escape(_short(report['report'], 200))}"))
    return rows


def tail_line(row: dict[str, Any]) -> str:
    style = {"failed": "red", "error": "red", "denied": "red", "interrupted": "magenta"}.get(str(row["status"]), "")
    kind = f"[{style}]{row['type']}[/]" if style else f"[bold]{row['type']}[/]"
    title = escape(str(row["title"] or ""))
    detail = escape(str(row["detail"] or "").replace("\n", " "))
    if detail == title:  # (a question, a notice: the title is the whole of it)
        detail = ""
    at = str(row["at"])[11:19]
    return f"[dim]{at}[/] {kind} {title} [dim]{detail}[/]"


def render_history(answer: dict[str, Any]) -> None:
    rows: list[list[Cell]] = []
    for event in answer["events"]:
        row = event["payload"]
        text = row.get("text") or row.get("output") or row.get("summary") or row.get("message") or ""
        what = row.get("tool_name") or row.get("outcome") or ""
        rows.append(
            [event["at"][11:19], f"#{event['seq']}", event["type"], escape(str(what)), escape(_short(text, 120))]
        )
    if rows:
        dim: dict[str, Any] = {"style": "dim", "no_wrap": True}
        columns = [dim, dim, {"style": "bold", "no_wrap": True}, {"no_wrap": True}, {"style": "dim"}]
        headers = ["AT", "SEQ", "TYPE", "WHAT", "TEXT"]
        print_table(headers, rows, columns=columns, box=None, header_style="bold", pad_edge=False)
    else:
        print_note("[dim]no events[/]")
    if answer.get("nextCursor"):
        print_note(f"[dim]older: --cursor {answer['nextCursor']}[/]")


async def follow_session(
    reader: Reader, agent_id: str, after: str | None, types: list[str], max_chars: int, as_json: bool
) -> None:
    """Print the session's events after `after` as they come, from the store, until it is deleted."""
    from agentwatch.events import StreamCursor, is_deletion_notice
    from agentwatch.reads.follow import follow
    from agentwatch.reads.tail import project

    session = await reader.store.get_session(agent_id)
    cursor = StreamCursor.decode(after, session_id=agent_id) if after else StreamCursor(agent_id, session.last_seq)
    wanted = set(types)
    if session.deleted_at is not None:  # deleted before: what it wrote after the cursor, and nothing more comes
        for event in await reader.store.read_events(agent_id, after_seq=cursor.seq, limit=10_000):
            if event.type in wanted:
                print_row(project(event, max_chars=max_chars), as_json)
        return
    # The ring carries another process's events only when it is shared (Redis); otherwise poll the store.
    shared = reader.ring if reader.config.live.startswith("redis") else None
    async for event in follow(reader.store, shared, agent_id, after=cursor):
        if event.type in wanted:
            print_row(project(event, max_chars=max_chars), as_json)
        if is_deletion_notice(event.payload):
            return  # the agent's last event


def render_tail(answer: dict[str, Any]) -> None:
    for row in answer["events"]:
        print_row(row, as_json=False)


def print_row(row: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(row))
    else:
        console.print(tail_line(row), soft_wrap=True)


def render_prompt(answer: dict[str, Any]) -> None:
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


async def wait_until_settled(
    reader: Reader, agent_id: str, timeout: float, *, spinner: bool = False
) -> dict[str, JsonValue]:
    """The `agent_await` snapshot, waiting (by polling the store) for a session another process runs.

    With `spinner` on a terminal, a line shows what it waits for and for how long (gone once it returns).
    """
    from agentwatch.reads.current import status_snapshot
    from agentwatch.runtime.plan import settled

    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = started + timeout
    status = console.status("") if spinner and console.is_terminal else None
    with status or contextlib.nullcontext():
        while True:
            session = await reader.store.get_session(agent_id)
            done = await settled(reader.store, session)  # as an engine's own wait reads it
            if done or loop.time() >= deadline:
                if not done and session.status == "idle" and session.inbox_size:
                    # (an idle agent, yet not settled: its input waits for an engine)
                    queued = waiting_inbox(session.pending_inputs, session.pending_reports)
                    waiting = f"{queued} of {session.name} wait for an engine to run them"
                    print_note(f"[dim]{escape(waiting)}: {escape(await _why_not_run(reader, session))}[/]")
                return await status_snapshot(
                    reader.store,
                    session,
                    stuck_after=reader.stuck_after(session.role),
                    timed_out=not done,
                    ring=reader.ring,
                )
            if status is not None:
                waited = int(loop.time() - started)
                status.update(f"waiting for {escape(session.name)} ({session.status}) · {waited}s")
            await asyncio.sleep(min(0.5, max(0.0, deadline - loop.time())))


async def _why_not_run(reader: Reader, session: SessionRecord) -> str:
    """Why an idle agent's inputs are not run, as the store tells it, and what to do: an engine holds the agent
    (it runs them once it gets to them), an engine open on the store has not its role (it said so on the agent),
    or no engine took them up (none is open, or, just queued, one has not looked yet)."""
    from agentwatch.runtime.engine import MAINTENANCE_SECONDS
    from agentwatch.runtime.leases import UNCLAIMED_SECONDS, role_lack_said

    role = session.role
    lease = await reader.store.get_lease(session.id)
    if lease is not None and not lease.expired:
        return f"engine {lease.owner} holds this agent and runs them once it gets to them"
    if await role_lack_said(reader.store, session.id):
        return (
            f"an engine open on this store has no agent type {role!r} (its warning is among the agent's events: "
            f"`agentwatch tail {session.id} --types 'runtime.*'`); define the type for the service that should run "
            "it (`agentwatch agents check` checks an agents directory), or delete the agent"
        )
    start = f"start `agentwatch serve` on this store with agent type {role!r}"
    if role not in reader.roster:
        start += f" (this project has none: add {role}.md to its agents directory, or define it in its --setup)"
    # An engine that lacks the role says so on the agent once its work waited UNCLAIMED_SECONDS (it looks every
    # MAINTENANCE_SECONDS); one that has it takes the work within a second.
    looked = UNCLAIMED_SECONDS + MAINTENANCE_SECONDS + 1.0
    if lease is not None and (datetime.now(UTC) - lease.expires_at).total_seconds() < looked:
        soon = f"one open on this store with agent type {role!r} does within a second"
        return f"no engine took them up yet ({soon}); {start}"
    return f"no engine open on this store runs this agent; {start}"


def render_await(answer: dict[str, Any]) -> None:
    late = " [yellow](timed out)[/]" if answer["timedOut"] else ""
    console.print(f"[bold]{escape(str(answer['name']))}[/] ", _standing(answer), late)
    if answer["lastAssistantText"]:
        console.print(escape(str(answer["lastAssistantText"])))
