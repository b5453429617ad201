"""The agent executor (``--executor agent:NAME``): a politerm agent does the task.

The prepared action is delivered to the agent as one prompt through the agent driver
(:meth:`~politerm.driver.AgentDriver.run_turn`: confirmed delivery, approvals by policy,
nudges, a bounded wait). The agent answers with a tagged block for the task — ``done`` or
``failed``, with the turn's nonce — or reports with ``poli bridge report`` (then the queue
holds its report: the turn counts as answered as soon as the queue says so, ends when the
agent is idle again, and the bridge keeps that report). The bridge verifies the files
afterwards either way.

The agent turn is one journalled step. A bridge killed during the turn never delivers the
task again: after a restart the step is settled from evidence — the agent's report in the
queue (handled by the bridge before it gets here), else the files: all at their expected
sha256 (and no commands to vouch for) means done; otherwise the task fails, saying so.
"""

from __future__ import annotations

import json
import pathlib
import typing as t

from politerm.agents import load_profile
from politerm.bridge.edits import file_state
from politerm.bridge.executor import Handoff, Outcome
from politerm.bridge.models import TaskResult, TaskStatus, Tool
from politerm.bridge.queue import TaskQueue, find
from politerm.bridge.remote import remote_reply, work_id
from politerm.driver import AgentDriver, Expect, TurnOutcome
from politerm.driver.launch import agent_env, agent_profile
from politerm.driver.leftover import abandon
from politerm.driver.limits import driver_settings
from politerm.engine.placement import elsewhere
from politerm.errors import AgentError, BridgeError, EditError
from politerm.protocol.report import ReportStatus
from politerm.store.bridge import StepState
from politerm.store.journal import Serves, Workflow

if t.TYPE_CHECKING:
    from collections.abc import Callable

    from politerm.config import Config
    from politerm.driver import TurnResult
    from politerm.engine.turnwork import TurnReply
    from politerm.protocol.block import Block
    from politerm.store.bridge import BridgeStep

TURN_TIMEOUT: t.Final = 900.0
"""Seconds an agent has for one task (from confirmed delivery)."""

READY_TIMEOUT: t.Final = 60.0
STEP: t.Final = 0

REPORT_TYPES: t.Final = ("done", "failed")
REPORT_STYLES: t.Final = ("block", "fenced")


def render_prompt(handoff: Handoff, nonce: str, *, report: str = "block") -> str:
    """The prompt for one task: what to do, exactly, and how to report.

    Examples
    --------
    >>> from politerm.bridge.models import Task
    >>> task = Task.model_validate({"task_id": "t1", "instruction_details": {
    ...     "file_path": "/p/f.txt", "action": "append_content", "content": "x"}})
    >>> from politerm.bridge.models import AgentActionDetails
    >>> action = AgentActionDetails(tool_to_call="edit_file",
    ...     file_modifications=task.instruction_details.file_modifications,
    ...     executor="agent:A", work_dir="/w")
    >>> h = Handoff(task, action, None, None, pathlib.Path("/p"))  # type: ignore[arg-type]
    >>> text = render_prompt(h, "ab12")
    >>> text.splitlines()[0]
    'BRIDGE TASK t1 (nonce ab12)'
    >>> '"type":"done","id":"t1","nonce":"ab12"' in text
    True

    A task with only an instruction hands the agent that instruction:

    >>> note = Task.model_validate({"task_id": "t2",
    ...     "instruction_details": {"instruction": "Tidy the README."}})
    >>> only = AgentActionDetails(tool_to_call="follow_instruction", executor="agent:A")
    >>> render_prompt(Handoff(note, only, None, None, pathlib.Path("/p")),  # type: ignore[arg-type]
    ...     "cd34").splitlines()[1:3]
    ['Follow this instruction:', 'Tidy the README.']
    """
    action = handoff.action
    tid = handoff.task.task_id
    params: dict[str, t.Any] = {}
    if action.file_modifications:
        params["file_modifications"] = [
            m.model_dump(mode="json", exclude_none=True) for m in action.file_modifications
        ]
    if action.commands_to_execute:
        params["commands_to_execute"] = [
            c.model_dump(mode="json", exclude_none=True) for c in action.commands_to_execute
        ]
    what = handoff.task.instruction_details.description
    compact = (",", ":")
    done = json.dumps(
        {"to": "BRIDGE", "type": "done", "id": tid, "nonce": nonce}, separators=compact
    )
    failed = done.replace('"type":"done"', '"type":"failed"')
    if action.tool_to_call is Tool.FOLLOW_INSTRUCTION:
        lines = [
            f"BRIDGE TASK {tid} (nonce {nonce})",
            "Follow this instruction:",
            what,
            f"Work in {handoff.base_dir}.",
        ]
    else:
        lines = [
            f"BRIDGE TASK {tid} (nonce {nonce})",
            *([f"Purpose: {what}"] if what else []),
            f"Call the tool {action.tool_to_call.value} with exactly these parameters.",
            "Lines are numbered from 1 and ranges include both ends; keep every other byte",
            "and the file's newline style:",
            json.dumps(params, indent=2, ensure_ascii=False),
            f"Work in {handoff.base_dir}. Change nothing else.",
        ]
    if report == "fenced":
        lines += [
            f"SESSION_ID = {fence_id(tid, nonce)}",
            "When you have finished, end with this fenced report, SESSION_ID filled in",
            "(status needs_help, with an escalation line saying why, if you could not do it):",
            "```poli:<SESSION_ID>",
            "status: success",
            "commit_msg: one line saying what you did",
            "```",
        ]
    else:
        lines += [
            "When you have finished, print this block (your summary replaces the middle line):",
            f"[[POLI:MSG {done}]]",
            "what you did",
            "[[/POLI:MSG]]",
            f"If you could not do it, print the same block with header {failed} and say why.",
        ]
    lines += [
        f"Or report with: poli bridge report {tid} --queue {handoff.queue_path}",
        "--status completed_by_agent|failed_by_agent --message '...'",
    ]
    return "\n".join(lines)


