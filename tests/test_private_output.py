"""Agent text never reaches the user's terminal as control sequences; politerm's files are private.

The planner of a real loop (fake agents, private tmux server) answers with a final report
in a body file holding OSC 52 (clipboard write), OSC 0 (window title) and ``ESC[2J``.
``poli task`` and ``poli status`` must show them escaped; every file politerm wrote must be
0600 and every folder it made 0700, parents included.
"""

from __future__ import annotations

import os
import pathlib
import stat
import subprocess
import sys
import typing as t

from politerm.testing.retry import retry_until
from tests.loophelpers import EXECUTER_OK, IDS, PLAN, PLANNER_HEAD, rule, write_project

if t.TYPE_CHECKING:
    import libtmux

# OSC 0 / OSC 2 (title) and ESC k (tmux window name) in the request itself.
RETITLE = "\x1b]0;req-pwned\x07\x1b]2;req-pwned\x07\x1bkreq-pwned\x1b\\"
HOSTILE = "Report: \x1b]52;c;aGk=\x07 then \x1b]0;pwned\x07 and \x1b[2J and \x9b31m done"
FINAL_FILE = (
    "Done.\n\n```\n"
    '[[POLI:MSG {"to":"USER","type":"final","id":"{id}","nonce":"{nonce}",'
    '"file":"msgs/{id}-final.md"}]]\n<REPORT>\nsee the file\n</REPORT>\n[[/POLI:MSG]]\n```\n'
)
PLANNER = (
    PLANNER_HEAD
    + "[[rules]]\n"
    + f"match = '(?s)\\A\\s*EXECUTER replied:{IDS}'\n"
    + 'write_file = { path = "msgs/{id}-final.md", content = "'
    + HOSTILE.encode("unicode_escape").decode().replace("\\x", "\\u00")
    + '" }\n'
    + f"reply = '''{FINAL_FILE}'''\n\n"
    + rule(r"\A(?=TASK_ID=)", PLAN)
)


def _poli(cwd: pathlib.Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "politerm", *args],
        cwd=cwd,
        capture_output=True,
        timeout=90,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


def _raw_controls(data: bytes) -> list[bytes]:
    text = data.decode("utf-8", "replace")
    return [
        ch.encode("unicode_escape")
        for ch in set(text)
        if (ord(ch) < 0x20 and ch not in "\n\t") or 0x7F <= ord(ch) <= 0x9F
    ]


def test_agent_text_is_escaped_and_files_are_private(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    assert server.socket_name is not None
    root = tmp_path / "proj"
    write_project(root, server.socket_name, planner=PLANNER, executer=EXECUTER_OK)
    assert _poli(root, "up").returncode == 0
    try:
        task = _poli(root, "task", f"make hello {RETITLE}", "--id", "T-esc", "--timeout", "60")
        assert task.returncode == 0, task.stderr
        status = _poli(root, "status")
        nocolor = _poli(root, "--no-color", "status")
        # The control window (poli status --watch) shows the request escaped: neither its
        # title nor any window's name is what the request (or an agent) asked for.
        tmux = ["tmux", "-L", server.socket_name]
        control = [*tmux, "capture-pane", "-p", "-t", "=t:control"]

        def shown() -> bool:
            out = subprocess.run(control, capture_output=True, text=True, check=True)
            return "make hello" in out.stdout  # the request, drawn by poli status --watch

        retry_until(shown, 30, what="the request in the control window")
        windows = subprocess.run(
            [*tmux, "list-windows", "-t", "=t", "-F", "#{window_name}\t#{pane_title}"],
            capture_output=True, text=True, check=True,
        ).stdout.splitlines()  # fmt: skip
    finally:
        _poli(root, "down")
    names = [w.split("\t")[0] for w in windows]
    assert names[0] == "control" and not [n for n in names if "pwned" in n], windows
    assert "pwned" not in windows[0].split("\t")[1], windows
    for out in (task, status, nocolor):
        assert _raw_controls(out.stdout + out.stderr) == [], out.stdout[-1500:]
    assert b"\\x1b]52;c;aGk=\\x07" in task.stdout, task.stdout[-1500:]
    assert b"\\x1b]0;pwned" in status.stdout + task.stdout
    assert b"\\x1b[2J" in task.stdout

    # Every file politerm wrote is 0600, every folder it made 0700 (parents included).
    state = pathlib.Path(os.environ["XDG_STATE_HOME"])
    home = pathlib.Path(os.environ["HOME"])
    made = [home / ".local", state, *state.rglob("*")]
    made += [p for p in root.iterdir() if p.name.startswith("runs.sqlite3")]
    made += [p for p in root.rglob("*") if ".poli" in p.parts]
    bad = []
    for path in made:
        if not path.exists() or path.is_socket():
            continue
        mode = stat.S_IMODE(path.stat().st_mode)
        want = 0o700 if path.is_dir() else 0o600
        if mode != want:
            bad.append(f"{path}: {oct(mode)}")
    assert bad == []


def _on_a_terminal(cwd: pathlib.Path, *args: str, env: dict[str, str]) -> bytes:
    """What ``poli ARGS`` writes to a real pseudo-terminal, until it exits."""
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "politerm", *args], cwd=cwd, stdout=follower, stderr=follower,
        env={**os.environ, "TERM": "xterm-256color", "COLUMNS": "200", **env},
    )  # fmt: skip
    os.close(follower)
    out = b""
    while chunk := _read(leader):
        out += chunk
    os.close(leader)
    assert proc.wait(timeout=60) == 0, out[-800:]
    return out


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # EIO: the program exited and closed the terminal
        return b""


def test_a_terminal_gets_colour_unless_no_color_and_agent_text_always_escaped(
    tmp_path: pathlib.Path,
) -> None:
    from politerm.store import RunStore

    (tmp_path / "poli.toml").write_text('[store]\npath = "r.sqlite3"\n')
    with RunStore.open(tmp_path / "r.sqlite3") as store:
        store.create_task("T1", "ask \x1b[31mred\x1b[0m then \x1b]0;pwn\x07 end", max_rounds=2)
    colour = _on_a_terminal(tmp_path, "status", env={})
    assert b"\x1b[1m" in colour  # politerm's own table is styled on a colour terminal
    nocolor = _on_a_terminal(tmp_path, "--no-color", "status", env={})
    for out in (nocolor, _on_a_terminal(tmp_path, "status", env={"NO_COLOR": "1"})):
        # No style sequence at all, not even politerm's own shown escaped.
        assert _raw_controls(out.replace(b"\r\n", b"\n")) == [], out[-800:]
        assert b"\\x1b[1m" not in out and b"\\x1b[0m\\x1b" not in out, out[-800:]
    for out in (colour, nocolor):
        assert b"ask \\x1b[31mred\\x1b[0m then \\x1b]0;pwn\\x07 end" in out, out[-800:]
        assert b"\x1b]0;" not in out
