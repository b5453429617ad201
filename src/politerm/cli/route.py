"""``poli route``: run the router for the session, its message lanes beside it (the service)."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import signal

import click

from politerm.cli._common import config_option, load, open_store, print_event, project_option
from politerm.engine import service
from politerm.engine.decide import ACTIVE
from politerm.engine.loop import follow, follow_until_idle, router_lock
from politerm.errors import RoutingError
from politerm.messaging.routing import serve
from politerm.messaging.service import Messenger


@click.command("route")
@click.option("--until-idle", is_flag=True, help="Exit when no task is in flight.")
@click.option("--as-service", is_flag=True, hidden=True, help="Run as the project's service.")
@config_option
@project_option
def command(until_idle: bool, as_service: bool, config_path: pathlib.Path | None) -> None:
    """Route messages between the running agents, resuming whatever is in flight.

    Messages sent with ``poli send`` are delivered by the same process, through the same
    drivers.

    When the project's router service (started by ``poli up``) routes it, print its events
    instead: until no task is in flight with --until-idle. Any other router of the session
    is an error.
    """
    config = load(config_path)
    with open_store(config) as store:

        def idle() -> bool:
            return not any(t.state in ACTIVE for t in store.list_tasks(active_only=True))

        async def main() -> None:
            # SIGTERM (poli down, the service's supervisor) stops like Ctrl-C: each agent's
            # step under way finishes first.
            current = asyncio.current_task()
            assert current is not None
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, current.cancel)
            try:
                await serve(
                    Messenger(config, store),
                    until=idle if until_idle else None,
                    printer=print_event,
                    say=click.echo,
                    alone=as_service,
                )
            except RoutingError:
                # Only the project's own service is followed: a router of another store
                # on this session writes nothing this store would show.
                holder = router_lock(config).holder()
                serving = service.ServiceLock.of(config).read()
                if as_service or holder is None or serving is None or serving.router != holder:
                    raise
                click.echo(f"the project's router service (pid {serving.pid}) routes; following it")
                if until_idle:
                    await follow_until_idle(store, print_event)
                else:
                    await follow(store, print_event)

        with contextlib.suppress(asyncio.CancelledError):
            asyncio.run(main())
