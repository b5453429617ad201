"""Install politerm's receipt hooks in an agent CLI's configuration for this session only.

Nothing is written to the user's own configuration: each CLI gets the hooks through a
session-scoped file or flag that politerm owns, beside the agent's channel (0600 files in
the channel's 0700 directory).

==========  =====================================================  ===========================
CLI         how                                                    events
==========  =====================================================  ===========================
claude      ``--settings <file>`` (added to the user's settings)   SessionStart,
                                                                   UserPromptSubmit,
                                                                   Notification, PostToolUse,
                                                                   Stop
gemini      a session home (``GEMINI_CLI_HOME``) whose ``.gemini``  SessionStart, BeforeAgent,
            links every entry of the user's own ``~/.gemini``       Notification, AfterTool,
            except ``settings.json``: a copy of it with the hooks   AfterAgent
            added (a system settings file is only read when root
            owns every folder above it)
codex       ``-c notify=[…]`` (its only hook without a trust       agent-turn-complete
            step; the JSON arrives as the last argument)
aider       ``--notifications --notifications-command …``           waiting for input (the end
                                                                   of a reply, or a question)
opencode    a JavaScript plugin beside the channel, added to the   chat.message, session.idle,
            agent's ``plugin`` list through                        permission.asked,
            ``OPENCODE_CONFIG_CONTENT`` (merged with the user's    permission.replied (and
            own, if set); it runs the same hook command            plugin.loaded)
==========  =====================================================  ===========================

The hook command is ``<python> -I -m politerm.hooks.emit <channel> <cli> <event>``
(:mod:`politerm.hooks.emit`): this Python, isolated from the agent's working directory.
"""

from __future__ import annotations

import importlib.resources
import json
import pathlib
import shlex
import shutil
import sys
import typing as t

from politerm._internal.private import private_dir, write_private
from politerm.errors import HookError

HOOK_CLIS: t.Final = frozenset({"claude", "gemini", "codex", "aider", "opencode"})
"""CLIs politerm installs receipt hooks in."""

CLAUDE_EVENTS: t.Final = ("SessionStart", "UserPromptSubmit", "Notification", "PostToolUse", "Stop")
GEMINI_EVENTS: t.Final = ("SessionStart", "BeforeAgent", "Notification", "AfterTool", "AfterAgent")
GEMINI_HOME_ENV: t.Final = "GEMINI_CLI_HOME"
GEMINI_USER_LINK: t.Final = ".poli-user-gemini"
"""In a Gemini session home: a link to the user's own ``.gemini`` (where its state goes back)."""
OPENCODE_CONFIG_ENV: t.Final = "OPENCODE_CONFIG_CONTENT"
HOOK_TIMEOUT: t.Final = 10
"""Seconds a CLI lets the hook command run before it gives up on it."""


def hook_cli(profile_name: str, argv: t.Sequence[str]) -> str | None:
    """Which hook-capable CLI an agent runs: by profile name, else by program name.

    Examples
    --------
    >>> hook_cli("claude", ["/opt/claude"]), hook_cli("generic", ["/x/bin/gemini"])
    ('claude', 'gemini')
    >>> hook_cli("aider-raw", ["aider"]), hook_cli("fake-claude", ["python"]) is None
    ('aider', True)
    >>> hook_cli("generic", ["env", "-u", "TMUX", "/x/codex"])
    'codex'
    """
    for name in (profile_name, profile_name.split("-", 1)[0]):
        if name in HOOK_CLIS:
            return name
    program = program_name(argv)
    return program if program in HOOK_CLIS else None


def program_name(argv: t.Sequence[str]) -> str:
    """The name of the program ``argv`` runs, past an ``env`` that only changes variables.

    Examples
    --------
    >>> program_name(["env", "-u", "TMUX", "A=1", "/x/bin/codex", "-a"]), program_name([])
    ('codex', '')
    """
    rest = list(argv)
    if rest and rest[0].rsplit("/", 1)[-1] == "env":
        rest = rest[1:]
        while rest and (rest[0] in ("-u", "--unset") or "=" in rest[0] or rest[0] == "-i"):
            rest = rest[2:] if rest[0] in ("-u", "--unset") else rest[1:]
    return rest[0].rsplit("/", 1)[-1] if rest else ""


def emit_argv(channel: pathlib.Path, cli: str, event: str) -> list[str]:
    """The hook command as an argument list.

    Examples
    --------
    >>> emit_argv(pathlib.Path("/r/A.hooks.jsonl"), "claude", "Stop")[1:]
    ['-I', '-m', 'politerm.hooks.emit', '/r/A.hooks.jsonl', 'claude', 'Stop']
    """
    return [sys.executable, "-I", "-m", "politerm.hooks.emit", str(channel), cli, event]


