"""The manager's engine: one project's task, moved through the state machine step by step.

Every step is written to the store before the engine acts on what it decided (Temporal-style):
the brain's reply and the move to WAITING_DEV_REPORT are one transaction; the dev report and
the move to PROCESSING_REPORT another. So after a crash or ``kill -9``, :meth:`Manager.run`
picks the task up from the state it finds: it asks the brain again (CALLING_BRAIN), waits for
the report of the step already handed out (WAITING_DEV_REPORT, the channel's ``send`` is
idempotent), or goes on from the recorded report.
"""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import typing as t

from politerm.errors import (
    AgentError,
    BrainError,
    BrainReplyError,
    DevChannelError,
    DevStepTimeout,
    ManagerError,
)
from politerm.manager.prompt import (
    SUMMARY_SYSTEM_PROMPT,
    SYSTEM_PROMPT,
    Limits,
    estimate_tokens,
    planning_prompt,
    project_overview,
    summary_prompt,
)
from politerm.manager.reply import Reply, ReplyKind, clean_text, parse_reply
from politerm.manager.states import ManagerState
from politerm.manager.store import Project, Role, TaskStatus

if t.TYPE_CHECKING:
    from collections.abc import Callable

    from politerm.config.manager import ManagerConfig
    from politerm.manager.brain import Brain
    from politerm.manager.channels import DevChannel
    from politerm.manager.store import ManagerStore, Turn

S = ManagerState
EventSink = t.Callable[[Project, str], None]


def _quiet(_project: Project, _line: str) -> None:
    return None


