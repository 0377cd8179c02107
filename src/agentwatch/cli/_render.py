"""Rendering a session's events for a person, live: a ThreadObserver that prints with rich."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from rich.console import Console
from rich.markup import escape

from agentwatch.events import (
    AssistantMessage,
    ContentDelta,
    Event,
    ModelReroute,
    ObserverReported,
    ObserverStateChanged,
    RequestOpened,
    RequestResolved,
    RuntimeNotice,
    RuntimeRetry,
    SubtaskEnded,
    SubtaskStarted,
    ToolCall,
    ToolResult,
    TurnEnded,
    TurnStarted,
    UserMessage,
    truncate,
)
from agentwatch.runtime.thread_observer import ReplaySnapshot

__all__ = ["LivePrinter"]

_OUTCOME_STYLE = {"completed": "green", "paused": "yellow", "failed": "red", "cancelled": "magenta"}


@dataclass
class LivePrinter:
    """Prints every event of the sessions it observes; text streams as it arrives."""

    console: Console
    names: dict[str, str] = field(default_factory=dict)
    """Session id → name, for the line prefixes."""
    detail_chars: int = 160
    _streaming: str | None = None
    _cut: set[str] = field(default_factory=set)
    """Sessions whose streamed text another line interrupted; their stream resumes with `…`."""

    def _prefix(self, thread_id: str) -> str:
        return f"[dim]{escape(self.names.get(thread_id, thread_id[-8:]))}[/]"

    def _end_stream(self) -> None:
        if self._streaming is not None:
            self.console.print()
            self._cut.add(self._streaming)
            self._streaming = None

    def on_event(self, thread_id: str, event: Event) -> None:
        """Print one event."""
        payload = event.payload
        if isinstance(payload, ContentDelta):
            if payload.part == "text":
                if self._streaming != thread_id:
                    self._end_stream()
                    resumed = "… " if thread_id in self._cut else ""
                    self.console.print(f"{self._prefix(thread_id)} {resumed}", end="")
                    self._streaming = thread_id
                self.console.print(escape(payload.delta), end="", soft_wrap=True)
            return
        if isinstance(payload, AssistantMessage | TurnEnded):
            self._cut.discard(thread_id)
        if isinstance(payload, AssistantMessage) and self._streaming == thread_id:
            self._end_stream()
            self._cut.discard(thread_id)
            return
        if isinstance(payload, SubtaskStarted):
            self.names.setdefault(payload.child_session_id, payload.name)
        elif isinstance(payload, ObserverStateChanged) and payload.observer_session_id:
            # (an observer agent starts no sub-task: its lines are named by its type and whom it watches)
            watched = self.names.get(thread_id, thread_id[-8:])
            self.names.setdefault(payload.observer_session_id, f"{payload.observer_type} on {watched}")
        line = self._line(payload)
        if line is not None:
            self._end_stream()
            self.console.print(f"{self._prefix(thread_id)} {line}", soft_wrap=True)

    def _short(self, text: str) -> str:
        return escape(truncate(text.replace("\n", " "), self.detail_chars).text)

    def _line(self, payload: object) -> str | None:
        match payload:
            case TurnStarted(trigger=trigger, attempt=attempt):
                again = f" (attempt {attempt})" if attempt > 1 else ""
                return f"[bold]turn started[/] [dim]{trigger}{again}[/]"
            case UserMessage(text=text, origin=origin, meta=meta):
                who = self.names.get(origin.ref or "", origin.ref or origin.kind) if origin else "user"
                style = "yellow" if meta else "cyan"
                return f"[{style}]{escape(str(who))} ›[/] {self._short(text)}"
            case AssistantMessage(text=text):
                return f"[white]{self._short(text)}[/]"
            case ToolCall(tool_name=name, input=args):
                return f"[blue]→ {escape(name)}[/] [dim]{self._short(json.dumps(args))}[/]"
            case ToolResult(tool_name=name, output=output, status=status):
                style = "green" if status == "ok" else "red"
                return f"[{style}]← {escape(name)} {status}[/] [dim]{self._short(output)}[/]"
            case RequestOpened(kind=kind, summary=summary, waits_on=waits_on):
                return f"[bold yellow]? {kind}[/] {self._short(summary)} [dim](waits on {waits_on})[/]"
            case RequestResolved(answer=answer, by=by):
                return f"[yellow]✓ answered[/] {self._short(json.dumps(answer))} [dim]by {escape(str(by))}[/]"
            case SubtaskStarted(name=name, role=role):
                return f"[magenta]⇢ spawned {escape(name)}[/] [dim]({escape(role)})[/]"
            case SubtaskEnded(child_session_id=child, status=status):
                return f"[magenta]⇠ sub-agent {escape(self.names.get(child, child))} {status}[/]"
            case ObserverReported(observer_type=kind, report=report):
                return f"[bold red]⚑ observer {escape(kind)}:[/] {self._short(report)}"
            case RuntimeNotice(type=kind, message=message):
                style = {"runtime.error": "red", "runtime.warning": "yellow"}.get(kind, "dim")
                return f"[{style}]{kind}: {self._short(message)}[/]"
            case RuntimeRetry(message=message, attempt=attempt, delay_seconds=delay):
                return f"[yellow]↻ retry {attempt} in {delay:.1f}s:[/] {self._short(message)}"
            case ModelReroute(from_model=old, to_model=new, reason=reason):
                return f"[yellow]⇄ {escape(old)} → {escape(new)}:[/] {self._short(reason)}"
            case TurnEnded(outcome=outcome, reason=reason, error=error, usage=usage):
                style = _OUTCOME_STYLE.get(outcome, "white")
                why = f" — {escape(reason or error or '')}" if reason or error else ""
                return f"[{style}]turn {outcome}[/]{why} [dim]{usage.total_tokens} tokens[/]"
            case _:
                return None

    def on_subscribe(self, thread_id: str, request: object, snapshot: ReplaySnapshot) -> None:
        """Nothing to catch up: this printer follows sessions from their start."""
