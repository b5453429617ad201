"""``poli dash`` in a real terminal (tmux) shows the inbox of every project and answers it."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import typing as t

from politerm.agents.approval import Decision, PendingApproval, get_pending, set_pending
from politerm.config import load_config
from politerm.pipeline.state import RunRecord, RunState
from politerm.store import RunStore
from politerm.testing.retry import retry_until

if t.TYPE_CHECKING:
    import pathlib

    import libtmux


def _tmux(socket: str, *args: str) -> str:
    return subprocess.run(
        ["tmux", "-L", socket, *args], capture_output=True, text=True, check=False
    ).stdout


def test_dash_in_a_terminal_shows_every_projects_inbox_and_approves_in_place(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    inner = server.socket_name
    assert inner is not None
    roots = {}
    for name in ("alpha", "beta"):
        root = tmp_path / name
        root.mkdir()
        (root / "poli.toml").write_text(f'[tmux]\nsocket = "{inner}"\n')
        roots[name] = root.resolve()
    alpha, beta = (load_config(roots[n], env={}) for n in ("alpha", "beta"))
    with RunStore.for_config(beta) as store:
        record = RunRecord(
            run_id="rb", pipeline="feature", pipeline_name="feature", project=str(roots["beta"]),
            task="build it", session="poli-beta-rb", socket=inner, cli="fake",
        )  # fmt: skip
        record.step(1)
        run = RunState(store, record)
        run.save()
        run.ask(1, "gate", "Step 1 is done. Continue to step 2?")
    with RunStore.for_config(alpha) as store:
        asks = ("Bash command", "make deploy", "Do you want to proceed?")
        set_pending(store, PendingApproval("EXECUTER", "Bash", "make deploy", asks, 5.0))
    # the person's terminal: a pane of another tmux server, running poli dash in alpha
    outer = f"poli-test-outer-{secrets.token_hex(4)}"
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE", "POLI_PROJECT")}
    dash = f"{sys.executable} -m politerm dash"
    subprocess.run(
        ["tmux", "-L", outer, "-f", "/dev/null", "new-session", "-d", "-s", "me", "-x", "200",
         "-y", "50", "-c", str(roots["alpha"]), dash],
        check=True, env=env,
    )  # fmt: skip
    try:

        def screen() -> str:
            return _tmux(outer, "capture-pane", "-p", "-t", "me")

        retry_until(
            lambda: "inbox: 2 waiting on you · projects: alpha, beta" in screen(),
            60,
            what="the dashboard's inbox of both projects",
        )
        rows = [line for line in screen().splitlines() if "approval" in line or "gate" in line]
        assert any("alpha" in r and "EXECUTER" in r and "make deploy" in r for r in rows), rows
        assert any("beta" in r and "step-1" in r and "Continue to step 2?" in r for r in rows), rows
        _tmux(outer, "send-keys", "-t", "me", "a")
        retry_until(lambda: "approve this?" in screen(), 30, what="the approve dialog")
        assert "EXECUTER (alpha) wants to run: Bash(make deploy)" in screen()
        _tmux(outer, "send-keys", "-t", "me", "y")

        def answered() -> PendingApproval | None:
            with RunStore.open(alpha.store.resolved_path()) as store:
                pending = get_pending(store, "EXECUTER")
            return pending if pending is not None and pending.answer is not None else None

        pending = retry_until(answered, 30, what="the approval answered from the dashboard")
        assert pending is not None
        assert (pending.answer, pending.by) == (Decision.APPROVE, "dash")
        retry_until(
            lambda: "inbox: 1 waiting on you" in screen(), 30, what="the answered item gone"
        )
        _tmux(outer, "send-keys", "-t", "me", "q")
        retry_until(lambda: not _tmux(outer, "list-sessions"), 30, what="poli dash to quit")
    finally:
        _tmux(outer, "kill-server")
