"""Where work items come from: the ``bd`` tracker, or the built-in queue in the run store.

Both speak :class:`WorkSource`: list the ready items of an epic, claim one, close it, mark it
as needing help (never retried automatically), or release it after a failed session.

The ``bd`` adapter runs ``bd ready --parent EPIC --json``, ``bd show EPIC --json``,
``bd update ID --status in_progress --json``, ``bd close ID --reason TEXT --json`` and
``bd update ID --status blocked --notes TEXT --json``; its JSON answers are arrays of issues
(``id``, ``title``, ``description``, ``status``, ``priority``, …).
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import typing as t

from politerm.errors import BdError, EpicError
from politerm.store.epics import WorkItem, WorkState

if t.TYPE_CHECKING:
    from collections.abc import Sequence

    from politerm.config import EpicConfig
    from politerm.store.epics import EpicStore

BD_TIMEOUT = 60.0


class WorkSource(t.Protocol):
    """A supplier of work items."""

    name: str

    def ready(self, epic: str) -> list[WorkItem]:
        """Items of ``epic`` that may start now (unblocked, open), best first."""
        ...

    def epic_info(self, epic: str) -> tuple[str, str]:
        """The epic's title and description (``""`` when unknown)."""
        ...

    def claim(self, item: WorkItem) -> None:
        """Mark ``item`` as being worked on."""
        ...

    def close(self, item: WorkItem, reason: str) -> None:
        """Mark ``item`` done."""
        ...

    def needs_help(self, item: WorkItem, escalation: str) -> None:
        """Park ``item`` for a person; it is not offered as ready again."""
        ...

    def release(self, item: WorkItem, why: str) -> None:
        """Give ``item`` back (the session failed); ``--resume`` tries it again."""
        ...


class BuiltinSource:
    """The built-in queue: epics, priorities and dependencies in the run store."""

    name = "builtin"

    def __init__(self, store: EpicStore) -> None:
        self.store = store

    def ready(self, epic: str) -> list[WorkItem]:
        """Open items of ``epic`` whose dependencies are all done."""
        return self.store.ready_items(epic)

    def epic_info(self, epic: str) -> tuple[str, str]:
        """Title and prompt of the epic."""
        info = self.store.get_epic(epic)
        return (info.title, info.prompt) if info else ("", "")

    def claim(self, item: WorkItem) -> None:
        """State ``in_progress``."""
        self.store.set_item_state(item.id, WorkState.IN_PROGRESS)

    def close(self, item: WorkItem, reason: str) -> None:
        """State ``done``, the commit summary as note."""
        self.store.set_item_state(item.id, WorkState.DONE, note=reason)

    def needs_help(self, item: WorkItem, escalation: str) -> None:
        """State ``needs_help``, the escalation as note."""
        self.store.set_item_state(item.id, WorkState.NEEDS_HELP, note=escalation)

    def release(self, item: WorkItem, why: str) -> None:
        """State ``open`` again."""
        self.store.set_item_state(item.id, WorkState.OPEN, note=why)


