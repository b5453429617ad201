"""Many Planner⇄Executer pairs over three machines, for the fleet's fault runs (issue 22).

Each pair is a fleet project of its own: its router on the desk (the machine where the user
types ``poli task``), its EXECUTER in a pool of two of the machines a, b and c, so that
when one machine dies, is cut off or starves, every agent it hosted has somewhere else to
go; the PLANNER of the first half of the pairs in the same pool, of the others on the desk
(pinned there: the router drives it itself, its plans go to the pool through the queue).
A machine is every ``poli node`` process it runs (one per pair it serves), in its own
network namespace when the test could make one (tests/fleet/netns.py). What each agent
was handed is read from its own log; what each node typed under which lease, from its
journal of turns.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import os
import signal
import threading
import typing as t

from politerm.config import load_config
from politerm.engine.fleetlink import open_queue
from politerm.engine.loop import submit
from politerm.store import RunStore
from politerm.store.models import TERMINAL_TASK_STATES
from tests.fleet.nodes import FleetNode, make_fleet

if t.TYPE_CHECKING:
    import pathlib
    from collections.abc import Sequence

    from politerm.config import Config
    from politerm.fleet import WorkQueue
    from politerm.store.journal import JournalRow
    from tests.fleet.netns import FleetNet
    from tests.fleet.redisserver import RedisServer

DESK = "desk"
MACHINES = ("a", "b", "c")
AGENTS = ("PLANNER", "EXECUTER")
PROMPT = b'"event": "prompt"'


@dataclasses.dataclass
class Pair:
    """One project: a router on the desk, its agents (some or all) pooled on two machines."""

    index: int
    machines: tuple[str, str]
    pooled: tuple[str, ...]
    """The agents placed on the machines (turns through the queue)."""
    nodes: dict[str, FleetNode]
    config: Config
    store: RunStore
    quota: int
    window: int
    submitted: int = 0

    @property
    def desk(self) -> FleetNode:
        """Where the router runs and the tasks are given."""
        return self.nodes[DESK]

    def active(self) -> int:
        """Tasks given and not ended yet."""
        return len(self.store.list_tasks(active_only=True))

    def feed(self) -> None:
        """Give tasks until ``window`` are in flight (as ``poli task --no-wait`` does)."""
        room = self.window - self.active()
        while room > 0 and self.submitted < self.quota:
            tid = f"P{self.index}-T{self.submitted}"
            submit(self.store, self.config, f"make hello {tid}", task_id=tid)
            self.submitted += 1
            room -= 1

    def ended(self) -> bool:
        """Every task given, and none still going."""
        return self.submitted >= self.quota and self.active() == 0

    def queue(self) -> WorkQueue:
        """The pair's work queue (as its router sees it)."""
        return open_queue(self.config)

    def rows(self, machine: str) -> list[JournalRow]:
        """What the machine's node typed for this pair, under which lease."""
        with self.nodes[machine].store() as store:
            return store.journal_leased(100_000)


@dataclasses.dataclass
class Machine:
    """One simulated machine: the ``poli node`` of every pair it serves."""

    name: str
    nodes: list[FleetNode]

    def kill(self) -> None:
        """``kill -9`` every node process (its agents live on in their tmux servers)."""
        for node in self.nodes:
            node.kill_node()

    def start(self) -> None:
        """Start every node process (again)."""
        for node in self.nodes:
            node.start_node()

    def pause(self) -> None:
        """SIGSTOP every node process."""
        for node in self.nodes:
            node.pause_node()

    def resume(self) -> None:
        """SIGCONT every node process."""
        for node in self.nodes:
            node.resume_node()

    def pids(self) -> list[int]:
        """Its node processes and the agents they started (from the agents' logs)."""
        out = [n.proc.pid for n in self.nodes if n.proc is not None and n.proc.poll() is None]
        for node in self.nodes:
            for agent in AGENTS:
                starts = [e for e in node.events(agent) if e["event"] == "start"]
                if starts:
                    out.append(int(starts[-1]["pid"]))
        return out


