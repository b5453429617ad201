"""``poli demo loop``: one task through the Planner⇄Executer loop on the fake agents."""

from __future__ import annotations

import typing as t

from politerm.config import load_config
from politerm.demos._scratch import Outcome, Say, Scratch
from politerm.engine.session import Session
from politerm.messaging.routing import run_task
from politerm.store import RunStore
from politerm.store.models import TaskState

if t.TYPE_CHECKING:
    from politerm.engine.loop import Printer

REQUEST = "Create hello.txt containing a friendly greeting, then report back."


async def run(*, say: Say, keep: bool = False, printer: Printer | None = None) -> Outcome:
    """Bring the fake Planner and Executer up, route one task, tear everything down.

    The executer works in the scratch directory's ``executer/`` (it writes ``hello.txt``
    there, never into the current directory); the planner in ``planner/``.
    """
    scratch = Scratch.make("loop")
    for agent in ("planner", "executer"):
        (scratch.root / agent).mkdir(mode=0o700)
    scratch.write_config(
        '[agents.PLANNER]\ncwd = "planner"\n\n[agents.EXECUTER]\ncwd = "executer"\n\n'
        "[timeouts]\nplan = 30\nexec = 30\n"
    )
    ok = False
    try:
        config = load_config(scratch.root, env={})
        with RunStore.open(config.store.resolved_path()) as store:
            session = Session(config, store)
            try:
                await session.up(on_event=say)
                say(f"session {scratch.session!r} up on private socket {scratch.socket}")
                task = await run_task(config, store, REQUEST, printer=printer, timeout=50)
            finally:
                if not keep:
                    await session.down()
                await session.host.close()
        hello = scratch.root / "executer" / "hello.txt"
        written = hello.read_text().strip() if hello.is_file() else "(missing)"
        ok = task.state is TaskState.DONE and hello.is_file()
        summary = [
            f"task {task.id}: {task.state.value}" + (f" ({task.error})" if task.error else ""),
            f"final report:\n{task.report}",
            f"what the executer wrote to the demo's executer/hello.txt: {written}",
        ]
        look = scratch.keep_lines() if keep else []
        return Outcome(ok, summary, look)
    finally:
        if not keep:
            await scratch.remove()
