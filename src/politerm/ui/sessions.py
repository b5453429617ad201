"""The sessions of a project, of every workflow: what the views list under "sessions".

tmux sessions are named by the workflow that makes them, and each name is compared with
what the project itself says — its loop's session (``[tmux] session``), the manager's
``<session>-mgr-<project>``, the session each pipeline run recorded (or a run id in the
name), ``poli-go`` for epic runs with ``--tmux`` — so a loop's ``poli-<name>-<hash>`` is
not taken for a pipeline run. Work that has no tmux session is listed too: an epic run in a
headless PTY (``running`` in the store) and a bridge serving a queue (the ``bridge:<queue>``
key its daemon sets while it runs, with a live pid).
"""

from __future__ import annotations

import json
import re
import typing as t

if t.TYPE_CHECKING:
    from collections.abc import Collection, Sequence

    from politerm.driver.panes import PaneEntry
    from politerm.store import RunStore

#: ``<run id>`` of a pipeline run (see ``politerm.pipeline.state.new_run_id``).
_RUN_ID = re.compile(r"-\d{8}T\d{6}Z-[0-9a-f]{4}$")
#: The session of ``poli go --tmux`` (``politerm.epic.go.TMUX_SESSION``).
EPIC_SESSION = "poli-go"
#: Store meta key a running bridge sets (``politerm.bridge.daemon.serve``).
BRIDGE_KEY = "bridge:"


def kind_of(name: str, *, loop: str | None = None, pipelines: Collection[str] = ()) -> str:
    """Which workflow made tmux session ``name``.

    Examples
    --------
    >>> kind_of("poli-app-c2fdb3", loop="poli-app-c2fdb3")
    'loop'
    >>> kind_of("poli-app-c2fdb3-mgr-web", loop="poli-app-c2fdb3")
    'manager'
    >>> kind_of("poli-app-20250101T000000Z-ab12", loop="poli-app-c2fdb3")
    'pipeline'
    >>> kind_of("poli-app-x", pipelines={"poli-app-x"}), kind_of("poli-go"), kind_of("t")
    ('pipeline', 'epic', 'loop')
    """
    if name == loop:
        return "loop"
    if "-mgr-" in name:
        return "manager"
    if name in pipelines or _RUN_ID.search(name):
        return "pipeline"
    if name == EPIC_SESSION:
        return "epic"
    for word in ("bridge", "messaging"):
        if word in name:
            return word
    return "loop"


def tmux_sessions(
    panes: Sequence[PaneEntry], *, loop: str | None = None, pipelines: Collection[str] = ()
) -> list[dict[str, t.Any]]:
    """One row per tmux session that has panes: its kind, pane count and agents."""
    sessions: dict[str, dict[str, t.Any]] = {}
    for p in panes:
        row = sessions.setdefault(
            p.session,
            {
                "name": p.session,
                "kind": kind_of(p.session, loop=loop, pipelines=pipelines),
                "where": "tmux",
                "agents": [],
                "panes": 0,
            },
        )
        row["panes"] += 1
        if p.agent:
            row["agents"].append(p.agent)
    return list(sessions.values())


def bridge_sessions(store: RunStore) -> list[dict[str, t.Any]]:
    """A row for every bridge that serves a queue of this store and is alive."""
    from politerm._internal.waits import pid_alive

    rows = []
    for key in store.meta_keys(BRIDGE_KEY):
        try:
            info = json.loads(store.get_meta(key) or "{}")
            pid = int(info["pid"])
        except (ValueError, KeyError, TypeError):
            continue
        if not pid_alive(pid):
            continue  # killed without saying so: not shown as serving
        rows.append(
            {
                "name": str(info.get("queue") or key.removeprefix(BRIDGE_KEY)),
                "kind": "bridge",
                "where": f"pid {pid}",
                "agents": [str(info.get("executor") or "builtin")],
                "panes": 0,
            }
        )
    return rows


def epic_sessions(runs: Sequence[dict[str, t.Any]]) -> list[dict[str, t.Any]]:
    """A row for every epic run still running (in a PTY; ``--tmux`` ones also have a pane)."""
    return [
        {
            "name": f"epic run {r['id']}",
            "kind": "epic",
            "where": "pty",
            "agents": [r["agent"]],
            "panes": 0,
        }
        for r in runs
        if r["state"] == "running"
    ]
