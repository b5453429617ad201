"""The command runner: three timeouts, status JSON, process trees killed, no hang on pipes."""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import typing as t

import psutil

from politerm.bridge.runner import CommandSpec, RunState, TimeoutKind, read_status, run_command
from politerm.testing.retry import retry_until

if t.TYPE_CHECKING:
    import pathlib


def spec(tmp_path: pathlib.Path, command: str, **kw: t.Any) -> CommandSpec:
    return CommandSpec(
        command_id=kw.pop("command_id", "c1"),
        command=command,
        working_directory=str(tmp_path),
        out_dir=str(tmp_path / "out"),
        **kw,
    )


def pids_in(path: pathlib.Path) -> list[int]:
    # A background writer may not have written its line yet when the runner returns.
    def written() -> str | None:
        text = path.read_text() if path.exists() else ""
        return text if text.endswith("\n") else None

    return [int(x) for x in retry_until(written, 10, what=f"a pid line in {path.name}").split()]


def assert_all_gone(pids: list[int]) -> None:
    def gone() -> bool:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        return not alive

    assert retry_until(gone, 10), f"still alive: {pids}"


def test_success_captures_both_streams_and_writes_the_status_file(tmp_path: pathlib.Path) -> None:
    st = run_command(spec(tmp_path, "echo out; echo err >&2; pwd"))
    assert st.state is RunState.EXITED
    assert st.exit_code == 0
    assert st.succeeded
    assert st.timeout_fired is None
    assert (tmp_path / "out" / "c1.stdout.log").read_text() == f"out\n{tmp_path}\n"
    assert (tmp_path / "out" / "c1.stderr.log").read_text() == "err\n"
    on_disk = json.loads((tmp_path / "out" / "c1.status.json").read_text())
    assert on_disk["state"] == "exited"
    assert on_disk["exit_code"] == 0
    assert on_disk["pid"] == st.pid
    assert on_disk["started_at"] <= on_disk["first_output_at"] <= on_disk["finished_at"]
    assert "out" in on_disk["last_output"]
    for name in ("c1.status.json", "c1.stdout.log", "c1.stderr.log"):
        assert (tmp_path / "out" / name).stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o700


def test_failure_keeps_the_exit_code(tmp_path: pathlib.Path) -> None:
    st = run_command(spec(tmp_path, "echo nope >&2; exit 7"))
    assert (st.state, st.exit_code, st.succeeded) == (RunState.EXITED, 7, False)
    assert st.describe() == "c1: exited (exit 7)"


def test_silent_after_output_fires_the_activity_timeout(tmp_path: pathlib.Path) -> None:
    st = run_command(
        spec(tmp_path, "echo started; echo $$ > pid; exec sleep 60", activity_timeout=1.0)
    )
    assert st.state is RunState.TIMED_OUT
    assert st.timeout_fired is TimeoutKind.ACTIVITY
    assert st.exit_code is None
    assert st.signal is not None
    assert "started" in st.last_output
    assert read_status(tmp_path / "out" / "c1.status.json") == st  # the file says it too
    assert_all_gone(pids_in(tmp_path / "pid"))


def test_a_command_that_never_prints_fires_the_activity_timeout(tmp_path: pathlib.Path) -> None:
    st = run_command(
        spec(tmp_path, "echo $$ > pid; exec sleep 60", activity_timeout=1.0, launch_timeout=60)
    )
    assert st.timeout_fired is TimeoutKind.ACTIVITY
    assert st.first_output_at is None
    assert_all_gone(pids_in(tmp_path / "pid"))


def test_a_quiet_start_runs_past_the_launch_timeout(tmp_path: pathlib.Path) -> None:
    # As the original's runner: the launch timeout marks a silent command, it does not kill
    # it; a FIFO released only after the mark is on disk makes "quiet at first" exact.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    status_file = tmp_path / "out" / "c1.status.json"
    s = spec(tmp_path, "read x < fifo; echo done", launch_timeout=0.2, activity_timeout=60)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        running = pool.submit(run_command, s)

        def marked() -> bool:
            st = read_status(status_file)
            return st is not None and st.past_launch_timeout

        assert retry_until(marked, 20)
        with fifo.open("w") as w:
            w.write("go\n")
        st = running.result(timeout=30)
    assert (st.state, st.exit_code, st.timeout_fired) == (RunState.EXITED, 0, None)
    assert st.past_launch_timeout
    assert (tmp_path / "out" / "c1.stdout.log").read_text() == "done\n"


