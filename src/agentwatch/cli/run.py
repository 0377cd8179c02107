"""`agentwatch run`: run one agent from the agents directory on a prompt, streaming its turn.

With a running service (`--server`, `AGENTWATCH_SERVER`, or a local `agentwatch serve` on the same store) the
session is handed to it: created and given the prompt through its tools, followed over its attach stream,
and left running there (its observers too) when this command exits. Alone, the turn runs in this process,
which then waits until the session's observers have settled (every digest delivered and read) before it
exits, so that an observer is never left with work queued. Either way it says which it did.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from agentwatch.cli._common import (
    AGENTS_DIR_HELP,
    DIRECTORY,
    SECONDS,
    TEXT_OR_STDIN,
    ExitCode,
    print_json,
    resolve_config,
    run_async,
    setup_option,
    store_option,
)
from agentwatch.cli.remote import Service, find_service, server_option

if TYPE_CHECKING:
    from pydantic import JsonValue
    from rich.console import Console

    from agentwatch.config import Config
    from agentwatch.runtime.engine import Engine
    from agentwatch.store import RequestRecord, SessionRecord
    from agentwatch.watchers.pairing import Pairing

__all__ = ["run"]


async def _run(
    config: Config, role: str, prompt: str, name: str | None, timeout: float, as_json: bool
) -> dict[str, JsonValue]:
    """Run the turn here, then wait for the session's observers (within the same `timeout`)."""
    # The engine (and through it the model layer) loads only when an agent runs, not for `run --help`.
    from agentwatch.cli._common import console, err_console
    from agentwatch.cli._render import LivePrinter
    from agentwatch.events import Origin
    from agentwatch.runtime.engine import Engine

    deadline = asyncio.get_running_loop().time() + timeout
    # Only this agent (and its observers and sub-agents): other sessions' cut-off turns are left to `serve`, or
    # to an engine opened in Python. (Once, every `run` took them over, printed them, and cut them off again on
    # exit: a few short runs used up another agent's `continue_after_restart`.)
    from agentwatch.runtime.setup import load_setup

    async with Engine.open(config=config, recover=False, **load_setup(config)) as engine:
        printer = LivePrinter(console)
        if not as_json:
            engine.start_with_observer(lambda _thread_id: printer)
        session = await engine.create(role, name=name, source="cli", origin=Origin(kind="person"))
        printer.names[session.id] = session.name
        await engine.enqueue(session.id, prompt, origin=Origin(kind="person"))
        while True:
            # The spinner shares the events' console (rich keeps it below the lines printed), or stderr with --json.
            session, timed_out = await _wait(engine, session.id, timeout, on=err_console if as_json else console)
            if timed_out or session.status != "awaiting_input" or as_json:
                break
            requests = await engine.store.list_requests(session_id=session.id)
            answers = _ask(session.name, requests)
            if answers is None:
                break
            for request_id, answer in answers:
                await engine.answer(request_id, answer, by="cli")
        snapshot = await engine.snapshot(session, timed_out=timed_out)
        pairing, settled = await _settle_observers(engine, session.id, deadline, spinner=True)
        _say_alone(session.name, pairing, settled)
        if timed_out and session.status == "running":
            _say_cut_off(session.name)
        return snapshot


async def _wait(engine: Engine, session_id: str, timeout: float, *, on: Console) -> tuple[SessionRecord, bool]:
    """`engine.wait`; when `on` is a terminal, a spinner line there says what the session is doing and for how
    long it has been waited on (gone once it returns)."""
    if not on.is_terminal:
        return await engine.wait(session_id, timeout)
    from rich.markup import escape

    loop = asyncio.get_running_loop()
    started = loop.time()
    with on.status("") as status:
        while True:
            left = timeout - (loop.time() - started)
            session, timed_out = await engine.wait(session_id, max(0.0, min(1.0, left)))
            if not timed_out or left <= 1.0:
                return session, timed_out
            status.update(f"{escape(session.name)} {session.status} · {int(loop.time() - started)}s")


def _ask(name: str, requests: list[RequestRecord]) -> list[tuple[str, JsonValue]] | None:
    """Ask the person at the terminal each request; None (the requests left pending, and how to answer them
    said) when standard input is not a terminal."""
    if not sys.stdin.isatty():  # nobody can type an answer here: leave the requests pending
        for request in requests:
            _say_pending(name, request.id, (request.questions or [request.summary])[0])
        return None
    answers: list[tuple[str, JsonValue]] = []
    for request in requests:
        question = (request.questions or [request.summary])[0]
        answer: JsonValue
        if request.kind == "approval":
            answer = click.confirm(f"{request.summary}?", default=False)
        elif request.options:
            listed = "\n".join(f"  {n}. {o}" for n, o in enumerate(request.options, 1))
            pick = click.prompt(f"{question}\n{listed}\nchoose", type=click.IntRange(1, len(request.options)))
            answer = request.options[pick - 1]
        else:
            answer = click.prompt(question)
        answers.append((request.id, answer))
    return answers


