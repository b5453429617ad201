"""Per-line answers about a screen, remembered: two looks at a TUI share most of their lines.

The state tracker asks two questions of every line of every look: what the line counts as
progress (:meth:`~politerm.agents.profile.AgentProfile.progress_key`), and whether it shows
a usage limit (:func:`~politerm.agents.limits.limit_lines`). Each answer depends on the
line and the profile's patterns only, so each distinct line is answered once per pattern set.
"""

from __future__ import annotations

import functools
import re
import typing as t

T = t.TypeVar("T")

# Distinct lines remembered per pattern set before the memo starts over.
_KEPT = 4096
_DIGITS = re.compile(r"\d+")


class LineMemo(t.Generic[T]):
    """``answer(line)``, remembered per distinct line (at most ``_KEPT`` at a time).

    Examples
    --------
    >>> calls = []
    >>> upper = LineMemo(lambda line: calls.append(line) or line.upper())
    >>> [upper(x) for x in ("a", "b", "a")], calls
    (['A', 'B', 'A'], ['a', 'b'])
    """

    def __init__(self, answer: t.Callable[[str], T]) -> None:
        self._answer = answer
        self._memo: dict[str, T] = {}

    def __call__(self, line: str) -> T:
        try:
            return self._memo[line]
        except KeyError:
            pass
        if len(self._memo) >= _KEPT:
            self._memo.clear()
        out = self._memo[line] = self._answer(line)
        return out


@functools.lru_cache(maxsize=64)
def progress_of(skip: tuple[re.Pattern[str], ...]) -> LineMemo[str | None]:
    """A line's part of a progress key: None when one of ``skip`` matches (it moves anyway).

    Examples
    --------
    >>> key = progress_of((re.compile("esc to interrupt"),))
    >>> key("  esc to interrupt"), key("took 12.5s  ")
    (None, 'took .s')
    """

    def key(line: str) -> str | None:
        if any(rx.search(line) for rx in skip):
            return None
        return _DIGITS.sub("", line).rstrip()

    return LineMemo(key)


@functools.lru_cache(maxsize=64)
def shows_any(patterns: tuple[str, ...]) -> LineMemo[bool]:
    """Whether a line matches one of ``patterns`` (regexes searched anywhere in it).

    Examples
    --------
    >>> limited = shows_any(("API Error: 429", "(?i)usage limit reached"))
    >>> limited("Usage limit reached · resets 3pm"), limited("all good")
    (True, False)
    """
    rxs = [re.compile(p) for p in patterns]
    return LineMemo(lambda line: any(rx.search(line) for rx in rxs))
