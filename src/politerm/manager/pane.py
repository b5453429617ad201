"""The manager's agents in the private tmux server: the dev agent and an agent as the brain.

The dev agent of the pane channel and the brain that is a politerm agent (e.g. a ``claude``
TUI) are both a :class:`PaneAgent`: one agent in its own session, attached if a previous manager
left it running (:meth:`~politerm.driver.Host.attach`), else started; everything about it goes
through :class:`~politerm.driver.AgentDriver`: dialogs, confirmed delivery, approvals by policy
and ``poli approve``, STUCK, timeouts, and the fenced report ``poli:<id>`` that ends each turn.
The step id (task id + step number) makes a report of an older step useless for a newer one.
The brain's reply id is fresh per call; the report's ``details`` hold its whole
answer (an instruction, ``NEED_USER_INPUT: …``, ``TASK_COMPLETE …`` or ``SYSTEM_ERROR: …``),
which the engine parses exactly like an API model's reply.

After a crash the agent usually still runs in its pane. Before delivering a step the channel
reads the pane's history: the step's report already there is taken as it is. Each step's
prompt has its row in the journal of turns (``manager-step``, written by the driver); a row
still open is settled by the driver's one recovery (:func:`~politerm.driver.leftover.resume`):
a step the agent has is never typed again, only its report awaited (the driver nudges an
agent that went idle without it).
"""

from __future__ import annotations

import pathlib
import re
import secrets
import typing as t

