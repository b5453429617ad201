"""The fake agent's event loop: raw terminal, input handling, turns, drawing.

Single-threaded: one ``select`` over the terminal and a signal wake-up pipe, with
timeouts for the spinner and the think time. Nothing the user types or pastes is ever
executed or written to the terminal unescaped.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import pathlib
import select
import signal
import sys
import termios
import time
import tty
import typing as t

from politerm.testing.fakeagent.display import Display
from politerm.testing.fakeagent.eventlog import encode_bytes, sha256_hex
from politerm.testing.fakeagent.faults import FaultPlan
from politerm.testing.fakeagent.inputbox import InputBox
from politerm.testing.fakeagent.keys import EventKind, InputEvent, KeyDecoder
from politerm.testing.fakeagent.render import CLAUDE_VERBS, SCREENS, Phase, View, split_tool
from politerm.testing.fakeagent.scenario import Action, CrashAt
from politerm.testing.fakeagent.text import (
    reindent_lists,
    render_template,
    sanitize,
    strip_fences,
)
from politerm.testing.fakeagent.transcript import Transcript

if t.TYPE_CHECKING:
    import subprocess
    import types

    from politerm.testing.fakeagent.eventlog import EventLog
    from politerm.testing.fakeagent.render import Screen
    from politerm.testing.fakeagent.scenario import Mode, Rule, Scenario

READ_SIZE = 65536
FRAME_SECONDS = 0.25  # spinner step
ESC_WAIT = 0.03  # how long a lone ESC may wait for the rest of a sequence
CTRL_C_WINDOW = 2.0  # second Ctrl-C within this exits
ECHO_MAX_BYTES = 4000  # a prompt's echo in the transcript is cut here (the log has it all)


class _Exit(Exception):
    """Unwinds the event loop to a clean exit (or a simulated crash)."""

    def __init__(self, code: int, reason: str, *, crash: bool = False) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason
        self.crash = crash


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
    replied: bool = False


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
    once
        A prompt answered as the only turn, after which the agent exits (``--print``).
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
        once: str | None = None,
    ) -> None:
        self.scenario = scenario
        self.once = once
        # Every prompt's matched groups, for rules with ``recall``.
        self.recalled: dict[str, str] = {}
        self.mode = mode
        self.screen: Screen = SCREENS[mode]()
        self.display = Display(self.screen, fd_out, alt=alt_screen and self.screen.alt_screen)
        self.log = log
        self.name = name
        self.fd_in = fd_in
        self.faults = FaultPlan(scenario.faults, log, name)
        self.cwd = str(pathlib.Path.cwd())
        self.strip_fences = (
            scenario.strip_fences if scenario.strip_fences is not None else self.screen.strip_fences
        )
        self.decoder = KeyDecoder()
        self.phase = Phase.TRUST if scenario.trust_dialog else Phase.IDLE
        self.box = InputBox(self.screen.paste_marker)
        self.n = 0
        self.queue: collections.deque[tuple[bytes, str, int]] = collections.deque()
        self.turn: _Turn | None = None
        self.hanging = False
        self.frozen_until = 0.0  # monotonic end of a [faults] freeze
        self.selected = 0
        self.swallow_next_enter = False
        self.last_input = 0.0  # monotonic time of the last typed text or paste
        self.ctrl_c_deadline = 0.0
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
            import subprocess  # only a scenario with a child needs it (a cost at every start)

            self.child = subprocess.Popen(
                self.scenario.child_command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        self.display.measure()
        self.log.write(
            "start",
            mode=self.mode.value,
            name=self.name,
            pid=os.getpid(),
            child_pid=self.child.pid if self.child else None,
            cwd=self.cwd,
            cols=self.display.width,
            rows=self.display.height,
            alt_screen=self.display.alt,
        )
        code, reason, crash = 0, "exit", False
        try:
            tty.setraw(self.fd_in)
            self.display.setup(self.name)
            self.display.commit(self.screen.banner(self.cwd, self.display.width))
            self._render()
            if self.once is not None:
                self.box.type(self.once.encode())
                self._submit()
            self._loop()
        except _Exit as stop:
            code, reason, crash = stop.code, stop.reason, stop.crash
        finally:
            self.display.teardown()
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
            import subprocess

            with contextlib.suppress(subprocess.TimeoutExpired):
                self.child.wait(2)

    def _loop(self) -> None:
        while True:
            if self._signal_exit is not None:
                raise _Exit(*self._signal_exit)
            frozen = self.frozen_until - time.monotonic()
            # A frozen agent neither reads its input nor draws: keys wait in the terminal.
            fds = [self._wake_r] + ([self.fd_in] if self.stdin_open and frozen <= 0 else [])
            try:
                ready, _, _ = select.select(fds, [], [], frozen if frozen > 0 else self._timeout())
            except InterruptedError:
                ready = []
            if self._wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_r, 1024)
            if self._signal_exit is not None:
                raise _Exit(*self._signal_exit)
            if self.frozen_until > time.monotonic():
                continue
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
                self.display.output_ok = False  # terminal is gone; keep running like gemini
                return
            raise _Exit(0, "eof")
        self._handle(self.decoder.feed(data), burst=True)

    # ----------------------------------------------------------------- input

    def _handle(self, events: list[InputEvent], *, burst: bool) -> None:
        typed_in_chunk = False
        for event in events:
            if event.kind is EventKind.PASTE:
                self.log.write(
                    "paste",
                    len=len(event.data),
                    sha256=sha256_hex(event.data),
                    phase=self.phase.value,
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
        self.box.type(data)

    def _paste(self, data: bytes) -> None:
        self.ctrl_c_deadline = 0.0
        self.box.paste(data)
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
            elif not self.box.empty and self.faults.lose_enter():
                self.log.write("swallowed_enter", reason="fault")
            else:
                if not self.box.empty and self.faults.crash(CrashAt.BEFORE_SUBMIT, self.n + 1):
                    raise _Exit(3, "crash", crash=True)
                self._submit()
        elif key == "backspace":
            self.box.backspace()
        elif key in ("ctrl-u", "ctrl-k") or (key == "esc" and self.phase is not Phase.BUSY):
            self._clear(key)
        elif key == "ctrl-a":
            self.box.cursor_home = True
        elif key == "esc":
            self._interrupt()
        elif key == "ctrl-c":
            if self.phase is Phase.BUSY:
                self._interrupt()
            elif not self.box.empty:
                self._clear(key)
            elif self.ctrl_c_deadline and time.monotonic() < self.ctrl_c_deadline:
                raise _Exit(0, "ctrl-c")
            else:
                self.ctrl_c_deadline = time.monotonic() + CTRL_C_WINDOW
        elif key == "ctrl-d":
            raise _Exit(0, "ctrl-d")

    def _clear(self, key: str) -> None:
        """Ctrl-U, Ctrl-C and Esc empty the box; Ctrl-K does after Ctrl-A (kill to the end)."""
        if self.box.empty or (key == "ctrl-k" and not self.box.cursor_home):
            return
        cleared = self.box.clear()
        self.log.write("cleared", key=key, len=len(cleared), text=encode_bytes(cleared))

    def _in_burst_window(self) -> bool:
        window = self.scenario.burst_window
        return bool(window and not self.box.empty and time.monotonic() - self.last_input < window)

    # ----------------------------------------------------------------- turns

    def _submit(self) -> None:
        data = self.box.data()
        if not data:
            return
        display = self.box.display(ECHO_MAX_BYTES, head=True)
        self.box.clear()
        self.n += 1
        busy = self.phase is not Phase.IDLE
        # Logged before anything else happens: tests read what was delivered even if
        # the rule then crashes the agent.
        self.log.prompt(data, self.n, queued=busy)
        if self.faults.crash(CrashAt.AFTER_SUBMIT, self.n):
            raise _Exit(3, "crash", crash=True)
        if busy:
            self.queue.append((data, display, self.n))
        else:
            self._start_turn(data, display, self.n)

    def _start_turn(self, data: bytes, display: str, n: int) -> None:
        text = data.decode("utf-8", "surrogateescape")
        self.transcript.user(text)
        index, rule, groups = self.scenario.pick(text, self.recalled)
        if rule.action is Action.CRASH:
            self.log.write("crash", n=n, rule=index)
            raise _Exit(3, "crash", crash=True)
        if rule.action is Action.EXIT:
            raise _Exit(0, "scenario-exit")
        self.display.commit(self.screen.echo(display, self.display.width))
        now = time.monotonic()
        think = rule.think_time if rule.think_time is not None else self.scenario.think_time
        think += self.faults.slow(n)
        freeze = self.faults.freeze(n)
        if freeze:
            self.frozen_until = now + freeze
            think += freeze
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
            if turn.rule.approval_after_reply and not turn.replied:
                # Answer first, then ask to run a command (aider's "Run shell command?").
                turn.replied = True
                self.display.commit(self._rows(turn, turn.rule.reply))
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
        if self.faults.lose_answer(turn.n):
            self.selected = 0
            return
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
        command, width = sanitize(turn.command), self.display.width
        if approved:
            self.display.commit(self.screen.tool_done(turn.tool, command, width))
            self._write_file(turn)
            self._finish(turn, "" if turn.replied else turn.rule.reply)
        else:
            self.display.commit(self.screen.tool_denied(turn.tool, command, width))
            self._finish(turn, turn.rule.deny_reply or "")

    def _write_file(self, turn: _Turn) -> None:
        spec = turn.rule.write_file
        if spec is None:
            return
        path = pathlib.Path(render_template(spec.path, turn.values))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            text = render_template(spec.content, turn.values)
            with path.open("a" if spec.append else "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as exc:
            self.log.write("write_file", n=turn.n, path=str(path), error=str(exc))
        else:
            self.log.write("write_file", n=turn.n, path=str(path))

    def _rows(self, turn: _Turn, template: str) -> list[str]:
        if not template:
            return []
        raw = render_template(template, turn.values)
        self.unlogged_replies.append(raw)
        lines = raw.rstrip("\n").split("\n")
        if self.scenario.list_reindent:
            lines = reindent_lists(lines)
        if self.strip_fences:
            lines = strip_fences(lines)
        return self.screen.reply([sanitize(line) for line in lines], self.display.width)

    def _finish(self, turn: _Turn, template: str) -> None:
        elapsed = int(time.monotonic() - turn.started)
        rows = self._rows(turn, template)
        if rows and self.faults.crash(CrashAt.MID_REPLY, turn.n):
            self.display.commit(rows[: max(1, len(rows) // 2)])
            self.display.render(self._view())
            # A reply cut off mid-way never completes: its transcript entry is not written.
            del self.unlogged_replies[-1:]
            raise _Exit(3, "crash", crash=True)
        self.display.commit([*rows, *self.screen.done(elapsed, turn.n)])
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
        self.display.commit(self.screen.interrupted())
        self._end_turn()

    def _end_turn(self) -> None:
        self.turn = None
        self.hanging = False
        self.phase = Phase.IDLE
        if self.once is not None:
            raise _Exit(0, "printed")
        if self.queue:
            self._start_turn(*self.queue.popleft())
        elif self.box.empty and (left := self.faults.leave_text(self.n)) is not None:
            self.box.type(left.encode())

    # ----------------------------------------------------------------- drawing

    def _view(self) -> View:
        now = time.monotonic()
        view = View(
            phase=self.phase,
            input_text=self.box.display(),
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

    def _on_resize(self) -> None:
        self.display.measure()
        self.log.write("resize", cols=self.display.width, rows=self.display.height)
        self.display.resized(self._view())

    def _render(self) -> None:
        self.display.render(self._view())
