"""The agentwatch demo: a few agents at work, watched live, then the state of every agent.

Offline by default: the agents run on scripted models (agentwatch's test double), so `make run` needs no key
and no network. With a model configured, the same agent definitions run on it:

    AGENTWATCH_DEMO_MODEL=openai-chat:gpt-4o-mini OPENAI_API_KEY=sk-... make run
    AGENTWATCH_DEMO_MODEL=openai-chat:llama3.1 OPENAI_BASE_URL=http://127.0.0.1:11434/v1 make run   # Ollama

What happens:
1. `coder` is asked to fix a failing test. It reads calc.py, fixes the bug with write_file, then spawns a
   `tester` sub-agent (agent_task) that runs the tests. With a model configured, a `reviewer` observer agent
   watches the coder's turns too.
2. `fetcher` makes a real mistake: it retries a failing call with the same input. Its definition names the
   built-in rule observer `loop-guard`, which catches the repeat and reports it; the report reaches the
   fetcher's next turn, which fixes the input.
3. `planner` plans a change and asks you (ask_user) which database to use; the turn pauses on the request
   (status word `needs_you`) and continues with your answer. Without a terminal, the question is left
   pending, for you to see with `agentwatch ls` and answer with `agentwatch answer`.

It ends with the commands to look at what it left (the demo's store is `.agentwatch/demo.db`, so each takes
`--store`): `agentwatch ls`, `agentwatch tail -f NAME`, `agentwatch answer` for a question left pending, and
`agentwatch serve`. An answered question goes on when the demo's engine runs again: `run.py --resume` (its
agents run on scripts and tools that only this file registers, so `agentwatch serve` cannot run them: a question
answered through it waits for the demo's engine).
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.rule import Rule
from rich.table import Table

from agentwatch.cli._render import LivePrinter
from agentwatch.events import Origin
from agentwatch.runtime.engine import Engine
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel, Think, register_scripted_model
from agentwatch.runtime.roster import load_roster

HERE = Path(__file__).resolve().parent
STATE = Path(".agentwatch")
WORKSPACE = STATE / "demo-workspace"
STORE_FILE = STATE / "demo.db"
"""The store's file; the commands printed at the end name it so (`--store` takes a SQLite file's path)."""
STORE = f"sqlite:///{STORE_FILE}"
console = Console(width=None if sys.stdout.isatty() else 120)  # logs and CI are wider than 80

FIXED_CALC = (HERE / "project" / "calc.py").read_text().replace("return a - b", "return a + b")


# -- the tools the demo agents use, confined to the workspace ---------------------------------------------


def _inside(path: str) -> Path:
    target = (WORKSPACE / path).resolve()
    if WORKSPACE.resolve() not in target.parents:
        raise ValueError(f"{path!r} is outside the project")
    return target


def read_file(path: str) -> str:
    """Read a text file of the project."""
    return _inside(path).read_text()


def write_file(path: str, content: str) -> str:
    """Replace a text file of the project with `content`."""
    _inside(path).write_text(content)
    return f"wrote {len(content)} characters to {path}"


TEST_SECONDS = 60.0
TEST_RUNNER = """
import sys
sys.path.insert(0, ".")
import test_calc
failures, passed = [], 0
for name in sorted(n for n in dir(test_calc) if n.startswith("test_")):
    try:
        getattr(test_calc, name)()
        passed += 1
    except AssertionError as exc:
        failures.append(f"{name} failed {exc}".strip())
    except Exception as exc:
        failures.append(f"{name} raised {type(exc).__name__}: {exc}")
print(f"{passed} passed" + (f", {len(failures)} failed: {'; '.join(failures)}" if failures else ""))
"""


async def run_tests() -> str:
    """Run the project's tests; says how many passed and what failed."""
    # In a process of its own: the code under test is the agents' work, and must never run inside the
    # engine's process (it could block the loop, or change the engine's own modules).
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",
        "-c",
        TEST_RUNNER,
        cwd=WORKSPACE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), TEST_SECONDS)
    except TimeoutError:
        process.kill()
        await process.wait()
        return f"the tests did not finish within {TEST_SECONDS:.0f} s and were stopped"
    if process.returncode != 0:
        last = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        return f"the tests could not run (exit code {process.returncode}): {last[0]}"
    return out.decode(errors="replace").strip()


def fetch_report(month: str) -> str:
    """Fetch the sales report of one month, given as YYYY-MM."""
    year, _, number = month.partition("-")
    if not (year.isdigit() and number.isdigit() and 1 <= int(number) <= 12):
        raise ValueError(f"no such month {month!r}: write it as YYYY-MM with a month from 01 to 12")
    return f"{month}: 1,284 orders, total 96,410 EUR"


# -- the scripts the agents follow when no real model is configured ---------------------------------------


