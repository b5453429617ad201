"""How an instruction reaches the dev agent and its report comes back.

:class:`DevChannel` is what the engine needs. :class:`FileChannel` serves IDE agents that
politerm cannot type into (Cursor and the like): the instruction is written atomically to
``<project>/dev_instructions/next_step.txt``; the report is the file
``<project>/dev_logs/cursor_step_output.txt``, watched with :mod:`watchfiles` (file-system
events, not polling) and read once it is complete — it ends with :data:`END_MARKER`, or its
size stayed the same for ``stable_seconds`` after the last change. Then it is moved to
``dev_logs/processed/`` under a timestamped name that carries the task and step, so a manager
killed right after the move still finds the step's report when it resumes. The pane channel
(a politerm agent in tmux) is :mod:`politerm.manager.pane`.
"""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import time
import typing as t

import watchfiles

from politerm._internal.private import private_dir, write_private
from politerm.errors import DevChannelError, DevStepTimeout

INSTRUCTIONS_DIR: t.Final = "dev_instructions"
INSTRUCTION_FILE: t.Final = "next_step.txt"
LOGS_DIR: t.Final = "dev_logs"
REPORT_FILE: t.Final = "cursor_step_output.txt"
PROCESSED_DIR: t.Final = "processed"
END_MARKER: t.Final = "END_OF_REPORT"
"""A line that says the report file is complete (optional: a quiet file counts too)."""


class DevChannel(t.Protocol):
    """What the engine needs from the way to the dev agent."""

    async def send(self, task_id: str, step: int, instruction: str) -> None:
        """Hand ``instruction`` (step ``step`` of ``task_id``) to the dev agent.

        Doing it twice is harmless.
        """
        ...

    async def report(self, task_id: str, step: int, timeout: float) -> str:
        """The dev agent's report for step ``step`` of ``task_id``.

        Raises :class:`~politerm.errors.DevStepTimeout` when none came within ``timeout``,
        and :class:`~politerm.errors.DevChannelError` when the agent or channel failed.
        """
        ...

    async def interrupt(self) -> None:
        """Stop what the dev agent is doing, if the channel can."""
        ...

    async def aclose(self) -> None:
        """Release what the channel holds (the agent keeps running)."""
        ...


def instruction_text(step: int, instruction: str, task_id: str = "") -> str:
    """The content of ``next_step.txt``: the step, the instruction, how to report.

    Examples
    --------
    >>> print(instruction_text(2, "Add a test.", "mgr-1"), end="")
    # Step 2 of task mgr-1
    <BLANKLINE>
    Add a test.
    <BLANKLINE>
    ---
    When done, write your report to dev_logs/cursor_step_output.txt and end it with a line
    END_OF_REPORT.
    """
    task = f" of task {task_id}" if task_id else ""
    return (
        f"# Step {step}{task}\n\n{instruction.strip()}\n\n---\n"
        f"When done, write your report to {LOGS_DIR}/{REPORT_FILE} and end it with a line\n"
        f"{END_MARKER}.\n"
    )


def strip_end_marker(text: str) -> tuple[str, bool]:
    r"""The report without its end-marker line, and whether it had one.

    Examples
    --------
    >>> strip_end_marker("done\nEND_OF_REPORT\n")
    ('done', True)
    >>> strip_end_marker("still writing")
    ('still writing', False)
    """
    lines = text.rstrip().splitlines()
    if lines and lines[-1].strip().rstrip(".") == END_MARKER:
        return "\n".join(lines[:-1]).rstrip(), True
    return text.rstrip(), False


class FileChannel:
    """Instructions and reports as files in the project (for IDE agents).

    Parameters
    ----------
    root
        The project directory.
    stable_seconds
        A report file without the end marker counts as complete once no change was seen
        for this long.
    """

    def __init__(
        self,
        root: pathlib.Path,
        *,
        stable_seconds: float = 2.0,
    ) -> None:
        self.root = root
        self.stable_seconds = stable_seconds
        self.instruction_path = root / INSTRUCTIONS_DIR / INSTRUCTION_FILE
        self.logs = root / LOGS_DIR
        self.report_path = self.logs / REPORT_FILE
        self.processed = self.logs / PROCESSED_DIR

    async def send(self, task_id: str, step: int, instruction: str) -> None:
        """Write ``next_step.txt`` atomically unless it already holds this very step."""
        text = instruction_text(step, instruction, task_id)
        with contextlib.suppress(OSError):
            if self.instruction_path.read_text(encoding="utf-8") == text:
                return
        try:
            write_private(self.instruction_path, text, sync=True)
            private_dir(self.logs)
        except OSError as exc:
            msg = f"cannot write {self.instruction_path}: {exc.strerror or exc}"
            raise DevChannelError(msg) from None

    def _processed_for(self, key: str) -> pathlib.Path | None:
        found = sorted(self.processed.glob(f"*_{key}.txt"))
        return found[-1] if found else None

    def _take(self, key: str) -> str:
        """Move the report to ``processed/`` (timestamped, with the step) and return it."""
        private_dir(self.processed)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        target = self.processed / f"{self.report_path.stem}_{stamp}_{key}.txt"
        try:
            self.report_path.replace(target)
            raw = target.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            msg = f"cannot move {self.report_path} to {self.processed}: {exc.strerror or exc}"
            raise DevChannelError(msg) from None
        return strip_end_marker(raw)[0]

    def _complete(self) -> bool:
        try:
            raw = self.report_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False
        return strip_end_marker(raw)[1]

    def _present(self) -> bool:
        try:
            return self.report_path.stat().st_size > 0
        except OSError:
            return False

    async def report(self, task_id: str, step: int, timeout: float) -> str:
        """Wait (file-system events, bounded by ``timeout``) for the step's report.

        Raises
        ------
        DevStepTimeout
            No complete report within ``timeout``; the message names the file.
        """
        key = f"{task_id}-s{step}"
        done = self._processed_for(key)
        if done is not None:  # taken before a crash, not yet recorded
            return strip_end_marker(done.read_text(encoding="utf-8", errors="replace"))[0]
        try:
            private_dir(self.logs)
        except OSError as exc:
            msg = f"cannot create {self.logs}: {exc.strerror or exc}"
            raise DevChannelError(msg) from None
        if self._complete():
            return self._take(key)
        stop = asyncio.Event()
        quiet_ms = max(50, int(self.stable_seconds * 1000))
        try:
            async with asyncio.timeout(timeout):
                # An empty set arrives after ``quiet_ms`` without any change: the quiet-file
                # test needs exactly that signal, and it doubles as the bounded backstop.
                async for changes in watchfiles.awatch(
                    self.logs,
                    stop_event=stop,
                    debounce=100,
                    rust_timeout=quiet_ms,
                    yield_on_timeout=True,
                    recursive=False,
                ):
                    if changes and self._complete():
                        return self._take(key)
                    if not changes and self._present():
                        return self._take(key)
        except TimeoutError:
            pass
        finally:
            stop.set()
        msg = (
            f"no report from the dev agent for step {step} within {timeout:g}s "
            f"(waited for {self.report_path})"
        )
        raise DevStepTimeout(msg)

    async def interrupt(self) -> None:
        """An IDE agent cannot be interrupted from here; the instruction file stays."""

    async def aclose(self) -> None:
        """Nothing held open between steps."""


__all__ = [
    "END_MARKER",
    "DevChannel",
    "FileChannel",
    "instruction_text",
    "strip_end_marker",
]
