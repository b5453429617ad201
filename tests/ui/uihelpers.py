"""A loop of fake agents, a ``poli web`` process and a browser, for the UI tests."""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import shutil
import subprocess
import sys
import threading
import typing as t

import pytest

from tests.loophelpers import (
    EXECUTER_HEAD,
    PLANNER_OK,
    RESULT,
    block,
    rule,
    write_project,
)

if t.TYPE_CHECKING:
    from playwright.async_api import Browser

CHROMIUM = "/usr/bin/chromium"
DOCS_IMAGES = pathlib.Path(__file__).resolve().parents[2] / "docs" / "images"

APPROVAL_RULE = (
    'approval = "Bash(echo hi > out.txt)"\n'
    'write_file = { path = "out.txt", content = "hi\\n" }\n'
    f"deny_reply = '''{block('PLANNER', 'result', 'Not run: denied.', tag='RESULT')}'''\n"
)
EXECUTER_ASKS = EXECUTER_HEAD + rule(r"\AYou received a PLANNER plan block:", RESULT, APPROVAL_RULE)


def ask_project(root: pathlib.Path, socket: str, *, transcripts: bool = False) -> pathlib.Path:
    """A loop whose EXECUTER asks to run ``echo hi > out.txt``; approvals wait for a person.

    With ``transcripts`` the fake agents keep transcripts with usage (their tokens count).
    """
    return write_project(
        root, socket, planner=PLANNER_OK, executer=EXECUTER_ASKS, transcripts=transcripts,
        extra='[routing]\napproval = "ask"\n\n[notify]\ndesktop = false\n',
    )  # fmt: skip


def poli(
    root: pathlib.Path,
    *args: str,
    env: dict[str, str] | None = None,
    exe: t.Sequence[str] = (sys.executable, "-m", "politerm"),
) -> subprocess.Popen[str]:
    """``poli ARGS`` as a real process in the project directory (``env`` added to ours).

    ``exe`` is the command that is ``poli`` (by default this checkout's, run by our python).
    """
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.Popen(
        [*exe, *args],
        cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


WEB_OUTPUT: dict[str, list[str]] = {}
"""What each ``poli web`` of this process printed after its address, by that address."""


@contextlib.contextmanager
def web(
    root: pathlib.Path,
    *args: str,
    env: dict[str, str] | None = None,
    exe: t.Sequence[str] = (sys.executable, "-m", "politerm"),
) -> t.Iterator[str]:
    """``poli web ARGS`` running; yields the URL with the token it printed.

    What it prints after the address is read all along (a full pipe would stall it) and
    kept in :data:`WEB_OUTPUT` under the URL, for a failing test's message.
    """
    proc = poli(root, "web", *args, env=env, exe=exe)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()  # the first line is the address (or poli exited)
        found = re.search(r"(http://\S+)", line)
        if found is None:
            proc.kill()
            _, err = proc.communicate(timeout=10)
            pytest.fail(f"poli web did not print its address: {line!r} {err!r}")
        said = WEB_OUTPUT.setdefault(found.group(1), [])
        for pipe in (proc.stdout, proc.stderr):
            threading.Thread(target=said.extend, args=(pipe,), daemon=True).start()
        yield found.group(1)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def base_and_token(url: str) -> tuple[str, str]:
    """``http://host:port`` and the token of a printed address."""
    base, _, query = url.partition("/?")
    return base, query.removeprefix("token=")


def chromium_path() -> str:
    """Debian's chromium, which scripts/_setup.sh installs; a clear failure without it."""
    path = shutil.which("chromium") or (CHROMIUM if pathlib.Path(CHROMIUM).exists() else None)
    if path is None:
        pytest.fail("chromium is not installed: run scripts/_setup.sh (apt-get install chromium)")
    return path


@contextlib.asynccontextmanager
async def browser(*args: str) -> t.AsyncIterator[Browser]:
    """A headless chromium driven by playwright (``args`` added to its command line)."""
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        b = await pw.chromium.launch(
            executable_path=chromium_path(), args=["--no-sandbox", "--disable-gpu", *args]
        )
        try:
            yield b
        finally:
            await b.close()


def screenshot_path(tmp_path: pathlib.Path, name: str) -> pathlib.Path:
    """Where a test saves a screenshot: docs/images with POLI_SCREENSHOTS=1, else tmp."""
    if os.environ.get("POLI_SCREENSHOTS") == "1":
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        return DOCS_IMAGES / name
    return tmp_path / name
