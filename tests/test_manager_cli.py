"""``poli manager`` as a person and a script use it: the REPL driven through a real PTY, the
one-shot commands and their exit codes, and ``kill -9`` of the manager mid-task, resumed."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
import stat
import subprocess
import sys
import typing as t

import pytest

from politerm.manager.store import ManagerStore
from politerm.pty.runner import PtyTerminal
from politerm.store import RunStore
from politerm.testing.mockllm import MockLLM, Rule
from politerm.testing.retry import WaitTimeout, aretry_until, retry_until
from tests.manager_helpers import THREE_STEPS, ide

POLI = [sys.executable, "-m", "politerm"]
BOUND = 60.0


def setup(tmp_path: pathlib.Path, llm: MockLLM) -> tuple[pathlib.Path, dict[str, str]]:
    """A working directory with poli.toml pointing the brain at the mock; the environment."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "poli.toml").write_text(
        f"""
[store]
path = "{tmp_path / "state" / "runs.sqlite3"}"

[manager]
channel = "file"
file_stable_seconds = 0.5

[manager.brain]
provider = "gemini"
base_url = "{llm.url}"
model = "mock-model"
backoff = 0.01
max_retries = 2
call_timeout = 20.0
"""
    )
    root = tmp_path / "proj"
    root.mkdir()
    (root / "README.md").write_text("# Web\n")
    env = {**os.environ, "GEMINI_API_KEY": llm.token, "PROMPT_TOOLKIT_NO_CPR": "1"}
    return work, env


def poli(work: pathlib.Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*POLI, *args],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )


def add_web(tmp_path: pathlib.Path) -> None:
    """Register project ``web`` in the store (what ``poli manager project add`` does)."""
    with RunStore.open(tmp_path / "state" / "runs.sqlite3") as store:
        ManagerStore(store).add_project("web", tmp_path / "proj", channel="file")


def project_state(tmp_path: pathlib.Path) -> dict[str, t.Any]:
    with RunStore.open(tmp_path / "state" / "runs.sqlite3") as store:
        return ManagerStore(store).project("web").to_json()


# --- the REPL ---------------------------------------------------------------------------


class Console:
    """The REPL in a real pseudo-terminal, read through its screen."""

    def __init__(self, term: PtyTerminal) -> None:
        self.term = term

    async def screen(self) -> str:
        return "\n".join((await self.term.snapshot()).lines)

    async def type(self, line: str) -> None:
        await self.term.write(line.encode() + b"\r")

    async def wait_for(self, text: str) -> str:
        async def look() -> str | None:
            screen = await self.screen()
            return screen if text in screen else None

        try:
            return await aretry_until(look, BOUND, what=f"{text!r} on the REPL's screen")
        except WaitTimeout:
            pytest.fail(f"{text!r} never showed; the screen:\n{await self.screen()}")

    async def wait_for_input_line(self, text: str) -> None:
        """Wait until the prompt being edited (the last one on screen) reads ``text``."""

        async def look() -> bool:
            lines = [ln.rstrip() for ln in (await self.screen()).splitlines() if ln.strip()]
            return bool(lines) and lines[-1] == text

        try:
            await aretry_until(look, BOUND, what=f"the input line {text!r}")
        except WaitTimeout:
            pytest.fail(f"the input line never read {text!r}; the screen:\n{await self.screen()}")


