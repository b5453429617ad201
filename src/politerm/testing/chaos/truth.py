"""Ground truth of a chaos run, read from the fake agents' own logs (never politerm's store).

Every prompt an agent submitted is classified by the template it starts with and the
``TASK_ID=`` it carries. From those the judge counts, per task:

- **lost**: a handoff (task → PLANNER, plan → EXECUTER, result → PLANNER) that no agent
  ever answered, or a task politerm did not finish DONE;
- **duplicated**: a handoff submitted again to an agent that already answered it, or
  twice to one agent process;
- **merged**: a submitted prompt that is not exactly one politerm prompt (two prompts in
  one, text left in the input box submitted with or without a prompt);
- **false DONE**: a task politerm calls DONE whose chain the agents never completed, or
  whose report is not the final block the PLANNER printed for it.
"""

from __future__ import annotations

import collections
import dataclasses
import re
import typing as t

from politerm.testing.fakeagent.eventlog import read_log

if t.TYPE_CHECKING:
    import pathlib

# What each politerm prompt starts with (engine/templates.py's default templates).
HEADS: dict[str, re.Pattern[str]] = {
    "task": re.compile(r"\ATASK_ID="),
    "plan": re.compile(r"\AYou received a PLANNER plan block:"),
    "result": re.compile(r"\AEXECUTER replied:"),
    "nudge": re.compile(r"\AIf finished, emit the tagged block now\."),
    "retry": re.compile(r"\ANo tagged block has arrived for task "),
}
# The handoffs of one round of a task, and the agent each goes to.
HANDOFFS: tuple[tuple[str, str], ...] = (
    ("task", "PLANNER"),
    ("plan", "EXECUTER"),
    ("result", "PLANNER"),
)
_TASK_ID = re.compile(r"TASK_ID=([^\s()]+)")


@dataclasses.dataclass(frozen=True)
class Submission:
    """One prompt an agent submitted, as its log recorded it."""

    agent: str
    life: int  # 0 for the first process on this log, 1 after one restart, ...
    n: int
    kind: str | None  # a HEADS key, or None when the text starts like no politerm prompt
    task_id: str | None
    text: str
    answered: bool  # the agent logged a reply to it
    merged: str | None  # why this is not exactly one politerm prompt, or None


def classify(text: str, stray: t.Sequence[str] = ()) -> tuple[str | None, str | None, str | None]:
    r"""``(kind, task_id, merged reason)`` of one submitted prompt.

    Examples
    --------
    >>> classify("TASK_ID=T1\nUser request:\nx (nonce=ab)")
    ('task', 'T1', None)
    >>> classify("draft TASK_ID=T1\nUser request:", stray=["draft"])[2]
    'starts like no politerm prompt'
    >>> classify("EXECUTER replied:\nTASK_ID=T1\nTASK_ID=T2")[2]
    'holds 2 TASK_IDs'
    """
    kind = next((k for k, head in HEADS.items() if head.match(text)), None)
    ids = _TASK_ID.findall(text)
    task_id = ids[0] if ids else None
    if kind is None:
        return None, task_id, "starts like no politerm prompt"
    if len(ids) != 1:
        return kind, task_id, f"holds {len(ids)} TASK_IDs"
    for piece in stray:
        if piece in text:
            return kind, task_id, f"holds text left in the input box ({piece!r})"
    return kind, task_id, None


def submissions(agent: str, log: pathlib.Path, stray: t.Sequence[str] = ()) -> list[Submission]:
    """Every prompt in ``agent``'s log, with its process life and whether it was answered."""
    if not log.exists():
        return []
    life = -1
    found: list[tuple[int, int, str]] = []
    replied: set[tuple[int, int]] = set()
    for event in read_log(log):
        kind = event.get("event")
        if kind == "start":
            life += 1
        elif kind == "prompt":
            found.append((life, int(event["n"]), str(event["text"])))
        elif kind == "reply":
            replied.add((life, int(event["n"])))
    out = []
    for lf, n, text in found:
        kind, task_id, merged = classify(text, stray)
        out.append(Submission(agent, lf, n, kind, task_id, text, (lf, n) in replied, merged))
    return out


@dataclasses.dataclass(frozen=True)
class Claim:
    """What politerm says became of a task (its store, read at the end of the run)."""

    state: str
    report: str | None = None
    error: str | None = None