class Manager:
    """Drives the tasks of manager projects.

    Parameters
    ----------
    store
        The manager tables.
    config
        ``[manager]``.
    brain
        Plans and summarizes.
    channel_for
        Builds the dev channel of a project (cached per project by the engine).
    on_event
        Told every move in one line (the REPL prints it).
    """

    def __init__(
        self,
        store: ManagerStore,
        config: ManagerConfig,
        brain: Brain,
        channel_for: Callable[[Project], DevChannel],
        *,
        on_event: EventSink = _quiet,
    ) -> None:
        self.store = store
        self.config = config
        self.brain = brain
        self._channel_for = channel_for
        self._channels: dict[str, DevChannel] = {}
        self.on_event = on_event
        self.limits = Limits(overview_files=config.overview_files, readme_lines=config.readme_lines)

    # --- moves ----------------------------------------------------------------------------

    def _move(self, name: str, target: ManagerState, detail: str = "", **fields: t.Any) -> Project:
        project = self.store.transition(name, target, detail=detail, **fields)
        self.on_event(project, f"{target.value}" + (f": {detail}" if detail else ""))
        return project

    def select(self, name: str) -> Project:
        """Load and select a project (LOADING_PROJECT → PROJECT_SELECTED, or ERROR_PROJECT)."""
        project = self.store.project(name)
        if project.state.in_task or project.state is S.PAUSED_WAITING_USER_INPUT:
            self.store.select(name)  # keep a running or paused task where it is
            return project
        self._move(name, S.LOADING_PROJECT, f"loading {project.path}")
        root = pathlib.Path(project.path)
        if not root.is_dir():
            self._move(name, S.ERROR_PROJECT, f"{root} is not a directory", error=str(root))
            msg = f"project {name!r}: {root} is not a directory"
            raise ManagerError(msg)
        self.store.select(name)
        return self._move(name, S.PROJECT_SELECTED, f"project {name} selected")

    def start(self, name: str, goal: str) -> Project:
        """Begin a task toward ``goal`` (the project is loaded first if need be)."""
        goal = goal.strip()
        if not goal:
            msg = "a goal needs some text"
            raise ManagerError(msg)
        project = self.store.project(name)
        if project.state.in_task:
            msg = (
                f"project {name!r} already has a task under way ({project.state.value}): "
                f"resume it (poli manager resume --project {name}) or stop it first"
            )
            raise ManagerError(msg)
        if project.state not in (S.PROJECT_SELECTED, S.TASK_COMPLETE) and not (
            project.state.is_error and project.state is not S.ERROR_PROJECT
        ):
            project = self.select(name)
        if project.state is S.PAUSED_WAITING_USER_INPUT:
            self.stop(name)
        project = self.store.start_task(name, goal)
        self.on_event(project, f"calling_brain: task {project.task_id}: {goal}")
        return project

    def answer(self, name: str, text: str) -> Project:
        """The human's answer to the brain's question (or guidance after an interruption)."""
        project = self.store.project(name)
        if project.state is not S.PAUSED_WAITING_USER_INPUT:
            msg = f"project {name!r} is not waiting for input ({project.state.value})"
            raise ManagerError(msg)
        with self.store.store.batch():
            self.store.add_turn(name, Role.USER, text)
            return self._move(
                name, S.CALLING_BRAIN, "input received", question=None,
                task_status=TaskStatus.RUNNING,
            )  # fmt: skip

    def stop(self, name: str, reason: str = "stopped by the user") -> Project:
        """End the project's task: PROJECT_SELECTED, task STOPPED (not offered for resume)."""
        project = stop_task(self.store, name, reason)
        self.on_event(project, f"{project.state.value}: {reason}")
        return project

    async def interrupt(self, name: str) -> Project:
        """Stop the current step (Ctrl-C): the dev agent is interrupted, the task pauses."""
        project = self.store.project(name)
        if not project.state.in_task:
            return project
        channel = self._channels.get(name)
        if channel is not None:
            with contextlib.suppress(DevChannelError, AgentError):
                await channel.interrupt()
        question = f"step interrupted by the user during {project.state.value}; what now?"
        return self._move(
            name, S.PAUSED_WAITING_USER_INPUT, "interrupted", question=question,
            task_status=TaskStatus.PAUSED,
        )  # fmt: skip

    # --- the loop -------------------------------------------------------------------------

    async def run(self, name: str) -> Project:
        """Drive the task until it completes, asks the user, or fails; return the project.

        Cancelling it leaves the state where it was, exactly like a crash.
        """
        while True:
            project = self.store.project(name)
            state = project.state
            if state is S.CALLING_BRAIN:
                await self._plan(project)
            elif state is S.WAITING_DEV_REPORT:
                await self._wait_report(project)
            elif state is S.PROCESSING_REPORT:
                self._process(project)
            elif state is S.SUMMARIZING_CONTEXT:
                await self._summarize(project)
            else:
                return project

    async def aclose(self) -> None:
        """Close the channels and the brain."""
        for channel in self._channels.values():
            with contextlib.suppress(DevChannelError, AgentError):
                await channel.aclose()
        self._channels.clear()
        await self.brain.aclose()

    def channel(self, project: Project) -> DevChannel:
        """The project's dev channel (built once)."""
        channel = self._channels.get(project.name)
        if channel is None:
            channel = self._channels[project.name] = self._channel_for(project)
        return channel

    # --- steps ----------------------------------------------------------------------------

    async def _ask(self, prompt: str, system: str) -> str:
        return clean_text(await self.brain.ask(prompt, system=system))

    async def _plan(self, project: Project) -> None:
        name = project.name
        live = self.store.turns(name, live=True)
        latest = live[-1].text if live and live[-1].role in ("dev", "system") else None
        shown = live[:-1] if latest is not None else live
        overview = None
        if not project.overview_sent:
            overview = await asyncio.to_thread(
                project_overview, pathlib.Path(project.path), self.limits
            )
        prompt = planning_prompt(
            overall_goal=project.goal,
            task_goal=project.task_goal or "",
            overview=overview,
            summary=project.summary,
            turns=shown,
            latest_report=latest,
            limits=self.limits,
        )
        raw = ""
        reply: Reply | None = None
        problem = ""
        for attempt in range(2):  # a malformed or empty reply is retried once
            self._count_call(name)
            raw = ""
            try:
                raw = await self._ask(prompt, SYSTEM_PROMPT)
                reply = parse_reply(raw)
                break
            except BrainReplyError as exc:
                problem = str(exc)
                self.store.store.add_event(
                    "manager.bad_reply", task_id=project.task_id, agent="manager",
                    detail=f"{name}: attempt {attempt + 1}: {problem}",
                    data={"project": name, "reply": raw[:2000]},
                )  # fmt: skip
            except BrainError as exc:
                self._move(
                    name, S.ERROR_BRAIN, str(exc), error=str(exc), task_status=TaskStatus.FAILED
                )
                return
        if reply is None:
            shown_reply = raw.strip()[:500] or "(empty)"
            error = f"{problem}; the brain replied: {shown_reply}"
            self._move(name, S.ERROR_BRAIN_REPLY, error, error=error, task_status=TaskStatus.FAILED)
            return
        self._apply(project, reply)

    def _count_call(self, name: str) -> None:
        self.store.update(name, brain_calls=self.store.project(name).brain_calls + 1)

    def _apply(self, project: Project, reply: Reply) -> None:
        name = project.name
        marker = {
            ReplyKind.NEED_USER_INPUT: "NEED_USER_INPUT: ",
            ReplyKind.TASK_COMPLETE: "TASK_COMPLETE ",
            ReplyKind.SYSTEM_ERROR: "SYSTEM_ERROR: ",
        }.get(reply.kind, "")
        with self.store.store.batch():
            if reply.kind is ReplyKind.INSTRUCTION:
                step = project.step + 1
                self._move(
                    name, S.WAITING_DEV_REPORT, f"step {step}: {_line(reply.text)}", step=step,
                    last_instruction=reply.text, overview_sent=True,
                )  # fmt: skip
                self.store.add_turn(name, Role.MANAGER, reply.text)
                return
            self.store.add_turn(name, Role.MANAGER, marker + reply.text)
            if reply.kind is ReplyKind.NEED_USER_INPUT:
                self._move(
                    name, S.PAUSED_WAITING_USER_INPUT, reply.text, question=reply.text,
                    task_status=TaskStatus.PAUSED, overview_sent=True,
                )  # fmt: skip
            elif reply.kind is ReplyKind.TASK_COMPLETE:
                result = reply.text or "(no summary)"
                note = f"Task {project.task_goal!r} completed: {result}"
                summary = f"{project.summary}\n{note}".strip()
                self._move(
                    name, S.TASK_COMPLETE, _line(result), result=result, summary=summary,
                    task_status=TaskStatus.COMPLETE,
                )  # fmt: skip
            else:
                self._move(
                    name, S.ERROR_SYSTEM, reply.text, error=reply.text,
                    task_status=TaskStatus.FAILED,
                )  # fmt: skip

    async def _wait_report(self, project: Project) -> None:
        name = project.name
        role = Role.DEV
        try:
            channel = self.channel(project)
            task_id = project.task_id or ""
            await channel.send(task_id, project.step, project.last_instruction or "")
            report = await channel.report(task_id, project.step, self.config.step_timeout)
        except DevStepTimeout as exc:
            role = Role.SYSTEM
            report = f"SYSTEM_ERROR: {exc}"
            self.store.store.add_event(
                "manager.dev_timeout", task_id=project.task_id, agent="manager",
                detail=f"{name}: step {project.step}: {exc}", data={"project": name},
            )  # fmt: skip
            self.on_event(project, f"dev timeout: {exc}")
        except (DevChannelError, AgentError) as exc:
            self._move(
                name, S.ERROR_DEV_AGENT, str(exc), error=str(exc), task_status=TaskStatus.FAILED
            )
            return
        report = clean_text(report).strip() or "(the dev agent's report was empty)"
        with self.store.store.batch():
            self.store.add_turn(name, role, report)
            self._move(
                name, S.PROCESSING_REPORT, f"step {project.step}: {_line(report)}",
                last_report=report,
            )  # fmt: skip

    def _process(self, project: Project) -> None:
        live = self.store.turns(project.name, live=True)
        if needs_summary(self.config, live):
            self._move(project.name, S.SUMMARIZING_CONTEXT, f"{len(live)} turns in the context")
        else:
            self._move(project.name, S.CALLING_BRAIN, f"planning step {project.step + 1}")

    async def _summarize(self, project: Project) -> None:
        name = project.name
        live = self.store.turns(name, live=True)
        keep = self.config.keep_recent_turns
        fold = live[: len(live) - keep] if keep else live
        if not fold:
            self._move(name, S.CALLING_BRAIN, "nothing to summarize")
            return
        prompt = summary_prompt(summary=project.summary, turns=fold, limits=self.limits)
        summary = ""
        for _attempt in range(2):
            try:
                summary = (await self._ask(prompt, SUMMARY_SYSTEM_PROMPT)).strip()
            except BrainError as exc:
                self._move(
                    name, S.ERROR_BRAIN, f"summarizing: {exc}", error=str(exc),
                    task_status=TaskStatus.FAILED,
                )  # fmt: skip
                return
            if summary:
                break
        if not summary:
            error = "the brain's summary was empty twice"
            self._move(name, S.ERROR_BRAIN, error, error=error, task_status=TaskStatus.FAILED)
            return
        with self.store.store.batch():
            self.store.fold_summary(name, summary, [turn.id for turn in fold])
            self._move(name, S.CALLING_BRAIN, f"{len(fold)} turns folded into the summary")


