"""What each mode draws: banner, prompt echo, replies, and the live bottom region.

Every method returns plain rows (``str`` without newlines, at most the terminal width);
:mod:`politerm.testing.fakeagent.app` decides how they reach the terminal (committed
to scrollback, or redrawn in place). The characters match the real CLIs' screens in
``/work/shared/screens`` so detectors written for the real CLI match the fake too.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import typing as t

from politerm.testing.fakeagent.scenario import Mode
from politerm.testing.fakeagent.text import cell_width, truncate, wrap

CLAUDE_SPINNER = "✻✽✢·"
CODEX_BULLETS = "•◦"
GEMINI_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
CLAUDE_VERBS = ("Thinking", "Brewing", "Cogitating", "Nucleating", "Wandering")
CLAUDE_DONE = ("Brewed", "Cogitated", "Worked", "Baked")
NBSP = "\u00a0"

_TOOL_RE = re.compile(r"^\s*(\w+)\((.*)\)\s*$", re.DOTALL)


class Phase(str, enum.Enum):
    """What the agent is doing; decides the bottom region."""

    TRUST = "trust"
    IDLE = "idle"
    BUSY = "busy"
    APPROVAL = "approval"


@dataclasses.dataclass
class View:
    """Everything the bottom region depends on."""

    phase: Phase = Phase.IDLE
    input_text: str = ""
    elapsed: int = 0
    frame: int = 0
    verb: str = "Thinking"
    status: str | None = None
    tool: str = "Bash"
    command: str = ""
    selected: int = 0
    ctrl_c_armed: bool = False
    cwd: str = "/"


def split_tool(approval: str) -> tuple[str, str]:
    """Split ``"Bash(echo hi)"`` into ``("Bash", "echo hi")``.

    Examples
    --------
    >>> split_tool("Bash(echo hi > out.txt)")
    ('Bash', 'echo hi > out.txt')
    >>> split_tool("rm -rf build")
    ('Bash', 'rm -rf build')
    """
    m = _TOOL_RE.match(approval)
    return (m.group(1), m.group(2)) if m else ("Bash", approval)


def _fit(rows: t.Iterable[str], width: int) -> list[str]:
    return [truncate(row, width) for row in rows]


def _input_rows(text: str, width: int, first: str, cont: str) -> list[str]:
    rows: list[str] = []
    for i, line in enumerate(text.split("\n")):
        rows += wrap(line, width, first if i == 0 else cont, cont)
    return rows


def _options(options: t.Sequence[str], selected: int, mark: str, indent: str) -> list[str]:
    pad = " " * cell_width(mark)
    return [
        f"{indent}{mark if i == selected else pad} {i + 1}. {opt}" for i, opt in enumerate(options)
    ]


class Screen:
    """Base: the layout shared by the modes; subclasses change the characters."""

    mode: t.ClassVar[Mode]
    alt_screen: t.ClassVar[bool] = False
    reply_first: t.ClassVar[str] = "● "
    reply_cont: t.ClassVar[str] = "  "
    strip_fences: t.ClassVar[bool] = True
    # Pastes over this many lines or characters show as a marker in the input box.
    marker_lines: t.ClassVar[int] = 10
    marker_chars: t.ClassVar[int] = 800
    approve_options: t.ClassVar[tuple[str, ...]] = ("Yes", "Yes, and don't ask again", "No")
    trust_options: t.ClassVar[tuple[str, ...]] = ("Yes, proceed", "No, exit")

    def paste_marker(self, data: bytes, paste_no: int) -> str | None:
        """The placeholder a large paste shows as in the input box, or ``None``."""
        lines = data.count(b"\n")
        if lines > self.marker_lines or len(data) > self.marker_chars:
            return f"[Pasted text #{paste_no} +{lines} lines]"
        return None

    def banner(self, cwd: str, width: int) -> list[str]:
        """Rows printed once at start."""
        return _fit(
            [
                " ▐▛███▜▌   Claude Code v0.0.0 (fakeagent)",
                "▝▜█████▛▘  Fake model · fakeagent",
                f"  ▘▘ ▝▝    {cwd}",
                "",
            ],
            width,
        )

    def echo(self, text: str, width: int) -> list[str]:
        """Rows recording a submitted prompt in the transcript."""
        return [*_input_rows(text, width, "❯ ", "  "), ""]

    def reply(self, lines: t.Sequence[str], width: int) -> list[str]:
        """A reply's rows: bullet on the first line, indent on the rest, wrapped."""
        rows: list[str] = []
        for i, line in enumerate(lines):
            first = self.reply_first if i == 0 else self.reply_cont
            rows += wrap(line, width, first, self.reply_cont)
        return [*rows, ""]

    def done(self, seconds: int, n: int) -> list[str]:
        """Rows after a finished turn."""
        return [f"✻ {CLAUDE_DONE[(n - 1) % len(CLAUDE_DONE)]} for {seconds}s", ""]

    def interrupted(self) -> list[str]:
        """Rows after Esc/Ctrl-C stopped a turn."""
        return ["  ⎿  Interrupted · What should Claude do instead?", ""]

    def tool_done(self, tool: str, command: str, width: int) -> list[str]:
        """Rows for a tool call that ran."""
        return [*wrap(f"{tool}({command})", width, "● ", "  "), "  ⎿  (No output)", ""]

    def tool_denied(self, tool: str, command: str, width: int) -> list[str]:
        """Rows for a tool call the user rejected."""
        return [
            *wrap(f"{tool}({command})", width, "● ", "  "),
            "  ⎿  User rejected the tool use",
            "",
        ]

    def footer(self, view: View) -> str:
        """The hint line under the input box."""
        if view.ctrl_c_armed:
            return "  Press Ctrl-C again to exit"
        if view.phase is Phase.BUSY:
            return "  esc to interrupt"
        return "  ctrl+g to edit in Vim" if view.input_text else "  ? for shortcuts"

    def input_box(self, view: View, width: int, room: int) -> list[str]:
        """Rule, input rows, rule, footer."""
        rows = _input_rows(view.input_text, width - 1, "❯" + NBSP, "  ")
        rows = rows[-max(1, room - 3) :]
        return ["─" * width, *rows, "─" * width, self.footer(view)]

    def busy_rows(self, view: View) -> list[str]:
        """Spinner rows above the input box."""
        sym = CLAUDE_SPINNER[view.frame % len(CLAUDE_SPINNER)]
        return [f"{sym} {view.status or view.verb}…", ""]

    def approval_rows(self, view: View, width: int) -> list[str]:
        """The tool approval dialog."""
        return [
            *wrap(f"{view.tool}({view.command})", width, "● ", "  "),
            "  ⎿  Waiting…",
            "",
            "─" * width,
            f" {view.tool} command",
            "",
            *wrap(view.command, width, "   ", "   "),
            "   Run a shell command",
            "",
            " Do you want to proceed?",
            *_options(self.approve_options, view.selected, "❯", " "),
            "",
            " Esc to cancel · Tab to amend · ctrl+e to explain",
        ]

    def trust_rows(self, view: View, width: int) -> list[str]:
        """The folder trust dialog shown at start."""
        return [
            "─" * width,
            " Do you trust the files in this folder?",
            "",
            f" {view.cwd}",
            "",
            " Claude Code may read, write, or execute files contained in this directory.",
            "",
            *_options(self.trust_options, view.selected, "❯", " "),
            "",
            " Enter to confirm · Esc to exit",
        ]

    def dynamic(self, view: View, width: int, rows: int) -> list[str]:
        """The live bottom region for ``view``, at most ``rows - 1`` rows."""
        if view.phase is Phase.TRUST:
            out = self.trust_rows(view, width)
        elif view.phase is Phase.APPROVAL:
            out = self.approval_rows(view, width)
        else:
            top = self.busy_rows(view) if view.phase is Phase.BUSY else []
            out = ["", *top]
            out += self.input_box(view, width, rows - 1 - len(out))
        return self._clip(out, width, rows)

    @staticmethod
    def _clip(out: list[str], width: int, rows: int) -> list[str]:
        # Full-width rules stay; other rows keep the last column free so the cursor
        # never sits in the pending-wrap state.
        fitted = [
            row if row and set(row) <= set("─▄▀") else truncate(row, width - 1) for row in out
        ]
        return fitted[-max(1, rows - 1) :]


