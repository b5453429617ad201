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

import psutil

from politerm._internal.aio import wait_event
from politerm._internal.private import private_dir
from politerm._internal.proctree import kill_processes, process_tree
from politerm._internal.vault import redact_and_keep
from politerm.agents.state import AgentState
from politerm.driver.delivery import Outcome, deliver
from politerm.engine.session import Session, make_server
from politerm.errors import (
    AgentError,
    ControlModeError,
    PaneNotFound,
    PipelineError,
    TmuxCommandError,
)
from politerm.pipeline import handoff, worktrees
from politerm.pipeline.agents import AgentSearch
from politerm.pipeline.launch import DONE_TYPE, Launch, exit_file, launch, prompt_file, step_id
from politerm.pipeline.launch import render_prompt as _render_prompt
from politerm.pipeline.model import FINISHED_RUN, Gate, RunStatus, StepStatus
from politerm.pipeline.state import (
    ANSWERS,
    RunRecord,
    RunState,
    StepRecord,
    new_run_id,
    session_name,
    write_atomic,
)
from politerm.protocol import BlockParser
from politerm.protocol.primer import new_nonce
from politerm.tmux.pane import Pane, new_window

if t.TYPE_CHECKING:
    from politerm.config import Config
    from politerm.pipeline.model import Pipeline, Step
    from politerm.store import RunStore
    from politerm.terminal import Snapshot
    from politerm.tmux.control import ControlClient
    from politerm.tmux.server import TmuxServer

log = logging.getLogger(__name__)

# How often an unanswered question is checked for an answer, and a headless step for its file.
_POLL = 0.1
# Upper bound on a wait for pane output before looking again anyway.
_MAX_WAIT = 0.5
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


def control_argv(project: pathlib.Path, run_id: str) -> list[str]:
    """The program of window 0: live progress, questions and errors of the run."""
    return [
        sys.executable, "-m", "politerm", "pipeline", "control",
        "--project", str(project), "--run-id", run_id,
    ]  # fmt: skip