def needs_summary(config: ManagerConfig, live: t.Sequence[Turn]) -> bool:
    """Whether the live turns pass the turn count or the token budget of ``config``.

    Only turns older than the ``keep_recent_turns`` kept can be folded; with none, no.
    """
    if len(live) - config.keep_recent_turns < 1:
        return False
    if len(live) > config.summarize_after_turns:
        return True
    return sum(estimate_tokens(turn.text) for turn in live) > config.summarize_tokens


def stop_task(store: ManagerStore, name: str, reason: str = "stopped by the user") -> Project:
    """End ``name``'s task (PROJECT_SELECTED, task STOPPED); needs no brain nor channel."""
    project = store.project(name)
    if project.task_id is None or project.state in (S.PROJECT_SELECTED, S.TASK_COMPLETE):
        return project
    if not (project.state.in_task or project.state is S.PAUSED_WAITING_USER_INPUT):
        return store.update(name, task_status=TaskStatus.STOPPED)
    return store.transition(name, S.PROJECT_SELECTED, detail=reason, task_status=TaskStatus.STOPPED)


def _line(text: str, width: int = 100) -> str:
    r"""The first line of ``text``, cut to ``width``.

    Examples
    --------
    >>> _line("first\nsecond")
    'first'
    >>> _line("x" * 120, 10)
    'xxxxxxxxx…'
    """
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= width else first[: width - 1] + "…"
