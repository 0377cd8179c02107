"""`agentwatch run`: run one agent from the agents directory on a prompt, streaming its turn."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from agentwatch.cli._common import SECONDS, ExitCode, print_json, resolve_config, run_async, store_option

if TYPE_CHECKING:
    from pydantic import JsonValue

    from agentwatch.config import Config

__all__ = ["run"]


async def _run(
    config: Config, role: str, prompt: str, name: str | None, timeout: float, as_json: bool
) -> dict[str, JsonValue]:
    # The engine (and through it the model layer) loads only when an agent runs, not for `run --help`.
    from agentwatch.cli._common import console
    from agentwatch.cli._render import LivePrinter
    from agentwatch.events import Origin
    from agentwatch.runtime.engine import Engine

    async with Engine.open(config=config) as engine:
        printer = LivePrinter(console)
        if not as_json:
            engine.start_with_observer(lambda _thread_id: printer)
        session = await engine.create(role, name=name, source="cli", origin=Origin(kind="person"))
        printer.names[session.id] = session.name
        await engine.enqueue(session.id, prompt, origin=Origin(kind="person"))
        while True:
            session, timed_out = await engine.wait(session.id, timeout)
            if timed_out or session.status != "awaiting_input" or as_json:
                break
            requests = await engine.store.list_requests(session_id=session.id)
            if not sys.stdin.isatty():  # nobody can type an answer here: leave the requests pending
                for request in requests:
                    _say_pending(session.name, request.id, (request.questions or [request.summary])[0])
                break
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
                await engine.answer(request.id, answer, by="cli")
        return await engine.snapshot(session, timed_out=timed_out)


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
@click.argument("prompt")
@click.option("--name", help="A name for the new session (made up when absent).")
@click.option(
    "--timeout", type=SECONDS, default=600.0, show_default=True, help="Seconds to wait for the turn to settle."
)
@click.option("--agents-dir", type=click.Path(path_type=Path), help="The agents directory (default: agents/).")
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print only the final status snapshot, as JSON.")
def run(
    agent: str,
    prompt: str,
    name: str | None,
    timeout: float,
    agents_dir: Path | None,
    store_url: str | None,
    as_json: bool,
) -> None:
    """Run AGENT (a role in the agents directory) on PROMPT and stream its turn.

    When the agent asks a question or needs an approval, you are asked here; when standard input is not a
    terminal, the request is left pending and how to answer it is printed. Exits 1 when the turn failed,
    3 when the timeout passed first.

    \b
    Example:
      agentwatch run coder "Add a --verbose flag to the CLI" --agents-dir agents
    """
    config = resolve_config(store_url)
    if agents_dir is not None:
        config = config.model_copy(update={"agents_dir": agents_dir})
    snapshot = run_async(_run(config, agent, prompt, name, timeout, as_json))
    if as_json:
        print_json(snapshot)
    else:
        word = snapshot.get("word")
        from agentwatch.cli._common import console

        console.print(f"\n[bold]{snapshot.get('name')}[/] [dim]{snapshot.get('agentId')}[/] → [bold]{word}[/]")
    if snapshot.get("timedOut"):
        click.get_current_context().exit(ExitCode.TIMED_OUT)
    if snapshot.get("status") == "failed":
        click.get_current_context().exit(ExitCode.FAILED)
