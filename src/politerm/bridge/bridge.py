"""The bridge: takes tasks from the queue, prepares, hands over, verifies, archives, prunes.

One pass (:meth:`Bridge.step`) looks at the queue and acts on the first task that needs it:

``pending``
    validated (one clear error per bad task: it is marked ``failed`` with an ``error.json``)
    and prepared: ``agent_action_details`` names the tool and parameters, the sha256 every
    edited file has now and must have after. The same locked write marks it
    ``pending_agent_action`` and records the hand-over (executor, time), so a task is handed
    over at most once.
``pending_agent_action`` / ``processing_by_agent`` (the agent said it started)
    handed to this bridge's executor earlier and not finished: a bridge that was killed
    settles it from the step journal (see :mod:`politerm.bridge.executor`), never hands it
    over again. Tasks of another executor are left for it.
``completed_by_agent`` / ``failed_by_agent``
    verified where possible (files have the expected content), then finalized: the per-task
    log and ``error.json``, the task JSON and its files copied to ``archive/processed`` or
    ``archive/failed``, and the task pruned from the queue.

:meth:`Bridge.run` repeats passes whenever the queue file changes (watchfiles), with a
bounded backstop for what no event announces.

An unexpected error while acting on one task (a bug, a folder that cannot be written) never
stops the bridge: that task is marked ``failed`` in the queue, with an ``error.json`` naming
the stage, and finalized like any failed task; the bridge goes on with the next. Being in
the queue, the mark outlives a restart, so the next bridge finalizes the task instead of
running it into the same error again. A task whose finalization itself fails is set aside
for the rest of the bridge's life (it stays in the queue, marked, for the next one).
"""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import time
import typing as t

from politerm._internal.aio import wait_event
from politerm._internal.waits import poked_by
from politerm.bridge.archive import TaskFiles
from politerm.bridge.edits import file_state, plan_edits, resolve
from politerm.bridge.executor import Handoff
from politerm.bridge.models import (
    AgentActionDetails,
    Task,
    TaskStatus,
    Tool,
    check_transition,
    parse_task,
)
from politerm.bridge.queue import find
from politerm.errors import BridgeTaskInvalid, EditError, PolitermError
from politerm.redact import Redactor

if t.TYPE_CHECKING:
    from collections.abc import Callable

    from politerm.bridge.executor import Executor
    from politerm.bridge.queue import RawTask, TaskQueue
    from politerm.store.bridge import BridgeJournal

BACKSTOP: t.Final = 30.0
"""Seconds between passes when no file event arrives."""