async def test_repl_through_a_pty(tmp_path: pathlib.Path) -> None:
    rules = [
        Rule(r"\[Human, step 0\]\n8080\n", "Write server.py listening on port 8080"),
        Rule(r".*", "NEED_USER_INPUT: Which port should the server use?"),
    ]
    with MockLLM(rules, sides=False) as llm:
        work, env = setup(tmp_path, llm)
        term = await PtyTerminal.spawn(
            [*POLI, "manager"], cwd=work, env=env, size=(160, 60), name="repl"
        )
        c = Console(term)
        try:
            await c.wait_for("manager (no project)>")
            await c.type("help")
            await c.wait_for("Ctrl-C stops the current step; Ctrl-D quits.")
            await c.type(f"project add web {tmp_path / 'proj'} --goal 'A web server'")
            await c.wait_for("project web added")
            # Keys typed before readline takes the terminal again are not completed (seen
            # under load): wait for the fresh prompt, then for the completion on the input
            # line itself (the help above also says "project select").
            await c.wait_for_input_line("manager (no project)>")
            await term.write(b"project sel\t")  # completion of commands and project names
            await c.wait_for_input_line("manager (no project)> project select")
            await term.write(b" w\t")
            await c.wait_for("project select web")
            await term.write(b"\r")
            await c.wait_for("manager (web)>")
            await c.type("project list")
            await c.wait_for(f"* {'web':<16} {'project_selected':<26} file  {tmp_path / 'proj'}")
            await c.type("goal Start the server")
            await c.wait_for("QUESTION: Which port should the server use?")
            await c.type("input 8080")
            await c.wait_for("waiting_dev_report: step 1: Write server.py listening on port 8080")
            await c.type("status")
            await c.wait_for("state   waiting_dev_report (running here)")
            await term.write(b"\x03")  # Ctrl-C: stops the step, not the program
            await c.wait_for("step stopped; step interrupted by the user")
            await c.type("status")
            await c.wait_for("state   paused_waiting_user_input")
            await c.type("stop")
            await c.wait_for("stopped; state project_selected")
            # history: ↑ recalls earlier lines, newest first (a repeated line is kept once):
            # stop, status, input 8080, goal …
            await term.write(b"\x1b[A" * 4)
            await c.wait_for_input_line("manager (web)> goal Start the server")
            await term.write(b"\x15")  # Ctrl-U: clear the recalled line
            await c.wait_for_input_line("manager (web)>")
            await c.type("quit")
            code = await term.wait_exit(BOUND)
        finally:
            await term.kill()
    assert code == 0
    state = project_state(tmp_path)
    assert (state["state"], state["task_status"]) == ("project_selected", "stopped")
    instruction = tmp_path / "proj" / "dev_instructions" / "next_step.txt"
    assert "Write server.py listening on port 8080" in instruction.read_text()
    history = tmp_path / "state" / "manager_history"
    assert "goal Start the server" in history.read_text()
    assert stat.S_IMODE(history.stat().st_mode) == 0o600


