"""A chaos project on disk: fake-agent scenarios with fault knobs and the poli.toml to run them.

The PLANNER answers a task with a plan block and a result with a final block whose
report names the task (:func:`expected_report`); the EXECUTER answers a plan with a
result block. Nudges and retries get a plain "still working" line: an agent that already
printed its block does not print it again, so a block politerm missed is a lost task.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import typing as t

if t.TYPE_CHECKING:
    import pathlib

AGENTS = ("PLANNER", "EXECUTER")
TRANSCRIPT = ".fake-transcript.jsonl"  # in the agent's directory, where its profile looks
_IDS = r"(?=.*?TASK_ID=(?P<id>[^\s()]+))(?=.*?\(nonce=(?P<nonce>[0-9a-f]+)\))"


def expected_report(task_id: str) -> str:
    """The report the PLANNER's final block carries for ``task_id``.

    Examples
    --------
    >>> expected_report("C7")
    'All done for C7.'
    """
    return f"All done for {task_id}."


def _block(to: str, typ: str, tag: str, body: str) -> str:
    header = f'{{"to":"{to}","type":"{typ}","id":"{{id}}","nonce":"{{nonce}}"}}'
    inner = f"[[POLI:MSG {header}]]\n<{tag}>\n{body}\n</{tag}>\n[[/POLI:MSG]]"
    return f"Here you go.\n\n```\n{inner}\n```\n"


def _rule(match: str, reply: str) -> str:
    return f"[[rules]]\nmatch = '(?s){match}'\nreply = '''{reply}'''\n\n"


@dataclasses.dataclass(frozen=True)
class AgentSpec:
    """How one fake agent behaves: its mode, think time and ``[faults]`` knobs."""

    mode: str = "claude"
    think_time: float = 0.05
    faults: t.Mapping[str, object] = dataclasses.field(default_factory=dict)

    def scenario(self, role: str, seed: int) -> str:
        """The scenario TOML for ``role`` (PLANNER or EXECUTER)."""
        still = _rule(r"\A(If finished|No tagged block)", "Still working on it.")
        if role == "PLANNER":
            final = _block("USER", "final", "REPORT", expected_report("{id}"))
            plan = _block("EXECUTER", "plan", "PLAN", "1. Do the work for {id}.\n2. Report.")
            rules = _rule(r"\AEXECUTER replied:" + _IDS, final) + _rule(
                r"\A(?=TASK_ID=)" + _IDS, plan
            )
        else:
            result = _block("PLANNER", "result", "RESULT", "Did the work for {id}.")
            rules = _rule(r"\AYou received a PLANNER plan block:" + _IDS, result)
        knobs = {"seed": seed, **self.faults}
        faults = "".join(f"{key} = {json.dumps(value)}\n" for key, value in knobs.items())
        return (
            f'mode = "{self.mode}"\nthink_time = {self.think_time}\n'
            f'default_reply = "Not a task I know."\n\n{still}{rules}[faults]\n{faults}'
        )


def write_project(
    root: pathlib.Path,
    socket: str,
    *,
    seed: int,
    planner: AgentSpec,
    executer: AgentSpec,
    session: str = "chaos",
    timeout: float = 60.0,
    store: str = "runs.sqlite3",
) -> pathlib.Path:
    """Write both scenarios and ``poli.toml`` under ``root``; return the config path.

    Each agent logs to ``root/<role>.jsonl`` (lower case): the run's ground truth. Each
    also keeps a transcript in its directory (``root/<role>/``:data:`TRANSCRIPT`).
    """
    root.mkdir(parents=True, exist_ok=True)
    parts = [
        f'[tmux]\nsocket = "{socket}"\nsession = "{session}"\nwidth = 200\n',
        f'[store]\npath = "{store}"\n',
        f"[timeouts]\nplan = {timeout}\nexec = {timeout}\nready = 30\n",
    ]
    for role, spec in (("PLANNER", planner), ("EXECUTER", executer)):
        name = role.lower()
        (root / name).mkdir(exist_ok=True)
        scenario = root / f"{name}.toml"
        scenario.write_text(spec.scenario(role, seed), "utf-8")
        argv = [
            sys.executable, "-m", "politerm.testing.fakeagent", "--mode", spec.mode,
            "--scenario", str(scenario), "--log", str(root / f"{name}.jsonl"), "--name", role,
            # its own transcript: what a resume reads back when the screen died with it
            "--transcript", TRANSCRIPT,
        ]  # fmt: skip
        parts.append(
            f"[agents.{role}]\ncommand = {json.dumps(argv)}\n"
            f'profile = "fake-{spec.mode}"\ncwd = "{name}"\nprimer = false\n'
        )
    path = root / "poli.toml"
    path.write_text("\n".join(parts), "utf-8")
    return path