def _command(channel: pathlib.Path, cli: str, event: str) -> str:
    return shlex.join(emit_argv(channel, cli, event))


def claude_settings(channel: pathlib.Path) -> dict[str, t.Any]:
    """Claude Code's settings with one receipt hook per event."""
    hooks: dict[str, t.Any] = {}
    for event in CLAUDE_EVENTS:
        entry: dict[str, t.Any] = {
            "hooks": [
                {
                    "type": "command",
                    "command": _command(channel, "claude", event),
                    "timeout": HOOK_TIMEOUT,
                }
            ]
        }
        if event in ("Notification", "PostToolUse"):
            entry["matcher"] = "*"
        hooks[event] = [entry]
    return {"hooks": hooks}


def gemini_settings(channel: pathlib.Path) -> dict[str, t.Any]:
    """Gemini CLI's settings with one receipt hook per event."""
    hooks: dict[str, t.Any] = {}
    for event in GEMINI_EVENTS:
        hooks[event] = [
            {
                "matcher": "*",
                "hooks": [
                    {
                        "name": f"poli-receipt-{event}",
                        "type": "command",
                        "command": _command(channel, "gemini", event),
                        "timeout": HOOK_TIMEOUT * 1000,
                    }
                ],
            }
        ]
    # The hooks system is on by default; say so in case a user's settings turned it off.
    return {"hooksConfig": {"enabled": True}, "hooks": hooks}


def merge_settings(user: dict[str, t.Any], ours: dict[str, t.Any]) -> dict[str, t.Any]:
    """The user's settings with ours added: hook lists joined per event, tables merged.

    Examples
    --------
    >>> merge_settings({"hooks": {"Stop": [1]}, "ui": {"a": 1}}, {"hooks": {"Stop": [2]}})
    {'hooks': {'Stop': [1, 2]}, 'ui': {'a': 1}}
    """
    out = dict(user)
    for key, value in ours.items():
        mine = out.get(key)
        if isinstance(value, dict) and isinstance(mine, dict):
            merged = dict(mine)
            for k, v in value.items():
                old = merged.get(k)
                merged[k] = [*old, *v] if isinstance(old, list) and isinstance(v, list) else v
            out[key] = merged
        else:
            out[key] = value
    return out


def gemini_home_path(channel: pathlib.Path) -> pathlib.Path:
    """Where :func:`gemini_home` puts the session home of the agent writing ``channel``.

    Examples
    --------
    >>> gemini_home_path(pathlib.Path("/run/s/AGENT.hooks.jsonl")).name
    'AGENT.hooks.gemini-home'
    """
    return channel.with_name(channel.name.removesuffix(".jsonl") + ".gemini-home")


