"""opencode's receipts: the session plugin politerm installs, run by node as opencode runs it.

opencode loads plugins as JavaScript modules and calls their hooks (``chat.message``) and
their ``event`` hook with each bus event. Here node imports the very file politerm writes
and plays opencode's part: the receipts the plugin's hook commands write are then read back
as the driver reads them. The real CLI is in ``tests/realcli/test_receipts.py``.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import stat
import subprocess

import pytest

from politerm.driver.receipts import Receipts
from politerm.errors import HookError
from politerm.hooks.channel import create_channel
from politerm.hooks.events import HookKind
from politerm.hooks.install import OPENCODE_CONFIG_ENV, install_hooks

SECRET = "sk-ant-api03-" + "s" * 40

# opencode's calls, in the order it makes them: a prompt, a sub-agent's session (whose
# prompt and idle are not the agent's), a permission question and its answer, the turn end.
PLAY = """
const plugin = await import(process.argv[2]);
const hooks = await Object.values(plugin)[0]({});
const root = "ses_root", sub = "ses_sub";
await hooks["chat.message"]({ sessionID: root }, { parts: [
  { type: "text", text: "Please plan. KEY=%s" },
  { type: "text", text: "context opencode added", synthetic: true },
  { type: "file", url: "data:," } ] });
await hooks.event({ event: { type: "session.created", properties: { info: { id: sub, parentID: root } } } });
await hooks["chat.message"]({ sessionID: sub }, { parts: [{ type: "text", text: "sub-task" }] });
await hooks.event({ event: { type: "message.part.updated", properties: { sessionID: root } } });
await hooks.event({ event: { type: "session.idle", properties: { sessionID: sub } } });
await hooks.event({ event: { type: "permission.asked", properties: {
  id: "per_1", sessionID: root, permission: "bash", patterns: ["echo hi > out.txt"] } } });
await hooks.event({ event: { type: "permission.replied", properties: {
  sessionID: root, requestID: "per_1", reply: "once" } } });
await hooks.event({ event: { type: "session.idle", properties: { sessionID: root } } });
"""  # noqa: E501


def node() -> str:
    found = shutil.which("node")
    if found is None:
        pytest.fail("node is not on PATH: scripts/_setup.sh needs Node.js (npm) for these tests")
    return found


def test_install_opencode_adds_a_private_plugin_for_this_session_only(
    tmp_path: pathlib.Path,
) -> None:
    channel = create_channel(tmp_path / "hooks", "A")
    user_config = tmp_path / "home" / ".config" / "opencode"
    user_config.mkdir(parents=True)
    (user_config / "opencode.json").write_text('{"model": "mock/mock-model"}')
    env = {"HOME": str(tmp_path / "home")}
    argv, out = install_hooks("opencode", ["opencode"], env, channel)
    assert argv == ["opencode"] and env == {"HOME": str(tmp_path / "home")}
    plugin = channel.parent / "A.hooks.opencode-plugin.js"
    assert json.loads(out[OPENCODE_CONFIG_ENV]) == {"plugin": [plugin.as_uri()]}
    assert stat.S_IMODE(plugin.stat().st_mode) == 0o600
    assert str(channel) in plugin.read_text()
    assert (user_config / "opencode.json").read_text() == '{"model": "mock/mock-model"}'
    assert sorted(p.name for p in user_config.iterdir()) == ["opencode.json"]


def test_install_opencode_keeps_the_users_own_config_content(tmp_path: pathlib.Path) -> None:
    channel = create_channel(tmp_path / "hooks", "A")
    mine = {"plugin": ["my-plugin"], "share": "disabled"}
    _, out = install_hooks("opencode", ["opencode"], {OPENCODE_CONFIG_ENV: json.dumps(mine)},
                           channel)  # fmt: skip
    merged = json.loads(out[OPENCODE_CONFIG_ENV])
    assert merged["share"] == "disabled" and merged["plugin"][0] == "my-plugin"
    assert merged["plugin"][1].endswith("/A.hooks.opencode-plugin.js")
    with pytest.raises(HookError, match="OPENCODE_CONFIG_CONTENT is set and is not a JSON"):
        install_hooks("opencode", ["opencode"], {OPENCODE_CONFIG_ENV: "[1]"}, channel)


def test_opencode_plugin_reports_the_agents_own_events_in_order(tmp_path: pathlib.Path) -> None:
    channel = create_channel(tmp_path / "hooks", "A")
    install_hooks("opencode", ["opencode"], {}, channel)
    plugin = channel.parent / "A.hooks.opencode-plugin.js"
    script = tmp_path / "play.mjs"
    script.write_text(PLAY % SECRET)
    done = subprocess.run(
        [node(), str(script), plugin.as_uri()], capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    raw = channel.read_text()
    assert SECRET not in raw  # the hook command redacts, as for every CLI
    rc = Receipts.open("opencode", channel, from_start=True)
    events = rc.since(0)
    assert [(e.event, e.kind) for e in events] == [
        ("plugin.loaded", HookKind.SESSION),
        ("chat.message", HookKind.PROMPT),
        ("permission.asked", HookKind.APPROVAL),
        ("permission.replied", HookKind.TOOL),
        ("session.idle", HookKind.STOP),
    ]
    prompt = events[1]
    assert prompt.prompt_head == "Please plan. KEY=[REDACTED:anthropic-key]"
    assert prompt.matches_prompt(f"Please plan. KEY={SECRET}")
    assert events[2].message == "echo hi > out.txt"
    assert rc.stop_since(0) is events[4] and rc.approval_open(0) is None
    assert rc.reports(HookKind.PROMPT) and rc.reports(HookKind.STOP)
