"""Rule observers: observer types written as Python functions instead of a model, at no token cost.

A rule observer is declared like any observer (`observer: loop-guard`). It receives the same batches of
digests (the structured items and the rendered text) through the same gate, and its reports take the same
`ObserverReport` path to the observed agent. It has no session of its own.

Five come built in and are registered in every engine (the roster gets a `kind: rule` definition for each
unless the project defines that name itself). They read whole texts (`full_input`, `full_content`,
`full_text`), not the digest's 2,000-character cut, and see each tool call as soon as it is made:

| type | reports when |
|---|---|
| `loop-guard` | one turn calls a tool with the same input (canonical JSON) 3 times and gets the same result |
| `failure-guard` | 3 tool calls in a row fail: an `error` result or a non-zero exit code a shell tool reports |
| `budget-guard` | a turn uses more than 100,000 tokens or costs more than 1 USD |
| `secret-guard` | a tool input or output, or the agent's answer, holds a key, token, private key or password |
| `command-guard` | a tool input holds a destructive shell or SQL command (it advises: the tool still runs) |

`secret-guard` asks detect-secrets' detectors and its own patterns, and leaves placeholders, UUIDs, hashes
and public keys out (`find_secrets`); `command-guard`'s list is in `destructive_commands`.

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

import functools
import hashlib
import inspect
import json
import re
import re._constants as _sre_constants  # type: ignore[import-not-found]  # `re`'s own parser: no stubs
import re._parser as _sre_parser  # type: ignore[import-not-found]
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

from agentwatch.errors import UserError
from agentwatch.events import RuntimeNotice
from agentwatch.runtime.roster import AgentDefinition
from agentwatch.watchers.digest import (
    ActivityItem,
    AssistantTextItem,
    Batch,
    ToolCallItem,
    ToolResultItem,
    TurnEndedItem,
)
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
    "command_guard",
    "default_rules",
    "destructive_commands",
    "exit_failure",
    "failure_guard",
    "find_secrets",
    "loop_guard",
    "placeholder",
    "register_rule_observer",
    "rule_definition",
    "rule_observer",
    "secret_guard",
]


class RuleContext:
    """What a rule observer gets for one batch."""

    __slots__ = ("_digest", "items", "memory", "observed_name", "observed_session_id")

    def __init__(
        self,
        observed_session_id: str,
        observed_name: str,
        items: tuple[ActivityItem, ...],
        digest: str | Batch,
        memory: dict[str, Any],
    ) -> None:
        self.observed_session_id = observed_session_id
        """The session it watches."""
        self.observed_name = observed_name
        """That session's name."""
        self.items = items
        """The activity of the batch, oldest first, across its digests."""
        self._digest = digest
        self.memory = memory
        """State kept between batches of this pairing (counters, what was already reported)."""

    @property
    def digest(self) -> str:
        """The batch as a model observer would read it (rendered when a rule first reads it)."""
        return self._digest if isinstance(self._digest, str) else self._digest.text


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
    return _reports(result)


def _reports(result: RuleResult) -> list[str]:
    if result is None:
        return []
    reports = [result] if isinstance(result, str) else list(result)
    return [r.strip() for r in reports if isinstance(r, str) and r.strip()]


# -- built-in rules ------------------------------------------------------------------------------------
#
# Rules read whole texts (`full_input`, `full_content`, `full_text`), not the digest's 2,000-character cut.


def loop_guard(repeats: int = 3) -> RuleFunction:
    """Report when one turn calls the same tool with the same input `repeats` times and gets the same result
    each time (inputs compared as canonical JSON; a poll whose result changes is not a loop). A call whose
    result is never seen (no call id) counts on its input alone."""

    def rule(ctx: RuleContext) -> list[str]:
        counts: dict[str, int] = ctx.memory.setdefault("calls", {})
        reported: set[str] = ctx.memory.setdefault("reported", set())
        pending: dict[str, ToolCallItem] = ctx.memory.setdefault("pending", {})
        reports = []

        def count(key: str, call: ToolCallItem) -> None:
            counts[key] = counts.get(key, 0) + 1
            if counts[key] >= repeats and key not in reported:
                reported.add(key)
                reports.append(
                    f"Loop guard: you called {call.name} with the same input {counts[key]} times in this turn "
                    f"({_short(call.input)}). It will give the same result again; change the approach or stop."
                )

        for item in ctx.items:
            if isinstance(item, TurnEndedItem):
                counts.clear()
                reported.clear()
                pending.clear()
            elif isinstance(item, ToolCallItem):
                if item.call_id is None:
                    count(item.fingerprint, item)
                else:
                    pending[item.call_id] = item
            elif isinstance(item, ToolResultItem) and item.call_id is not None:
                call = pending.pop(item.call_id, None)
                if call is not None:
                    outcome = hashlib.sha256(f"{item.status}\0{item.full_content}".encode()).hexdigest()[:16]
                    count(f"{call.fingerprint}:{outcome}", call)
        return reports

    return rule


