"""A reboot, then ``poli up --resume``: each real agent gets its own conversation back.

Two agents of the same CLI work in one directory with one home, so the CLI's generic resume
(``--continue``, ``resume --last``, ``--resume latest``) would hand both the newest
conversation there. Each says something only it was told; then the whole tmux server and
every agent process die (a reboot), and ``poli up --resume`` restarts them. Ground truth is
what each CLI sends the model after the resume: the history it carries is its own, and not
the other agent's.
"""

from __future__ import annotations

import contextlib
import json
import typing as t

import psutil
import pytest

from politerm._internal.proctree import process_tree
from politerm.driver import AgentDriver, Expect, TurnOutcome
from politerm.store.journal import Serves, Workflow
from politerm.testing.mockllm import Rule
from politerm.testing.retry import aretry_until
from tests.realcli.helpers import GONE, REPLY, AgentSpec

if t.TYPE_CHECKING:
    from politerm.testing.mockllm import MockLLM
    from tests.realcli.conftest import RigFactory
    from tests.realcli.helpers import Rig

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(420)]

WORDS = {"A": "alpha-7301", "B": "bravo-5527"}


def _note(nonce: str) -> str:
    header = f'{{"to":"USER","type":"note","id":"N1","nonce":"{nonce}"}}'
    return f"Noted.\n\n[[POLI:MSG {header}]]\n<NOTE>\nkept\n</NOTE>\n[[/POLI:MSG]]\n"


RULES = [
    Rule(r"(?:REMEMBER|RECALL)-\S+ \(nonce=(?P<nonce>[0-9a-f]+)\)", _note("{nonce}")),
]


def _driver(r: Rig, name: str) -> AgentDriver:
    """A driver attached to the agent's pane with the store, as the router attaches one."""
    agent = r.agent(name)
    return AgentDriver(
        name, agent.profile, agent.pane, store=r.store, cwd=agent.spec.workdir,
        env=agent.spec.env,
    )  # fmt: skip


async def _turn(r: Rig, name: str, text: str, driver: AgentDriver | None = None) -> None:
    # Each prompt serves a record, as every workflow's does: it gets its journal row.
    result = await (driver or _driver(r, name)).run_turn(
        lambda nonce: f"{text} (nonce={nonce})",
        Expect.block("note"),
        timeout=REPLY,
        serves=Serves(Workflow.PIPELINE, "pipeline-step", ("resume", f"{name}:{text}")),
    )
    assert result.outcome is TurnOutcome.ANSWERED, (name, result.error)


async def _reboot(r: Rig) -> None:
    """Kill the tmux server and every agent process, as a power cut would."""
    procs: list[psutil.Process] = []
    for agent in r.agents.values():
        procs.extend(process_tree((await agent.pane.info()).pid))
    await r.session.host.server.kill_server()
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()

    async def gone() -> bool:
        return not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in procs)

    await aretry_until(gone, GONE, what="every agent process to die")


def _history(llm: MockLLM, marker: str) -> str:
    """The whole request (its history) in which the newest user text carries ``marker``."""
    found = [q for q in llm.requests() if marker in q.user_text]
    assert found, f"no request to the model carried {marker!r}"
    return json.dumps(found[-1].body)


@pytest.mark.parametrize("cli", ["claude", "codex", "gemini", "opencode"])
async def test_reboot_resumes_each_agent_in_its_own_conversation(
    cli: str, rig: RigFactory, llm: MockLLM
) -> None:
    llm.add(*RULES)
    r = await rig({n: AgentSpec(cli, place="shared") for n in WORDS})
    assert r.specs["A"].workdir == r.specs["B"].workdir
    drivers = {n: _driver(r, n) for n in WORDS}
    for name, word in WORDS.items():  # B's conversation is the newest in the directory
        await _turn(r, name, f"REMEMBER-{word}", drivers[name])
    # The CLI's own ids, from the agents' hooks, are recorded in the journal of turns: by
    # the drivers' looks, as a router's (Codex's notify hook may write after the block is
    # on screen).

    async def recorded() -> dict[str, str] | None:
        for d in drivers.values():
            await d.observe()
        found = {n: r.store.journal_conversation(n) for n in WORDS}
        return found if all(found.values()) else None

    stored = await aretry_until(recorded, REPLY, what="both conversation ids recorded")
    assert stored["A"] != stored["B"], stored
    ids = {n: f"conversation {stored[n]}" for n in WORDS}

    await _reboot(r)
    said: list[str] = []
    await r.up(resume=True, say=said.append)

    for name in WORDS:
        assert any(f"{name}: resuming its own {ids[name]}" in s for s in said), "\n".join(
            [*said, str(ids)]
        )
    for name, word in WORDS.items():
        await _turn(r, name, f"RECALL-{name}")
        history = _history(llm, f"RECALL-{name}")
        other = next(w for n, w in WORDS.items() if n != name)
        assert f"REMEMBER-{word}" in history, f"{name} lost its own conversation"
        assert f"REMEMBER-{other}" not in history, f"{name} resumed the other's conversation"
