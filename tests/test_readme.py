"""Every ``poli`` command line of the README, typed as a newcomer types it, on a clean HOME.

The lines are read from README.md's code blocks and run through ``sh -c`` with the venv's
``bin/`` first on PATH (as after ``source .venv/bin/activate``), a fresh HOME and XDG
directories, a private TMPDIR and a private tmux socket directory. Each must succeed and
print what the README promises. A README line that no test here drives fails
:func:`test_every_readme_command_is_driven`, so the README cannot promise more than is tried.
The ``poli demo NAME`` lines are typed the same way by tests/test_demos.py, which checks what
each demo says and that it leaves nothing behind (run once there, not twice).
(``./scripts/demo`` and ``./scripts/test`` are CI itself and are not re-run here.)
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import typing as t

import ptyprocess
import pytest

from politerm.demos import NAMES
from politerm.testing.retry import retry_until
from tests import test_demos

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
DEMOS = ("loop", "pipeline", "epic", "manager", "bridge", "messaging")

# The README's lines, as written (comments dropped), each driven by a test below.
USE = (
    "poli doctor",
    "poli up",
    'poli task "Add a --json flag to the export command"',
    "poli status [--json|--watch]",
    "poli attach",
    'poli answer TASK "yes, use the v2 API"',
    "poli task --follow TASK",
    "poli abort [TASK]",
    "poli up --resume",
    "poli down",
    "poli status --all",
)
NEXT_STEPS = (
    'poli run feature --project . --task "Add a --verbose flag" --cli fake --auto-approve',
    'poli work add E1 "Add a --verbose flag"',
    "poli go E1 --dry-run",
    "poli go E1 --agent fake --yes",
)
COMPLETION = "poli completion bash --install"
DRIVEN = {*USE, *NEXT_STEPS, COMPLETION, *(f"poli demo {name}" for name in DEMOS)}


def readme_commands() -> set[str]:
    """The ``poli`` lines of the README's shell code blocks, without their comments."""
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"^```sh\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    lines = (line.split("  #")[0].strip() for block in blocks for line in block.splitlines())
    return {line for line in lines if line.startswith("poli ")}


def test_every_readme_command_is_driven() -> None:
    assert readme_commands() == DRIVEN
    # The demo lines, as typed, are test_demos.py's cases: every demo, each by its name.
    assert set(DEMOS) == set(NAMES) == {c.argv[0] for c in test_demos.CASES}


def test_the_first_screen_says_how_to_run_poli_after_setup() -> None:
    """The first 24 lines: the two commands, then how to run ``poli`` (venv, pipx, uv)."""
    screen = "\n".join(README.read_text(encoding="utf-8").splitlines()[:24])
    for text in (
        "./scripts/demo",
        "./scripts/test",
        "source .venv/bin/activate",
        ".venv/bin/poli doctor",
        "`pipx install .`",
        "`uv tool install .`",
        "`poli --help`",
        "`poli COMMAND -h`",
        # what each of the two installs: the demo only what it runs
        "The demo installs only what it runs",
        "Chromium",
    ):
        assert text in screen, text
    # exactly two commands
    [block] = re.findall(r"^```sh\n(.*?)^```", screen, re.MULTILINE | re.DOTALL)
    assert [line.split()[0] for line in block.splitlines()] == ["./scripts/demo", "./scripts/test"]


