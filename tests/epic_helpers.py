"""Shared by the epic tests: a project whose epic agent is the fake agent, and its work
items."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
import typing as t

import politerm
from politerm.config import load_config
from politerm.epic.go import EpicRunner, GoOptions, GoResult
from politerm.store import RunStore
from politerm.store.epics import EpicStore

SRC = pathlib.Path(politerm.__file__).resolve().parent.parent


class Project:
    """A git work tree with a poli.toml whose epic agent is the fake agent in plain mode."""

    def __init__(
        self,
        root: pathlib.Path,
        scenario: str = "epic-items",
        source: str = "builtin",
        socket: str = "poli-test-unused",
    ) -> None:
        self.root = root
        self.log = root / "fakeagent.jsonl"
        root.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        argv = [sys.executable, "-m", "politerm.testing.fakeagent", "--mode", "plain"]
        argv += ["--scenario", scenario, "--log", str(self.log)]
        (root / "poli.toml").write_text(
            textwrap.dedent(
                f"""
                [store]
                path = "state/runs.sqlite3"
                [timeouts]
                ready = 20
                [tmux]
                socket = "{socket}"
                [epic]
                agent = "fake-plain"
                source = "{source}"
                grace = 10
                session_timeout = 30
                [epic.commands]
                fake-plain = {json.dumps(argv)}
                [redact]
                patterns = ['ACME-TOKEN-[0-9a-f]+']
                """
            )
        )

    @property
    def store_path(self) -> pathlib.Path:
        return self.root / "state" / "runs.sqlite3"

    def store(self) -> RunStore:
        return RunStore.open(self.store_path)

    async def go(self, epic: str = "E", **options: t.Any) -> tuple[GoResult, list[str]]:
        config = load_config(self.root, env={})
        lines: list[str] = []
        opts = GoOptions(epic=epic, yes=True, interactive=False, **options)
        with self.store() as store:
            runner = EpicRunner(config, store, opts, cwd=self.root, say=lines.append)
            result = await runner.go()
        return result, lines

    def poli(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
        }
        return subprocess.run(
            [sys.executable, "-m", "politerm", *args],
            cwd=self.root,
            env=env,
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


def add_items(project: Project, *specs: tuple[str, str, tuple[str, ...]]) -> None:
    with project.store() as store:
        es = EpicStore(store)
        for item_id, title, after in specs:
            es.add_item("E", title, item_id=item_id, depends_on=after)
