"""Agents whose profile says ``start_alone`` start one after another; the others together."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import shlex
import sys
import typing as t

from politerm.config import load_config
from politerm.engine.session import Session
from politerm.store import RunStore

if t.TYPE_CHECKING:
    import libtmux

UP = 60  # bounds the whole bring-up in the test


def _agents(gate: pathlib.Path) -> str:
    """A and B of a ``start_alone`` profile, C and D of a plain one; all wait for ``gate``.

    Each agent's process waits for the file ``gate`` (at most 60 s) before it becomes the
    fake agent: until the test makes it, no agent can be ready.
    """
    fake = shlex.join([sys.executable, "-m", "politerm.testing.fakeagent", "--mode", "plain"])
    wait = f"for i in $(seq 1200); do [ -e {shlex.quote(str(gate))} ] && break; sleep 0.05; done"
    argv = ["sh", "-c", f"{wait}; exec {fake}"]
    profiles = {"A": "fake-alone", "B": "fake-alone", "C": "fake-plain", "D": "fake-plain"}
    return "".join(
        f'[agents.{name}]\ncommand = {json.dumps(argv)}\nprofile = "{profile}"\n'
        f'cwd = "."\nprimer = false\n\n'
        for name, profile in profiles.items()
    )


def _started(said: list[str]) -> list[str]:
    """The agents among A to D whose launch ``up`` said, in its order."""
    names = [m.split(":")[0] for m in said if ": started " in m]
    return [n for n in names if n in ("A", "B", "C", "D")]


async def test_start_alone_agents_start_after_the_one_before_is_ready(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    profiles = pathlib.Path(os.environ["XDG_CONFIG_HOME"]) / "politerm" / "agents"
    profiles.mkdir(parents=True)
    (profiles / "fake-alone.toml").write_text('extends = "fake-plain"\nstart_alone = true\n')
    root = tmp_path / "proj"
    root.mkdir()
    gate = tmp_path / "gate"
    (root / "poli.toml").write_text(
        f'[tmux]\nsocket = "{server.socket_name}"\nsession = "alone"\n\n'
        f'[store]\npath = "runs.sqlite3"\n\n[timeouts]\nready = 60\n\n{_agents(gate)}'
    )
    config = load_config(root, env={})
    store = RunStore.open(config.store.resolved_path())
    session = Session(config, store)
    said: list[str] = []
    a_when_b_started: list[str] = []

    def hear(message: str) -> None:
        said.append(message)
        if message.startswith("B: started"):
            row = store.get_agent("A")
            a_when_b_started.append(row.state if row is not None else "no row")

    try:
        async with asyncio.timeout(UP):
            up = asyncio.create_task(session.up(on_event=hear))
            # Once the last one of the configuration is launched, every agent launched at
            # once is.
            last = list(config.agents)[-1]
            while not any(m.startswith(f"{last}: started") for m in said):
                await asyncio.sleep(0.05)
            # None is ready (the gate is shut): C and D started together with A, B waits.
            assert _started(said) == ["A", "C", "D"], said
            assert "B: starts once A is ready (profile fake-alone: start_alone)" in said
            assert store.get_agent("B") is None
            gate.touch()
            agents = await up
        assert [n for n in agents if n in "ABCD"] == ["A", "B", "C", "D"]
        assert _started(said) == ["A", "C", "D", "B"], said
        assert a_when_b_started == ["ready"], said
        states = {r.name: r.state for r in store.list_agents() if r.name in "ABCD"}
        assert states == dict.fromkeys("ABCD", "ready"), said
    finally:
        await session.down()
        await session.host.server.close()
        store.close()