_EXIT_CODE = re.compile(
    r"""(?ix)
    (?:\bexit(?:ed)?[\s_-]*(?:with[\s_-]*)?(?:code|status)|\bexit_?code|\breturn[\s_-]?code|\bexitcode|\brc)
    ["']?\s*(?:[:=]|\bis\b|\bwas\b|\bof\b)?\s*["']?\s*(?P<code>-?\d{1,3})\b"""
)
_READER_TOOL = re.compile(
    r"(?i)(?:^|[_\W])(?:read|view|cat|open|fetch|get|search|grep|find|list|show|tail|head|browse)"
)


def exit_failure(item: ToolResultItem) -> str | None:
    """The non-zero exit code a tool result reports (`exit code: 1`, `"returncode": 2`, `Exit status 127`),
    if any. Looked for in the first and last three lines, where shell tools put it, and not in the output of
    tools that read things (a file or log that quotes an exit code is not a failure of the read)."""
    if _READER_TOOL.search(item.name):
        return None
    lines = [line for line in item.full_content.splitlines() if line.strip()]
    for line in [*lines[:3], *lines[-3:]] if len(lines) > 6 else lines:
        for found in _EXIT_CODE.finditer(line):
            if int(found.group("code")) != 0:
                return found.group()
    return None


def failure_guard(errors: int = 3) -> RuleFunction:
    """Report when `errors` tool calls in a row fail: an `error` status, or a non-zero exit code in the
    result (see `exit_failure`)."""

    def rule(ctx: RuleContext) -> list[str]:
        streak: list[str] = ctx.memory.setdefault("streak", [])
        reports = []
        for item in ctx.items:
            if not isinstance(item, ToolResultItem):
                continue
            if item.status != "error" and exit_failure(item) is None:
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
    "a private key": re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),
    "a Stripe secret key (sk_live_...)": re.compile(r"\b[sr]k_live_[0-9A-Za-z]{16,}"),
    "a Google API key (AIza...)": re.compile(r"\bAIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])"),
    "a password or secret assignment": re.compile(
        # The key ends with the keyword (DB_PASSWORD, client_secret, GITHUB_TOKEN, api-key), so `secretName`,
        # `password_hash` or `next_page_token` are not read as holding one.
        r"""(?ix)
        (?<![\w-])[\w.-]*(?:passw(?:or)?d|passwd|secret|api[_-]?key|secret[_-]?key|private[_-]?key|
        (?:access|auth|refresh|bearer|api|github|gitlab|slack|npm|pypi|bot)[_-]?token)["']?
        \s*(?::=|=|:)\s*
        (?P<quote>["']?)(?P<value>[^\s"'`,;)}\]]{6,})(?P=quote)"""
    ),
}
"""What the secret guard looks for with its own patterns, by the name its report uses (the maintained
detectors of the `detect-secrets` project are asked too)."""

_PLACEHOLDER = re.compile(
    r"""(?ix)
    your|example|sample|placeholder|dummy|fake|redacted|changeme|change[_-]?me|replace|insert|goes[_-]?here|
    xxxx|\*\*\*|\.\.\.|…|<|>|\$\{|\$[A-Z_]|\{\{|%\(|\bnone\b|\bnull\b|undefined|\btodo\b|\bmock|
    ^(?:password|passw0rd|secret|pass|hunter2|admin|root|test|testing)\d*$|^(.)\1+$"""
)
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)
_CODE_VALUE = re.compile(
    r"[(\[]|^(?:/|~/|\./|os\.|process\.env|env\.|self\.|settings\.|config\.|secrets\.|getenv|true$|false$)", re.I
)


