"""One attempt of a pipeline step: its window, its agent (through the driver), its end.

A TUI step's agent is driven by an :class:`~politerm.driver.AgentDriver`: ready, the prompt
delivered with the input box verified empty, approval questions answered by the run's
policy or by ``poli approve <run id>.step-<n>``, and the step's ``done`` block (with this
attempt's nonce) read from its turn's window. The step is done only when the agent is idle
with no open question after its block. A headless step waits for its wrapper's exit file.
"""

from __future__ import annotations

import asyncio
import math
import pathlib
import time
import typing as t

from politerm._internal.private import write_private
from politerm._internal.waits import pid_alive, wait_until
from politerm.driver import AgentDriver
from politerm.driver.leftover import resume
from politerm.driver.limits import driver_settings
from politerm.driver.turn import Expect, TurnOutcome
from politerm.errors import AgentError, ControlModeError, PaneNotFound, PolitermError
from politerm.pipeline import worktrees
from politerm.pipeline.launch import DONE_TYPE, Launch, exit_file, launch, prompt_file, step_id
from politerm.pipeline.launch import render_prompt as _render_prompt
from politerm.pipeline.model import StepStatus
from politerm.protocol.primer import new_nonce
from politerm.store.journal import Serves, Workflow

if t.TYPE_CHECKING:
    from politerm.pipeline.model import Step
    from politerm.pipeline.runner import PipelineRunner

#: A step attempt, as the journal of turns names the record its prompt serves.
STEP_RECORD = "pipeline-step"


def approval_key(run_id: str, num: int) -> str:
    """The name ``poli approve`` answers step ``num`` of run ``run_id`` by.

    Examples
    --------
    >>> approval_key("20261123-abcd", 2)
    '20261123-abcd.step-2'
    """
    return f"{run_id}.step-{num}"


