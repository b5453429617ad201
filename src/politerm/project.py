"""Projects: which directory a ``poli`` command works for, and what belongs to it.

Every project gets its own tmux session and run store (and so its own work queue), so a task
started in one project never runs on another's agents and ``poli down`` in one never kills
another's. The project is, in order:

1. the directory named by ``--project`` (or ``POLI_PROJECT``);
2. the nearest directory, from the current one upwards, holding a ``poli.toml``;
3. the root of the git work tree the current directory is in;
4. the current directory.

The session is ``poli-<name>-<hash>`` and the store ``<user state>/projects/<name>-<hash>/
runs.sqlite3``, where ``<name>`` is the directory's name made safe for tmux and ``<hash>``
tells apart two projects of the same name. ``tmux.session`` and ``store.path`` in poli.toml
(or ``POLI_TMUX_SESSION``) still override both.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
import re
import typing as t

import platformdirs

if t.TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "ENV_AGENT",
    "ENV_CONFIG",
    "PROJECT_ENV",
    "PROJECT_OPTION",
    "STORE_OPTION",
    "Project",
    "find_project",
    "project_key",
]

PROJECT_ENV: t.Final = "POLI_PROJECT"
"""Environment variable naming the project directory (what ``--project`` sets)."""

ENV_AGENT: t.Final = "POLI_AGENT"
"""Environment variable naming the politerm agent a process runs in (set at agent start)."""

ENV_CONFIG: t.Final = "POLI_CONFIG"
"""Environment variable naming the configuration file of the agent's session."""

PROJECT_OPTION: t.Final = "@poli_project"
"""tmux session option holding the project directory (``poli status --all`` reads it)."""

STORE_OPTION: t.Final = "@poli_store"
"""tmux session option holding the session's run store."""

_CONFIG = "poli.toml"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def project_key(root: pathlib.Path) -> str:
    """``<name>-<hash>``: the project's directory name made safe, plus 6 hex of its path.

    Examples
    --------
    >>> project_key(pathlib.Path("/src/my.app"))
    'my-app-c2fdb3'
    >>> project_key(pathlib.Path("/"))
    'root-8a5eda'
    """
    name = _UNSAFE.sub("-", root.name).strip("-")[:32] or "root"
    digest = hashlib.sha256(str(root).encode("utf-8", "surrogateescape")).hexdigest()[:6]
    return f"{name}-{digest}"


@dataclasses.dataclass(frozen=True)
class Project:
    """A project directory and the names of what belongs to it."""

    root: pathlib.Path
    """The project directory (absolute, symlinks resolved)."""
    how: str
    """How it was found: ``"option"``, ``"poli.toml"``, ``"git"`` or ``"cwd"``."""

    @property
    def key(self) -> str:
        """``<name>-<hash>`` (see :func:`project_key`)."""
        return project_key(self.root)

    @property
    def session(self) -> str:
        """The project's tmux session name, ``poli-<key>``."""
        return f"poli-{self.key}"

    @property
    def state_dir(self) -> pathlib.Path:
        """``<user state>/projects/<key>``: the store, its audit log and router locks."""
        return platformdirs.user_state_path("politerm") / "projects" / self.key

    @property
    def store_path(self) -> pathlib.Path:
        """The project's run store."""
        return self.state_dir / "runs.sqlite3"


def find_project(
    start: pathlib.Path | None = None, *, env: Mapping[str, str] | None = None
) -> Project:
    """Find the project a command runs for (see the module docstring for the order).

    Parameters
    ----------
    start
        An explicit project directory (``--project``); it is used as given.
    env
        Environment (``POLI_PROJECT``); None uses :data:`os.environ`.
    """
    env = os.environ if env is None else env
    if start is not None:
        return Project(start.expanduser().resolve(), "option")
    if named := env.get(PROJECT_ENV, ""):
        return Project(pathlib.Path(named).expanduser().resolve(), "option")
    here = pathlib.Path.cwd().resolve()
    for d in (here, *here.parents):
        if (d / _CONFIG).exists():
            return Project(d, "poli.toml")
    for d in (here, *here.parents):
        if (d / ".git").exists():
            return Project(d, "git")
    return Project(here, "cwd")
