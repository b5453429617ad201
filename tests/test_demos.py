"""`poli demo NAME`: every workflow's demo runs on a clean HOME and leaves nothing behind.

Each demo is run as the README's line ``poli demo NAME`` is typed (``sh -c``, the venv's
``bin/`` first on PATH), its output piped and COLUMNS unset; tests/test_readme.py counts
these runs as driving those README lines.
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import typing as t

import ptyprocess
import pytest

from politerm.demos import NAMES
from politerm.testing.retry import retry_until


class Case(t.NamedTuple):
    test_id: str
    argv: tuple[str, ...]
    expect: tuple[str, ...]


CASES = [
    Case(
        "loop",
        ("loop",),
        (
            "task T",
            # A hop's event line is whole when piped, however long (no wrap at 80 columns).
            " delivered    [EXECUTER] PLANNER → EXECUTER: plan (1 submit, ",
            "executer/hello.txt: Hello, world!",
        ),
    ),
    Case(
        "pipeline",
        ("pipeline",),
        (
            "step 2: gate approved (--auto-approve)",
            "run demo: done; 3 steps appended their notes to .handoff.md",
            "Notes from step 1 (attempt 1): done.\n\nNotes from step 2",
            "demo pipeline: done",
        ),
    ),
    Case(
        "epic",
        ("epic",),
        (
            "queued 3 work items in epic DEMO",
            "demo-1: success  Do demo-1: Add a --verbose flag",
            "demo-2: needs_help",
            "demo-3: success",
            "summary: Summary part 1 of 1",
            "demo epic: done",
        ),
    ),
    Case(
        "manager",
        ("manager",),
        (
            "waiting_dev_report: step 1: Create hello.py",
            "task_complete: all done",
            "after 3 steps: all done",
            "dev report 3: Did: Run the tests",
            "demo manager: done",
        ),
    ),
    Case(
        "messaging",
        ("messaging",),
        (
            "PLANNER → EXECUTER: m-",
            ": delivered into EXECUTER's pane, submit confirmed",
            ": responded (READONLY, PLANNER → EXECUTER)",
            "response: notes.txt lists 2 flags",
            "-r: the response line was pasted into PLANNER's pane",
            "demo messaging: done",
        ),
    ),
    Case(
        "bridge",
        ("bridge",),
        (
            "task demo-edit: completed\ntask demo-bad-marker: failed",
            "--quiet  say nothing\n--verbose  say what is happening",
            "no line contains the marker '--no-such-flag'",
            "demo bridge: done",
        ),
    ),
]


def test_every_demo_has_a_case() -> None:
    assert [c.argv[0] for c in CASES] == [c.test_id for c in CASES]
    assert {c.test_id for c in CASES} == set(NAMES)
    kept = set(IN_TMUX) | {c.test_id for c in KEPT_WITHOUT_TMUX}
    assert kept == set(NAMES)


@pytest.fixture(autouse=True)
def _short_sockets(tmp_path: pathlib.Path, short_dir: pathlib.Path) -> None:
    # The demos' sockets under tmp_path/sockets: a link to a short path, which tmux resolves
    # (a worker's tmp_path is too deep for a socket name such as poli-demo-messaging-8122).
    (tmp_path / "sockets").symlink_to(short_dir, target_is_directory=True)


def _env(tmp_path: pathlib.Path) -> dict[str, str]:
    scratch, sockets = tmp_path / "tmp", tmp_path / "sockets"
    scratch.mkdir(exist_ok=True)
    sockets.mkdir(exist_ok=True)
    bindir = str(pathlib.Path(sys.executable).parent)  # where `poli` itself is
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "POLI_DEBUG")}
    return {
        **env,
        "TMPDIR": str(scratch),
        "TMUX_TMPDIR": str(sockets),
        "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def _demo(tmp_path: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``poli demo ARGS`` as typed in a shell."""
    return subprocess.run(
        ["sh", "-c", shlex.join(["poli", "demo", *args])],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(tmp_path),
        check=False,
    )


def _leftovers(tmp_path: pathlib.Path) -> list[str]:
    """Scratch directories and tmux sockets still there."""
    left = [p.name for p in (tmp_path / "tmp").iterdir()]
    left += [str(p) for p in (tmp_path / "home").rglob("*") if not p.is_dir()]
    left += [str(p) for p in (tmp_path / "sockets").rglob("*") if not p.is_dir()]
    return left


