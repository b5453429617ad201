"""What ``poli agents`` reports: which agent CLIs are installed, and whether one really works.

:func:`probe` finds a profile's program on ``PATH`` and asks it for its version (bounded,
process group killed on timeout). :func:`check_agent` starts an agent in a scratch pane of
its own private tmux server, reports every state it reads with the evidence, answers the
start-up dialogs, sends a one-line prompt, confirms delivery and a reply, and stops the
agent with its whole process tree — all through the agent driver, like every workflow.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import os
import pathlib
import secrets
import shutil
import signal
import subprocess
import tempfile
import typing as t

import psutil

from politerm.agents.state import AgentState

if t.TYPE_CHECKING:
    from collections.abc import Sequence

    from politerm.agents.profile import AgentProfile
    from politerm.agents.state import StateReading
    from politerm.driver import AgentDriver, Observation

Say = t.Callable[[str], None]

DEFAULT_PROMPT = "Reply with one short sentence saying hello."


@dataclasses.dataclass(frozen=True)
class AgentInfo:
    """One profile as ``poli agents`` lists it."""

    name: str
    description: str
    program: str | None
    path: str | None
    version: str | None
    error: str | None = None


def _version(argv: Sequence[str], env: dict[str, str], timeout: float) -> tuple[str | None, str]:
    """First line a ``--version`` run prints, or None and why not."""
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        return None, f"cannot run: {exc.strerror}"
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # The version run may have started helpers of its own: stop the whole group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None, f"no answer to {' '.join(argv[1:])} within {timeout:g}s"
    lines = [ln.strip() for ln in out.decode(errors="replace").splitlines() if ln.strip()]
    if proc.returncode != 0:
        tail = lines[-1] if lines else ""
        return None, f"exit status {proc.returncode}{': ' + tail if tail else ''}"
    return (lines[0] if lines else ""), ""


def probe(profile: AgentProfile, *, timeout: float = 10.0) -> AgentInfo:
    """Find ``profile``'s program on ``PATH`` and read its version (bounded by ``timeout``)."""
    if not profile.command:
        return AgentInfo(profile.name, profile.description, None, None, None)
    program = profile.command[0]
    path = shutil.which(program)
    if path is None:
        return AgentInfo(
            profile.name, profile.description, program, None, None, "not found on PATH"
        )
    if not profile.version_args:
        return AgentInfo(profile.name, profile.description, program, path, None)
    env = {**os.environ, **profile.env}
    version, error = _version([path, *profile.version_args], env, timeout)
    return AgentInfo(profile.name, profile.description, program, path, version, error or None)


def probe_all(profiles: Sequence[AgentProfile], *, timeout: float = 10.0) -> list[AgentInfo]:
    """:func:`probe` every profile, side by side (each run bounded by ``timeout``)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(lambda p: probe(p, timeout=timeout), profiles))


# --- poli agents check --------------------------------------------------------------------


@dataclasses.dataclass
class Step:
    """One line of a check report."""

    name: str
    ok: bool
    detail: str


@dataclasses.dataclass
class CheckReport:
    """What :func:`check_agent` saw."""

    profile: str
    steps: list[Step] = dataclasses.field(default_factory=list)
    states: list[tuple[AgentState, str, tuple[str, ...]]] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every step passed."""
        return bool(self.steps) and all(s.ok for s in self.steps)


class _Reporter:
    """Reports each state the driver reads (when it changes) with its evidence."""

    def __init__(self, report: CheckReport, say: Say) -> None:
        self.report = report
        self.say = say
        self.last: StateReading | None = None
        self._key: tuple[AgentState, str | None] | None = None

    def reading(self, reading: StateReading) -> None:
        self.last = reading
        key = (reading.state, reading.dialog)
        if key == self._key:
            return
        self._key = key
        evidence = tuple(" ".join(e.split())[:120] for e in reading.evidence)
        self.report.states.append((reading.state, reading.rule, evidence))
        what = reading.state.value + (f" ({reading.dialog})" if reading.dialog else "")
        self.say(f"state: {what} [{reading.rule}] {' | '.join(evidence)}")

    def dialog(self, name: str, keys: tuple[str, ...]) -> None:
        _step(self.report, self.say, f"dialog {name}", True, f"answered with {'+'.join(keys)}")


def _step(report: CheckReport, say: Say, name: str, ok: bool, detail: str) -> bool:
    report.steps.append(Step(name, ok, detail))
    say(f"{'ok' if ok else 'FAIL'}: {name}: {detail}")
    return ok


def _reply_lines(profile: AgentProfile, before: Sequence[str], after: Sequence[str]) -> list[str]:
    """Lines of ``after`` that are new since ``before`` and read as the agent's reply."""
    seen = {ln.rstrip() for ln in before}
    prefix = profile.render.reply_prefix.strip()
    out = []
    for line in after:
        text = line.rstrip()
        if not text.strip() or text in seen or profile.is_input_line(text):
            continue
        if prefix and not text.strip().startswith(prefix):
            continue
        out.append(" ".join(text.split()))
    return out


