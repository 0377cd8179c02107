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
_RANDOM_BITS: Final = 80
_lock = threading.Lock()
_last_ms = -1
_last_random = 0


def _encode(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        value, digit = divmod(value, 32)
        chars.append(_ALPHABET[digit])
    return "".join(reversed(chars))


def new_id(prefix: IdPrefix) -> str:
    """A new id such as `ses_01jdq3v9c8k2m6n4p7r0s5t8w1`, greater than every id this process made before."""
    global _last_ms, _last_random
    with _lock:
        now_ms = time.time_ns() // 1_000_000
        if now_ms <= _last_ms:
            # Same (or an earlier, after a clock step) millisecond: count up so order holds.
            now_ms = _last_ms
            _last_random += 1
        else:
            _last_random = int.from_bytes(os.urandom(10)) >> 1  # headroom so counting up cannot overflow
        _last_ms = now_ms
        body = (now_ms << _RANDOM_BITS) | (_last_random & ((1 << _RANDOM_BITS) - 1))
    return f"{prefix}_{_encode(body, 26)}"
