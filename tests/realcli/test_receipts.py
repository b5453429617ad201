"""Receipts from the agents' own hooks, with the real CLIs against the loopback model server.

``poli up`` installs politerm's hooks in each agent's session configuration; a driver that
attaches to the pane finds the channel through ``@poli_hooks``. A prompt is then confirmed
by the agent's own prompt event (and the screen agrees), and the turn ends on its stop
event, and a permission question is announced by its notification. Codex reports only the
end of a turn (its ``notify``). opencode reports through a plugin politerm adds to its
``plugin`` list for the session (its ``chat.message`` hook, ``session.idle`` and
``permission.asked``/``replied`` events).
"""

from __future__ import annotations

import json
import stat
import typing as t

import pytest

from politerm._internal import vault
from politerm.agents.approval import ApprovalPolicy
from politerm.agents.state import AgentState
from politerm.driver import AgentDriver, Expect, TurnOutcome
from politerm.driver.receipts import PANE_OPTION, parse_option
from politerm.hooks.events import HookEvent, HookKind
from politerm.redact import Redactor
from politerm.testing.mockllm import Rule
from tests.realcli.clis import API, Options
from tests.realcli.helpers import REPLY, AgentSpec, written

if t.TYPE_CHECKING:
    import pathlib

    from politerm.testing.mockllm import MockLLM
    from tests.realcli.conftest import RigFactory
    from tests.realcli.helpers import Agent, Rig

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(300)]

REPLY_TEXT = (
    "Here is the plan.\n\n"
    '[[POLI:MSG {"to":"EXECUTER","type":"plan","id":"R1","nonce":"{nonce}"}]]\n'
    "<PLAN>\n1. do the thing\n</PLAN>\n"
    "[[/POLI:MSG]]\n\nEnd of plan."
)
RULE = Rule(r"RECEIPT-PLAN \(nonce=(?P<nonce>[0-9a-f]+)\)", REPLY_TEXT)


def _prompt(nonce: str) -> str:
    return f"Please make a plan. RECEIPT-PLAN (nonce={nonce})"


async def _channel(agent: Agent) -> pathlib.Path:
    found = parse_option(await agent.pane.get_option(PANE_OPTION))
    assert found is not None, f"{agent.name}: no {PANE_OPTION} on its pane"
    cli, path = found
    assert cli == agent.spec.cli
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    return path


def _driver(r: Rig, agent: Agent) -> AgentDriver:
    """A driver attached to the agent's pane, as a router attaches one (cwd, env)."""
    return AgentDriver(
        "AGENT", agent.profile, agent.pane, store=r.store, cwd=agent.spec.workdir,
        env=agent.spec.env,
    )  # fmt: skip


