"""Agent profiles: data (TOML) that says how to start, read and type into one agent CLI.

Built-in profiles live in ``politerm/agents/profiles/*.toml``; a file of the same name in the
user config dir (``~/.config/politerm/agents/``) overrides one, and new files add agents.
A profile may ``extends = "other"`` to inherit every key it does not set.
"""

from __future__ import annotations

import functools
import pathlib
import re
import tomllib
import typing as t

import platformdirs
import pydantic

from politerm.agents.state import AgentState, StateReading
from politerm.errors import ProfileError

if t.TYPE_CHECKING:
    from collections.abc import Sequence

    from politerm.terminal import Snapshot

BUILTIN_DIR = pathlib.Path(__file__).parent / "profiles"


def user_profile_dir() -> pathlib.Path:
    """Where user profiles and overrides live."""
    return platformdirs.user_config_path("politerm") / "agents"


class _Model(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)


def _compile(patterns: Sequence[str], where: str) -> tuple[re.Pattern[str], ...]:
    out = []
    for p in patterns:
        try:
            out.append(re.compile(p, re.MULTILINE))
        except re.error as exc:
            msg = f"{where}: bad regex {p!r}: {exc}"
            raise ValueError(msg) from None
    return tuple(out)


class Dialog(_Model):
    """A start-up or modal dialog: how to recognise it and the keys that answer it."""

    name: str
    match: str
    keys: list[str] = ["Enter"]

    @functools.cached_property
    def pattern(self) -> re.Pattern[str]:
        """The compiled ``match``."""
        return re.compile(self.match, re.MULTILINE)


class Detectors(_Model):
    """Screen detectors; every pattern is a regex searched in the relevant screen region.

    Attributes
    ----------
    ready, busy, approval, error
        Any match decides that state (checked in the order approval, busy, error, ready).
    input_line
        Regex with a ``text`` group matching the input line; searched bottom-up.
    input_placeholder
        Texts shown in an empty input box (``Ask Codex to do anything``).
    input_at_cursor
        Only the cursor's line can be the input line (line REPLs and shells).
    paste_marker
        A collapsed-paste marker in the input box (``[Pasted text #1 +31 lines]``).
    region_lines
        Only the last N screen lines are searched (0: the whole screen).
    """

    ready: list[str] = []
    busy: list[str] = []
    approval: list[str] = []
    error: list[str] = []
    input_line: str | None = None
    input_placeholder: list[str] = []
    input_at_cursor: bool = False
    paste_marker: str | None = None
    region_lines: int = 0

    @pydantic.model_validator(mode="after")
    def _check_regexes(self) -> Detectors:
        for field in ("ready", "busy", "approval", "error", "input_placeholder"):
            _compile(getattr(self, field), f"detectors.{field}")
        for field in ("input_line", "paste_marker"):
            value = getattr(self, field)
            if value is not None:
                _compile([value], f"detectors.{field}")
        if self.input_line is not None and "(?P<text>" not in self.input_line:
            msg = "detectors.input_line: needs a (?P<text>...) group"
            raise ValueError(msg)
        return self


class TranscriptSpec(_Model):
    """Where an agent CLI keeps its own transcript, a source no screen renderer can mangle.

    Attributes
    ----------
    format
        ``claude`` (Claude Code JSONL), ``codex`` (Codex rollout JSONL) or ``aider``
        (``.aider.chat.history.md``).
    locate
        ``file``: ``path`` relative to the agent's working directory; ``claude-projects``:
        the newest session log of the working directory under ``$CLAUDE_CONFIG_DIR``
        (default ``~/.claude``); ``codex-sessions``: the newest rollout under ``$CODEX_HOME``
        (default ``~/.codex``).
    path
        For ``locate = "file"``.
    """

    format: t.Literal["claude", "codex", "aider"]
    locate: t.Literal["file", "claude-projects", "codex-sessions"] = "file"
    path: str | None = None


