"""The router's tasks' questions on the board: how soon another node lists them, and Redis's work.

A router's publisher (``BoardPublisher`` with ``tasks``, over a real run store) and a
follower (``BoardFeed``, its own connection, as a view on another node has) share a private
redis-server (tests/fleet/redisserver.py). Each round a task starts waiting for an answer in
the store, and is answered; measured: from the store's commit to the follower listing the
question (and to it no longer listing it), and the commands Redis counted per round
(``INFO commandstats``: the publisher's script and what the follower read).

Run ``python -m bench.bench_fleetasks [--quick]``.
"""

from __future__ import annotations

import asyncio
import pathlib
import statistics
import sys
import tempfile
import time
import typing as t

from tests.fleet.redisserver import RedisServer

from politerm.engine.fleetboard import BoardFeed, BoardPublisher
from politerm.fleet import Board, WorkQueue, connect
from politerm.store import RunStore
from politerm.store.models import TaskState

if t.TYPE_CHECKING:
    from collections.abc import Callable


async def _until(feed: BoardFeed, done: Callable[[], bool]) -> float:
    """Seconds until ``done`` holds, woken by the feed's changes (10 s at most each)."""
    start = time.perf_counter()
    while not done():
        event = feed.event()
        if done():
            break
        await asyncio.wait_for(event.wait(), 10)
    return time.perf_counter() - start


async def _measure(root: pathlib.Path, rounds: int) -> dict[str, t.Any]:
    server = RedisServer(root / "redis")
    server.start()
    try:
        mine = Board(WorkQueue(connect(server.url, timeout=2.0), "shop"))
        theirs = Board(WorkQueue(connect(server.url, timeout=2.0), "shop"))
        with RunStore.open(root / "runs.sqlite3") as store:
            publisher = BoardPublisher(store, mine, "a", [], "s", role="router", tasks=True)
            stop = asyncio.Event()
            running = asyncio.create_task(publisher.run(stop))
            shown, gone = [], []
            async with BoardFeed(theirs, every=5.0) as feed:
                await _until(feed, lambda: not feed.error)
                await asyncio.sleep(0.5)  # the publisher's first (full) publish is done
                mine.queue.conn.cmd.config_resetstat()

                def listed(task: str) -> bool:
                    return any(a["task"] == task for a in feed.asked())

                for i in range(rounds):
                    task = f"T-{i}"
                    store.create_task(task, "make hello", max_rounds=3)
                    store.update_task(task, state=TaskState.WAITING_USER, question="Which?")
                    shown.append(await _until(feed, lambda: listed(task)))  # noqa: B023
                    store.update_task(task, state=TaskState.PLANNING, clear=["question"])
                    gone.append(await _until(feed, lambda: not listed(task)))  # noqa: B023
                stats = mine.queue.conn.cmd.info("commandstats")
            stop.set()
            await asyncio.wait_for(running, 10)
        calls = {k.removeprefix("cmdstat_"): v["calls"] for k, v in stats.items()}
        calls.pop("config|resetstat", None)
        return {"shown": shown, "gone": gone, "calls": calls, "rounds": rounds}
    finally:
        server.stop()


def _ms(values: list[float]) -> str:
    return f"p50 {statistics.median(values) * 1000:.1f} ms, max {max(values) * 1000:.1f} ms"


def main() -> None:
    """Measure and print."""
    rounds = 5 if "--quick" in sys.argv else 20
    with tempfile.TemporaryDirectory() as tmp:
        got = asyncio.run(_measure(pathlib.Path(tmp), rounds))
    print(f"{rounds} questions asked and answered in the router's store")
    print(f"  listed by the follower after the commit: {_ms(got['shown'])}")
    print(f"  gone from the follower after the answer: {_ms(got['gone'])}")
    per = ", ".join(f"{k} {v / rounds:.1f}" for k, v in sorted(got["calls"].items()))
    print(f"  Redis commands per question asked and answered: {per}")


if __name__ == "__main__":
    main()
