"""Window 0 of a run's session: live progress, questions and errors; answers with one key.

It redraws the run's status whenever it changes and, while the runner waits on a question
(a gate, a failed step, a merge conflict), takes ``y``/``n``/``r``/``s`` from the keyboard —
the same answers ``poli gate`` gives. It ends when the run has ended.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import termios
import tty
import typing as t

from politerm._internal.sanitize import escape_controls, trusted_stdout
from politerm.errors import PipelineError
from politerm.pipeline.model import FINISHED_RUN, RunStatus
from politerm.pipeline.ops import format_status, open_project, run_status
from politerm.pipeline.state import ANSWERS, answer_question

if t.TYPE_CHECKING:
    import pathlib

_CLEAR = "\x1b[H\x1b[2J"


def control(project: pathlib.Path, run_id: str, *, interval: float = 0.25) -> int:
    """Show run ``run_id`` until it ends, answering questions from the keyboard."""
    _, store = open_project(project)
    fd = sys.stdin.fileno()
    saved = None
    if os.isatty(fd):
        saved = termios.tcgetattr(fd)
        tty.setcbreak(fd)
    shown = ""
    note = ""
    try:
        while True:
            data: dict[str, t.Any] | None = None
            try:
                data = run_status(store, project, run_id)
            except PipelineError as exc:
                text = f"run {run_id}: {exc}"
            else:
                text = format_status(data)
                if data["question"]:
                    text += "\n\nAnswer here: press y, n, r or s (or run `poli gate`)."
            if note:
                text += f"\n{note}"
            if text != shown:
                # Run text comes from agents and pipeline files: escaped; only our own
                # clear-screen goes through as a control sequence.
                safe = escape_controls(text).replace("\n", "\r\n")
                with trusted_stdout():
                    sys.stdout.write(_CLEAR + safe + "\r\n")
                    sys.stdout.flush()
                shown = text
            if data is not None and RunStatus(data["status"]) in FINISHED_RUN:
                return 0
            ready, _, _ = select.select([fd], [], [], interval)
            if not ready:
                continue
            key = os.read(fd, 1).decode(errors="replace").lower()
            if key in ANSWERS and data is not None and data["question"]:
                try:
                    answer_question(store, run_id, key, by="control window")
                    note = f"answered {key}"
                except PipelineError as exc:
                    note = str(exc)
    finally:
        if saved is not None:
            with contextlib.suppress(termios.error):
                termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        store.close()
