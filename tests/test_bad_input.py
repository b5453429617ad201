"""A corpus of bad input through every command that reads input: one line, never a traceback.

Each case runs the real ``poli`` in a subprocess, in a fresh project directory with its own
HOME, and checks: a non-zero exit, no traceback anywhere, and an error line that says what
and where.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import typing as t

import pytest

DIR = b"<dir>"
BINARY = b"\x00\x01\x02binary\xff\xfe\n"
BAD_UTF8 = b"title: ok\n\xff\xfe not utf-8\n"
PIPE_HEAD = b"name: p\ntimeout_min: 5\n"
PIPE = PIPE_HEAD + b"\n1 | developer | - | auto | - | - | Do it\n"
BD_CONFIG = b'[epic]\nsource = "bd"\nbd = "./bd"\n'
BD_NOT_UTF8 = b"#!/bin/sh\nprintf '\\377\\376'\n"  # an executable: a bd that prints bytes
RECORD_HEAD = b'{"id": "s1", "kind": "session", "epic": "E", '


class Case(t.NamedTuple):
    test_id: str
    args: tuple[str, ...]
    files: dict[str, bytes]
    expect: str  # a piece of the error line that says what / where
    env: dict[str, str] = {}  # noqa: RUF012  # NamedTuple default, never mutated
    stdin: bytes = b""


CASES = [
    Case("config-is-directory", ("status",), {"poli.toml": DIR}, "poli.toml: is a directory"),
    Case("config-not-toml", ("status",), {"poli.toml": b"[tmux\nx=1"}, "poli.toml"),
    Case("config-binary", ("status",), {"poli.toml": BINARY}, "poli.toml"),
    Case("config-bad-value", ("status",), {"poli.toml": b"[timeouts]\nplan = -3\n"}, "plan"),
    Case(
        "config-absurd-width",
        ("config",),
        {"poli.toml": b"[tmux]\nwidth = 100000000\n"},
        "width",
    ),
    Case(
        "config-unknown-profile",
        ("config",),
        {"poli.toml": b'[agents.PLANNER]\ncommand = "claude"\nprofile = "nosuch"\n'},
        "agents.PLANNER.profile: no agent profile 'nosuch'",
    ),
    Case(
        "up-missing-template",
        ("up",),
        {"poli.toml": b'[templates]\nplan = "gone.txt"\n'},
        "templates.plan: cannot read",
    ),
    Case(
        "up-missing-working-directory",
        ("up",),
        {"poli.toml": b'[agents.PLANNER]\ncwd = "nowhere"\n'},
        "nowhere: not a directory; create it or set agents.PLANNER.cwd",
    ),
    Case(
        "config-bad-template",
        ("config",),
        {"poli.toml": b'[templates]\nplan = "t.txt"\n', "t.txt": b"{nosuchfield}\n"},
        "templates.plan: unknown field",
    ),
    Case("columns-absurd", ("status",), {}, "COLUMNS=99999999", {"COLUMNS": "99999999"}),
    Case("columns-not-a-number", ("status",), {}, "COLUMNS", {"COLUMNS": "wide"}),
    Case("store-missing", ("status", "--store", "/proc/nope/x.sqlite3"), {}, "no run store there"),
    Case("store-is-not-sqlite", ("status", "--store", "s.sqlite3"), {"s.sqlite3": BINARY}, "s."),
    Case("task-not-utf8", ("task", "ab\udcffcd"), {}, "argument 2 is not valid UTF-8"),
    Case("answer-not-utf8", ("answer", "T1", "\udcfe"), {}, "not valid UTF-8"),
    Case(
        "pipeline-binary", ("pipeline", "validate", "b.pipeline"), {"b.pipeline": BINARY}, "b.pip"
    ),
    Case(
        "pipeline-include-cycle",
        ("pipeline", "validate", "a.pipeline"),
        {"a.pipeline": PIPE_HEAD + b"@include a.pipeline\n"},
        "include cycle",
    ),
    Case(
        "pipeline-missing-include",
        ("pipeline", "validate", "m.pipeline"),
        {"m.pipeline": PIPE_HEAD + b"@include gone.steps\n"},
        "gone.steps",
    ),
    Case(
        "pipeline-include-binary",
        ("pipeline", "validate", "i.pipeline"),
        {"i.pipeline": PIPE_HEAD + b"@include bin.steps\n", "bin.steps": BINARY},
        "bin.steps",
    ),
    Case("pipeline-is-directory", ("pipeline", "validate", "d"), {"d": DIR}, "d"),
    Case("pipeline-missing", ("pipeline", "show", "nosuch"), {}, "nosuch"),
    Case(
        "run-binary-pipeline",
        ("run", "./b.pipeline", "--task", "x", "--cli", "fake"),
        {"b.pipeline": BINARY},
        "b.pipeline",
    ),
    Case("import-binary", ("import", "r.jsonl"), {"r.jsonl": BINARY}, "UTF-8"),
    Case(
        "import-bad-record",
        ("import", "r.jsonl"),
        {"r.jsonl": b'{"x": 1}\n'},
        "r.jsonl:1: unknown record keys: x",
    ),
    Case(
        "import-missing-keys",
        ("import", "r.jsonl"),
        {"r.jsonl": b'{"id": "s1"}\n'},
        "r.jsonl:1: missing record keys: kind, epic, status, queued",
    ),
    Case(
        "import-wrong-type",
        ("import", "r.jsonl"),
        {"r.jsonl": RECORD_HEAD + b'"status": "success", "queued": "soon"}\n'},
        "r.jsonl:1: record key queued: expected float, got 'soon'",
    ),
    Case(
        "import-unknown-status",
        ("import", "r.jsonl"),
        {"r.jsonl": RECORD_HEAD + b'"status": "great", "queued": 1}\n'},
        "r.jsonl:1: record key status: expected one of",
    ),
    Case("import-not-json", ("import", "r.jsonl"), {"r.jsonl": b"{nope\n"}, "r.jsonl"),
    Case("import-directory", ("import", "d"), {"d": DIR}, "d"),
    Case(
        "work-body-not-utf8",
        ("work", "add", "E1", "title", "--body-file", "b.txt"),
        {"b.txt": BAD_UTF8},
        "b.txt: not valid UTF-8",
    ),
    Case("work-title-not-utf8", ("work", "add", "E1", "t\udcff"), {}, "not valid UTF-8"),
    Case("status-no-such-project", ("status", "--project", "/nonexistent"), {}, "/nonexistent"),
    Case("status-no-such-store-dir", ("status", "--store", "/nonexistent/x"), {}, "/nonexistent"),
    Case("go-no-such-epic", ("go", "nosuchepic", "--yes"), {}, "no epic 'nosuchepic'"),
    Case("gate-no-such-run", ("gate", "y", "--run-id", "nope"), {}, "no pipeline run 'nope'"),
    Case(
        "work-after-itself",
        ("work", "add", "E1", "t", "--id", "E1-1", "--after", "E1-1"),
        {},
        "cannot depend on itself",
    ),
    Case("export-into-directory", ("export", "--jsonl", "--output", "d"), {"d": DIR}, "d"),
    Case("import-stdin-binary", ("import", "-"), {}, "UTF-8", stdin=BINARY),
    Case(
        "bridge-submit-stdin-binary",
        ("bridge", "submit", "-"),
        {},
        "<stdin>: not JSON",
        stdin=BINARY,
    ),
    Case(
        "bridge-submit-file-binary",
        ("bridge", "submit", "t.json"),
        {"t.json": BINARY},
        "t.json: not JSON",
    ),
    Case("bridge-submit-directory", ("bridge", "submit", "d"), {"d": DIR}, "d"),
    Case(
        "manager-goal-not-utf8",
        ("manager", "goal", "--project", "web", "go \udcff"),
        {},
        "not valid UTF-8",
    ),
    Case("send-text-not-utf8", ("send", "--to", "PLANNER", "\udcff"), {}, "not valid UTF-8"),
    Case("reply-not-utf8", ("reply", "--to", "m1", "\udcff"), {}, "not valid UTF-8"),
    Case(
        "go-bd-prints-not-utf8",
        ("go", "E", "--yes"),
        {"poli.toml": BD_CONFIG, "bd": BD_NOT_UTF8},
        "`bd ready --parent E` printed text that is not valid UTF-8",
    ),
    Case(
        "resume-state-not-utf8",
        ("resume",),
        {".poli/state.R1": BINARY},
        ".poli/state.R1: not a pipeline state file",
    ),
    Case(
        "status-state-not-utf8",
        ("status",),
        {".poli/state.R1": BINARY},
        ".poli/state.R1: not a pipeline state file",
    ),
]

# Every command reads the project's poli.toml (here a directory) before it does anything
# else; a command added to `poli` must be added here (the last test checks that).
DIR_CONFIG = {"poli.toml": DIR, ".poli/pipelines/p.pipeline": PIPE, "r.jsonl": b""}
EVERY_COMMAND: dict[str, tuple[str, ...]] = {
    "abort": (), "answer": ("T1", "x"),
    "approve": ("PLANNER",), "attach": (), "bridge": ("list",), "config": (), "dash": (),
    "doctor": (), "down": (), "export": (), "fleet": ("status",), "gate": ("y",),
    "go": ("E", "--yes"), "import": ("r.jsonl",), "inbox": (), "list": (), "log": (),
    "manager": ("status",), "mcp": (), "msg": ("list",), "node": (), "notify": (), "panes": (),
    "pipeline": ("show", "p"), "reply": ("x",), "resume": ("--run-id", "R1"), "route": (),
    "run": ("p", "--task", "x"), "send": ("--to", "PLANNER", "x"), "status": (),
    "summarize": ("E",), "task": ("x",), "up": (), "web": (), "work": ("list",),
}  # fmt: skip
#: Commands that read no poli.toml, and why.
NO_PROJECT_INPUT = {
    "completion": "prints the completion script of a shell",
    "demo": "runs in a scratch directory of its own, on the bundled fake agents",
    "agents": "reads only agent profiles: see the agents-profile-not-utf8 case",
}
CASES += [
    Case(f"every-command-{name}", (name, *args), DIR_CONFIG, "poli.toml: is a directory")
    for name, args in EVERY_COMMAND.items()
]
_FLEET_NO_PASSWORD = b'[fleet]\nurl = "redis://10.0.0.5:6379/0"\n'
CASES += [
    Case("fleet-budget-config-dir", ("fleet", "budget"), DIR_CONFIG, "poli.toml: is a directory"),
    Case(
        "fleet-unauthenticated-remote",
        ("fleet", "budget"),
        {"poli.toml": _FLEET_NO_PASSWORD},
        "refused: Redis on another machine needs an ACL user",
    ),
    Case(
        "fleet-status-unauthenticated-remote",
        ("fleet", "status"),
        {"poli.toml": _FLEET_NO_PASSWORD},
        "refused: Redis on another machine needs an ACL user",
    ),
    Case(
        "fleet-bad-url",
        ("fleet", "status"),
        {"poli.toml": b'[fleet]\nurl = "redis://u:pw@h:99999"\n'},
        "fleet.url: expected a redis:// or rediss:// URL",
    ),
    Case(
        "fleet-redis-down",
        ("fleet", "budget"),
        {"poli.toml": b'[fleet]\nurl = "redis://127.0.0.1:1/0"\ntimeout = 2\n'},
        "cannot reach Redis at redis://127.0.0.1:1/0",
    ),
]


def _run(tmp_path: pathlib.Path, case: Case) -> subprocess.CompletedProcess[bytes]:
    project = tmp_path / "proj"
    project.mkdir()
    for name, data in case.files.items():
        path = project / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if data == DIR:
            path.mkdir()
        else:
            path.write_bytes(data)
            if data.startswith(b"#!"):
                path.chmod(0o700)
    env = {**os.environ, **case.env}
    env.pop("POLI_DEBUG", None)
    # The arguments may hold lone surrogates: bytes that are not UTF-8, as a shell passes them.
    argv = [os.fsencode(a) for a in (sys.executable, "-m", "politerm", *case.args)]
    return subprocess.run(
        argv, cwd=project, env=env, capture_output=True, timeout=60, check=False, input=case.stdin
    )


@pytest.mark.parametrize("case", CASES, ids=[c.test_id for c in CASES])
def test_bad_input_is_one_line_never_a_traceback(tmp_path: pathlib.Path, case: Case) -> None:
    proc = _run(tmp_path, case)
    out = proc.stdout.decode("utf-8", "replace")
    err = proc.stderr.decode("utf-8", "replace")
    assert "Traceback" not in out + err, err
    assert proc.returncode != 0, f"exit 0 for {case.args}: {out[-400:]}"
    assert proc.returncode != 70, f"internal error for {case.args}: {err}"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if not lines and case.args[0] == "doctor":
        # The doctor's report is its output: the config row says what is wrong.
        assert f"FAIL\t{case.expect}" in out or case.expect in out, out
        return
    if not lines and case.args[:2] == ("pipeline", "validate"):
        # A validator's report is its output: one `file:line: problem` line per problem.
        lines = [ln for ln in out.splitlines() if ln.strip()]
        assert all(":" in ln for ln in lines), lines
        assert any(case.expect in ln for ln in lines), f"{case.expect!r} not in {lines}"
        return
    assert lines, f"nothing on stderr for {case.args}; stdout: {out[-400:]}"
    if lines[-1].startswith("Error:"):
        message = lines[-1]  # click's usage errors: usage, hint, then one "Error:" line
    else:
        assert len(lines) == 1, f"more than one line: {lines}"
        message = lines[0]
    assert message.startswith(("poli:", "Error:")), message
    assert case.expect in message, f"{case.expect!r} not in {message!r}"


def test_poli_debug_shows_the_traceback_of_an_os_error(tmp_path: pathlib.Path) -> None:
    """With POLI_DEBUG=1 an error from outside politerm shows its traceback (for bug reports)."""
    (tmp_path / "poli.toml").write_text('[store]\npath = "/proc/nope/x.sqlite3"\n')
    argv = [sys.executable, "-m", "politerm", "work", "list"]
    plain = subprocess.run(argv, cwd=tmp_path, capture_output=True, timeout=60, check=False)
    assert plain.returncode == 1 and b"Traceback" not in plain.stderr
    assert plain.stderr.decode().startswith("poli: cannot use /proc/nope"), plain.stderr
    debug = subprocess.run(
        argv,
        cwd=tmp_path,
        env={**os.environ, "POLI_DEBUG": "1"},
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert debug.returncode != 0
    assert b"Traceback" in debug.stderr


def test_the_corpus_walks_every_command() -> None:
    """A command `poli` gains is walked with a broken poli.toml, or says why it reads none."""
    from politerm.cli import _COMMANDS

    assert set(EVERY_COMMAND) | set(NO_PROJECT_INPUT) == set(_COMMANDS)
    assert not set(EVERY_COMMAND) & set(NO_PROJECT_INPUT)
