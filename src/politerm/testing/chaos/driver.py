"""The chaos driver: a real politerm session under seeded faults, judged from the agents' logs.

It runs politerm the way a user does — ``poli up``, tasks queued into the project's
store, ``poli route --until-idle`` in a subprocess — and meanwhile, at moments drawn
from one seed: ``kill -9`` of the routing process (then a new ``poli route``), a kill of
the whole tmux server (then ``poli up --resume``), two routers started at once. The fake
agents add their own faults (lost Enters, crashes, freezes, slow turns, text left in
the box). An agent crash (seen in its log) stops the router with SIGINT, as a user's
Ctrl-C would; a crash or a server kill is then followed by ``poli up --resume``. Nothing
else is resumed: a task that fails for any other reason stays failed and counts as lost.
At the end :func:`politerm.testing.chaos.truth.judge` reads the agents' logs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import signal
import subprocess
import sys
import time
import typing as t

from politerm.config import load_config
from politerm.engine.loop import submit
from politerm.store import RunStore
from politerm.testing.chaos.project import AGENTS, AgentSpec, expected_report, write_project
from politerm.testing.chaos.truth import Claim, Verdict, fault_counts, judge, submissions

if t.TYPE_CHECKING:
    import pathlib

DONE = "DONE"
FINISHED = frozenset({"DONE", "FAILED", "ABORTED"})


class ChaosError(RuntimeError):
    """The driver itself could not run a step (``poli up`` failed, a process hung)."""


@dataclasses.dataclass(frozen=True)
class ChaosPlan:
    """What one chaos run does; every random choice comes from ``seed``."""

    seed: int
    tasks: int
    planner: AgentSpec = dataclasses.field(default_factory=AgentSpec)
    executer: AgentSpec = dataclasses.field(default_factory=lambda: AgentSpec(mode="codex"))
    wave: int = 0  # keep at most this many tasks unfinished (0: queue them all at once)
    router_kills: int = 0  # kill -9 of the routing process
    kill_after: tuple[float, float] = (0.3, 2.5)  # seconds into a router's life
    server_kills: int = 0  # kill-server of the private tmux server, then poli up --resume
    two_routers: bool = False  # start two `poli route` at once, every time
    timeout: float = 60.0  # plan/exec step timeouts in poli.toml
    budget: float = 150.0  # seconds for the whole run before giving up


@dataclasses.dataclass
class ChaosResult:
    """A run's verdict plus what the driver did to it."""

    verdict: Verdict
    seconds: float
    router_runs: int = 0
    router_kills: int = 0
    server_kills: int = 0
    resumes: int = 0
    refused_routers: int = 0  # second routers that refused to start (lock held)
    notes: list[str] = dataclasses.field(default_factory=list)

    def summary(self) -> str:
        """Verdict plus the driver's own counts."""
        return (
            f"{self.verdict.summary()}\n"
            f"driver: {self.seconds:.1f}s, {self.router_runs} router runs, "
            f"{self.router_kills} kill -9, {self.server_kills} server kills, "
            f"{self.resumes} resumes, {self.refused_routers} refused second routers"
            + "".join(f"\n  note: {n}" for n in self.notes)
        )