class BdSource:
    """The ``bd`` (beads) tracker, driven through its ``--json`` command line.

    Parameters
    ----------
    program
        The ``bd`` binary (name on PATH or path).
    cwd
        The repository whose ``.beads`` database is used.
    """

    name = "bd"

    def __init__(self, program: str, cwd: pathlib.Path) -> None:
        self.program = program
        self.cwd = cwd

    def run(self, *args: str) -> t.Any:
        """Run ``bd ARGS --json`` and return its decoded JSON.

        Raises
        ------
        BdError
            bd failed, timed out, or printed something that is not JSON.
        """
        argv = [self.program, *args, "--json"]
        try:
            proc = subprocess.run(
                argv,
                cwd=self.cwd,
                capture_output=True,
                timeout=BD_TIMEOUT,
                check=False,
            )
        except FileNotFoundError:
            msg = f"{self.program}: not found on PATH"
            raise BdError(msg) from None
        except subprocess.TimeoutExpired:
            msg = f"`bd {' '.join(args)}` did not finish within {BD_TIMEOUT:g}s"
            raise BdError(msg) from None
        if proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).decode("utf-8", "replace").strip().splitlines()
            msg = (
                f"`bd {' '.join(args)}` failed ({proc.returncode}): {detail[-1] if detail else ''}"
            )
            raise BdError(msg)
        try:
            stdout = proc.stdout.decode("utf-8")
        except UnicodeDecodeError as exc:
            msg = f"`bd {' '.join(args)}` printed text that is not valid UTF-8 (byte {exc.start})"
            raise BdError(msg) from None
        out = stdout.strip()
        if not out:
            return None
        try:
            return json.loads(out)
        except json.JSONDecodeError as exc:
            msg = f"`bd {' '.join(args)}` printed something that is not JSON: {exc}"
            raise BdError(msg) from None

    def ready(self, epic: str) -> list[WorkItem]:
        """``bd ready --parent EPIC --json``, best first (bd's order, then priority)."""
        data = self.run("ready", "--parent", epic)
        items = [_bd_item(d, epic) for d in _issues(data, "bd ready")]
        return sorted(items, key=lambda i: i.priority)

    def epic_info(self, epic: str) -> tuple[str, str]:
        """``bd show EPIC --json``: title and description."""
        try:
            issues = _issues(self.run("show", epic), "bd show")
        except BdError:
            return "", ""
        if not issues:
            return "", ""
        return str(issues[0].get("title") or ""), str(issues[0].get("description") or "")

    def claim(self, item: WorkItem) -> None:
        """``bd update ID --status in_progress``."""
        self.run("update", item.id, "--status", "in_progress")

    def close(self, item: WorkItem, reason: str) -> None:
        """``bd close ID --reason TEXT``."""
        self.run("close", item.id, "--reason", reason)

    def needs_help(self, item: WorkItem, escalation: str) -> None:
        """``bd update ID --status blocked --notes TEXT`` (blocked is never ready)."""
        self.run("update", item.id, "--status", "blocked", "--notes", f"needs help: {escalation}")

    def release(self, item: WorkItem, why: str) -> None:
        """``bd update ID --status open``."""
        self.run("update", item.id, "--status", "open", "--notes", why)


def _issues(data: t.Any, what: str) -> list[dict[str, t.Any]]:
    if isinstance(data, dict):
        data = [data]
    if data is None:
        return []
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        msg = f"{what}: expected a JSON array of issues, got {type(data).__name__}"
        raise BdError(msg)
    return t.cast("list[dict[str, t.Any]]", data)


def _bd_item(data: dict[str, t.Any], epic: str) -> WorkItem:
    try:
        item_id, title = str(data["id"]), str(data["title"])
    except KeyError as exc:
        msg = f"bd issue without {exc.args[0]!r}: {json.dumps(data)[:200]}"
        raise BdError(msg) from None
    priority = data.get("priority", 2)
    deps: Sequence[t.Any] = data.get("dependencies") or ()
    return WorkItem(
        id=item_id,
        epic=epic,
        title=title,
        body=str(data.get("description") or ""),
        priority=int(priority) if isinstance(priority, int) else 2,
        state=str(data.get("status") or "open"),
        depends_on=tuple(
            str(d.get("depends_on_id") or d.get("id"))
            for d in deps
            if isinstance(d, dict) and (d.get("depends_on_id") or d.get("id"))
        ),
    )


def uses_bd(program: str, repo_root: pathlib.Path) -> bool:
    """Whether ``bd`` is on PATH and the repository has a ``.beads`` directory."""
    if shutil.which(program) is None:
        return False
    return any((d / ".beads").is_dir() for d in (repo_root, *repo_root.parents))


def pick_source(config: EpicConfig, store: EpicStore, repo_root: pathlib.Path) -> WorkSource:
    """The work source the config asks for (``auto``: bd when usable, else the built-in queue).

    Raises
    ------
    EpicError
        ``source = "bd"`` but bd is not on PATH.
    """
    if config.source == "builtin":
        return BuiltinSource(store)
    if config.source == "bd":
        if shutil.which(config.bd) is None:
            msg = f"[epic] source = 'bd' but {config.bd!r} is not on PATH"
            raise EpicError(msg)
        return BdSource(config.bd, repo_root)
    if uses_bd(config.bd, repo_root):
        return BdSource(config.bd, repo_root)
    return BuiltinSource(store)


def repo_root(start: pathlib.Path) -> pathlib.Path:
    """The git work tree containing ``start``, or ``start`` itself."""
    try:
        proc = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"],
            cwd=start,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return start.resolve()
    out = proc.stdout.strip()
    return pathlib.Path(out) if proc.returncode == 0 and out else start.resolve()