class StepAgent:
    """Runs the attempts of the runner's steps (see :class:`PipelineRunner`)."""

    def __init__(self, run: PipelineRunner) -> None:
        self.run = run

    def launch(self, step: Step, attempt: int) -> Launch:
        """How to start ``step``'s agent for ``attempt``."""
        rec = self.run.record
        return launch(
            step,
            run_cli=rec.cli,
            steps_dir=self.run.state.steps_dir,
            attempt=attempt,
            headless=rec.headless,
            unsafe=rec.unsafe,
            override=rec.cli_override,
        )

    def prompt(self, step: Step, attempt: int, nonce: str | None, *, parallel: bool) -> str:
        """The step's prompt."""
        run = self.run
        return _render_prompt(
            run.pipeline,
            step,
            run_id=run.record.run_id,
            attempt=attempt,
            project=run.project,
            nonce=nonce,
            parallel=parallel,
            layout=run.layout,
            search=run.agents,
            task=run.record.task,
            redactor=run.state.store.redactor,
        )

    async def attach(self, step: Step, spec: Launch) -> AgentDriver | None:
        """The driver of ``step``'s agent in its window (a killed runner's), if it has one."""
        cwd = self.run.record.step(step.num).cwd
        where = None if cwd is None else pathlib.Path(cwd)
        name = f"step-{step.num}"
        return await self.run.host.attach(name, spec.profile, cwd=where, **self.settings(step))

    def settings(self, step: Step) -> dict[str, t.Any]:
        """The driver's store, approval key, policy, limits and budget for ``step``."""
        run = self.run
        return {
            "store": run.state.store,
            "approval_key": approval_key(run.record.run_id, step.num),
            **driver_settings(run.config),
        }

    async def attempt(self, step: Step, *, parallel: bool) -> str | None:
        """One attempt (or the continuation of an interrupted one); an error or None."""
        run = self.run
        rec = run.record.step(step.num)
        if rec.status is StepStatus.RUNNING and rec.attempt > 0:
            outcome = await self.reattach(step)
            if outcome != "rerun":
                return outcome
            run.say(f"step {step.num}: its agent is gone; running it again", step=step.num)
        attempt = rec.attempt + 1
        # An earlier attempt's window (and agent) goes.
        await run.host.stop_agents([f"step-{step.num}"])
        cwd = run.project
        if run.record.worktrees and parallel:
            cwd = await asyncio.to_thread(
                worktrees.create, run.project, run.record.run_id, step.num, run.layout
            )
        spec = self.launch(step, attempt)
        nonce = None if spec.headless else new_nonce()
        text = self.prompt(step, attempt, nonce, parallel=parallel)
        # The record on disk holds no secret; the step's agent still gets them (vault).
        write_private(
            prompt_file(run.state.steps_dir, step.num, attempt), run.state.store.redact(text)
        )
        exit_file(run.state.steps_dir, step.num).unlink(missing_ok=True)
        run.state.set_step(
            step.num,
            StepStatus.RUNNING,
            attempt=attempt,
            nonce=nonce,
            start_line=-1,
            turn_id=None,
            started=time.time(),
            finished=None,
            error=None,
            report=None,
            approved=False,
            cwd=str(cwd),
        )
        run.set_current(step)
        run.state.save()
        # The driver's start path; a TUI step's own hooks report to the run's private hooks
        # directory. Ready is waited for below, once the window is in the record.
        try:
            driver = await AgentDriver.start(
                f"step-{step.num}",
                spec.profile,
                argv=spec.argv,
                host=run.host,
                window=step.window,
                cwd=cwd,
                setting=f"--cli (step {step.num})",
                ready_timeout=None,
                hooks=not spec.headless,
                hooks_dir=run.state.steps_dir / "hooks",
                **self.settings(step),
            )
        except AgentError as exc:
            return str(exc)
        run.say(
            f"step {step.num} ({step.agent}, {spec.cli}{', headless' if spec.headless else ''})"
            f" attempt {attempt} started in window {step.window}",
            step=step.num,
            kind="step-started",
        )
        deadline = time.monotonic() + run.pipeline.timeout_of(step)
        if spec.headless:
            return await self.wait_exit(step, driver, deadline)
        return await self.start_tui(step, spec, driver, text, deadline)

    async def start_tui(
        self, step: Step, spec: Launch, driver: AgentDriver, text: str, deadline: float
    ) -> str | None:
        """Wait until the agent is ready, then deliver the prompt and wait for the step."""
        try:
            await driver.wait_ready(self.run.config.timeouts.ready)
        except AgentError as exc:
            await driver.stop()
            return str(exc)
        snap = await driver.snapshot()
        start = driver.turn_start(snap) if snap is not None else -1
        self.run.state.set_step(step.num, StepStatus.RUNNING, start_line=start)
        return await self.deliver_and_wait(step, spec, driver, text, deadline)

    async def deliver_and_wait(
        self,
        step: Step,
        spec: Launch,
        driver: AgentDriver,
        text: str,
        deadline: float,
        *,
        resumed: t.Literal["pasted", "delivered"] | None = None,
    ) -> str | None:
        """Deliver the step's prompt (unless ``resumed`` says it was), then wait for its end."""
        run = self.run
        rec = run.record.step(step.num)
        serves = Serves(Workflow.PIPELINE, STEP_RECORD, (run.record.run_id, step.num))
        if spec.interactive:
            if resumed == "delivered":
                turn_id = driver.confirmed_earlier(
                    text, serves, {"rule": "resumed"}, nonce=rec.nonce, start_line=rec.start_line
                )
            else:
                result = await driver.deliver(
                    text,
                    already_pasted=resumed == "pasted",
                    serves=serves,
                    nonce=rec.nonce,
                    start_line=rec.start_line,
                )
                if not result.got_in:
                    await driver.stop()
                    evidence = " | ".join(result.evidence)
                    return f"prompt not delivered ({result.outcome.value}): {evidence}"
                turn_id = result.turn_id
            self._delivered(step, turn_id)
            error = await self.wait_person(step, driver)
            driver.end_turn(turn_id, "answered" if error is None else "failed")
            return error

        def progress(word: str) -> None:
            if word == "working":
                self._delivered(step, None)
            elif word == "answered":
                run.marks[f"done:{step.num}"] = time.monotonic()

        try:
            turn = await driver.run_turn(
                text,
                Expect.block(DONE_TYPE, block_id=step_id(step.num)),
                timeout=max(0.0, deadline - time.monotonic()),
                nonce=rec.nonce,
                nudge=None,
                idle_after=math.inf,
                on_progress=progress,
                start=rec.start_line,
                resumed=resumed,
                serves=serves,
            )
        except (PaneNotFound, ControlModeError):
            return "the step's window is gone"
        run.state.set_step(step.num, StepStatus.RUNNING, turn_id=turn.turn_id)
        status = "?" if turn.exit_status is None else turn.exit_status
        if turn.block is not None:
            run.state.set_step(step.num, StepStatus.RUNNING, report=turn.block.body[:500])
        elif (
            turn.outcome is TurnOutcome.EXITED
            and turn.delivery is not None
            and not (turn.delivery.ok or turn.delivery.submitted)
        ):
            return f"the agent exited (exit status {status}) as the prompt was submitted"
        elif turn.outcome is TurnOutcome.EXITED:
            tail = " | ".join(turn.screen[-4:])
            return f"the agent exited (exit status {status}) without a done block: {tail}"
        await driver.stop()
        if turn.outcome is TurnOutcome.ANSWERED:
            return None
        if turn.outcome is TurnOutcome.NOT_DELIVERED:
            return turn.error
        if turn.outcome is TurnOutcome.TIMEOUT:
            minutes = run.pipeline.timeout_of(step) / 60
            return f"timed out after {minutes:g} min: {turn.error}"
        return f"{turn.outcome.value}: {turn.error}"

    def _delivered(self, step: Step, turn_id: int | None) -> None:
        self.run.marks[f"delivered:{step.num}"] = time.monotonic()
        if turn_id is not None:
            self.run.state.set_step(step.num, StepStatus.RUNNING, turn_id=turn_id)

    async def wait_person(self, step: Step, driver: AgentDriver) -> str | None:
        """An ``interactive`` step: a person works with the agent, then marks it done."""
        answer = await self.run.ask(
            step,
            "interactive",
            f"Step {step.num} ({step.agent}) is interactive: work with the agent in window "
            f"{step.window}, then answer y when the step is done (n: it failed)",
        )
        await driver.stop()
        return None if answer == "y" else f"marked not done ({answer}) by a person"

    async def wait_exit(
        self, step: Step, driver: AgentDriver | None, deadline: float
    ) -> str | None:
        """Wait for a headless step's exit-code file (its wrapper runs under ``driver``)."""
        run = self.run
        path = exit_file(run.state.steps_dir, step.num)
        pid = await driver.pid() if driver is not None else None

        def ended() -> str | None:
            # The wrapper writes the file (a rename) before it exits: look again once gone.
            if path.exists() or not pid_alive(pid):
                return path.read_text(encoding="ascii").strip() if path.exists() else ""
            return None

        try:
            text = await wait_until(
                ended,
                dirs=[path.parent],
                pids=[pid] if pid is not None else [],
                timeout=max(0.0, deadline - time.monotonic()),
                what=f"step {step.num}'s exit status",
            )
        except PolitermError:
            text = None
        if driver is not None:
            await driver.stop()
        if text is None:
            return f"timed out after {run.pipeline.timeout_of(step) / 60:g} min"
        if not text:
            return "the step's wrapper ended without writing its exit status"
        run.marks[f"done:{step.num}"] = time.monotonic()
        code = int(text) if text.lstrip("-").isdigit() else -1
        return None if code == 0 else f"exited with status {code}"

    async def reattach(self, step: Step) -> str | None:
        """Continue an attempt a killed runner left running; ``"rerun"`` if it cannot be."""
        run = self.run
        rec = run.record.step(step.num)
        spec = self.launch(step, rec.attempt)
        deadline = time.monotonic() + run.pipeline.timeout_of(step)
        driver = await self.attach(step, spec)
        if spec.headless and exit_file(run.state.steps_dir, step.num).exists():
            return await self.wait_exit(step, driver, deadline)
        snap = await driver.snapshot() if driver is not None else None
        if driver is None or snap is None:
            return "rerun"
        run.say(f"step {step.num}: re-attached to window {step.window}", step=step.num)
        if spec.headless:
            return await self.wait_exit(step, driver, deadline)
        text = prompt_file(run.state.steps_dir, step.num, rec.attempt).read_text("utf-8")
        if not snap.alive:
            # Only a done block it printed before it exited saves the attempt.
            blocks = await driver.read_blocks(snap, rec.start_line, rec.nonce)
            # A dead pane's screen is final: a second look settles what the first saw.
            blocks += await driver.read_blocks(snap, rec.start_line, rec.nonce)
            if not any(b.type == DONE_TYPE and b.id == step_id(step.num) for b in blocks):
                return "rerun"
            driver = await self.attach(step, spec)  # a fresh reader sees the block again
            if driver is None:
                return "rerun"
            return await self.deliver_and_wait(
                step, spec, driver, text, deadline, resumed="delivered"
            )
        key = (run.record.run_id, step.num)
        rows = [r for r in run.state.store.journal_of(STEP_RECORD, key) if r.open]
        row = next((r for r in rows if r.nonce == rec.nonce), None)
        if row is None:
            # The driver writes a prompt's row before it types: the prompt never went in.
            return await self.start_tui(step, spec, driver, text, deadline)
        found = await resume(driver, row, text, snap)
        return await self.deliver_and_wait(
            step, spec, driver, text, deadline, resumed=found.resumed
        )
