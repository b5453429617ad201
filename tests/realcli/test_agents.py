"""Each real agent CLI in a real pane: ready, delivery, a tagged block, approvals, a tool call.

The CLIs talk to the test's loopback model server (``politerm.testing.mockllm``), which
answers from the rules each test adds and records every request.
"""

from __future__ import annotations

import typing as t

import pytest

from politerm.agents.approval import ApprovalPolicy, Decision
from politerm.agents.state import AgentState
from politerm.driver.delivery import Outcome, deliver
from politerm.testing.mockllm import Rule
from tests.realcli.clis import API, DIALOGS, Options
from tests.realcli.helpers import AgentSpec, written

if t.TYPE_CHECKING:
    from politerm.agents.profile import AgentProfile
    from politerm.terminal import Snapshot
    from politerm.testing.mockllm import MockLLM
    from tests.realcli.conftest import RigFactory

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(300)]

CLIS = ["claude", "codex", "gemini", "opencode", "aider"]
# CLIs that ask before running a plain shell command (the others need to be told to).
ASKS_BY_DEFAULT = {"claude", "gemini", "aider"}

PLAN_REPLY = (
    "Here is the plan.\n\n"
    '[[POLI:MSG {"to":"EXECUTER","type":"plan","id":"T{n}"}]]\n'
    "<PLAN>\n1. do the thing\n2. check the thing\n</PLAN>\n"
    "[[/POLI:MSG]]\n\nEnd of plan."
)


def _agent(cli: str, **kw: t.Any) -> AgentSpec:
    # aider has no tool protocol: with the diff edit format a bash block in the reply
    # makes it ask "Run shell command?".
    args = ("--edit-format", "diff") if cli == "aider" else ()
    return AgentSpec(cli, args=args, **kw)


def _reason_shows_the_screen(profile: AgentProfile, snap: Snapshot | None, rule: str) -> None:
    """A detector's reason names what the screen showed, never the regex behind it."""
    sources = {f"{key}: {rx.pattern}" for key, rxs in profile._patterns.items() for rx in rxs}
    assert rule not in sources, rule
    key, _, shown = rule.partition(": ")
    if snap is not None and key in profile._patterns and shown.startswith('"'):
        screen = "\n".join(snap.lines)
        for part in shown.strip('"').split(" | "):
            for piece in part.split("…"):
                assert piece in screen, (rule, snap.lines)


@pytest.mark.parametrize("cli", CLIS)
async def test_prompt_block_and_tool_call(cli: str, rig: RigFactory, llm: MockLLM) -> None:
    llm.add(
        Rule(r"REALCLI-PLAN-(?P<n>\d+)", PLAN_REPLY),
        Rule(
            r"REALCLI-TOOL",
            "Writing the file.",
            command="echo made-by-tool > tool.txt",
            after="Wrote tool.txt.",
        ),
    )
    # aider's pretty markdown drops <PLAN> and joins the closing tag to the last list
    # item; its --no-pretty profile keeps the block intact.
    profile = "aider-raw" if cli == "aider" else None
    r = await rig({"AGENT": _agent(cli, profile=profile)})
    agent = r.agent("AGENT")
    assert await agent.state() is AgentState.READY
    _reason_shows_the_screen(
        agent.profile, await agent.snapshot(), agent.profile.detect(await agent.snapshot()).rule
    )

    result = await deliver(agent.pane, "Please make a plan. REALCLI-PLAN-7", agent.profile)
    assert result.outcome is Outcome.DELIVERED, result
    _reason_shows_the_screen(agent.profile, None, result.rule)
    block = await agent.wait_block()
    assert (block.to, block.type, block.id) == ("EXECUTER", "plan", "T7")
    assert "do the thing" in block.body and "check the thing" in block.body
    main = llm.requests(api=API[cli])
    assert any("REALCLI-PLAN-7" in m.user_text for m in main), main
    await agent.wait_state(AgentState.READY)

    result = await deliver(agent.pane, "Run the tool please. REALCLI-TOOL", agent.profile)
    assert result.ok or (result.outcome is Outcome.BLOCKED and result.submitted), result
    target = agent.spec.workdir / "tool.txt"
    if cli in ASKS_BY_DEFAULT:
        await agent.wait_state(AgentState.WAITING_APPROVAL)
        verdict = await agent.answer_approval(ApprovalPolicy.of("approve"))
        assert verdict.decision is Decision.APPROVE
    await agent.wait(written(target), f"{cli} to write {target.name}")
    assert target.read_text().strip() == "made-by-tool"
    if cli != "aider":  # aider runs the command itself; the model never sees a result
        # The file exists as soon as the command ran; the CLI sends the result to the model
        # a moment later, and its screen may read idle in between.
        async def tool_result_sent() -> bool:
            return any(m.tool_result for m in llm.requests(api=API[cli]))

        await agent.wait(tool_result_sent, f"{cli} to send the tool's result to the model")
    await agent.wait_state(AgentState.READY)