class Bridge:
    """Serves one queue with one executor.

    Parameters
    ----------
    queue
        The queue file.
    executor
        :class:`~politerm.bridge.executor.BuiltinExecutor` or an agent executor.
    journal
        The step journal in the run store.
    base_dir
        Relative file paths and working directories of tasks start here.
    redactor
        Applied to everything written to logs, archives and events.
    log
        Receives one line per thing the bridge does (the daemon writes them to its log).
    """

    def __init__(
        self,
        queue: TaskQueue,
        executor: Executor,
        journal: BridgeJournal,
        *,
        base_dir: pathlib.Path,
        redactor: Redactor | None = None,
        redact_patterns: t.Sequence[str] = (),
        log: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.queue = queue
        self.executor = executor
        self.journal = journal
        self.base_dir = base_dir
        self.redact_patterns = tuple(redact_patterns)
        self.redactor = redactor or Redactor(redact_patterns)
        self._log = log
        self._clock = clock
        self.finalized: list[tuple[str, TaskStatus]] = []
        # Tasks whose finalization failed unexpectedly: not retried until a restart.
        self.set_aside: set[str] = set()
        self._stage = "preparation"
        # Set while run() sleeps with nothing to do (tests wait for it before a change).
        self.waiting = asyncio.Event()

    def log(self, line: str, task_id: str | None = None) -> None:
        """Report one line (redacted) to the daemon log and, for a task, to its log."""
        line = self.redactor.redact(line)
        if task_id is not None:
            self.files(task_id).log(line)
            self.journal.event("bridge", task_id, line)
        if self._log is not None:
            self._log(f"{task_id}: {line}" if task_id else line)

    def files(self, task_id: str) -> TaskFiles:
        """The work and archive files of a task."""
        return TaskFiles(self.queue.root, task_id, self.redactor)

    # --- the loop -------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event, *, backstop: float = BACKSTOP) -> None:
        """Serve the queue until ``stop`` is set."""
        self.queue.read()  # creates the folder (and repairs a corrupt file) before watching
        async with poked_by([self.queue.root]) as poke:
            while not stop.is_set():
                poke.clear()
                while await self.step():
                    if stop.is_set():
                        return
                stopped = asyncio.create_task(stop.wait())
                poked = asyncio.create_task(wait_event(poke, backstop))
                self.waiting.set()
                await asyncio.wait({stopped, poked}, return_when="FIRST_COMPLETED")
                self.waiting.clear()
                for w in (stopped, poked):
                    w.cancel()

    async def drain(self) -> None:
        """Pass until nothing is left to do (tests and ``start --once``)."""
        while await self.step():
            pass

    async def step(self) -> bool:
        """Act on the first task that needs this bridge; False when there is none."""
        for raw in self.queue.read():
            task_id = str(raw.get("task_id", ""))
            status = raw.get("status")
            if task_id in self.set_aside or (status in _HANDED and not self._ours(raw)):
                continue
            try:
                await self._act(task_id, status)
            except Exception as e:  # noqa: BLE001  # one task's error must not end the bridge
                self._crashed(task_id, e)
            return True
        return False

    async def _act(self, task_id: str, status: object) -> None:
        if status == TaskStatus.PENDING.value:
            self._stage = "preparation"
            if self._prepare(task_id):
                self._stage = "execution"
                await self._execute(task_id)
        elif status in _HANDED:
            self._stage = "execution"
            self.log("resuming a task handed over before a restart", task_id)
            await self._execute(task_id)
        elif status in _TO_FINALIZE:
            self._stage = "finalization"
            self._finalize(task_id)
        else:
            self._stage = "validation"
            self._fail_unreadable(task_id, f"task {task_id}: unknown status {status!r}")

    def _crashed(self, task_id: str, exc: Exception) -> None:
        """An unexpected error on one task: mark it failed (durably) and go on."""
        stage = self._stage
        error = self.redactor.redact(f"task {task_id}: {stage} failed: {one_line(exc, task_id)}")
        marked = False
        # The queue itself may be what failed.
        with contextlib.suppress(Exception), self.queue.update() as tasks:
            raw = find(tasks, task_id)
            if raw is not None:
                if stage == "finalization" and raw.get("error"):
                    error = f"{raw['error']}; {error}"  # keep why it failed in the first place
                raw.update(status=TaskStatus.FAILED.value, error=error, updated_at=self._clock())
                marked = True
        if marked:
            with contextlib.suppress(Exception):  # best effort: its folder may be the problem
                self.files(task_id).write_error(error, status="failed", stage=stage)
        if stage == "finalization" or not marked:
            self.set_aside.add(task_id)
        try:
            self.log(error, task_id)
        except Exception:  # noqa: BLE001  # the task's log may be what cannot be written
            self.log(error)

    def _ours(self, raw: RawTask) -> bool:
        aad = raw.get("agent_action_details")
        return isinstance(aad, dict) and aad.get("executor") == self.executor.name

    # --- prepare and hand over ------------------------------------------------------------

    def _prepare(self, task_id: str) -> bool:
        """Pending → pending_agent_action (prepared and handed over), or → failed."""
        error: str | None = None
        with self.queue.update() as tasks:
            raw = find(tasks, task_id)
            if raw is None or raw.get("status") != TaskStatus.PENDING.value:
                return False
            try:
                task = parse_task(raw)
                action = self._action_for(task)
            except (BridgeTaskInvalid, EditError) as e:
                error = str(e) if str(e).startswith("task ") else f"task {task_id}: {e}"
                self.files(task_id).write_error(error, status="failed", stage="validation")
                raw.update(status=TaskStatus.FAILED.value, error=error, updated_at=self._clock())
            else:
                check_transition(task_id, task.status, TaskStatus.PENDING_AGENT_ACTION)
                raw.update(
                    status=TaskStatus.PENDING_AGENT_ACTION.value,
                    agent_action_details=action.model_dump(mode="json"),
                    updated_at=self._clock(),
                )
        if error is not None:
            self.log(f"invalid: {error}", task_id)
            return False
        self.log(f"prepared and handed to {self.executor.name}", task_id)
        return True

    def _action_for(self, task: Task) -> AgentActionDetails:
        ins = task.instruction_details
        planned = plan_edits(ins.file_modifications, self.base_dir)
        for cmd in ins.commands_to_execute:
            wd = cmd.working_directory
            if wd is not None and not resolve(self.base_dir, wd).is_dir():
                msg = f"command {cmd.command_id}: working_directory {wd} does not exist"
                raise BridgeTaskInvalid(msg)
        mods = [
            m.model_copy(update={"file_path": str(resolve(self.base_dir, m.file_path).absolute())})
            for m in ins.file_modifications
        ]
        return AgentActionDetails(
            tool_to_call=(
                Tool.EDIT_FILE
                if mods
                else Tool.EXECUTE_COMMANDS_SEQUENTIALLY
                if ins.commands_to_execute
                else Tool.FOLLOW_INSTRUCTION
            ),
            file_modifications=mods,
            commands_to_execute=list(ins.commands_to_execute),
            original_sha256={str(p.path): p.before_sha256 for p in planned},
            expected_sha256={str(p.path): p.after_sha256 for p in planned},
            executor=self.executor.name,
            handed_at=self._clock(),
            work_dir=str(self.files(task.task_id).work_dir),
        )

    async def _execute(self, task_id: str) -> None:
        raw = find(self.queue.read(), task_id)
        if raw is None or raw.get("status") not in _HANDED:
            return
        try:
            task = parse_task(raw)
        except BridgeTaskInvalid as e:
            self._fail_unreadable(task_id, str(e))
            return
        if task.agent_action_details is None:
            self._fail_unreadable(task_id, f"task {task_id}: agent_action_details is missing")
            return
        handoff = Handoff(
            task,
            task.agent_action_details,
            self.files(task_id),
            self.journal,
            self.base_dir,
            self.redact_patterns,
            self.queue.path,
        )
        outcome = await self.executor.execute(handoff)
        new = TaskStatus.COMPLETED_BY_AGENT if outcome.ok else TaskStatus.FAILED_BY_AGENT
        with self.queue.update() as tasks:
            raw = find(tasks, task_id)
            # Someone may have reported meanwhile (``poli bridge report``): theirs stands.
            if raw is not None and raw.get("status") in _HANDED:
                raw.update(
                    status=new.value,
                    result=self.redactor.redact_json(outcome.result.model_dump(mode="json")),
                    error=self.redactor.redact_opt(outcome.error),
                    updated_at=self._clock(),
                )
        self.log(f"{self.executor.name} reports {new.value}" + _tail(outcome.error), task_id)

    # --- verify, archive, prune -----------------------------------------------------------

    def _verify(self, task: Task) -> str | None:
        """Why a task reported completed is not (None: it checks out)."""
        aad = task.agent_action_details
        if aad is None:
            return None
        for path, expected in aad.expected_sha256.items():
            try:
                now = file_state(pathlib.Path(path))
            except EditError as e:
                return f"verification: {e}"
            if now != expected:
                return f"verification: {path} does not have the requested content"
        return None

    def _finalize(self, task_id: str) -> None:
        raw = find(self.queue.read(), task_id)
        if raw is None:
            return
        status = TaskStatus(raw["status"])
        error = raw.get("error")
        final = TaskStatus.FAILED
        if status is TaskStatus.COMPLETED_BY_AGENT:
            try:
                problem = self._verify(parse_task(raw))
            except BridgeTaskInvalid as e:
                problem = str(e)
            final = TaskStatus.FAILED if problem else TaskStatus.COMPLETED
            error = problem
        elif status.is_final:
            final = status
        if status is not final and not status.is_final:
            check_transition(task_id, status, final)
        files = self.files(task_id)
        if final is TaskStatus.FAILED and not files.error_path.exists():
            stage = {
                TaskStatus.COMPLETED_BY_AGENT: "verification",
                TaskStatus.FAILED_BY_AGENT: "execution",
            }.get(status, status.value)
            files.write_error(error or "failed", status=final.value, stage=stage)
        files.log(f"finalized: {final.value}" + _tail(error))
        done = {**raw, "status": final.value, "error": error, "finalized_at": self._clock()}
        dest = files.archive(done, failed=final is TaskStatus.FAILED)
        self.journal.forget(task_id)
        with self.queue.update() as tasks:
            tasks[:] = [x for x in tasks if x.get("task_id") != task_id]
        files.remove_work()
        self.finalized.append((task_id, final))
        self.log(f"{final.value}; archived to {dest}" + _tail(error), None)
        self.journal.event("bridge", task_id, f"{final.value}" + _tail(error))

    def _fail_unreadable(self, task_id: str, error: str) -> None:
        """A task the bridge cannot even read: mark it failed so it gets finalized."""
        with self.queue.update() as tasks:
            raw = find(tasks, task_id)
            if raw is not None:
                raw.update(status=TaskStatus.FAILED.value, error=error)
        self.log(error, task_id or None)


_HANDED: t.Final = frozenset(s.value for s in TaskStatus if s.is_handed)

_TO_FINALIZE: t.Final = frozenset(
    s.value
    for s in (
        TaskStatus.COMPLETED_BY_AGENT,
        TaskStatus.FAILED_BY_AGENT,
        TaskStatus.COMPLETED,
        TaskStatus.FAILED,
    )
)


def _tail(error: str | None) -> str:
    return f": {error}" if error else ""


def one_line(exc: BaseException, task_id: str = "") -> str:
    r"""An exception as one line: its type (politerm's own errors go without) and text.

    Examples
    --------
    >>> one_line(FileExistsError(17, "File exists"))
    'FileExistsError: [Errno 17] File exists'
    >>> from politerm.errors import BridgeError
    >>> one_line(BridgeError("task t1: cannot archive\nto x"), "t1")
    'cannot archive to x'
    """
    text = " ".join(str(exc).split())
    if task_id and text.startswith(f"task {task_id}: "):
        text = text[len(f"task {task_id}: ") :]
    if not isinstance(exc, PolitermError):
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text[:500]