def test_a_missing_program_is_reported_as_not_found(tmp_path: pathlib.Path) -> None:
    st = run_command(spec(tmp_path, "no-such-program-poli --flag"))
    assert st.state is RunState.LAUNCH_FAILED
    assert st.error == "no-such-program-poli: not found"
    assert st.describe() == "c1: launch_failed: no-such-program-poli: not found"


def test_a_process_that_cannot_start_is_launch_failed(tmp_path: pathlib.Path) -> None:
    s = spec(tmp_path, "true").model_copy(update={"working_directory": str(tmp_path / "nope")})
    st = run_command(s)
    assert st.state is RunState.LAUNCH_FAILED
    assert st.pid is None
    assert st.error is not None
    assert str(tmp_path / "nope") in st.error
    saved = read_status(s.status_path)
    assert saved is not None
    assert saved.state is RunState.LAUNCH_FAILED


def test_chatty_but_too_long_fires_the_total_timeout(tmp_path: pathlib.Path) -> None:
    st = run_command(
        spec(
            tmp_path,
            "while true; do echo tick; sleep 0.1; done",
            total_timeout=1.5,
            activity_timeout=30.0,
        )
    )
    assert st.timeout_fired is TimeoutKind.TOTAL
    assert st.describe() == "c1: timed_out (total timeout)"
    assert read_status(tmp_path / "out" / "c1.status.json") == st


def test_children_and_grandchildren_die_on_timeout(tmp_path: pathlib.Path) -> None:
    script = (
        "sleep 60 & echo $! >> pids; "
        "(sleep 61 & echo $! >> pids; wait) & "
        "sh -c 'trap \"\" TERM; sleep 62 & echo $! >> pids; wait' & "
        # Print only once all three children wrote their pids, so the timeout finds them.
        "while [ $(cat pids | wc -l) -lt 3 ]; do sleep 0.05; done; "
        "echo $$ >> pids; echo up; wait"
    )
    st = run_command(spec(tmp_path, script, activity_timeout=1.0))
    assert st.timeout_fired is TimeoutKind.ACTIVITY
    pids = pids_in(tmp_path / "pids")
    assert len(pids) == 4
    assert_all_gone(pids)


def test_a_grandchild_holding_the_pipe_cannot_hang_the_runner(tmp_path: pathlib.Path) -> None:
    # setsid: the grandchild leaves the session; it keeps stdout open after the shell exits.
    st = run_command(spec(tmp_path, "setsid sh -c 'echo $$ > held; sleep 30' & echo bye"))
    assert st.state is RunState.EXITED
    assert st.exit_code == 0
    assert "bye" in st.last_output
    held = pids_in(tmp_path / "held")
    for pid in held:  # not ours to keep; the detached runner (below) catches these
        psutil.Process(pid).kill()


def test_the_detached_runner_kills_even_escaped_grandchildren(tmp_path: pathlib.Path) -> None:
    s = spec(tmp_path, "setsid sh -c 'echo $$ > held; exec sleep 30' & echo bye; sleep 0.3")
    path = tmp_path / "spec.json"
    path.write_text(s.model_dump_json())
    done = subprocess.run(
        [sys.executable, "-m", "politerm.bridge.runner", str(path)], timeout=60, check=False
    )
    assert done.returncode == 0
    st = read_status(s.status_path)
    assert st is not None
    assert st.succeeded
    assert_all_gone(pids_in(tmp_path / "held"))


def test_output_is_redacted_on_disk(tmp_path: pathlib.Path) -> None:
    secret = "sk-proj-" + "a" * 40
    st = run_command(
        spec(tmp_path, f"echo key={secret}; echo pw=hunter2 >&2", redact_patterns=["hunter2"])
    )
    assert st.succeeded
    out = tmp_path / "out"
    everything = "".join(p.read_text() for p in out.iterdir())
    assert secret not in everything
    assert "hunter2" not in everything
    assert "[REDACTED" in (out / "c1.stdout.log").read_text()


def test_unterminated_output_and_no_capture(tmp_path: pathlib.Path) -> None:
    st = run_command(spec(tmp_path, "printf 'no newline'; printf e >&2", capture_stderr=False))
    assert st.succeeded
    assert (tmp_path / "out" / "c1.stdout.log").read_text() == "no newline"
    assert not (tmp_path / "out" / "c1.stderr.log").exists()
    assert st.stderr_path is None


def test_environment_reaches_the_command(tmp_path: pathlib.Path) -> None:
    st = run_command(spec(tmp_path, 'echo "[$POLI_X]"', env={"POLI_X": "y z"}))
    assert st.succeeded
    assert (tmp_path / "out" / "c1.stdout.log").read_text() == "[y z]\n"
    assert os.environ.get("POLI_X") is None
