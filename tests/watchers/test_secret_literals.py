"""secret-guard runs each pattern only on text holding one of the literals read from the pattern: that skips
work on ordinary text and never misses a match (case folding included: the Kelvin sign, the long s and the
Turkish i's match ASCII letters when case is ignored)."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentwatch.watchers.rules import (
    SECRET_PATTERNS,
    Literals,
    _detectors,
    _Haystack,
    _literals,
    _scan,
    find_secrets,
    placeholder,
)

PATTERNS: list[re.Pattern[str]] = [*SECRET_PATTERNS.values(), *(r for d in _detectors() for r in d.denylist)]


def _variants(literal: str) -> list[str]:
    swaps = {"k": "\u212a", "s": "\u017f", "i": "\u0131"}
    return [
        literal,
        literal.upper(),
        literal.title(),
        "".join(swaps.get(c, c) for c in literal.lower()),
        literal.lower().replace("i", "\u0130"),
    ]


FRAGMENTS = sorted(
    {
        variant
        for pattern in PATTERNS
        for literal in getattr(Literals.of(pattern), "strings", ())
        for variant in _variants(literal)
    }
    | {
        "sk-proj-4f9a8b7c6d5e4f3a2b1c0d9e",
        "AKIAIOSFODNN7EXAMPL3",
        "ghp_0123456789abcdefghijABCDEFGHIJ0123",
        'password = "hunter22xyz"',
        "=",
        ": ",
        '"',
        " ",
        "\n",
        "0123456789abcdef" * 4,
        "abcdefghijklmnopqrstuvwx",
    }
)
TEXTS = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=6)), max_size=10).map("".join)


@settings(max_examples=300, deadline=None)
@given(TEXTS)
@example("DB_PA\u017fSWORD=s3cr3tvalue1")
@example("API_\u212aEY=0123456789abcdef")
@example("\u0130BM_CLOUD_\u0130AM_KEY=" + "a" * 44)
@example("PR\u0131VATE_KEY=abcdefgh1234")
def test_a_text_with_a_match_always_holds_one_of_the_patterns_literals(text: str) -> None:
    haystack = _Haystack(text)
    for pattern in PATTERNS:
        if pattern.search(text) is not None:
            assert haystack.may_match(_literals(pattern)), (pattern.pattern, text)


@settings(max_examples=300, deadline=None)
@given(TEXTS)
@example("sk-us1234")  # a literal (`-us`) that starts inside another one the one-pass regex found (`sk-`)
@example("xoxb")  # one literal in two modes: `xox` exact, and ignoring case
@example("://:_authToken=")  # `://` overlaps `/:_authToken=`
@example("BEGIN PRIVATE KEY-----BEGIN ")
@example("DB_PA\u017fSWORD=s3cr3tvalue1")
def test_the_one_pass_scan_picks_the_patterns_the_literal_checks_pick(text: str) -> None:
    scan = _scan(SECRET_PATTERNS, True)
    haystack = _Haystack(text)
    numbered = scan.numbered
    assert [index for index, _ in numbered] == list(range(len(numbered)))
    assert scan.may_match(text) == {index for index, pattern in numbered if haystack.may_match(_literals(pattern))}


def _every_pattern_everywhere(text: str) -> list[tuple[str, str]]:
    """`find_secrets` as it was before the literals: every pattern and detector run on the whole text."""
    spans: list[tuple[int, int, str, str]] = []

    def add(start: int, end: int, what: str, value: str) -> None:
        if placeholder(value) or any(start < e and s < end for s, e, _, _ in spans):
            return
        spans.append((start, end, what, value))

    for what, pattern in SECRET_PATTERNS.items():
        for match in pattern.finditer(text):
            group = "value" if "value" in pattern.groupindex else 0
            add(match.start(group), match.end(group), what, match.group(group))
    detector: Any
    for detector in _detectors():
        for value in set(detector.analyze_string(text)):
            if not isinstance(value, str) or len(value) < 8:
                continue
            start = text.find(value)
            while start >= 0:
                add(start, start + len(value), f"a secret ({detector.secret_type})", value)
                start = text.find(value, start + 1)
    return [(what, value) for _, _, what, value in sorted(spans)]


@settings(max_examples=300, deadline=None)
@given(TEXTS)
@example("token: eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlLXZhbHVl")  # the JWT detector
def test_find_secrets_finds_what_running_every_pattern_everywhere_finds(text: str) -> None:
    assert find_secrets(text) == _every_pattern_everywhere(text)


def test_a_jwt_is_found() -> None:
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlLXZhbHVl"
    assert find_secrets(f"token: {jwt}") == [("a secret (JSON Web Token)", jwt.rsplit(".", 1)[0] + ".")]


def test_every_own_pattern_and_nearly_every_detector_has_literals() -> None:
    assert all(_literals(pattern) is not None for pattern in SECRET_PATTERNS.values())
    without = [pattern.pattern for pattern in PATTERNS if _literals(pattern) is None]
    assert len(without) <= 2, without
    assert _literals(re.compile(r"(?i)\bpass(?:word)?\s*=")) == Literals(("pass",), caseless=True)
    assert _literals(re.compile(r"[a-z]+|x")) is None  # a branch with no literal: it runs everywhere
