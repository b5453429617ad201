"""A simulated reboot, then ``poli up --resume``: each agent resumes its own conversation.

Two agents of one CLI in one directory: the CLI's generic resume (``--continue``) hands both
the newest conversation there. politerm records each agent's conversation id as its CLI
names it (in the hook receipts; a side conversation or one without a log of its own does
not count) and restarts each with its own. The fake agent stands in for the CLI: its
profile resumes by ``--name resumed-{session}``, which its own log records at start; the
receipts are written by politerm's real hook command, as Claude Code runs it.
(tests/realcli/test_resume.py proves the same on the real CLIs.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import typing as t

import psutil

from politerm._internal.proctree import process_tree
from politerm.driver.receipts import PANE_OPTION
from politerm.driver.transcripts import own_conversation
from politerm.engine.loop import submit, templates_for
from politerm.engine.routebase import Routing
from politerm.engine.router import Router
from politerm.hooks.channel import channel_path, create_channel, hooks_dir_for
from politerm.store.models import TaskState
from politerm.testing.retry import aretry_until
from tests.loophelpers import open_loop, write_project

if t.TYPE_CHECKING:
    import pathlib

    import libtmux

    from politerm.agents.profile import TranscriptSpec
    from tests.loophelpers import Loop

TASK = 120.0  # bound on one task in these tests
PROFILE = """extends = "fake-claude"
description = "the fake agent, resuming a conversation by its id"
resume_args = ["--name", "newest"]
resume_session_args = ["--name", "resumed-{session}"]
"""


def _project(root: pathlib.Path, socket: str) -> Loop:
    profiles = root.parent / "home" / ".config" / "politerm" / "agents"
    profiles.mkdir(parents=True, exist_ok=True)
    (profiles / "fake-resume.toml").write_text(PROFILE)
    write_project(root, socket, executer_mode="claude")  # two agents of one CLI
    toml = (root / "poli.toml").read_text()
    (root / "poli.toml").write_text(toml.replace('"fake-claude"', '"fake-resume"'))
    return open_loop(root)


@contextlib.asynccontextmanager
async def _up(server: libtmux.Server, tmp_path: pathlib.Path) -> t.AsyncIterator[Loop]:
    """The project up on this test's socket (no primers); down and closed afterwards."""
    assert server.socket_name is not None
    loop = _project(tmp_path / "proj", server.socket_name)
    try:
        await loop.session.up(primers=False)
        yield loop
    finally:
        await loop.session.down()
        await loop.session.host.server.close()
        loop.store.close()


def _hook(loop: Loop, agent: str, session: str) -> None:
    """What the agent's CLI hook writes at its SessionStart: politerm's own hook command."""
    channel = create_channel(hooks_dir_for(loop.config), agent)
    payload = json.dumps({"session_id": session, "hook_event_name": "SessionStart"})
    subprocess.run(
        [sys.executable, "-m", "politerm.hooks.emit", str(channel), "claude", "SessionStart"],
        input=payload.encode(), check=True, timeout=30,
    )  # fmt: skip


async def _reboot(loop: Loop) -> None:
    """The whole tmux server and every agent process die at once."""
    procs: list[psutil.Process] = []
    for pane in (await loop.session.host.agent_panes()).values():
        procs.extend(process_tree((await pane.info()).pid))
    await loop.session.host.server.kill_server()
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):  # gone with the server already
            proc.kill()

    async def gone() -> bool:
        return not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in procs)

    await aretry_until(gone, 20, what="every agent process to die")


def _started_as(loop: Loop, agent: str) -> list[str]:
    """The names each process of ``agent`` was started with, from the fake agent's own log."""
    return [e["name"] for e in loop.log(agent) if e["event"] == "start"]


IDS = {"PLANNER": "p-1111", "EXECUTER": "e-2222"}


async def _task_naming(loop: Loop, ids: t.Mapping[str, str]) -> None:
    """Route one task; each agent's CLI names its conversation as its prompt goes in.

    The fake agent runs no hooks: its pane is tagged with a channel, as a hooked CLI's
    launch tags it, under a CLI name whose hooks report nothing but the conversation (so
    the screen alone confirms), and the receipt is written as the prompt goes in.
    """
    for name, pane in (await loop.session.host.agent_panes()).items():
        channel = create_channel(hooks_dir_for(loop.config), name)
        await pane.set_option(PANE_OPTION, f"fake:{channel}")
    agents = await loop.session.attach()
    router = Router(Routing(loop.config, loop.store, agents, templates=templates_for(loop.config)))
    for name, session in ids.items():

        async def named(name: str = name, session: str = session) -> None:
            await asyncio.to_thread(_hook, loop, name, session)

        router.agents[name].on("before-paste", named)
    submit(loop.store, loop.config, "make hello", task_id="T-1")

    def done() -> bool:
        task = loop.store.get_task("T-1")
        return task is not None and task.state is TaskState.DONE

    async with asyncio.timeout(TASK):
        await router.run(until=done)


