"""The project's routing: the router and the message lanes beside it, on the same drivers.

One owner per agent, however a session is routed: by the project's service (``poli
route``) or by a task routed in the foreground (:func:`run_task`: demos, canary, tests).
"""

from __future__ import annotations

import typing as t

from politerm.engine.loop import follow_task, route, submit
from politerm.errors import SessionNotFound
from politerm.messaging.postman import Postman
from politerm.messaging.service import Messenger

if t.TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from politerm.config import Config
    from politerm.driver import AgentDriver, Host
    from politerm.engine.fleetbudget import RouterBreaker
    from politerm.engine.loop import Printer
    from politerm.engine.session import Session
    from politerm.store import RunStore
    from politerm.store.models import Task


async def serve(
    messenger: Messenger,
    *,
    until: Callable[[], bool] | None = None,
    printer: Printer | None = None,
    say: Callable[[str], None] | None = None,
    alone: bool = False,
    session: Session | None = None,
) -> None:
    """Route the session with its message lanes beside the router, over the same drivers.

    What the project's service runs (``poli route``). With ``alone`` (the service), when
    the session's configured agents are not up (messages between agents started some
    other way), the lanes run alone; ``poli up --resume`` restarts the service as a router.

    Raises
    ------
    SessionNotFound
        The session or its agents are not up (and not ``alone``).
    """

    async def lanes(
        owned: Mapping[str, AgentDriver], host: Host | None, gate: RouterBreaker | None
    ) -> None:
        await Postman(messenger, host, say=say, owned=owned, gate=gate).run()

    m = messenger
    try:
        await route(m.config, m.store, until=until, printer=printer, session=session, beside=lanes)
    except SessionNotFound:
        if not alone:
            raise
        await lanes({}, None, None)


async def run_task(
    config: Config,
    store: RunStore,
    request: str,
    *,
    task_id: str | None = None,
    printer: Printer | None = None,
    timeout: float | None = None,
) -> Task:
    """Submit a task and route until it ends (or waits for the user); return it.

    Routes in this process, messages too, whenever no router runs for the session;
    otherwise follows the running router's progress
    (:func:`~politerm.engine.loop.follow_task`).
    """
    task = submit(store, config, request, task_id=task_id)
    after = min((e.id for e in store.list_events(task_id=task.id, limit=5)), default=1) - 1
    here = Messenger(config, store)
    return await follow_task(
        config,
        store,
        task.id,
        printer=printer,
        timeout=timeout,
        after=after,
        route_here=lambda until: serve(here, until=until),
    )
