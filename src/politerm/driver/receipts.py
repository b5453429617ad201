"""What the agent's own hooks said, beside what its screen shows.

:class:`Receipts` follows one agent's hook channel (:mod:`politerm.hooks`). The driver asks
it three questions, each answered from the agent's own events where the CLI reports them:

- was *this* prompt accepted? (:meth:`Receipts.prompt_receipt`: a PROMPT receipt whose
  digest, or head or tail, matches the text typed);
- has the turn ended? (:meth:`Receipts.stop_since`: a STOP receipt after the prompt);
- is a permission question open? (:meth:`Receipts.approval_open`: an APPROVAL receipt not
  followed by a tool, stop or prompt receipt).

The screen stays the fallback (a CLI without the event, a hook that did not run) and the
cross-check: when the two disagree, the driver records a :class:`Drift` (an event of kind
``drift`` in the store) and goes by the agent's own event.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import pathlib
import tempfile
import typing as t

from politerm.errors import HookError
from politerm.hooks.channel import HookChannel, check_private, create_channel, remove_hooks_dir
from politerm.hooks.events import HookEvent, HookKind
from politerm.hooks.install import hook_cli, install_hooks
from politerm.hooks.patterns import channel_redactor, save_patterns
from politerm.redact import Redactor

if t.TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable, Mapping, Sequence


log = logging.getLogger(__name__)

PANE_OPTION: t.Final = "@poli_hooks"
"""The pane user option naming an agent's CLI and channel (``cli:path``), for attach."""

HOOK_GRACE: t.Final = 10.0
"""Seconds one source may lag the other before a disagreement counts as drift."""

# What each CLI's hooks report (aider's notification is "waiting for input": a turn end).
_REPORTS: t.Final[dict[str, frozenset[HookKind]]] = {
    "claude": frozenset({HookKind.PROMPT, HookKind.STOP, HookKind.APPROVAL}),
    # SESSION: Gemini CLI draws its input box before its SessionStart hook has run, and
    # drops a prompt submitted meanwhile; its receipt says the CLI takes prompts.
    "gemini": frozenset({HookKind.SESSION, HookKind.PROMPT, HookKind.STOP, HookKind.APPROVAL}),
    "codex": frozenset({HookKind.STOP}),
    "aider": frozenset({HookKind.STOP}),
    "opencode": frozenset({HookKind.PROMPT, HookKind.STOP, HookKind.APPROVAL}),
}


class Source(enum.StrEnum):
    """Which source confirmed a delivery or a turn's end."""

    HOOK = "hook"
    TRANSCRIPT = "transcript"
    SCREEN = "screen"


@dataclasses.dataclass(frozen=True)
class Drift:
    """The agent's own event and its screen disagreed.

    Attributes
    ----------
    what
        Which question (``delivery``, ``turn-end``, ``approval``).
    hook
        What the hook (or the transcript) said, or that it said nothing.
    screen
        What the screen showed.
    """

    what: str
    hook: str
    screen: str
    source: str = "hook"
    """Who disagreed with the screen: the agent's ``hook``, or its ``transcript``."""

    def __str__(self) -> str:
        return f"{self.what}: {self.source} says {self.hook}; screen says {self.screen}"


class Receipts:
    """One agent's hook receipts, read from its channel.

    Parameters
    ----------
    cli
        The CLI whose hooks write the channel (what they can report depends on it).
    channel
        The channel reader.
    redactor
        What the hook redacted its receipts with (the built-in patterns when not given),
        so that a prompt is compared with a receipt as the hook redacted it.
    """

    def __init__(self, cli: str, channel: HookChannel, redactor: Redactor | None = None) -> None:
        self.cli = cli
        self.channel = channel
        self.redactor = redactor or Redactor()
        self.events: list[HookEvent] = []
        #: Set once a grace period passed without any receipt: the hooks do not run.
        self.silent = False
        #: A private temporary hooks directory made for this agent alone (no session keeps
        #: it): removed by :meth:`close`.
        self.owned_dir: pathlib.Path | None = None

    def __repr__(self) -> str:
        return f"Receipts({self.cli}, {self.channel.path}, {len(self.events)} read)"

    @classmethod
    def open(cls, cli: str, path: pathlib.Path, *, from_start: bool = False) -> Receipts:
        """Follow the channel at ``path`` (checked private first), with its patterns.

        Raises
        ------
        HookError
            The file is not a private file of this user in a private directory, or the
            redact patterns kept beside it cannot be trusted.
        """
        check_private(path)
        redactor = channel_redactor(path)
        return cls(cli, HookChannel(path, offset=0 if from_start else None), redactor)

    def reports(self, kind: HookKind) -> bool:
        """Whether this CLI's hooks report ``kind`` (else the screen alone decides)."""
        return kind in _REPORTS.get(self.cli, frozenset())

    def poll(self) -> list[HookEvent]:
        """Read what arrived since the last look."""
        new = self.channel.read()
        self.events.extend(new)
        return new

    def mark(self) -> int:
        """A position: receipts after it are newer than now."""
        self.poll()
        return len(self.events)

    def event(self) -> asyncio.Event:
        """Set when the channel is written next."""
        return self.channel.event()

    def since(self, mark: int, *kinds: HookKind) -> list[HookEvent]:
        """Receipts after ``mark`` (of ``kinds``, when given)."""
        self.poll()
        return [e for e in self.events[mark:] if not kinds or e.kind in kinds]

    def prompt_receipt(self, mark: int, text: str) -> HookEvent | None:
        """The PROMPT receipt for ``text`` after ``mark``, if the agent sent one."""
        for e in self.since(mark, HookKind.PROMPT):
            if e.matches_prompt(text, self.redactor):
                return e
        return None

    def stop_since(self, mark: int) -> HookEvent | None:
        """The last STOP receipt after ``mark`` that no later PROMPT receipt superseded."""
        found: HookEvent | None = None
        for e in self.since(mark):
            if e.kind is HookKind.STOP:
                found = e
            elif e.kind is HookKind.PROMPT and found is not None:
                found = None
        return found

    def approval_open(self, mark: int = 0) -> HookEvent | None:
        """An APPROVAL receipt after ``mark`` not yet followed by a tool, stop or prompt."""
        found: HookEvent | None = None
        for e in self.since(mark):
            if e.kind is HookKind.APPROVAL:
                found = e
            elif e.kind in (HookKind.TOOL, HookKind.STOP, HookKind.PROMPT):
                found = None
        return found

    @property
    def errors(self) -> list[str]:
        """One-line errors for malformed channel lines."""
        return self.channel.errors

    async def close(self) -> None:
        """Stop watching the channel; a temporary hooks directory of its own goes too."""
        await self.channel.close()
        if self.owned_dir is not None:
            try:
                remove_hooks_dir(self.owned_dir)
            except HookError as exc:
                log.warning("%s", exc)
            self.owned_dir = None


