"""A session's hook channels live as long as the session: kept for a resume, gone at down.

The agent is the fake agent started through a program named ``codex`` (a link), so that
``poli up`` installs Codex's ``notify`` hook for it as for the real CLI; the fake agent
ignores the extra arguments its wrapper is given.
"""

from __future__ import annotations

import json
import pathlib
import stat
import sys
import typing as t

from politerm._internal.proctree import process_tree
from politerm.agents import load_profile
from politerm.config import load_config
from politerm.driver import AgentDriver
from politerm.engine.session import Session
from politerm.hooks.channel import channel_path, create_channel, hooks_dir_for, remove_hooks_dir
from politerm.hooks.install import GEMINI_HOME_ENV, install_hooks
from politerm.store import RunStore
from politerm.tmux.pane import find_agent_pane
from tests.loophelpers import Loop

if t.TYPE_CHECKING:
    import libtmux

SCENARIO = 'mode = "codex"\nthink_time = 0.1\n'


def open_project(root: pathlib.Path, socket: str) -> Loop:
    """A project whose one agent's program is called ``codex`` (it runs the fake agent)."""
    root.mkdir(parents=True)
    (root / "work").mkdir()
    (root / "agent.toml").write_text(SCENARIO)
    wrapper = root / "bin" / "codex"
    wrapper.parent.mkdir()
    fake = [
        sys.executable, "-m", "politerm.testing.fakeagent", "--mode", "codex",
        "--scenario", str(root / "agent.toml"), "--log", str(root / "agent.jsonl"),
    ]  # fmt: skip
    # The hook's own arguments ("-c notify=[...]") are not the fake agent's: dropped.
    wrapper.write_text("#!/bin/sh\nexec " + " ".join(json.dumps(a) for a in fake) + "\n")
    wrapper.chmod(0o755)
    (root / "poli.toml").write_text(
        f'[tmux]\nsocket = "{socket}"\nsession = "t"\n\n[store]\npath = "runs.sqlite3"\n\n'
        "[timeouts]\nready = 60\n\n"
        f"[agents.AGENT]\ncommand = [{json.dumps(str(wrapper))}]\n"
        'profile = "fake-codex"\ncwd = "work"\nprimer = false\n'
    )
    config = load_config(root, env={})
    # Only AGENT (the built-in PLANNER/EXECUTER defaults are other fake agents).
    config = config.model_copy(update={"agents": {"AGENT": config.agents["AGENT"]}})
    store = RunStore.open(config.store.resolved_path())
    return Loop(root, config, store, Session(config, store))


async def test_hooks_dir_is_kept_while_the_session_lives_and_removed_at_down(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    assert server.socket_name is not None
    root = tmp_path / "proj"
    loop = open_project(root, server.socket_name)
    hooks = hooks_dir_for(loop.config)
    channel = channel_path(hooks, "AGENT")
    try:
        await loop.session.up()
        assert stat.S_IMODE(hooks.stat().st_mode) == 0o700
        assert stat.S_IMODE(channel.stat().st_mode) == 0o600
        command = loop.store.get_agent("AGENT")
        assert command is not None and "notify=" in command.command, command

        # The agent dies; the session lives on, and so do its receipts (a resume reads them).
        pane = (await loop.session.host.agent_panes())["AGENT"]
        for proc in process_tree((await pane.info()).pid):
            proc.kill()
        client = await loop.session.host.server.connect(loop.session.name)
        found = await find_agent_pane(client, loop.session.host.server, "AGENT")
        assert found is not None
        assert await loop.session.is_up()
        assert channel.is_file()

        # `poli up --resume` starts it again in the same session: the channel is the same.
        await loop.session.up(resume=True)
        assert channel.is_file() and stat.S_IMODE(channel.stat().st_mode) == 0o600

        assert await loop.session.down() == ["AGENT"]
        assert not hooks.exists(), sorted(p.name for p in hooks.iterdir())
        assert hooks.parent.is_dir()  # only this session's directory goes
    finally:
        await loop.session.down()
        await loop.session.host.server.close()
        loop.store.close()


async def test_down_of_a_session_whose_server_died_still_removes_its_hooks_dir(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    assert server.socket_name is not None
    root = tmp_path / "proj"
    loop = open_project(root, server.socket_name)
    hooks = hooks_dir_for(loop.config)
    try:
        await loop.session.up()
        assert channel_path(hooks, "AGENT").is_file()
        server.kill()
        assert not await loop.session.is_up()
        assert await loop.session.down() == []
        assert not hooks.exists()
    finally:
        await loop.session.host.server.close()
        loop.store.close()


def test_what_gemini_made_in_its_session_home_goes_back_to_the_user(
    tmp_path: pathlib.Path,
) -> None:
    user = tmp_path / "home" / ".gemini"
    (user / "tmp" / "old").mkdir(parents=True)
    (user / "settings.json").write_text('{"ui": {"theme": "x"}}')
    (user / "projects.json").write_text('{"mine": 1}')
    hooks = tmp_path / "hooks"
    channel = create_channel(hooks, "A")
    _, env = install_hooks("gemini", ["gemini"], {"HOME": str(tmp_path / "home")}, channel)
    ours = pathlib.Path(env[GEMINI_HOME_ENV]) / ".gemini"
    # Gemini CLI at work: a chat under tmp (a link to the user's), a new history folder,
    # its registry rewritten where the user had one (through the link) ...
    (ours / "tmp" / "proj" / "chats").mkdir(parents=True)
    (ours / "tmp" / "proj" / "chats" / "session-1.jsonl").write_text("{}\n")
    (ours / "history" / "proj").mkdir(parents=True)
    (ours / "history" / "proj" / "h.txt").write_text("prompt\n")
    (ours / "installation_id").write_text("abc")

    assert remove_hooks_dir(hooks)

    assert not hooks.exists()
    assert (user / "tmp" / "proj" / "chats" / "session-1.jsonl").read_text() == "{}\n"
    assert (user / "history" / "proj" / "h.txt").read_text() == "prompt\n"
    assert (user / "installation_id").read_text() == "abc"
    # The user's own files are as they were: the session's settings copy is not theirs.
    assert (user / "settings.json").read_text() == '{"ui": {"theme": "x"}}'
    assert (user / "projects.json").read_text() == '{"mine": 1}'
    assert (user / "tmp" / "old").is_dir()


async def test_a_temporary_hooks_dir_goes_with_its_agent(tmp_path: pathlib.Path) -> None:
    # `poli agents check`, the canary, the bridge and the manager start an agent outside
    # any session: its channel is in a private temporary directory of its own.
    root = tmp_path / "proj"
    loop = open_project(root, "unused")
    driver = await AgentDriver.start(
        "AGENT",
        load_profile("fake-codex"),
        argv=[str(root / "bin" / "codex")],
        cwd=root / "work",
        ready_timeout=60,
    )
    try:
        receipts = await driver.hook_receipts()
        assert receipts is not None
        temp = receipts.channel.path.parent
        assert temp.name.startswith("poli-hooks-") and stat.S_IMODE(temp.stat().st_mode) == 0o700
        assert receipts.channel.path.is_file()
    finally:
        await driver.kill()
        loop.store.close()
    assert not temp.exists()