@dataclasses.dataclass
class Verdict:
    """The judge's findings; each list holds one readable line per finding."""

    tasks: int = 0
    handoffs: int = 0  # handoffs answered by their agent (first answer of each counted once)
    prompts: int = 0  # every prompt any agent submitted
    nudges: int = 0
    lost: list[str] = dataclasses.field(default_factory=list)
    duplicated: list[str] = dataclasses.field(default_factory=list)
    merged: list[str] = dataclasses.field(default_factory=list)
    false_done: list[str] = dataclasses.field(default_factory=list)
    faults: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)

    @property
    def ok(self) -> bool:
        """True when nothing was lost, duplicated, merged or falsely DONE."""
        return not (self.lost or self.duplicated or self.merged or self.false_done)

    def summary(self) -> str:
        """The counts in one line, then every finding (at most 20 per kind)."""
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())) or "none"
        head = (
            f"{self.tasks} tasks, {self.handoffs} handoffs, {self.prompts} prompts "
            f"({self.nudges} nudges/retries); faults injected: {faults}; "
            f"lost {len(self.lost)}, duplicated {len(self.duplicated)}, "
            f"merged {len(self.merged)}, false DONE {len(self.false_done)}"
        )
        lines = [head]
        for name in ("lost", "duplicated", "merged", "false_done"):
            items: list[str] = getattr(self, name)
            lines += [f"  {name}: {item}" for item in items[:20]]
            if len(items) > 20:
                lines.append(f"  {name}: … {len(items) - 20} more")
        return "\n".join(lines)


def judge(
    subs: t.Sequence[Submission],
    claims: t.Mapping[str, Claim],
    *,
    expected_report: t.Callable[[str], str],
    faults: t.Mapping[str, int] | None = None,
) -> Verdict:
    """Judge a run: ``subs`` from every agent's log, ``claims`` for every task submitted."""
    verdict = Verdict(tasks=len(claims), prompts=len(subs))
    verdict.faults.update(faults or {})
    by_key: dict[tuple[str, str, str], list[Submission]] = collections.defaultdict(list)
    for sub in subs:
        where = f"{sub.agent} life {sub.life} prompt {sub.n}"
        if sub.merged is not None:
            verdict.merged.append(f"{where} {sub.merged}: {sub.text[:120]!r}")
            continue
        if sub.kind in ("nudge", "retry"):
            verdict.nudges += 1
        elif sub.kind is not None and sub.task_id is not None:
            by_key[(sub.agent, sub.kind, sub.task_id)].append(sub)
    for (agent, kind, task_id), copies in sorted(by_key.items()):
        for later_index, later in enumerate(copies[1:], 1):
            earlier = copies[:later_index]
            if any(e.answered or e.life == later.life for e in earlier):
                verdict.duplicated.append(
                    f"{kind} of {task_id} to {agent} submitted again "
                    f"(life {later.life} prompt {later.n}; before: "
                    + ", ".join(f"life {e.life} prompt {e.n}" for e in earlier)
                    + ")"
                )
    for task_id, claim in sorted(claims.items()):
        missing = [
            f"{kind} → {agent}"
            for kind, agent in HANDOFFS
            if not any(s.answered for s in by_key.get((agent, kind, task_id), []))
        ]
        verdict.handoffs += len(HANDOFFS) - len(missing)
        if claim.state != "DONE":
            why = f"{task_id} ended {claim.state}"
            if claim.error:
                why += f" ({claim.error.splitlines()[0][:160]!r})"
            if missing:
                why += f"; never answered: {', '.join(missing)}"
            verdict.lost.append(why)
        elif missing:
            verdict.false_done.append(f"{task_id} DONE but never answered: {', '.join(missing)}")
        elif (claim.report or "").strip() != expected_report(task_id):
            verdict.false_done.append(
                f"{task_id} DONE with report {(claim.report or '')[:120]!r}, "
                f"not {expected_report(task_id)!r}"
            )
    return verdict


def fault_counts(logs: t.Iterable[pathlib.Path]) -> collections.Counter[str]:
    """How many faults of each kind the agents injected (their ``fault`` and lost-Enter events)."""
    counts: collections.Counter[str] = collections.Counter()
    for log in logs:
        if not log.exists():
            continue
        for event in read_log(log):
            if event.get("event") == "fault":
                counts[f"{event['kind']}" + (f":{event['at']}" if "at" in event else "")] += 1
            elif event.get("event") == "swallowed_enter" and event.get("reason") == "fault":
                counts["lost_enter"] += 1
    return counts