class AgentProfile(_Model):
    """Everything politerm knows about driving one agent CLI."""

    name: str
    description: str = ""
    command: list[str] = []
    resume_args: list[str] = []
    unsafe_args: list[str] = []
    env: dict[str, str] = {}
    submit_key: str = "Enter"
    submit_delay: float = pydantic.Field(0.0, ge=0, le=10)
    submit_retries: int = pydantic.Field(3, ge=0, le=20)
    retry_backoff: float = pydantic.Field(0.25, gt=0, le=10)
    confirm_timeout: float = pydantic.Field(1.5, gt=0, le=120)
    paste_timeout: float = pydantic.Field(3.0, gt=0, le=120)
    interrupt_key: str = "Escape"
    bracketed_paste: bool = True
    keep_lf: bool = True
    quiescence: float = pydantic.Field(0.0, ge=0)
    stuck_after: float = pydantic.Field(0.0, ge=0)
    dialogs: list[Dialog] = []
    detectors: Detectors = Detectors()
    transcript: TranscriptSpec | None = None

    @functools.cached_property
    def _patterns(self) -> dict[str, tuple[re.Pattern[str], ...]]:
        d = self.detectors
        return {
            "approval": _compile(d.approval, "approval"),
            "busy": _compile(d.busy, "busy"),
            "error": _compile(d.error, "error"),
            "ready": _compile(d.ready, "ready"),
            "placeholder": _compile(d.input_placeholder, "placeholder"),
        }

    @functools.cached_property
    def _input_re(self) -> re.Pattern[str] | None:
        pat = self.detectors.input_line
        return re.compile(pat) if pat else None

    @functools.cached_property
    def _paste_re(self) -> re.Pattern[str] | None:
        pat = self.detectors.paste_marker
        return re.compile(pat) if pat else None

    def input_text(self, snap: Snapshot) -> str | None:
        """The text in the input box; ``""`` when empty, None when no input box is seen."""
        rx = self._input_re
        if rx is None:
            return None
        lines = snap.lines
        if self.detectors.input_at_cursor:
            if not 0 <= snap.cursor_y < len(lines):
                return None
            candidates: Sequence[tuple[int, str]] = [(snap.cursor_y, lines[snap.cursor_y])]
        else:
            candidates = list(enumerate(lines))[::-1]
        for _, line in candidates:
            m = rx.match(line.rstrip())
            if m:
                text = (m.group("text") or "").strip()
                for ph in self._patterns["placeholder"]:
                    if ph.fullmatch(text):
                        return ""
                return text
        return None

    def detect(self, snap: Snapshot) -> StateReading:
        """Decide the agent's state from one screen snapshot.

        Approval questions and dialogs win over busy, busy over error, error over ready,
        so a stale "ready" footer never hides a question.
        """
        if not snap.alive:
            status = "?" if snap.exit_status is None else str(snap.exit_status)
            return StateReading(
                AgentState.EXITED, (f"exit status {status}", *snap.tail(6)), rule="pane dead"
            )
        lines = list(snap.lines)
        if self.detectors.region_lines:
            lines = lines[-self.detectors.region_lines :]
        text = "\n".join(ln.rstrip() for ln in lines)
        input_text = self.input_text(snap)
        for dialog in self.dialogs:
            m = dialog.pattern.search(text)
            if m:
                return StateReading(
                    AgentState.DIALOG,
                    (_line_at(text, m.start()),),
                    input_text,
                    rule=f"dialog {dialog.name}",
                    dialog=dialog.name,
                )
        for state, key in (
            (AgentState.WAITING_APPROVAL, "approval"),
            (AgentState.BUSY, "busy"),
            (AgentState.ERROR, "error"),
            (AgentState.READY, "ready"),
        ):
            for rx in self._patterns[key]:
                m = rx.search(text)
                if m:
                    return StateReading(
                        state, (_line_at(text, m.start()),), input_text, rule=f"{key}: {rx.pattern}"
                    )
        if input_text == "":
            return StateReading(
                AgentState.READY, tuple(snap.tail(1)), input_text, rule="empty input line"
            )
        return StateReading(AgentState.UNKNOWN, tuple(snap.tail(3)), input_text, rule="no match")

    def is_input_line(self, line: str) -> bool:
        """Whether ``line`` looks like the profile's input line."""
        rx = self._input_re
        return rx is not None and rx.match(line.rstrip()) is not None

    def paste_marker_in(self, lines: Sequence[str]) -> bool:
        """Whether any of ``lines`` shows the collapsed-paste marker."""
        rx = self._paste_re
        return rx is not None and any(rx.search(ln) for ln in lines)

    def paste_shown(self, snap: Snapshot) -> bool:
        """Whether the input box shows pasted text (or the collapsed-paste marker)."""
        # Only the input box counts: the transcript above keeps markers of earlier pastes.
        if self.paste_marker_in(snap.lines[-8:]):
            return True
        return bool(self.input_text(snap))


def _line_at(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return text[start : end if end >= 0 else len(text)].strip()


# --- loading ----------------------------------------------------------------------------


def _profile_files() -> dict[str, pathlib.Path]:
    files = {p.stem: p for p in sorted(BUILTIN_DIR.glob("*.toml"))}
    udir = user_profile_dir()
    if udir.is_dir():
        files.update({p.stem: p for p in sorted(udir.glob("*.toml"))})
    return files


def _read_toml(path: pathlib.Path) -> dict[str, t.Any]:
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        msg = f"{path}: invalid TOML: {exc}"
        raise ProfileError(msg) from None
    except OSError as exc:
        msg = f"{path}: cannot read: {exc.strerror}"
        raise ProfileError(msg) from None


def _raw_profile(
    name: str, files: dict[str, pathlib.Path], seen: tuple[str, ...]
) -> dict[str, t.Any]:
    if name in seen:
        msg = f"profile {name!r}: extends itself ({' -> '.join((*seen, name))})"
        raise ProfileError(msg)
    path = files.get(name)
    if path is None:
        known = ", ".join(sorted(files)) or "none"
        msg = f"no agent profile {name!r} (known: {known})"
        raise ProfileError(msg)
    data = _read_toml(path)
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str):
        msg = f"{path}: extends: expected a profile name, got {parent!r}"
        raise ProfileError(msg)
    base = _raw_profile(parent, files, (*seen, name))
    merged = {**base, **data}
    if "detectors" in base and "detectors" in data:
        merged["detectors"] = {**base["detectors"], **data["detectors"]}
    return merged


def load_profile(name: str) -> AgentProfile:
    """Load the profile called ``name`` (user dir first, then built-ins).

    Raises
    ------
    ProfileError
        Unknown name, bad TOML, or a bad value; the message names the file and key.
    """
    files = _profile_files()
    data = _raw_profile(name, files, ())
    data.setdefault("name", name)
    try:
        return AgentProfile.model_validate(data)
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        msg = f"{files[name]}: {where}: {err['msg']}"
        raise ProfileError(msg) from None


def list_profiles() -> list[str]:
    """Names of every available profile."""
    return sorted(_profile_files())


def guess_profile(argv: Sequence[str]) -> str:
    """The profile name for a command line: its program name if a profile has it, else generic.

    Examples
    --------
    >>> guess_profile(["/usr/local/bin/claude", "--continue"])
    'claude'
    >>> guess_profile(["my-agent"])
    'generic'
    """
    if not argv:
        return "generic"
    prog = pathlib.PurePath(argv[0]).name
    known = set(_profile_files())
    return prog if prog in known else "generic"
