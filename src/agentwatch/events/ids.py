"""Identifiers: a short prefix that says what a thing is, then 26 sortable characters.

`ses_01jdq3...` sorts by creation time (48 bits of milliseconds, then 80 bits that count up within a
millisecond from a random start), so ids from one process are strictly increasing and ids from many
processes are unique and roughly time-ordered.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Final, Literal, NewType

__all__ = [
    "ConversationId",
    "EventId",
    "IdPrefix",
    "InputId",
    "RequestId",
    "RunId",
    "SessionId",
    "SpanId",
    "TurnId",
    "new_id",
]

SessionId = NewType("SessionId", str)
EventId = NewType("EventId", str)
TurnId = NewType("TurnId", str)
RunId = NewType("RunId", str)
SpanId = NewType("SpanId", str)
RequestId = NewType("RequestId", str)
ConversationId = NewType("ConversationId", str)
InputId = NewType("InputId", str)

IdPrefix = Literal["ses", "evt", "trn", "run", "spn", "req", "cnv", "inp", "use", "jrn"]
"""`ses` session, `evt` event, `trn` turn, `run` run, `spn` span, `req` request (HITL), `cnv` conversation,
`inp` inbox input, `use` usage ledger entry, `jrn` run journal entry."""

_ALPHABET: Final = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case
_PAIRS: Final = tuple(high + low for high in _ALPHABET for low in _ALPHABET)
"""Every 10-bit value as its two characters."""
_RANDOM_BITS: Final = 80
_RANDOM_MASK: Final = (1 << _RANDOM_BITS) - 1
_lock = threading.Lock()
_last_ms = -1
_last_random = 0
_last_ms_text = ""
_last_high = -1
_last_high_text = ""


def _encode(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        value, digit = divmod(value, 32)
        chars.append(_ALPHABET[digit])
    return "".join(reversed(chars))


def _encode_high(value: int) -> str:
    """The first 12 of the 16 characters of 80 bits (`_encode(value, 16)[:12]`): the 60 bits above the low 20."""
    p = _PAIRS
    return (
        p[value >> 70]
        + p[(value >> 60) & 1023]
        + p[(value >> 50) & 1023]
        + p[(value >> 40) & 1023]
        + p[(value >> 30) & 1023]
        + p[(value >> 20) & 1023]
    )


def new_id(prefix: IdPrefix) -> str:
    """A new id such as `ses_01jdq3v9c8k2m6n4p7r0s5t8w1`, greater than every id this process made before.

    The 26 characters are the 48-bit millisecond (10 characters, encoded once per millisecond) followed by
    the 80 counting bits (16 characters): 80 is a multiple of 5, so the two parts never share a character.
    Counting up changes the low 20 bits of the 80 (4 characters) in all but one count of a million, so the
    text of the other 60 is kept from the id before.
    """
    global _last_ms, _last_random, _last_ms_text, _last_high, _last_high_text
    with _lock:
        now_ms = time.time_ns() // 1_000_000
        if now_ms <= _last_ms:
            # Same (or an earlier, after a clock step) millisecond: count up so order holds.
            value = _last_random = (_last_random + 1) & _RANDOM_MASK
        else:
            value = _last_random = int.from_bytes(os.urandom(10)) >> 1  # headroom so counting up cannot overflow
            _last_ms = now_ms
            _last_ms_text = _encode(now_ms, 10)
        high = value >> 20
        if high != _last_high:
            _last_high, _last_high_text = high, _encode_high(value)
        return f"{prefix}_{_last_ms_text}{_last_high_text}{_PAIRS[(value >> 10) & 1023]}{_PAIRS[value & 1023]}"