from politerm.agents.profile import load_profile
from politerm.driver import AgentDriver, Expect, Host, TurnOutcome
from politerm.driver.leftover import resume
from politerm.driver.limits import driver_settings
from politerm.errors import (
    AgentError,
    BrainError,
    BrainReplyError,
    BrainTimeout,
    DevChannelError,
    DevStepTimeout,
    ManagerError,
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

REPLY_TEMPLATE: t.Final = """\
{system}

{prompt}

---
Give your answer as a report in exactly this shape, replacing <STEP_ID> with this reply's id,
STEP_ID={reply_id}

```poli:<STEP_ID>
status: success
commit_msg: reply
details: |
  Your whole answer: the instruction, or NEED_USER_INPUT: …, or TASK_COMPLETE …,
  or SYSTEM_ERROR: …
```"""

#: The dev agent's step, as the journal of turns names the record its prompts serve.
STEP_RECORD: t.Final = "manager-step"

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


class PaneAgent:
    """One manager agent in its own session of the private tmux server.

    Parameters
    ----------
    config
        Timeouts, tmux and the approval policy (``[routing] approval``; questions it leaves
        open are answered with ``poli approve <name>``).
    store
        Where the driver records events and pending approvals.
    host
        The terminal host (default: the configured private tmux server).
    session, name, profile, argv, setting, cwd
        Its session, agent name, profile, command (empty: the profile's), the key that
        chooses the command (named when it is not found), its working directory.
    """

    #: How it is named in errors.
    role: t.ClassVar[str] = "the dev agent"
    #: What a turn without a report in time, a malformed report and any other failure raise.
    timeout_error: t.ClassVar[type[ManagerError]] = DevStepTimeout
    report_error: t.ClassVar[type[ManagerError]] = DevChannelError
    error: t.ClassVar[type[ManagerError]] = DevChannelError

    def __init__(
        self,
        config: Config,
        store: RunStore | None,
        host: Host | None,
        *,
        session: str,
        name: str,
        profile: str,
        argv: list[str],
        setting: str,
        cwd: pathlib.Path,
    ) -> None:
        self.config = config
        self.store = store
        self.name = name
        self.profile = profile
        self._argv = argv
        self._setting = setting
        self._cwd = cwd
        self._host = (host or Host.of(config)).on(session)
        self._own_host = host is None
        self._driver: AgentDriver | None = None

    async def driver(self) -> AgentDriver:
        """The agent's driver: attached to its pane if it runs, else started there.

        Either way it has the project's approval policy, ``[limits]`` and ``[budget]``.
        """
        if self._driver is None or self._driver.dead:
            try:
                profile = load_profile(self.profile)
                settings = driver_settings(self.config)
                await self._host.ensure(cwd=self._cwd)
                driver = await self._host.attach(
                    self.name, profile, cwd=self._cwd, store=self.store, **settings
                )
                if driver is not None and await driver.pid() is not None:
                    await driver.observe()
                else:
                    driver = await AgentDriver.start(
                        self.name,
                        profile,
                        argv=self._argv or None,
                        host=self._host,
                        setting=self._setting,
                        ready_timeout=self.config.timeouts.ready,
                        cwd=self._cwd,
                        store=self.store,
                        **settings,
                    )
            except (AgentError, TmuxError) as exc:
                msg = f"{self.role} {self.name} ({self.profile}) could not start: {exc}"
                raise self.error(msg) from None
            self._driver = driver
        return self._driver

    async def _turn(
        self,
        prompt: str,
        sid: str,
        what: str,
        timeout: float,
        serves: Serves,
        task_id: str | None = None,
    ) -> Report:
        """Deliver ``prompt`` and return the fenced report ``poli:<sid>`` that answers it.

        Its row left open by a manager that died (the agent may have the prompt) is settled
        first: the prompt is typed again only if nothing of it reached the agent.
        """
        driver = await self.driver()
        rows = [] if self.store is None else self.store.journal_of(serves.record, serves.key)
        row = next((r for r in rows if r.open), None)
        snap = None if row is None else await driver.snapshot()
        found = None if row is None or snap is None else await resume(driver, row, prompt, snap)
        result = await driver.run_turn(
            prompt,
            Expect.fenced_report(sid),
            timeout=timeout,
            task_id=task_id,
            serves=serves,
            nonce=None if row is None else row.nonce,
            start=None if row is None else row.start_line,
            resumed=None if found is None else found.resumed,
        )
        if result.outcome is TurnOutcome.ANSWERED and result.report is not None:
            return result.report
        if result.outcome in (TurnOutcome.TIMEOUT, TurnOutcome.IDLE):
            msg = f"no report from {self.role} for {what}: {result.error}"
            raise self.timeout_error(msg)
        msg = f"{self.role} {self.name}: {result.outcome.value}: {result.error}"
        bad = result.outcome is TurnOutcome.REPORT_ERROR
        raise (self.report_error if bad else self.error)(msg)

    async def interrupt(self) -> None:
        """Press the agent's interrupt key (its current turn stops)."""
        if self._driver is not None and not self._driver.dead:
            await self._driver.press(self._driver.profile.interrupt_key)

    async def aclose(self) -> None:
        """Leave the agent running in its pane (a later manager attaches to it)."""
        self._driver = None
        if self._own_host:
            await self._host.close()

    async def kill(self) -> None:
        """Kill the agent's process tree, then close as :meth:`aclose`.

        Left open, this agent's control clients would try to reconnect once the server
        goes, and their tasks would outlive the caller's event loop.
        """
        if self._driver is not None:
            await self._driver.kill()
        await self.aclose()


class PaneChannel(PaneAgent):
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
        super().__init__(
            config,
            store,
            host,
            session=session_name(config, project.name),
            name=f"DEV-{_UNSAFE.sub('_', project.name)}",
            profile=project.agent or config.manager.dev_agent,
            argv=config.manager.dev_command,
            setting="manager.dev_command",
            cwd=pathlib.Path(project.path),
        )
        self._instructions: dict[str, str] = {}

    async def send(self, task_id: str, step: int, instruction: str) -> None:
        """Keep the instruction; it is delivered (with confirmation) by :meth:`report`."""
        self._instructions[step_id(task_id, step)] = instruction

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
        try:
            history = "\n".join(await driver.history())
        except TmuxError:
            history = ""
        found = _report_in(history, sid)
        if found is not None:  # reported while no manager was watching
            return report_text(found)
        instruction = self._instructions.get(sid, "").strip()
        prompt = REPORT_TEMPLATE.format(instruction=instruction, step_id=sid)
        serves = Serves(Workflow.MANAGER, STEP_RECORD, (sid,))
        report = await self._turn(prompt, sid, f"step {step}", timeout, serves, task_id)
        return report_text(report)


class AgentBrain(PaneAgent):
    """The brain as an agent TUI in its own session (started once, then reused).

    Parameters
    ----------
    config
        ``[manager.brain] agent`` (profile) and ``command``, tmux and timeouts.
    store
        Where the driver records events and pending approvals.
    host
        The terminal host (default: the configured private tmux server).
    """

    role = "the brain agent"
    timeout_error = BrainTimeout
    report_error = BrainReplyError
    error = BrainError

    def __init__(
        self, config: Config, store: RunStore | None = None, *, host: Host | None = None
    ) -> None:
        self.settings = config.manager.brain
        super().__init__(
            config,
            store,
            host,
            session=session_name(config, "brain"),
            name="BRAIN",
            profile=self.settings.agent,
            argv=self.settings.command,
            setting="manager.brain.command",
            cwd=pathlib.Path.cwd(),
        )

    async def ask(self, prompt: str, *, system: str) -> str:
        """Deliver the prompt and read the reply from the agent's fenced report.

        Raises
        ------
        BrainTimeout
            No report within ``call_timeout`` (or the agent went idle without one).
        BrainReplyError
            The report was malformed.
        BrainError
            The agent exited, got stuck or could not be typed into.
        """
        rid = f"brain-{secrets.token_hex(4)}"
        text = REPLY_TEMPLATE.format(system=system, prompt=prompt, reply_id=rid)
        serves = Serves(Workflow.MANAGER, "brain-call", (rid,))
        report = await self._turn(text, rid, f"reply {rid}", self.settings.call_timeout, serves)
        return report.details or report.commit_msg


def _report_in(history: str, sid: str) -> Report | None:
    parser = ReportParser(sid)
    found: Report | None = None
    for signal in parser.feed(history + "\n"):
        if not isinstance(signal, ReportError):
            found = signal
    return found