class Starver:
    """A CPU-starved machine: its processes stopped ``off`` s of every ``off + on`` s.

    Each pause is far shorter than a lease: a starved node is slow, not gone.
    """

    def __init__(self, machine: Machine, off: float = 0.3, on: float = 0.5) -> None:
        self.machine, self.off, self.on = machine, off, on
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"starve-{machine.name}")

    def __enter__(self) -> t.Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(30)

    def _signal(self, pids: Sequence[int], sig: signal.Signals) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def _run(self) -> None:
        while not self.done.is_set():
            pids = self.machine.pids()
            self._signal(pids, signal.SIGSTOP)
            try:
                self.done.wait(self.off)  # the pacing of the load, not a wait for anything
            finally:
                self._signal(pids, signal.SIGCONT)
            self.done.wait(self.on)


def _pools(index: int) -> tuple[str, str]:
    """Pair ``index``'s two machines: a,b / b,c / c,a in turn."""
    return MACHINES[index % 3], MACHINES[(index + 1) % 3]


@dataclasses.dataclass
class Fleet:
    """Every pair and machine of one run."""

    pairs: list[Pair]
    machines: dict[str, Machine]

    def handed(self) -> int:
        """Prompts the agents were handed so far, everywhere (their logs, counted cheaply)."""
        total = 0
        for pair in self.pairs:
            for node in pair.nodes.values():
                for agent in AGENTS:
                    path = node.root / f"{agent.lower()}.jsonl"
                    if path.exists():
                        total += path.read_bytes().count(PROMPT)
        return total

    def feed(self) -> bool:
        """Give each pair its next tasks; True once every task of every pair ended."""
        for pair in self.pairs:
            pair.feed()
        return all(pair.ended() for pair in self.pairs)

    def close(self) -> None:
        """Stop every node; ``poli down`` on the desk, the machines' tmux servers killed.

        In parallel: each ``poli down`` is a process of about 2 s of CPU, and the machines'
        node processes are no services (nothing for ``poli down`` to stop there).
        """
        nodes = [node for machine in self.machines.values() for node in machine.nodes]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(FleetNode.stop_node, nodes))
            downs = [pool.submit(pair.desk.poli, "down") for pair in self.pairs]
            list(pool.map(FleetNode.kill_tmux, nodes))
            for down in downs:
                down.result()
        for pair in self.pairs:
            pair.store.close()


def make_pairs(
    tmp: pathlib.Path,
    redis: RedisServer,
    net: FleetNet,
    *,
    pairs: int,
    tasks: int,
    window: int,
    lease: float,
    planner: str,
    executer: str,
    one_machine: bool = False,
) -> Fleet:
    """``pairs`` projects, ``tasks`` tasks shared out, the desk's routers up, nodes started.

    ``one_machine``: every agent pinned to the desk instead, its router driving them all
    (the same pairs without the fleet's queue in their turns: a benchmark's baseline).
    """
    made: list[Pair] = []
    machines = {name: Machine(name, []) for name in MACHINES}
    for index in range(pairs):
        pool = _pools(index)
        planner_at: tuple[str, ...] = pool if index < pairs // 2 else (DESK,)
        executer_at: tuple[str, ...] = pool
        if one_machine:
            planner_at = executer_at = (DESK,)
        nodes = make_fleet(
            tmp / f"pair{index}",
            redis,
            [DESK, *pool],
            planner_nodes=planner_at,
            executer_nodes=executer_at,
            planner=planner,
            executer=executer,
            lease=lease,
            timeout=60,
            net=net,
        )
        config = load_config(nodes[DESK].root, env={"POLI_FLEET_NODE": DESK})
        store = RunStore.open(config.store.resolved_path())
        quota = tasks // pairs + (1 if index < tasks % pairs else 0)
        placed = zip(AGENTS, (planner_at, executer_at), strict=True)
        pooled = tuple(agent for agent, at in placed if at == pool)
        made.append(Pair(index, pool, pooled, nodes, config, store, quota, window))
        for name in pool if pooled else ():
            machines[name].nodes.append(nodes[name])
    fleet = Fleet(made, machines)
    for machine in machines.values():
        machine.start()

    def up(pair: Pair) -> str:
        done = pair.desk.poli("up")
        return "" if done.returncode == 0 else f"pair {pair.index}: {done.stdout}{done.stderr}"

    with concurrent.futures.ThreadPoolExecutor(4) as pool_:
        failed = [why for why in pool_.map(up, made) if why]
    if failed:
        fleet.close()
        raise AssertionError("poli up on the desk failed: " + "\n".join(failed))
    return fleet


def terminal(state: str) -> bool:
    """A task state nothing follows."""
    return state in {s.value for s in TERMINAL_TASK_STATES}
