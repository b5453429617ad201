"""Wiring of manager mode: the store, the redactor, the brain and the channels from the config.

Both front ends (the REPL and the one-shot ``poli manager goal``) build their
:class:`~politerm.manager.engine.Manager` here, and hold a :class:`ProjectLock` while they drive
a project, so two managers never drive one project at once. The lock is an ``flock``: the
kernel drops it when its process dies, so a ``kill -9`` never leaves a stale lock behind.
"""

from __future__ import annotations

import asyncio
import pathlib
import re
import signal
import typing as t

from politerm._internal.pidlock import PidLock
from politerm.errors import BrainError, ManagerError
from politerm.manager.brain import API_BRAINS, resolve_key
from politerm.manager.channels import FileChannel
from politerm.manager.engine import EventSink, Manager
from politerm.manager.pane import AgentBrain, PaneChannel
from politerm.manager.store import Channel, ManagerStore
from politerm.redact import Redactor
from politerm.store import RunStore

if t.TYPE_CHECKING:
    from collections.abc import Mapping

    from politerm.config import Config
    from politerm.manager.brain import Brain
    from politerm.manager.channels import DevChannel
    from politerm.manager.store import Project


def make_brain(
    config: Config, env: Mapping[str, str] | None = None, *, lazy: bool = False
) -> tuple[Brain, Redactor]:
    """The configured brain, and a redactor that also hides its key.

    With ``lazy`` a missing key or SDK is not raised here but by the brain's first call
    (the console opens without a key; a goal then fails in the brain's error state).

    Raises
    ------
    BrainAuthError
        An API brain without a key.
    BrainError
        Its SDK is missing.
    """
    settings = config.manager.brain
    patterns = config.redact.patterns
    if settings.provider not in API_BRAINS:
        return AgentBrain(config), Redactor(patterns)
    try:
        key = resolve_key(settings, env)
        # The key itself, whatever its shape, is redacted on every path this manager writes.
        redactor = Redactor([*patterns, re.escape(key)])
        return API_BRAINS[settings.provider](settings, key, redactor), redactor
    except BrainError as exc:
        if not lazy:
            raise
        return _Unusable(exc), Redactor(patterns)


def channel_factory(
    config: Config, store: RunStore | None = None
) -> t.Callable[[Project], DevChannel]:
    """Builds a project's dev channel: its own setting, else ``[manager] channel``."""

    def build(project: Project) -> DevChannel:
        if (project.channel or config.manager.channel) == Channel.FILE.value:
            root = pathlib.Path(project.path)
            return FileChannel(root, stable_seconds=config.manager.file_stable_seconds)
        return PaneChannel(config, project, store)

    return build


def build_manager(
    config: Config,
    *,
    on_event: EventSink,
    env: Mapping[str, str] | None = None,
    lazy: bool = False,
) -> Manager:
    """A :class:`Manager` over the configured store, brain and channels."""
    brain, redactor = make_brain(config, env, lazy=lazy)
    store = ManagerStore(RunStore.for_config(config), redactor)
    if isinstance(brain, AgentBrain):
        brain.store = store.store
    return Manager(
        store, config.manager, brain, channel_factory(config, store.store), on_event=on_event
    )


async def run_interruptible(manager: Manager, name: str) -> Project:
    """Drive ``name``'s task to its end, a question or a failure, as ``poli manager goal`` does.

    Ctrl-C (SIGINT) stops the current step, as in the console: the dev agent gets its
    interrupt key and the task pauses for ``input`` (so the caller exits with "a question").
    """
    loop = asyncio.get_running_loop()
    runner = asyncio.ensure_future(manager.run(name))
    loop.add_signal_handler(signal.SIGINT, runner.cancel)
    try:
        return await runner
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise  # we were cancelled ourselves, not the step by Ctrl-C
        return await manager.interrupt(name)
    finally:
        loop.remove_signal_handler(signal.SIGINT)


class _Unusable:
    """A brain that could not be built; every call says why."""

    def __init__(self, error: BrainError) -> None:
        self.error = error

    async def ask(self, prompt: str, *, system: str) -> str:
        raise self.error

    async def aclose(self) -> None:
        return None


class ProjectLock(PidLock):
    """The exclusive lock on one project, beside the run store (its holder's pid inside).

    Raises
    ------
    ManagerError
        From :meth:`take`, when another process holds it (the message names its pid).
    """

    def __init__(self, store_path: pathlib.Path, name: str) -> None:
        super().__init__(store_path.parent / f"manager-{name}.lock")
        self.name = name

    def take(self) -> t.Self:
        """Take the lock at once or raise."""
        if not self.acquire():
            pid = self.holder() or "?"
            msg = f"project {self.name!r} is driven by another poli manager (pid {pid})"
            raise ManagerError(msg)
        return self

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def __enter__(self) -> t.Self:
        return self.take()

    def __exit__(self, *_exc: object) -> None:
        self.release()
