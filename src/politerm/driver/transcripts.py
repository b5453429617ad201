"""Finding an agent's own transcript file, per its profile."""

from __future__ import annotations

import os
import pathlib
import typing as t

from politerm.hooks.install import gemini_home_path
from politerm.protocol.opencode_db import OpencodeTail, opencode_db
from politerm.protocol.transcript import (
    TranscriptTail,
    latest_claude_session,
    latest_codex_rollout,
    latest_gemini_session,
)

if t.TYPE_CHECKING:
    from collections.abc import Mapping

    from politerm.agents.profile import TranscriptSpec
    from politerm.driver.receipts import Receipts

#: What reads a transcript: a file tail, or opencode's database.
Tail = TranscriptTail | OpencodeTail


def locate_transcript(
    spec: TranscriptSpec, cwd: pathlib.Path, env: Mapping[str, str] | None = None
) -> pathlib.Path | None:
    """The transcript file the agent writes now, or None while there is none.

    By ``spec.locate``: ``file``, ``spec.path`` under ``cwd``; ``claude-projects``, the
    newest session log of ``cwd`` under ``$CLAUDE_CONFIG_DIR`` (default ``~/.claude``);
    ``codex-sessions``, the newest rollout under ``$CODEX_HOME`` (default ``~/.codex``);
    ``gemini-projects``, the newest chat of ``cwd`` under ``$GEMINI_CLI_HOME/.gemini``
    (default ``~/.gemini``); ``opencode-data``, ``$XDG_DATA_HOME/opencode/opencode.db``
    (default ``~/.local/share``).

    ``env`` is the agent's environment (where ``CLAUDE_CONFIG_DIR``/``CODEX_HOME`` may be
    set); the process environment fills in the rest.
    """
    if spec.locate == "file":
        if not spec.path:
            return None
        path = cwd / spec.path
        return path if path.is_file() else None
    env = env or {}
    home = pathlib.Path(_getenv(env, "HOME", str(pathlib.Path.home())))
    if spec.locate == "gemini-projects":
        base = pathlib.Path(_getenv(env, "GEMINI_CLI_HOME", "") or str(home))
        return latest_gemini_session(cwd.resolve(), base / ".gemini")
    if spec.locate == "opencode-data":
        data = _getenv(env, "XDG_DATA_HOME", "") or str(home / ".local" / "share")
        return opencode_db(pathlib.Path(data))
    if spec.locate == "claude-projects":
        config_dir = pathlib.Path(_getenv(env, "CLAUDE_CONFIG_DIR", str(home / ".claude")))
        return latest_claude_session(cwd, config_dir)
    codex_home = pathlib.Path(_getenv(env, "CODEX_HOME", str(home / ".codex")))
    return latest_codex_rollout(codex_home)


def _getenv(env: Mapping[str, str], key: str, default: str) -> str:
    """``{**os.environ, **env}.get(key, default)``, without copying the whole environment."""
    if key in env:
        return env[key]
    return os.environ.get(key, default)


def open_tail(spec: TranscriptSpec, path: pathlib.Path, cwd: pathlib.Path) -> Tail:
    """A reader of the transcript at ``path`` (found by :func:`locate_transcript`)."""
    if spec.format == "opencode":
        return OpencodeTail(path, cwd.resolve())
    return TranscriptTail(path, spec.format)


def hooked_home(
    spec: TranscriptSpec | None, env: dict[str, str], receipts: Receipts | None
) -> None:
    """Put Gemini CLI's session ``GEMINI_CLI_HOME`` into ``env`` when its hooks moved it.

    With politerm's hooks installed Gemini CLI runs with a session home beside the hook
    channel (:func:`politerm.hooks.install.gemini_home_path`); a driver attached to it has
    the configured environment only, so its chat log is looked for there.
    """
    if spec is None or spec.locate != "gemini-projects" or "GEMINI_CLI_HOME" in env:
        return
    if receipts is not None and receipts.cli == "gemini":
        env["GEMINI_CLI_HOME"] = str(gemini_home_path(receipts.channel.path))
