"""Rule observers: observer types written as Python functions instead of a model, at no token cost.

A rule observer is declared like any observer (`observer: loop-guard`). It receives the same batches of
digests (the structured items and the rendered text) through the same gate, and its reports take the same
`ObserverReport` path to the observed agent. It has no session of its own.

Four come built in and are registered in every engine (the roster gets a `kind: rule` definition for each
unless the project defines that name itself):

| type | reports when |
|---|---|
| `loop-guard` | the same tool is called with the same input 3 times in one turn |
| `failure-guard` | 3 tool calls in a row fail |
| `budget-guard` | a turn uses more than 100,000 tokens or costs more than 1 USD |
| `secret-guard` | a tool input or output holds something like an API key or a private key |

Register your own (or retune a built-in) globally with the decorator, or on one engine:

```python
@rule_observer("todo-guard")
def todo_guard(ctx: RuleContext) -> str | None:
    if any(i.kind == "assistant_text" and "TODO" in i.text for i in ctx.items):
        return "You left a TODO in your answer."
    return None

register_rule_observer("loop-guard", loop_guard(repeats=5))
observer_agents(engine).register_rule("todo-guard", todo_guard)
```

A function may be async, and returns a report, several, or None. `ctx.memory` is kept between batches of
one pairing. A function runs inline in the delivery task: keep it quick. If it raises, the batch is dropped
and a warning recorded.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

from agentwatch.errors import UserError
from agentwatch.events import RuntimeNotice
from agentwatch.runtime.roster import AgentDefinition
from agentwatch.watchers.digest import ActivityItem, Batch, ToolCallItem, ToolResultItem, TurnEndedItem
from agentwatch.watchers.pairing import Pairing, observer_source
from agentwatch.watchers.report import ReportHub, ReportNotDelivered, send_report

__all__ = [
    "BUILTIN_RULES",
    "RuleBook",
    "RuleContext",
    "RuleCourier",
    "RuleFunction",
    "RuleHub",
    "budget_guard",
    "default_rules",
    "failure_guard",
    "loop_guard",
    "register_rule_observer",
    "rule_definition",
    "rule_observer",
    "secret_guard",
]


@dataclass(frozen=True)
class RuleContext:
    """What a rule observer gets for one batch."""

    observed_session_id: str
    """The session it watches."""
    observed_name: str
    """That session's name."""
    items: tuple[ActivityItem, ...]
    """The activity of the batch, oldest first, across its digests."""
    digest: str
    """The batch as a model observer would read it."""
    memory: dict[str, Any]
    """State kept between batches of this pairing (counters, what was already reported)."""


RuleResult: TypeAlias = str | Iterable[str] | None
RuleFunction: TypeAlias = Callable[[RuleContext], RuleResult | Awaitable[RuleResult]]
"""A rule observer: returns a report, several reports, or None for silence."""


class RuleBook:
    """Rule observer functions by type name."""

    def __init__(self, rules: Mapping[str, RuleFunction] | None = None) -> None:
        self._rules: dict[str, RuleFunction] = dict(rules or {})

    def register(self, name: str, function: RuleFunction) -> None:
        """Make `name` run `function` (replacing any function registered under that name)."""
        if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", name):
            raise UserError(f"{name!r} is not a valid agent type; use lowercase letters, digits, '-' and '_'")
        if not callable(function):
            raise UserError(f"rule observer {name!r} must be a function taking a RuleContext")
        self._rules[name] = function

    def get(self, name: str) -> RuleFunction | None:
        """The function for `name`, if any."""
        return self._rules.get(name)

    def copy(self) -> RuleBook:
        """An independent copy (each engine gets one, so per-engine registrations stay there)."""
        return RuleBook(self._rules)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._rules))

    def __contains__(self, name: object) -> bool:
        return name in self._rules


async def run_rule(function: RuleFunction, context: RuleContext) -> list[str]:
    """Call a rule function and normalize what it returns to a list of non-blank reports."""
    result = function(context)
    if inspect.isawaitable(result):
        result = await result
    if result is None:
        return []
    reports = [result] if isinstance(result, str) else list(result)
    return [r.strip() for r in reports if isinstance(r, str) and r.strip()]


# -- built-in rules ------------------------------------------------------------------------------------


def loop_guard(repeats: int = 3) -> RuleFunction:
    """Report when one turn calls the same tool with the same input `repeats` times."""

    def rule(ctx: RuleContext) -> list[str]:
        counts: dict[str, int] = ctx.memory.setdefault("calls", {})
        reported: set[str] = ctx.memory.setdefault("reported", set())
        reports = []
        for item in ctx.items:
            if isinstance(item, TurnEndedItem):
                counts.clear()
                reported.clear()
            elif isinstance(item, ToolCallItem):
                counts[item.fingerprint] = counts.get(item.fingerprint, 0) + 1
                if counts[item.fingerprint] >= repeats and item.fingerprint not in reported:
                    reported.add(item.fingerprint)
                    reports.append(
                        f"Loop guard: you called {item.name} with the same input {counts[item.fingerprint]} times "
                        f"in this turn ({_short(item.input)}). It will give the same result again; change the "
                        "approach or stop."
                    )
        return reports

    return rule


