r"""A scripted fake agent TUI that stands in for the real agent CLIs in tests and demos.

It is a real interactive terminal program: raw mode, bracketed paste, SIGWINCH,
screens drawn with the same characters as Claude Code, Codex and Gemini CLI (see
:mod:`politerm.testing.fakeagent.render`), so detectors written against the real CLIs
match it. Run it with::

    python -m politerm.testing.fakeagent --mode {claude,codex,gemini,plain}
        [--scenario FILE|NAME] [--log FILE.jsonl] [--transcript FILE.jsonl]
        [--name NAME] [--no-alt-screen]

``--scenario`` takes a path or the name of a bundled scenario (``echo``,
``demo-planner``, ``demo-executer``). Without one it echoes: ``ECHO: <first line>``.
``--mode`` wins over the scenario's ``mode``; the default is ``claude``. Exit status:
0 clean exit (Ctrl-D, Ctrl-C twice when idle, ``action = "exit"``, SIGTERM gives
128+15), 2 bad scenario or usage (one line on stderr naming the file and key),
3 ``action = "crash"``.

Scenario format (TOML; JSON when the file ends in ``.json``)::

    mode = "claude"                 # optional; --mode wins
    think_time = 0.3                # seconds busy before replying (rules may override)
    trust_dialog = false            # folder-trust dialog at start; Enter/1/y accepts
    swallow_first_enter_after_paste = false  # gemini: first Enter after a paste ignored
    swallow_enter_in_burst = false  # codex/gemini: Enter in the same read() as typed text ignored
    burst_window = 0.0              # with the above: an Enter this many seconds after typed
                                    # text or a paste is part of the burst too
    swallow_all_enters = false      # every Enter in the input box ignored: a stuck input
    list_reindent = false           # codex: lazy list continuation lines get indented
    strip_fences = true             # hide ``` fence lines (default: true, plain: false)
    ignore_sighup = false           # gemini: survive tmux kill-session (SIG_IGN, inherited)
    spawn_child = false             # start child_command as a child process
    child_command = ["sleep", "600"]
    status_lines = []               # cycled on the spinner line while busy
    default_reply = "ECHO: {first_line}"    # when no rule matches

    [[rules]]                       # first rule whose regex matches (re.search) wins
    match = '(?s)TASK_ID=(?P<id>\S+).*nonce=(?P<nonce>\w+)'
    reply = "plan for {id}"         # {group}, {prompt}, {first_line}, {n}, {name};
                                    # other braces (JSON) stay literal
    think_time = 1.0
    status_lines = ["Reading files"]
    approval = "Bash(echo hi > out.txt)"     # ask first: 1/y/p/Enter approve, 3/n/Esc deny
    deny_reply = "Okay, not running it."     # reply when denied (default: none)
    defaults = { nonce = "none" }   # values for optional groups that did not match
    recall = false                  # start from earlier prompts' groups ("continue")
    write_file = { path = "out.txt", content = "hi\n" }  # after approval, relative to cwd
                                    # (append = true adds to the file instead)
    action = "reply"                # or "crash" (exit 3), "hang" (busy forever), "exit"

    [faults]                        # seeded fault knobs; each decision logged as "fault"
    seed = 0                        # with the name and the log's start count: repeatable
    lose_enter = 0.0                # share of submitting Enter presses lost
    crash_at = "after_submit"       # or "before_submit" (Enter pressed, never submitted),
                                    # "mid_reply" (half the reply drawn); exit 3
    crash_share = 0.0               # share of prompts on which it crashes
    crash_after = 0                 # prompts let through first, counted over the whole log
    crash_max = 1                   # crashes over the log's life: a restart on the same
                                    # --log (poli up --resume) does not crash again
    freeze_share = 0.0              # share of turns that stop reading input and drawing
    freeze_seconds = 1.0            # for this long (keys wait in the terminal)
    slow_share = 0.0                # share of turns that think slow_seconds longer
    slow_seconds = 1.0
    leave_text_share = 0.0          # share of finished turns that leave text in the box
    leave_text = "draft: half-typed note"
    lose_answers = 0                # first answers to its questions lost over the log's
                                    # life (the question stays, as if pressed too early)

Editing keys: Backspace; Ctrl-U (and Esc when idle) empties the input box; Ctrl-A then
Ctrl-K does too (kill from the start); Ctrl-C empties it when idle.

Log (``--log``, JSONL, mode 0600, one ``write()`` per line): every object has ``ts``
and ``event``: ``start`` (mode, name, pid, child_pid, cwd, cols, rows), ``key`` (key,
text for typed text), ``paste`` (len, sha256), ``prompt`` (n, len, sha256, text,
queued), ``swallowed_enter`` (reason: ``after_paste``, ``burst``, ``all`` or ``fault``),
``cleared`` (key, len, text: what an editing key removed from the box), ``fault`` (kind:
``crash`` with ``at``, ``freeze``/``slow`` with ``seconds``, ``leave_text`` with ``text``,
``lost_answer``; ``n``), ``dialog``,
``approval`` (tool, command, choice, approved), ``write_file``, ``reply``, ``interrupt``,
``resize``, ``crash``, ``exit`` (code, reason). Read it back with :func:`read_log` and
:func:`prompts`.

Transcript (``--transcript``, JSONL, mode 0600, one ``write()`` per line), shaped like
Claude Code's session log so :func:`politerm.protocol.transcript.claude_texts` reads it:
``{"type": "user", "message": {"role": "user", "content": PROMPT}, ...}`` when a turn
starts, and ``{"type": "assistant", "message": {"role": "assistant", "content":
[{"type": "text", "text": REPLY}]}, ...}`` once the reply is on the screen. ``REPLY`` is
the rule's rendered reply before any screen treatment (fences, tags and newlines intact);
a turn without reply text (an interrupt, a denial without ``deny_reply``) writes none.
"""

from __future__ import annotations

from politerm.testing.fakeagent.eventlog import EventLog, prompts, read_log
from politerm.testing.fakeagent.scenario import (
    Action,
    CrashAt,
    Faults,
    Mode,
    Rule,
    Scenario,
    ScenarioError,
    bundled_scenario,
    load_scenario,
)

__all__ = [
    "Action",
    "CrashAt",
    "EventLog",
    "Faults",
    "Mode",
    "Rule",
    "Scenario",
    "ScenarioError",
    "bundled_scenario",
    "load_scenario",
    "prompts",
    "read_log",
]