def _receipts(path: pathlib.Path) -> list[dict[str, t.Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("cli", ["claude", "gemini", "opencode"])
async def test_hook_confirms_delivery_and_ends_the_turn(
    cli: str, rig: RigFactory, llm: MockLLM
) -> None:
    llm.add(RULE)
    r = await rig({"AGENT": AgentSpec(cli)})
    agent = r.agent("AGENT")
    path = await _channel(agent)
    driver = _driver(r, agent)

    result = await driver.run_turn(_prompt, Expect.block("plan"), timeout=REPLY)

    assert result.outcome is TurnOutcome.ANSWERED, result.error
    assert result.block is not None and result.block.id == "R1"
    assert result.delivery is not None
    # The transcript is looked at once, not waited for, when the hook already confirmed.
    assert result.delivery.sources[:2] == ("hook", "screen"), result.delivery
    assert result.ended_by == "hook+screen", result
    assert result.drift == (), result.drift
    kinds = [r["kind"] for r in _receipts(path)]
    assert HookKind.SESSION.value in kinds, kinds
    assert kinds.index(HookKind.PROMPT.value) < len(kinds) - 1 - kinds[::-1].index("stop")
    prompt = next(r for r in _receipts(path) if r["kind"] == "prompt")
    assert "RECEIPT-PLAN" in prompt["prompt"]["tail"], prompt
    assert [e.detail for e in r.store.list_events() if e.kind == "drift"] == []
    if cli == "opencode":
        _opencode_plugin_is_the_sessions_own(agent, path)


def _opencode_plugin_is_the_sessions_own(agent: Agent, channel: pathlib.Path) -> None:
    """The plugin lives beside the channel (0600); the user's opencode config is untouched."""
    plugin = channel.with_name(channel.name.removesuffix(".jsonl") + ".opencode-plugin.js")
    assert stat.S_IMODE(plugin.stat().st_mode) == 0o600
    events = [r["event"] for r in _receipts(channel)]
    assert events[0] == "plugin.loaded", events
    rest = tuple(e for e in events if e != "plugin.loaded")
    assert rest[:2] == ("chat.message", "session.idle"), events
    user = agent.spec.home / ".config" / "opencode"
    assert "plugin" not in json.loads((user / "opencode.json").read_text())
    assert not (user / "plugin").exists() and not (user / "plugins").exists()


async def test_codex_notify_ends_the_turn(rig: RigFactory, llm: MockLLM) -> None:
    llm.add(RULE)
    r = await rig({"AGENT": AgentSpec("codex")})
    agent = r.agent("AGENT")
    path = await _channel(agent)
    driver = _driver(r, agent)

    result = await driver.run_turn(_prompt, Expect.block("plan"), timeout=REPLY)

    assert result.outcome is TurnOutcome.ANSWERED, result.error
    # Codex has no prompt event without a trusted hooks file: the screen confirms the
    # delivery, and its rollout (the transcript) holding the prompt is the agent's word.
    assert result.delivery is not None
    assert set(result.delivery.sources) == {"screen", "transcript"}, result.delivery
    assert result.ended_by == "hook+screen", result
    stops = [r for r in _receipts(path) if r["kind"] == "stop"]
    assert stops and stops[-1]["event"] == "agent-turn-complete", stops
    assert "RECEIPT-PLAN" in stops[-1]["prompt"]["tail"]


@pytest.mark.parametrize("cli", ["gemini", "opencode"])
async def test_transcript_ends_the_turn_where_no_hook_says_so(
    cli: str, rig: RigFactory, llm: MockLLM
) -> None:
    llm.add(RULE)
    r = await rig({"AGENT": AgentSpec(cli, hooks=False)})
    agent = r.agent("AGENT")
    assert await agent.pane.get_option(PANE_OPTION) in (None, "")
    driver = _driver(r, agent)

    result = await driver.run_turn(_prompt, Expect.block("plan"), timeout=REPLY)

    assert result.outcome is TurnOutcome.ANSWERED, result.error
    assert result.block is not None and result.block.id == "R1"
    assert await driver.hook_receipts() is None
    # The CLI's own record holds the prompt: with no hooks, it is the agent's word.
    assert result.delivery is not None
    assert set(result.delivery.sources) == {"screen", "transcript"}, result.delivery
    assert f"{cli} transcript " in " ".join(result.delivery.evidence), result.delivery
    check = driver._word.transcript  # the driver's part under test
    assert check is not None and check.confirmed() is not None
    # Its record says the turn is over, and the screen agrees.
    assert result.ended_by == "transcript+screen", result
    assert result.drift == (), result.drift
    assert (check.turn_over() or "").startswith(f"{cli} transcript: "), check.turn_over()
    assert [e.detail for e in r.store.list_events() if e.kind == "drift"] == []


@pytest.mark.parametrize("profile", ["aider", "aider-raw"])
async def test_aider_notification_ends_the_turn(
    profile: str, rig: RigFactory, llm: MockLLM
) -> None:
    llm.add(RULE)
    r = await rig({"AGENT": AgentSpec("aider", profile=profile)})
    agent = r.agent("AGENT")
    path = await _channel(agent)
    driver = _driver(r, agent)

    result = await driver.run_turn(_prompt, Expect.block("plan"), timeout=REPLY)

    assert result.outcome is TurnOutcome.ANSWERED, result.error
    assert result.block is not None and result.block.id == "R1"
    # aider has no prompt event: the screen alone confirms the delivery.
    assert result.delivery is not None and result.delivery.sources == ("screen",)
    # Its notification command ran when it waited for input again: that ended the turn.
    # aider runs it first thing on its way back to the prompt, before it draws the prompt;
    # on a cold first run the prompt was once drawn more than the grace later, and the
    # turn ended on the notification alone, with that lag recorded as turn-end drift.
    assert result.ended_by in ("hook+screen", "hook"), result
    if result.ended_by == "hook":
        (drift,) = result.drift
        assert drift.startswith("turn-end: hook says aider hook waiting (stop)"), drift
    else:
        assert result.drift == (), result.drift
    stops = [e for e in _receipts(path) if e["kind"] == "stop"]
    assert [e["event"] for e in stops] == ["waiting"], stops
    assert [e.detail for e in r.store.list_events() if e.kind == "drift"] == list(result.drift)


@pytest.mark.parametrize("cli", ["claude", "gemini", "opencode"])
async def test_approval_is_pending_when_its_notification_says_so(
    cli: str, rig: RigFactory, llm: MockLLM
) -> None:
    llm.add(Rule(r"RECEIPT-TOOL", "Writing it.", command="echo by-hook > hook.txt", after="Done."))
    # opencode asks before a shell command only when its permissions say so.
    r = await rig({"AGENT": AgentSpec(cli, Options(ask=cli == "opencode"))})
    agent = r.agent("AGENT")
    path = await _channel(agent)
    driver = _driver(r, agent)

    result = await driver.deliver("Run the tool please. RECEIPT-TOOL")
    assert result.submitted, result

    # The hook's own receipt of the prompt: under load opencode's transcript can prove the
    # submit first (CI: sources transcript+screen at load 20), and the receipt comes after.
    async def received() -> bool:
        return any(e["kind"] == HookKind.PROMPT.value for e in _receipts(path))

    await agent.wait(received, f"{cli}'s hook receipt of the prompt")

    async def notified() -> HookEvent | None:
        return (await driver.observe()).hook_approval

    pending = await agent.wait(notified, f"{cli}'s permission notification")
    assert pending.kind is HookKind.APPROVAL and pending.cli == cli
    # Gemini runs the hook before it draws the question: the screen follows.
    await agent.wait_state(AgentState.WAITING_APPROVAL)
    await agent.answer_approval(ApprovalPolicy.of("approve"))
    await agent.wait(written(agent.spec.workdir / "hook.txt"), f"{cli} to run the tool")

    async def cleared() -> bool:
        return (await driver.observe()).hook_approval is None

    await agent.wait(cleared, f"{cli}'s tool receipt after the approval")
    kinds = [r["kind"] for r in _receipts(path)]
    assert kinds.index("approval") < kinds.index("tool"), kinds
    assert driver.drifts == ()


PATTERN = r"ACME-TOKEN-[A-Z0-9]{20}"  # a project's own [redact] pattern
TOKEN = "ACME-TOKEN-" + "7Q" * 10  # matches it, and none of the built-in patterns


@pytest.mark.parametrize("cli", ["claude", "gemini", "opencode"])
async def test_a_project_pattern_secret_stays_out_of_the_receipts(
    cli: str, rig: RigFactory, llm: MockLLM
) -> None:
    # The CLI runs politerm's hook itself; the hook never reads poli.toml.
    llm.add(RULE)
    r = await rig(
        {"AGENT": AgentSpec(cli)}, extra=f"[redact]\npatterns = [{json.dumps(PATTERN)}]\n\n"
    )
    agent = r.agent("AGENT")
    path = await _channel(agent)
    driver = _driver(r, agent)
    # The store keeps the prompt as every workflow's does: markers, the secrets in the vault.
    vault.use_tmux(r.config.tmux.socket)
    r.store.set_redaction(Redactor(r.config.redact.patterns), vault.keep)

    def prompt(nonce: str) -> str:
        return r.store.redact(f"{TOKEN} {_prompt(nonce)} {TOKEN}")

    result = await driver.run_turn(prompt, Expect.block("plan"), timeout=REPLY)

    assert result.outcome is TurnOutcome.ANSWERED, result.error
    # The agent got the original (the model saw the secret) ...
    assert any(TOKEN in m.user_text for m in llm.requests(api=API[cli])), "no original"
    # ... its receipt kept none of it, and still confirmed the delivery of the marked prompt.
    assert result.delivery is not None
    assert result.delivery.sources[:2] == ("hook", "screen"), result.delivery
    assert result.drift == (), result.drift
    (receipt,) = [e for e in _receipts(path) if e["kind"] == "prompt"]
    assert receipt["prompt"]["head"].startswith("[REDACTED:custom] Please"), receipt
    assert receipt["prompt"]["tail"].endswith(") [REDACTED:custom]"), receipt
    # What politerm wrote beside the channel; Gemini's session home below it holds Gemini's
    # own chat log, which is the agent's (not redacted, as its transcripts: security.md).
    for kept in path.parent.iterdir():
        if kept.is_file() and not kept.is_symlink():
            assert b"ACME-TOKEN-7Q" not in kept.read_bytes(), kept
