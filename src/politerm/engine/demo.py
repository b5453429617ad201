"""``poli demo``: the whole loop on the bundled fake agents, in a scratch directory."""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile
import typing as t

from politerm.config import load_config
from politerm.engine.loop import run_task
from politerm.engine.session import Session
from politerm.store import RunStore

if t.TYPE_CHECKING:
    from politerm.engine.loop import Printer
    from politerm.store.models import Task

DEMO_REQUEST = "Create hello.txt containing a friendly greeting, then report back."


async def run_demo(
    *,
    workdir: pathlib.Path | None = None,
    say: t.Callable[[str], None] = print,
    printer: Printer | None = None,
    keep: bool = False,
) -> tuple[Task, str | None]:
    """Bring the fake Planner and Executer up, route one task, tear everything down.

    Returns the finished task and what the executer wrote to ``hello.txt`` (None if
    nothing). A scratch directory made here is removed at the end, unless ``keep`` leaves
    the session running in it.
    """
    scratch = workdir is None
    work = workdir or pathlib.Path(tempfile.mkdtemp(prefix="poli-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    (work / "executer").mkdir(exist_ok=True)
    (work / "planner").mkdir(exist_ok=True)
    env = {
        "POLI_TMUX_SOCKET": f"poli-demo-{os.getpid()}",
        "POLI_TMUX_SESSION": "demo",
        "PLANNER_CWD": str(work / "planner"),
        "EXECUTER_CWD": str(work / "executer"),
        "POLI_PLAN_TIMEOUT": "30",
        "POLI_EXEC_TIMEOUT": "30",
    }
    config = load_config(work, env=env)
    config = config.model_copy(
        update={"store": config.store.model_copy(update={"path": work / "runs.sqlite3"})}
    )
    with RunStore.open(work / "runs.sqlite3") as store:
        session = Session(config, store)
        try:
            await session.up(on_event=say)
            say(f"session up on private socket {config.tmux.socket}; routing one task")
            task = await run_task(config, store, DEMO_REQUEST, printer=printer, timeout=50)
        finally:
            if not keep:
                await session.down()
            await session.server.close()
    hello = work / "executer" / "hello.txt"
    content = hello.read_text().strip() if hello.is_file() else None
    if scratch and not keep:
        # The scratch directory (store, scenarios, the executer's files) goes with the demo.
        shutil.rmtree(work, ignore_errors=True)
    return task, content
