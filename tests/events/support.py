"""Helpers for tests of cursors."""

from __future__ import annotations

import base64

from agentwatch.events.cursor import _mac


def forged(kind: str, body: bytes) -> str:
    """A cursor of `kind` (`c1.`, `p1.`) around `body`, with the checksum a real one would have: the checksum
    is no secret, so anyone can make one."""
    return kind + base64.urlsafe_b64encode(body + _mac(body)).rstrip(b"=").decode()