def placeholder(value: str) -> bool:
    """Whether a candidate secret is an example or a reference rather than a value: `sk-your-key-here`,
    `xxxx`, `<your-key>`, `${TOKEN}`, `changeme`, a UUID, or code such as `os.environ["KEY"]`."""
    return bool(_PLACEHOLDER.search(value) or _UUID.match(value) or _CODE_VALUE.search(value))


def _maintained_detectors() -> list[Any]:
    """The regex detectors of `detect-secrets` (imported on first use), but the public-IP one: not a secret."""
    import importlib
    import pkgutil

    import detect_secrets.plugins as plugins
    from detect_secrets.plugins.base import RegexBasedDetector

    found = []
    for module_info in pkgutil.iter_modules(plugins.__path__):
        module = importlib.import_module(f"{plugins.__name__}.{module_info.name}")
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, RegexBasedDetector)
                and value is not RegexBasedDetector
                and value.__module__ == module.__name__
                and value.__name__ != "IPPublicDetector"
            ):
                found.append(value())
    return found


_DETECTORS: list[Any] | None = None


def _detectors() -> list[Any]:
    global _DETECTORS
    if _DETECTORS is None:
        _DETECTORS = _maintained_detectors()
    return _DETECTORS


def find_secrets(
    text: str, patterns: Mapping[str, re.Pattern[str]] = SECRET_PATTERNS, *, maintained: bool = True
) -> list[tuple[str, str]]:
    """The secrets in `text` as (what, value), in the order they appear: `patterns` first, then the
    `detect-secrets` detectors for what they add; placeholders and examples are left out.

    A pattern runs only on a text holding one of the literals every match of it contains (see `Literals`),
    which finds exactly what running it everywhere would, at a fraction of the cost on ordinary text. Which
    literals a text holds is found for all the patterns at once (see `_Scan`)."""
    return _secrets_in(text, _scan(patterns, maintained))


def _secrets_in(text: str, scan: _Scan) -> list[tuple[str, str]]:
    spans: list[tuple[int, int, str, str]] = []
    may = scan.may_match(text)

    def add(start: int, end: int, what: str, value: str) -> None:
        if placeholder(value) or any(start < e and s < end for s, e, _, _ in spans):
            return
        spans.append((start, end, what, value))

    for index, what, pattern in scan.own:
        if index not in may:
            continue
        for match in pattern.finditer(text):
            group = "value" if "value" in pattern.groupindex else 0
            add(match.start(group), match.end(group), what, match.group(group))
    for detector, detector_patterns, numbers in scan.detectors:
        if numbers is not None and numbers.isdisjoint(may):
            continue  # none of its patterns may match
        for value in set(_detected(detector, detector_patterns, text, may)):
            if not isinstance(value, str) or len(value) < 8:
                continue
            start = text.find(value)
            while start >= 0:
                add(start, start + len(value), f"a secret ({detector.secret_type})", value)
                start = text.find(value, start + 1)
    return [(what, value) for _, _, what, value in sorted(spans)]


@functools.cache
def _detector_patterns() -> tuple[tuple[Any, tuple[tuple[re.Pattern[str], Literals | None], ...] | None], ...]:
    """Each `detect-secrets` detector with its patterns and their literals (None for a detector with an
    `analyze_string` of its own, which is asked as it is)."""
    from detect_secrets.plugins.base import RegexBasedDetector

    return tuple(
        (
            detector,
            tuple((regex, Literals.of(regex)) for regex in detector.denylist)
            if type(detector).analyze_string is RegexBasedDetector.analyze_string
            else None,
        )
        for detector in _detectors()
    )


_DetectorPatterns: TypeAlias = tuple[tuple[int, re.Pattern[str]], ...] | None


def _detected(detector: Any, patterns: _DetectorPatterns, text: str, may: AbstractSet[int]) -> list[str]:
    """What a detector finds, as its `analyze_string` yields it, each of its patterns run only where it may
    match (`may`: the numbers of the patterns that may match `text`)."""
    if patterns is None:
        return list(detector.analyze_string(text))
    found: list[str] = []
    for index, regex in patterns:
        if index in may:
            for match in regex.findall(text):
                if isinstance(match, tuple):
                    found.extend(filter(bool, match))
                else:
                    found.append(match)
    return found


