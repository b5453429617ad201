"""Real agent CLIs: time from ``poli up`` to ready, delivery confirmation time, submit retries.

For each of claude, codex, gemini, opencode and aider (installed into ``.cache/realcli/``
when missing, as the realcli tests do), against the loopback mock model server:

* ``up → ready``: :meth:`Session.up` until the agent is ready (includes the CLI's start);
* ``deliver``: :func:`deliver` from paste to confirmed submission, over N prompts;
* ``retries``: submit key presses beyond the first, summed over the N prompts.

``python -m bench.bench_realcli [--quick]`` (20 prompts per CLI; 5 with ``--quick``).
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import shutil
import tempfile
import time

from tests.realcli.helpers import AgentSpec, write_rig
from tests.realcli.install import Installed, ensure_installed

from bench._common import Row, Stats, check, cli, print_table
from politerm.agents.state import AgentState
from politerm.driver.delivery import deliver
from politerm.testing.mockllm import MockLLM, Rule
from politerm.testing.retry import aretry_until

CLIS = ["claude", "codex", "gemini", "opencode", "aider"]
PROFILES = {"aider": "aider-raw"}


async def _one(name: str, prompts: int, installed: Installed, root: pathlib.Path) -> Row:
    llm = MockLLM([Rule(r"BENCH-(?P<n>\d+)", "Reply {n}.")]).start()
    socket = f"poli-bench-realcli-{os.getpid()}-{name}"
    rig = write_rig(
        root / name, socket, llm, installed, {"AGENT": AgentSpec(name, profile=PROFILES.get(name))}
    )
    try:
        start = time.monotonic()
        agents = await rig.up()
        up_ms = (time.monotonic() - start) * 1000
        agent = agents["AGENT"]
        times: list[float] = []
        retries = 0
        for i in range(prompts):
            result = await deliver(agent.pane, f"Say your reply. BENCH-{i}", agent.profile)
            check(result.ok, f"{name}: prompt {i} not delivered: {result}")
            times.append(result.elapsed * 1000)
            retries += result.submits - 1

            async def answered(i: int = i) -> bool:
                lines = await agent.lines()
                return any(f"Reply {i}." in ln for ln in lines) and (
                    await agent.state() is AgentState.READY
                )

            await aretry_until(answered, 60, interval=0.05, what=f"{name} reply {i}")
        s = Stats.of(times)
        version = installed.versions[name]
        return {
            "cli": f"{name} {version}",
            "up→ready ms": up_ms,
            "deliver p50 ms": s.p50,
            "deliver p99 ms": s.p99,
            "deliver max ms": s.max,
            "prompts": prompts,
            "retries": retries,
        }
    finally:
        await rig.close()
        llm.stop()


def main(quick: bool = False) -> list[Row]:
    """Bring each real CLI up once and deliver N prompts to it; print one row per CLI."""
    prompts = 5 if quick else 20
    installed = ensure_installed(CLIS)
    root = pathlib.Path(tempfile.mkdtemp(prefix="poli-bench-realcli-"))
    old_home = os.environ.get("HOME")
    os.environ["HOME"] = str(root / "home")  # keep politerm's own state out of the user's
    try:
        rows = [asyncio.run(_one(name, prompts, installed, root)) for name in CLIS]
    finally:
        if old_home is not None:
            os.environ["HOME"] = old_home
        shutil.rmtree(root, ignore_errors=True)
    return print_table(f"real CLIs: up to ready, delivery over {prompts} prompts", rows)


if __name__ == "__main__":
    cli(main)
