"""Agent profiles: data (TOML) that says how to start, read and type into one agent CLI.

Built-in profiles live in ``politerm/agents/profiles/*.toml``; a file of the same name in the
user config dir (``~/.config/politerm/agents/``) overrides one, and new files add agents.
A profile may ``extends = "other"`` to inherit every key it does not set.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import re
import shlex
import tomllib
import typing as t

import platformdirs
import pydantic

from politerm.agents._linememo import progress_of
from politerm.agents.bundled import own_python
from politerm.agents.limits import limit_region, reset_time

# These lived here first; callers still import them from this module.
from politerm.agents.question import ApprovalRequest as ApprovalRequest  # noqa: PLC0414
from politerm.agents.question import ApprovalSpec as ApprovalSpec  # noqa: PLC0414
from politerm.agents.question import open_question, read_request
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
    """A start-up or modal dialog: how to recognise it and the keys that answer it.

    ``match`` is searched in the detector region; anchor it (``[Yes]: *$``) when the
    question stays on screen after it is answered, as line REPLs leave it.
    """

    name: str
    match: str
    keys: list[str] = ["Enter"]
    description: str = ""

    @functools.cached_property
    def pattern(self) -> re.Pattern[str]:
        """The compiled ``match``."""
        return re.compile(self.match, re.MULTILINE)


class Detectors(_Model):
    """Screen detectors; every pattern is a regex searched in the relevant screen region.

    Attributes
    ----------
    ready, busy, approval, error
        Any match decides that state (checked in the order approval, stuck, busy, limited,
        error, ready).
    stuck
        Messages after which the agent cannot go on by itself, not even later (state STUCK).
    limited, limit_reset
        Usage/rate-limit messages (state LIMITED until the reset), and regexes whose
        ``reset`` group says when it resets (:func:`politerm.agents.limits.parse_reset`),
        searched in the last ``limit_region_lines`` lines (default: the region).
    input_line
        Regex with a ``text`` group matching the input line; searched bottom-up.
    input_placeholder
        Texts shown in an empty input box (``Ask Codex to do anything``).
    input_at_cursor
        Only the cursor's line can be the input line (line REPLs and shells).
    input_anchor
        A line that closes the input box from below (opencode's agent line); the input line
        is then looked for only in the ``input_anchor_lines`` lines above it, and an input
        box with no text line is empty.
    busy_off_prompt
        With ``input_at_cursor``: the cursor away from any input line means the program is
        working (line REPLs that show no spinner, such as ``aider --no-pretty``).
    paste_marker
        A collapsed-paste marker in the input box (``[Pasted text #1 +31 lines]``).
    title_ready, title_busy
        Regexes over the pane title the program sets; used only when the screen decides
        nothing.
    progress_ignore
        Lines that change without progress (spinner glyphs, timers); busy lines and digits
        are ignored anyway when judging whether an agent is stuck.
    region_lines
        Only the last N screen lines (down to the last non-blank one) are searched
        (0: the whole screen).
    """

    ready: list[str] = []
    busy: list[str] = []
    approval: list[str] = []
    error: list[str] = []
    stuck: list[str] = []
    limited: list[str] = []
    limit_reset: list[str] = []
    limit_region_lines: int | None = pydantic.Field(default=None, ge=0)
    input_line: str | None = None
    input_placeholder: list[str] = []
    input_at_cursor: bool = False
    input_anchor: str | None = None
    input_anchor_lines: int = pydantic.Field(default=3, ge=1, le=50)
    busy_off_prompt: bool = False
    paste_marker: str | None = None
    title_ready: list[str] = []
    title_busy: list[str] = []
    progress_ignore: list[str] = []
    region_lines: int = pydantic.Field(default=0, ge=0)

    @pydantic.model_validator(mode="after")
    def _check_regexes(self) -> Detectors:
        for field in (
            *("ready", "busy", "approval", "error", "stuck", "limited", "limit_reset"),
            *("input_placeholder", "title_ready", "title_busy", "progress_ignore"),
        ):
            _compile(getattr(self, field), f"detectors.{field}")
        for field in ("input_line", "paste_marker", "input_anchor"):
            value = getattr(self, field)
            if value is not None:
                _compile([value], f"detectors.{field}")
        if self.input_line is not None and "(?P<text>" not in self.input_line:
            msg = "detectors.input_line: needs a (?P<text>...) group"
            raise ValueError(msg)
        for pat in self.limit_reset:
            if "(?P<reset>" not in pat:
                msg = f"detectors.limit_reset: {pat!r} needs a (?P<reset>...) group"
                raise ValueError(msg)
        if self.busy_off_prompt and not self.input_at_cursor:
            msg = "detectors.busy_off_prompt: needs input_at_cursor = true"
            raise ValueError(msg)
        return self


class Rendering(_Model):
    """How the CLI draws a reply holding our tagged block (data for parsers and docs).

    Attributes
    ----------
    reply_prefix
        The bullet before the first line of a reply (``"● "``; ``""`` for none).
    indent
        Spaces before every following line of a reply.
    wrap_indent
        Continuation indent of lines the CLI wraps itself.
    prompt_prefix
        How the user's own prompts are echoed (``"❯ "``, ``"┃  "``).
    list_reindent
        Lines after a list item are indented as part of it (lazy continuation).
    single_brackets
        A standalone ``[[X]]`` may render as ``[X]``.
    drops_html_tags
        ``<PLAN>``-like tags vanish (aider's pretty markdown).
    chrome
        Regexes for the lines the CLI draws below its replies (input box, footer, status
        bar); see :mod:`politerm.agents.chrome`.
    """

    reply_prefix: str = ""
    indent: int = pydantic.Field(default=0, ge=0)
    wrap_indent: int = pydantic.Field(default=0, ge=0)
    prompt_prefix: str = ""
    list_reindent: bool = False
    single_brackets: bool = False
    drops_html_tags: bool = False
    chrome: list[str] = []

    @pydantic.model_validator(mode="after")
    def _check_chrome(self) -> Rendering:
        _compile(self.chrome, "render.chrome")
        return self


class TranscriptSpec(_Model):
    """Where an agent CLI keeps its own transcript, a source no screen renderer can mangle.

    Attributes
    ----------
    format
        ``claude`` (Claude Code JSONL), ``codex`` (Codex rollout JSONL), ``aider``
        (``.aider.chat.history.md``), ``gemini`` (chat JSONL), ``opencode`` (its database).
    locate
        ``file`` (``path``, relative to the working directory), or where the CLI keeps it:
        ``claude-projects``, ``codex-sessions``, ``gemini-projects``, ``opencode-data``
        (see :func:`politerm.driver.transcripts.locate_transcript`).
    path
        For ``locate = "file"``.
    path_env
        For ``locate = "file"``: an environment variable that, set in the agent's
        environment, names the file instead of ``path`` (aider's
        ``AIDER_CHAT_HISTORY_FILE``).
    """

    format: t.Literal["claude", "codex", "aider", "gemini", "opencode"]
    locate: t.Literal[
        "file", "claude-projects", "codex-sessions", "gemini-projects", "opencode-data"
    ] = "file"
    path: str | None = None
    path_env: str | None = None


class AgentProfile(_Model):
    """Everything politerm knows about driving one agent CLI.

    See ``docs/profiles.md`` for every key.
    """

    name: str
    description: str = ""
    command: list[str] = []
    resume_args: list[str] = []
    # Resume one conversation by the CLI's own id ("{session}"): two agents of one CLI in
    # one directory each get theirs back, where resume_args would give both the newest.
    resume_session_args: list[str] = []
    # A CLI that keeps its conversation in a file of the directory (aider): politerm gives
    # each agent its own file beside the default, so that resume_args restore its own.
    own_history: bool = False
    unsafe_args: list[str] = []
    unsafe_env: dict[str, str] = {}
    version_args: list[str] = ["--version"]
    env: dict[str, str] = {}
    submit_key: str = "Enter"
    submit_delay: float = pydantic.Field(default=0.0, ge=0, le=10)
    submit_retries: int = pydantic.Field(default=3, ge=0, le=20)
    retry_backoff: float = pydantic.Field(default=0.25, gt=0, le=10)
    confirm_timeout: float = pydantic.Field(default=1.5, gt=0, le=120)
    paste_timeout: float = pydantic.Field(default=3.0, gt=0, le=120)
    interrupt_key: str = "Escape"
    # Keys that empty a non-empty input box; delivery presses them, then verifies the box.
    clear_input: list[str] = []
    # An agent ready this long after a prompt, with no answer, is nudged; after
    # ``idle_nudges`` nudges it has gone idle without one.
    idle_after: float = pydantic.Field(default=20.0, gt=0)
    idle_nudges: int = pydantic.Field(default=1, ge=0, le=10)
    bracketed_paste: bool = True
    keep_lf: bool = True
    quiescence: float = pydantic.Field(default=0.0, ge=0)
    # After a start-up dialog was answered, ready must hold this long (a CLI that restarts
    # itself may draw its input box for a moment before the next dialog).
    dialog_settle: float = pydantic.Field(default=0.0, ge=0, le=60)
    # A block seen once on the screen counts when a look this long after (with no output
    # since, which would look at once) sees it the same: a CLI that repaints in parts can
    # be caught mid-repaint (opencode), and may pause there under load. 0: one look is
    # enough (an agent that draws each screen in one write).
    block_settle: float = pydantic.Field(default=0.5, ge=0, le=10)
    stuck_after: float = pydantic.Field(default=0.0, ge=0)
    # Agents of this CLI start one after another: in one bring-up (``poli up``), each waits
    # until the one of this profile started before it is ready (or failed) before it is
    # launched; agents of other profiles still start together. For a CLI whose first starts
    # race on its shared files: two opencode 1.18.33 started at the same moment in a home
    # where it never ran can leave one stopped after its ``init`` step, blank for good
    # (docs/realcli.md). See driver/startline.py.
    start_alone: bool = False
    dialogs: list[Dialog] = []
    # A menu the CLI opens under its limit message: closed with its keys at the reset.
    limit_dialog: Dialog | None = None
    detectors: Detectors = Detectors()
    approval: ApprovalSpec = ApprovalSpec()
    render: Rendering = Rendering()
    transcript: TranscriptSpec | None = None

    @functools.cached_property
    def _patterns(self) -> dict[str, tuple[re.Pattern[str], ...]]:
        d = self.detectors
        return {
            "approval": _compile(d.approval, "approval"),
            "stuck": _compile(d.stuck, "stuck"),
            "limited": _compile(d.limited, "limited"),
            "limit_reset": _compile(d.limit_reset, "limit_reset"),
            "busy": _compile(d.busy, "busy"),
            "error": _compile(d.error, "error"),
            "ready": _compile(d.ready, "ready"),
            "placeholder": _compile(d.input_placeholder, "placeholder"),
            "title_ready": _compile(d.title_ready, "title_ready"),
            "title_busy": _compile(d.title_busy, "title_busy"),
            "progress_ignore": _compile(d.progress_ignore, "progress_ignore"),
        }

    @functools.cached_property
    def _input_re(self) -> re.Pattern[str] | None:
        pat = self.detectors.input_line
        return re.compile(pat) if pat else None

    @functools.cached_property
    def _anchor_re(self) -> re.Pattern[str] | None:
        pat = self.detectors.input_anchor
        return re.compile(pat) if pat else None

    @functools.cached_property
    def _paste_re(self) -> re.Pattern[str] | None:
        pat = self.detectors.paste_marker
        return re.compile(pat) if pat else None

    def _input_candidates(self, snap: Snapshot) -> Sequence[str] | None:
        """The lines that may hold the input line, nearest first; None: no input box."""
        lines = snap.lines
        if self.detectors.input_at_cursor:
            at = snap.cursor_line  # cursor_y less the wrapped rows tmux joined above it
            return None if at < 0 else [lines[at]]
        anchor = self._anchor_re
        if anchor is None:
            return lines[::-1]
        for i in range(len(lines) - 1, -1, -1):
            if anchor.match(lines[i].rstrip()):
                lo = max(0, i - self.detectors.input_anchor_lines)
                return lines[lo:i][::-1]
        return None

    def input_text(self, snap: Snapshot) -> str | None:
        """The text in the input box; ``""`` when empty, None when no input box is seen."""
        rx = self._input_re
        if rx is None:
            return None
        candidates = self._input_candidates(snap)
        if candidates is None:
            return None
        anchored = self._anchor_re is not None and not self.detectors.input_at_cursor
        for line in candidates:
            m = rx.match(line.rstrip())
            if m:
                text = (m.group("text") or "").strip()
                if anchored and not text:
                    continue  # a padding line of the box; the text may be above it
                for ph in self._patterns["placeholder"]:
                    if ph.fullmatch(text):
                        return ""
                return text
        return "" if anchored else None

    def region(self, snap: Snapshot, size: int | None = None) -> str:
        """The screen text the detectors search: the last ``region_lines`` (or ``size``) lines.

        The blank rows under a full-screen dialog drawn at the top are not counted.
        """
        lines = list(snap.lines)
        size = self.detectors.region_lines if size is None else size
        if size:
            end = len(lines)
            while end and not lines[end - 1].strip():
                end -= 1
            lines = lines[max(0, end - size) : end]
        return "\n".join(ln.rstrip() for ln in lines)

    def detect(self, snap: Snapshot, *, limited: bool = True) -> StateReading:
        """Decide the agent's state from one screen snapshot.

        Dialogs and approval questions win over stuck, stuck over busy, busy over limited,
        limited over error, error over ready, so a stale "ready" footer never hides a
        question. The pane title decides only when the screen does not. ``limited=False``
        reads the screen as if no limit message showed (one already dealt with).
        """
        # One look is read by the tracker, then by whoever acts on it (a handoff reads
        # the recipient's screen twice more): the last few readings are kept, by snapshot.
        key = (id(self), id(snap), limited)
        hit = _READINGS.get(key)
        if hit is not None and hit[0] is self and hit[1] is snap:
            return hit[2]
        reading = self._detect(snap, limited=limited)
        if reading.state is not AgentState.LIMITED:  # its reset time is read against now
            _READINGS[key] = (self, snap, reading)  # held: their ids stay theirs
            if len(_READINGS) > _READINGS_KEPT:
                _READINGS.pop(next(iter(_READINGS), key), None)
        return reading

    def _detect(self, snap: Snapshot, *, limited: bool) -> StateReading:
        if not snap.alive:
            status = "?" if snap.exit_status is None else str(snap.exit_status)
            return StateReading(
                AgentState.EXITED, (f"exit status {status}", *snap.tail(6)), rule="pane dead"
            )
        text = self.region(snap)
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
        # The lowest question, and none answered below it (see politerm.agents.question).
        question = open_question(self, snap.lines)
        if question is not None:
            return StateReading(
                AgentState.WAITING_APPROVAL, (question.line,), input_text, rule=question.rule
            )
        for state, key in (
            (AgentState.STUCK, "stuck"),
            (AgentState.BUSY, "busy"),
        ):
            reading = self._search(text, state, key, input_text)
            if reading is not None:
                return reading
        if self.detectors.busy_off_prompt and input_text is None and self._input_re is not None:
            return StateReading(
                AgentState.BUSY, tuple(snap.tail(1)), None, rule="cursor off the prompt"
            )
        for state, key in (
            (AgentState.LIMITED, "limited" if limited else ""),
            (AgentState.ERROR, "error"),
            (AgentState.READY, "ready"),
        ):
            where = limit_region(self, snap) if key == "limited" else text
            reading = self._search(where, state, key, input_text) if key else None
            if reading is not None and state is AgentState.LIMITED:
                return dataclasses.replace(reading, reset_at=reset_time(self, where))
            if reading is not None:
                return reading
        if input_text == "":
            return StateReading(
                AgentState.READY, tuple(snap.tail(1)), input_text, rule="empty input line"
            )
        if snap.title:
            for state, key in ((AgentState.BUSY, "title_busy"), (AgentState.READY, "title_ready")):
                for rx in self._patterns[key]:
                    if rx.search(snap.title):
                        rule = f'{key}: title "{snap.title}"'
                        evidence = (f"title: {snap.title}",)
                        return StateReading(state, evidence, input_text, rule=rule)
        return StateReading(AgentState.UNKNOWN, tuple(snap.tail(3)), input_text, rule="no match")

    def _search(
        self, text: str, state: AgentState, key: str, input_text: str | None
    ) -> StateReading | None:
        for rx in self._patterns[key]:
            m = rx.search(text)
            if m:
                rule = f'{key}: "{matched_lines(text, m)}"'
                return StateReading(state, (_line_at(text, m.start()),), input_text, rule=rule)
        return None

    def approval_request(self, snap: Snapshot) -> ApprovalRequest | None:
        """What the open tool-permission question on screen asks to run, if one is open.

        The command is ``""`` when the profile has no ``approval.command`` regex or it does
        not match; ``complete`` is False when it cannot be read in full with certainty, as
        when the question's box starts above the screen (read it with the history:
        :func:`politerm.agents.question.read_request`).
        """
        if self.detect(snap).state is not AgentState.WAITING_APPROVAL:
            return None
        return read_request(self, snap.lines, trailing_spaces=snap.trailing_spaces)

    def progress_key(self, snap: Snapshot) -> tuple[str, ...]:
        """The screen minus what moves without progress (spinners, timers, busy lines).

        Two snapshots with the same key show no progress; the tracker's STUCK rule uses it.
        """
        key = progress_of(self._patterns["busy"] + self._patterns["progress_ignore"])
        return tuple(k for k in map(key, snap.lines) if k is not None)

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

    def launch_argv(self, *, unsafe: bool = False, resume: bool = False) -> list[str]:
        """The command line to start this agent: command, then resume and unsafe arguments."""
        return [
            *self.command,
            *(self.resume_args if resume else ()),
            *(self.unsafe_args if unsafe else ()),
        ]

    def history_env(self, agent: str, cwd: pathlib.Path) -> dict[str, str]:
        """The environment that gives ``agent`` its own history file (``own_history``).

        The transcript's ``path`` with the agent's name before its suffix, in ``cwd``, in
        the transcript's ``path_env``; nothing for a CLI without ``own_history``.

        Examples
        --------
        >>> spec = TranscriptSpec(format="aider", path=".aider.chat.history.md",
        ...                       path_env="AIDER_CHAT_HISTORY_FILE")
        >>> p = AgentProfile(name="x", own_history=True, transcript=spec)
        >>> p.history_env("PLANNER", pathlib.Path("/w"))
        {'AIDER_CHAT_HISTORY_FILE': '/w/.aider.chat.history.PLANNER.md'}
        >>> AgentProfile(name="y").history_env("PLANNER", pathlib.Path("/w"))
        {}
        """
        spec = self.transcript
        if not self.own_history or spec is None or not spec.path or not spec.path_env:
            return {}
        default = pathlib.PurePath(spec.path)
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in agent) or "agent"
        own = default.with_name(f"{default.stem}.{safe}{default.suffix}")
        return {spec.path_env: str(cwd / own)}

    def resume_argv(self, session: str = "", history: str = "") -> tuple[list[str], str]:
        """The arguments that resume this agent's conversation, and which conversation.

        With the CLI's own id of the conversation (``session``) and ``resume_session_args``,
        that conversation; with the agent's own ``history`` file, ``resume_args`` restore
        it; else the generic ``resume_args`` (the CLI's newest).

        Examples
        --------
        >>> p = AgentProfile(name="x", resume_args=["--continue"],
        ...                  resume_session_args=["--resume", "{session}"])
        >>> p.resume_argv("0b5e3c1a-9f2d")
        (['--resume', '0b5e3c1a-9f2d'], 'its own conversation 0b5e3c1a-9f2d')
        >>> p.resume_argv("")
        (['--continue'], 'no conversation id known: the newest conversation (--continue)')
        """
        if session and self.resume_session_args:
            args = [a.replace("{session}", session) for a in self.resume_session_args]
            return args, f"its own conversation {session}"
        if history:
            return list(self.resume_args), f"its own chat history {history}"
        how = shlex.join(self.resume_args) if self.resume_args else "no resume arguments"
        return list(self.resume_args), f"no conversation id known: the newest conversation ({how})"

    def launch_env(self, *, unsafe: bool = False) -> dict[str, str]:
        """Extra environment for the agent: ``env``, plus ``unsafe_env`` when unattended."""
        return {**self.env, **(self.unsafe_env if unsafe else {})}


#: The last readings detected, by (profile, snapshot, limited) identity, oldest first.
_READINGS: dict[tuple[int, int, bool], tuple[AgentProfile, Snapshot, StateReading]] = {}
_READINGS_KEPT = 16


def matched_lines(text: str, m: re.Match[str], width: int = 80) -> str:
    r"""The screen lines a detector's match covers, as a reason shows them (not the regex).

    Stripped, blank ones left out, joined by `` | ``, cut to ``width`` characters.

    Examples
    --------
    >>> screen = "✻ Thinking… (esc to interrupt)\n" + "─" * 100 + "\n❯ \n"
    >>> matched_lines(screen, re.search(r"esc to interrupt", screen))
    '✻ Thinking… (esc to interrupt)'
    >>> shown = matched_lines(screen, re.search(r"(?m)^─{10,}\n❯", screen))
    >>> len(shown), "…" in shown, shown.endswith("── | ❯")
    (80, True, True)
    """
    start = text.rfind("\n", 0, m.start()) + 1
    end = text.find("\n", max(m.start(), m.end() - 1))
    lines = [ln.strip() for ln in text[start : end if end >= 0 else len(text)].split("\n")]
    shown = " | ".join(_cut(ln, width) for ln in lines if ln.strip())
    return _cut(shown, width)


def _cut(text: str, width: int) -> str:
    """``text`` cut in its middle to ``width`` characters (both ends stay readable)."""
    if len(text) <= width:
        return text
    half = (width - 1) // 2
    return text[:half] + "…" + text[len(text) - (width - 1 - half) :]


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
        return tomllib.loads(path.read_bytes().decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        msg = f"{path}: invalid TOML: {exc}"
        raise ProfileError(msg) from None
    except OSError as exc:
        msg = f"{path}: cannot read: {exc.strerror}"
        raise ProfileError(msg) from None


# Tables a profile that ``extends`` another merges key by key; others replace wholesale
# (``env = {}`` in a child clears its parent's environment).
_MERGED_TABLES = ("detectors", "approval", "render")


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
    for table in _MERGED_TABLES:
        if isinstance(base.get(table), dict) and isinstance(data.get(table), dict):
            merged[table] = {**base[table], **data[table]}
    return merged


def load_profile(name: str) -> AgentProfile:
    """Load the profile called ``name`` (user dir first, then built-ins).

    Raises
    ------
    ProfileError
        Unknown name, bad TOML, or a bad value; the message names the file and key.
    """
    files = _profile_files()
    data = {"name": name, **_raw_profile(name, files, ())}
    data["command"] = own_python(list(data.get("command", [])))
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
    >>> guess_profile(["C:/tools/Codex.exe"])
    'codex'
    >>> guess_profile(["my-agent"])
    'generic'
    """
    if not argv:
        return "generic"
    prog = pathlib.PurePath(argv[0]).name.lower().removesuffix(".exe")
    return prog if prog in _profile_files() else "generic"
