"""``poli demo bridge``: two queued tasks through the task bridge (builtin executor)."""

from __future__ import annotations

import shlex
import shutil
import typing as t

from politerm.bridge.daemon import make_executor, queue_path, serve
from politerm.bridge.queue import TaskQueue
from politerm.config import load_config
from politerm.demos._scratch import Outcome, Say, Scratch
from politerm.store import RunStore

#: One task that edits a file and runs a command, one whose marker is not in the file.
TASKS: list[dict[str, t.Any]] = [
    {
        "task_id": "demo-edit",
        "instruction_details": {
            "description": "add a --verbose flag to the notes, then count them",
            "file_modifications": [
                {
                    "file_path": "notes.txt",
                    "action": "insert_after_line",
                    "line_marker": "--quiet",
                    "content": "--verbose  say what is happening",
                }
            ],
            "commands_to_execute": [
                {"command_id": "count", "command": "wc -l notes.txt", "total_timeout": 30}
            ],
        },
    },
    {
        "task_id": "demo-bad-marker",
        "instruction_details": {
            "description": "insert after a line that is not there (refused, nothing written)",
            "file_modifications": [
                {
                    "file_path": "notes.txt",
                    "action": "insert_after_line",
                    "line_marker": "--no-such-flag",
                    "content": "never written",
                }
            ],
        },
    },
]
EXPECTED = [("demo-edit", "completed"), ("demo-bad-marker", "failed")]


def run(*, say: Say, keep: bool = False) -> Outcome:
    """Queue the tasks, serve the queue once with the builtin executor, show the archive.

    The bridge needs no agent pane: the builtin executor applies the edits and runs the
    command itself (``--executor agent:NAME`` hands the same action to an agent).
    """
    scratch = Scratch.make("bridge")
    scratch.write_config()
    (scratch.root / "notes.txt").write_text("flags:\n--quiet  say nothing\n")
    try:
        config = load_config(scratch.root, env={})
        queue = TaskQueue(queue_path(None, scratch.root))
        ids = queue.submit(TASKS)
        say(f"queued {', '.join(ids)} in {queue.path}")
        with RunStore.open(config.store.resolved_path()) as store:
            done = serve(
                queue,
                make_executor("builtin", config),
                store,
                base_dir=scratch.root,
                once=True,
                log=say,
            )
        notes = (scratch.root / "notes.txt").read_text()
        summary = [
            *(f"task {task_id}: {status}" for task_id, status in done),
            f"notes.txt after the bridge:\n{notes.rstrip()}",
            f"archived: {', '.join(sorted(p.name for p in (queue.root / 'archive').iterdir()))}",
        ]
        where = shlex.quote(str(scratch.root))
        q = shlex.quote(str(queue.path))
        look = (
            [
                f"kept in {scratch.root}",
                f"  look:      poli bridge list --queue {q}; poli bridge show demo-bad-marker"
                + f" --queue {q}",
                f"  tear down: rm -rf {where}",
            ]
            if keep
            else []
        )
        return Outcome(done == EXPECTED and "--verbose" in notes, summary, look)
    finally:
        if not keep:
            shutil.rmtree(scratch.root, ignore_errors=True)
