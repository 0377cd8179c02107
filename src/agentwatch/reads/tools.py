"""The read tools of seed 001, grant-free: any agent may call them at any time, with no request to a person.

Each has one name and one JSON schema everywhere (`engine.call_tool`, an agent's tool call, MCP, HTTP, CLI),
with the seed's argument names; its arguments and answer are the models beside each tool. `read_tool(name)`
imports only that tool's module (a CLI command that calls one tool loads no other).
"""

from __future__ import annotations

from collections.abc import Callable

from agentwatch.tools import Tool, json_tool, typed_tool

__all__ = ["READ_TOOL_NAMES", "read_tool", "read_tools"]


def _agent_list() -> Tool:
    from agentwatch.reads.answers import ListAnswer
    from agentwatch.reads.listing import ListArgs, agent_list

    return json_tool(
        "agent_list",
        "List agents (one row per session, lineage or run): boss first, then live ones, then by sort. "
        "Filters are ANDed; page with nextCursor; counts: true adds per-word counts on the first page.",
        agent_list,
        args=ListArgs,
        answer=ListAnswer,
        reads_only=True,
    )


def _agent_summary() -> Tool:
    from agentwatch.reads.answers import SummaryAnswer
    from agentwatch.reads.summary import SummaryArgs, agent_summary

    return typed_tool(
        "agent_summary",
        "Counts without the rows: per status, working, lineages, intercepted, and a window of activity "
        "beside the one before; by: 'role' adds each role's sessions.",
        agent_summary,
        args=SummaryArgs,
        answer=SummaryAnswer,
        reads_only=True,
    )


def _agent_get() -> Tool:
    from agentwatch.reads.answers import AgentRecord
    from agentwatch.reads.get import GetArgs, agent_get

    return typed_tool(
        "agent_get",
        "One agent's whole record by id (soft-deleted included) or name, with `current`: its last text, "
        "pending request and the cursor to tail from.",
        agent_get,
        args=GetArgs,
        answer=AgentRecord,
        reads_only=True,
    )


def _agent_history() -> Tool:
    from agentwatch.reads.answers import HistoryAnswer
    from agentwatch.reads.history import HistoryArgs, agent_history

    return typed_tool(
        "agent_history",
        "An agent's transcript, newest page first (each page oldest first); nextCursor pages back. Lists its "
        "conversations; conversationId reads an archived one.",
        agent_history,
        args=HistoryArgs,
        answer=HistoryAnswer,
        reads_only=True,
    )


def _agent_tail() -> Tool:
    from agentwatch.reads.answers import TailAnswer
    from agentwatch.reads.tail import TailArgs, agent_tail

    return json_tool(
        "agent_tail",
        "An agent's recent events as compact rows; pass afterId (a cursor) to read only what came after it. "
        "Details are capped at maxChars with a truncation marker.",
        agent_tail,
        args=TailArgs,
        answer=TailAnswer,
        reads_only=True,
    )


def _agent_prompt() -> Tool:
    from agentwatch.reads.answers import PromptAnswer
    from agentwatch.reads.prompt import PromptArgs, agent_prompt

    return typed_tool(
        "agent_prompt",
        "The exact system prompt (with its hash) and user text of an agent's newest turn or of eventId's "
        "turn; against: previous | definition adds unified diff hunks.",
        agent_prompt,
        args=PromptArgs,
        answer=PromptAnswer,
        reads_only=True,
    )


def _agent_export() -> Tool:
    from agentwatch.reads.answers import ExportAnswer
    from agentwatch.reads.export import ExportArgs, agent_export

    return typed_tool(
        "agent_export",
        "The whole record of one agent as one JSON document: record, history, conversations, requests, usage.",
        agent_export,
        args=ExportArgs,
        answer=ExportAnswer,
        reads_only=True,
    )


def _agent_roles() -> Tool:
    from agentwatch.reads.roles import RolesAnswer, RolesArgs, agent_roles

    return typed_tool(
        "agent_roles",
        "The agent types this engine runs (what agent_create and agent_task take as role): name, description, "
        "model, tools and observer of each.",
        agent_roles,
        args=RolesArgs,
        answer=RolesAnswer,
        reads_only=True,
    )


def _run_list() -> Tool:
    from agentwatch.reads.runs import RunListAnswer, RunListArgs, run_list

    return typed_tool(
        "run_list",
        "List runs (workflow runs, heartbeat ticks, hook fires), newest first; filter by entity, kind, status; "
        "page with nextCursor. An entity that has no runs (a typo) answers the entities that do, closest first.",
        run_list,
        args=RunListArgs,
        answer=RunListAnswer,
        reads_only=True,
    )


def _run_trace() -> Tool:
    from agentwatch.reads.runs import TraceAnswer, TraceArgs, run_trace

    return typed_tool(
        "run_trace",
        "A run's spans: phases, tasks and their attempts, back-offs, the requests it waited on and the turns its "
        "agents billed, with status, times and cost; honesty says what the trace cannot show.",
        run_trace,
        args=TraceArgs,
        answer=TraceAnswer,
        reads_only=True,
    )


def _run_compare() -> Tool:
    from agentwatch.reads.runs import CompareAnswer, CompareArgs, run_compare

    return typed_tool(
        "run_compare",
        "Compare a run with another (default: the previous finished run of the same entity): deltas, spans "
        "aligned by label path, input changes leaf by leaf, brain sha.",
        run_compare,
        args=CompareArgs,
        answer=CompareAnswer,
        reads_only=True,
    )


def _run_history() -> Tool:
    from agentwatch.reads.runs import HistoryArgs, RunHistoryAnswer, run_history

    return typed_tool(
        "run_history",
        "A run's log, newest page first (each page oldest first): its agents' events, its pipeline (the run and "
        "its spans starting and ending) and its journal; narrow by source, agentId or q; nextCursor reads older.",
        run_history,
        args=HistoryArgs,
        answer=RunHistoryAnswer,
        reads_only=True,
    )


_READ_TOOLS: dict[str, Callable[[], Tool]] = {
    "agent_list": _agent_list,
    "agent_summary": _agent_summary,
    "agent_get": _agent_get,
    "agent_history": _agent_history,
    "agent_tail": _agent_tail,
    "agent_prompt": _agent_prompt,
    "agent_export": _agent_export,
    "agent_roles": _agent_roles,
    "run_list": _run_list,
    "run_trace": _run_trace,
    "run_compare": _run_compare,
    "run_history": _run_history,
}
"""Tool name → what builds it, in the order `read_tools` lists them."""

READ_TOOL_NAMES: frozenset[str] = frozenset(_READ_TOOLS)
"""The names of the read tools."""


def read_tool(name: str) -> Tool:
    """The read tool called `name` (one of `READ_TOOL_NAMES`), importing only its own module."""
    return _READ_TOOLS[name]()


def read_tools() -> list[Tool]:
    """`agent_list`, `agent_summary`, `agent_get`, `agent_history`, `agent_tail`, `agent_prompt`, `agent_export`,
    and the run reads `run_list`, `run_trace`, `run_compare`, `run_history`."""
    return [build() for build in _READ_TOOLS.values()]
