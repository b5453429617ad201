"""``poli demo epic``: an epic of three work items, one fake agent session per item."""

from __future__ import annotations

import asyncio
import json
import shlex
import shutil
import sys

from politerm.config import load_config
from politerm.demos._scratch import Outcome, Say, Scratch
from politerm.epic.go import EpicRunner, GoOptions
from politerm.errors import EpicError
from politerm.store import RunStore
from politerm.store.epics import EpicStore

EPIC = "DEMO"
#: (id, title, depends on); the fake epic agent asks for help when a title says so.
ITEMS = [
    ("demo-1", "Add a --verbose flag", ()),
    ("demo-2", "NEEDS HELP rotating the API key", ()),
    ("demo-3", "Document --verbose", ("demo-1",)),
]
EXPECTED = [("demo-1", "success"), ("demo-2", "needs_help"), ("demo-3", "success")]


async def run(*, say: Say, keep: bool = False) -> Outcome:
    """Queue three items in the built-in work queue and run ``poli go DEMO`` on them.

    Each item gets a fresh fake agent session (a headless PTY) that answers with the
    fenced ``poli:<session-uuid>`` report; the run ends with the epic's summary.
    """
    scratch = Scratch.make("epic")
    # A session record names the repository it worked in.
    git = await asyncio.create_subprocess_exec("git", "init", "-q", str(scratch.root))
    if await git.wait() != 0:
        shutil.rmtree(scratch.root, ignore_errors=True)
        msg = f"demo epic: git init {scratch.root} failed"
        raise EpicError(msg)
    agent = [sys.executable, "-m", "politerm.testing.fakeagent", "--mode", "plain"]
    agent += ["--scenario", "epic-items"]
    config_path = scratch.write_config(
        '[epic]\nagent = "fake-plain"\nsource = "builtin"\nsession_timeout = 60\n'
        f"[epic.commands]\nfake-plain = {json.dumps(agent)}\n"
    )
    try:
        config = load_config(scratch.root, env={})
        with RunStore.open(config.store.resolved_path()) as store:
            epics = EpicStore(store)
            for item_id, title, after in ITEMS:
                epics.add_item(EPIC, title, item_id=item_id, depends_on=list(after))
            say(f"queued {len(ITEMS)} work items in epic {EPIC} (poli work add)")
            options = GoOptions(epic=EPIC, yes=True, interactive=False)
            result = await EpicRunner(config, store, options, cwd=scratch.root, say=say).go()
        got = [(r.item_id, r.status) for r in result.records]
        summary = [
            f"run {result.run_id}: {result.state}",
            *(f"  {r.item_id}: {r.status}  {r.commit_summary or ''}" for r in result.records),
        ]
        if result.summary is not None:
            summary.append(f"summary: {result.summary.commit_summary}")
        look: list[str] = []
        if keep:
            where = shlex.quote(str(scratch.root))
            cfg = shlex.quote(str(config_path))
            look = [
                f"kept in {scratch.root}",
                f"  look:      poli work list {EPIC} --config {cfg}; poli log --config {cfg}",
                f"  tear down: rm -rf {where}",
            ]
        ok = result.state == "done" and got == EXPECTED and result.summary is not None
        return Outcome(ok, summary, look)
    finally:
        if not keep:
            shutil.rmtree(scratch.root, ignore_errors=True)
