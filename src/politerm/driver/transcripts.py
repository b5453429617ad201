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
    from collections.abc import Mapping, Sequence

    from politerm.agents.profile import TranscriptSpec
    from politerm.driver.receipts import Receipts

#: What reads a transcript: a file tail, or opencode's database.
Tail = TranscriptTail | OpencodeTail


def locate_transcript(
    spec: TranscriptSpec,
    cwd: pathlib.Path,
    env: Mapping[str, str] | None = None,
    session: str = "",
) -> pathlib.Path | None:
    """The transcript file the agent writes now, or None while there is none.

    By ``spec.locate``: ``file``, ``spec.path`` under ``cwd`` (or the file the agent's
    environment names in ``spec.path_env``); ``claude-projects``, the
    newest session log of ``cwd`` under ``$CLAUDE_CONFIG_DIR`` (default ``~/.claude``);
    ``codex-sessions``, the newest rollout under ``$CODEX_HOME`` (default ``~/.codex``);
    ``gemini-projects``, the newest chat of ``cwd`` under ``$GEMINI_CLI_HOME/.gemini``
    (default ``~/.gemini``); ``opencode-data``, ``$XDG_DATA_HOME/opencode/opencode.db``
    (default ``~/.local/share``).

    ``env`` is the agent's environment (where ``CLAUDE_CONFIG_DIR``/``CODEX_HOME`` may be
    set); the process environment fills in the rest. With ``session`` (the CLI's own id of
    the conversation, from its hooks) the newest log is not a guess: it is that
    conversation's log or none, so two agents of one CLI in one directory never read each
    other's (opencode keeps every conversation in one database).
    """
    env = env or {}
    if spec.locate == "file":
        name = (_getenv(env, spec.path_env, "") if spec.path_env else "") or spec.path
        if not name:
            return None
        path = cwd / name
        return path if path.is_file() else None
    home = pathlib.Path(_getenv(env, "HOME", str(pathlib.Path.home())))
    if spec.locate == "gemini-projects":
        base = pathlib.Path(_getenv(env, "GEMINI_CLI_HOME", "") or str(home))
        return latest_gemini_session(cwd.resolve(), base / ".gemini", session)
    if spec.locate == "opencode-data":
        data = _getenv(env, "XDG_DATA_HOME", "") or str(home / ".local" / "share")
        return opencode_db(pathlib.Path(data))
    if spec.locate == "claude-projects":
        config_dir = pathlib.Path(_getenv(env, "CLAUDE_CONFIG_DIR", str(home / ".claude")))
        return latest_claude_session(cwd, config_dir, session)
    codex_home = pathlib.Path(_getenv(env, "CODEX_HOME", str(home / ".codex")))
    return latest_codex_rollout(codex_home, session)


# Where a conversation's own log is found by the CLI's id of it.
_BY_ID: t.Final = frozenset({"claude-projects", "codex-sessions", "gemini-projects"})


def own_conversation(
    sessions: Sequence[str],
    spec: TranscriptSpec | None,
    cwd: pathlib.Path | None,
    env: Mapping[str, str] | None = None,
) -> str:
    """The agent's conversation among the ids its hooks named (oldest first), or "".

    The newest id that has a log of its own: a CLI's side conversations (Codex titles a
    thread in another thread, which also reports its turn) and a session that never got a
    prompt keep none. Where the CLI's log is not found by id (opencode's one database),
    the newest id.
    """
    checked: set[str] = set()
    for session in reversed(sessions):
        if session in checked:
            continue
        checked.add(session)
        if spec is None or cwd is None or spec.locate not in _BY_ID:
            return session
        if locate_transcript(spec, cwd, env, session) is not None:
            return session
    return ""


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
