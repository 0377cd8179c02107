"""A read view over a bare store: what an engine gives the read tools, without running any turns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentwatch.config import Config
from agentwatch.live import LiveRing
from agentwatch.live.memory import MemoryRing
from agentwatch.runtime.roster import AgentDefinition, RoleSessions, Roster
from agentwatch.store import SessionDraft, SessionPatch, SessionRecord, Store


@dataclass
class StoreView:
    """An `EngineView` over a real store and a roster built in Python."""

    store: Store
    roster: Roster
    config: Config = field(default_factory=Config)
    ring: LiveRing = field(default_factory=MemoryRing)

    def stuck_after(self, role: str) -> float:
        defaults = self.config.sessions
        if role in self.roster:
            return self.roster.get(role).resolved_sessions(defaults).stuck_after_seconds
        return defaults.stuck_after_seconds


def roster(**stuck_after: float | None) -> Roster:
    """Roles named by the keywords, each with its own stuck threshold (None: the project default)."""
    return Roster(
        AgentDefinition(name=name, model="scripted:none", sessions=RoleSessions(stuck_after_seconds=seconds))
        for name, seconds in stuck_after.items()
    )


async def make_session(store: Store, name: str, role: str = "chat", **fields: Any) -> SessionRecord:
    """A session with `fields` (status and other patchable ones written after creation)."""
    patchable = {k: fields.pop(k) for k in list(fields) if k in SessionPatch.model_fields}
    session = await store.create_session(SessionDraft(name=name, role=role, **fields))
    if patchable:
        session = await store.update_session(session.id, SessionPatch(**patchable))
    return session
