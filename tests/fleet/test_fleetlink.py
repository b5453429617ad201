"""A router's post of remote turns (engine/fleetlink.py) against a real redis-server.

Many remote agents wait at once: one reader of the results stream serves them all, so
the router's other work in threads (``asyncio.to_thread``) is never queued behind them.
"""

from __future__ import annotations

import asyncio
import sys
import traceback
import typing as t

from politerm.engine.fleetlink import FleetPost
from politerm.engine.turnwork import TurnReply, TurnWork
from politerm.fleet import NodeQueue, WorkQueue, connect
from politerm.testing.retry import aretry_until

if t.TYPE_CHECKING:
    from tests.fleet.redisserver import RedisServer

AGENTS = 20


def _blocked(queue: WorkQueue) -> int:
    """Clients of the server blocked in a read now (flag ``b`` of CLIENT LIST)."""
    return sum("b" in c["flags"] for c in queue.conn.cmd.client_list())


def _threads_reading() -> int:
    """Threads of this process inside redis-py's ``xread`` now."""
    return sum(
        any(frame.f_code.co_name == "xread" for frame, _ in traceback.walk_stack(top))
        for top in sys._current_frames().values()
    )


async def test_twenty_remote_agents_waiting_share_one_reader_and_leave_the_threads_free(
    redis_server: RedisServer,
) -> None:
    queue = WorkQueue(connect(redis_server.url, timeout=3.0), "shop")
    post = FleetPost(queue)
    works = [TurnWork(f"loop-{i}-n{i}", f"AGENT{i}", "do it", f"n{i}", f"T{i}", 60.0)
             for i in range(AGENTS)]  # fmt: skip
    for work in works:
        post.post(work)
        assert post.reply(work) is None
    waits = [asyncio.create_task(post.wait(w, 120.0)) for w in works]
    try:
        await aretry_until(
            lambda: asyncio.to_thread(_blocked, queue),
            30,
            what="the results reader to block in its read",
        )
        # The router's other work in threads runs while all twenty still wait: nothing
        # of theirs holds the default executor's few workers.
        assert await asyncio.to_thread(lambda: "ran") == "ran"
        assert not any(w.done() for w in waits)
        assert post.results.waiting == AGENTS
        assert await asyncio.to_thread(_blocked, queue) == 1  # one XREAD for all twenty
        # One thread of this process in a read of Redis, not one per waiting agent.
        assert _threads_reading() == 1

        # A result wakes its own waiter, and only it.
        node = NodeQueue(WorkQueue(connect(redis_server.url, timeout=3.0), "shop"), "b")
        lease = node.claim(["AGENT7"])
        assert lease is not None
        node.queue.complete(lease, TurnReply(True, "answered", node="b").payload())
        await asyncio.wait_for(waits[7], 30)
        assert [i for i, w in enumerate(waits) if w.done()] == [7]
        reply = post.reply(works[7])
        assert reply is not None and (reply.outcome, reply.node) == ("answered", "b")
    finally:
        for w in waits:
            w.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
    # With no waiter left the reader stops after its read: no thread stays behind.
    assert post.results.waiting == 0
    reader = post.results._reader
    assert reader is not None
    await asyncio.wait_for(reader, 30)
