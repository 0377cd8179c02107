"""A child process for the fault and cross-process tests: appends to sessions and reports each ack.

    python _appender.py URL SES_A,SES_B forever [START_AT]          # 4 concurrent writers until killed
    python _appender.py URL SES_A,SES_B 1,3,2,... [START_AT]        # one write per batch size (4 writers
                                                                    # share them), then exit

Writes go round the sessions. Each appended event is printed as `SESSION_ID SEQ` (and flushed) only after
`write()` returned, so a printed line is an acknowledged append. START_AT (a Unix time) lines up the first
writes of several processes.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time

from agentwatch.events import NewEvent, UserMessage
from agentwatch.store import Store, connect_store


async def _append(store: Store, session_id: str, size: int, label: str) -> None:
    events = await store.append(session_id, [NewEvent(UserMessage(text=f"{label}:{i}")) for i in range(size)])
    sys.stdout.write("".join(f"{event.session_id} {event.seq}\n" for event in events))
    sys.stdout.flush()


async def _forever(store: Store, session_ids: list[str], writer: int) -> None:
    for n in itertools.count():
        await _append(store, session_ids[n % len(session_ids)], 1 + n % 3, f"{writer}:{n}")


async def main(url: str, session_ids: list[str], plan: str, start_at: float) -> None:
    store = await connect_store(url)
    try:
        await asyncio.sleep(max(0.0, start_at - time.time()))
        if plan == "forever":
            await asyncio.gather(*(_forever(store, session_ids, writer) for writer in range(4)))
        # The plan's writes, shared by 4 concurrent writers: the store gets several at once, so the SQLite
        # writer applies them in groups, in one statement per table.
        plan_left = enumerate(int(part) for part in plan.split(",") if part)

        async def writer() -> None:
            for n, size in plan_left:
                await _append(store, session_ids[n % len(session_ids)], size, str(n))

        await asyncio.gather(*(writer() for _ in range(4)))
    finally:
        await store.close()


if __name__ == "__main__":
    url, ids, plan = sys.argv[1:4]
    asyncio.run(main(url, ids.split(","), plan, float(sys.argv[4]) if len(sys.argv) > 4 else 0.0))