class _Scan:
    """The patterns `find_secrets` runs, numbered, and which of them may match a text, found in one pass.

    A text holds a pattern's literal exactly when one regex made of every literal (the longest first) finds
    it, finds a longer literal it begins, or finds a literal it overlaps (the regex does not look inside
    what it matched); the literals in those last two cases are few, and are looked for one by one. So a
    pattern may match a text exactly when `_Haystack.may_match` says so, at the cost of one regex over the
    text (and one over its case folding) instead of one search per literal."""

    def __init__(
        self, own: Mapping[str, re.Pattern[str]], detectors: Iterable[tuple[Any, Iterable[re.Pattern[str]] | None]]
    ) -> None:
        numbered: list[tuple[int, Literals | None]] = []
        self.numbered: list[tuple[int, re.Pattern[str]]] = []
        """Every pattern, by number."""

        def number(pattern: re.Pattern[str]) -> int:
            numbered.append((len(numbered), _literals(pattern)))
            self.numbered.append((len(numbered) - 1, pattern))
            return len(numbered) - 1

        self.own = tuple((number(pattern), what, pattern) for what, pattern in own.items())
        """(number, what it finds, pattern) of each own pattern, in order."""
        entries: list[tuple[Any, _DetectorPatterns, frozenset[int] | None]] = []
        for detector, patterns in detectors:
            if patterns is not None:
                pairs = tuple((number(regex), regex) for regex in patterns)
                entries.append((detector, pairs, frozenset(index for index, _ in pairs)))
            else:
                entries.append((detector, None, None))
        self.detectors = tuple(entries)
        """Each detector with its numbered patterns and their numbers (None for a detector asked through its own
        `analyze_string`, always)."""
        self.always = frozenset(index for index, literals in numbered if literals is None)
        self.exact = _LiteralFinder({(lit, i) for i, ls in numbered if ls and not ls.caseless for lit in ls.strings})
        self.caseless = _LiteralFinder({(lit, i) for i, ls in numbered if ls and ls.caseless for lit in ls.strings})

    def may_match(self, text: str) -> set[int]:
        """The numbers of the patterns that may match `text`."""
        may = set(self.always)
        self.exact.patterns_in(text, may)
        if self.caseless.regex is not None:
            # See `_Haystack.may_match`: how `re` ignores case, for the ASCII letters the literals are made of.
            folded = text.lower() if text.isascii() else text.translate(_TURKISH_I).casefold()
            self.caseless.patterns_in(folded, may)
        return may


class _LiteralFinder:
    """Which of a set of literals a text holds, and so which patterns (by number) may match it."""

    def __init__(self, literals: AbstractSet[tuple[str, int]]) -> None:
        strings = sorted({literal for literal, _ in literals}, key=lambda s: (-len(s), s))
        self.regex = re.compile("|".join(map(re.escape, strings))) if strings else None
        numbers: dict[str, set[int]] = {}
        for literal, index in literals:
            numbers.setdefault(literal, set()).add(index)
        # For each literal the regex may find: the patterns it stands for together with the literals it begins
        # with (found there too), and the literals that start within it, which the regex may have skipped.
        self._numbers: dict[str, frozenset[int]] = {}
        self._within: dict[str, tuple[str, ...]] = {}
        for found in strings:
            self._numbers[found] = frozenset(i for s in strings if found.startswith(s) for i in numbers[s])
            self._within[found] = tuple(
                s
                for s in strings
                if not found.startswith(s)
                and any(found.startswith(s[: len(found) - k], k) for k in range(1, len(found)))
            )
        self._each = numbers

    def patterns_in(self, text: str, may: set[int]) -> None:
        """Add to `may` the numbers of the patterns whose literals `text` holds."""
        if self.regex is None:
            return
        found = set(self.regex.findall(text))
        for literal in found:
            may |= self._numbers[literal]
        for literal in found:
            for inner in self._within[literal]:
                if inner not in found and inner in text:
                    may |= self._each[inner]


_Patterns: TypeAlias = Mapping[str, re.Pattern[str]]
_SCANS: dict[tuple[int, bool], tuple[_Patterns, tuple[tuple[str, re.Pattern[str]], ...], _Scan]] = {}