@pytest.mark.parametrize("cli", CLIS)
async def test_approval_question_answered_by_policy(
    cli: str, rig: RigFactory, llm: MockLLM
) -> None:
    # Codex asks only for commands that want out of its sandbox; opencode when told to.
    llm.add(
        Rule(r"REALCLI-YES", "Asking.", command="echo approved > yes.txt", escalate=True),
        Rule(r"REALCLI-NO", "Asking.", command="echo denied > no.txt", escalate=True),
    )
    r = await rig({"AGENT": _agent(cli, options=Options(ask=True))})
    agent = r.agent("AGENT")
    policy = ApprovalPolicy.of("deny", [r"^echo approved "])

    result = await deliver(agent.pane, "Please run it. REALCLI-YES", agent.profile)
    assert result.submitted, result
    await agent.wait_state(AgentState.WAITING_APPROVAL)
    request = agent.profile.approval_request(await agent.snapshot())
    assert request is not None and "echo approved" in request.command, request
    assert (await agent.answer_approval(policy)).decision is Decision.APPROVE
    yes = agent.spec.workdir / "yes.txt"
    await agent.wait(written(yes), f"{cli} to write yes.txt")
    await agent.wait_state(AgentState.READY)

    result = await deliver(agent.pane, "Please run it. REALCLI-NO", agent.profile)
    assert result.submitted, result
    await agent.wait_state(AgentState.WAITING_APPROVAL)
    verdict = await agent.answer_approval(policy)
    assert verdict.decision is Decision.DENY, verdict
    await agent.wait_state(AgentState.READY)
    assert not (agent.spec.workdir / "no.txt").exists()


@pytest.mark.parametrize("cli", sorted(DIALOGS))
async def test_first_run_dialogs_answered_by_profile(
    cli: str, rig: RigFactory, llm: MockLLM
) -> None:
    llm.add(Rule(r"REALCLI-HELLO", "Hello from the mock model."))
    r = await rig({"AGENT": _agent(cli, options=Options(dialogs=True))})
    agent = r.agent("AGENT")
    assert await agent.state() is AgentState.READY
    result = await deliver(agent.pane, "Say hello. REALCLI-HELLO", agent.profile)
    assert result.ok, result

    async def replied() -> bool:
        return any("Hello from the mock model." in ln for ln in await agent.lines())

    await agent.wait(replied, f"{cli}'s reply after its dialogs")


async def test_opencode_starts_on_its_seeded_dependencies_without_the_registry(
    rig: RigFactory,
) -> None:
    """opencode finds ``@opencode-ai/plugin`` seeded into its home and installs nothing.

    Left to install it, with the hook plugin configured, opencode draws nothing until its
    install from the registry is over: with the registry unreachable it stayed blank past
    the rig's wait for ready.
    """
    unreachable = {"npm_config_registry": "http://127.0.0.1:9/"}
    r = await rig({"A": AgentSpec("opencode", env=unreachable)}, up=False)
    config_dir = r.specs["A"].home / ".config" / "opencode"
    files = [
        config_dir / "node_modules" / "@opencode-ai" / "plugin" / "package.json",
        config_dir / "package-lock.json",
    ]

    def stamps() -> list[tuple[int, int]]:
        return [(f.stat().st_ino, f.stat().st_mtime_ns) for f in files]

    seeded = stamps()
    await r.up()
    assert await r.agents["A"].state() is AgentState.READY
    # An install replaces the package's files and rewrites the lock file.
    assert stamps() == seeded
