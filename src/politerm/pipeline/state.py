"""The state of a pipeline run: in the run store and in ``.poli/state.<run id>``.

The store holds the whole record as JSON under the meta key ``pipeline.run:<run id>`` and the
run's timeline as events (``data.run`` is the run id). The state file holds what a person (or
a shell script) wants to read: ``key=value`` lines with ``pipeline``, ``session``,
``started``, ``run_id``, ``current_step`` and ``step_N=done|running|failed|skipped``. Both are
written together, each atomically, before the runner acts on a decision.

A question to a person (a gate, a failed step, a merge conflict) is the meta key
``pipeline.gate:<run id>``: the runner writes it with no answer; the control window or
``poli gate`` writes the answer; the runner reads it.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import pathlib
import secrets
import time
import typing as t

from politerm._internal.private import write_private
from politerm.errors import PipelineError
from politerm.pipeline.agents import PROJECT_DIR
from politerm.pipeline.model import RunStatus, StepStatus

if t.TYPE_CHECKING:
    from politerm.store import RunStore

RUN_KEY = "pipeline.run:"
GATE_KEY = "pipeline.gate:"
ANSWERS = ("y", "n", "r", "s")


def new_run_id() -> str:
    """A UTC timestamp plus a short random suffix, e.g. ``20250101T120000Z-3fa9``."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{secrets.token_hex(2)}"


def session_name(project: pathlib.Path, run_id: str) -> str:
    """``poli-<project basename>-<run id>``, with characters tmux refuses replaced.

    Examples
    --------
    >>> import pathlib
    >>> session_name(pathlib.Path("/src/my.app"), "20250101T000000Z-ab12")
    'poli-my-app-20250101T000000Z-ab12'
    """
    base = "".join(c if c.isalnum() or c in "-_" else "-" for c in project.name) or "project"
    return f"poli-{base}-{run_id}"


def poli_dir(project: pathlib.Path) -> pathlib.Path:
    """``<project>/.poli``."""
    return project / PROJECT_DIR


def state_path(project: pathlib.Path, run_id: str) -> pathlib.Path:
    """``<project>/.poli/state.<run id>``."""
    return poli_dir(project) / f"state.{run_id}"


def steps_dir(project: pathlib.Path, run_id: str) -> pathlib.Path:
    """``<project>/.poli/steps/<run id>``: prompts, exit codes and logs of the steps."""
    return poli_dir(project) / "steps" / run_id


@dataclasses.dataclass
class StepRecord:
    """What a run knows about one step."""

    status: StepStatus = StepStatus.PENDING
    attempt: int = 0
    nonce: str | None = None
    start_line: int = -1
    started: float | None = None
    finished: float | None = None
    error: str | None = None
    cwd: str | None = None
    approved: bool = False
    report: str | None = None
    turn_id: int | None = None
    """The attempt's prompt in the journal of turns (:mod:`politerm.store.journal`)."""

    def as_dict(self) -> dict[str, t.Any]:
        """JSON-ready."""
        data = dataclasses.asdict(self)
        data["status"] = self.status.value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, t.Any]) -> StepRecord:
        """The inverse of :meth:`as_dict`."""
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        values["status"] = StepStatus(values.get("status", "pending"))
        return cls(**values)


@dataclasses.dataclass
class RunRecord:
    """Everything needed to show, resume or abort one run."""

    run_id: str
    pipeline: str
    pipeline_name: str
    project: str
    task: str
    session: str
    socket: str
    cli: str
    headless: bool = False
    unsafe: bool = False
    worktrees: bool = False
    on_fail: str = "ask"
    #: ``--cli`` given: it overrides every step's CLI column, as ``meta run --cli`` does.
    cli_override: bool = False
    #: ``--auto-approve``: gates are approved without asking.
    auto_approve: bool = False
    #: ``--agents DIR`` directories, searched first for agent definitions.
    agents: list[str] = dataclasses.field(default_factory=list)
    #: Where the handoff files are ("" = ``.handoff.md`` in the project).
    handoff_dir: str = ""
    started: float = dataclasses.field(default_factory=time.time)
    status: RunStatus = RunStatus.RUNNING
    current_step: int = 0
    pid: int | None = None
    error: str | None = None
    merged: list[str] = dataclasses.field(default_factory=list)
    steps: dict[int, StepRecord] = dataclasses.field(default_factory=dict)

    def step(self, num: int) -> StepRecord:
        """The record of step ``num`` (created pending on first use)."""
        return self.steps.setdefault(num, StepRecord())

    def as_dict(self) -> dict[str, t.Any]:
        """JSON-ready."""
        data = dataclasses.asdict(self)
        data["status"] = self.status.value
        data["steps"] = {str(n): s.as_dict() for n, s in sorted(self.steps.items())}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, t.Any]) -> RunRecord:
        """The inverse of :meth:`as_dict`."""
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        values["status"] = RunStatus(values.get("status", "running"))
        values["steps"] = {
            int(n): StepRecord.from_dict(s) for n, s in dict(values.get("steps", {})).items()
        }
        return cls(**values)

    def state_lines(self) -> str:
        """The state file's text."""
        started = datetime.datetime.fromtimestamp(self.started, datetime.UTC).isoformat()
        lines = [
            f"pipeline={self.pipeline}",
            f"session={self.session}",
            f"started={started}",
            f"run_id={self.run_id}",
            f"current_step={self.current_step}",
            f"status={self.status.value}",
            f"project={self.project}",
            f"socket={self.socket}",
        ]
        lines += [f"step_{n}={s.status.value}" for n, s in sorted(self.steps.items())]
        return "\n".join(lines) + "\n"


