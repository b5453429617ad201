"""Run a pipeline: one tmux window per step, window 0 the control window.

The runner walks the pipeline's stages (a step, or a parallel group run at once). For each
attempt of a step it writes the decision to the run's state first, then acts: a new window
``step-N-<agent>`` running the agent, the prompt delivered with confirmation, and a wait for
the step's ``done`` block carrying this attempt's nonce (TUI) or for the wrapper's exit-code
file (headless). A finished agent's process tree is killed; its window keeps the last screen.

Because every decision is saved before it is acted on, a runner killed at any moment can be
resumed (:func:`resume_run`): a step that was running is re-attached if its agent is still
there (its ``done`` block may already be on screen), and run again only if the agent is
gone. No step runs twice to completion and none is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import pathlib
import shutil
import signal
import sys
import time
import typing as t

from politerm._internal.private import private_dir
from politerm.driver import Host
from politerm.errors import (
    PipelineError,
)
from politerm.pipeline import handoff, worktrees
from politerm.pipeline.agents import AgentSearch
from politerm.pipeline.gitignore import keep_out_of_git
from politerm.pipeline.model import Gate, RunStatus, StepStatus
from politerm.pipeline.state import (
    ANSWERS,
    RunRecord,
    RunState,
)
from politerm.pipeline.stepagent import StepAgent
from politerm.store.watch import StoreWatch

if t.TYPE_CHECKING:
    from politerm.config import Config
    from politerm.pipeline.model import Pipeline, Step
    from politerm.store import RunStore

log = logging.getLogger(__name__)

# Longest wait for an answer without a store change (one a lost notification hid).
_BACKSTOP = 30.0
GATE_QUESTION = "Approve? [y/n/r/s]"


class _Stop(Exception):  # control flow, never leaves this module
    """The run ends here (a person said abort, or the failure policy did)."""


@dataclasses.dataclass(frozen=True)
class FailurePolicy:
    """What to do when a step fails: ask, retry up to N times, skip or abort.

    Examples
    --------
    >>> FailurePolicy.parse("retry:2"), FailurePolicy.parse("ask").kind
    (FailurePolicy(kind='retry', retries=2), 'ask')
    """

    kind: t.Literal["ask", "retry", "skip", "abort"] = "ask"
    retries: int = 0

    @classmethod
    def parse(cls, value: str) -> FailurePolicy:
        """Read ``ask``, ``retry:N``, ``skip`` or ``abort``.

        Raises
        ------
        PipelineError
            For anything else.
        """
        if value in ("ask", "skip", "abort"):
            return cls(value)  # type: ignore[arg-type]
        head, _, count = value.partition(":")
        if head == "retry" and count.isdigit():
            return cls("retry", int(count))
        msg = f"--on-fail must be retry:N, skip or abort, got {value!r}"
        raise PipelineError(msg)

    def __str__(self) -> str:
        return f"retry:{self.retries}" if self.kind == "retry" else self.kind


def control_argv(
    project: pathlib.Path, run_id: str, config_file: pathlib.Path | None = None
) -> list[str]:
    """The program of window 0: live progress, questions and errors of the run.

    ``config_file`` is the configuration the run was started with, so that the control
    window reads the same run store.
    """
    argv = [
        sys.executable, "-m", "politerm", "pipeline", "control",
        "--project", str(project), "--run-id", run_id,
    ]  # fmt: skip
    return [*argv, "--config", str(config_file)] if config_file is not None else argv


class PipelineRunner:
    """Runs (or resumes) one pipeline run.

    Parameters
    ----------
    pipeline
        The parsed pipeline.
    state
        The run's record and where it is saved.
    config
        Socket, ready timeout; loaded from the project.
    host
        The run's terminal host (default: the config's, on the record's socket and session).
    say
        Where progress lines go (the ``poli run`` terminal).
    """

    def __init__(
        self,
        pipeline: Pipeline,
        state: RunState,
        config: Config,
        *,
        host: Host | None = None,
        say: t.Callable[[str], None] | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.state = state
        self.record = state.record
        self.config = config
        self.host = host or Host.of(config, self.record.session, socket=self.record.socket)
        self.policy = FailurePolicy.parse(self.record.on_fail)
        self.project = pathlib.Path(self.record.project)
        self.layout = handoff.Layout(self.record.handoff_dir)
        self.agents = AgentSearch.for_run(
            self.project,
            pipeline=pipeline.path,
            extra=[pathlib.Path(d) for d in self.record.agents],
            configured=config.pipeline.agents_path,
        )
        self._say = say or (lambda _line: None)
        self._ask_lock = asyncio.Lock()
        self.steps = StepAgent(self)
        #: Timestamps for the benchmark: step → (done block seen, next prompt confirmed).
        self.marks: dict[str, float] = {}

    # --- the run ------------------------------------------------------------------------

    def say(self, line: str, *, step: int | None = None, kind: str = "info") -> None:
        """Tell the terminal and the run's timeline."""
        self._say(line)
        self.state.event(f"pipeline.{kind}", line, step=step)

    async def run(self) -> RunStatus:
        """Run every stage not yet finished; return the run's final status.

        SIGINT and SIGTERM save the state (status ``interrupted``) and end the run; it can be
        resumed with ``poli resume``.
        """
        rec = self.record
        rec.pid = os.getpid()
        rec.status = RunStatus.RUNNING
        rec.error = None
        private_dir(self.state.steps_dir)
        self.state.save()
        loop = asyncio.get_running_loop()
        main = asyncio.current_task()
        assert main is not None
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, main.cancel)
        try:
            await self._ensure_session()
            for stage in self.pipeline.stages():
                await self._run_stage(stage)
            rec.status = RunStatus.DONE
            rec.current_step = 0
            self.say(f"pipeline {self.pipeline.name} finished (run {rec.run_id})", kind="done")
        except _Stop as stop:
            rec.status = RunStatus.FAILED
            rec.error = str(stop)
            self.say(f"pipeline stopped: {stop}", kind="failed")
        except asyncio.CancelledError:
            rec.status = RunStatus.INTERRUPTED
            self.say("interrupted: state saved; continue with `poli resume`", kind="interrupted")
        except PipelineError as exc:
            rec.status = RunStatus.FAILED
            rec.error = str(exc)
            self.say(f"pipeline failed: {exc}", kind="failed")
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            rec.pid = None
            self.state.clear_question()
            self.state.save()
            with contextlib.suppress(Exception):
                await self.host.close()
        return rec.status

    async def _ensure_session(self) -> None:
        rec = self.record
        argv = control_argv(self.project, rec.run_id, self.config.project_file)
        # A resumed run brings its control window back if it ended.
        if await self.host.ensure(window="control", argv=argv, cwd=self.project, revive=True):
            self.say(f"session {rec.session} on socket {rec.socket}")

    async def _run_stage(self, stage: tuple[Step, ...]) -> None:
        parallel = stage[0].group is not None
        if parallel:
            nums = ", ".join(str(s.num) for s in stage)
            self.say(f"parallel group {stage[0].group}: steps {nums}")
        await asyncio.gather(*(self._run_step(s, parallel=parallel) for s in stage))
        if parallel:
            await self._sync(stage)
        for step in stage:
            await self._gate(step, parallel=parallel)

    def set_current(self, step: Step) -> None:
        """Mark ``step`` (or an earlier running one) as the run's current step."""
        running = [n for n, r in self.record.steps.items() if r.status is StepStatus.RUNNING]
        self.record.current_step = min([*running, step.num])

    async def _run_step(self, step: Step, *, parallel: bool) -> None:
        """Run ``step`` until it is done or skipped (or the run stops)."""
        while True:
            rec = self.record.step(step.num)
            if rec.status in (StepStatus.DONE, StepStatus.SKIPPED):
                return
            self.set_current(step)
            error = await self.steps.attempt(step, parallel=parallel)
            rec = self.record.step(step.num)
            if error is None:
                self.state.set_step(step.num, StepStatus.DONE, finished=time.time(), error=None)
                self.say(f"step {step.num} ({step.agent}) done", step=step.num, kind="step-done")
                return
            self.state.set_step(step.num, StepStatus.FAILED, finished=time.time(), error=error)
            self.say(f"step {step.num} ({step.agent}) failed: {error}", step=step.num,
                     kind="step-failed")  # fmt: skip
            decision = await self._after_failure(step, error)
            if decision == "skip":
                self.state.set_step(step.num, StepStatus.SKIPPED)
                self.say(f"step {step.num} skipped", step=step.num)
                return
            if decision == "abort":
                msg = f"step {step.num} ({step.agent}) failed: {error}"
                raise _Stop(msg)
            self.say(f"step {step.num}: retrying", step=step.num)

    async def _after_failure(self, step: Step, error: str) -> str:
        policy = self.policy
        attempts = self.record.step(step.num).attempt
        if policy.kind == "retry":
            return "retry" if attempts <= policy.retries else "abort"
        if policy.kind in ("skip", "abort"):
            return policy.kind
        answer = await self.ask(
            step,
            "failure",
            f"Step {step.num} ({step.agent}) failed: {error}. "
            "Retry? [y/n/r/s] (y or r: retry, s: skip, n: abort)",
        )
        return {"y": "retry", "r": "retry", "s": "skip"}.get(answer, "abort")

    async def _gate(self, step: Step, *, parallel: bool) -> None:
        while True:
            rec = self.record.step(step.num)
            if step.gate is not Gate.GATE or rec.status is not StepStatus.DONE or rec.approved:
                return
            if self.record.auto_approve:
                self.state.set_step(step.num, StepStatus.DONE, approved=True)
                self.say(f"step {step.num}: gate approved (--auto-approve)", step=step.num)
                return
            # No ".." when the step's report ends with its own full stop.
            report = f" — {rec.report.rstrip().rstrip('.')}" if rec.report else ""
            answer = await self.ask(
                step, "gate", f"Step {step.num} ({step.agent}) is done{report}. {GATE_QUESTION}"
            )
            if answer == "y":
                self.state.set_step(step.num, StepStatus.DONE, approved=True)
                return
            if answer == "n":
                msg = f"step {step.num} ({step.agent}) not approved"
                raise _Stop(msg)
            if answer == "s":
                self.state.set_step(step.num, StepStatus.SKIPPED)
                return
            # r: run the step again, then ask again.
            self.state.set_step(step.num, StepStatus.PENDING)
            self._drop_merge_marks(step)
            await self._run_step(step, parallel=parallel)
            if parallel:
                await self._sync((step,))

    def _drop_merge_marks(self, step: Step) -> None:
        self.record.merged = [
            m for m in self.record.merged if m not in (f"wt:{step.num}", f"ho:{step.num}")
        ]

    async def ask(self, step: Step, kind: str, question: str) -> str:
        """Ask a person (control window or ``poli gate``); wait for y, n, r or s."""
        async with self._ask_lock:
            self.record.status = RunStatus.WAITING
            self.state.save()
            seq = self.state.ask(step.num, kind, question)
            self._say(f"? {question}  (answer in the control window or with `poli gate`)")
            # The answer is a store commit (poli gate, the control window, a view): woken by it.
            async with StoreWatch(self.state.store.path) as watch:
                while True:
                    changed = watch.event()
                    current = self.state.question() or {}
                    answer = current.get("answer")
                    if current.get("seq") == seq and isinstance(answer, str) and answer in ANSWERS:
                        break
                    await watch.wait(_BACKSTOP, event=changed)
            self.record.status = RunStatus.RUNNING
            self.state.save()
            self._say(f"  answer: {answer}")
            return answer

    # --- one attempt --------------------------------------------------------------------

    # --- the sync point of a parallel group ---------------------------------------------

    async def _sync(self, stage: tuple[Step, ...]) -> None:
        rec = self.record
        done = [s for s in stage if rec.step(s.num).status is StepStatus.DONE]
        if rec.worktrees:
            for step in done:
                wt = worktrees.path_of(self.project, rec.run_id, step.num)
                if f"ho:{step.num}" in rec.merged or not wt.exists():
                    continue
                await asyncio.to_thread(worktrees.commit, wt, step.num, step.agent)
                notes = wt / self.layout.step(step.num)
                if notes.exists():
                    shutil.copyfile(notes, self.project / self.layout.step(step.num))
        fresh = [s for s in done if f"ho:{s.num}" not in rec.merged]
        merged = handoff.merge_parallel(
            self.project,
            [(s.num, s.agent, rec.step(s.num).attempt) for s in fresh],
            rec.run_id,
            redactor=self.state.store.redactor,
            layout=self.layout,
        )
        rec.merged += [f"ho:{s.num}" for s in fresh]
        self.state.save()
        if merged:
            nums = ", ".join(str(n) for n in merged)
            self.say(f"merged the handoff notes of steps {nums} into {self.layout.main}")
        if rec.worktrees:
            for step in done:
                await self._merge_branch(step)

    async def _merge_branch(self, step: Step) -> None:
        rec = self.record
        key = f"wt:{step.num}"
        if key in rec.merged:
            return
        result = await asyncio.to_thread(worktrees.merge, self.project, rec.run_id, step.num)
        while not result.merged:
            files = ", ".join(result.conflicts)
            self.say(f"merging step {step.num} conflicts in {files}", step=step.num,
                     kind="conflict")  # fmt: skip
            answer = await self.ask(
                step,
                "conflict",
                f"Merging step {step.num} ({step.agent}) conflicts in {files}. "
                "y: I resolved it, continue; n: abort; r: re-run the step; s: skip its "
                "changes. [y/n/r/s]",
            )
            if answer == "y":
                if await asyncio.to_thread(worktrees.unmerged, self.project):
                    continue
                await asyncio.to_thread(worktrees.conclude, self.project)
                break
            await asyncio.to_thread(worktrees.abort_merge, self.project)
            if answer == "n":
                msg = f"merge of step {step.num} conflicted"
                raise _Stop(msg)
            if answer == "s":
                self.say(f"step {step.num}: changes not merged (branch kept)", step=step.num)
                rec.merged.append(key)
                self.state.save()
                await asyncio.to_thread(
                    worktrees.remove, self.project, rec.run_id, step.num, keep_branch=True
                )
                return
            self.state.set_step(step.num, StepStatus.PENDING)
            self._drop_merge_marks(step)
            await self._run_step(step, parallel=True)
            await self._sync((step,))
            return
        rec.merged.append(key)
        self.state.save()
        self.say(f"merged the branch of step {step.num}", step=step.num)
        await asyncio.to_thread(worktrees.remove, self.project, rec.run_id, step.num)


def start_run(
    pipeline: Pipeline,
    record: RunRecord,
    store: RunStore,
) -> RunState:
    """Write a new run's first state and ``.handoff.md``.

    Raises
    ------
    PipelineError
        ``--worktrees`` outside a git repository.
    """
    project = pathlib.Path(record.project)
    if record.worktrees:
        worktrees.require_repo(project)
    for step in pipeline.steps:
        record.step(step.num)  # each step in the state file from the start, pending
    state = RunState(store, record)
    if store.get_meta(f"pipeline.run:{record.run_id}"):
        msg = f"run id {record.run_id} is taken"
        raise PipelineError(msg)
    layout = handoff.Layout(record.handoff_dir)
    keep_out_of_git(project, layout)
    handoff.write_initial(
        project, record.task, pipeline.name, record.run_id, redactor=store.redactor, layout=layout
    )
    private_dir(state.steps_dir)
    state.save()
    state.event("pipeline.started", f"{pipeline.name}: {record.task}")
    return state


__all__ = [
    "GATE_QUESTION",
    "FailurePolicy",
    "PipelineRunner",
    "control_argv",
    "start_run",
]
