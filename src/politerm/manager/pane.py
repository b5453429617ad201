"""The pane channel: the dev agent is a politerm agent in the private tmux server.

Everything about the agent goes through :class:`~politerm.driver.AgentDriver`: start (or
attach to the agent a previous manager left running), dialogs, confirmed delivery, approvals
by policy and ``poli approve``, STUCK, timeouts, and the fenced report ``poli:<step id>``
that ends each step. The step id (task id + step number) makes a report of an older step
useless for a newer one.

After a crash the agent usually still runs in its pane. Before delivering a step the channel
reads the pane's history: the step's report already there is taken as it is. Each step's
prompt has its row in the journal of turns (``manager-step``, written by the driver); a step
whose row says delivered but not reported is not typed again — the agent is only asked to
finish it and print its report.
"""

from __future__ import annotations

import pathlib
import re
import typing as t

from politerm.agents.approval import ApprovalPolicy
from politerm.driver import AgentDriver, Expect, Host, TurnOutcome
from politerm.errors import (
    AgentError,
    DevChannelError,
    DevStepTimeout,
    ReportError,
    TmuxError,
)
from politerm.protocol.report import Report, ReportParser, ReportStatus
from politerm.store.journal import Serves, Workflow

if t.TYPE_CHECKING:
    from politerm.config import Config
    from politerm.manager.store import Project
    from politerm.store import RunStore

REPORT_TEMPLATE: t.Final = """\
{instruction}

---
When you are done with this step, end your reply with a report in exactly this shape,
replacing <STEP_ID> with this step's id, STEP_ID={step_id}

```poli:<STEP_ID>
status: success
commit_msg: One-line summary of what you did
details: |
  What changed, what you ran and its results; as many lines as needed.
```

If you cannot go on without a person, write `status: needs_help` and add a line
`escalation: why`. The report must be the last thing you print."""

FINISH_TEMPLATE: t.Final = """\
If you have finished the step with STEP_ID={step_id}, print its report now; otherwise finish \
it first. The report is the fenced poli:<STEP_ID> block described in that step."""

#: The dev agent's step, as the journal of turns names the record its prompts serve.
STEP_RECORD: t.Final = "manager-step"
"""Event written when a step's instruction is confirmed delivered to the dev agent."""

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def step_id(task_id: str, step: int) -> str:
    """The id of one step's report.

    Examples
    --------
    >>> step_id("mgr-1a2b", 3)
    'mgr-1a2b-s3'
    """
    return f"{task_id}-s{step}"


def report_text(report: Report) -> str:
    """What the brain reads of a fenced report.

    Examples
    --------
    >>> from politerm.protocol.report import Report, ReportStatus
    >>> print(report_text(Report("s", ReportStatus.SUCCESS, "Added x", "all green")))
    status: success
    Added x
    <BLANKLINE>
    all green
    """
    lines = [f"status: {report.status.value}", report.commit_msg]
    if report.details:
        lines += ["", report.details]
    if report.status is ReportStatus.NEEDS_HELP and report.escalation:
        lines += ["", f"escalation: {report.escalation}"]
    return "\n".join(lines)


def session_name(config: Config, project: str) -> str:
    """The tmux session of a manager project's dev agent (``<session>-mgr-<project>``)."""
    return f"{config.tmux.session}-mgr-{_UNSAFE.sub('_', project)}"


async def close_sessions(config: Config, projects: t.Iterable[str] | None = None) -> list[str]:
    """Stop manager agents (whole process trees, verified gone) and their tmux sessions.

    ``projects``: only these projects' sessions (the brain agent's is ``"brain"``); by
    default every manager session of the configuration's session. Returns what was stopped,
    as ``AGENT (SESSION)``.
    """
    prefix = session_name(config, "")
    wanted = None if projects is None else {session_name(config, p) for p in projects}
    host = Host.of(config)
    stopped: list[str] = []
    try:
        for name in await host.sessions():
            if not name.startswith(prefix) or (wanted is not None and name not in wanted):
                continue
            session = host.on(name)
            stopped += [f"{agent} ({name})" for agent in await session.stop_agents()]
            await session.kill()
    finally:
        await host.close()
    return stopped


async def start_agent(
    config: Config,
    host: Host,
    *,
    name: str,
    profile: str,
    argv: list[str],
    setting: str,
    cwd: pathlib.Path,
    store: RunStore | None,
) -> AgentDriver:
    """Attach to agent ``name`` on ``host`` if it runs, else start it there.

    The approval policy is the configured one (``[routing] approval``); questions it leaves
    open are answered with ``poli approve <name>``.
    """
    routing = config.routing
    return await host.find_or_start(
        name,
        profile,
        argv=argv,
        cwd=cwd,
        setting=setting,
        ready_timeout=config.timeouts.ready,
        store=store,
        policy=ApprovalPolicy.of(routing.approval, routing.approval_patterns),
    )


