"""``poli demo NAME``: each workflow end to end on the bundled fake agents.

One module per demo; each exposes ``async def run(*, say, keep) -> Outcome`` and works in a
scratch directory with its own private tmux server, both removed at the end unless
``keep`` (then the outcome says how to look and how to tear down).
"""

from __future__ import annotations

import importlib
import typing as t

from politerm.demos._scratch import Outcome, Say

#: Demo names, in the order ``poli demo --help`` lists them; the first is the default.
NAMES: tuple[str, ...] = ("loop", "pipeline")


async def run_demo(name: str, *, say: Say, keep: bool = False) -> Outcome:
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
    runner = t.cast("t.Callable[..., t.Awaitable[Outcome]]", module.run)
    return await runner(say=say, keep=keep)


__all__ = ["NAMES", "Outcome", "run_demo"]
