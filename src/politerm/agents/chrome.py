"""Telling an agent's own words from the chrome its CLI draws below them.

Gemini CLI and opencode keep an input box, a footer and a status bar at the bottom of
the screen: the last lines of a screen are that chrome, not the agent's reply. An error
that quotes "what the agent said last" (a turn's timeout) wants the lines above it.
"""

from __future__ import annotations

import functools
import re
import typing as t

from politerm.protocol.header import clean_line

if t.TYPE_CHECKING:
    from collections.abc import Sequence

    from politerm.agents.profile import AgentProfile


@functools.lru_cache(maxsize=64)
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in patterns)


def is_chrome(profile: AgentProfile, line: str) -> bool:
    """Whether ``line`` is part of what the CLI draws around its replies.

    That is a line of the profile's input box (``detectors.input_line``) or one matching
    ``render.chrome``.
    """
    if profile.is_input_line(line):
        return True
    return any(rx.search(line) for rx in _compiled(tuple(profile.render.chrome)))


def chrome_top(profile: AgentProfile, lines: Sequence[str]) -> int:
    """Index of the first line of the blank-and-chrome run at the bottom of ``lines``.

    On an inline CLI (Gemini), the next reply is drawn from there: the echo of a prompt
    replaces the hints and the input box it was typed into.

    Examples
    --------
    >>> from politerm.agents.profile import load_profile
    >>> chrome_top(load_profile("gemini"), ["✦ Done.", "", " ────", "▄▄", " >   Type", "▀▀"])
    1
    """
    end = len(lines)
    while end > 0:
        line = clean_line(lines[end - 1])
        if line.strip() and not is_chrome(profile, line):
            break
        end -= 1
    return end


def reply_tail(profile: AgentProfile, lines: Sequence[str], limit: int = 6) -> list[str]:
    """The last ``limit`` non-blank lines above the chrome at the bottom of ``lines``.

    Walks up from the bottom over blank and chrome lines, then keeps the non-chrome lines
    above. A screen that is all chrome gives its own last lines, so the caller still shows
    something.

    Examples
    --------
    >>> from politerm.agents.profile import load_profile
    >>> screen = ["✦ I am still thinking about it.", "", "▄▄▄▄", " >   Type your message",
    ...           "▀▀▀▀", " workspace (/directory)   sandbox   /model",
    ...           " ~/project   no sandbox   Auto"]
    >>> reply_tail(load_profile("gemini"), screen)
    ['✦ I am still thinking about it.']
    """
    rows = [clean_line(ln) for ln in lines]
    end = chrome_top(profile, rows)
    # Above it, the echoes of the user's prompts and their bars are chrome too.
    kept = [r.strip() for r in rows[:end] if r.strip() and not is_chrome(profile, r)]
    if not kept:
        kept = [r.strip() for r in rows if r.strip()]
    return kept[-limit:] if limit > 0 else []
