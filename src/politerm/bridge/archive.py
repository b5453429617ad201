"""A task's files: its work folder (log, error.json, command outputs) and its archive.

Layout beside the queue file::

    work/<task_id>/task.log            one redacted line per thing that happened
    work/<task_id>/error.json          why it failed (failed tasks only)
    work/<task_id>/commands/<id>.*     runner spec, status JSON, stdout/stderr
    archive/processed/<task_id>/       completed tasks: task.json + the work folder
    archive/failed/<task_id>/          failed tasks: the same

Folders are 0700 and files 0600; everything written passes the redactor.
"""

from __future__ import annotations

import datetime
import json
import pathlib
import shutil
import time
import typing as t

from politerm._internal.private import append_private, write_private
from politerm.bridge.queue import dump_json
from politerm.errors import BridgeError
from politerm.store.db import ensure_private_dir

if t.TYPE_CHECKING:
    from politerm.redact import Redactor


class TaskFiles:
    """The files of one task under a queue's folder."""

    def __init__(self, root: pathlib.Path, task_id: str, redactor: Redactor) -> None:
        self.root = root
        self.task_id = task_id
        self.redactor = redactor
        self.work_dir = root / "work" / task_id

    @property
    def log_path(self) -> pathlib.Path:
        """``work/<task_id>/task.log``."""
        return self.work_dir / "task.log"

    @property
    def error_path(self) -> pathlib.Path:
        """``work/<task_id>/error.json``."""
        return self.work_dir / "error.json"

    @property
    def commands_dir(self) -> pathlib.Path:
        """Where the runner puts this task's command files."""
        return self.work_dir / "commands"

    def log(self, line: str) -> None:
        """Append one timestamped, redacted line to the task's log."""
        stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
        text = " ".join(self.redactor.redact(line).split())
        append_private(self.log_path, f"{stamp} {text}\n")

    def write_error(self, error: str, *, status: str, stage: str) -> None:
        """Write ``error.json``: what went wrong, at which stage, when."""
        ensure_private_dir(self.work_dir)
        body = {
            "task_id": self.task_id,
            "status": status,
            "stage": stage,
            "error": self.redactor.redact(error),
            "time": time.time(),
        }
        write_private(self.error_path, dump_json(body), sync=True)

    def archive(self, task: dict[str, t.Any], *, failed: bool) -> pathlib.Path:
        """Copy the task JSON and its work folder to ``archive/processed|failed/<task_id>``.

        Safe to call again for the same task (a finalize interrupted by a crash): the copy
        is made in a temporary folder and renamed into place, replacing an earlier one.
        """
        kind = "failed" if failed else "processed"
        dest = self.root / "archive" / kind / self.task_id
        tmp = dest.with_name(f".{self.task_id}.{time.monotonic_ns()}.tmp")
        try:
            ensure_private_dir(dest.parent)
            if self.work_dir.exists():
                shutil.copytree(self.work_dir, tmp)
            else:
                tmp.mkdir(mode=0o700)
            tmp.chmod(0o700)
            write_private(tmp / "task.json", dump_json(self.redactor.redact_json(task)), sync=True)
            if dest.exists():
                shutil.rmtree(dest)
            tmp.rename(dest)
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            msg = f"task {self.task_id}: cannot archive to {dest}: {e.strerror or e}"
            raise BridgeError(msg) from e
        return dest

    def remove_work(self) -> None:
        """Delete the work folder once it is archived."""
        shutil.rmtree(self.work_dir, ignore_errors=True)


def find_archived(root: pathlib.Path, task_id: str) -> dict[str, t.Any] | None:
    """The archived task JSON (from processed or failed), or None."""
    for kind in ("processed", "failed"):
        path = root / "archive" / kind / task_id / "task.json"
        if path.is_file():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(data, dict):
                data.setdefault("archive", str(path.parent))
                return data
    return None