class ChaosRun:
    """One chaos run in ``root`` on the private tmux socket ``socket``."""

    def __init__(self, root: pathlib.Path, socket: str, plan: ChaosPlan) -> None:
        self.root = root
        self.socket = socket
        self.plan = plan
        self.rng = random.Random(plan.seed)
        self.config_path = write_project(
            root,
            socket,
            seed=plan.seed,
            planner=plan.planner,
            executer=plan.executer,
            timeout=plan.timeout,
        )
        self.config = load_config(root, env={})
        self.store = RunStore.open(self.config.store.resolved_path())
        self.ids = [f"C{plan.seed}-{i:04d}" for i in range(plan.tasks)]
        self.submitted = 0
        self.deadline = 0.0
        self.result = ChaosResult(Verdict(), 0.0)
        self._outputs = 0
        self._log_offsets: dict[str, int] = {}
        self._crash_count = 0

    # ------------------------------------------------------------------ processes

    def _poli(self, *args: str) -> subprocess.Popen[bytes]:
        self._outputs += 1
        out = (self.root / f"poli-{self._outputs:03d}-{args[0]}.out").open("wb")
        with out:
            return subprocess.Popen(
                [sys.executable, "-m", "politerm", *args],
                cwd=self.root,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def _run(self, *args: str, timeout: float = 90) -> None:
        proc = self._poli(*args)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            msg = f"`poli {' '.join(args)}` did not finish within {timeout:g}s"
            raise ChaosError(msg) from None
        if code != 0:
            out = self.root / f"poli-{self._outputs:03d}-{args[0]}.out"
            tail = out.read_text("utf-8", "replace").strip().splitlines()[-3:]
            msg = f"`poli {' '.join(args)}` exited {code}: {' | '.join(tail)}"
            raise ChaosError(msg)

    def _kill_server(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, check=False)

    # ------------------------------------------------------------------ tasks

    def _claims(self) -> dict[str, Claim]:
        claims = {}
        for tid in self.ids[: self.submitted]:
            task = self.store.get_task(tid)
            if task is not None:
                claims[tid] = Claim(task.state.name, task.report, task.error)
        return claims

    def _feed(self) -> None:
        """Queue tasks: all at once, or enough to keep ``wave`` unfinished."""
        want = self.plan.tasks
        if self.plan.wave:
            claims = self._claims()
            busy = sum(1 for c in claims.values() if c.state not in FINISHED)
            want = min(self.plan.tasks, self.submitted + max(0, self.plan.wave - busy))
        while self.submitted < want:
            tid = self.ids[self.submitted]
            submit(self.store, self.config, f"Chaos task {tid}: do the work.", task_id=tid)
            self.submitted += 1

    def _crashes(self) -> int:
        """Crashes the agents logged so far (their logs are read incrementally)."""
        for role in AGENTS:
            log = self.root / f"{role.lower()}.jsonl"
            if not log.exists():
                continue
            with log.open("rb") as fh:
                fh.seek(self._log_offsets.get(role, 0))
                data = fh.read()
            end = data.rfind(b"\n") + 1  # a line being written is read next time
            self._log_offsets[role] = self._log_offsets.get(role, 0) + end
            for line in data[:end].splitlines():
                if b'"event": "fault"' in line and b'"kind": "crash"' in line:
                    self._crash_count += 1
        return self._crash_count

    # ------------------------------------------------------------------ the run

    def run(self) -> ChaosResult:
        """Run the plan; always tears the session down; return the verdict."""
        start = time.monotonic()
        self.deadline = start + self.plan.budget
        try:
            # Its own routers are the ones it kills: no service routes beside them.
            self._run("up", "--no-primers", "--no-route")
            self._feed()
            self._cycles()
        finally:
            self.result.seconds = time.monotonic() - start
            down = self._poli("down")
            try:
                down.wait(30)
            except subprocess.TimeoutExpired:
                down.kill()
                down.wait()
            self._kill_server()
            claims = self._claims()
            self.store.close()
        logs = {role: self.root / f"{role.lower()}.jsonl" for role in AGENTS}
        specs = (self.plan.planner, self.plan.executer)
        stray = [str(s.faults.get("leave_text", "draft: half-typed note")) for s in specs]
        subs = [s for role, log in logs.items() for s in submissions(role, log, stray)]
        self.result.verdict = judge(
            subs, claims, expected_report=expected_report, faults=fault_counts(logs.values())
        )
        return self.result

    def _cycles(self) -> None:
        kills_left, server_kills_left = self.plan.router_kills, self.plan.server_kills
        recoveries = 0  # crashes and server kills already answered with `poli up --resume`
        while time.monotonic() < self.deadline:
            self._feed()
            claims = self._claims()
            if len(claims) == self.plan.tasks and all(c.state == DONE for c in claims.values()):
                return
            owed = self._crashes() + self.result.server_kills
            if recoveries < owed:  # an agent crashed or the server was killed
                recoveries = owed
                self.result.resumes += 1
                self._run("up", "--resume", "--no-route")
                continue
            if not any(c.state not in FINISHED for c in claims.values()):
                if len(claims) == self.plan.tasks:
                    return  # every task finished; the failed ones are the verdict's
                self.result.notes.append("tasks left to queue but none active")
                return
            kill_at = None
            if kills_left:
                kill_at = time.monotonic() + self.rng.uniform(*self.plan.kill_after)
            server_kill_at = None
            # Owed server kills come first when no router kill competes for this life.
            if server_kills_left and (kill_at is None or self.rng.random() < 0.5):
                server_kill_at = time.monotonic() + self.rng.uniform(*self.plan.kill_after)
            outcome = self._route_once(kill_at, server_kill_at)
            if outcome == "killed":
                kills_left -= 1
            elif outcome == "server":
                server_kills_left -= 1
        self.result.notes.append(f"budget of {self.plan.budget:g}s spent")

    def _route_once(self, kill_at: float | None, server_kill_at: float | None) -> str:
        """One life of the router(s); return how it ended: exited, killed, server or crash."""
        routers = [self._poli("route", "--until-idle")]
        if self.plan.two_routers:
            routers.append(self._poli("route", "--until-idle"))
        self.result.router_runs += len(routers)
        outcome = "exited"
        crashes = self._crashes()
        try:
            while alive := [r for r in routers if r.poll() is None]:
                now = time.monotonic()
                if now >= self.deadline:
                    break
                if kill_at is not None and now >= kill_at:
                    for proc in alive:
                        proc.send_signal(signal.SIGKILL)
                    self.result.router_kills += 1
                    outcome = "killed"
                    break
                if server_kill_at is not None and now >= server_kill_at:
                    self._kill_server()
                    self.result.server_kills += 1
                    outcome = "server"
                    break
                if self._crashes() > crashes:
                    # What a user does on "agent exited ... run `poli up --resume`":
                    # stop routing (Ctrl-C), resume, route again.
                    for proc in alive:
                        proc.send_signal(signal.SIGINT)
                    outcome = "crash"
                    break
                self._feed()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    alive[0].wait(0.2)
        finally:
            for proc in routers:
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    self.result.notes.append("a router did not exit within 30s and was killed")
        if outcome == "exited":
            failed = [r for r in routers if r.returncode != 0]
            if self.plan.two_routers:
                self.result.refused_routers += len(failed)
            elif failed:
                self.result.notes.append(f"router exited {failed[0].returncode}")
        return outcome