def fence_id(task_id: str, nonce: str) -> str:
    """The session id of a task's fenced report: unique per task and turn.

    Examples
    --------
    >>> fence_id("t1", "ab12")
    'bridge-t1-ab12'
    """
    return f"bridge-{task_id}-{nonce}"


class AgentExecutor:
    """Hands tasks to the politerm agent NAME, one prompt per task.

    Parameters
    ----------
    agent
        An agent of the configuration (``[agents.NAME]``: command, profile, cwd, env), or
        else an agent profile name (``fake-claude``, ``claude``, ...) run with its own
        command.
    config
        Supplies the agent and the approval policy (``[routing] approval``).
    turn_timeout
        Bound on one task's turn.
    report
        How the agent reports: ``block`` (a tagged ``done``/``failed`` block with the
        turn's nonce) or ``fenced`` (a ```` ```poli:<id> ```` report: ``status: success``
        or ``needs_help`` with an ``escalation``).
    """

    def __init__(
        self,
        agent: str,
        config: Config,
        *,
        turn_timeout: float = TURN_TIMEOUT,
        report: str = "block",
    ) -> None:
        if report not in REPORT_STYLES:
            msg = f"--report {report!r}: expected one of {', '.join(REPORT_STYLES)}"
            raise BridgeError(msg)
        self.report = report
        self.agent = agent
        self.name = f"agent:{agent}"
        self.config = config
        self.turn_timeout = turn_timeout
        self.driver: AgentDriver | None = None
        conf = config.agents.get(agent)
        if conf is not None:
            # Read as the session reads it: its ready_regex, its own history file.
            self.profile = agent_profile(conf)
            self.argv: list[str] = conf.argv()
            self.cwd: pathlib.Path | None = conf.cwd
            self.env = agent_env(agent, conf, self.profile)
        else:
            self.profile = load_profile(agent)
            self.argv = list(self.profile.command)
            self.cwd = None
            self.env = {}

    async def close(self) -> None:
        """Kill the agent's process tree."""
        if self.driver is not None:
            await self.driver.kill(grace=1.0)
            self.driver = None

    async def _driver(self, handoff: Handoff) -> AgentDriver:
        if self.driver is not None and not self.driver.dead:
            return self.driver
        self.driver = await AgentDriver.start(
            f"bridge-{self.agent}",
            self.profile,
            argv=self.argv,
            cwd=self.cwd if self.cwd is not None else handoff.base_dir,
            env=self.env,
            setting=f"agents.{self.agent}.command",
            ready_timeout=READY_TIMEOUT,
            store=handoff.journal.store,
            **driver_settings(self.config),
        )
        return self.driver

    async def execute(self, handoff: Handoff) -> Outcome:
        """Deliver the task once and wait for the agent's report (or settle after a crash)."""
        tid = handoff.task.task_id
        journal = handoff.journal
        row = journal.get(tid, STEP)
        if row is not None and row.state is not StepState.STARTED:
            ok = row.state is StepState.DONE
            message = str(row.result.get("message", ""))
            return Outcome(ok, TaskResult(message=message), row.result.get("error"))
        if elsewhere(self.config, self.agent):
            return await self._remote(handoff, row)
        if row is not None:
            return self._settle(handoff)
        try:
            driver = await self._driver(handoff)
        except AgentError as e:
            handoff.files.log(f"agent {self.agent} could not start: {e}")
            return Outcome(False, TaskResult(), f"agent {self.agent} could not start: {e}")
        from politerm.protocol.primer import new_nonce

        nonce = new_nonce()
        journal.start(tid, STEP, "agent", {"agent": self.agent, "nonce": nonce})
        handoff.files.log(f"delivering the task to agent {self.agent} (nonce {nonce})")
        fenced = self.report == "fenced"
        result = await driver.run_turn(
            lambda n: render_prompt(handoff, n, report=self.report),
            Expect.fenced_report(fence_id(tid, nonce))
            if fenced
            else Expect.block(*REPORT_TYPES, block_id=tid),
            nonce=nonce,
            timeout=self.turn_timeout,
            task_id=f"bridge:{tid}",
            answered_elsewhere=_reported_in_queue(handoff),
            serves=Serves(Workflow.BRIDGE, "bridge_steps", (journal.queue, tid, STEP)),
        )
        outcome = _queue_report(handoff) if result.elsewhere else self._outcome(result)
        return self._finish(handoff, outcome, result.outcome.value)

    async def _remote(self, handoff: Handoff, row: BridgeStep | None) -> Outcome:
        """The task's turn typed by the node hosting the agent (:mod:`politerm.bridge.remote`).

        A row already STARTED (the bridge restarted mid-turn) names the work posted: it is
        posted again (kept once) and its reply awaited, never a second work.
        """
        from politerm.engine.turnwork import TurnWork
        from politerm.protocol.primer import new_nonce

        tid = handoff.task.task_id
        if self.report != "block":
            why = f"agent {self.agent} runs on another node: only --report block crosses nodes"
            return Outcome(False, TaskResult(), why)
        nonce = str(row.evidence["nonce"]) if row is not None else new_nonce()
        text = render_prompt(handoff, nonce, report=self.report)
        work = TurnWork(work_id(tid, nonce), self.agent, text, nonce, tid, self.turn_timeout,
                        REPORT_TYPES)  # fmt: skip
        if row is None:
            evidence = {"agent": self.agent, "nonce": nonce, "work": work.work_id}
            handoff.journal.start(tid, STEP, "agent", evidence)
        handoff.files.log(f"posting the task to agent {self.agent}'s node ({work.work_id})")
        reply = await remote_reply(self.config, handoff.journal.store, work)
        if isinstance(reply, str):
            outcome = Outcome(False, TaskResult(), f"agent {self.agent}: {reply}")
        else:
            outcome = self._remote_outcome(reply)
        return self._finish(handoff, outcome, reply if isinstance(reply, str) else reply.outcome)

    def _remote_outcome(self, reply: TurnReply) -> Outcome:
        where = f"agent {self.agent} on node {reply.node or '?'}"
        if not reply.delivered:
            return Outcome(False, TaskResult(), f"{where}: not delivered: {reply.error}")
        block = next((b for b in reply.blocks if b.type in REPORT_TYPES), None)
        if block is None:
            return Outcome(False, TaskResult(), f"{where}: {reply.error or reply.outcome}")
        return _block_outcome(block)

    def _finish(self, handoff: Handoff, outcome: Outcome, how: str) -> Outcome:
        """The step's row finished with ``outcome``, and the task's log told how it went."""
        state = StepState.DONE if outcome.ok else StepState.FAILED
        result = {"message": outcome.result.message, "error": outcome.error}
        handoff.journal.finish(handoff.task.task_id, STEP, state, result)
        handoff.files.log(
            f"agent {self.agent} answered: {how}" + ("" if outcome.ok else f" ({outcome.error})")
        )
        return outcome

    def _outcome(self, result: TurnResult) -> Outcome:
        """The task's outcome from the turn's answer (block or fenced report)."""
        if result.outcome is not TurnOutcome.ANSWERED:
            return Outcome(False, TaskResult(), f"agent {self.agent}: {result.error}")
        report, block = result.report, result.block
        if report is not None:
            text = "\n".join(x for x in (report.commit_msg, report.details.strip()) if x)
            if report.status is ReportStatus.SUCCESS:
                return Outcome(True, TaskResult(message=text))
            why = report.escalation or report.commit_msg
            return Outcome(False, TaskResult(message=text), f"agent needs help: {why}")
        if block is None:
            return Outcome(False, TaskResult(), f"agent {self.agent}: no answer")
        return _block_outcome(block)

    def _settle(self, handoff: Handoff) -> Outcome:
        """The turn was under way when the bridge died: judge by the files, never resend."""
        action = handoff.action
        tid = handoff.task.task_id
        why = "the bridge restarted during the agent's turn; the task is not handed over again"
        if action.commands_to_execute or not action.expected_sha256:
            outcome = Outcome(False, TaskResult(), f"{why}, and its commands cannot be checked")
        else:
            try:
                done = all(
                    file_state(pathlib.Path(p)) == sha for p, sha in action.expected_sha256.items()
                )
            except EditError as e:
                done, why = False, f"{why}; {e}"
            outcome = (
                Outcome(True, TaskResult(message="settled from the files after a restart"))
                if done
                else Outcome(False, TaskResult(), f"{why}, and the files are not as requested")
            )
        handoff.journal.finish(
            tid,
            STEP,
            StepState.DONE if outcome.ok else StepState.FAILED,
            {"message": outcome.result.message, "error": outcome.error},
        )
        # Its prompt's row in the journal of turns is not followed any more.
        store, key = handoff.journal.store, (handoff.journal.queue, tid, STEP)
        for row in store.journal_of("bridge_steps", key):
            if row.open:
                abandon(store, row, "the bridge restarted during the turn")
        handoff.files.log("settled after a restart: " + ("done" if outcome.ok else "failed"))
        return outcome