def _scan(patterns: Mapping[str, re.Pattern[str]], maintained: bool) -> _Scan:
    """The `_Scan` of `patterns` (and the detectors, when `maintained`), made once per mapping (kept by its
    identity, with its items: a mapping changed since is scanned afresh)."""
    current = tuple(patterns.items())
    known = _SCANS.get((id(patterns), maintained))
    if known is None or known[0] is not patterns or known[1] != current:
        detectors = (
            [
                (detector, None if pairs is None else [regex for regex, _ in pairs])
                for detector, pairs in _detector_patterns()
            ]
            if maintained
            else []
        )
        known = _SCANS[(id(patterns), maintained)] = (patterns, current, _Scan(patterns, detectors))
    return known[2]


@dataclass(frozen=True, slots=True)
class Literals:
    """Strings one of which every match of a pattern contains, read from the pattern itself: a text holding
    none of them holds no match, so the pattern need not run on it."""

    strings: tuple[str, ...]
    """Sorted."""
    caseless: bool
    """The pattern ignores case: the strings are lowercase and looked for in the text's case folding."""

    @staticmethod
    def of(pattern: re.Pattern[str]) -> Literals | None:
        """The literals of `pattern`; None when none can be read (then it runs on every text)."""
        try:
            found = _required(_sre_parser.parse(pattern.pattern, pattern.flags))
        except Exception:  # an unusual pattern: no shortcut, the pattern runs everywhere
            return None
        caseless = bool(pattern.flags & re.IGNORECASE)
        if found is None or (caseless and not all(s.isascii() for s in found)):
            return None
        return Literals(tuple(sorted({s.lower() for s in found} if caseless else found)), caseless)


