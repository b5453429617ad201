"""Fleet nodes simulated on one machine: each node its own directory, HOME, tmux socket and store.

A node's directory holds its poli.toml (the same project: the same ``[fleet]`` table, the
agents placed by ``node``/``nodes``), the fake agents' scenarios and their logs — the ground
truth of what each agent was handed. ``poli node --foreground`` runs as a process of its
own, which a test can ``kill -9`` or stop (SIGSTOP) like a machine that died or was cut off.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import pathlib
import secrets
import signal
import subprocess
import sys
import typing as t

import pytest

from politerm.config import load_config
from politerm.store import RunStore
from politerm.testing.fakeagent.eventlog import read_log
from politerm.testing.retry import retry_until
from tests.loophelpers import EXECUTER_OK, PLANNER_OK, write_project

PLAN_HEAD = "You received a PLANNER plan block:"
"""How the loop's prompt to EXECUTER with PLANNER's plan begins."""

if t.TYPE_CHECKING:
    from tests.fleet.netns import FleetNet
    from tests.fleet.redisserver import RedisServer


@dataclasses.dataclass
class FleetNode:
    """One simulated machine of the fleet."""

    name: str
    root: pathlib.Path
    socket: str
    env: dict[str, str]
    proc: subprocess.Popen[str] | None = None
    netns: str | None = None
    """The machine's network namespace (tests/fleet/netns.py); None: the host's."""

    def argv(self, *args: str) -> list[str]:
        """``poli ARGS`` as this node runs it (inside its namespace, if it has one)."""
        inside = ["ip", "netns", "exec", self.netns] if self.netns else []
        return [*inside, sys.executable, "-m", "politerm", *args]

    def poli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run ``poli ARGS`` on this node (bounded: a hang fails with its Python stacks)."""
        argv = self.argv(*args)
        proc = subprocess.Popen(
            argv,
            cwd=self.root,
            env={**self.env, "PYTHONFAULTHANDLER": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
            out, err = proc.communicate(timeout=30)
            pytest.fail(f"poli {' '.join(args)} on node {self.name} hung {timeout:g}s:\n{err}")
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)

    def start(self, *args: str) -> subprocess.Popen[str]:
        """Start ``poli ARGS`` on this node without waiting (its output on a pipe)."""
        return subprocess.Popen(
            self.argv(*args),
            cwd=self.root,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def start_node(self) -> None:
        """``poli node --foreground`` as a process of its own (its output in node.log)."""
        log = (self.root / "node.log").open("a")
        # `ip netns exec` execs the command: the pid is the node's own.
        self.proc = subprocess.Popen(
            self.argv("node", "--foreground"),
            cwd=self.root,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        log.close()

    def kill_node(self) -> None:
        """``kill -9`` the node process (its agents live on in its tmux server)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def pause_node(self) -> None:
        """Stop the node process (SIGSTOP): cut off from Redis and its agents, as in a partition."""
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGSTOP)

    def resume_node(self) -> None:
        """Let a paused node run again."""
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGCONT)

    def stop_node(self) -> None:
        """End the node process (SIGCONT first, in case a test paused it)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self.kill_node()

    def kill_tmux(self) -> None:
        """Kill this node's tmux server (its agents with it), without ``poli down``."""
        subprocess.run(
            ["tmux", "-L", self.socket, "kill-server"],
            env=self.env,
            capture_output=True,
            check=False,
            timeout=30,
        )

    def events(self, agent: str) -> list[dict[str, t.Any]]:
        """Everything ``agent`` on this node logged itself (none if it never ran here)."""
        path = self.root / f"{agent.lower()}.jsonl"
        return read_log(path) if path.exists() else []

    def paused(self, task_id: str) -> str | None:
        """Why ``poli status --json`` here says ``task_id`` waits for the fleet's budget."""
        shown = self.poli("status", "--json")
        assert shown.returncode == 0, shown.stderr
        tasks = json.loads(shown.stdout)["tasks"]
        return next((tk["paused"] for tk in tasks if tk["id"] == task_id), None)

    def shows_paused(self, task_id: str, reason: str) -> None:
        """Wait until ``poli status`` here shows ``task_id`` paused by the fleet's budget
        for ``reason`` (the breaker's words), in JSON and in the plain view."""
        said = retry_until(
            lambda: self.paused(task_id), 90, what=f"poli status to show {task_id} paused"
        )
        assert reason in said
        assert "paused by the fleet's budget" in self.poli("status").stdout

    def prompts(self, agent: str) -> list[str]:
        """What ``agent`` on this node was handed, from its own log."""
        return [e["text"] for e in self.events(agent) if e["event"] == "prompt"]

    def plans(self) -> list[str]:
        """The plans this node's EXECUTER was handed (the loop's prompt for a plan block)."""
        return [p for p in self.prompts("EXECUTER") if p.startswith(PLAN_HEAD)]

    def store(self) -> RunStore:
        """This node's run store (the journal of turns of what it typed)."""
        config = load_config(self.root, env={})
        return RunStore.open(config.store.resolved_path())

    def log(self) -> str:
        """The node process's output so far (for assertion messages)."""
        path = self.root / "node.log"
        return path.read_text() if path.exists() else ""


def start_task(
    a: FleetNode, workers: t.Iterable[FleetNode], *, timeout: int
) -> subprocess.Popen[str]:
    """Start the ``workers``' nodes, bring node ``a`` up and start task T-1 there."""
    for node in workers:
        node.start_node()
    up = a.poli("up")
    assert up.returncode == 0, up.stdout + up.stderr
    return a.start("task", "make hello", "--id", "T-1", "--timeout", str(timeout))


def finished(task: subprocess.Popen[str], *logs: FleetNode, timeout: float = 150) -> str:
    """Task T-1's output, once it ended with its final report (else the nodes' ``logs``)."""
    out, _ = task.communicate(timeout=timeout)
    assert task.returncode == 0, out + "".join(node.log() for node in logs)
    assert "final report (T-1)" in out
    return out


def slow_executer(seconds: float) -> str:
    """EXECUTER's usual scenario, thinking ``seconds`` over each prompt."""
    return EXECUTER_OK.replace("think_time = 0.3", f"think_time = {seconds}")


def make_fleet(
    tmp: pathlib.Path,
    redis: RedisServer,
    names: t.Sequence[str],
    *,
    planner_nodes: t.Sequence[str] = ("a",),
    executer_nodes: t.Sequence[str] = ("b",),
    planner: str = PLANNER_OK,
    executer: str = EXECUTER_OK,
    lease: float = 4.0,
    timeout: float = 60.0,
    extra: str = "",
    transcripts: bool = False,
    net: FleetNet | None = None,
    scenarios: t.Mapping[str, tuple[str, str]] | None = None,
) -> dict[str, FleetNode]:
    """One directory per node, each with the same project's poli.toml and its own socket.

    ``transcripts``: the fake agents keep a transcript (with each reply's usage) where
    their profiles look, as the real CLIs do. ``net``: the nodes it names run in their
    namespaces and reach Redis over their links. ``scenarios``: a node's own (planner,
    executer) scenarios, e.g. a slow machine's.
    """
    tag = secrets.token_hex(3)
    nodes: dict[str, FleetNode] = {}

    def fleet(name: str) -> str:
        url = redis.url_at(net.redis_host(name)) if net is not None else redis.url
        return (
            f'[fleet]\nurl = "{url}"\nproject = "ft{tag}"\nlease = {lease}\nmargin = 1\n'
            "heartbeat = 1\ntimeout = 3\n"
        )

    def placed(agent_nodes: t.Sequence[str]) -> str:
        if not agent_nodes:
            return ""  # no placement: it runs where the router runs
        if len(agent_nodes) == 1:
            return f'node = "{agent_nodes[0]}"\n'
        return "nodes = [" + ", ".join(f'"{n}"' for n in agent_nodes) + "]\n"

    for name in names:
        root = tmp / name
        socket = f"poli-ft{tag}{name}"
        own = (scenarios or {}).get(name, (planner, executer))
        path = write_project(
            root,
            socket,
            planner=own[0],
            executer=own[1],
            plan_timeout=timeout,
            exec_timeout=timeout,
            extra=fleet(name) + extra,
            transcripts=transcripts,
        )
        text = path.read_text()
        text = text.replace("[agents.PLANNER]\n", "[agents.PLANNER]\n" + placed(planner_nodes))
        text = text.replace("[agents.EXECUTER]\n", "[agents.EXECUTER]\n" + placed(executer_nodes))
        path.write_text(text)
        home = root / "home"
        home.mkdir()
        env = {
            **os.environ,
            "HOME": str(home),
            "XDG_STATE_HOME": str(home / ".local" / "state"),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "POLI_FLEET_NODE": name,
            "COLUMNS": "200",
            "PYTHONUNBUFFERED": "1",
        }
        nodes[name] = FleetNode(name, root, socket, env, netns=net.netns(name) if net else None)
    return nodes


def tear_down(nodes: t.Mapping[str, FleetNode]) -> None:
    """Stop every node process, then ``poli down`` on each node (agents, sessions, services)."""
    # Each machine's in parallel: every `poli down` is a process of its own (about 2 s).
    with concurrent.futures.ThreadPoolExecutor(len(nodes) or 1) as pool:
        list(pool.map(FleetNode.stop_node, nodes.values()))
        list(pool.map(lambda node: node.poli("down"), nodes.values()))
