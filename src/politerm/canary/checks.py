"""The canary's checks: one CLI release driven through the ``agents check`` scenarios.

Each CLI runs in a pane of a private tmux server, set up by :mod:`politerm.canary.recipes`
against a loopback model server (:class:`~politerm.testing.mockllm.MockLLM`), and is driven
by the same :class:`~politerm.driver.AgentDriver` every workflow uses:

- **ready**: started, start-up dialogs answered, the ready prompt seen;
- **deliver**: a prompt pasted, submitted and confirmed;
- **block**: the reply's tagged block (with the turn's nonce) read back;
- **approval**: a shell-command question recognised, the command read from it, approved
  by policy, and the command's file written;
- **two turns**: two more prompts in a row, each answered with its block;
- **tall loop**, **two tasks**: the Planner⇄Executer loop under ``ask`` + patterns
  (:mod:`politerm.canary.loop`).

A check that fails keeps the screen lines the detectors were looking at, and what they
read there, so a changed TUI shows where a detector broke.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import secrets
import tempfile
import typing as t

from politerm.agents.approval import ApprovalPolicy
from politerm.agents.profile import load_profile
from politerm.canary.loop import LOOP_CHECKS
from politerm.canary.recipes import Options, prepare
from politerm.canary.result import CheckResult
from politerm.errors import PolitermError

if t.TYPE_CHECKING:
    from politerm.canary.install import InstalledCli
    from politerm.driver import AgentDriver, TurnResult
    from politerm.testing.mockllm import MockLLM

CHECKS = ("ready", "deliver", "block", "approval", "two turns", *LOOP_CHECKS)
# The profile each CLI runs under in the canary, and the arguments it adds.
PROFILES = {"aider": "aider"}
EXTRA_ARGS = {"aider": ["--edit-format", "diff"]}
# aider runs an approved command itself: the model never sees its result, so the tool
# turn has no answer and the check is the question and the file alone.
NO_TOOL_RESULT = frozenset({"aider"})


@dataclasses.dataclass
class CanaryResult:
    """Every check of one CLI release."""

    cli: str
    version: str
    checks: dict[str, CheckResult] = dataclasses.field(default_factory=dict)
    error: str = ""  # the release could not be installed or asked its version

    @property
    def ok(self) -> bool:
        """True when every check passed."""
        return not self.error and all(
            self.checks.get(n) is not None and self.checks[n].ok for n in CHECKS
        )


def _block(step: str) -> str:
    return (
        f"Here it is.\n\n"
        f'[[POLI:MSG {{"to":"ORCH","type":"done","id":"{step}","nonce":"{{nonce}}"}}]]\n'
        f"the canary step {step} is done\n"
        "[[/POLI:MSG]]\n"
    )


def _rules() -> list[t.Any]:
    from politerm.testing.mockllm import Rule

    return [
        Rule(
            r"CANARY-TOOL nonce=(?P<nonce>[0-9a-f]+)",
            "Running the command.",
            command="echo canary > canary.txt",
            escalate=True,
            after=_block("TOOL"),
        ),
        *(Rule(rf"CANARY-{s} nonce=(?P<nonce>[0-9a-f]+)", _block(s)) for s in ("B1", "T1", "T2")),
    ]


def _screen(driver: AgentDriver) -> tuple[str, ...]:
    lines = [ln.rstrip() for ln in driver.last_screen if ln.strip()]
    reading = driver.reading
    said = f"-> read {reading.state.value} ({reading.rule})"
    return (*lines[-10:], said)


async def _turn(
    driver: AgentDriver, step: str, timeout: float, *, idle_after: float | None = None
) -> TurnResult:
    from politerm.driver import Expect

    return await driver.run_turn(
        lambda n: f"Answer with the canary block. CANARY-{step} nonce={n}",
        Expect.block("done", block_id=step),
        timeout=timeout,
        nudge=None,
        idle_after=idle_after,
    )


async def run_checks(
    installed: InstalledCli,
    llm: MockLLM,
    *,
    ready_timeout: float = 120.0,
    turn_timeout: float = 120.0,
    say: t.Callable[[str], None] | None = None,
) -> CanaryResult:
    """Run every check on one installed CLI; never raises for a CLI that misbehaves."""
    from politerm.driver import AgentDriver, Host
    from politerm.store import RunStore
    from politerm.tmux.server import TmuxServer

    say = say or (lambda _line: None)
    cli = installed.cli
    result = CanaryResult(cli, installed.version)
    llm.add(*_rules())
    with tempfile.TemporaryDirectory(prefix=f"poli-canary-{cli}-") as scratch:
        root = pathlib.Path(scratch)
        spec = prepare(
            cli, installed.binary, llm, root / "home", root / "work", Options(ask=True),
            PROFILES.get(cli),
        )  # fmt: skip
        profile = load_profile(spec.profile)
        server = TmuxServer(
            f"poli-canary-{os.getpid()}-{secrets.token_hex(3)}", config_dir=root / ".tmux"
        )
        store = RunStore.open(root / "canary.sqlite3")
        driver: AgentDriver | None = None

        def record(name: str, ok: bool, detail: str, screen: tuple[str, ...] = ()) -> bool:
            result.checks[name] = CheckResult(name, ok, detail, () if ok else screen)
            say(f"{cli} {installed.version}: {name}: {'ok' if ok else 'FAILED'}: {detail}")
            return ok

        try:
            host = Host(server, "canary")
            await host.ensure(window="idle")
            try:
                driver = await AgentDriver.start(
                    cli,
                    profile,
                    argv=[*spec.argv, *EXTRA_ARGS.get(cli, [])],
                    host=host,
                    window=cli,
                    size=(200, 50),
                    cwd=spec.workdir,
                    env=spec.env,
                    ready_timeout=ready_timeout,
                    store=store,
                    policy=ApprovalPolicy.of("approve"),
                )
            except PolitermError as exc:
                lines = tuple(str(exc).splitlines()[1:][-10:])
                record("ready", False, str(exc).splitlines()[0][:200], lines)
                return result
            record("ready", True, driver.reading.rule)
            await _scenarios(driver, spec.workdir, turn_timeout, record)
        finally:
            if driver is not None:
                with contextlib.suppress(Exception):
                    await driver.kill()
            with contextlib.suppress(Exception):
                await server.kill_server()
            await server.close()
            store.close()
    return result


async def _scenarios(
    driver: AgentDriver,
    workdir: pathlib.Path,
    timeout: float,
    record: t.Callable[..., bool],
) -> None:
    first = await _turn(driver, "B1", timeout)
    delivery = first.delivery
    delivered = delivery is not None and (delivery.ok or delivery.submitted)
    how = f"{delivery.outcome.value} [{delivery.rule}]" if delivery is not None else "not tried"
    if not record("deliver", delivered, how, _screen(driver)):
        return
    if not record("block", first.ok, first.error or "block read back", _screen(driver)):
        return
    no_result = driver.name in NO_TOOL_RESULT
    tool = await _turn(driver, "TOOL", timeout, idle_after=5.0 if no_result else None)
    made = (workdir / "canary.txt").is_file()
    answered = driver.approvals_answered
    ok = (tool.ok or no_result) and made and answered > 0
    asked = f"{answered} question(s) approved" if answered else "no approval question was asked"
    why = (
        f"{asked}; canary.txt {'written' if made else 'missing'}; "
        f"turn {tool.outcome.value}{': ' + tool.error if tool.error and not ok else ''}"
    )
    # A broken approval detector leaves the turns usable: the last check still runs.
    record("approval", ok, why[:300], _screen(driver))
    second = await _turn(driver, "T1", timeout)
    third = await _turn(driver, "T2", timeout) if second.ok else second
    both = second.ok and third.ok
    why = "both answered" if both else (second.error or third.error)
    record("two turns", both, why[:300], _screen(driver))
