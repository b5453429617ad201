"""What ``poli agents`` reports: which agent CLIs are installed, and whether one really works.

:func:`probe` finds a profile's program on ``PATH`` and asks it for its version (bounded,
process group killed on timeout). :func:`check_agent` starts an agent in a scratch pane of
its own private tmux server, reports every state it reads with the evidence, answers the
start-up dialogs, sends a one-line prompt, confirms delivery and a reply, and stops the
agent with its whole process tree.
"""

from __future__ import annotations

import asyncio
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
import time
import typing as t

import psutil

from politerm.agents.state import AgentState
from politerm.agents.tracker import StateTracker

if t.TYPE_CHECKING:
    from collections.abc import Sequence

    from politerm.agents.profile import AgentProfile
    from politerm.terminal import Snapshot
    from politerm.tmux.pane import Pane

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


class _Watcher:
    """Reads the pane, tracks the state, reports each change with its evidence."""

    def __init__(self, profile: AgentProfile, pane: Pane, report: CheckReport, say: Say) -> None:
        self.profile = profile
        self.pane = pane
        self.report = report
        self.say = say
        self.tracker = StateTracker(profile)
        self.snap: Snapshot | None = None
        self._last: tuple[AgentState, str | None] | None = None

    async def look(self) -> AgentState:
        event = self.pane.output_event()
        self.snap = await self.pane.snapshot()
        reading = self.tracker.update(self.snap)
        key = (reading.state, reading.dialog)
        if key != self._last:
            self._last = key
            evidence = tuple(" ".join(e.split())[:120] for e in reading.evidence)
            self.report.states.append((reading.state, reading.rule, evidence))
            what = reading.state.value + (f" ({reading.dialog})" if reading.dialog else "")
            self.say(f"state: {what} [{reading.rule}] {' | '.join(evidence)}")
        self._event = event
        return reading.state

    async def wait(self, seconds: float) -> None:
        """Sleep until the pane's next output, at most ``seconds``."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, seconds)):
                await self._event.wait()


def _step(report: CheckReport, say: Say, name: str, ok: bool, detail: str) -> bool:
    report.steps.append(Step(name, ok, detail))
    say(f"{'ok' if ok else 'FAIL'}: {name}: {detail}")
    return ok


async def _deny(w: _Watcher, report: CheckReport, say: Say) -> None:
    """Deny a tool-permission question: a check runs no tools."""
    keys = w.profile.approval.deny
    await w.pane.send_keys(*keys)
    _step(report, say, "approval", True, f"denied with {'+'.join(keys)} (a check runs no tools)")
    await w.pane.wait_output(1.0)


async def _until_ready(w: _Watcher, report: CheckReport, say: Say, timeout: float) -> bool:
    """Wait for READY, answering dialogs (each at most 3 times) and denying approvals."""
    deadline = time.monotonic() + timeout
    answered: dict[str, int] = {}
    while True:
        state = await w.look()
        reading = w.tracker.reading
        if state is AgentState.READY:
            return True
        if state is AgentState.EXITED:
            return _step(report, say, "ready", False, "exited: " + " | ".join(reading.evidence))
        if state is AgentState.DIALOG and reading.dialog:
            dialog = next(d for d in w.profile.dialogs if d.name == reading.dialog)
            count = answered.get(dialog.name, 0)
            if count < 3:
                answered[dialog.name] = count + 1
                await w.pane.send_keys(*dialog.keys)
                _step(
                    report,
                    say,
                    f"dialog {dialog.name}",
                    True,
                    f"answered with {'+'.join(dialog.keys)}",
                )
                await w.pane.wait_output(1.0)
                continue
        if state is AgentState.WAITING_APPROVAL:
            await _deny(w, report, say)
            continue
        now = time.monotonic()
        if now >= deadline:
            screen = " | ".join(w.snap.tail(4)) if w.snap else ""
            return _step(
                report,
                say,
                "ready",
                False,
                f"not ready after {timeout:g}s ({state.value}): {screen}",
            )
        await w.wait(min(0.5, deadline - now))


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
    say: Say | None = None,
) -> CheckReport:
    """Start ``profile``'s agent in a scratch pane and drive it once, reporting every step.

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
    """
    # A diagnostic on top of the whole stack: imported here, not at the agents layer's top.
    from politerm.driver.delivery import deliver
    from politerm.tmux.pane import new_window
    from politerm.tmux.server import TmuxServer

    say = say or (lambda _line: None)
    report = CheckReport(profile.name)
    command = list(argv) if argv else profile.launch_argv(unsafe=unsafe)
    if not command:
        _step(report, say, "start", False, f"profile {profile.name} has no command; pass one")
        return report
    with tempfile.TemporaryDirectory(prefix="poli-check-") as scratch:
        workdir = cwd if cwd is not None else scratch
        server = TmuxServer(
            f"poli-check-{os.getpid()}-{secrets.token_hex(3)}",
            config_dir=pathlib.Path(scratch) / ".tmux",
        )
        pane: Pane | None = None
        try:
            await server.ensure_session("check", window_name="idle")
            client = await server.connect("check")
            pane = await new_window(
                client,
                server,
                session="check",
                name=profile.name,
                argv=command,
                cwd=workdir,
                env=profile.launch_env(unsafe=unsafe),
            )
            _step(report, say, "start", True, f"{' '.join(command)} in pane {pane.pane_id}")
            w = _Watcher(profile, pane, report, say)
            if not await _until_ready(w, report, say, ready_timeout):
                return report
            _step(report, say, "ready", True, w.tracker.reading.rule)
            assert w.snap is not None
            before = w.snap.lines
            w.tracker.input_sent()
            result = await deliver(pane, prompt, profile)
            ok = result.outcome.value == "delivered"
            detail = (
                f"{result.outcome.value} after {result.submits} submit(s) in "
                f"{result.elapsed * 1000:.0f} ms [{result.rule}] " + " | ".join(result.evidence[:3])
            )
            if not _step(report, say, "delivery", ok, detail):
                return report
            await _until_reply(w, report, say, before, reply_timeout)
        finally:
            if pane is not None:
                await _stop(pane, report, say)
            with contextlib.suppress(Exception):
                await server.kill_server()
            await server.close()
    return report


async def _until_reply(
    w: _Watcher, report: CheckReport, say: Say, before: Sequence[str], timeout: float
) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        state = await w.look()
        if state is AgentState.WAITING_APPROVAL:
            await _deny(w, report, say)
            continue
        if state is AgentState.EXITED:
            return _step(
                report, say, "reply", False, "exited: " + " | ".join(w.tracker.reading.evidence)
            )
        assert w.snap is not None
        if state is AgentState.READY:
            lines = _reply_lines(w.profile, before, w.snap.lines)
            if lines:
                return _step(report, say, "reply", True, " | ".join(lines[-3:])[:240])
        now = time.monotonic()
        if now >= deadline:
            screen = " | ".join(w.snap.tail(4))
            return _step(
                report,
                say,
                "reply",
                False,
                f"no reply within {timeout:g}s ({state.value}): {screen}",
            )
        await w.wait(min(0.5, deadline - now))


async def _stop(pane: Pane, report: CheckReport, say: Say) -> None:
    """Kill the agent's pane and whole process tree, and check that every process is gone."""
    from politerm._internal.proctree import process_tree

    pids: list[int] = []
    with contextlib.suppress(Exception):
        info = await pane.info()
        if info.pid and not info.dead:
            pids = [p.pid for p in process_tree(info.pid)]
    try:
        await pane.kill()
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