def new_record(
    pipeline: Pipeline,
    *,
    project: pathlib.Path,
    task: str,
    cli: str,
    socket: str,
    run_id: str | None = None,
    headless: bool = False,
    unsafe: bool = False,
    use_worktrees: bool = False,
    on_fail: str = "ask",
) -> RunRecord:
    """A fresh run record (nothing is written yet)."""
    rid = run_id or new_run_id()
    assert pipeline.path is not None
    return RunRecord(
        run_id=rid,
        pipeline=str(pipeline.path),
        pipeline_name=pipeline.name,
        project=str(project),
        task=task,
        session=session_name(project, rid),
        socket=socket,
        cli=cli,
        headless=headless,
        unsafe=unsafe,
        worktrees=use_worktrees,
        on_fail=on_fail,
        steps={s.num: StepRecord() for s in pipeline.steps},
    )


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
    server
        The private tmux server (default: from the config, on the record's socket).
    say
        Where progress lines go (the ``poli run`` terminal).
    """

    def __init__(
        self,
        pipeline: Pipeline,
        state: RunState,
        config: Config,
        *,
        server: TmuxServer | None = None,
        say: t.Callable[[str], None] | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.state = state
        self.record = state.record
        self.config = config
        self.server = server or make_server(config)
        self.server.socket_name = self.record.socket
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
        self._client: ControlClient | None = None
        self._session = Session(config, state.store, self.server)
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
                await self.server.close()
        return rec.status

    async def _ensure_session(self) -> None:
        rec = self.record
        created = await self.server.ensure_session(
            rec.session,
            window_name="control",
            argv=control_argv(self.project, rec.run_id),
            cwd=self.project,
        )
        self._client = await self.server.connect(rec.session)
        if created:
            self.say(f"session {rec.session} on socket {rec.socket}")
            return
        # A resumed run: bring the control window back if it ended.
        lines = await self._client.cmd(
            "list-panes", "-t", f"={rec.session}:0", "-F", "#{pane_id}\t#{pane_dead}"
        )
        for line in lines:
            pane_id, _, dead = line.partition("\t")
            if dead == "1":
                await Pane(self._client, pane_id, self.server).respawn(
                    control_argv(self.project, rec.run_id), cwd=self.project
                )

    @property
    def client(self) -> ControlClient:
        """The control connection to the run's session."""
        assert self._client is not None
        return self._client

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

    def _set_current(self, step: Step) -> None:
        running = [n for n, r in self.record.steps.items() if r.status is StepStatus.RUNNING]
        self.record.current_step = min([*running, step.num])

    async def _run_step(self, step: Step, *, parallel: bool) -> None:
        """Run ``step`` until it is done or skipped (or the run stops)."""
        while True:
            rec = self.record.step(step.num)
            if rec.status in (StepStatus.DONE, StepStatus.SKIPPED):
                return
            self._set_current(step)
            error = await self._attempt(step, parallel=parallel)
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
            report = f" — {rec.report}" if rec.report else ""
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
            while True:
                current = self.state.question() or {}
                got = current.get("answer")
                if current.get("seq") == seq and isinstance(got, str) and got in ANSWERS:
                    answer = got
                    break
                await asyncio.sleep(_POLL)
            self.record.status = RunStatus.RUNNING
            self.state.save()
            self._say(f"  answer: {answer}")
            return answer

    # --- one attempt --------------------------------------------------------------------

    def _launch(self, step: Step, attempt: int) -> Launch:
        rec = self.record
        return launch(
            step,
            run_cli=rec.cli,
            steps_dir=self.state.steps_dir,
            attempt=attempt,
            headless=rec.headless,
            unsafe=rec.unsafe,
            override=rec.cli_override,
        )

    def _prompt(self, step: Step, attempt: int, nonce: str | None, *, parallel: bool) -> str:
        return _render_prompt(
            self.pipeline,
            step,
            run_id=self.record.run_id,
            attempt=attempt,
            project=self.project,
            nonce=nonce,
            parallel=parallel,
            layout=self.layout,
            search=self.agents,
            task=self.record.task,
        )

    async def _attempt(self, step: Step, *, parallel: bool) -> str | None:
        """One attempt (or the continuation of an interrupted one); an error or None."""
        rec = self.record.step(step.num)
        if rec.status is StepStatus.RUNNING and rec.attempt > 0:
            outcome = await self._reattach(step, parallel=parallel)
            if outcome != "rerun":
                return outcome
            self.say(f"step {step.num}: its agent is gone; running it again", step=step.num)
        attempt = rec.attempt + 1
        await self._drop_window(step)
        cwd = self.project
        if self.record.worktrees and parallel:
            cwd = await asyncio.to_thread(
                worktrees.create, self.project, self.record.run_id, step.num, self.layout
            )
        spec = self._launch(step, attempt)
        nonce = None if spec.headless else new_nonce()
        text = self._prompt(step, attempt, nonce, parallel=parallel)
        # The record on disk holds no secret; the step's agent still gets them (vault).
        write_atomic(prompt_file(self.state.steps_dir, step.num, attempt), redact_and_keep(text))
        exit_file(self.state.steps_dir, step.num).unlink(missing_ok=True)
        self.state.set_step(
            step.num,
            StepStatus.RUNNING,
            attempt=attempt,
            nonce=nonce,
            pane=None,
            start_line=-1,
            delivered=False,
            started=time.time(),
            finished=None,
            error=None,
            report=None,
            approved=False,
            cwd=str(cwd),
        )
        self._set_current(step)
        self.state.save()
        pane = await new_window(
            self.client,
            self.server,
            session=self.record.session,
            name=step.window,
            argv=list(spec.argv),
            cwd=cwd,
            env=spec.profile.env,
            agent=f"step-{step.num}",
        )
        self.state.set_step(step.num, StepStatus.RUNNING, pane=pane.pane_id)
        self.say(
            f"step {step.num} ({step.agent}, {spec.cli}{', headless' if spec.headless else ''})"
            f" attempt {attempt} started in window {step.window}",
            step=step.num,
            kind="step-started",
        )
        deadline = time.monotonic() + self.pipeline.timeout_of(step)
        if spec.headless:
            return await self._wait_exit(step, pane, deadline)
        return await self._start_tui(step, spec, pane, text, deadline)

    async def _start_tui(
        self, step: Step, spec: Launch, pane: Pane, text: str, deadline: float
    ) -> str | None:
        try:
            await self._session.wait_ready(step.window, spec.profile, pane)
        except AgentError as exc:
            await self._stop_agent(pane)
            return str(exc)
        snap = await pane.snapshot()
        start = -1 if snap.alternate_screen else snap.history_size + snap.cursor_y
        self.state.set_step(step.num, StepStatus.RUNNING, start_line=start)
        return await self._deliver_and_wait(step, spec, pane, text, deadline)

    async def _deliver_and_wait(
        self, step: Step, spec: Launch, pane: Pane, text: str, deadline: float
    ) -> str | None:
        result = await deliver(pane, text, spec.profile)
        if result.outcome is Outcome.AGENT_EXITED:
            status: int | str = "?"
            with contextlib.suppress(PaneNotFound, ControlModeError):
                info = await pane.info()
                status = "?" if info.dead_status is None else info.dead_status
            return f"the agent exited (exit status {status}) as the prompt was submitted"
        if not (result.ok or (result.outcome is Outcome.BLOCKED and result.submitted)):
            await self._stop_agent(pane)
            return f"prompt not delivered ({result.outcome.value}): {' | '.join(result.evidence)}"
        self.marks[f"delivered:{step.num}"] = time.monotonic()
        self.state.set_step(step.num, StepStatus.RUNNING, delivered=True)
        if spec.interactive:
            return await self._wait_person(step, pane)
        return await self._wait_done(step, spec, pane, deadline)

    async def _wait_person(self, step: Step, pane: Pane) -> str | None:
        """An ``interactive`` step: a person works with the agent, then marks it done."""
        answer = await self.ask(
            step,
            "interactive",
            f"Step {step.num} ({step.agent}) is interactive: work with the agent in window "
            f"{step.window}, then answer y when the step is done (n: it failed)",
        )
        await self._stop_agent(pane)
        return None if answer == "y" else f"marked not done ({answer}) by a person"

    async def _turn_lines(self, pane: Pane, start_line: int, snap: Snapshot) -> list[str]:
        if snap.alternate_screen or start_line < 0:
            return list(snap.lines)
        start = start_line - snap.history_size
        if start >= 0:
            return list(snap.lines[start:])
        return await pane.capture(start=start, end="-")

    async def _wait_done(self, step: Step, spec: Launch, pane: Pane, deadline: float) -> str | None:
        """Wait for the step's ``done`` block with this attempt's nonce."""
        rec = self.record.step(step.num)
        parser = BlockParser(nonce=rec.nonce, detect_echo=True)
        want = step_id(step.num)
        while True:
            event = pane.output_event()
            try:
                snap = await pane.snapshot()
                lines = await self._turn_lines(pane, rec.start_line, snap)
            except (PaneNotFound, ControlModeError):
                return "the step's window is gone"
            for block in parser.scan_screen(lines):
                if block.type == DONE_TYPE and block.id == want:
                    self.marks[f"done:{step.num}"] = time.monotonic()
                    self.state.set_step(step.num, StepStatus.RUNNING, report=block.body[:500])
                    await self._stop_agent(pane)
                    return None
            reading = spec.profile.detect(snap)
            if reading.state is AgentState.EXITED:
                status = "?" if snap.exit_status is None else snap.exit_status
                tail = " | ".join(snap.tail(4))
                return f"the agent exited (exit status {status}) without a done block: {tail}"
            now = time.monotonic()
            if now >= deadline:
                await self._stop_agent(pane)
                minutes = self.pipeline.timeout_of(step) / 60
                return f"timed out after {minutes:g} min; screen: {' | '.join(snap.tail(4))}"
            await wait_event(event, min(_MAX_WAIT, deadline - now))

    async def _wait_exit(self, step: Step, pane: Pane, deadline: float) -> str | None:
        """Wait for a headless step's exit-code file."""
        path = exit_file(self.state.steps_dir, step.num)
        gone_since: float | None = None
        while True:
            if path.exists():
                text = path.read_text(encoding="ascii").strip()
                code = int(text) if text.lstrip("-").isdigit() else -1
                self.marks[f"done:{step.num}"] = time.monotonic()
                # The wrapper exits right after the rename; let it, then make sure.
                for _ in range(20):
                    with contextlib.suppress(ControlModeError):
                        if not await pane.is_alive():
                            break
                    await asyncio.sleep(_POLL / 2)
                await self._stop_agent(pane)
                if code == 0:
                    return None
                return f"exited with status {code}"
            try:
                alive = await pane.is_alive()
            except ControlModeError:
                alive = False
            now = time.monotonic()
            if not alive:
                # The wrapper writes the file before it exits; give the rename a moment.
                gone_since = gone_since or now
                if now - gone_since > 1.0:
                    return "the step's wrapper ended without writing its exit status"
            if now >= deadline:
                await self._stop_agent(pane)
                minutes = self.pipeline.timeout_of(step) / 60
                return f"timed out after {minutes:g} min"
            await asyncio.sleep(_POLL)

    async def _reattach(self, step: Step, *, parallel: bool) -> str | None:
        """Continue an attempt a killed runner left running; ``"rerun"`` if it cannot be."""
        rec = self.record.step(step.num)
        spec = self._launch(step, rec.attempt)
        deadline = time.monotonic() + self.pipeline.timeout_of(step)
        if spec.headless and exit_file(self.state.steps_dir, step.num).exists():
            pane = Pane(self.client, rec.pane, self.server) if rec.pane else None
            if pane is not None:
                return await self._wait_exit(step, pane, deadline)
        if rec.pane is None:
            return "rerun"
        pane = Pane(self.client, rec.pane, self.server)
        try:
            snap = await pane.snapshot()
        except PaneNotFound:
            return "rerun"
        self.say(f"step {step.num}: re-attached to window {step.window}", step=step.num)
        if spec.headless:
            return await self._wait_exit(step, pane, deadline)
        lines = await self._turn_lines(pane, rec.start_line, snap)
        parser = BlockParser(nonce=rec.nonce, detect_echo=True)
        if any(
            b.type == DONE_TYPE and b.id == step_id(step.num) for b in parser.scan_screen(lines)
        ):
            return await self._wait_done(step, spec, pane, deadline)
        if not snap.alive:
            return "rerun"
        reading = spec.profile.detect(snap)
        if (
            rec.delivered
            or reading.state is AgentState.BUSY
            or (rec.nonce and any(rec.nonce in ln for ln in lines))
        ):
            return await self._wait_done(step, spec, pane, deadline)
        # Killed before the prompt was confirmed: it is not on screen, so send it (again).
        text = prompt_file(self.state.steps_dir, step.num, rec.attempt).read_text("utf-8")
        if rec.start_line < 0:
            return await self._start_tui(step, spec, pane, text, deadline)
        if reading.input_text:
            await pane.send_keys(spec.profile.submit_key)
            self.state.set_step(step.num, StepStatus.RUNNING, delivered=True)
            return await self._wait_done(step, spec, pane, deadline)
        return await self._deliver_and_wait(step, spec, pane, text, deadline)

    async def _stop_agent(self, pane: Pane) -> None:
        """Kill the agent's process tree; the dead pane keeps its last screen."""
        try:
            info = await pane.info()
        except (PaneNotFound, ControlModeError):
            return
        if info.dead or not info.pid:
            return
        procs = process_tree(info.pid)
        await asyncio.to_thread(terminate, procs)

    async def _drop_window(self, step: Step) -> None:
        """Kill the window (and agent) of an earlier attempt of ``step``, if any."""
        rec = self.record.step(step.num)
        if rec.pane is None:
            return
        with contextlib.suppress(PaneNotFound, TmuxCommandError, ControlModeError):
            await Pane(self.client, rec.pane, self.server).kill()

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


def terminate(procs: t.Sequence[psutil.Process], grace: float = 3.0) -> bool:
    """SIGTERM ``procs``, SIGKILL what is left after ``grace``; True when all are gone."""
    try:
        kill_processes(procs, grace=grace, what="step agent")
    except AgentError:
        return False
    return True


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
    state = RunState(store, record)
    if store.get_meta(f"pipeline.run:{record.run_id}"):
        msg = f"run id {record.run_id} is taken"
        raise PipelineError(msg)
    layout = handoff.Layout(record.handoff_dir)
    handoff.write_initial(project, record.task, pipeline.name, record.run_id, layout=layout)
    private_dir(state.steps_dir)
    state.save()
    state.event("pipeline.started", f"{pipeline.name}: {record.task}")
    return state


def finished(record: RunRecord) -> bool:
    """Whether a run has ended for good."""
    return record.status in FINISHED_RUN


__all__ = [
    "GATE_QUESTION",
    "FailurePolicy",
    "PipelineRunner",
    "control_argv",
    "finished",
    "new_record",
    "start_run",
]