def read_state_file(path: pathlib.Path) -> dict[str, str]:
    r"""The ``key=value`` lines of a state file.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "state.x"
    >>> _ = p.write_text("run_id=x\nstep_1=done\n")
    >>> read_state_file(p)
    {'run_id': 'x', 'step_1': 'done'}
    >>> _ = p.write_bytes(b"run_id=\xff")
    >>> read_state_file(p)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    politerm.errors.PipelineError: ...state.x: not a pipeline state file (not valid UTF-8 at byte 7)
    """
    out: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        msg = f"{path}: not a pipeline state file (not valid UTF-8 at byte {exc.start})"
        raise PipelineError(msg) from None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


class RunState:
    """A run's record, saved to the store and the state file together.

    Parameters
    ----------
    store
        The run store.
    record
        The run.
    """

    def __init__(self, store: RunStore, record: RunRecord) -> None:
        self.store = store
        self.record = record

    @property
    def project(self) -> pathlib.Path:
        """The project directory."""
        return pathlib.Path(self.record.project)

    @property
    def run_id(self) -> str:
        """The run id."""
        return self.record.run_id

    @property
    def state_file(self) -> pathlib.Path:
        """``.poli/state.<run id>``."""
        return state_path(self.project, self.run_id)

    @property
    def steps_dir(self) -> pathlib.Path:
        """``.poli/steps/<run id>``."""
        return steps_dir(self.project, self.run_id)

    def save(self, *, file: bool = True) -> None:
        """Write the record to the store and (unless told not to) the state file."""
        self.store.set_meta(RUN_KEY + self.run_id, json.dumps(self.record.as_dict()))
        if file:
            write_private(self.state_file, self.record.state_lines())

    def event(self, kind: str, detail: str, *, step: int | None = None) -> None:
        """Add a timeline entry for this run."""
        agent = f"step-{step}" if step is not None else None
        self.store.add_event(kind, agent=agent, detail=detail, data={"run": self.run_id})

    def set_step(self, num: int, status: StepStatus, **changes: t.Any) -> StepRecord:
        """Change step ``num`` and save."""
        rec = self.record.step(num)
        rec.status = status
        for key, value in changes.items():
            setattr(rec, key, value)
        self.save()
        return rec

    @classmethod
    def load(cls, store: RunStore, run_id: str) -> RunState:
        """The run ``run_id`` from the store.

        Raises
        ------
        PipelineError
            When the store has no such run.
        """
        raw = store.get_meta(RUN_KEY + run_id)
        if not raw:
            msg = f"no pipeline run {run_id!r} in the run store {store.path}"
            raise PipelineError(msg)
        return cls(store, RunRecord.from_dict(json.loads(raw)))

    # --- questions to a person ----------------------------------------------------------

    def ask(self, step: int, kind: str, question: str) -> int:
        """Post a question; return its sequence number."""
        current = self.question()
        seq = (current["seq"] if current else 0) + 1
        data = {
            "seq": seq,
            "step": step,
            "kind": kind,
            "question": question,
            "answer": None,
            "asked": time.time(),
        }
        self.store.set_meta(GATE_KEY + self.run_id, json.dumps(data))
        self.event("gate", question, step=step)
        return seq

    def question(self) -> dict[str, t.Any] | None:
        """The last question posted (answered or not)."""
        return read_question(self.store, self.run_id)

    def clear_question(self) -> None:
        """Mark the current question as closed (so nobody answers it any more)."""
        current = self.question()
        if current is not None and current.get("answer") is None:
            current["answer"] = "-"
            self.store.set_meta(GATE_KEY + self.run_id, json.dumps(current))


def read_question(store: RunStore, run_id: str) -> dict[str, t.Any] | None:
    """The last question of run ``run_id``, or None."""
    raw = store.get_meta(GATE_KEY + run_id)
    if not raw:
        return None
    data = json.loads(raw)
    return data if isinstance(data, dict) else None


def answer_question(store: RunStore, run_id: str, answer: str, *, by: str) -> dict[str, t.Any]:
    """Answer the open question of run ``run_id`` with y, n, r or s.

    Raises
    ------
    PipelineError
        When the answer is not one of y/n/r/s or no question is waiting.
    """
    answer = answer.strip().lower()
    if answer not in ANSWERS:
        msg = f"answer must be one of y, n, r, s; got {answer!r}"
        raise PipelineError(msg)
    current = read_question(store, run_id)
    if current is None or current.get("answer") is not None:
        msg = f"run {run_id} is not waiting for an answer"
        raise PipelineError(msg)
    current["answer"] = answer
    current["by"] = by
    store.set_meta(GATE_KEY + run_id, json.dumps(current))
    store.add_event(
        "gate-answer",
        agent=f"step-{current['step']}",
        detail=f"{answer} (from {by})",
        data={"run": run_id},
    )
    return current


def project_runs(project: pathlib.Path) -> list[dict[str, str]]:
    """The state files of ``project``, oldest run first."""
    directory = poli_dir(project)
    if not directory.is_dir():
        return []
    runs = []
    for path in directory.glob("state.*"):
        if path.name.endswith(".tmp"):
            continue
        try:
            runs.append(read_state_file(path))
        except OSError:
            continue
    return sorted(runs, key=lambda r: (r.get("started", ""), r.get("run_id", "")))


def latest_run_id(project: pathlib.Path) -> str:
    """The newest run of ``project``.

    Raises
    ------
    PipelineError
        When the project has no runs.
    """
    runs = project_runs(project)
    if not runs or "run_id" not in runs[-1]:
        msg = f"no pipeline runs in {poli_dir(project)}"
        raise PipelineError(msg)
    return runs[-1]["run_id"]