def failure_guard(errors: int = 3) -> RuleFunction:
    """Report when `errors` tool calls in a row fail."""

    def rule(ctx: RuleContext) -> list[str]:
        streak: list[str] = ctx.memory.setdefault("streak", [])
        reports = []
        for item in ctx.items:
            if not isinstance(item, ToolResultItem):
                continue
            if item.status != "error":
                streak.clear()
                continue
            streak.append(item.name)
            if len(streak) == errors:
                tools = ", ".join(dict.fromkeys(streak))
                reports.append(
                    f"Failure guard: your last {errors} tool calls failed ({tools}); the latest said: "
                    f"{_short(item.content)}. Look at why before trying again."
                )
        return reports

    return rule


def budget_guard(max_tokens: int | None = 100_000, max_cost_usd: float | None = 1.0) -> RuleFunction:
    """Report a turn that used more than `max_tokens` tokens or cost more than `max_cost_usd` dollars."""

    def rule(ctx: RuleContext) -> list[str]:
        reports = []
        for item in ctx.items:
            if not isinstance(item, TurnEndedItem):
                continue
            if max_tokens is not None and item.tokens > max_tokens:
                reports.append(
                    f"Budget guard: your last turn used {item.tokens:,} tokens, over the {max_tokens:,} budget "
                    "per turn. Work in smaller steps or read less at once."
                )
            elif max_cost_usd is not None and item.cost_usd is not None and item.cost_usd > max_cost_usd:
                reports.append(
                    f"Budget guard: your last turn cost ${item.cost_usd:.2f}, over the ${max_cost_usd:.2f} "
                    "budget per turn."
                )
        return reports

    return rule


SECRET_PATTERNS: Mapping[str, re.Pattern[str]] = {
    "an API key (sk-...)": re.compile(r"\bsk-[A-Za-z0-9_-]{20,}"),
    "an AWS access key id (AKIA...)": re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    "a GitHub token (gh*_...)": re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"),
    "a Slack token (xox*-...)": re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    "a private key": re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"),
}
"""What the secret guard looks for, by the name its report uses."""


def secret_guard(patterns: Mapping[str, re.Pattern[str]] = SECRET_PATTERNS) -> RuleFunction:
    """Report text like an API key or private key in a tool input or output (once per secret, masked)."""

    def rule(ctx: RuleContext) -> list[str]:
        seen: set[str] = ctx.memory.setdefault("seen", set())
        reports = []
        for item in ctx.items:
            if isinstance(item, ToolCallItem):
                where, text = f"the input of {item.name}", item.input
            elif isinstance(item, ToolResultItem):
                where, text = f"the output of {item.name}", item.content
            else:
                continue
            for what, pattern in patterns.items():
                for match in pattern.finditer(text):
                    if match.group() in seen:
                        continue
                    seen.add(match.group())
                    reports.append(
                        f"Secret guard: {where} holds what looks like {what} ({_mask(match.group())}). Do not "
                        "repeat it, log it or send it anywhere; tell the user it may need rotating."
                    )
        return reports

    return rule


BUILTIN_RULES: Mapping[str, Callable[[], RuleFunction]] = {
    "loop-guard": loop_guard,
    "failure-guard": failure_guard,
    "budget-guard": budget_guard,
    "secret-guard": secret_guard,
}
"""The built-in rule observers, by type, each with its default settings."""

_GLOBAL = RuleBook({name: make() for name, make in BUILTIN_RULES.items()})


def default_rules() -> RuleBook:
    """A copy of the globally registered rule observers (built-ins and `rule_observer` ones)."""
    return _GLOBAL.copy()


def rule_definition(name: str) -> AgentDefinition:
    """The roster entry of a rule observer: an agent type with no model, run by its Python function."""
    return AgentDefinition(name=name, kind="rule", description=f"Rule observer {name} (a Python function)")


def register_rule_observer(name: str, function: RuleFunction) -> None:
    """Register a rule observer for every engine opened afterwards."""
    _GLOBAL.register(name, function)


def rule_observer(name: str) -> Callable[[RuleFunction], RuleFunction]:
    """Decorator form of `register_rule_observer`."""

    def decorate(function: RuleFunction) -> RuleFunction:
        register_rule_observer(name, function)
        return function

    return decorate


def _short(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _mask(secret: str) -> str:
    return f"{secret[:4]}…{len(secret)} chars" if len(secret) > 8 else "…"


# -- delivery -------------------------------------------------------------------------------------------


class RuleHub(ReportHub, Protocol):
    """What a rule courier needs of the observer subsystem: the report path and the rule functions."""

    @property
    def rules(self) -> RuleBook:
        """The rule observers, by type."""


class RuleCourier:
    """Runs a rule observer on a batch and sends what it reports through the ObserverReport path."""

    def __init__(self, hub: RuleHub) -> None:
        self.hub = hub

    async def deliver(self, pairing: Pairing, batch: Batch) -> None:
        """Run the pairing's rule function; refused reports are noted on the observed session."""
        function = self.hub.rules.get(pairing.observer_type)
        if function is None:
            raise LookupError(f"no rule function is registered for {pairing.observer_type!r}")
        items = tuple(item for digest in batch.digests for item in digest.items)
        context = RuleContext(pairing.observed_session_id, pairing.observed_name, items, batch.text, pairing.memory)
        for report in await run_rule(function, context):
            try:
                await send_report(self.hub.registry, pairing, report, report_turn=self.hub.report_turn(pairing))
            except ReportNotDelivered as exc:
                note = RuntimeNotice(
                    type="runtime.info",
                    message=f"a report of {pairing.observer_type} was not delivered: {exc.message}",
                    source=observer_source(pairing.observer_type),
                    detail={"report": report},
                )
                await self.hub.registry.record(pairing, note)
