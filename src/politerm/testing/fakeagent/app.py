"""The fake agent's event loop: raw terminal, input handling, turns, drawing.

Single-threaded: one ``select`` over the terminal and a signal wake-up pipe, with
timeouts for the spinner and the think time. Nothing the user types or pastes is ever
executed or written to the terminal unescaped.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import hashlib
import os
import pathlib
import select
import signal
import subprocess
import sys
import termios
import time
import tty
import typing as t

from politerm.testing.fakeagent.eventlog import EventLog, encode_bytes
from politerm.testing.fakeagent.keys import EventKind, InputEvent, KeyDecoder
from politerm.testing.fakeagent.render import (
    CLAUDE_VERBS,
    SCREENS,
    Phase,
    Screen,
    View,
    split_tool,
)
from politerm.testing.fakeagent.scenario import (
    Action,
    Mode,
    Rule,
    Scenario,
    ScenarioError,
    bundled_scenario,
    load_scenario,
)
from politerm.testing.fakeagent.text import (
    cell_width,
    reindent_lists,
    render_template,
    sanitize,
    strip_fences,
)
from politerm.testing.fakeagent.transcript import Transcript

if t.TYPE_CHECKING:
    import types

READ_SIZE = 65536
FRAME_SECONDS = 0.25  # spinner step
ESC_WAIT = 0.03  # how long a lone ESC may wait for the rest of a sequence
CTRL_C_WINDOW = 2.0  # second Ctrl-C within this exits
ECHO_MAX_BYTES = 4000  # a prompt's echo in the transcript is cut here (the log has it all)
DISPLAY_MAX_BYTES = 8000  # the live input box shows at most this much of the input's tail
HISTORY_MAX = 5000  # rows kept for alternate-screen redraws


class _Exit(Exception):
    """Unwinds the event loop to a clean exit (or a simulated crash)."""

    def __init__(self, code: int, reason: str, *, crash: bool = False) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason
        self.crash = crash


@dataclasses.dataclass
class _Part:
    """A piece of the input buffer: typed text, or one paste (maybe shown as a marker)."""

    data: bytearray
    marker: str | None = None


@dataclasses.dataclass
class _Turn:
    n: int
    rule_index: int
    rule: Rule
    values: dict[str, object]
    started: float
    until: float
    status_lines: list[str]
    tool: str = ""
    command: str = ""


class FakeAgent:
    """One fake agent attached to a terminal.

    Parameters
    ----------
    scenario
        What to play.
    mode
        Which CLI to imitate.
    log
        Where events go.
    alt_screen
        Use the alternate screen (only meaningful for modes that do by default).
    name
        Shown in the terminal title and logged.
    transcript
        Where prompts and raw replies go, Claude-Code style (``--transcript``).
    """

    def __init__(
        self,
        scenario: Scenario,
        mode: Mode,
        log: EventLog,
        *,
        alt_screen: bool = True,
        name: str = "",
        fd_in: int = 0,
        fd_out: int = 1,
        transcript: Transcript | None = None,
    ) -> None:
        self.scenario = scenario
        self.mode = mode
        self.screen: Screen = SCREENS[mode]()
        self.alt = alt_screen and self.screen.alt_screen
        self.log = log
        self.name = name
        self.fd_in = fd_in
        self.fd_out = fd_out
        self.cwd = str(pathlib.Path.cwd())
        self.strip_fences = (
            scenario.strip_fences if scenario.strip_fences is not None else self.screen.strip_fences
        )
        self.decoder = KeyDecoder()
        self.phase = Phase.TRUST if scenario.trust_dialog else Phase.IDLE
        self.parts: list[_Part] = []
        self.paste_count = 0
        self.n = 0
        self.queue: collections.deque[tuple[bytes, str, int]] = collections.deque()
        self.turn: _Turn | None = None
        self.hanging = False
        self.selected = 0
        self.swallow_next_enter = False
        self.last_input = 0.0  # monotonic time of the last typed text or paste
        self.ctrl_c_deadline = 0.0
        self.width, self.height = 80, 24
        self.pending_rows: list[str] = []
        self.history: list[str] = []
        self.drawn: list[str] = []
        self.drawn_height = 0
        self.output_ok = True
        self.stdin_open = True
        self.child: subprocess.Popen[bytes] | None = None
        self.transcript = transcript or Transcript(None)
        self.unlogged_replies: list[str] = []
        self._wake_r = -1
        self._signal_exit: tuple[int, str] | None = None
        self._resized = False

    # ----------------------------------------------------------------- running

    def run(self) -> int:
        """Take over the terminal until exit; return the exit status."""
        saved = termios.tcgetattr(self.fd_in)
        self._install_signals()
        if self.scenario.spawn_child:
            self.child = subprocess.Popen(
                self.scenario.child_command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        self._measure()
        self.log.write(
            "start",
            mode=self.mode.value,
            name=self.name,
            pid=os.getpid(),
            child_pid=self.child.pid if self.child else None,
            cwd=self.cwd,
            cols=self.width,
            rows=self.height,
            alt_screen=self.alt,
        )
        code, reason, crash = 0, "exit", False
        try:
            tty.setraw(self.fd_in)
            setup = "\x1b[?2004h\x1b[?25l"
            if self.alt:
                setup = "\x1b[?1049h\x1b[H\x1b[2J" + setup
            if self.name:
                setup += f"\x1b]0;{sanitize(self.name)}\x07"
            self._write(setup)
            self._commit(self.screen.banner(self.cwd, self.width))
            self._render()
            self._loop()
        except _Exit as stop:
            code, reason, crash = stop.code, stop.reason, stop.crash
        finally:
            teardown = "\x1b[?2004l\x1b[?25h"
            if self.alt:
                teardown += "\x1b[?1049l"
            elif self.drawn_height:
                teardown = self._erase_region() + teardown
            self._write(teardown)
            with contextlib.suppress(termios.error):
                termios.tcsetattr(self.fd_in, termios.TCSADRAIN, saved)
            self._log_replies()
            self.transcript.close()
        if crash:
            sys.stderr.write("fakeagent: simulated crash\n")
            sys.stderr.flush()
        else:
            self._stop_child()
            self.log.write("exit", code=code, reason=reason)
        self.log.close()
        return code

    def _install_signals(self) -> None:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        self._wake_r = wake_r
        signal.set_wakeup_fd(wake_w)

        def on_winch(signum: int, frame: types.FrameType | None) -> None:
            self._resized = True

        def on_stop(signum: int, frame: types.FrameType | None) -> None:
            self._signal_exit = (128 + signum, signal.Signals(signum).name)

        signal.signal(signal.SIGWINCH, on_winch)
        signal.signal(signal.SIGTERM, on_stop)
        signal.signal(signal.SIGINT, on_stop)
        # Ignoring (not handling) SIGHUP matters: SIG_IGN is inherited by the child,
        # which is what makes gemini-like process trees outlive `kill-session`.
        signal.signal(signal.SIGHUP, signal.SIG_IGN if self.scenario.ignore_sighup else on_stop)

    def _stop_child(self) -> None:
        if self.child is not None and self.child.poll() is None:
            self.child.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.child.wait(2)

    def _loop(self) -> None:
        while True:
            if self._signal_exit is not None:
                raise _Exit(*self._signal_exit)
            fds = [self._wake_r] + ([self.fd_in] if self.stdin_open else [])
            try:
                ready, _, _ = select.select(fds, [], [], self._timeout())
            except InterruptedError:
                ready = []
            if self._wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_r, 1024)
            if self._signal_exit is not None:
                raise _Exit(*self._signal_exit)
            if self._resized:
                self._resized = False
                self._on_resize()
            if self.fd_in in ready:
                self._read_input()
            elif self.decoder.pending and self.stdin_open:
                self._handle(self.decoder.flush(), burst=False)
            self._tick()
            self._render()
            self._log_replies()

    def _timeout(self) -> float | None:
        waits: list[float] = []
        now = time.monotonic()
        if self.phase is Phase.BUSY:
            waits.append(FRAME_SECONDS / 2)
            if self.turn is not None and not self.hanging:
                waits.append(max(0.0, self.turn.until - now))
        if self.decoder.pending:
            waits.append(ESC_WAIT)
        if self.ctrl_c_deadline:
            waits.append(max(0.0, self.ctrl_c_deadline - now))
        return min(waits) if waits else None

    def _read_input(self) -> None:
        try:
            data = os.read(self.fd_in, READ_SIZE)
        except OSError:
            data = b""
        if not data:
            self.stdin_open = False
            self.log.write("stdin_closed")
            if self.scenario.ignore_sighup:
                self.output_ok = False  # terminal is gone; keep running like gemini
                return
            raise _Exit(0, "eof")
        self._handle(self.decoder.feed(data), burst=True)

    # ----------------------------------------------------------------- input

    def _handle(self, events: list[InputEvent], *, burst: bool) -> None:
        typed_in_chunk = False
        for event in events:
            if event.kind is EventKind.PASTE:
                self.log.write(
                    "paste", len=len(event.data), sha256=_sha256(event.data), phase=self.phase.value
                )
            elif event.kind is EventKind.TEXT:
                self.log.write("key", key="text", text=encode_bytes(event.data))
            else:
                self.log.write("key", key=event.key)
            if self.hanging:
                continue
            if self.phase is Phase.TRUST:
                self._dialog_keys(event, self._answer_trust)
            elif self.phase is Phase.APPROVAL:
                self._dialog_keys(event, self._answer_approval)
            elif event.kind is EventKind.TEXT:
                typed_in_chunk = True
                self._type(event.data)
            elif event.kind is EventKind.PASTE:
                self._paste(event.data)
            else:
                self._key(event.key, burst=burst and typed_in_chunk)

    def _dialog_keys(self, event: InputEvent, answer: t.Callable[[int], None]) -> None:
        options = len(
            self.screen.trust_options if self.phase is Phase.TRUST else self.screen.approve_options
        )
        keys: list[str]
        if event.kind is EventKind.TEXT:
            keys = list(event.data.decode("utf-8", "replace").lower())
        elif event.kind is EventKind.KEY:
            keys = [event.key]
        else:
            return
        for key in keys:
            if key == "enter":
                answer(self.selected)
            elif key.isdigit() and 1 <= int(key) <= options:
                answer(int(key) - 1)
            elif key in ("y",):
                answer(0)
            elif key == "p" and self.phase is Phase.APPROVAL:
                answer(1)
            elif key in ("n", "esc", "ctrl-c"):
                answer(options - 1)
            elif key == "up":
                self.selected = max(0, self.selected - 1)
            elif key == "down":
                self.selected = min(options - 1, self.selected + 1)
            else:
                continue
            if self.phase not in (Phase.TRUST, Phase.APPROVAL):
                return

    def _type(self, data: bytes) -> None:
        self.ctrl_c_deadline = 0.0
        self.last_input = time.monotonic()
        if not self.parts or self.parts[-1].marker is not None:
            self.parts.append(_Part(bytearray()))
        self.parts[-1].data += data

    def _paste(self, data: bytes) -> None:
        self.ctrl_c_deadline = 0.0
        marker = self.screen.paste_marker(data, self.paste_count + 1)
        if marker is not None:
            self.paste_count += 1
            self.parts.append(_Part(bytearray(data), marker))
        else:
            self._type(data)
        self.last_input = time.monotonic()
        if self.scenario.swallow_first_enter_after_paste:
            self.swallow_next_enter = True

    def _key(self, key: str, *, burst: bool) -> None:
        if key == "enter":
            if self.scenario.swallow_all_enters:
                self.log.write("swallowed_enter", reason="all")
            elif self.swallow_next_enter:
                self.swallow_next_enter = False
                self.log.write("swallowed_enter", reason="after_paste")
            elif self.scenario.swallow_enter_in_burst and (burst or self._in_burst_window()):
                self.log.write("swallowed_enter", reason="burst")
            else:
                self._submit()
        elif key == "backspace":
            self._backspace()
        elif key == "esc":
            if self.phase is Phase.BUSY:
                self._interrupt()
        elif key == "ctrl-c":
            if self.phase is Phase.BUSY:
                self._interrupt()
            elif self.parts:
                self.parts.clear()
            elif self.ctrl_c_deadline and time.monotonic() < self.ctrl_c_deadline:
                raise _Exit(0, "ctrl-c")
            else:
                self.ctrl_c_deadline = time.monotonic() + CTRL_C_WINDOW
        elif key == "ctrl-d":
            raise _Exit(0, "ctrl-d")

    def _in_burst_window(self) -> bool:
        window = self.scenario.burst_window
        return bool(window and self.parts and time.monotonic() - self.last_input < window)

    def _backspace(self) -> None:
        if not self.parts:
            return
        last = self.parts[-1]
        if last.marker is None and last.data:
            end = len(last.data) - 1
            while end > 0 and 0x80 <= last.data[end] < 0xC0:
                end -= 1  # drop a whole UTF-8 character
            del last.data[end:]
        if last.marker is not None or not last.data:
            self.parts.pop()

    def _input_bytes(self) -> bytes:
        return b"".join(bytes(p.data) for p in self.parts)

    def _input_display(self, limit: int = DISPLAY_MAX_BYTES, *, head: bool = False) -> str:
        """The input as shown: markers for big pastes, controls escaped.

        Only ``limit`` bytes are decoded (the tail for the live box, the head for the
        transcript echo), so a huge unmarked paste costs nothing per frame.
        """
        parts = self.parts if head else self.parts[::-1]
        pieces: list[str] = []
        budget = limit
        for part in parts:
            if budget <= 0:
                pieces.append("…")
                break
            if part.marker is not None:
                pieces.append(part.marker)
                budget -= len(part.marker)
                continue
            data = part.data
            cut = len(data) > budget
            if cut:
                data = data[:budget] if head else data[-budget:]
            text = sanitize(bytes(data).decode("utf-8", "replace"))
            pieces.append(text + "…" if cut and head else "…" + text if cut else text)
            budget -= len(data)
        return "".join(pieces if head else pieces[::-1])

    # ----------------------------------------------------------------- turns

    def _submit(self) -> None:
        data = self._input_bytes()
        if not data:
            return
        display = self._input_display(ECHO_MAX_BYTES, head=True)
        self.parts.clear()
        self.n += 1
        busy = self.phase is not Phase.IDLE
        # Logged before anything else happens: tests read what was delivered even if
        # the rule then crashes the agent.
        self.log.prompt(data, self.n, queued=busy)
        if busy:
            self.queue.append((data, display, self.n))
        else:
            self._start_turn(data, display, self.n)

    def _start_turn(self, data: bytes, display: str, n: int) -> None:
        text = data.decode("utf-8", "surrogateescape")
        self.transcript.user(text)
        index, rule, groups = self.scenario.pick(text)
        if rule.action is Action.CRASH:
            self.log.write("crash", n=n, rule=index)
            raise _Exit(3, "crash", crash=True)
        if rule.action is Action.EXIT:
            raise _Exit(0, "scenario-exit")
        self._commit(self.screen.echo(display, self.width))
        now = time.monotonic()
        think = rule.think_time if rule.think_time is not None else self.scenario.think_time
        first_line = text.split("\n", 1)[0]
        values: dict[str, object] = {
            "prompt": text,
            "first_line": first_line[:1000],
            "n": n,
            "name": self.name,
            **groups,
        }
        status = rule.status_lines if rule.status_lines is not None else self.scenario.status_lines
        self.turn = _Turn(n, index, rule, values, now, now + think, list(status))
        if rule.approval:
            self.turn.tool, self.turn.command = split_tool(render_template(rule.approval, values))
        self.hanging = rule.action is Action.HANG
        self.phase = Phase.BUSY

    def _tick(self) -> None:
        now = time.monotonic()
        if self.ctrl_c_deadline and now >= self.ctrl_c_deadline:
            self.ctrl_c_deadline = 0.0
        turn = self.turn
        if self.phase is not Phase.BUSY or turn is None or self.hanging or now < turn.until:
            return
        if turn.rule.approval:
            self.phase = Phase.APPROVAL
            self.selected = 0
        else:
            self._write_file(turn)
            self._finish(turn, turn.rule.reply)

    def _answer_trust(self, choice: int) -> None:
        accepted = choice < len(self.screen.trust_options) - 1
        self.log.write("dialog", dialog="trust", choice=choice + 1, accepted=accepted)
        if not accepted:
            raise _Exit(0, "trust-declined")
        self.phase = Phase.IDLE
        self.selected = 0

    def _answer_approval(self, choice: int) -> None:
        turn = self.turn
        assert turn is not None
        approved = choice < len(self.screen.approve_options) - 1
        self.log.write(
            "approval",
            n=turn.n,
            tool=turn.tool,
            command=turn.command,
            choice=choice + 1,
            approved=approved,
        )
        self.selected = 0
        if approved:
            self._commit(self.screen.tool_done(turn.tool, sanitize(turn.command), self.width))
            self._write_file(turn)
            self._finish(turn, turn.rule.reply)
        else:
            self._commit(self.screen.tool_denied(turn.tool, sanitize(turn.command), self.width))
            self._finish(turn, turn.rule.deny_reply or "")

    def _write_file(self, turn: _Turn) -> None:
        spec = turn.rule.write_file
        if spec is None:
            return
        path = pathlib.Path(render_template(spec.path, turn.values))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(render_template(spec.content, turn.values), "utf-8")
        except OSError as exc:
            self.log.write("write_file", n=turn.n, path=str(path), error=str(exc))
        else:
            self.log.write("write_file", n=turn.n, path=str(path))

    def _finish(self, turn: _Turn, template: str) -> None:
        elapsed = int(time.monotonic() - turn.started)
        rows: list[str] = []
        if template:
            raw = render_template(template, turn.values)
            self.unlogged_replies.append(raw)
            lines = raw.rstrip("\n").split("\n")
            if self.scenario.list_reindent:
                lines = reindent_lists(lines)
            if self.strip_fences:
                lines = strip_fences(lines)
            rows = self.screen.reply([sanitize(line) for line in lines], self.width)
        self._commit([*rows, *self.screen.done(elapsed, turn.n)])
        self.log.write("reply", n=turn.n, rule=turn.rule_index, seconds=elapsed)
        self._end_turn()

    def _log_replies(self) -> None:
        """Write replies to the transcript once they are on the terminal, as Claude does."""
        for raw in self.unlogged_replies:
            self.transcript.assistant(raw)
        self.unlogged_replies.clear()

    def _interrupt(self) -> None:
        turn = self.turn
        self.log.write("interrupt", n=turn.n if turn else None)
        self._commit(self.screen.interrupted())
        self._end_turn()

    def _end_turn(self) -> None:
        self.turn = None
        self.hanging = False
        self.phase = Phase.IDLE
        if self.queue:
            self._start_turn(*self.queue.popleft())

    # ----------------------------------------------------------------- drawing

    def _view(self) -> View:
        now = time.monotonic()
        view = View(
            phase=self.phase,
            input_text=self._input_display(),
            selected=self.selected,
            ctrl_c_armed=bool(self.ctrl_c_deadline),
            cwd=self.cwd,
        )
        turn = self.turn
        if turn is not None:
            spent = now - turn.started
            view.elapsed = int(spent)
            view.frame = int(spent / FRAME_SECONDS)
            view.verb = CLAUDE_VERBS[(turn.n - 1) % len(CLAUDE_VERBS)]
            view.tool, view.command = turn.tool, sanitize(turn.command)
            if turn.status_lines:
                think = max(turn.until - turn.started, 1e-3)
                step = think / len(turn.status_lines)
                index = min(int(spent / step), len(turn.status_lines) - 1)
                view.status = sanitize(turn.status_lines[index])
        return view

    def _commit(self, rows: list[str]) -> None:
        if self.alt:
            self.history += rows
            del self.history[:-HISTORY_MAX]
        else:
            self.pending_rows += rows

    def _measure(self) -> None:
        try:
            size = os.get_terminal_size(self.fd_out)
            self.width, self.height = max(size.columns, 10), max(size.lines, 4)
        except OSError:
            self.width, self.height = 80, 24

    def _on_resize(self) -> None:
        self._measure()
        self.log.write("resize", cols=self.width, rows=self.height)
        if not self.alt and self.drawn:
            # tmux re-flows the rows we drew at the old width; count what they occupy now.
            w = self.width
            self.drawn_height = sum(max(1, -(-cell_width(row) // w)) for row in self.drawn)
        self._render(force=True)

    def _erase_region(self) -> str:
        up = self.drawn_height - 1
        return (f"\x1b[{up}A" if up > 0 else "") + "\r\x1b[J"

    def _render(self, *, force: bool = False) -> None:
        dyn = self.screen.dynamic(self._view(), self.width, self.height)
        if self.alt:
            if not force and dyn == self.drawn and not self.pending_rows:
                return
            rows = [*self.history, *dyn][-self.height :]
            body = "\x1b[K\r\n".join(rows)
            self._write("\x1b[H" + body + "\x1b[K\x1b[J")
            self.drawn = dyn
            return
        if not force and dyn == self.drawn and not self.pending_rows:
            return
        out = [self._erase_region() if self.drawn_height else "\r\x1b[J"]
        out += [row + "\r\n" for row in self.pending_rows]
        out.append("\r\n".join(dyn))
        self.pending_rows.clear()
        self._write("".join(out))
        self.drawn = dyn
        self.drawn_height = len(dyn)

    def _write(self, text: str) -> None:
        if not self.output_ok:
            return
        data = text.encode("utf-8", "replace")
        try:
            while data:
                done = os.write(self.fd_out, data)
                data = data[done:]
        except OSError:
            self.output_ok = False


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m politerm.testing.fakeagent",
        description="A scripted fake agent TUI imitating claude, codex or gemini.",
    )
    parser.add_argument("--mode", choices=[m.value for m in Mode])
    parser.add_argument(
        "--scenario", help="scenario file (TOML or JSON), or the name of a bundled one"
    )
    parser.add_argument("--log", help="JSONL event log (created 0600)")
    parser.add_argument("--name", default="", help="name shown in the title and logged")
    parser.add_argument(
        "--transcript", help="Claude-Code-style JSONL session transcript (created 0600)"
    )
    parser.add_argument(
        "--no-alt-screen", action="store_true", help="codex: draw inline, history in scrollback"
    )
    return parser


def _resolve_scenario(value: str | None) -> Scenario:
    if value is None:
        return Scenario()
    path = pathlib.Path(value)
    if not path.exists() and "/" not in value:
        with contextlib.suppress(ScenarioError):
            path = bundled_scenario(value)
    return load_scenario(path)


def main(argv: t.Sequence[str] | None = None) -> int:
    """Run the fake agent; return its exit status (2 for a bad scenario or usage)."""
    args = _parser().parse_args(argv)
    try:
        scenario = _resolve_scenario(args.scenario)
    except ScenarioError as exc:
        print(f"fakeagent: bad scenario {exc}", file=sys.stderr)
        return 2
    mode = Mode(args.mode) if args.mode else (scenario.mode or Mode.CLAUDE)
    if not os.isatty(0):
        print("fakeagent: stdin is not a terminal", file=sys.stderr)
        return 2
    try:
        log = EventLog(args.log)
    except OSError as exc:
        print(f"fakeagent: cannot open log {args.log}: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        transcript = Transcript(args.transcript, cwd=str(pathlib.Path.cwd()))
    except OSError as exc:
        log.close()
        msg = f"fakeagent: cannot open transcript {args.transcript}: {exc.strerror}"
        print(msg, file=sys.stderr)
        return 2
    agent = FakeAgent(
        scenario,
        mode,
        log,
        alt_screen=not args.no_alt_screen,
        name=args.name,
        transcript=transcript,
    )
    return agent.run()