def coder_script(ctx: Any) -> Any:
    match ctx.request_index:
        case 0:
            return [
                Think("test_add fails, so add() is suspect. Read calc.py before touching it."),
                CallTool("read_file", {"path": "calc.py"}),
            ]
        case 1:
            return [
                Reply("add() subtracts instead of adding. Fixing that one line."),
                CallTool("write_file", {"path": "calc.py", "content": FIXED_CALC}),
            ]
        case 2:
            return CallTool("agent_task", {"role": "tester", "prompt": "Run the tests of the calc project."})
        case _:
            report = json.loads(ctx.tool_results[0].output).get("lastAssistantText") if ctx.tool_results else None
            return Reply(f"Fixed add() in calc.py: it subtracted. The tester says: {report}")


def tester_script(ctx: Any) -> Any:
    if ctx.request_index == 0:
        return CallTool("run_tests", {})
    return Reply(f"Tests: {ctx.tool_results[0].output}.")


def fetcher_script(ctx: Any) -> Any:
    if "Loop guard" in (ctx.prompt or ""):
        # The observer's report opens this turn: read the error at last and fix the input.
        if not ctx.tool_results:
            return [
                Think(
                    "The guard is right: the error says the month must be 01-12. 2026-13 is not a month; "
                    "the user meant the last month of 2026."
                ),
                CallTool("fetch_report", {"month": "2026-12"}),
            ]
        return Reply(f"Sorry for the retries: the month was wrong. {ctx.tool_results[0].output}.")
    if ctx.request_index < 3:  # the mistake: the same failing call, again and again
        return CallTool("fetch_report", {"month": "2026-13"})
    return Reply("The reporting service keeps failing; I could not get the report.")


def planner_script(ctx: Any) -> Any:
    if ctx.request_index == 0:
        return [
            Think("The storage choice is the user's call."),
            CallTool("ask_user", {"question": "Should the new service keep its data in SQLite or PostgreSQL?"}),
        ]
    choice = ctx.tool_results[0].output
    return Reply(
        f"Plan: 1) add a {choice} store behind the repository interface; 2) migrate the schema; "
        "3) run the integration tests against it."
    )


def register_scripts() -> None:
    scripts = (
        ("coder", coder_script),
        ("tester", tester_script),
        ("fetcher", fetcher_script),
        ("planner", planner_script),
    )
    for name, script in scripts:
        register_scripted_model(name, ScriptedModel(function=script, chunk_delay=0.015))


def real_model() -> str | None:
    """The model the demo runs on instead of its scripts, when one is configured."""
    if model := os.environ.get("AGENTWATCH_DEMO_MODEL"):
        return model
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        return "openai-chat:gpt-4o-mini"
    return None


# -- the demo ---------------------------------------------------------------------------------------------


def answer_for(question: str) -> str | None:
    """Your answer, asked on the terminal; None without one (the question is left pending)."""
    if sys.stdin.isatty():
        return console.input(f"[bold yellow]? {question}[/] ")
    console.print("[dim](no terminal: the question is left pending for you to answer below)[/]")
    return None


def demo_definitions(model: str | None) -> list[Any]:
    """The demo's agent definitions, on `model` when one is configured (else on their scripts)."""
    roster = load_roster(HERE / "agents")
    definitions = [d.model_copy(update={"model": model}) if model else d for d in roster]
    if model:  # with a real model, an LLM observer watches the coder too
        definitions = [d.model_copy(update={"observer": "reviewer"}) if d.name == "coder" else d for d in definitions]
    else:
        register_scripts()
    return definitions


async def resume() -> None:
    """`run.py --resume`: the demo's engine again, on the store it left, so an answered question goes on."""
    model = real_model()
    async with Engine.open(
        STORE,
        agents_dir=HERE / "none",
        root=Path("."),
        definitions=demo_definitions(model),
        tools=[read_file, write_file, run_tests, fetch_report],
    ) as engine:
        printer = LivePrinter(console)
        engine.start_with_observer(lambda _thread_id: printer)
        from agentwatch.store import SessionFilter

        page = await engine.store.list_sessions(SessionFilter(), sort="name", limit=100)
        for session in page.items:
            printer.names[session.id] = session.name
        for session in page.items:
            if session.pending_requests:
                console.print(f"[yellow]{session.name} still waits on you[/]: answer it with `agentwatch answer`")
            elif session.status in ("running", "awaiting_input", "queued") or session.pending_inputs:
                await engine.wait(session.id, 120)
        await asyncio.sleep(0.1)  # let the last events reach the printer
        await show_agents(engine)