async def _settle_observers(
    engine: Engine, session_id: str, deadline: float, *, spinner: bool
) -> tuple[Pairing | None, bool]:
    """Wait until the session's observer has been given every digest and has read them (its turns settled,
    and the session settled again after any report it was given); returns its pairing (None when the session
    has no observer) and whether it settled before `deadline`."""
    from agentwatch.cli._common import err_console
    from agentwatch.errors import UserError
    from agentwatch.watchers.observers import observer_agents

    try:
        hub = observer_agents(engine)
    except UserError:
        return None, True  # observer agents are not installed in this engine
    loop = asyncio.get_running_loop()
    started = loop.time()
    status = err_console.status("") if spinner and err_console.is_terminal else None
    quiet = 0
    with status or contextlib.nullcontext():
        while True:
            left = deadline - loop.time()
            try:
                async with asyncio.timeout(max(left, 0.01)):
                    pairing = await hub.pairing_for(session_id)
            except TimeoutError:
                return None, False
            if pairing is None:
                return None, True
            await asyncio.sleep(0.05)  # the session's tap hands its waiting digests over once the pairing resolves
            busy = pairing.state is None or bool(pairing.buffer)
            busy = busy or any(task is not None and not task.done() for task in (pairing.delivering, pairing.arming))
            for watched in (session_id, pairing.observer_session_id):
                if watched is not None and not busy:
                    _, busy = await engine.wait(watched, 0)  # timed out at once: not settled
            quiet = 0 if busy else quiet + 1
            if quiet >= 3:
                return pairing, True
            if loop.time() >= deadline:
                return pairing, False
            if status is not None:
                from rich.markup import escape

                waited = int(loop.time() - started)
                status.update(f"waiting for observer {escape(pairing.observer_type)} to settle · {waited}s")
            await asyncio.sleep(0.1)


def _say_cut_off(name: str) -> None:
    from rich.markup import escape

    from agentwatch.cli._common import err_console

    err_console.print(
        f"[yellow]--timeout passed: {escape(name)}'s turn is cut off with this command; it goes on when an engine "
        f"next opens the store (`agentwatch serve`), or `agentwatch stop {escape(shlex.quote(name))}` ends it[/]",
        soft_wrap=True,
    )


def _say_alone(name: str, pairing: Pairing | None, settled: bool) -> None:
    from rich.markup import escape

    from agentwatch.cli._common import err_console

    ran = f"no service running: ran {escape(name)} here"
    observer = escape(pairing.observer_type) if pairing is not None else ""
    if pairing is None:
        text = f"{ran} (no observer to wait for)"
    elif pairing.state in ("denied", "stopped", "blocked", "retired"):  # nothing watched the turn, or waited for
        why = escape(f"{pairing.state}: {pairing.reason}" if pairing.reason else pairing.state)
        text = f"{ran}; its observer {observer} does not watch it ({why})"
    elif settled:
        text = f"{ran} and waited until its observer {observer} settled"
    else:
        text = (
            f"{ran}; its observer {observer} had not settled when --timeout passed (what it had not read is lost; "
            "`agentwatch serve` keeps observers running)"
        )
    err_console.print(f"[dim]{text}[/]", soft_wrap=True)


def _hand_over(service: Service, role: str, prompt: str, name: str | None, timeout: float, as_json: bool) -> Any:
    """Create the session through the service with `prompt`, print its events from the attach stream, answer
    its requests at a terminal, and return its snapshot once it settles (or `timeout` passes)."""
    from rich.markup import escape

    from agentwatch.cli._common import console, err_console
    from agentwatch.cli._render import LivePrinter
    from agentwatch.cli.act import ThroughService
    from agentwatch.cli.remote import await_settled

    args: dict[str, Any] = {"role": role, "prompt": prompt}
    if name:
        args["name"] = name
    created = service.answer("agent_create", args)
    session_id, session_name = str(created["agentId"]), str(created["name"])
    err_console.print(
        f"[dim]handed {escape(session_name)} ({session_id}) to the service at {escape(service.url)}: it runs there, "
        "observers included, and goes on if this command stops[/]",
        soft_wrap=True,
    )
    printed = _Follower(service, session_id, session_name, LivePrinter(console)) if not as_json else None
    started = time.monotonic()
    try:
        while True:
            left = max(0.0, timeout - (time.monotonic() - started))
            snapshot = await_settled(service, session_id, left, spinner=as_json)
            if printed is not None:
                printed.caught_up(str(snapshot["cursor"]))
            if snapshot.get("timedOut") or snapshot.get("status") != "awaiting_input" or as_json:
                return snapshot
            link = ThroughService(service)
            answers = _ask(session_name, run_async(link.pending(session_id)))
            if answers is None:
                return snapshot
            for request_id, answer in answers:
                service.answer("agent_answer", {"hitlId": request_id, "answer": answer})
    finally:
        if printed is not None:
            printed.stop()


