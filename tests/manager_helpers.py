"""Shared pieces of the manager tests: a scripted brain on the mock server, the IDE player."""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import sys
import typing as t

from politerm.config.manager import BrainSettings, ManagerConfig
from politerm.manager.brain import API_BRAINS
from politerm.manager.channels import FileChannel
from politerm.manager.engine import Manager
from politerm.manager.store import ManagerStore
from politerm.redact import Redactor
from politerm.store import RunStore
from politerm.testing.mockllm import MockLLM, Rule

if t.TYPE_CHECKING:
    from collections.abc import Iterator

    from politerm.manager.store import Project

IDE = pathlib.Path(__file__).with_name("manager_ide.py")

#: A three-step task: each planning prompt is answered by the latest dev report it shows.
THREE_STEPS = [
    Rule(r"^## Earlier summary", "SUMMARY-XYZ: hello.py created and tested"),
    Rule(r"## Latest dev report\n\(none yet\)", "Create hello.py printing hi"),
    Rule(r"## Latest dev report\nReport for step 1", "Add a test for hello.py"),
    Rule(r"## Latest dev report\nReport for step 2", "Run the tests"),
    Rule(
        r"## Latest dev report\nReport for step 3",
        "TASK_COMPLETE hello.py exists and its test passes",
    ),
]


def brain_settings(llm: MockLLM, provider: str = "gemini", **kw: t.Any) -> BrainSettings:
    values: dict[str, t.Any] = {
        "provider": provider,
        "base_url": llm.url,
        "model": "mock-model",
        "backoff": 0.01,
        "max_retries": 2,
        "call_timeout": 10.0,
    }
    values.update(kw)
    return BrainSettings(**values)


class Rig:
    """A manager on a file-channel project, its store, and the mock brain."""

    def __init__(
        self,
        tmp_path: pathlib.Path,
        llm: MockLLM,
        *,
        provider: str = "gemini",
        brain: dict[str, t.Any] | None = None,
        **config: t.Any,
    ) -> None:
        self.root = tmp_path / "proj"
        self.root.mkdir(exist_ok=True)
        (self.root / "README.md").write_text("# Hello project\nPrints hi.\n")
        self.llm = llm
        self.events: list[str] = []
        settings = brain_settings(llm, provider, **(brain or {}))
        self.config = ManagerConfig(
            brain=settings, channel="file", file_stable_seconds=0.5, **config
        )
        self.run_store = RunStore.open(tmp_path / "state" / "runs.sqlite3")
        self.store = ManagerStore(self.run_store, Redactor())
        self.manager = Manager(
            self.store,
            self.config,
            API_BRAINS[provider](settings, llm.token, Redactor()),
            lambda p: FileChannel(pathlib.Path(p.path), stable_seconds=0.5),
            on_event=lambda p, line: self.events.append(line),
        )
        if self.store.get_project("proj") is None:
            self.store.add_project("proj", self.root, goal="A tiny hello project", channel="file")

    def prompts(self) -> list[str]:
        return [r.user_text for r in self.llm.requests()]

    def close(self) -> None:
        self.run_store.close()

    async def goal(self, text: str) -> Project:
        self.manager.start("proj", text)
        return await self.manager.run("proj")


@contextlib.contextmanager
def ide(root: pathlib.Path, *args: str) -> Iterator[subprocess.Popen[str]]:
    """Run the IDE player on ``root`` until the block ends."""
    proc = subprocess.Popen(
        [sys.executable, str(IDE), str(root), *args],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # bounded: the player prints at once or dies
        assert line.strip() == "ide ready", f"IDE player did not start: {line!r}"
        yield proc
    finally:
        proc.kill()
        proc.wait(10)
