"""The parsed form of a ``.pipeline`` file: a :class:`Pipeline` of :class:`Step` rows."""

from __future__ import annotations

import dataclasses
import enum
import typing as t

if t.TYPE_CHECKING:
    import pathlib


class Gate(str, enum.Enum):
    """What happens after a step: go on (``auto``) or ask a person (``gate``)."""

    AUTO = "auto"
    GATE = "gate"


class StepStatus(str, enum.Enum):
    """Where one step of a run is; the values are what the state file holds."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"


class RunStatus(str, enum.Enum):
    """Where a whole run is."""

    RUNNING = "running"
    WAITING = "waiting"
    INTERRUPTED = "interrupted"
    DONE = "done"
    FAILED = "failed"
    ABORTED = "aborted"


FINISHED_RUN = frozenset({RunStatus.DONE, RunStatus.FAILED, RunStatus.ABORTED})


@dataclasses.dataclass(frozen=True)
class Step:
    """One row of a pipeline.

    Attributes
    ----------
    num
        The step number (1-based, unique, consecutive after includes).
    agent
        The agent definition whose role text starts the prompt (``agents/<agent>.md``).
    cli
        The agent CLI (a profile name); None means the run's ``--cli``.
    gate
        Ask a person after the step.
    group
        Steps sharing a parallel group run at the same time; None runs alone.
    timeout_min
        Minutes the step may take; None means the pipeline default.
    prompt
        The step's task, literal pipes unescaped.
    source, line
        Where the row was written (an included ``.steps`` file keeps its own path).
    """

    num: int
    agent: str
    cli: str | None
    gate: Gate
    group: str | None
    timeout_min: float | None
    prompt: str
    source: str = ""
    line: int = 0

    @property
    def window(self) -> str:
        """The tmux window name of the step, ``step-N-<agent>``."""
        return f"step-{self.num}-{self.agent}"


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """A whole pipeline: header values and steps in number order."""

    name: str
    description: str
    timeout_min: float
    steps: tuple[Step, ...]
    path: pathlib.Path | None = None

    def step(self, num: int) -> Step:
        """The step numbered ``num``."""
        for step in self.steps:
            if step.num == num:
                return step
        msg = f"pipeline {self.name!r} has no step {num}"
        raise KeyError(msg)

    def timeout_of(self, step: Step) -> float:
        """Seconds step ``step`` may take."""
        minutes = step.timeout_min if step.timeout_min is not None else self.timeout_min
        return minutes * 60.0

    def stages(self) -> list[tuple[Step, ...]]:
        """Steps grouped as they run: a parallel group is one stage, any other step its own.

        Examples
        --------
        >>> s = [Step(n, "a", None, Gate.AUTO, g, None, "p") for n, g in
        ...      [(1, None), (2, "dev"), (3, "dev"), (4, None)]]
        >>> [[x.num for x in st] for st in Pipeline("x", "", 1, tuple(s)).stages()]
        [[1], [2, 3], [4]]
        """
        out: list[tuple[Step, ...]] = []
        for step in self.steps:
            if step.group is not None and out and out[-1][0].group == step.group:
                out[-1] = (*out[-1], step)
            else:
                out.append((step,))
        return out

    def as_dict(self) -> dict[str, t.Any]:
        """Plain data for ``poli pipeline show --json``."""
        return {
            "name": self.name,
            "description": self.description,
            "timeout_min": self.timeout_min,
            "path": str(self.path) if self.path else None,
            "steps": [
                {
                    "num": s.num,
                    "agent": s.agent,
                    "cli": s.cli,
                    "gate": s.gate.value,
                    "group": s.group,
                    "timeout_min": s.timeout_min,
                    "prompt": s.prompt,
                    "source": s.source,
                    "line": s.line,
                }
                for s in self.steps
            ],
        }