class _Follower:
    """Prints a session's events from the service's attach stream, in a thread of its own."""

    def __init__(self, service: Service, session_id: str, name: str, printer: Any) -> None:
        self.service = service
        self.session_id = session_id
        self.printer = printer
        printer.names[session_id] = name
        self.cursor = ""
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="agentwatch-follow", daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        from agentwatch.cli.remote import stream_events

        with contextlib.suppress(Exception):  # the stream ends with the process; the snapshot says how it ended
            for event in stream_events(self.service, self.session_id, None):
                if self._stopped.is_set():
                    return
                self.printer.on_event(self.session_id, event)
                self.cursor = event.cursor.encode()

    def caught_up(self, cursor: str, wait: float = 3.0) -> None:
        """Wait (a little) until the events up to `cursor` are printed."""
        from agentwatch.events import StreamCursor

        wanted = StreamCursor.decode(cursor)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and self._thread.is_alive():
            if self.cursor and StreamCursor.decode(self.cursor) >= wanted:
                return
            time.sleep(0.02)

    def stop(self) -> None:
        self._stopped.set()


def _say_pending(name: str, request_id: str, question: str) -> None:
    from rich.markup import escape

    from agentwatch.cli._common import err_console

    err_console.print(
        f"[bold yellow]{escape(name)} waits on you:[/] {escape(question)}\n"
        f"It stays pending (request {request_id}): answer it with `agentwatch answer {request_id} TEXT` (or "
        f"`--choice N`, or `agentwatch approve`/`deny {request_id}` for an approval); `agentwatch ls --word "
        "needs_you` lists who waits.",
        soft_wrap=True,
    )


@click.command("run", short_help="Run an agent on a prompt and stream its turn.")
@click.argument("agent")
@click.argument("prompt", type=TEXT_OR_STDIN)
@click.option("--name", help="A name for the new session (made up when absent).")
@click.option(
    "--timeout", type=SECONDS, default=600.0, show_default=True, help="Seconds to wait for the turn to settle."
)
@click.option("--agents-dir", type=DIRECTORY, help=AGENTS_DIR_HELP)
@store_option
@server_option
@setup_option
@click.option("--json", "as_json", is_flag=True, help="Print only the final status snapshot, as JSON.")
def run(
    agent: str,
    prompt: str,
    name: str | None,
    timeout: float,
    agents_dir: Path | None,
    store_url: str | None,
    setup: str | None,
    as_json: bool,
) -> None:
    """Run AGENT (a role in the agents directory) on PROMPT (`-`: read it from standard input) and stream its
    turn.

    With a service running (--server, AGENTWATCH_SERVER, or `agentwatch serve` on this store), the session is
    handed to it (its role from the service's agents directory) and followed from here; it goes on there if
    this command stops. Alone, the turn runs here, and the command waits until the session's observers have
    settled before it exits. It says which it did.

    When the agent asks a question or needs an approval, you are asked here; when standard input is not a
    terminal, the request is left pending and how to answer it is printed. Exits 1 when the turn failed or
    did not finish (stopped by someone, or cut off by restarts), 3 when the timeout passed first.

    \b
    Examples:
      agentwatch run coder "Add a --verbose flag to the CLI" --agents-dir agents
      agentwatch run coder "Fix the tests" --setup myproject.agents:setup   (with your own tools)
    """
    from agentwatch.cli._common import flag_error
    from agentwatch.errors import InvalidArgument
    from agentwatch.tools import check_agent_name, check_prompt

    try:  # a usage error, before an engine or a service is asked anything
        check_prompt(prompt)
    except InvalidArgument as exc:
        raise flag_error(exc, {"prompt": "PROMPT"}, {"prompt": prompt}) from None
    if name is not None:
        try:
            check_agent_name(name)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--name") from None
    config = resolve_config(store_url, setup=setup, agents_dir=agents_dir)
    service = find_service(store_url)
    if service is not None:
        if setup or agents_dir:  # (once, a role only --agents-dir had was "no agent type", and the flag unnamed)
            from agentwatch.cli._common import err_console

            unused = " and ".join(flag for flag, given in (("--agents-dir", agents_dir), ("--setup", setup)) if given)
            err_console.print(
                f"{unused} not used: the service at {service.url} runs the agent with its own roles and setup "
                "(--server none runs it here)"
            )
        snapshot = _hand_over(service, agent, prompt, name, timeout, as_json)
    else:
        snapshot = run_async(_run(config, agent, prompt, name, timeout, as_json))
    if as_json:
        print_json(snapshot)
    else:
        from agentwatch.cli._common import console
        from agentwatch.cli._views import shown_word

        word = shown_word(snapshot)
        console.print(f"\n[bold]{snapshot.get('name')}[/] [dim]{snapshot.get('agentId')}[/] → [bold]{word}[/]")
    if snapshot.get("timedOut"):
        click.get_current_context().exit(ExitCode.TIMED_OUT)
    from agentwatch.store import TERMINAL_STATUSES

    # Ended, and not completed: failed, stopped (here, from another terminal or service), or cut off by restarts.
    if snapshot.get("status") in TERMINAL_STATUSES - {"completed"}:
        click.get_current_context().exit(ExitCode.FAILED)