class _Haystack:
    """A text and, when first needed, its case folding, for `Literals` checks."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._folded: str | None = None

    def may_match(self, literals: Literals | None) -> bool:
        """Whether a pattern with these literals may match the text (always, with None)."""
        if literals is None:
            return True
        if literals.caseless:
            if self._folded is None:
                # Every character `re` matches to an ASCII letter when ignoring case folds to that letter once
                # the two Turkish i's are made plain (the Kelvin sign and the long s already fold to k and s).
                self._folded = self.text.translate(_TURKISH_I).casefold()
            haystack = self._folded
        else:
            haystack = self.text
        strings = literals.strings
        return strings[0] in haystack if len(strings) == 1 else any(string in haystack for string in strings)


_TURKISH_I = {0x130: "i", 0x131: "i"}
_LITERALS: dict[int, tuple[re.Pattern[str], Literals | None]] = {}


def _literals(pattern: re.Pattern[str]) -> Literals | None:
    """`Literals.of(pattern)`, read once per pattern (kept by identity: hashing a pattern costs more than
    looking for its literals)."""
    known = _LITERALS.get(id(pattern))
    if known is None or known[0] is not pattern:
        known = _LITERALS[id(pattern)] = (pattern, Literals.of(pattern))
    return known[1]


_REPEATS = frozenset({_sre_constants.MAX_REPEAT, _sre_constants.MIN_REPEAT, _sre_constants.POSSESSIVE_REPEAT})


def _required(items: Any) -> set[str] | None:
    """Strings one of which every match of the parsed sequence `items` contains (the most selective set found
    among its runs of literal characters and its required parts), or None."""
    candidates: list[set[str]] = []
    run: list[str] = []
    for op, arg in items:
        if op is _sre_constants.LITERAL:
            run.append(chr(arg))
            continue
        if run:
            candidates.append({"".join(run)})
            run = []
        inner: set[str] | None = None
        if op is _sre_constants.SUBPATTERN and not arg[1] and not arg[2]:  # a group that sets no flags
            inner = _required(arg[3])
        elif op is _sre_constants.ATOMIC_GROUP:
            inner = _required(arg)
        elif op in _REPEATS and arg[0] >= 1:
            inner = _required(arg[2])
        elif op is _sre_constants.BRANCH:
            branches = [_required(branch) for branch in arg[1]]
            if all(branch is not None for branch in branches):
                inner = set().union(*(branch for branch in branches if branch is not None))
        if inner:
            candidates.append(inner)
    if run:
        candidates.append({"".join(run)})
    candidates = [c for c in candidates if c and all(c)]
    if not candidates:
        return None
    return max(candidates, key=lambda c: (min(map(len, c)), -len(c)))


def secret_guard(patterns: Mapping[str, re.Pattern[str]] = SECRET_PATTERNS, *, maintained: bool = True) -> RuleFunction:
    """Report text like an API key, a private key or a password in a tool input or output or in the agent's
    own answer (once per secret, masked). `maintained=False` leaves the `detect-secrets` detectors out."""

    def rule(ctx: RuleContext) -> list[str]:
        seen: set[str] = ctx.memory.setdefault("seen", set())
        scan = _scan(patterns, maintained)
        reports = []
        for item in ctx.items:
            if isinstance(item, ToolCallItem):
                where, text = f"the input of {item.name}", item.full_input
            elif isinstance(item, ToolResultItem):
                where, text = f"the output of {item.name}", item.full_content
            elif isinstance(item, AssistantTextItem):
                where, text = "your own answer", item.full_text
            else:
                continue
            for what, value in _secrets_in(text, scan):
                if value in seen:
                    continue
                seen.add(value)
                reports.append(
                    f"Secret guard: {where} holds what looks like {what} ({_mask(value)}). Do not "
                    "repeat it, log it or send it anywhere; tell the user it may need rotating."
                )
        return reports

    return rule


_RUNNER_TOOL = re.compile(r"(?i)bash|shell|\bsh\b|zsh|exec|run|command|cmd|terminal|console|sql|query|psql|mysql|db")
_COMMAND_KEY = re.compile(r"(?i)^(?:command|commands|cmd|script|shell|bash|query|sql|statement|code|args|argv)$")
_RM = re.compile(r"(?<![\w/.-])rm\s+(?P<args>[^;&|\n]*)")
_DANGEROUS_PATH = re.compile(
    r"""^["']?(?:/|/\*|~|~/|~/\*|\$HOME/?\*?|\$\{HOME\}/?\*?|\*|\.|\./|\./\*|\.\.|\.\./?\*?|/[A-Za-z0-9_.-]+/?\*?)["']?$"""
)
_SEARCHING = re.compile(r"^\s*(?:grep|egrep|rg|ag|ack|git\s+(?:grep|log|show|diff)|find|echo|printf|man|less)\b")
_DESTRUCTIVE: Mapping[str, re.Pattern[str]] = {
    "a table, database or schema drop": re.compile(
        r"(?i)(?:^|[;\n(\"'`]|\bexecute\s*\(\s*[\"'])\s*drop\s+(?:table|database|schema)\b[^;\n]*"
    ),
    "a TRUNCATE": re.compile(r"(?i)(?:^|[;\n(\"'`])\s*truncate\s+(?:table\s+)?[\w.\"`\[\]]+[^;\n]*"),
    "a DELETE with no WHERE": re.compile(
        r"(?i)(?:^|[;\n(\"'`])\s*delete\s+from\s+[\w.\"`\[\]]+(?:\s+(?:as\s+)?\w+)?\s*(?=$|;|\)|\"|'|`|--|\n)"
    ),
    "a forced git push": re.compile(
        r"\bgit\s+(?:-[Cc]\s+\S+\s+)*push\b[^;&|\n]*?(?:\s--force(?![-\w])|\s-[a-zA-Z]*f[a-zA-Z]*\b|\s\+[\w/.-]+)"
    ),
    "a file system format (mkfs)": re.compile(r"(?<![\w/.-])mkfs(?:\.\w+)?\b[^;&|\n]*"),
    "a raw write to a device (dd of=/dev/...)": re.compile(
        r"(?<![\w/.-])dd\b[^;&|\n]*\bof=/dev/(?!null\b|zero\b|stdout\b|stderr\b|fd/)\S*"
    ),
}


def destructive_commands(tool_name: str, tool_input: str) -> list[tuple[str, str]]:
    """The destructive shell and SQL commands in a tool's input, as (what, the command): recursive `rm` of
    `/`, `~`, `*`, `.` or a top-level directory, `DROP TABLE`/`DATABASE`/`SCHEMA`, `TRUNCATE`, `DELETE FROM`
    without `WHERE`, `git push --force`/`-f`/`+ref` (not `--force-with-lease`), `mkfs`, `dd of=/dev/...`.

    Read in the strings of a runner tool (a name like `bash`, `shell`, `exec`, `run`, `sql`, `query`) or
    under keys like `command`, `script`, `query` or `sql` of any tool: a file written with such a line in
    it is not a command run. Searches and prints (`grep "DROP TABLE"`, `echo ...`) are left alone."""
    try:
        parsed = json.loads(tool_input)
    except ValueError:
        parsed = tool_input
    runner = bool(_RUNNER_TOOL.search(tool_name))
    found: list[tuple[str, str]] = []
    for key, text in _strings(parsed, None):
        if not (runner or (key is not None and _COMMAND_KEY.match(key))):
            continue
        for statement in re.split(r"\n|&&|\|\||;(?=\s*\w)", text) if "\n" in text or "&&" in text else [text]:
            if _SEARCHING.match(statement):
                continue
            found += _commands_in(statement)
    return list(dict.fromkeys(found))