class PaneChannel:
    """The dev agent in a tmux pane, driven by the agent driver.

    Parameters
    ----------
    config
        Timeouts, tmux, the approval policy and ``[manager]``.
    project
        The project (its path is the agent's working directory; ``agent`` its profile).
    store
        Where the driver records events and pending approvals.
    host
        The terminal host (default: the configured private tmux server); the agent runs in
        its own session there.
    """

    def __init__(
        self,
        config: Config,
        project: Project,
        store: RunStore | None = None,
        *,
        host: Host | None = None,
    ) -> None:
        self.config = config
        self.project = project
        self.store = store
        self.profile_name = project.agent or config.manager.dev_agent
        self.agent_name = f"DEV-{_UNSAFE.sub('_', project.name)}"
        self.session = session_name(config, project.name)
        self._host = (host or Host.of(config)).on(self.session)
        self._own_host = host is None
        self._driver: AgentDriver | None = None
        self._instructions: dict[str, str] = {}

    @property
    def label(self) -> str:
        """``<agent> in tmux session <session>``."""
        return f"{self.agent_name} ({self.profile_name}) in tmux session {self.session}"

    async def driver(self) -> AgentDriver:
        """The dev agent's driver: attached to its pane if it runs, else started there."""
        if self._driver is None or self._driver.dead:
            try:
                self._driver = await start_agent(
                    self.config,
                    self._host,
                    name=self.agent_name,
                    profile=self.profile_name,
                    argv=self.config.manager.dev_command,
                    setting="manager.dev_command",
                    cwd=pathlib.Path(self.project.path),
                    store=self.store,
                )
            except (AgentError, TmuxError) as exc:
                msg = f"dev agent {self.agent_name} ({self.profile_name}) could not start: {exc}"
                raise DevChannelError(msg) from None
        return self._driver

    def _delivered(self, sid: str) -> bool:
        # A manager that died after the driver confirmed the step never types it again.
        if self.store is None:
            return False
        return any(r.delivered is not None for r in self.store.journal_of(STEP_RECORD, (sid,)))

    async def send(self, task_id: str, step: int, instruction: str) -> None:
        """Keep the instruction; it is delivered (with confirmation) by :meth:`report`."""
        self._instructions[step_id(task_id, step)] = instruction

    async def _history(self, driver: AgentDriver) -> str:
        try:
            return "\n".join(await driver.history())
        except TmuxError:
            return ""

    async def report(self, task_id: str, step: int, timeout: float) -> str:
        """Deliver the step (unless the agent already has it) and wait for its report.

        Raises
        ------
        DevStepTimeout
            No report within ``timeout`` (or the agent went idle without one).
        DevChannelError
            The agent exited, got stuck, could not be typed into, or sent a bad report.
        """
        driver = await self.driver()
        sid = step_id(task_id, step)
        found = _report_in(await self._history(driver), sid)
        if found is not None:  # reported while no manager was watching
            return report_text(found)
        if self._delivered(sid):
            prompt = FINISH_TEMPLATE.format(step_id=sid)
        else:
            instruction = self._instructions.get(sid, "")
            prompt = REPORT_TEMPLATE.format(instruction=instruction.strip(), step_id=sid)
        result = await driver.run_turn(
            prompt,
            Expect.fenced_report(sid),
            timeout=timeout,
            task_id=task_id,
            serves=Serves(Workflow.MANAGER, STEP_RECORD, (sid,)),
        )
        if result.outcome is TurnOutcome.ANSWERED and result.report is not None:
            return report_text(result.report)
        if result.outcome in (TurnOutcome.TIMEOUT, TurnOutcome.IDLE):
            msg = f"no report from the dev agent for step {step}: {result.error}"
            raise DevStepTimeout(msg)
        msg = f"dev agent {self.agent_name}: {result.outcome.value}: {result.error}"
        raise DevChannelError(msg)

    async def interrupt(self) -> None:
        """Press the agent's interrupt key (its current step stops)."""
        if self._driver is not None and not self._driver.dead:
            await self._driver.press(self._driver.profile.interrupt_key)

    async def aclose(self) -> None:
        """Leave the agent running in its pane (a later manager attaches to it)."""
        self._driver = None
        if self._own_host:
            await self._host.close()

    async def kill(self) -> None:
        """Kill the dev agent's process tree, then close as :meth:`aclose`.

        Left open, this channel's control clients would try to reconnect once the server
        goes, and their tasks would outlive the caller's event loop.
        """
        if self._driver is not None:
            await self._driver.kill()
        await self.aclose()


def _report_in(history: str, sid: str) -> Report | None:
    parser = ReportParser(sid)
    found: Report | None = None
    for signal in parser.feed(history + "\n"):
        if not isinstance(signal, ReportError):
            found = signal
    return found