def kill_while_waiting_for_the_dev(
    tmp_path: pathlib.Path, work: pathlib.Path, env: dict[str, str]
) -> None:
    added = poli(work, env, "manager", "project", "add", "web", str(tmp_path / "proj"))
    assert added.returncode == 0, added.stderr
    proc = subprocess.Popen(
        [*POLI, "manager", "goal", "--project", "web", "Start the server"],
        cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    retry_until(
        lambda: project_state(tmp_path)["state"] == "waiting_dev_report", BOUND,
        what="the manager waiting for the dev report",
    )  # fmt: skip
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(BOUND) == -signal.SIGKILL


async def test_repl_offers_to_resume_a_task_left_running(tmp_path: pathlib.Path) -> None:
    rules = [Rule(r".*", "Write server.py")]
    with MockLLM(rules, sides=False) as llm:
        work, env = setup(tmp_path, llm)
        kill_while_waiting_for_the_dev(tmp_path, work, env)
        term = await PtyTerminal.spawn(
            [*POLI, "manager"], cwd=work, env=env, size=(160, 60), name="repl"
        )
        c = Console(term)
        try:
            await c.wait_for("Project web has a task under way (waiting_dev_report, step 1)")
            await c.type("y")
            await c.wait_for("resuming from waiting_dev_report")
            with ide(tmp_path / "proj"):
                llm.script.clear()
                llm.add(Rule(r"Report for step 1", "TASK_COMPLETE server.py is written"))
                await c.wait_for("TASK COMPLETE: server.py is written")
            await c.type("quit")
            assert await term.wait_exit(BOUND) == 0
        finally:
            await term.kill()
    assert [r.user_text.count("(none yet)") for r in llm.requests()] == [1, 0]


async def test_repl_resume_declined_or_taken_and_a_running_task_stopped(
    tmp_path: pathlib.Path,
) -> None:
    from politerm.manager.states import ManagerState as S

    with MockLLM([], sides=False) as llm:
        work, env = setup(tmp_path, llm)
        with RunStore.open(tmp_path / "state" / "runs.sqlite3") as store:
            m = ManagerStore(store)
            for name in ("a", "b"):  # both left by a manager that died waiting for the dev
                root = tmp_path / name
                root.mkdir()
                m.add_project(name, root, channel="file")
                m.transition(name, S.LOADING_PROJECT)
                m.transition(name, S.PROJECT_SELECTED)
                m.start_task(name, f"Task of {name}")
                m.transition(name, S.WAITING_DEV_REPORT, step=1, last_instruction="Write it")
        script = "n\ny\nstatus\nstop\nquit\n"  # decline a's, resume b's, stop it running
        done = await asyncio.to_thread(
            subprocess.run, [*POLI, "manager"], cwd=work, env=env, input=script,
            capture_output=True, text=True, timeout=BOUND, check=False,
        )  # fmt: skip
        with RunStore.open(tmp_path / "state" / "runs.sqlite3") as store:
            a, b = (ManagerStore(store).project(n) for n in ("a", "b"))
        assert llm.requests() == []
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Project a has a task under way (waiting_dev_report, step 1): Task of a" in out
    assert "[a] task stopped" in out
    assert "[b] resuming from waiting_dev_report" in out
    assert "state   waiting_dev_report (running here)" in out
    assert "[b] stopped; state project_selected" in out
    for p in (a, b):
        assert (p.state.value, p.task_status, p.resumable) == ("project_selected", "stopped", False)
    assert (
        (tmp_path / "b" / "dev_instructions" / "next_step.txt")
        .read_text()
        .startswith(f"# Step 1 of task {b.task_id}\n\nWrite it\n")
    )


# --- one-shot commands and kill -9 ------------------------------------------------------


@pytest.mark.parametrize("moment", ["waiting_dev_report", "calling_brain"])
def test_kill_9_mid_task_then_resume_finishes_it_once(tmp_path: pathlib.Path, moment: str) -> None:
    rules = list(THREE_STEPS)
    if moment == "calling_brain":  # the second planning call hangs long enough to be killed
        rules.insert(1, Rule(r"## Latest dev report\nReport for step 1", "Add a test for hello.py",
                             delay=8.0, times=1))  # fmt: skip
    with MockLLM(rules, sides=False) as llm:
        work, env = setup(tmp_path, llm)
        add = poli(work, env, "manager", "project", "add", "web", str(tmp_path / "proj"))
        assert add.returncode == 0, add.stderr
        delay = "3" if moment == "waiting_dev_report" else "0"
        with ide(tmp_path / "proj", "--delay", delay):
            proc = subprocess.Popen(
                [*POLI, "manager", "goal", "--project", "web", "Make hello.py"],
                cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip

            def at_moment() -> bool:
                s = project_state(tmp_path)
                return bool(s["state"] == moment and s["step"] == 1)

            retry_until(at_moment, BOUND, interval=0.02, what=f"the manager in {moment}")
            proc.send_signal(signal.SIGKILL)
            assert proc.wait(BOUND) == -signal.SIGKILL
            assert project_state(tmp_path)["state"] == moment  # persisted as it was
            status = poli(work, env, "manager", "status", "--json")
            assert json.loads(status.stdout)["projects"][0]["state"] == moment
            done = poli(work, env, "manager", "resume", "--project", "web", "--json")
        assert done.returncode == 0, done.stderr
        final = json.loads(done.stdout)
        prompts = [r.user_text for r in llm.requests()]
    assert final["state"] == "task_complete" and final["step"] == 3
    # each step's instruction was planned once (a call cut by the kill is asked again)
    firsts = [p for p in prompts if "## Latest dev report\n(none yet)" in p]
    assert len(firsts) == 1
    processed = sorted((tmp_path / "proj" / "dev_logs" / "processed").iterdir())
    task = final["task_id"]
    assert [p.name.rsplit("_", 1)[1] for p in processed] == [
        f"{task}-s1.txt", f"{task}-s2.txt", f"{task}-s3.txt",
    ]  # fmt: skip


def test_goal_exit_codes_and_status_json(tmp_path: pathlib.Path) -> None:
    rules = [
        Rule(r"## Current task\nBreak", "SYSTEM_ERROR: the repository is read-only"),
        Rule(r"\[Human, step 0\]\n9090", "TASK_COMPLETE using 9090"),
        Rule(r"## Current task\nAsk me", "NEED_USER_INPUT: Which port?"),
        Rule(r"## Current task\nCheck", "TASK_COMPLETE nothing to do"),
    ]
    with MockLLM(rules, sides=False) as llm:
        work, env = setup(tmp_path, llm)
        add_web(tmp_path)
        asked = poli(work, env, "manager", "goal", "--project", "web", "Ask me", "--json")
        answered = poli(work, env, "manager", "input", "--project", "web", "9090", "--json")
        broken = poli(work, env, "manager", "goal", "--project", "web", "Break", "--json")
        done = poli(work, env, "manager", "goal", "--project", "web", "Check", "--json")
        status = json.loads(poli(work, env, "manager", "status", "--json").stdout)
        general = poli(work, env, "status", "--json")
        missing = poli(work, env, "manager", "goal", "--project", "nope", "x")
        env_nokey = {**env, "GEMINI_API_KEY": ""}
        nokey = poli(work, env_nokey, "manager", "goal", "--project", "web", "x")
    assert asked.returncode == 3, asked.stderr
    assert json.loads(asked.stdout)["question"] == "Which port?"
    assert answered.returncode == 0, answered.stderr
    assert json.loads(answered.stdout)["result"] == "using 9090"
    assert broken.returncode == 1
    assert json.loads(broken.stdout)["state"] == "error_system"
    assert json.loads(broken.stdout)["error"] == "the repository is read-only"
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"] == "nothing to do"
    assert status["selected"] == "web"
    assert status["projects"][0]["state"] == "task_complete"
    # every transition is an event of the run store, so plain `poli status` shows them
    moves = [e["detail"] for e in json.loads(general.stdout)["events"]]
    assert "web: calling_brain → error_system: the repository is read-only" in moves
    assert missing.returncode == 1
    assert missing.stderr.strip() == "poli: no manager project 'nope'; known: web"
    assert nokey.returncode == 1 and "no API key for the gemini brain" in nokey.stderr
    assert "Traceback" not in missing.stderr + nokey.stderr


async def test_console_opens_without_a_key_and_the_goal_says_what_is_missing(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with MockLLM([], sides=False) as llm:
        work, env = setup(tmp_path, llm)
    env = {**env, "GEMINI_API_KEY": "", "GOOGLE_API_KEY": ""}
    script = f"project add web {tmp_path / 'proj'}\nproject list\nquit\n"
    done = await asyncio.to_thread(
        subprocess.run, [*POLI, "manager"], cwd=work, env=env, input=script,
        capture_output=True, text=True, timeout=BOUND, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "project web added" in done.stdout and "web " in done.stdout
    # the goal is where the key is needed: the brain's error state says what is missing
    from politerm.config import load_config
    from politerm.manager.app import build_manager

    monkeypatch.chdir(work)
    manager = build_manager(
        load_config(work, env=env), on_event=lambda p, line: None, env=env, lazy=True
    )
    try:
        manager.start("web", "Go")
        project = await manager.run("web")
    finally:
        await manager.aclose()
        manager.store.store.close()
    assert project.state.value == "error_brain"
    assert project.error is not None and "no API key for the gemini brain" in project.error


def test_ctrl_c_pauses_a_one_shot_goal_and_a_stopped_task_resumes_to_exit_4(
    tmp_path: pathlib.Path,
) -> None:
    with MockLLM([Rule(r".*", "Write server.py")], sides=False) as llm:
        work, env = setup(tmp_path, llm)
        add_web(tmp_path)
        proc = subprocess.Popen(
            [*POLI, "manager", "goal", "--project", "web", "Start the server", "--json"],
            cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        retry_until(
            lambda: project_state(tmp_path)["state"] == "waiting_dev_report", BOUND,
            what="the manager waiting for the dev report",
        )  # fmt: skip
        proc.send_signal(signal.SIGINT)  # Ctrl-C: the step stops, the task waits for input
        out, err = proc.communicate(timeout=BOUND)
        stopped = poli(work, env, "manager", "stop", "--project", "web")
        resumed = poli(work, env, "manager", "resume", "--project", "web", "--json")
    assert proc.returncode == 3, err
    paused = json.loads(out)
    assert (paused["state"], paused["task_status"]) == ("paused_waiting_user_input", "paused")
    assert "interrupted" in paused["question"]
    assert "Traceback" not in err
    assert stopped.returncode == 0 and stopped.stdout.strip() == "web: project_selected"
    assert resumed.returncode == 4, resumed.stderr
    assert json.loads(resumed.stdout)["task_status"] == "stopped"


async def test_the_api_key_of_any_shape_never_reaches_disk_or_output(
    tmp_path: pathlib.Path,
) -> None:
    key = "zq" + "5e1f" * 10  # no known key shape: only the manager's own knowledge hides it
    rules = [Rule(r".*", f"NEED_USER_INPUT: Is {key} the key to deploy with?")]
    with MockLLM(rules, token=key, sides=False) as llm:
        work, env = setup(tmp_path, llm)
        add_web(tmp_path)
        asked = poli(work, env, "manager", "goal", "--project", "web", "Deploy", "--json")
        typed = await asyncio.to_thread(
            subprocess.run, [*POLI, "manager"], cwd=work, env=env,
            input=f"input yes, {key} is it\nstop\nquit\n",
            capture_output=True, text=True, timeout=BOUND, check=False,
        )  # fmt: skip
        general = poli(work, env, "status", "--json")
    assert asked.returncode == 3, asked.stderr
    assert "[REDACTED" in json.loads(asked.stdout)["question"]
    assert typed.returncode == 0, typed.stderr
    # what the console printed, less the echo of the typed lines themselves
    said = [ln for ln in typed.stdout.splitlines() if "manager (web)> " not in ln]
    assert "[REDACTED" in typed.stdout and key not in "\n".join(said) + typed.stderr
    for out in (asked, general):
        assert key not in out.stdout + out.stderr
    state = tmp_path / "state"
    assert (state / "manager_history").is_file()
    for f in state.rglob("*"):
        if f.is_file():
            assert key.encode() not in f.read_bytes(), f
