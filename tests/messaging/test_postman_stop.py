"""A stopped postman stops, even when an await inside it lost the cancel.

CI hung in the mail room's teardown for 120 s: the postman was cancelled, yet its loop went
on sleeping 5 s at a time. On Python 3.11 ``asyncio.wait_for`` returns a result that arrived
together with the cancel and drops the cancel; any such await in the postman's loop (its
tmux calls) can lose it. The cancel is made to come exactly then.
"""

from __future__ import annotations

import asyncio
import typing as t

from politerm.driver import Host
from politerm.messaging.postman import Postman, PostmanLock
from politerm.tmux.server import TmuxServer
from tests.messaging.mailroom import WAIT

if t.TYPE_CHECKING:
    from politerm.driver import AgentDriver
    from tests.messaging.mailroom import Mailroom


class _LosesTheCancel(Postman):
    """A postman whose scan of senders is a ``wait_for`` whose result comes with the cancel."""

    def __init__(self, *args: t.Any, **kw: t.Any) -> None:
        super().__init__(*args, **kw)
        self.scanning = asyncio.Event()
        self.answer: asyncio.Future[list[AgentDriver]] | None = None

    async def _scan_senders(self) -> list[AgentDriver]:
        if self.answer is not None:
            return []
        self.answer = asyncio.get_running_loop().create_future()
        self.scanning.set()
        return await asyncio.wait_for(self.answer, WAIT)


async def test_a_postman_cancelled_as_its_wait_ends_stops(room: Mailroom) -> None:
    server = TmuxServer(room.server.socket_name, config_dir=room.server.config_dir)
    postman = _LosesTheCancel(room.messenger, Host(server, "mail"), settle=0.5)
    task = asyncio.ensure_future(postman.run())
    await asyncio.wait_for(postman.scanning.wait(), WAIT)
    assert postman.answer is not None
    postman.answer.set_result([])
    task.cancel()  # in the same turn of the loop: wait_for sees its result and the cancel
    done, _ = await asyncio.wait([task], timeout=WAIT)
    assert done, "the postman did not stop after it was cancelled"
    assert task.cancelled()
    lock = PostmanLock(room.messenger.dir.ensure())
    assert lock.acquire(), "the stopped postman still holds its lock"
    lock.release()
