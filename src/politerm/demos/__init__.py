"""``poli demo NAME``: each workflow end to end on the bundled fake agents.

One module per demo; each exposes ``run(*, say, keep) -> Outcome`` (a coroutine function
for those that drive agents) and works in a scratch directory with its own private tmux
server, both removed at the end unless ``keep`` (then the outcome says how to look and how
to tear down).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import typing as t

from politerm.demos._scratch import Outcome, Say

#: Demo names, in the order ``poli demo --help`` lists them; the first is the default.
NAMES: tuple[str, ...] = ("loop", "pipeline", "epic", "manager", "bridge", "messaging")


def run_demo(name: str, *, say: Say, keep: bool = False, **options: t.Any) -> Outcome:
    """Run the demo ``name`` (one of :data:`NAMES`) and return what it did.

    Raises
    ------
    ValueError
        ``name`` is not a demo.
    """
    if name not in NAMES:
        msg = f"no demo {name!r}; choose one of {', '.join(NAMES)}"
        raise ValueError(msg)
    module = importlib.import_module(f"politerm.demos.{name}")
    result = module.run(say=say, keep=keep, **options)
    if inspect.isawaitable(result):
        return asyncio.run(_wait(result))
    return t.cast("Outcome", result)


async def _wait(result: t.Awaitable[Outcome]) -> Outcome:
    return await result


__all__ = ["NAMES", "Outcome", "run_demo"]
