"""``--config`` on the pipeline commands: ``run``, ``gate``, ``resume`` and ``list`` (and the
control window the run starts) all read the named file instead of the project's poli.toml."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import typing as t

from politerm.pipeline.state import read_question, session_name
from politerm.store import RunStore
from politerm.testing.fakeagent import read_log
from politerm.testing.retry import retry_until

if t.TYPE_CHECKING:
    import pathlib

    import libtmux

RUN = "C1"
STEPS = (
    "1 | special   | - | gate | - | - | One\n"
    "2 | developer | - | auto | - | - | Two FAKE:slow\n"
    "3 | reviewer  | - | auto | - | - | Three\n"
)


def make_project(tmp_path: pathlib.Path, server: libtmux.Server) -> pathlib.Path:
    """A project whose own poli.toml names nothing; other.toml names the socket, store and
    an agents_path holding the ``special`` agent the pipeline needs."""
    root = tmp_path / "proj"
    (root / ".poli" / "pipelines").mkdir(parents=True)
    (root / "poli.toml").write_text("[timeouts]\nready = 20\n")
    conf = tmp_path / "conf"
    (conf / "myagents").mkdir(parents=True)
    (conf / "myagents" / "special.md").write_text("You are a special tester.\n")
    (conf / "other.toml").write_text(
        f'[tmux]\nsocket = "{server.socket_name}"\n\n[store]\npath = "alt.sqlite3"\n\n'
        f'[timeouts]\nready = 20\n\n[pipeline]\nagents_path = ["{conf / "myagents"}"]\n'
    )
    (root / ".poli" / "pipelines" / "p.pipeline").write_text(
        "name: p\ndescription: config test\ntimeout_min: 1\n\n" + STEPS
    )
    return root


def poli(root: pathlib.Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "politerm", *args, "--project", str(root)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


def prompts(root: pathlib.Path, step: int) -> int:
    logs = sorted((root / ".poli" / "steps" / RUN).glob(f"step-{step}.a*.jsonl"))
    return sum(1 for path in logs for e in read_log(path) if e["event"] == "prompt")


def test_config_option_of_run_gate_resume_and_list(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = make_project(tmp_path, server)
    other = str(tmp_path / "conf" / "other.toml")
    alt_store = tmp_path / "conf" / "alt.sqlite3"

    # list: the special agent is found only through other.toml's agents_path.
    plain = json.loads(poli(root, "list", "--json").stdout)
    assert next(r for r in plain if r["name"] == "p")["description"].startswith("INVALID")
    listed = poli(root, "list", "--json", "--config", other)
    assert listed.returncode == 0, listed.stderr
    mine = next(r for r in json.loads(listed.stdout) if r["name"] == "p")
    assert (mine["description"], mine["steps"]) == ("config test", 3)

    argv = [sys.executable, "-m", "politerm", "run", "p", "--project", str(root), "--task",
            "Add a greeting", "--cli", "fake", "--run-id", RUN, "--config", other]  # fmt: skip
    with (root / "run.out").open("wb") as out:
        proc = subprocess.Popen(argv, cwd=root, stdout=out, stderr=subprocess.STDOUT)
    try:

        def asked() -> dict[str, t.Any] | None:
            if not alt_store.exists():
                return None
            with RunStore.open(alt_store) as store:
                q = read_question(store, RUN)
            return q if q is not None and q.get("answer") is None else None

        question = retry_until(asked, 60, interval=0.1, what="the gate question of step 1")
        assert question["step"] == 1
        # The control window (window 0) reads the same store: it shows the question.
        target = f"={session_name(root, RUN)}:0"

        def control_shows_question() -> bool:
            screen = server.cmd("capture-pane", "-p", "-t", target).stdout
            return any(line.startswith("? step 1:") for line in screen)

        retry_until(control_shows_question, 60, interval=0.2, what="the control window's question")
        # Without --config, gate looks in the project's own store and finds no such run.
        missing = poli(root, "gate", "y", "--run-id", RUN)
        assert missing.returncode == 1
        assert f"no pipeline run '{RUN}'" in missing.stderr
        gate = poli(root, "gate", "y", "--config", other)
        assert gate.returncode == 0, gate.stderr
        assert gate.stdout.strip() == "step 1: answered y"
        # Kill the runner while step 2 works, then resume it through the same file.
        retry_until(lambda: prompts(root, 2), 60, what="step 2 to get its prompt")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
    lost = poli(root, "resume", "--run-id", RUN)
    assert lost.returncode == 1
    assert f"no pipeline run '{RUN}'" in lost.stderr
    resumed = poli(root, "resume", "--config", other)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"run {RUN}: done" in resumed.stdout
    assert [prompts(root, n) for n in (1, 2, 3)] == [1, 1, 1]
