"""A bridge task for an agent hosted on another node: its turn posted as fleet work.

With ``[fleet]``, ``--executor agent:NAME`` for an agent placed on another node (or a
pool: :func:`politerm.engine.placement.elsewhere`) starts no agent here. The task's prompt
goes to the agent's stream as a loop turn does (a
:class:`~politerm.engine.turnwork.TurnWork` answered by a ``done`` or ``failed`` block with
the task's id): the node that hosts the agent types it under the work's lease through the
agent's one driver and replies with the block (:mod:`politerm.engine.node`). The step's row
holds the work's nonce before anything is posted, so a bridge restarted mid-turn posts the
same work again (kept once) and waits for its reply.
"""

from __future__ import annotations

import asyncio
import re
import time
import typing as t

from politerm.errors import PolitermError

if t.TYPE_CHECKING:
    from politerm.config import Config
    from politerm.engine.turnwork import TurnReply, TurnWork
    from politerm.store import RunStore

#: Beyond the turn's own timeout: time for a node to claim the work (a re-claim included).
CLAIM_SLACK: t.Final = 120.0
#: After the fleet's Redis could not be reached, how long before trying again.
UNREACHABLE_BACKOFF: t.Final = 1.0


def work_id(task_id: str, nonce: str) -> str:
    """The work of one bridge turn: its task (as a work id may spell it) and nonce.

    Examples
    --------
    >>> work_id("fix imports", "ab12")
    'bridge-fix_imports-ab12'
    """
    return f"bridge-{re.sub(r'[^A-Za-z0-9_.:-]', '_', task_id)[:80]}-{nonce}"


async def remote_reply(config: Config, store: RunStore, work: TurnWork) -> TurnReply | str:
    """Post ``work`` (again: kept once) and wait for its node's reply; else why none came.

    The wait is bounded by the turn's timeout plus :data:`CLAIM_SLACK`; while Redis does
    not answer, it is asked again every :data:`UNREACHABLE_BACKOFF` seconds.
    """
    from politerm.engine.fleetlink import FleetPost, open_queue

    bound = work.timeout + CLAIM_SLACK
    deadline = time.monotonic() + bound
    try:
        post = FleetPost(open_queue(config, store))
    except PolitermError as exc:
        return f"the fleet's queue: {exc}"
    posted, last = False, ""
    while (left := deadline - time.monotonic()) > 0:
        try:
            if not posted:
                await asyncio.to_thread(post.post, work)
                posted = True
            reply = await asyncio.to_thread(post.reply, work)
            if reply is not None:
                return reply
            await post.wait(work, left)
        except PolitermError as exc:
            last = f": {exc}"
            await asyncio.sleep(min(UNREACHABLE_BACKOFF, left))
    return f"no reply from its node within {bound:g}s (work {work.work_id}){last}"
