"""``task_queue.json``: one locked, atomic read-modify-write for every writer.

Requesters (``poli bridge submit``), the bridge and agents (``poli bridge report``) all go
through :meth:`TaskQueue.update`: an exclusive ``flock`` on a lock file beside the queue, a
fresh read, the change, then write-to-temp, ``fsync`` and ``rename``. A reader therefore sees
the old file or the new one, never a torn one, and no update can be lost between two writers.

Tasks are kept as the raw JSON objects they were written as, so an invalid task (which the
bridge must mark failed, not drop) and keys politerm does not know survive every rewrite.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import fcntl
import json
import os
import pathlib
import time
import typing as t

from politerm._internal.private import write_private
from politerm.errors import BridgeError, BridgeTaskInvalid
from politerm.store.db import create_private_file, ensure_private_dir

if t.TYPE_CHECKING:
    from collections.abc import Callable, Iterator

RawTask: t.TypeAlias = dict[str, t.Any]

LOCK_TIMEOUT: t.Final = 30.0
"""Seconds a writer waits for the queue lock before giving up with an error."""

FILE_MODE: t.Final = 0o600


@dataclasses.dataclass(frozen=True)
class QueueRepair:
    """A corrupt queue file was found: where its bytes were saved and what was recovered."""

    path: pathlib.Path
    backup: pathlib.Path
    reason: str
    recovered: tuple[str, ...]

    def describe(self) -> str:
        """One line for logs and stderr."""
        ids = ", ".join(self.recovered) or "none"
        return (
            f"queue {self.path} was corrupt ({self.reason}); saved it as {self.backup}, "
            f"recovered {len(self.recovered)} task(s): {ids}"
        )


def salvage_tasks(text: str) -> list[RawTask]:
    """Recover the task objects that are still whole in a corrupt queue text.

    Every ``{`` is tried as the start of a JSON object; an object with a ``task_id`` is kept
    and scanning resumes after it, so nested objects are not counted twice.

    Examples
    --------
    >>> good = '{"task_id": "a", "status": "pending", "instruction_details": {"x": 1}}'
    >>> [t["task_id"] for t in salvage_tasks('{"tasks": [' + good + ', {"task_id": "b", "st')]
    ['a']
    """
    decoder = json.JSONDecoder()
    found: list[RawTask] = []
    i = text.find("{", 1)
    while i != -1:
        try:
            obj, end = decoder.raw_decode(text, i)
        except ValueError:
            i = text.find("{", i + 1)
            continue
        if isinstance(obj, dict) and isinstance(obj.get("task_id"), str):
            found.append(obj)
            i = text.find("{", end)
        else:
            i = text.find("{", i + 1)
    return found


def parse_queue_text(text: str) -> list[RawTask]:
    """The raw tasks of a queue file's text.

    Raises
    ------
    ValueError
        The text is not a queue: not JSON, or no ``tasks`` list of objects.

    Examples
    --------
    >>> parse_queue_text('{"tasks": [{"task_id": "a"}]}')
    [{'task_id': 'a'}]
    >>> parse_queue_text("")
    []
    >>> parse_queue_text('{"tasks": 3}')
    Traceback (most recent call last):
    ...
    ValueError: 'tasks' is not a list of objects
    """
    if not text.strip():
        return []
    data = json.loads(text)
    # The original sometimes wrote a bare list of tasks.
    tasks = (
        data
        if isinstance(data, list)
        else data.get("tasks", [])
        if isinstance(data, dict)
        else None
    )
    if not isinstance(tasks, list) or not all(isinstance(x, dict) for x in tasks):
        msg = "'tasks' is not a list of objects"
        raise ValueError(msg)
    return tasks


def dump_json(value: t.Any) -> bytes:
    """Stable, readable JSON bytes (2-space indent, trailing newline)."""
    return (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode()


class TaskQueue:
    """The queue file at ``path`` and its lock.

    Parameters
    ----------
    path
        ``task_queue.json``; its folder is created (0700) when missing.
    on_repair
        Called with a :class:`QueueRepair` whenever a corrupt file is found and fixed.
    """

    def __init__(
        self, path: pathlib.Path, *, on_repair: Callable[[QueueRepair], None] | None = None
    ) -> None:
        self.path = path.absolute()
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.on_repair = on_repair
        self.repairs: list[QueueRepair] = []

    @property
    def root(self) -> pathlib.Path:
        """The folder holding the queue, its logs and its archive."""
        return self.path.parent

    def __repr__(self) -> str:
        return f"TaskQueue({str(self.path)!r})"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            ensure_private_dir(self.root)
            create_private_file(self.lock_path)
            fd = os.open(self.lock_path, os.O_RDWR)
        except OSError as e:
            msg = f"cannot open the queue lock {self.lock_path}: {e.strerror or e}"
            raise BridgeError(msg) from e
        try:
            deadline = time.monotonic() + LOCK_TIMEOUT
            delay = 0.001
            # flock has no timeout; a non-blocking try with a short backoff bounds the wait.
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        msg = (
                            f"queue {self.path}: another process held the lock "
                            f"{self.lock_path} for {LOCK_TIMEOUT:.0f} s"
                        )
                        raise BridgeError(msg) from None
                    time.sleep(delay)
                    delay = min(delay * 2, 0.02)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    def _load(self) -> tuple[list[RawTask], bool]:
        """Read the file under the lock; repair it if corrupt. Returns (tasks, repaired)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return [], False
        except OSError as e:
            msg = f"cannot read queue {self.path}: {e.strerror or e}"
            raise BridgeError(msg) from e
        text = raw.decode("utf-8", errors="replace")
        try:
            return parse_queue_text(text), False
        except ValueError as e:
            reason = str(e).splitlines()[0]
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        backup = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        write_private(backup, raw, sync=True)
        tasks = salvage_tasks(text)
        repair = QueueRepair(self.path, backup, reason, tuple(str(x.get("task_id")) for x in tasks))
        self.repairs.append(repair)
        if self.on_repair is not None:
            self.on_repair(repair)
        return tasks, True

    def _store(self, tasks: list[RawTask]) -> None:
        try:
            write_private(self.path, dump_json({"tasks": tasks}), sync=True)
        except OSError as e:
            msg = f"cannot write queue {self.path}: {e.strerror or e}"
            raise BridgeError(msg) from e

    @contextlib.contextmanager
    def update(self) -> Iterator[list[RawTask]]:
        """Hold the lock and yield the tasks; the (mutated) list is written back on exit.

        Nothing is written when the block raises, or when the list did not change.
        """
        with self._locked():
            tasks, repaired = self._load()
            before = json.dumps(tasks, sort_keys=True)
            yield tasks
            if repaired or json.dumps(tasks, sort_keys=True) != before:
                self._store(tasks)

    def read(self) -> list[RawTask]:
        """A consistent copy of the tasks (a corrupt file is repaired on the way)."""
        with self.update() as tasks:
            return [dict(x) for x in tasks]

    def submit(self, new: list[RawTask], *, clock: Callable[[], float] = time.time) -> list[str]:
        """Append tasks as ``pending``; a ``task_id`` already in the queue is refused.

        Tasks are not validated here beyond having a unique ``task_id``: the bridge does
        that, so that a bad task gets its ``error.json`` like any other failure.

        Raises
        ------
        BridgeTaskInvalid
            A task is not an object, lacks a ``task_id``, or repeats one; nothing is added.
        """
        now = clock()
        with self.update() as tasks:
            have = {str(x.get("task_id")) for x in tasks}
            added: list[str] = []
            for i, raw in enumerate(new):
                if not isinstance(raw, dict):
                    msg = f"task #{i + 1}: a task must be a JSON object"
                    raise BridgeTaskInvalid(msg)
                task_id = raw.get("task_id")
                if not isinstance(task_id, str) or not task_id:
                    msg = f"task #{i + 1}: task_id is missing or not a string"
                    raise BridgeTaskInvalid(msg)
                if task_id in have:
                    msg = f"task {task_id}: a task with this task_id is already in the queue"
                    raise BridgeTaskInvalid(msg)
                have.add(task_id)
                added.append(task_id)
            for raw in new:
                # Whatever a requester wrote, a new task starts at the beginning of the lifecycle.
                tasks.append({"created_at": now, **raw, "status": "pending", "updated_at": now})
        return added


def find(tasks: list[RawTask], task_id: str) -> RawTask | None:
    """The raw task with ``task_id``, or None."""
    for raw in tasks:
        if raw.get("task_id") == task_id:
            return raw
    return None
