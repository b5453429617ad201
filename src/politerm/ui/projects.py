"""Which projects a view shows: every project of this user on this machine, or one.

Every project keeps its run store under ``<user state>/projects/<key>/runs.sqlite3``
(:mod:`politerm.project`), and the store remembers its project's directory (the
``project:root`` meta key :meth:`politerm.store.RunStore.for_config` sets). A view started
without ``--project`` shows each of them; with ``--project`` it shows that one only. The
view's own project (whose configuration names the tmux server) is always first, even when
``store.path`` keeps its store elsewhere.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sqlite3
import typing as t

import platformdirs

from politerm.project import project_key
from politerm.store.runstore import PROJECT_ROOT_META as ROOT_META

if t.TYPE_CHECKING:
    from politerm.config import Config
    from politerm.driver.panes import PaneEntry


@dataclasses.dataclass(frozen=True)
class ProjectRef:
    """One project a view shows: its directory (when known) and its run store."""

    key: str
    """``<name>-<hash>`` (:func:`politerm.project.project_key`), or the store's folder name."""
    root: pathlib.Path | None
    store_path: pathlib.Path

    @property
    def name(self) -> str:
        """The directory's name, as the views print it."""
        return self.root.name if self.root is not None else self.key


def home_ref(config: Config) -> ProjectRef:
    """The project ``config`` was loaded for, with the store it names."""
    root = config.project.root
    return ProjectRef(project_key(root), root, config.store.resolved_path())


def _root_of(store: pathlib.Path) -> pathlib.Path | None:
    # Read-only and without the store's migrations: a view must not change another
    # project's store by looking at it.
    try:
        conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=2)
    except sqlite3.Error:
        return None
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (ROOT_META,)).fetchone()
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return pathlib.Path(row[0]) if row and row[0] else None


def user_projects(home: ProjectRef, *, state_dir: pathlib.Path | None = None) -> list[ProjectRef]:
    """``home`` first, then every other project of this user that has a run store.

    Parameters
    ----------
    home
        The view's own project (:func:`home_ref`).
    state_dir
        Where the projects' stores live; ``<user state>/projects`` when omitted.
    """
    base = state_dir or platformdirs.user_state_path("politerm") / "projects"
    found = [home]
    seen = {home.store_path.resolve()}
    for store in sorted(base.glob("*/runs.sqlite3")) if base.is_dir() else ():
        if store.resolve() in seen:
            continue
        seen.add(store.resolve())
        root = _root_of(store)
        if root is not None and root.resolve() == (home.root or pathlib.Path("/")).resolve():
            continue  # the home project's old store, before store.path moved it
        found.append(ProjectRef(store.parent.name, root, store))
    return found


def owner_of(
    pane: PaneEntry,
    projects: t.Sequence[ProjectRef],
    sessions: t.Mapping[str, str],
    pipelines: t.Mapping[str, str],
) -> str | None:
    r"""The key of the project ``pane`` belongs to, or None when no project claims it.

    A loop's session names its project (``@poli_project``); a manager's is
    ``<loop session>-mgr-<name>``; a pipeline run's is the one its record names.
    ``sessions`` maps each project's key to its loop session, ``pipelines`` each pipeline
    session to its project's key.

    Examples
    --------
    >>> from politerm.driver.panes import parse_panes
    >>> a = ProjectRef("a-1", pathlib.Path("/a"), pathlib.Path("/s/a"))
    >>> b = ProjectRef("b-2", pathlib.Path("/b"), pathlib.Path("/s/b"))
    >>> ps = parse_panes("poli-b-2-mgr-x\tw\t%1\tM\t0\tsh\t80\t24\t0\t\n"
    ...                  "x\tw\t%2\tE\t0\tsh\t80\t24\t0\t/a\n"
    ...                  "run\tw\t%3\tstep-1\t0\tsh\t80\t24\t0\t\n"
    ...                  "odd\tw\t%4\tZ\t0\tsh\t80\t24\t0\t\n"
    ...                  "far\tw\t%5\tF\t0\tsh\t80\t24\t0\t/c\n"
    ...                  "poli-c-3-mgr-y\tw\t%6\tN\t0\tsh\t80\t24\t0\t\n")
    >>> s = {"a-1": "poli-a-1", "b-2": "poli-b-2"}
    >>> [owner_of(p, [a, b], s, {"run": "a-1"}) for p in ps]
    ['b-2', 'a-1', 'a-1', None, '/c', 'poli-c-3']
    """
    if pane.project:
        for ref in projects:
            if ref.root is not None and pane.project == str(ref.root):
                return ref.key
        return pane.project  # a project not shown: none of the views' keys
    if pane.session in pipelines:
        return pipelines[pane.session]
    for key, session in sessions.items():
        if pane.session == session or pane.session.startswith(f"{session}-mgr-"):
            return key
    if "-mgr-" in pane.session:
        return pane.session.partition("-mgr-")[0]  # the manager of a project not shown
    return None


def shown_with(config: Config) -> list[ProjectRef]:
    """The projects a view of ``config``'s project shows besides its own.

    Every other project of this user, unless the view was scoped to its project
    (``--project`` or ``POLI_PROJECT``): then none.
    """
    if config.project.how == "option":
        return []
    return user_projects(home_ref(config))[1:]