@dataclasses.dataclass(frozen=True)
class HookSetup:
    """The launch of an agent with its receipt hooks installed."""

    argv: list[str]
    env: dict[str, str]
    cli: str | None = None
    channel: pathlib.Path | None = None
    temporary: bool = False
    """The channel's directory was made for this agent alone (no session directory)."""

    @property
    def option(self) -> str | None:
        """The value of the pane's :data:`PANE_OPTION`."""
        return None if self.channel is None else f"{self.cli}:{self.channel}"

    def receipts(self, *, from_start: bool = True) -> Receipts | None:
        """A reader of the channel, from its start or its end (None without hooks)."""
        if self.cli is None or self.channel is None:
            return None
        rc = Receipts.open(self.cli, self.channel, from_start=from_start)
        rc.owned_dir = self.channel.parent if self.temporary else None
        return rc


def prepare_hooks(
    name: str,
    profile_name: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    directory: pathlib.Path | None,
    patterns: Sequence[str] = (),
) -> HookSetup:
    """Install receipt hooks for agent ``name`` if its CLI has them; else change nothing.

    ``directory`` is the session's private hooks directory; None makes a fresh private
    temporary one. ``patterns`` (the project's ``[redact] patterns``) are kept beside the
    channel, where the hook finds them (:mod:`politerm.hooks.patterns`).

    Raises
    ------
    HookError
        The channel or the CLI's settings file cannot be written.
    """
    cli = hook_cli(profile_name, argv)
    if cli is None:
        return HookSetup(list(argv), dict(env))
    where = directory or pathlib.Path(tempfile.mkdtemp(prefix="poli-hooks-"))
    channel = create_channel(where, name)
    save_patterns(channel, patterns)
    out_argv, out_env = install_hooks(cli, argv, env, channel)
    return HookSetup(out_argv, out_env, cli, channel, temporary=directory is None)


def launch_with_hooks(
    name: str,
    profile_name: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    directory: pathlib.Path | None,
    *,
    enabled: bool = True,
    say: Callable[[str], None] | None = None,
    patterns: Sequence[str] = (),
) -> HookSetup:
    """:func:`prepare_hooks` for a workflow's launch: a failure only costs the receipts.

    A channel that cannot be made is told to ``say`` (and logged); the agent starts without
    hooks and the screen alone decides, as for a CLI that has none. Every workflow passes
    its config's ``[redact] patterns`` as ``patterns``: the hook redacts with them.
    """
    if not enabled:
        return HookSetup(list(argv), dict(env))
    try:
        return prepare_hooks(name, profile_name, argv, env, directory, patterns)
    except HookError as exc:
        note = f"{name}: no hook receipts, the screen alone decides: {exc}"
        log.warning("%s", note)
        if say is not None:
            say(note)
        return HookSetup(list(argv), dict(env))


def parse_option(value: str | None) -> tuple[str, pathlib.Path] | None:
    """The CLI and channel path from a pane's :data:`PANE_OPTION` value.

    Examples
    --------
    >>> parse_option("claude:/run/x/A.hooks.jsonl")
    ('claude', PosixPath('/run/x/A.hooks.jsonl'))
    >>> parse_option(""), parse_option("nocolon"), parse_option(None)
    (None, None, None)
    """
    if not value or ":" not in value:
        return None
    cli, _, path = value.partition(":")
    if not cli or not path.startswith("/"):
        return None
    return cli, pathlib.Path(path)
