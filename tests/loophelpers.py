"""A Planner⇄Executer loop on real fake agents in a private tmux server, for tests."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import pathlib
import sys
import typing as t

from politerm.config import load_config
from politerm.engine.session import Session
from politerm.store import RunStore
from politerm.testing.fakeagent.eventlog import read_log

if t.TYPE_CHECKING:
    from politerm.config import Config

# Rules shared by most test scenarios: prompts carry "TASK_ID=<id>" and "(nonce=<hex>)".
IDS = r"(?=.*?TASK_ID=(?P<id>[^\s()]+))(?=.*?\(nonce=(?P<nonce>[0-9a-f]+)\))"


def block(to: str, typ: str, body: str, *, tag: str = "PLAN", extra: str = "") -> str:
    """A reply holding one fenced block with the prompt's id and nonce as placeholders."""
    header = f'{{"to":"{to}","type":"{typ}","id":"{{id}}","nonce":"{{nonce}}"{extra}}}'
    return (
        f"Here you go.\n\n```\n[[POLI:MSG {header}]]\n<{tag}>\n{body}\n</{tag}>\n"
        "[[/POLI:MSG]]\n```\n"
    )


def rule(match: str, reply: str, extra: str = "") -> str:
    """One ``[[rules]]`` table; ``match`` is a regex to which :data:`IDS` is appended."""
    return f"[[rules]]\nmatch = '(?s){match}{IDS}'\n{extra}reply = '''{reply}'''\n\n"


FINAL = block("USER", "final", "All done: the executer reported success.", tag="REPORT")
PLAN = block("EXECUTER", "plan", "1. Create hello.txt.\n2. Report back.")
RESULT = block("PLANNER", "result", "Created hello.txt.", tag="RESULT")

PLANNER_HEAD = 'mode = "claude"\nthink_time = 0.3\n\n'
EXECUTER_HEAD = 'mode = "codex"\nthink_time = 0.3\nlist_reindent = true\n\n'

PLANNER_OK = PLANNER_HEAD + rule(r"\A\s*EXECUTER replied:", FINAL) + rule(r"\A(?=TASK_ID=)", PLAN)
EXECUTER_OK = EXECUTER_HEAD + rule(
    r"\AYou received a PLANNER plan block:",
    RESULT,
    'write_file = { path = "hello.txt", content = "hello\\n" }\n',
)


@dataclasses.dataclass
class Loop:
    """One test's loop: config, store, session and the agents' logs."""

    root: pathlib.Path
    config: Config
    store: RunStore
    session: Session

    def log(self, agent: str) -> list[dict[str, t.Any]]:
        return read_log(self.root / f"{agent.lower()}.jsonl")

    def prompts(self, agent: str) -> list[str]:
        return [e["text"] for e in self.log(agent) if e["event"] == "prompt"]

    def replies(self, agent: str) -> list[dict[str, t.Any]]:
        return [e for e in self.log(agent) if e["event"] == "reply"]

    def pid(self, agent: str) -> int:
        """The process id of the agent's last start (from its log)."""
        starts = [e for e in self.log(agent) if e["event"] == "start"]
        assert starts, f"{agent} logged no start"
        return int(starts[-1]["pid"])


def write_project(
    root: pathlib.Path,
    socket: str,
    *,
    planner: str = PLANNER_OK,
    executer: str = EXECUTER_OK,
    plan_timeout: float = 20,
    exec_timeout: float = 20,
    width: int = 200,
    primers: bool = False,
    extra: str = "",
    planner_mode: str = "claude",
    executer_mode: str = "codex",
    transcripts: bool = False,
) -> pathlib.Path:
    """Write scenarios and a poli.toml for a loop on ``socket``; return the config path.

    With ``transcripts`` each fake agent keeps its transcript where its profile looks.
    """
    root.mkdir(parents=True, exist_ok=True)
    for name, text in (("planner", planner), ("executer", executer)):
        (root / f"{name}.toml").write_text(text)
        (root / name).mkdir(exist_ok=True)

    def agent(name: str, mode: str, profile: str) -> str:
        argv = [
            sys.executable, "-m", "politerm.testing.fakeagent", "--mode", mode,
            "--scenario", str(root / f"{name}.toml"), "--log", str(root / f"{name}.jsonl"),
            *(["--transcript", ".fake-transcript.jsonl"] if transcripts else []),
        ]  # fmt: skip
        return (
            f"[agents.{name.upper()}]\n"
            f"command = {json.dumps(argv)}\n"
            f'profile = "{profile}"\n'
            f'cwd = "{name}"\n' + ("" if primers else "primer = false\n")
        )

    toml = (
        f'[tmux]\nsocket = "{socket}"\nsession = "t"\nwidth = {width}\n\n'
        f'[store]\npath = "runs.sqlite3"\n\n'
        f"[timeouts]\nplan = {plan_timeout}\nexec = {exec_timeout}\nready = 20\n\n"
        + agent("planner", planner_mode, f"fake-{planner_mode}")
        + "\n"
        + agent("executer", executer_mode, f"fake-{executer_mode}")
        + "\n"
        + extra
    )
    path = root / "poli.toml"
    path.write_text(toml)
    return path


@contextlib.asynccontextmanager
async def started(root: pathlib.Path) -> t.AsyncIterator[Loop]:
    """The project's loop with its agents up; agents, server and store closed afterwards."""
    loop = open_loop(root)
    try:
        await loop.session.up()
        yield loop
    finally:
        await loop.session.down()
        await loop.session.host.server.close()
        loop.store.close()


def open_loop(root: pathlib.Path) -> Loop:
    """Load the project at ``root`` (after :func:`write_project`)."""
    config = load_config(root, env={})
    store = RunStore.open(config.store.resolved_path())
    return Loop(root, config, store, Session(config, store))
