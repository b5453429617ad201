"""The hook channel, the hook command and the per-CLI install, without a running agent.

The hook command is run as the CLIs run it (``python -I -m politerm.hooks.emit …`` in a
child process, the payload on stdin or as the last argument); the channel is a real file.
"""

from __future__ import annotations

import json
import os
import pathlib
import stat
import subprocess
import sys
import typing as t

import pytest

from politerm.driver.receipts import Receipts, parse_option, prepare_hooks
from politerm.errors import HookError, HookLineError
from politerm.hooks.channel import HookChannel, check_private, create_channel
from politerm.hooks.events import HookKind, parse_line
from politerm.hooks.install import GEMINI_HOME_ENV, emit_argv, install_hooks

SECRET = "sk-ant-api03-" + "s" * 40


def emit(channel: pathlib.Path, cli: str, event: str, payload: object | None = None,
         *, arg: bool = False) -> subprocess.CompletedProcess[bytes]:  # fmt: skip
    """Run the hook command like the CLI does; its stdout and stderr must stay empty."""
    argv = emit_argv(channel, cli, event)
    data = b"" if payload is None else json.dumps(payload).encode()
    if arg:
        argv.append(data.decode())
        data = b""
    done = subprocess.run(argv, input=data, capture_output=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout == b"" and done.stderr == b"", done
    return done


def mode(path: pathlib.Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_channel_is_private(tmp_path: pathlib.Path) -> None:
    os.umask(0o022)
    path = create_channel(tmp_path / "run" / "hooks", "PLANNER")
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700 and mode(path.parent.parent) == 0o700
    check_private(path)
    path.chmod(0o644)
    with pytest.raises(HookError, match="not a private file"):
        check_private(path)


def test_emit_refuses_a_channel_that_is_not_private(tmp_path: pathlib.Path) -> None:
    path = create_channel(tmp_path / "hooks", "A")
    path.chmod(0o666)
    emit(path, "claude", "Stop", {"session_id": "s"})
    assert path.read_text() == ""  # dropped, and the agent saw exit 0 with no output
    link = tmp_path / "hooks" / "link.jsonl"
    link.symlink_to(path)
    path.chmod(0o600)
    emit(link, "claude", "Stop", {})
    assert path.read_text() == ""
    emit(tmp_path / "missing" / "x.jsonl", "claude", "Stop", {})  # no channel: still exit 0


def test_receipts_are_redacted_and_read_back(tmp_path: pathlib.Path) -> None:
    path = create_channel(tmp_path / "hooks", "A")
    channel = HookChannel(path, offset=0)
    prompt = f"deploy with {SECRET} please (nonce=abc123)"
    emit(path, "claude", "UserPromptSubmit", {"prompt": prompt, "session_id": "s1"})
    emit(path, "claude", "Notification",
         {"notification_type": "permission_prompt", "message": f"Allow {SECRET}?"})  # fmt: skip
    emit(path, "codex", "notify", {"type": "agent-turn-complete", "input-messages": [prompt]},
         arg=True)  # fmt: skip
    text = path.read_text()
    assert SECRET not in text and "[REDACTED:anthropic-key]" in text
    events = channel.read()
    assert [e.kind for e in events] == [HookKind.PROMPT, HookKind.APPROVAL, HookKind.STOP]
    assert events[0].matches_prompt(prompt) and events[2].prompt_tail.endswith("(nonce=abc123)")
    assert events[2].event == "agent-turn-complete"
    assert "Allow [REDACTED:anthropic-key]?" in events[1].message
    assert channel.errors == [] and channel.read() == []


def test_aider_hook_reads_no_payload(tmp_path: pathlib.Path) -> None:
    path = create_channel(tmp_path / "hooks", "A")
    # aider runs the command with its own terminal on stdin: nothing to read, never blocks.
    argv = emit_argv(path, "aider", "waiting")
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=60,
                          check=False)  # fmt: skip
    assert done.returncode == 0 and done.stdout == b""
    (event,) = HookChannel(path, offset=0).read()
    assert (event.kind, event.cli) == (HookKind.STOP, "aider")


class Bad(t.NamedTuple):
    test_id: str
    line: str
    error: str


BAD = [
    Bad("not-json", "{oops", "not JSON"),
    Bad("array", "[1, 2]", "a JSON list, not an object"),
    Bad("version", '{"v": 9, "kind": "stop"}', "version 9"),
    Bad("kind", '{"v": 1, "kind": "party", "cli": "x", "event": "y", "at": 1}', "valid field"),
    Bad("no-at", '{"v": 1, "kind": "stop", "cli": "x", "event": "y"}', "valid field"),
]


@pytest.mark.parametrize("case", BAD, ids=[c.test_id for c in BAD])
def test_malformed_line_is_a_one_line_error(case: Bad) -> None:
    with pytest.raises(HookLineError) as info:
        parse_line(case.line, where="chan.jsonl:7")
    message = str(info.value)
    assert message.startswith("chan.jsonl:7: ") and case.error in message
    assert "\n" not in message


def test_malformed_lines_are_skipped_with_their_place(tmp_path: pathlib.Path) -> None:
    path = create_channel(tmp_path / "hooks", "A")
    emit(path, "gemini", "BeforeAgent", {"prompt": "one"})
    with path.open("a") as fh:
        fh.write("garbage line\n[]\n")
    emit(path, "gemini", "AfterAgent", {"prompt": "one"})
    with path.open("a") as fh:
        fh.write('{"v": 1, "kind": "st')  # a writer mid-way: left for the next read
    channel = HookChannel(path, offset=0)
    assert [e.kind for e in channel.read()] == [HookKind.PROMPT, HookKind.STOP]
    assert channel.errors == [
        f"{path}:2: not a hook receipt (not JSON: Expecting value)",
        f"{path}:3: not a hook receipt (a JSON list, not an object)",
    ]
    with path.open("a") as fh:
        fh.write('op", "cli": "gemini", "event": "AfterAgent", "at": 1}\n')
    assert [e.kind for e in channel.read()] == [HookKind.STOP]


def test_receipts_answer_the_drivers_questions(tmp_path: pathlib.Path) -> None:
    path = create_channel(tmp_path / "hooks", "A")
    rc = Receipts.open("claude", path)
    mark = rc.mark()
    emit(path, "claude", "UserPromptSubmit", {"prompt": "first"})
    emit(path, "claude", "Notification", {"notification_type": "permission_prompt"})
    assert rc.prompt_receipt(mark, "first") is not None
    assert rc.prompt_receipt(mark, "second") is None
    assert rc.approval_open(mark) is not None and rc.stop_since(mark) is None
    emit(path, "claude", "PostToolUse", {"tool_name": "Bash"})
    assert rc.approval_open(mark) is None
    emit(path, "claude", "Stop", {})
    assert rc.stop_since(mark) is not None
    emit(path, "claude", "UserPromptSubmit", {"prompt": "second"})
    assert rc.stop_since(mark) is None  # a later prompt: that turn is not over
    assert rc.reports(HookKind.PROMPT) and not Receipts("codex", rc.channel).reports(
        HookKind.PROMPT
    )


def test_install_claude_codex_aider(tmp_path: pathlib.Path) -> None:
    channel = create_channel(tmp_path / "hooks", "A")
    argv, _ = install_hooks("claude", ["claude", "--x"], {"HOME": str(tmp_path)}, channel)
    assert argv[:3] == ["claude", "--x", "--settings"]
    settings = pathlib.Path(argv[3])
    assert mode(settings) == 0o600 and settings.parent == channel.parent
    hooks = json.loads(settings.read_text())["hooks"]
    assert set(hooks) == {"SessionStart", "UserPromptSubmit", "Notification", "PostToolUse",
                          "Stop"}  # fmt: skip
    assert str(channel) in hooks["Stop"][0]["hooks"][0]["command"]
    argv, _ = install_hooks("codex", ["codex"], {}, channel)
    assert argv[1] == "-c" and argv[2].startswith("notify=[")
    assert json.loads(argv[2].removeprefix("notify="))[-3:] == [str(channel), "codex", "notify"]
    argv, _ = install_hooks("aider", ["aider"], {}, channel)
    assert argv[1:3] == ["--notifications", "--notifications-command"]
    with pytest.raises(HookError, match="no hooks in 'goose'"):
        install_hooks("goose", ["goose"], {}, channel)
    assert not (tmp_path / ".claude").exists()  # the user's own config is never touched


def test_install_gemini_leaves_the_users_settings_alone(tmp_path: pathlib.Path) -> None:
    user = tmp_path / "home" / ".gemini"
    user.mkdir(parents=True)
    mine = {"ui": {"theme": "x"}, "hooks": {"AfterAgent": [{"hooks": [{"command": "mine"}]}]}}
    (user / "settings.json").write_text(json.dumps(mine))
    (user / "trustedFolders.json").write_text("{}")
    channel = create_channel(tmp_path / "hooks", "A")
    _, env = install_hooks("gemini", ["gemini"], {"HOME": str(tmp_path / "home")}, channel)
    home = pathlib.Path(env[GEMINI_HOME_ENV]) / ".gemini"
    assert json.loads((user / "settings.json").read_text()) == mine
    merged = json.loads((home / "settings.json").read_text())
    assert merged["ui"] == {"theme": "x"}
    commands = [h["hooks"][0]["command"] for h in merged["hooks"]["AfterAgent"]]
    assert commands[0] == "mine" and str(channel) in commands[1]
    assert (home / "trustedFolders.json").resolve() == (user / "trustedFolders.json").resolve()
    assert mode(home) == 0o700 and mode(home / "settings.json") == 0o600


def test_prepare_hooks_only_for_clis_with_hooks(tmp_path: pathlib.Path) -> None:
    fake = [sys.executable, "-m", "politerm.testing.fakeagent"]
    setup = prepare_hooks("A", "fake-claude", fake, {}, tmp_path / "hooks")
    assert setup.argv == fake and setup.option is None and setup.receipts() is None
    setup = prepare_hooks("A", "claude", ["claude"], {}, tmp_path / "hooks")
    assert parse_option(setup.option) == ("claude", tmp_path / "hooks" / "A.hooks.jsonl")
    assert setup.receipts() is not None
