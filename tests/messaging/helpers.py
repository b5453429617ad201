"""Shared helpers of the messaging tests: a config file, a messenger, the poli CLI."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import typing as t

from politerm.config import load_config
from politerm.messaging.service import Messenger
from politerm.store import RunStore

if t.TYPE_CHECKING:
    from politerm.config import Config


def write_config(tmp_path: pathlib.Path, socket: str = "msgtest", extra: str = "") -> pathlib.Path:
    path = tmp_path / "poli.toml"
    # keys given in ``extra`` (which starts inside [routing]) replace these defaults
    defaults = [
        x for x in ("message_ttl = 600.0\n", "max_attempts = 3\n") if x.split()[0] not in extra
    ]
    path.write_text(
        f'[tmux]\nsocket = "{socket}"\nsession = "mail"\n'
        f'[store]\npath = "{tmp_path / "state" / "runs.sqlite3"}"\n'
        "[routing]\n" + "".join(defaults) + extra
    )
    return path


def config_of(path: pathlib.Path) -> Config:
    return load_config(config_path=path, env={})


def open_messenger(config: Config) -> Messenger:
    return Messenger(config, RunStore.open(config.store.resolved_path()))


def add_agent(m: Messenger, name: str, pane: str, profile: str = "fake-claude") -> None:
    m.store.upsert_agent(
        name,
        session=m.session,
        pane_id=pane,
        command="fake",
        cwd="/",
        profile=profile,
        resume_command=None,
    )


def poli(
    cwd: pathlib.Path,
    *args: str,
    env: t.Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[bytes]:
    full = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "politerm", *args],
        cwd=cwd,
        capture_output=True,
        input=stdin,
        timeout=timeout,
        env=full,
        check=False,
    )
