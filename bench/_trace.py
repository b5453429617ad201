"""Where a handoff's time goes: stamps along the path from a printed block to the next prompt.

:class:`PathTrace` wraps the functions a P→E handoff passes through (the control client's
``%output`` reader and its round trips, the router's step, the look, the block scan, the
block's effects and their commit, the paste and the submit key) with ``time.time()`` stamps
and the routing thread's CPU time, for as long as it is entered. :func:`segments` cuts each
handoff (the Planner's ``reply``, then the Executer's ``prompt``, from the fake agents' own
logs) at the first stamp of each step and returns each step's median wall and CPU time.

The wrappers cost a few microseconds per call, so the benchmark measures its figures
without them and traces a separate, shorter run.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import functools
import statistics
import time
import typing as t

from politerm.driver.agent import AgentDriver
from politerm.driver.blocks import BlockReader
from politerm.engine.effects import BlockEffects
from politerm.engine.router import Router
from politerm.store import RunStore
from politerm.tmux.control import ControlClient
from politerm.tmux.pane import Pane

if t.TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from bench._common import Row

#: (step, the stamp that ends it), in path order; a step starts where the one before ended.
STEPS: tuple[tuple[str, str], ...] = (
    ("Planner's reply printed → its %output at the router", "%output PLANNER"),
    ("→ the Planner's routing step starts", ">step PLANNER"),
    ("→ screen looked at (one round trip) and read", "<observe PLANNER"),
    ("→ turn window read, blocks parsed", "<scan"),
    ("→ block's effects written, Executer's prompt begun", "<effects"),
    ("→ committed (no fsync)", "<commit"),
    ("→ the Executer's routing step starts", ">step EXECUTER"),
    ("→ paste staged and sent (load-buffer + paste-buffer)", ">tmux load-buffer"),
    ("→ tmux answered the paste", "<tmux load-buffer"),
    ("→ paste seen in the input box", ">keys EXECUTER"),
    ("→ Enter reached the Executer (its log)", "prompt EXECUTER"),
)


@dataclasses.dataclass
class PathTrace:
    """Stamps of one traced run (see the module docstring)."""

    stamps: list[tuple[float, str]] = dataclasses.field(default_factory=list)
    cpu: list[tuple[float, float]] = dataclasses.field(default_factory=list)
    #: When each traced handoff began (the Planner's reply with the plan block).
    starts: list[float] = dataclasses.field(default_factory=list)
    _panes: dict[str, str] = dataclasses.field(default_factory=dict)

    def mark(self, label: str) -> None:
        """Stamp ``label`` now (wall clock, and the thread's CPU time)."""
        now = time.time()
        self.stamps.append((now, label))
        self.cpu.append((now, time.thread_time()))

    def name_panes(self, panes: dict[str, str]) -> None:
        """Pane id → agent name, for the ``%output`` stamps."""
        self._panes.update(panes)

    def add_log(self, agent: str, events: Sequence[tuple[float, str]]) -> None:
        """Add an agent's own events (its log's ``ts`` and event name)."""
        self.stamps += [(ts, f"{event} {agent}") for ts, event in events]

    @contextlib.contextmanager
    def wrapped(self) -> Iterator[PathTrace]:
        """Wrap the path's functions while the block runs; put them back after."""
        saved: list[tuple[type, str, t.Any]] = []

        def patch(cls: type, name: str, make: Callable[[t.Any], t.Any]) -> None:
            owner = next(c for c in cls.__mro__ if name in c.__dict__)
            original = owner.__dict__[name]
            saved.append((owner, name, original))
            setattr(owner, name, functools.wraps(original)(make(original)))

        def around(label: Callable[..., str]) -> Callable[[t.Any], t.Any]:
            def make(fn: t.Any) -> t.Any:
                async def wrapper(*a: t.Any, **k: t.Any) -> t.Any:
                    what = label(*a, **k)
                    self.mark(f">{what}")
                    try:
                        return await fn(*a, **k)
                    finally:
                        self.mark(f"<{what}")

                return wrapper

            return make

        def around_sync(label: str) -> Callable[[t.Any], t.Any]:
            def make(fn: t.Any) -> t.Any:
                def wrapper(*a: t.Any, **k: t.Any) -> t.Any:
                    self.mark(f">{label}")
                    try:
                        return fn(*a, **k)
                    finally:
                        self.mark(f"<{label}")

                return wrapper

            return make

        def on_output(fn: t.Any) -> t.Any:
            def wrapper(client: ControlClient, line: bytes) -> None:
                pane = line.split(b" ", 2)[1].decode()
                self.mark(f"%output {self._panes.get(pane, pane)}")
                fn(client, line)

            return wrapper

        def batch(fn: t.Any) -> t.Any:
            @contextlib.contextmanager
            def wrapper(store: RunStore, **k: t.Any) -> Iterator[None]:
                outer = store._batch_depth == 0
                with fn(store, **k):
                    yield
                if outer:
                    self.mark("<commit")

            return wrapper

        patch(ControlClient, "_on_output", on_output)
        patch(ControlClient, "_raw_many", around(lambda _c, lines, **_k: f"tmux {lines[0]}"))
        patch(Router, "_step", around(lambda _r, d: f"step {d.name}"))
        patch(AgentDriver, "observe", around(lambda d, **_k: f"observe {d.name}"))
        patch(BlockReader, "scan", around_sync("scan"))
        patch(BlockEffects, "apply_block", around_sync("effects"))
        patch(RunStore, "batch", batch)
        patch(Pane, "send_keys", around(lambda p, *_k: f"keys {self._panes.get(p.pane_id)}"))
        try:
            yield self
        finally:
            for owner, name, original in reversed(saved):
                setattr(owner, name, original)

    def segments(self, starts: Sequence[float]) -> list[Row]:
        """Median wall and routing-CPU time of each step, over the handoffs from ``starts``."""
        stamps = sorted(self.stamps)
        times = [s[0] for s in stamps]
        cpu_at = [c[0] for c in self.cpu]

        def cpu(ts: float) -> float:
            i = bisect.bisect_right(cpu_at, ts) - 1
            return self.cpu[i][1] if i >= 0 else 0.0

        walls: list[list[float]] = [[] for _ in STEPS]
        cpus: list[list[float]] = [[] for _ in STEPS]
        for start in starts:
            i, prev, row = bisect.bisect_left(times, start), start, []
            for _, end in STEPS:
                while i < len(stamps) and not stamps[i][1].startswith(end):
                    i += 1
                if i == len(stamps) or stamps[i][0] - start > 1.0:
                    break
                row.append(((stamps[i][0] - prev) * 1000, (cpu(stamps[i][0]) - cpu(prev)) * 1000))
                prev = stamps[i][0]
            if len(row) == len(STEPS):
                for k, (wall, used) in enumerate(row):
                    walls[k].append(wall)
                    cpus[k].append(used)
        rows: list[Row] = []
        total = 0.0
        for (step, _), w, c in zip(STEPS, walls, cpus, strict=True):
            if not w:
                continue
            total += statistics.median(w)
            rows.append(
                {
                    "step (P→E)": step,
                    "n": len(w),
                    "p50 ms": statistics.median(w),
                    "router CPU p50 ms": statistics.median(c),
                    "sum of p50s ms": total,
                }
            )
        return rows
