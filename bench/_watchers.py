"""WebSocket watchers for the service figures, run in a process of their own so they never share the server's
event loop (or its GIL).

Each watcher is a raw non-blocking socket that speaks just enough of RFC 6455 to attach (the upgrade request,
unmasked server frames, a pong for each ping), all of them on one `selectors` loop, so one watcher costs a
`recv` and a few slices per frame rather than a client library's tasks and futures: the figures measure the
server, not the load generator.

    python -m bench._watchers lockstep N    # N watchers of the URL read from stdin; one line per event once
                                            # all N have it: its seq, then each arrival (time.perf_counter)
    python -m bench._watchers count N       # N watchers of each URL read from stdin (one per line, then an
                                            # empty line); counts frames; answers `report` on stdin with JSON
    python -m bench._watchers attach 1      # for each `attach` line on stdin, one watcher attaches and
                                            # prints the ms from connect to its whole snapshot frame, then
                                            # the snapshot's history length (parsed after the timing)

Both print `ready` once every watcher has its snapshot. `time.perf_counter` is the same monotonic clock in
every process of the machine, so the parent compares the arrivals with its own publish times.
"""

from __future__ import annotations

import base64
import json
import os
import re
import selectors
import socket
import sys
import time
from typing import Final
from urllib.parse import urlsplit

_SEQ: Final = re.compile(rb'"seq":(\d+),"sub":(\d+)')
_CONNECT_BATCH: Final = 64


class Watcher:
    """One attached WebSocket client: its socket, unread bytes, and what it has received."""

    __slots__ = ("buffer", "events", "frames", "last", "problems", "sock", "upgraded")

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        key = base64.b64encode(os.urandom(16)).decode()
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        self.sock.sendall(
            f"GET {target} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        self.sock.setblocking(False)
        self.buffer = bytearray()
        self.upgraded = False
        self.frames = 0
        """Text frames received, the snapshot included."""
        self.events = 0
        """Event frames checked."""
        self.last = (0, 0)
        """(seq, sub) of the newest event frame."""
        self.problems = 0
        """Event frames at or before the previous one (a duplicate or out of order), or a durable seq skipped."""

    def read(self) -> list[bytes]:
        """The complete text frames that arrived (answering pings on the way); raises EOFError when closed."""
        data = self.sock.recv(1 << 20)
        if not data:
            raise EOFError
        buffer = self.buffer
        buffer += data
        if not self.upgraded:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return []
            if not buffer.startswith(b"HTTP/1.1 101"):
                raise EOFError(bytes(buffer[:200]))
            del buffer[: end + 4]
            self.upgraded = True
        texts: list[bytes] = []
        while len(buffer) >= 2:
            length, start = buffer[1] & 0x7F, 2
            if length == 126:
                if len(buffer) < 4:
                    break
                length, start = int.from_bytes(buffer[2:4], "big"), 4
            elif length == 127:
                if len(buffer) < 10:
                    break
                length, start = int.from_bytes(buffer[2:10], "big"), 10
            if len(buffer) < start + length:
                break
            opcode = buffer[0] & 0x0F
            payload = bytes(buffer[start : start + length])
            del buffer[: start + length]
            if opcode == 1:
                texts.append(payload)
            elif opcode == 9:
                self._send(0xA, payload)
            elif opcode == 8:
                raise EOFError(payload)
        self.frames += len(texts)
        return texts

    def check(self, frame: bytes) -> None:
        """Count an event frame that is not after the previous one, or that skips a durable event."""
        found = _SEQ.search(frame, 0, 400)
        if found is None:
            return
        position = (int(found[1]), int(found[2]))
        if self.events and (position <= self.last or position[0] > self.last[0] + 1):
            self.problems += 1
        self.events += 1
        self.last = position

    def _send(self, opcode: int, payload: bytes) -> None:
        # Client frames are masked (RFC 6455 5.3); control payloads are under 126 bytes.
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.send(bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked)


def _attach(urls: list[str], each: int, selector: selectors.DefaultSelector) -> list[Watcher]:
    """Connect `each` watchers to every URL, a batch at a time, and wait until all have their snapshot."""
    watchers: list[Watcher] = []
    wanted = [url for url in urls for _ in range(each)]
    waiting = 0
    while wanted or waiting:
        while wanted and waiting < _CONNECT_BATCH:
            watcher = Watcher(wanted.pop())
            selector.register(watcher.sock, selectors.EVENT_READ, watcher)
            watchers.append(watcher)
            waiting += 1
        for key, _ in selector.select(10):
            watcher = key.data
            before = watcher.frames
            watcher.read()
            if before == 0 and watcher.frames:
                waiting -= 1
    print("ready", flush=True)
    return watchers


def lockstep(url: str, count: int) -> None:
    """One line per event once every watcher has it: the seq, then each watcher's arrival time."""
    selector = selectors.DefaultSelector()
    _attach([url], count, selector)
    arrivals: list[float] = []
    frames: list[bytes] = []
    while True:
        for key, _ in selector.select():
            texts = key.data.read()
            at = time.perf_counter()
            for text in texts:
                arrivals.append(at)
                frames.append(text)
        if len(arrivals) >= count:
            seqs = {json.loads(text)["event"]["seq"] for text in frames}
            if len(seqs) != 1 or len(arrivals) != count:
                print(f"out of step: {sorted(seqs)}", flush=True)
                return
            print(seqs.pop(), *arrivals, flush=True)
            arrivals.clear()
            frames.clear()


def count(urls: list[str], each: int) -> None:
    """Count what arrives; `report` on stdin prints the totals as one JSON line, `stop` (or EOF) ends."""
    selector = selectors.DefaultSelector()
    watchers = _attach(urls, each, selector)
    selector.register(sys.stdin, selectors.EVENT_READ, None)
    closed = 0
    while True:
        for key, _ in selector.select():
            watcher = key.data
            if watcher is None:
                line = sys.stdin.readline().strip()
                if line != "report":
                    return
                frames = [w.frames - 1 for w in watchers]
                print(
                    json.dumps(
                        {
                            "frames": sum(frames),
                            "least": min(frames),
                            "most": max(frames),
                            "problems": sum(w.problems for w in watchers),
                            "closed": closed,
                            "cpu_s": time.process_time(),
                        }
                    ),
                    flush=True,
                )
                continue
            try:
                for text in watcher.read():
                    watcher.check(text)
            except (EOFError, OSError):
                selector.unregister(watcher.sock)
                closed += 1


def attach(url: str) -> None:
    """Time attaches one after another, as asked on stdin."""
    while sys.stdin.readline().strip() == "attach":
        start = time.perf_counter()
        watcher = Watcher(url)
        texts: list[bytes] = []
        while not texts:
            try:
                texts = watcher.read()
            except BlockingIOError:
                _wait_readable(watcher.sock)
        elapsed = (time.perf_counter() - start) * 1000
        watcher.sock.close()
        snapshot = json.loads(texts[0])
        print(f"{elapsed} {len(snapshot['history']) if snapshot.get('kind') == 'snapshot' else -1}", flush=True)


def _wait_readable(sock: socket.socket) -> None:
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ)
        selector.select(30)


def main() -> None:
    mode, each = sys.argv[1], int(sys.argv[2])
    urls = []
    while line := sys.stdin.readline().strip():
        urls.append(line)
    if mode == "lockstep":
        lockstep(urls[0], each)
    elif mode == "attach":
        attach(urls[0])
    else:
        count(urls, each)


if __name__ == "__main__":
    main()