async def _reboot_without_receipts(loop: Loop) -> None:
    """A reboot that also takes the hook receipts: the journal of turns is what is left."""
    await _reboot(loop)
    for name in IDS:
        channel_path(hooks_dir_for(loop.config), name).unlink(missing_ok=True)


async def test_reboot_resumes_each_agent_with_its_own_conversation_id(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    async with _up(server, tmp_path) as loop:
        await _task_naming(loop, IDS)
        # Each agent's id is on its prompts' rows in the journal of turns.
        assert {n: loop.store.journal_conversation(n) for n in IDS} == IDS
        await _reboot_without_receipts(loop)
        said: list[str] = []
        await loop.session.up(resume=True, primers=False, on_event=said.append)

        assert _started_as(loop, "PLANNER") == ["", "resumed-p-1111"]
        assert _started_as(loop, "EXECUTER") == ["", "resumed-e-2222"]
        assert "PLANNER: resuming its own conversation p-1111" in said, said
        events = [e.detail for e in loop.store.list_events() if e.kind == "resume"]
        assert "--name resumed-p-1111: its own conversation p-1111" in events, events


async def test_hook_receipts_name_the_conversation_when_no_prompt_was_handed(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    async with _up(server, tmp_path) as loop:
        for name, session in IDS.items():
            _hook(loop, name, session)
        await _reboot(loop)  # the receipts outlive it (beside the store)
        said: list[str] = []
        await loop.session.up(resume=True, primers=False, on_event=said.append)

        assert _started_as(loop, "PLANNER") == ["", "resumed-p-1111"]
        assert _started_as(loop, "EXECUTER") == ["", "resumed-e-2222"]


async def test_no_conversation_id_falls_back_to_the_generic_resume_and_says_so(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    async with _up(server, tmp_path) as loop:
        await _task_naming(loop, {"PLANNER": "p-1111"})  # EXECUTER's CLI never named one
        await _reboot_without_receipts(loop)
        said: list[str] = []
        await loop.session.up(resume=True, primers=False, on_event=said.append)

        assert _started_as(loop, "PLANNER") == ["", "resumed-p-1111"]
        assert _started_as(loop, "EXECUTER") == ["", "newest"]
        want = "EXECUTER: resuming no conversation id known: the newest conversation"
        want += " (--name newest)"
        assert want in said, said


def _claude_log(home: pathlib.Path, cwd: pathlib.Path, session: str) -> None:
    slug = "".join(c if c.isalnum() or c == "-" else "-" for c in str(cwd))
    folder = home / ".claude" / "projects" / slug
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{session}.jsonl").write_text('{"type":"user"}\n')


def test_own_conversation_is_the_newest_named_with_a_log_of_its_own(tmp_path: pathlib.Path) -> None:
    from politerm.agents.profile import load_profile

    home, cwd = tmp_path / "home", tmp_path / "work"
    env = {"HOME": str(home)}
    claude = load_profile("claude").transcript
    codex = load_profile("codex").transcript
    opencode = load_profile("opencode").transcript
    assert claude is not None and codex is not None and opencode is not None
    _claude_log(home, cwd, "aaaa-1")
    _claude_log(home, cwd, "bbbb-2")  # the other agent's, and the newest in the folder

    def own(names: list[str], spec: TranscriptSpec) -> str:
        return own_conversation(names, spec, cwd, env)

    assert own(["aaaa-1"], claude) == "aaaa-1"
    assert own(["bbbb-2", "aaaa-1"], claude) == "aaaa-1"
    # A session that never got a prompt keeps no log: the one before it is the agent's.
    assert own(["aaaa-1", "cccc-3"], claude) == "aaaa-1"
    assert own(["cccc-3"], claude) == ""
    # An id is never a path.
    assert own(["../../etc/passwd"], claude) == ""
    # Codex titles a thread in a side thread that reports its own turn, with no rollout.
    day = home / ".codex" / "sessions" / "2026" / "11" / "28"
    day.mkdir(parents=True)
    (day / "rollout-2026-11-28T10-00-00-0190-main.jsonl").write_text("{}\n")
    assert own(["0190-main", "0190-title"], codex) == "0190-main"
    # opencode keeps every conversation in one database: the newest named is its own.
    assert own(["ses_1", "ses_2"], opencode) == "ses_2"