def _block_outcome(block: Block) -> Outcome:
    """The task's outcome from the agent's ``done`` or ``failed`` block."""
    body = block.body.strip()
    if block.type == "done":
        return Outcome(True, TaskResult(message=body))
    return Outcome(False, TaskResult(message=body), f"agent failed: {body}")


_REPORTED: t.Final = frozenset(
    s.value for s in (TaskStatus.COMPLETED_BY_AGENT, TaskStatus.FAILED_BY_AGENT)
)


def _reported_in_queue(handoff: Handoff) -> Callable[[], bool]:
    """True once the queue holds the agent's report (``poli bridge report``): done or failed.

    The queue is read only when its file was replaced (every write renames a new file into
    place, so its inode changes), not on every look at the agent.
    """
    path = handoff.queue_path
    if path is None:
        return lambda: False
    queue = TaskQueue(path)
    seen: list[tuple[int, int]] = []

    def check() -> bool:
        try:
            st = path.stat()
        except OSError:
            return False
        stamp = (st.st_ino, st.st_mtime_ns)
        if seen and seen[-1] == stamp:
            return False
        seen[:] = [stamp]
        raw = find(queue.read(), handoff.task.task_id)
        return raw is not None and raw.get("status") in _REPORTED

    return check


def _queue_report(handoff: Handoff) -> Outcome:
    """The outcome the agent recorded in the queue itself."""
    path = handoff.queue_path
    raw = (find(TaskQueue(path).read(), handoff.task.task_id) if path else None) or {}
    result = raw.get("result")
    message = str(result.get("message", "")) if isinstance(result, dict) else ""
    status = raw.get("status")
    if status == TaskStatus.COMPLETED_BY_AGENT.value:
        return Outcome(True, TaskResult(message=message))
    error = raw.get("error") or f"the agent reported {status}"
    return Outcome(False, TaskResult(message=message), str(error))
