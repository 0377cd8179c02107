"""The read tools of seed 001, grant-free: any agent may call them at any time, with no request to a person.

Each has one name and one JSON schema everywhere (`engine.call_tool`, an agent's tool call, MCP, HTTP, CLI),
with the seed's argument names; its arguments and answer are the models beside each tool.
"""

from __future__ import annotations

from agentwatch.reads.answers import (
    AgentRecord,
    ExportAnswer,
    HistoryAnswer,
    ListAnswer,
    PromptAnswer,
    SummaryAnswer,
    TailAnswer,
)
from agentwatch.reads.export import ExportArgs, agent_export
from agentwatch.reads.get import GetArgs, agent_get
from agentwatch.reads.history import HistoryArgs, agent_history
from agentwatch.reads.listing import ListArgs, agent_list
from agentwatch.reads.prompt import PromptArgs, agent_prompt
from agentwatch.reads.summary import SummaryArgs, agent_summary
from agentwatch.reads.tail import TailArgs, agent_tail
from agentwatch.tools import Tool, typed_tool

__all__ = ["READ_TOOL_NAMES", "read_tools"]


def read_tools() -> list[Tool]:
    """`agent_list`, `agent_summary`, `agent_get`, `agent_history`, `agent_tail`, `agent_prompt`, `agent_export`."""
    return [
        typed_tool(
            "agent_list",
            "List agents (one row per session, lineage or run): boss first, then live ones, then by sort. "
            "Filters are ANDed; page with nextCursor; counts: true adds per-word counts on the first page.",
            agent_list,
            args=ListArgs,
            answer=ListAnswer,
        ),
        typed_tool(
            "agent_summary",
            "Counts without the rows: per status, working, lineages, intercepted, and a window of activity "
            "beside the one before; by: 'role' adds each role's sessions.",
            agent_summary,
            args=SummaryArgs,
            answer=SummaryAnswer,
        ),
        typed_tool(
            "agent_get",
            "One agent's whole record by id (soft-deleted included) or name, with `current`: its last text, "
            "pending request and the cursor to tail from.",
            agent_get,
            args=GetArgs,
            answer=AgentRecord,
        ),
        typed_tool(
            "agent_history",
            "An agent's transcript, newest page first (each page oldest first); nextCursor pages back. Lists its "
            "conversations; conversationId reads an archived one.",
            agent_history,
            args=HistoryArgs,
            answer=HistoryAnswer,
        ),
        typed_tool(
            "agent_tail",
            "An agent's recent events as compact rows; pass afterId (a cursor) to read only what came after it. "
            "Details are capped at maxChars with a truncation marker.",
            agent_tail,
            args=TailArgs,
            answer=TailAnswer,
        ),
        typed_tool(
            "agent_prompt",
            "The exact system prompt (with its hash) and user text of an agent's newest turn or of eventId's "
            "turn; against: previous | definition adds unified diff hunks.",
            agent_prompt,
            args=PromptArgs,
            answer=PromptAnswer,
        ),
        typed_tool(
            "agent_export",
            "The whole record of one agent as one JSON document: record, history, conversations, requests, usage.",
            agent_export,
            args=ExportArgs,
            answer=ExportAnswer,
        ),
    ]


READ_TOOL_NAMES: frozenset[str] = frozenset(tool.name for tool in read_tools())
"""The names of the read tools."""
