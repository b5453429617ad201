"""Finding an agent's own transcript file, per its profile."""

from __future__ import annotations

import os
import pathlib
import typing as t

from politerm.protocol.transcript import latest_claude_session, latest_codex_rollout

if t.TYPE_CHECKING:
    from collections.abc import Mapping

    from politerm.agents.profile import TranscriptSpec


def locate_transcript(
    spec: TranscriptSpec, cwd: pathlib.Path, env: Mapping[str, str] | None = None
) -> pathlib.Path | None:
    """The transcript file the agent writes now, or None while there is none.

    ``env`` is the agent's environment (where ``CLAUDE_CONFIG_DIR``/``CODEX_HOME`` may be
    set); the process environment fills in the rest.
    """
    environ = {**os.environ, **(env or {})}
    home = pathlib.Path(environ.get("HOME", str(pathlib.Path.home())))
    if spec.locate == "file":
        if not spec.path:
            return None
        path = cwd / spec.path
        return path if path.is_file() else None
    if spec.locate == "claude-projects":
        config_dir = pathlib.Path(environ.get("CLAUDE_CONFIG_DIR", str(home / ".claude")))
        return latest_claude_session(cwd, config_dir)
    codex_home = pathlib.Path(environ.get("CODEX_HOME", str(home / ".codex")))
    return latest_codex_rollout(codex_home)
