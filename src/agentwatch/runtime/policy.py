"""The policy chain: one place that decides every tool call (and every observer spawn and delivery).

Each `Policy` may allow, deny, ask (a person should approve) or defer (decide later, elsewhere), or have no
opinion. The chain asks every policy; the strictest answer wins: deny > ask > defer > allow. Like
PreToolUse hooks, a policy sees the tool name and its input, and who is calling.

An agent's call runs only on `allow`: `ask` and `defer` refuse it as `deny` does (the model is told the verdict
and its reason); no person is asked. A call a person approves first is one of its role's `approval_tools` (or
of a tool made with `requires_approval`): the chain decides before the person is asked (a call it refuses is
refused at once) and again when the approved call runs.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agentwatch.errors import UserError

__all__ = ["Decision", "GrantPolicy", "Policy", "PolicyChain", "PolicyFn", "ToolRequest", "Verdict", "as_policy"]

Decision = Literal["allow", "deny", "ask", "defer"]
_STRICTNESS: dict[Decision, int] = {"allow": 0, "defer": 1, "ask": 2, "deny": 3}


@dataclass(frozen=True, slots=True)
class ToolRequest:
    """A tool call (or an equivalent request, such as an observer spawn) to decide on."""

    tool_name: str
    """The tool that would run."""
    input: Mapping[str, Any]
    """Its arguments."""
    session_id: str | None = None
    """The calling session; None for a call from Python, the CLI or the API."""
    role: str | None = None
    """The calling session's role."""
    grant: frozenset[str] = frozenset()
    """Capabilities the calling role holds."""
    purpose: Literal["call", "observer_arm", "observer_delivery"] = "call"
    """Why it is asked: an ordinary call, arming an observer, or delivering a digest batch to one."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """A policy's answer."""

    decision: Decision
    reason: str | None = None
    """Why, for a person reading the log."""
    policy: str | None = None
    """The policy that gave it."""


PolicyFn = Callable[[ToolRequest], "Verdict | Awaitable[Verdict | None] | None"]
"""A policy's decision function: a verdict for the request, or None for no opinion; sync or async."""


@dataclass(frozen=True)
class Policy:
    """A named rule: `decide` returns a verdict, or None for no opinion. It may be sync or async."""

    name: str
    decide: PolicyFn


def as_policy(item: Policy | PolicyFn) -> Policy:
    """`item` as a policy: a plain function (sync or async) becomes one named after it, as a plain function
    becomes a tool. Anything else is a `UserError` that says what a policy is."""
    if isinstance(item, Policy):
        return item
    if not callable(item):
        raise UserError(
            f"policies: {item!r} (a {type(item).__name__}) is not a policy; give a Policy(name, decide) or a "
            "function that takes a ToolRequest and returns a Verdict or None"
        )
    return Policy(getattr(item, "__name__", type(item).__name__), item)


@dataclass
class PolicyChain:
    """Every policy, asked in order; the strictest verdict wins."""

    policies: list[Policy] = field(default_factory=list)

    def add(self, policy: Policy) -> None:
        """Add a policy at the end of the chain."""
        self.policies.append(policy)

    async def decide(self, request: ToolRequest, *, timeout: float | None = None) -> Verdict:
        """The chain's verdict. An exception from a policy propagates: callers treat it as a gate error. With
        `timeout`, the policies that answer later (async ones) have that many seconds between them, or the
        chain raises `TimeoutError` naming the one that kept it (a chain that answers at once sets no timer)."""
        verdict = Verdict("allow")
        deadline: float | None = None
        for policy in self.policies:
            answer = policy.decide(request)
            if inspect.isawaitable(answer):
                if timeout is None:
                    answer = await answer
                else:
                    deadline = deadline or asyncio.get_running_loop().time() + timeout
                    try:
                        async with asyncio.timeout_at(deadline):
                            answer = await answer
                    except TimeoutError:
                        raise TimeoutError(f"policy {policy.name!r} did not decide within {timeout:g} s") from None
            if answer is None:
                continue
            answer = Verdict(answer.decision, answer.reason, answer.policy or policy.name)
            if _STRICTNESS[answer.decision] > _STRICTNESS[verdict.decision]:
                verdict = answer
        return verdict


def GrantPolicy(required: Mapping[str, str]) -> Policy:
    """Deny a tool to a calling agent whose role lacks the capability the tool needs (`{"agent_task": "spawn"}`).

    Calls from outside any agent (Python, CLI, API) are not restricted by grants.
    """

    def decide(request: ToolRequest) -> Verdict | None:
        needed = required.get(request.tool_name)
        if needed is None or request.session_id is None or needed in request.grant:
            return None
        return Verdict(
            "deny",
            f"role {request.role!r} has no {needed!r} grant, which {request.tool_name!r} needs; "
            f"add `grant: [{needed}]` to its definition",
        )

    return Policy("grant", decide)