async def check_agent(
    profile: AgentProfile,
    *,
    argv: Sequence[str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    prompt: str = DEFAULT_PROMPT,
    ready_timeout: float = 60.0,
    reply_timeout: float = 120.0,
    unsafe: bool = False,
    env: t.Mapping[str, str] | None = None,
    say: Say | None = None,
) -> CheckReport:
    """Start ``profile``'s agent in a scratch pane and drive it once, reporting every step.

    The agent is driven by an :class:`~politerm.driver.AgentDriver` like in every workflow
    (start, dialogs, ready, confirmed delivery, approvals — denied: a check runs no tools —
    and the kill of its process tree); the check only reports what it sees.

    Parameters
    ----------
    argv
        The command to run instead of the profile's (its arguments included).
    cwd
        Working directory of the agent; default: a fresh temporary directory.
    prompt
        The one-line prompt to send.
    unsafe
        Add the profile's unattended (skip-permission) arguments and environment.
    env
        More environment for the agent, over the profile's.
    """
    # A diagnostic on top of the whole stack: imported here, not at the agents layer's top.
    from politerm.agents.approval import ApprovalPolicy
    from politerm.driver import AgentDriver, Host
    from politerm.errors import AgentError
    from politerm.tmux.server import TmuxServer

    say = say or (lambda _line: None)
    report = CheckReport(profile.name)
    command = list(argv) if argv else profile.launch_argv(unsafe=unsafe)
    if not command:
        _step(report, say, "start", False, f"profile {profile.name} has no command; pass one")
        return report
    seen = _Reporter(report, say)
    with tempfile.TemporaryDirectory(prefix="poli-check-") as scratch:
        workdir = cwd if cwd is not None else scratch
        server = TmuxServer(
            f"poli-check-{os.getpid()}-{secrets.token_hex(3)}",
            config_dir=pathlib.Path(scratch) / ".tmux",
        )
        driver: AgentDriver | None = None
        try:
            host = Host(server, "check")
            await host.ensure(window="idle")
            try:
                driver = await AgentDriver.start(
                    profile.name,
                    profile,
                    argv=command,
                    host=host,
                    window=profile.name,
                    cwd=workdir,
                    env={**profile.launch_env(unsafe=unsafe), **(env or {})},
                    setting="--command",
                    ready_timeout=None,
                    policy=ApprovalPolicy.of("deny"),
                )
            except AgentError as exc:
                _step(report, say, "start", False, str(exc))
                return report
            _step(report, say, "start", True, f"{' '.join(command)} in pane {driver.terminal_name}")
            try:
                reading = await driver.wait_ready(
                    ready_timeout, on_reading=seen.reading, on_dialog=seen.dialog
                )
            except AgentError as exc:
                last = seen.last
                if last is not None and last.state is AgentState.EXITED:
                    detail = "exited: " + " | ".join(last.evidence)
                else:
                    detail = str(exc)
                _step(report, say, "ready", False, detail)
                return report
            _step(report, say, "ready", True, reading.rule)
            snap = await driver.snapshot()
            before = snap.lines if snap is not None else ()
            result = await driver.deliver(prompt)
            detail = (
                f"{result.outcome.value} after {result.submits} submit(s) in "
                f"{result.elapsed * 1000:.0f} ms [{result.rule}] " + " | ".join(result.evidence[:3])
            )
            if not _step(report, say, "delivery", result.ok, detail):
                return report
            await _until_reply(driver, seen, before, reply_timeout)
        finally:
            if driver is not None:
                await _stop(driver, report, say)
            with contextlib.suppress(Exception):
                await server.kill_server()
            await server.close()
    return report


async def _until_reply(
    driver: AgentDriver, seen: _Reporter, before: Sequence[str], timeout: float
) -> bool:
    from politerm.errors import AgentExited, AgentTimeout

    report, say = seen.report, seen.say

    def replied(obs: Observation) -> list[str] | None:
        seen.reading(obs.reading)
        if obs.approval == "answered":
            _step(report, say, "approval", True, _denied(driver))
        if obs.state is not AgentState.READY:
            return None
        return _reply_lines(driver.profile, before, obs.snap.lines) or None

    try:
        lines = await driver.watch(replied, timeout=timeout, what="reply")
    except AgentExited:
        last = seen.last
        evidence = " | ".join(last.evidence) if last is not None else ""
        return _step(report, say, "reply", False, "exited: " + evidence)
    except AgentTimeout:
        screen = " | ".join(ln.strip() for ln in driver.last_screen if ln.strip())[-240:]
        state = seen.last.state.value if seen.last is not None else "unknown"
        return _step(
            report, say, "reply", False, f"no reply within {timeout:g}s ({state}): {screen}"
        )
    return _step(report, say, "reply", True, " | ".join(lines[-3:])[:240])


def _denied(driver: AgentDriver) -> str:
    """What the driver's approver just denied, read as it reads every question.

    A box taller than the screen was read with the terminal's history by the approver
    (:class:`~politerm.driver.approvals.Approver`); the check has no reader of its own.
    """
    from politerm.agents.approval import describe

    keys = "+".join(driver.profile.approval.deny)
    request = driver.last_question
    if request is None:
        return f"denied with {keys} (a check runs no tools)"
    how = "read in full" if request.complete else f"not read in full: {request.doubt}"
    return f"denied {describe(request)} ({how}) with {keys} (a check runs no tools)"


async def _stop(driver: AgentDriver, report: CheckReport, say: Say) -> None:
    """Kill the agent's whole process tree (the driver's kill) and check every process is gone."""
    from politerm._internal.proctree import process_tree

    pid = await driver.pid()
    pids = [p.pid for p in process_tree(pid)] if pid is not None else []
    try:
        await driver.kill()
    except Exception as exc:  # noqa: BLE001  # reported as a failed step, never raised
        _step(report, say, "stop", False, str(exc))
        return
    left = [pid for pid in pids if _alive(pid)]
    if left:
        _step(report, say, "stop", False, f"still running: {', '.join(map(str, left))}")
    else:
        _step(
            report,
            say,
            "stop",
            True,
            f"{len(pids)} process(es) stopped: {', '.join(map(str, pids))}",
        )


def _alive(pid: int) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