class ClaudeScreen(Screen):
    """Claude Code: main screen, ink-style live region."""

    mode = Mode.CLAUDE


class CodexScreen(Screen):
    """Codex: alternate screen by default; composer with a ``›`` prompt."""

    mode = Mode.CODEX
    alt_screen = True
    reply_first = "• "
    marker_lines = 10**9  # Codex only counts characters
    marker_chars = 1000
    approve_options = (
        "Yes, proceed (y)",
        "Yes, and don't ask again for this command (p)",
        "No, and tell Codex what to do differently (esc)",
    )
    trust_options = ("Trust and continue", "Back to Agent Command Center")

    def paste_marker(self, data: bytes, paste_no: int) -> str | None:
        """Codex collapses pastes over 1000 characters to ``[Pasted Content N chars]``."""
        if len(data) <= self.marker_chars:
            return None
        chars = len(data.decode("utf-8", "replace"))
        return f"[Pasted Content {chars} chars]" if chars > self.marker_chars else None

    def banner(self, cwd: str, width: int) -> list[str]:
        """Codex's boxed title."""
        return _fit(["", "  >_ OpenAI Codex (v0.0.0 fakeagent)", f"     {cwd}", ""], width)

    def echo(self, text: str, width: int) -> list[str]:
        """``› prompt`` with continuation lines indented 2."""
        return [*_input_rows(text, width, "› ", "  "), ""]

    def done(self, seconds: int, n: int) -> list[str]:
        """``  Worked for Ns``."""
        return [f"  Worked for {seconds}s", ""]

    def interrupted(self) -> list[str]:
        """Codex's interruption notice."""
        return [
            "■ Interrupted: conversation interrupted - tell the model what to do differently.",
            "",
        ]

    def tool_done(self, tool: str, command: str, width: int) -> list[str]:
        """``• Ran cmd`` / ``  └ (no output)``."""
        return [*wrap(f"Ran {command}", width, "• ", "    "), "  └ (no output)", ""]

    def tool_denied(self, tool: str, command: str, width: int) -> list[str]:
        """The rejected command."""
        return [*wrap(f"Rejected {command}", width, "✗ ", "    "), ""]

    def input_box(self, view: View, width: int, room: int) -> list[str]:
        """Composer, blank, model line, footer."""
        if view.input_text:
            rows = _input_rows(view.input_text, width - 1, "› ", "  ")
        else:
            rows = ["› Ask Codex to do anything"]
        rows = rows[-max(1, room - 3) :]
        if view.ctrl_c_armed:
            foot = "  Press Ctrl-C again to exit"
        elif view.input_text:
            foot = ""
        else:
            foot = "  ← for agents · ? for shortcuts"
        return [*rows, "", f"  fake-model default · {view.cwd}", foot]

    def busy_rows(self, view: View) -> list[str]:
        """``• Working (Ns • esc to interrupt)``, the status line under it."""
        bullet = CODEX_BULLETS[view.frame % 2]
        rows = [f"{bullet} Working ({view.elapsed}s • esc to interrupt)"]
        if view.status:
            rows.append(f"  └ {view.status}")
        return [*rows, ""]

    def approval_rows(self, view: View, width: int) -> list[str]:
        """``Would you like to run the following command?``."""
        return [
            "",
            "Would you like to run the following command?",
            "",
            "  Reason: the fake agent wants to run a command",
            "",
            *wrap(f"$ {view.command}", width, "  ", "    "),
            "",
            *_options(self.approve_options, view.selected, "›", ""),
            "",
            "  Press enter to confirm or esc to cancel",
        ]

    def trust_rows(self, view: View, width: int) -> list[str]:
        """``Trust this folder?``."""
        return [
            "",
            "  Folder access",
            f"  {view.cwd}",
            "",
            *wrap(
                "Trust this folder? Codex can read, edit, and run files here, subject to your "
                "permission settings.",
                width,
                "  ",
                "  ",
            ),
            "",
            *_options(self.trust_options, view.selected, "›", ""),
            "",
            "  enter continue · esc back",
        ]


