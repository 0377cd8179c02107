"""Any input through `engine.call_tool`, on SQLite and PostgreSQL: a structured answer, never a traceback.

Hypothesis draws a tool name (mostly real ones, sometimes garbage) and arguments built from that tool's own
JSON schema: its fields with values of every kind a careless or hostile caller sends (wrong types, missing
fields, huge strings, deep JSON, NUL characters, lone surrogates, huge and negative numbers, forged and
tampered cursors, SQL metacharacters, ids of deleted and reaped sessions). Every call must return a JSON
object; a refusal must be `{"error": {code, message}}` whose invalid-argument message names the field; and a
refused call must leave every table of the store exactly as it was.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentwatch.events import PageCursor, StreamCursor, query_digest
from agentwatch.reads.listing import ListArgs, _digest
from agentwatch.retention import reap_due
from agentwatch.runtime.models import CallTool, Reply, ScriptedModel
from agentwatch.runtime.roster import AgentDefinition
from tests.runtime.support import OpenEngine, Scripted, role

pytestmark = pytest.mark.slow

EXAMPLES = 300
"""Calls per backend; each is one hypothesis example (shrunk when it fails)."""
SKIPPED_TABLES = {"leases", "schema_migrations"}
"""Tables an idle engine writes to by itself (its lease renewals), or that only migrations write."""


@dataclass
class World:
    """What the store holds before the fuzz: ids and cursors of every kind, real and forged."""

    ids: list[str] = field(default_factory=list)
    cursors: list[str] = field(default_factory=list)


def deep(depth: int) -> object:
    value: object = "bottom"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def tampered(cursor: str) -> str:
    middle = len(cursor) // 2
    flipped = "A" if cursor[middle] != "A" else "B"
    return cursor[:middle] + flipped + cursor[middle + 1 :]


async def seed(engine: Any) -> World:
    """A live session with a finished turn, one waiting on a question, a deleted one and a reaped one."""
    world = World()
    live = (await engine.task("chat", "hello there"))["agentId"]
    asking = await engine.create("asker", name="asker")
    await engine.enqueue(asking.id, "ask me")
    await engine.wait(asking.id, 10)
    gone = await engine.create("chat", name="gone")
    await engine.delete(gone.id)
    reaped = await engine.create("chat", name="reaped")
    await engine.delete(reaped.id)
    await reap_due(engine.store, engine.config.retention, now=datetime.now(UTC) + timedelta(days=3650))
    deleted = await engine.create("chat", name="deleted")
    await engine.delete(deleted.id)
    events = await engine.store.read_events(live, limit=100)
    requests = await engine.store.list_requests(status=None, limit=10)
    session = await engine.store.get_session(live)
    world.ids = [
        live,
        asking.id,
        deleted.id,
        reaped.id,
        events[-1].id,
        events[-1].turn_id or "trn_x",
        session.conversation_id,
        *(r.id for r in requests),
        "ses_nope",
        "evt_nope",
        "req_nope",
    ]
    head = StreamCursor(live, session.last_seq)
    history_digest = query_digest({"history": {"id": live, "conversation_id": None, "episode_id": None}})
    listing = _digest(ListArgs())
    store_page = PageCursor("x", (False, True, "0001-01-01T00:00:00", "ses_x")).encode()
    world.cursors = [
        head.encode(),
        tampered(head.encode()),
        StreamCursor(asking.id, 1).encode(),  # another session's stream
        StreamCursor(live, 2**63).encode(),  # forged: the checksum is not a secret
        StreamCursor(live, 2**64, 2**70).encode(),
        StreamCursor(live, 10**30).encode(),
        PageCursor(history_digest, (2**63,)).encode(),
        PageCursor(history_digest, (-5,)).encode(),
        PageCursor(history_digest, ("seq",)).encode(),
        PageCursor(listing, ("garbage", datetime.now(UTC).isoformat())).encode(),
        PageCursor(listing, (store_page, "0001-01-01T00:00:00")).encode(),
        PageCursor(listing, (store_page, datetime.now(UTC).isoformat())).encode(),
        PageCursor(listing, (PageCursor("x", (1, 2, 3, 4)).encode(), "2024-01-01T00:00:00+00:00")).encode(),
        "c1.",
        "p1.",
        "c1." + "A" * 5000,
        "p1.!!!",
    ]
    return world


SCALARS = st.sampled_from(
    [
        None,
        True,
        False,
        0,
        -1,
        1,
        100,
        101,
        2**31,
        2**63,
        2**64,
        -(2**63) - 1,
        10**30,
        -(10**30),
        1e308,
        float("nan"),
        float("inf"),
        -0.0,
        0.5,
        "",
        " ",
        "\t\n",
        "\x00",
        "a\x00b",
        "\ud800",
        "x\udfffy",
        "é" * 3,
        "chat",
        "asker",
        "'; DROP TABLE sessions; --",
        "%",
        "_",
        "\\",
        "ses_%",
        "' OR '1'='1",
        '"',
        "NULL",
        "1h",
        "0s",
        "-1d",
        "99999999999999d",
        "1e30",
        "10e30d",
        "NaN",
        "inf",
        "7d",
        "2024-01-01T00:00:00",
        "2024-01-01T00:00:00Z",
        "0001-01-01T00:00:00+14:00",
        "9999-12-31T23:59:59-14:00",
        "newest",
        "name",
        "lineage",
        "run",
        "working",
        "needs_you",
        "running",
        "previous",
        "definition",
        "role",
        "tool.*",
        "hitl.*",
        "content.delta",
        "turn.*",
    ]
)
BIG = st.sampled_from(["x" * 10_000_001, "y" * 200_001, "z" * 1025, "n" * 201, "\x00" * 100_000])
DEEP = st.sampled_from([deep(20), deep(1000), deep(50_000)])


def values(world: World) -> st.SearchStrategy[Any]:
    text = st.text(st.characters(codec=None, exclude_categories=()), max_size=30)  # lone surrogates included
    leaf = st.one_of(
        SCALARS, text, st.integers(), st.floats(), st.sampled_from(world.ids), st.sampled_from(world.cursors)
    )
    nested = st.one_of(
        st.lists(leaf, max_size=4),
        st.dictionaries(st.text(max_size=6), leaf, max_size=3),
        st.lists(SCALARS, min_size=51, max_size=60),
    )
    return st.one_of(leaf, leaf, leaf, nested, BIG, DEEP)


def plausible(schema: dict[str, Any], defs: dict[str, Any], world: World) -> st.SearchStrategy[Any]:
    """A value of the kind the schema asks for (within or at its bounds), or near it."""
    if "$ref" in schema:
        return plausible(defs[schema["$ref"].rsplit("/", 1)[-1]], defs, world)
    if "anyOf" in schema:
        return st.one_of(*(plausible(option, defs, world) for option in schema["anyOf"]))
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    match schema.get("type"):
        case "integer":
            low, high = schema.get("minimum", -(2**63)), schema.get("maximum", 2**63)
            return st.one_of(st.integers(low, high), st.sampled_from([low - 1, high + 1, low, high]))
        case "boolean":
            return st.booleans()
        case "null":
            return st.none()
        case "array":
            return st.lists(plausible(schema.get("items", {}), defs, world), max_size=3)
        case _:
            return st.one_of(
                st.sampled_from(world.ids),
                st.sampled_from(world.cursors),
                st.sampled_from(["chat", "asker", "24h", "7d", "2024-01-01T00:00:00+00:00", "hello"]),
            )


def plausible_for(key: str, schema: dict[str, Any], defs: dict[str, Any], world: World) -> st.SearchStrategy[Any]:
    """Ids for id fields and cursors for cursor fields (so more calls get past validation to the store)."""
    if key == "id" or (key.endswith("Id") and key != "afterId"):
        return st.sampled_from(world.ids)
    if key in ("cursor", "afterId"):
        return st.one_of(st.sampled_from(world.cursors), st.sampled_from(world.ids))
    return plausible(schema, defs, world)


def calls(tools: dict[str, Any], world: World) -> st.SearchStrategy[tuple[Any, Any]]:
    names = sorted(tools)
    nasty = values(world)

    @st.composite
    def one(draw: Callable[..., Any]) -> tuple[Any, Any]:
        name = draw(
            st.one_of(
                st.sampled_from(names),
                st.sampled_from(names),
                st.sampled_from(names),
                st.sampled_from([["agent_list"], {"n": 1}, None, 7, "", "agent_list\x00", "\ud800", "x" * 5000]),
            )
        )
        tool = tools.get(name) if isinstance(name, str) else None
        schema = tool.parameters if tool is not None else {}
        properties = schema.get("properties") or {}
        defs = schema.get("$defs") or {}
        if draw(st.integers(0, 9)) == 0:  # not an object at all
            return name, draw(st.sampled_from([None, [], "args", 3, [("id", "x")]]))
        args: dict[Any, Any] = {}
        clean = draw(st.booleans())  # half the calls stay near the schema, so more of them reach the store
        kinds = ["omit", "omit", "plausible"] if clean else ["omit", "plausible", "plausible", "nasty", "poisoned"]
        required = set(schema.get("required") or ())
        for key, field_schema in properties.items():
            kind = draw(st.sampled_from(kinds))
            if clean and key in required:
                kind = "plausible"
            match kind:
                case "plausible":
                    args[key] = draw(plausible_for(key, field_schema, defs, world))
                case "nasty":
                    args[key] = draw(nasty)
                case "poisoned":  # a plausible value with a NUL or a lone surrogate inside
                    value = draw(plausible_for(key, field_schema, defs, world))
                    poison = draw(st.sampled_from(["\x00", "\ud800", "\udfff"]))
                    if isinstance(value, str):
                        value = value[: len(value) // 2] + poison + value[len(value) // 2 :]
                    elif isinstance(value, list):
                        value = [*value, poison]
                    args[key] = value
        if not clean and draw(st.integers(0, 4)) == 0:
            args[draw(st.sampled_from(["color", "\x00", "\ud800", "x" * 300, "ID", "agent_id"]))] = draw(nasty)
        return name, args

    return one()


def dump_sqlite(path: str) -> Callable[[], dict[str, list[str]]]:
    def dump() -> dict[str, list[str]]:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            return {
                t: sorted(repr(row) for row in db.execute(f'SELECT * FROM "{t}"'))
                for t in tables
                if t not in SKIPPED_TABLES and not t.startswith("sqlite_")
            }

    return dump


def dump_postgres(url: str) -> Callable[[], dict[str, list[str]]]:
    import psycopg

    def dump() -> dict[str, list[str]]:
        with psycopg.connect(url) as db:
            names = db.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            ).fetchall()
            return {
                t: sorted(repr(row) for row in db.execute(f'SELECT * FROM "{t}"').fetchall())
                for (t,) in names
                if t not in SKIPPED_TABLES
            }

    return dump


def check_answer(name: object, args: object, answer: object, tool: Any) -> str | None:
    """Why the answer breaks the contract (None when it keeps it)."""
    if not isinstance(answer, dict):
        return f"the answer is a {type(answer).__name__}, not a JSON object"
    json.dumps(answer)  # serialisable as JSON, whatever went in
    if set(answer) != {"error"}:
        return None  # an answer (a status snapshot carries the agent's own `error` beside its other fields)
    error = answer["error"]
    if not (isinstance(error.get("code"), str) and isinstance(error.get("message"), str) and error["message"]):
        return f"an error without a code and a message: {error}"
    if error["code"].startswith("store") or error["code"] in ("not_a_database", "schema_too_new"):
        return f"the store refused what the boundary let through: {error['message'][:300]}"
    if error["code"] == "invalid_argument":
        named = set((tool.parameters.get("properties") or {}) if tool is not None else ()) | {"arguments", "name"}
        fields = (error.get("details") or {}).get("fields") or []
        asks = tool is not None and tool.asks_user  # refused whatever its arguments: only an agent calls it
        if not fields and not asks and not any(f in error["message"] for f in named):
            return f"an invalid_argument refusal that names no field: {error['message'][:300]}"
    return None


@pytest.mark.parametrize("examples", [EXAMPLES])
async def test_no_input_through_call_tool_raises_or_writes_when_refused(
    open_engine: OpenEngine, scripted: Scripted, store_url: str, backend: str, tmp_path: Any, examples: int
) -> None:
    chat = scripted(f"fuzz-chat-{backend}", ScriptedModel(function=lambda ctx: Reply("ok")))
    asker = scripted(f"fuzz-ask-{backend}", ScriptedModel([CallTool("ask_user", {"question": "Which one?"})]))
    definitions: list[AgentDefinition] = [role("chat", chat), role("asker", asker, tools=("ask_user",))]
    async with open_engine(*definitions, store=store_url) as engine:
        world = await seed(engine)
        path = store_url.removeprefix("sqlite:///")
        dump = dump_sqlite(path) if backend == "sqlite" else dump_postgres(store_url)
        loop = asyncio.get_running_loop()
        counts = {"calls": 0, "refused": 0, "answered": 0}
        codes: dict[str, int] = {}

        def settle() -> dict[str, list[str]]:
            """A dump taken once nothing changes any more (an accepted call may have started a turn)."""
            last = dump()
            for _ in range(100):
                asyncio.run_coroutine_threadsafe(asyncio.sleep(0.05), loop).result()
                now = dump()
                if now == last:
                    return now
                last = now
            return last

        baseline = [await asyncio.to_thread(settle)]

        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(call=calls(engine.tools, world))
        def one_call(call: tuple[Any, Any]) -> None:
            name, args = call
            if (
                isinstance(args, dict)
                and isinstance(args.get("timeoutMs"), int)
                and 1000 < args["timeoutMs"] <= 3_600_000
            ):
                args = args | {"timeoutMs": 1000}  # an accepted wait on a session that never settles is legitimate
            answer = asyncio.run_coroutine_threadsafe(engine.call_tool(name, args), loop).result(timeout=120)
            counts["calls"] += 1
            tool = engine.tools.get(name) if isinstance(name, str) else None
            problem = check_answer(name, args, answer, tool)
            assert problem is None, problem
            if set(answer) == {"error"}:
                counts["refused"] += 1
                codes[answer["error"]["code"]] = codes.get(answer["error"]["code"], 0) + 1
                after = dump()
                changed = sorted(t for t in after if after[t] != baseline[0].get(t))
                assert not changed, f"a refused call ({answer['error']['code']}) wrote to {changed}"
            else:
                counts["answered"] += 1
                baseline[0] = settle()

        await asyncio.to_thread(one_call)
    print(f"{backend}: {counts['calls']} calls, {counts['refused']} refused {codes}, {counts['answered']} answered")
    assert counts["refused"] > examples // 2