def _commands_in(text: str) -> list[tuple[str, str]]:
    found = []
    for match in _RM.finditer(text):
        words = match.group("args").split()
        flags = "".join(w[1:] for w in words if w.startswith("-") and not w.startswith("--"))
        long_flags = {w for w in words if w.startswith("--")}
        recursive = "r" in flags.lower() or "--recursive" in long_flags
        targets = [w for w in words if not w.startswith("-")]
        if "--no-preserve-root" in long_flags or (recursive and any(_DANGEROUS_PATH.match(t) for t in targets)):
            found.append(("a recursive delete of a whole tree (rm -r)", match.group().strip()))
    for what, pattern in _DESTRUCTIVE.items():
        for match in pattern.finditer(text):
            found.append((what, match.group().strip(" \n;(\"'`")))
    return found


def _strings(value: object, key: str | None) -> Iterator[tuple[str | None, str]]:
    if isinstance(value, str):
        yield key, value
    elif isinstance(value, dict):
        for name, inner in value.items():
            yield from _strings(inner, str(name))
    elif isinstance(value, list):
        for inner in value:
            yield from _strings(inner, key)


def command_guard() -> RuleFunction:
    """Report a destructive shell or SQL command in a tool's input as soon as the call is made (see
    `destructive_commands`). It advises: the tool still runs; an approval tool is how a person stops it."""

    def rule(ctx: RuleContext) -> list[str]:
        seen: set[tuple[str, str]] = ctx.memory.setdefault("commands", set())
        reports = []
        for item in ctx.items:
            if isinstance(item, TurnEndedItem):
                seen.clear()
            if not isinstance(item, ToolCallItem):
                continue
            for what, command in destructive_commands(item.name, item.full_input):
                if (item.fingerprint, command) in seen:
                    continue
                seen.add((item.fingerprint, command))
                reports.append(
                    f"Command guard: your call to {item.name} runs {what}: `{_short(command, 160)}`. It cannot "
                    "be undone; make sure the user asked for exactly this, and say so if it was a mistake."
                )
        return reports

    return rule


BUILTIN_RULES: Mapping[str, Callable[[], RuleFunction]] = {
    "loop-guard": loop_guard,
    "failure-guard": failure_guard,
    "budget-guard": budget_guard,
    "secret-guard": secret_guard,
    "command-guard": command_guard,
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
        rest = self.run_now(pairing, batch)
        if rest is not None:
            await rest

    def run_now(self, pairing: Pairing, batch: Batch) -> Coroutine[Any, Any, None] | None:
        """Run the pairing's rule function on the batch now. Returns what is left to await (an async function,
        or reports to send), or None when a plain function reported nothing: the batch is then dealt with
        without waiting on anything (most batches)."""
        function = self.hub.rules.get(pairing.observer_type)
        if function is None:
            raise LookupError(f"no rule function is registered for {pairing.observer_type!r}")
        items = tuple(item for digest in batch.digests for item in digest.items)
        result = function(RuleContext(pairing.observed_session_id, pairing.observed_name, items, batch, pairing.memory))
        if inspect.isawaitable(result):
            return self._send(pairing, result)
        reports = _reports(result)
        return self._send(pairing, reports) if reports else None

    async def _send(self, pairing: Pairing, result: Awaitable[RuleResult] | list[str]) -> None:
        """Send the reports (awaiting an async function's result first); refused ones are noted."""
        reports = result if isinstance(result, list) else _reports(await result)
        for report in reports:
            try:
                await send_report(self.hub.registry, pairing, report)
            except ReportNotDelivered as exc:
                note = RuntimeNotice(
                    type="runtime.info",
                    message=f"a report of {pairing.observer_type} was not delivered: {exc.message}",
                    source=observer_source(pairing.observer_type),
                    detail={"report": report},
                )
                await self.hub.registry.record(pairing, note)