class GeminiScreen(Screen):
    """Gemini CLI: main screen, half-block bars around the prompt."""

    mode = Mode.GEMINI
    reply_first = "✦ "
    approve_options = ("Allow once", "Allow for this session", "No, suggest changes (esc)")
    trust_options = ("Trust folder", "Trust parent folder", "Don't trust (esc)")

    def paste_marker(self, data: bytes, paste_no: int) -> str | None:
        """``[Pasted Text: N lines]`` for large pastes."""
        lines = data.count(b"\n") + 1
        if lines > self.marker_lines or len(data) > self.marker_chars:
            return f"[Pasted Text: {lines} lines]"
        return None

    def banner(self, cwd: str, width: int) -> list[str]:
        """Logo and tips."""
        return _fit(
            [
                "",
                " ▝▜▄     Gemini CLI v0.0.0 (fakeagent)",
                "   ▝▜▄",
                "  ▗▟▀    Authenticated with gemini-api-key /auth",
                " ▝▀",
                "",
                "Tips for getting started:",
                "1. Ask coding questions, edit code or run commands",
                "2. Be specific for the best results",
            ],
            width,
        )

    def echo(self, text: str, width: int) -> list[str]:
        """The prompt between ``▄``/``▀`` bars."""
        return ["▄" * width, *_input_rows(text, width - 1, " > ", "   "), "▀" * width]

    def done(self, seconds: int, n: int) -> list[str]:
        """Gemini prints nothing after a turn."""
        return []

    def interrupted(self) -> list[str]:
        """Gemini's cancellation notice."""
        return ["ℹ Request cancelled. Interrupted.", ""]

    def _box(self, rows: t.Sequence[str], width: int) -> list[str]:
        inner = max(1, width - 4)
        body = [
            f"│ {truncate(r, inner)}{' ' * (inner - cell_width(truncate(r, inner)))} │"
            for r in rows
        ]
        return ["╭" + "─" * (width - 2) + "╮", *body, "╰" + "─" * (width - 2) + "╯"]

    def tool_done(self, tool: str, command: str, width: int) -> list[str]:
        """``│ ✓  Shell cmd │`` box."""
        return ["", *self._box([f"✓  Shell {command}", ""], width), ""]

    def tool_denied(self, tool: str, command: str, width: int) -> list[str]:
        """``│ -  Shell cmd │`` box."""
        return ["", *self._box([f"-  Shell {command}", "Cancelled by user."], width), ""]

    def input_box(self, view: View, width: int, room: int) -> list[str]:
        """Bars, prompt, workspace footer."""
        if view.input_text:
            rows = _input_rows(view.input_text, width - 1, " > ", "   ")
        else:
            rows = [" >   Type your message or @path/to/file"]
        rows = rows[-max(1, room - 7) :]
        left, mid, right = " workspace (/directory)", "sandbox", "/model"
        gap = max(1, (width - 1 - len(left) - len(mid) - len(right)) // 2)
        hint = "Press Ctrl-C again to exit" if view.ctrl_c_armed else ""
        return [
            "─" * width,
            f" Shift+Tab to accept edits {hint}".rstrip(),
            "▄" * width,
            *rows,
            "▀" * width,
            f"{left}{' ' * gap}{mid}{' ' * gap}{right}",
            f" {view.cwd}{' ' * gap}no sandbox{' ' * gap}fake-model",
        ]

    def _shortcuts(self, text: str, width: int) -> str:
        hint = "? for shortcuts"
        return text + " " * max(1, width - 2 - cell_width(text) - len(hint)) + hint

    def busy_rows(self, view: View) -> list[str]:
        """``⠦ Thinking... (esc to cancel, Ns)``."""
        sym = GEMINI_SPINNER[view.frame % len(GEMINI_SPINNER)]
        return [f" {sym} {view.status or 'Thinking...'} (esc to cancel, {view.elapsed}s)"]

    def dynamic(self, view: View, width: int, rows: int) -> list[str]:
        """Idle: ``? for shortcuts`` right-aligned over the box; busy: the spinner there."""
        if view.phase in (Phase.TRUST, Phase.APPROVAL):
            return super().dynamic(view, width, rows)
        if view.phase is Phase.BUSY:
            top = self._shortcuts(self.busy_rows(view)[0], width)
        else:
            top = "" if view.input_text else self._shortcuts("", width)
        out = ["", top]
        out += self.input_box(view, width, rows - 1 - len(out))
        return self._clip(out, width, rows)

    def approval_rows(self, view: View, width: int) -> list[str]:
        """``Allow execution of [Shell]?`` box."""
        body = [
            f"? Shell  {view.command}",
            "",
            "Allow execution of [Shell]?",
            "",
            *_options(self.approve_options, view.selected, "●", ""),
        ]
        return ["", *self._box(body, width - 1)]

    def trust_rows(self, view: View, width: int) -> list[str]:
        """``Do you trust the files in this folder?`` box."""
        body = [
            "Do you trust the files in this folder?",
            "",
            f"Trusting a folder lets Gemini CLI load its settings. ({view.cwd})",
            "",
            *_options(self.trust_options, view.selected, "●", ""),
        ]
        return ["", *self._box(body, width - 1)]


class PlainScreen(Screen):
    """A line REPL: ``> `` prompt, replies as-is, no busy indicator."""

    mode = Mode.PLAIN
    reply_first = ""
    reply_cont = ""
    strip_fences = False

    def paste_marker(self, data: bytes, paste_no: int) -> str | None:
        """Plain mode never collapses a paste."""
        return None

    def banner(self, cwd: str, width: int) -> list[str]:
        """One line."""
        return _fit([f"fakeagent (plain) in {cwd}", ""], width)

    def echo(self, text: str, width: int) -> list[str]:
        """Each line behind ``> ``, as aider shows a pasted prompt."""
        return [*_input_rows(text, width, "> ", "> "), ""]

    def done(self, seconds: int, n: int) -> list[str]:
        """Nothing."""
        return []

    def interrupted(self) -> list[str]:
        """``Interrupted``."""
        return ["Interrupted", ""]

    def tool_done(self, tool: str, command: str, width: int) -> list[str]:
        """The command, then a blank."""
        return [*wrap(f"Running {command}", width), ""]

    def tool_denied(self, tool: str, command: str, width: int) -> list[str]:
        """Refusal line."""
        return [*wrap(f"Skipped {command}", width), ""]

    def dynamic(self, view: View, width: int, rows: int) -> list[str]:
        """The ``> `` prompt, or a Y/N question."""
        if view.phase is Phase.BUSY:
            return []
        if view.phase is Phase.TRUST:
            out = ["Do you trust the files in this folder? (Y)es/(N)o [Yes]: "]
        elif view.phase is Phase.APPROVAL:
            out = [*wrap(f"Run shell command? {view.command} (Y)es/(N)o [Yes]: ", width - 1)]
        else:
            out = _input_rows(view.input_text, width - 1, "> ", "> ")
            if view.ctrl_c_armed:
                out.insert(0, "^C again to exit")
        return [truncate(r, width - 1) for r in out][-max(1, rows - 1) :]


SCREENS: dict[Mode, type[Screen]] = {
    Mode.CLAUDE: ClaudeScreen,
    Mode.CODEX: CodexScreen,
    Mode.GEMINI: GeminiScreen,
    Mode.PLAIN: PlainScreen,
}
