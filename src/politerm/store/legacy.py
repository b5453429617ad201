"""The single global run store of older versions, and how a project takes it over.

Before stores were per project, every project shared ``<user state>/runs.sqlite3``. When a
project first opens its own store and that old file is still there, it is moved to the
project whose agents it recorded (their working directories lie inside the project);
otherwise it is left alone, and the user is told how to read it.
"""

from __future__ import annotations

import contextlib
import pathlib
import sqlite3
import typing as t

from politerm.store.audit import audit_path_for
from politerm.store.db import default_store_path

if t.TYPE_CHECKING:
    from politerm.project import Project

__all__ = ["adopt_legacy_store"]


def _agent_dirs(path: pathlib.Path) -> list[str] | None:
    """The agents' working directories recorded in the store at ``path`` (None: unreadable)."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error:
        return None
    try:
        return [str(row[0]) for row in conn.execute("SELECT cwd FROM agents")]
    except sqlite3.Error:
        return None
    finally:
        conn.close()


def _inside(child: str, root: pathlib.Path) -> bool:
    return child == str(root) or child.startswith(str(root).rstrip("/") + "/")


def adopt_legacy_store(project: Project, store_path: pathlib.Path) -> str | None:
    """Move the old global store to ``store_path`` if it is ``project``'s; say what happened.

    Does nothing (returns None) unless ``store_path`` does not exist yet and the old global
    store does. Returns a one-line note for the user otherwise.
    """
    legacy = default_store_path()
    if store_path.exists() or not legacy.is_file():
        return None
    dirs = _agent_dirs(legacy)
    if dirs and any(_inside(d, project.root) for d in dirs):
        store_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # The database with its WAL and shared-memory files, and the audit log beside it.
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                pathlib.Path(f"{legacy}{suffix}").replace(f"{store_path}{suffix}")
        with contextlib.suppress(FileNotFoundError):
            audit_path_for(legacy).replace(audit_path_for(store_path))
        return f"moved this project's runs from the global store {legacy} to {store_path}"
    return (
        f"the global run store of an older politerm ({legacy}) is not this project's "
        f"({project.root}); read it with `poli status --store {legacy}`"
    )
