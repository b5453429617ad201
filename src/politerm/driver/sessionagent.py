"""A session's configured agent (``[agents.NAME]``): its one driver factory and its start.

Every process that drives a session agent (``poli up``'s bring-up, the router, a fleet
node, the message lanes beside the router) builds its driver with :func:`session_driver`,
so they all read it with the same profile, approval policy, limits, budget, directory and
environment.
:func:`launch_session_agent` starts one in the session (a new window, or respawned in its
old pane) and writes its row in the store: the session's workflows never write agent rows.
"""

from __future__ import annotations

import pathlib
import shlex
import typing as t

from politerm.agents.profile import load_profile
from politerm.agents.state import AgentState
from politerm.driver.agent import AgentDriver
from politerm.driver.launch import agent_env, agent_profile, prepare_launch
from politerm.driver.limits import driver_settings
from politerm.hooks.channel import hooks_dir_for

if t.TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from politerm.config import Config
    from politerm.driver.host import Host
    from politerm.driver.launch import Launched
    from politerm.driver.receipts import Receipts
    from politerm.store import RunStore
    from politerm.terminal import Terminal
    from politerm.tmux.pane import Pane


def session_driver(
    config: Config,
    name: str,
    term: Terminal,
    *,
    store: RunStore | None,
    receipts: Receipts | None = None,
) -> AgentDriver:
    """The driver of agent ``name`` running in ``term``.

    Its approval policy is the project's ``[routing]`` one, its limits and budget the
    project's; its directory is where long bodies go as files and its environment locates
    its own records (transcript, history file) after a crash. An agent that ``[agents]``
    does not name (started some other way, or a raw pane a message is addressed to) is
    read with the profile and directory its store row names (``generic`` without one).
    """
    acfg = config.agents.get(name)
    if acfg is not None:
        profile = agent_profile(acfg)
        cwd: pathlib.Path | None = pathlib.Path(acfg.cwd).expanduser().resolve()
        env = agent_env(name, acfg, profile)
    else:
        row = store.get_agent(name) if store is not None else None
        profile = load_profile(row.profile if row else "generic")
        cwd = pathlib.Path(row.cwd) if row is not None and row.cwd else None
        env = None
    return AgentDriver(
        name,
        profile,
        term,
        store=store,
        cwd=cwd,
        env=env,
        receipts=receipts,
        **driver_settings(config),
    )


async def launch_session_agent(
    config: Config,
    store: RunStore,
    host: Host,
    name: str,
    *,
    extra_args: Sequence[str] = (),
    replace: Pane | None = None,
    say: Callable[[str], None] | None = None,
) -> Launched[Pane]:
    """Start configured agent ``name`` in ``host``'s session and write its row; not waited for.

    ``extra_args`` follow its command (its resume arguments); ``replace`` is its old pane,
    respawned. It gets its identity, ``poli mcp`` when asked (:func:`prepare_launch`), and
    its hooks report to the session's private hooks directory.
    """
    acfg = config.agents[name]
    profile = agent_profile(acfg)
    argv, env = prepare_launch(
        config,
        name,
        profile.name,
        [*acfg.argv(), *extra_args],
        agent_env(name, acfg, profile),
        mcp=acfg.mcp,
        config_file=config.project_file,
    )
    cwd = pathlib.Path(acfg.cwd).expanduser().resolve()
    launched = await host.launch(
        name,
        profile.name,
        argv,
        cwd=cwd,
        env=env,
        hooks_dir=hooks_dir_for(config),
        hooks=acfg.hooks,
        patterns=config.redact.patterns,
        replace=replace,
        say=say,
    )
    # Visible at once, on disk with the session's one sync: an fsync per agent was 1.5 s
    # of waiting at 500 agents.
    with store.batch(durable=False):
        store.upsert_agent(
            name,
            session=host.session,
            pane_id=launched.term.pane_id,
            command=shlex.join(launched.argv),
            cwd=str(cwd),
            profile=profile.name,
            resume_command=shlex.join([*acfg.argv(), *profile.resume_args]),
            env=None,
            # Its server: a session of many agents spans several (driver/host.py).
            socket=host.socket_of(launched.term),
        )
    return launched


async def stop_session_agents(config: Config, store: RunStore, host: Host) -> list[str]:
    """Kill the process trees of ``host``'s configured agents; their rows say EXITED."""
    stopped = await host.stop_agents(config.agents)
    for name in config.agents:
        if store.get_agent(name) is not None:
            store.set_agent_state(name, AgentState.EXITED.value)
    return stopped


__all__ = ["launch_session_agent", "session_driver", "stop_session_agents"]