def gemini_home(
    channel: pathlib.Path, env: t.Mapping[str, str], settings: dict[str, t.Any]
) -> pathlib.Path:
    """A session home for Gemini CLI beside ``channel``, with ``settings`` added.

    Its ``.gemini`` links every entry of the user's own, except ``settings.json``: the
    user's settings plus ``settings``.
    """
    user_home = pathlib.Path(env.get(GEMINI_HOME_ENV) or env.get("HOME") or pathlib.Path.home())
    source = user_home / ".gemini"
    # a home made already for this agent (its MCP server) is looked through to the user's
    own = user_home / GEMINI_USER_LINK
    users = own.readlink() if own.is_symlink() else source
    home = gemini_home_path(channel)
    target = home / ".gemini"
    private_dir(target)
    user: dict[str, t.Any] = {}
    user_file = source / "settings.json"
    if user_file.exists():
        try:
            loaded = json.loads(user_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            msg = f"cannot read {user_file} to add politerm's hooks to it: {exc}"
            raise HookError(msg) from None
        user = loaded if isinstance(loaded, dict) else {}
    if source.is_dir():
        for entry in source.iterdir():
            link = target / entry.name
            if entry.name == "settings.json" or link.is_symlink() or link.exists():
                continue
            link.symlink_to(entry)
    write_private(target / "settings.json", json.dumps(merge_settings(user, settings), indent=1))
    if not (home / GEMINI_USER_LINK).is_symlink():
        (home / GEMINI_USER_LINK).symlink_to(users)
    return home


def return_gemini_state(home: pathlib.Path) -> list[str]:
    """Move what Gemini CLI made in session home ``home`` into the user's own ``.gemini``.

    Gemini CLI keeps its chats (``tmp/<project>/chats``), its project registry and its
    history in its home. An entry the user's ``.gemini`` did not have when the session
    began is no link, so it was made in the session home, and would go with the session's
    hooks directory: it is moved over first (merged into a folder the user has by now; a
    file the user has is kept). Returns the names moved.
    """
    link = home / GEMINI_USER_LINK
    ours = home / ".gemini"
    if not link.is_symlink() or not ours.is_dir():
        return []
    dest = link.readlink()
    moved = []
    for entry in sorted(ours.iterdir()):
        if entry.is_symlink() or entry.name == "settings.json":
            continue
        private_dir(dest)
        _merge_into(entry, dest / entry.name)
        moved.append(entry.name)
    return moved


def _merge_into(src: pathlib.Path, dst: pathlib.Path) -> None:
    if not dst.exists() and not dst.is_symlink():
        shutil.move(src, dst)
    elif src.is_dir() and not src.is_symlink() and dst.is_dir() and not dst.is_symlink():
        for child in src.iterdir():
            if not child.is_symlink():
                _merge_into(child, dst / child.name)


def opencode_plugin(channel: pathlib.Path) -> str:
    """The plugin module that reports ``channel``'s agent's opencode events.

    Examples
    --------
    >>> src = opencode_plugin(pathlib.Path("/r/A.hooks.jsonl"))
    >>> '"/r/A.hooks.jsonl", "opencode"]' in src, "__POLI_" in src
    (True, False)
    """
    template = importlib.resources.files("politerm.hooks") / "opencode_plugin.js"
    emit = json.dumps(emit_argv(channel, "opencode", "")[:-1])
    return (
        template.read_text(encoding="utf-8")
        .replace("__POLI_EMIT__", emit)
        .replace("__POLI_BOUND_MS__", str(HOOK_TIMEOUT * 1000))
    )


def opencode_config(user: str | None, plugin: pathlib.Path) -> str:
    """``OPENCODE_CONFIG_CONTENT`` with ``plugin`` added to the user's own (if any).

    Examples
    --------
    >>> opencode_config(None, pathlib.Path("/r/p.js"))
    '{"plugin": ["file:///r/p.js"]}'
    >>> opencode_config('{"plugin": ["x"], "model": "m"}', pathlib.Path("/r/p.js"))
    '{"plugin": ["x", "file:///r/p.js"], "model": "m"}'

    Raises
    ------
    HookError
        The user's own value is not a JSON object (it is left alone, without hooks).
    """
    data: t.Any = {}
    if user and user.strip():
        try:
            data = json.loads(user)
        except ValueError:
            data = None
        if not isinstance(data, dict) or not isinstance(data.get("plugin", []), list):
            msg = f"{OPENCODE_CONFIG_ENV} is set and is not a JSON object politerm can add to"
            raise HookError(msg)
    data["plugin"] = [*data.get("plugin", []), plugin.as_uri()]
    return json.dumps(data)


def install_hooks(
    cli: str,
    argv: t.Sequence[str],
    env: t.Mapping[str, str],
    channel: pathlib.Path,
) -> tuple[list[str], dict[str, str]]:
    """``argv`` and ``env`` of ``cli`` with politerm's receipt hooks installed.

    Settings files go beside ``channel`` (its directory is private).

    Raises
    ------
    HookError
        ``cli`` has no hooks politerm can install, or a file cannot be written.
    """
    out_argv, out_env = list(argv), dict(env)
    stem = channel.name.removesuffix(".jsonl")
    try:
        if cli == "claude":
            path = channel.with_name(f"{stem}.claude-settings.json")
            write_private(path, json.dumps(claude_settings(channel), indent=1))
            out_argv += ["--settings", str(path)]
        elif cli == "gemini":
            out_env[GEMINI_HOME_ENV] = str(gemini_home(channel, out_env, gemini_settings(channel)))
        elif cli == "codex":
            out_argv += ["-c", f"notify={json.dumps(emit_argv(channel, 'codex', 'notify'))}"]
        elif cli == "opencode":
            plugin = channel.with_name(f"{stem}.opencode-plugin.js")
            write_private(plugin, opencode_plugin(channel))
            out_env[OPENCODE_CONFIG_ENV] = opencode_config(out_env.get(OPENCODE_CONFIG_ENV), plugin)
        elif cli == "aider":
            out_argv += [
                "--notifications",
                "--notifications-command",
                _command(channel, "aider", "waiting"),
            ]
        else:
            msg = f"politerm installs no hooks in {cli!r} (only {', '.join(sorted(HOOK_CLIS))})"
            raise HookError(msg)
    except OSError as exc:
        msg = f"cannot write the {cli} hook settings beside {channel}: {exc.strerror or exc}"
        raise HookError(msg) from None
    return out_argv, out_env