class Newcomer:
    """A clean machine account: its HOME, a project directory, a private tmux socket dir."""

    def __init__(self, tmp_path: pathlib.Path) -> None:
        self.home = pathlib.Path(os.environ["HOME"])  # conftest made it fresh, with XDG dirs
        self.project = tmp_path / "proj"
        self.project.mkdir()
        self.tmp = tmp_path / "tmp"
        self.tmp.mkdir()
        self.sockets = tmp_path / "sockets"
        self.sockets.mkdir(mode=0o700)
        venv_bin = str(pathlib.Path(sys.executable).parent)
        self.env = {
            **os.environ,
            "XDG_CACHE_HOME": str(self.home / ".cache"),
            "TMPDIR": str(self.tmp),
            "TMUX_TMPDIR": str(self.sockets),
            "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        for name in ("POLI_DEBUG", "COLUMNS", "LINES"):  # output is piped: no width from here
            self.env.pop(name, None)
        self.socket = self.sockets / f"tmux-{os.getuid()}" / "poli"

    def sh(self, line: str, *, code: int = 0, timeout: float = 120) -> str:
        """Run a README line as typed; it must exit ``code``. Returns its output."""
        proc = subprocess.run(
            ["sh", "-c", line],
            cwd=self.project,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        out = proc.stdout + proc.stderr
        assert proc.returncode == code, f"{line!r} exited {proc.returncode}:\n{out[-3000:]}"
        assert "Traceback" not in out, out
        return proc.stdout

    def tasks(self) -> dict[str, dict[str, t.Any]]:
        data = json.loads(self.sh("poli status --json"))
        return {task["id"]: task for task in data["tasks"]}

    def clients(self) -> list[str]:
        """Terminal clients (not control-mode ones) attached to the private server."""
        tmux = shutil.which("tmux")
        assert tmux is not None, "tmux is not installed (scripts/_setup.sh installs it)"
        out = subprocess.run(
            [tmux, "-S", str(self.socket), "list-clients", "-F",
             "#{client_control_mode} #{client_session}"],
            capture_output=True, text=True, check=False, timeout=30,
        )  # fmt: skip
        return [line[2:] for line in out.stdout.splitlines() if line.startswith("0 ")]

    def kill_server(self) -> None:
        tmux = shutil.which("tmux")
        assert tmux is not None
        subprocess.run([tmux, "-S", str(self.socket), "kill-server"], capture_output=True,
                       check=False, timeout=30)  # fmt: skip


def in_terminal(newcomer: Newcomer, line: str) -> ptyprocess.PtyProcessUnicode:
    return ptyprocess.PtyProcessUnicode.spawn(
        ["sh", "-c", line], cwd=str(newcomer.project), env=newcomer.env, dimensions=(40, 160)
    )


def read_until(term: ptyprocess.PtyProcessUnicode, text: str, what: str) -> str:
    """Read the terminal's output until ``text`` shows (bounded, event-driven reads)."""
    seen = ""

    def shown() -> bool:
        nonlocal seen
        if term.isalive():
            with contextlib.suppress(EOFError):  # it ended: what it printed is all there is
                seen += term.read(65536)
        return text in seen

    retry_until(shown, 60, interval=0.05, what=what)
    return seen


@pytest.fixture
def newcomer(tmp_path: pathlib.Path) -> t.Iterator[Newcomer]:
    who = Newcomer(tmp_path)
    try:
        yield who
    finally:
        who.kill_server()


# Ten CLI runs and a whole loop: 66 s alone at a load of 8, past the 120 s ceiling beside two
# other test workers at a load of 11-17.
@pytest.mark.timeout(300)
def test_use_section_loop_commands(newcomer: Newcomer) -> None:
    n = newcomer
    doctor = n.sh("poli doctor")
    assert re.search(r"^tmux\tOK\t", doctor, re.MULTILINE), doctor
    assert "\tFAIL\t" not in doctor

    up = n.sh("poli up")
    assert re.search(r"^up: session 'poli-proj-\w+' on socket 'poli' \(watch: poli attach\)$",
                     up, re.MULTILINE), up  # fmt: skip
    assert "PLANNER: primer delivered" in up and "EXECUTER: primer delivered" in up

    task = n.sh('poli task "Add a --json flag to the export command"')
    final = re.search(r"^final report \((T[\w-]+)\):\n(.+)$", task, re.MULTILINE)
    assert final is not None, task
    done_id = final[1]
    assert "hello.txt was created" in final[2]
    assert " delivered " in task and "PLANNER → EXECUTER: plan" in task  # hop by hop
    assert (n.project / "hello.txt").is_file()  # as the README says the fake executer does

    status = n.sh("poli status")
    assert re.search(rf"^{done_id}\tdone\t.*\tAdd a --json flag", status, re.MULTILINE), status
    assert re.search(r"^PLANNER\tready\t", status, re.MULTILINE), status
    assert n.tasks()[done_id]["state"] == "done"
    followed = n.sh("poli task --follow TASK".replace("TASK", done_id))
    assert f"final report ({done_id}):" in followed, followed
    watch = in_terminal(n, "poli status --watch")
    try:
        # Agent names, not the task id: a live table in a terminal may fold a long cell.
        seen = read_until(watch, "EXECUTER", "poli status --watch to show the agents")
        assert "PLANNER" in seen, seen
    finally:
        watch.sendintr()
        watch.terminate(force=True)

    attach = in_terminal(n, "poli attach")
    try:
        sessions = retry_until(n.clients, 60, what="poli attach to attach a terminal")
        assert sessions[0].startswith("poli-proj-"), sessions
    finally:
        attach.terminate(force=True)

    # A task that asks: poli task exits 3 and names the answer command.
    asked = n.sh('poli task "Add a greeting file; ask me which greeting first"', code=3)
    question = re.search(r"^(T[\w-]+) asks: Which greeting", asked, re.MULTILINE)
    assert question is not None, asked
    waiting = question[1]
    assert f"{waiting} asks: Which greeting should hello.txt hold?\n" in asked
    assert f"answer with: poli answer {waiting} '…'" in asked
    answered = n.sh('poli answer TASK "yes, use the v2 API"'.replace("TASK", waiting))
    assert answered.strip() == f"answered {waiting}"
    # The project's router service delivers the answer at once and routes the task on.
    retry_until(lambda: n.tasks()[waiting]["state"] == "done", 60, what="the answered task")

    n.sh('poli task "Ask me anything"', code=3)
    newest = next(i for i, task in n.tasks().items() if task["state"] == "waiting_user")
    aborted = n.sh("poli abort")
    assert aborted.strip() == f"aborted {newest}"
    assert n.tasks()[newest]["state"] == "aborted"

    # The tmux server dies with both agents; up --resume brings them back.
    n.kill_server()
    resumed = n.sh("poli up --resume")
    assert "up: session 'poli-proj-" in resumed, resumed
    assert re.search(r"^EXECUTER\tready\t", n.sh("poli status"), re.MULTILINE)

    everything = n.sh("poli status --all")
    assert everything.startswith("# sessions on socket poli\n"), everything
    assert str(n.project) in everything
    assert "EXECUTER ready, PLANNER ready" in everything

    down = n.sh("poli down")
    assert re.fullmatch(r"down: router service \(pid \d+\), PLANNER, EXECUTER", down.strip()), down
    assert n.sh("poli status --all").strip() == "no politerm sessions on socket 'poli'"


def test_next_steps_after_the_pipeline_and_epic_demos(newcomer: Newcomer) -> None:
    n = newcomer
    run = n.sh(NEXT_STEPS[0], timeout=300)
    assert re.search(r"^run \S+: done$", run, re.MULTILINE), run
    assert "gate approved (--auto-approve)" in run
    handoff = (n.project / ".handoff.md").read_text()
    assert handoff.count("Notes from step ") >= 4, handoff  # each step appended its notes
    assert n.sh(NEXT_STEPS[1]).strip() == "E1-1"
    dry = n.sh(NEXT_STEPS[2])
    assert re.match(r"agent codex: codex\b", dry), dry
    assert f"each session runs that in a headless PTY, in {n.project}" in dry
    assert "=== E1-1 (priority 2): Add a --verbose flag" in dry
    # The same item on the bundled fake agent (the `python` of its profile is poli's own).
    fake = n.sh(NEXT_STEPS[3]) + n.sh("poli log --epic E1")
    assert re.search(r"^\S+\s+\S+\s+\w+ E1/E1-1\s+success\s+Do E1-1: Add a --verbose flag$", fake,
                     re.MULTILINE), fake  # fmt: skip
    assert re.search(r"^\S+\s+\S+\s+\w+ E1/summary\s+success\s", fake, re.MULTILINE), fake
    assert "drift" not in fake  # Claude's end-of-turn line is no part of the legacy footer


def test_shell_completion_installs(newcomer: Newcomer) -> None:
    out = newcomer.sh(COMPLETION)
    path = pathlib.Path(os.environ["XDG_DATA_HOME"]) / "bash-completion" / "completions" / "poli"
    assert out.startswith(f"wrote {path}"), out
    assert "_POLI_COMPLETE" in path.read_text()