async def main() -> None:
    STATE.mkdir(exist_ok=True)
    for leftover in STATE.glob("demo.db*"):
        leftover.unlink()
    shutil.rmtree(WORKSPACE, ignore_errors=True)
    shutil.copytree(HERE / "project", WORKSPACE)

    model = real_model()
    definitions = demo_definitions(model)
    console.print(Rule("[bold]agentwatch demo"))
    console.print(f"store [cyan]{STORE}[/]   models [cyan]{model or 'scripted (offline)'}[/]\n")

    async with Engine.open(
        STORE,
        agents_dir=HERE / "none",
        root=Path("."),
        definitions=definitions,
        tools=[read_file, write_file, run_tests, fetch_report],
    ) as engine:
        printer = LivePrinter(console)
        engine.start_with_observer(lambda _thread_id: printer)

        console.print(Rule("coder fixes a failing test and has a tester check it", style="dim"))
        coder = await engine.create("coder", name="coder", origin=Origin(kind="person"))
        printer.names[coder.id] = "coder"
        await engine.enqueue(coder.id, "test_add fails in the calc project. Find the bug and fix it.")
        await engine.wait(coder.id, 120)

        console.print(Rule("fetcher repeats a mistake; the loop-guard observer catches it", style="dim"))
        fetcher = await engine.create("fetcher", name="fetcher", source="chat", origin=Origin(kind="person"))
        printer.names[fetcher.id] = "fetcher"
        await engine.enqueue(fetcher.id, "Get me the sales total for the last month of 2026 (2026-13).")
        await settle_with_reports(engine, fetcher.id)

        console.print(Rule("planner asks you a question before it plans", style="dim"))
        planner = await engine.create("planner", name="planner", origin=Origin(kind="person"))
        printer.names[planner.id] = "planner"
        await engine.enqueue(planner.id, "Plan adding persistent storage to the service.")
        session, _ = await engine.wait(planner.id, 120)
        left_pending = False
        while session.status == "awaiting_input" and not left_pending:
            for request in await engine.store.list_requests(session_id=planner.id, status="pending"):
                answer = answer_for((request.questions or [request.summary])[0])
                if answer is None:
                    left_pending = True
                    break
                await engine.answer(request.id, answer, by="you")
            else:
                session, _ = await engine.wait(planner.id, 120)

        await asyncio.sleep(0.1)  # let the last events reach the printer
        await show_agents(engine)
    next_steps("planner", answer_planner=left_pending)


def _here(path: str | Path) -> str:
    """`path` as typed from the current directory: relative below it, else absolute."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def _agentwatch() -> str:
    """The `agentwatch` command as typed from here: its bare name when the shell finds this one, else its path
    next to this Python (`.venv/bin/agentwatch` after `make run`)."""
    installed = Path(sys.executable).parent / "agentwatch"
    found = shutil.which("agentwatch")
    if not installed.exists() or (found is not None and Path(found).resolve() == installed.resolve()):
        return "agentwatch"
    return _here(installed)


def _python() -> str:
    """This Python as typed from here: `python` when it is the active virtual environment's, else its path."""
    active = os.environ.get("VIRTUAL_ENV")
    if active and Path(active).resolve() == Path(sys.prefix).resolve():
        return "python"
    return _here(sys.executable)


def next_steps(name: str, *, answer_planner: bool) -> None:
    """The commands to look at what the demo left, exactly as they run from here."""
    agentwatch, store = _agentwatch(), f"--store {STORE_FILE}"
    steps = [
        (f"{agentwatch} ls {store}", "every agent and the word it says"),
        (f"{agentwatch} tail -f {name} {store}", f"follow {name} live (Ctrl-C to stop)"),
    ]
    if answer_planner:
        steps.append((f'{agentwatch} answer planner "PostgreSQL" {store}', "answer the planner's question"))
        resume = shlex.join([_python(), _here(HERE / "run.py"), "--resume"])
        steps.append((resume, "then the demo's engine again: the planner goes on"))
    # Its engine has none of the demo's roles: a question answered through it waits for `--resume`.
    steps.append((f"{agentwatch} serve {store}", "the same agents in a browser (its address), over HTTP and MCP"))
    console.print(Rule("what to do next"))
    width = max(len(command) for command, _ in steps)
    for command, what in steps:
        console.print(f"  [cyan]{command.ljust(width)}[/]  [dim]{what}[/]", soft_wrap=True, highlight=False)


async def settle_with_reports(engine: Engine, session_id: str) -> None:
    """Wait for the agent, and for the turns its observer's reports start, to finish."""
    while True:
        session, _ = await engine.wait(session_id, 120)
        await asyncio.sleep(0.3)  # a report queued at the end of a turn starts the next one
        again = await engine.store.get_session(session_id)
        if again.pending_inputs == 0 and again.status != "running" and again.last_seq == session.last_seq:
            return


async def show_agents(engine: Engine) -> None:
    from agentwatch.store import SessionFilter

    console.print(Rule("every agent, as it stands"))
    table = Table()
    for column in ("name", "role", "status", "word", "parent", "tokens"):
        table.add_column(column, no_wrap=True)
    table.add_column("last said", no_wrap=True, overflow="ellipsis", max_width=32)
    names = {}
    page = await engine.store.list_sessions(SessionFilter(), sort="name", limit=100)
    for session in page.items:
        names[session.id] = session.name
    for session in page.items:
        snapshot = await engine.snapshot(session)
        word = str(snapshot["word"])
        colour = {"done": "green", "needs_you": "yellow", "failed": "red", "stuck": "red"}.get(word, "white")
        table.add_row(
            session.name,
            session.role,
            session.status,
            f"[{colour}]{word}[/]",
            names.get(session.parent_id or "", ""),
            f"{session.tokens:,}",
            (session.last_text or "").replace("\n", " "),
        )
    console.print(table)


if __name__ == "__main__":
    asyncio.run(resume() if sys.argv[1:] == ["--resume"] else main())