@pytest.mark.parametrize("case", CASES, ids=[c.test_id for c in CASES])
def test_demo_finishes_prints_its_summary_and_cleans_up(tmp_path: pathlib.Path, case: Case) -> None:
    out = _demo(tmp_path, *case.argv)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr, out.stderr
    assert out.stderr == "", out.stderr  # nothing but what it says it did
    name = case.argv[0]
    assert out.stdout.startswith(f"demo {name}: starting in a scratch directory of its own\n")
    for text in case.expect:
        assert text in out.stdout, out.stdout
    assert out.stdout.endswith(
        "\ncleaned up: its scratch directory and tmux server (if any) are gone\n"
        f"to look around in them, run it again with: poli demo {name} --keep\n"
        f"demo {name}: done\n"
    ), out.stdout
    assert _leftovers(tmp_path) == []
    # Nothing written where the demo was started.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "sockets", "tmp"]


def _socket_of(tmp_path: pathlib.Path) -> pathlib.Path:
    return retry_until(
        lambda: next((tmp_path / "sockets").resolve().rglob("poli-demo-*"), None),
        5,
        what="the kept demo's tmux socket",
    )


def _clients(socket: pathlib.Path) -> str:
    tmux = shutil.which("tmux")
    assert tmux is not None, "tmux is not installed (scripts/_setup.sh installs it)"
    out = subprocess.run(
        [tmux, "-S", str(socket), "list-clients", "-F", "#{client_session}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip()


#: Demos whose agents run in a session of their own tmux server (the others have no pane).
IN_TMUX = ("loop", "pipeline", "manager", "messaging")


class KeptCase(t.NamedTuple):
    test_id: str
    shows: tuple[str, ...]


KEPT_WITHOUT_TMUX = [
    KeptCase("bridge", ("demo-bad-marker", "no line contains the marker")),
    KeptCase("epic", ("demo-2", "needs_help", "Do demo-1: Add a --verbose flag")),
]


@pytest.mark.parametrize("case", KEPT_WITHOUT_TMUX, ids=[c.test_id for c in KEPT_WITHOUT_TMUX])
def test_kept_demo_without_panes_prints_look_and_teardown_commands_that_work(
    tmp_path: pathlib.Path, case: KeptCase
) -> None:
    out = _demo(tmp_path, case.test_id, "--keep")
    assert out.returncode == 0, out.stdout + out.stderr
    look = re.search(r"^  look:\s+(.+)$", out.stdout, re.MULTILINE)
    down = re.search(r"^  tear down:\s+(.+)$", out.stdout, re.MULTILINE)
    assert look is not None and down is not None, out.stdout
    env = _env(tmp_path)
    shown = subprocess.run(
        ["sh", "-c", look[1]], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert shown.returncode == 0, shown.stdout + shown.stderr
    for text in case.shows:
        assert text in shown.stdout, shown.stdout
    subprocess.run(["sh", "-c", down[1]], env=env, timeout=60, check=True)
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("name", IN_TMUX)
def test_kept_demo_prints_attach_and_teardown_commands_that_work(
    tmp_path: pathlib.Path, name: str
) -> None:
    # The loop is the default demo: `poli demo --keep` runs it.
    out = _demo(tmp_path, *([] if name == "loop" else [name]), "--keep")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith(f"demo {name}: starting"), out.stdout
    look = re.search(r"^  look:\s+(.+)$", out.stdout, re.MULTILINE)
    down = re.search(r"^  tear down:\s+(.+)$", out.stdout, re.MULTILINE)
    assert look is not None and down is not None, out.stdout
    assert look[1].startswith("poli attach --project ")
    assert _leftovers(tmp_path) != []
    socket = _socket_of(tmp_path)

    # The printed attach command finds the kept session: run it in a real terminal.
    env = _env(tmp_path)
    attach = ptyprocess.PtyProcess.spawn(["sh", "-c", look[1]], env=env, dimensions=(40, 120))
    try:
        session = retry_until(lambda: _clients(socket), 20, what=f"{look[1]!r} to attach")
        assert session.startswith(("demo-", "poli-poli-demo-")), session
    finally:
        attach.terminate(force=True)

    teardown = subprocess.run(
        ["sh", "-c", down[1]], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert teardown.returncode == 0, teardown.stdout + teardown.stderr
    assert "down:" in teardown.stdout and "nothing was running" not in teardown.stdout
    assert _leftovers(tmp_path) == []
