"""The seed project's router, the baseline every loop benchmark measures against.

It polls one ``tmux capture-pane -p -J`` process per agent every 0.4 s, regex-scans the text
for complete blocks and pastes each into its recipient with ``load-buffer`` +
``paste-buffer`` + ``send-keys`` processes.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import typing as t

from politerm.engine.templates import Templates
from politerm.protocol.primer import new_nonce

if t.TYPE_CHECKING:
    from collections.abc import Callable

# --- the seed's design: poll capture-pane, regex-scan, paste -----------------------------

# A complete block as it shows on a screen: header line, body, closing line (indented or not).
BLOCK_RE = re.compile(
    r"\[\[POLI:MSG (\{[^\n]*\})\]\][ \t]*\n(.*?)\n[ \t●⏺]*\[\[/POLI:MSG\]\]", re.DOTALL
)
_TAG_RE = re.compile(r"\A\s*<(\w+)>\s*\n(.*)\n\s*</\1>\s*\Z", re.DOTALL)


class PollingRouter:
    """The seed project's router: one ``tmux capture-pane`` process per agent per tick.

    It forwards every complete block it has not seen yet (by id, nonce and type) to the agent
    named in its ``to`` with ``load-buffer`` + ``paste-buffer`` + ``send-keys Enter``, each a
    tmux process; a block to anyone else ends its task.
    """

    def __init__(self, tmux_argv: Callable[..., list[str]], panes: dict[str, str]) -> None:
        self.tmux_argv = tmux_argv
        self.panes = panes
        self.templates = Templates()
        self.seen: set[tuple[str, str, str]] = set()
        self.finished: set[str] = set()
        self.polls = 0
        self.blocks = 0

    def capture(self, pane_id: str) -> str:
        argv = self.tmux_argv("capture-pane", "-p", "-J", "-t", pane_id)
        self.polls += 1
        return subprocess.run(argv, capture_output=True, check=True).stdout.decode(
            "utf-8", "replace"
        )

    def paste(self, pane_id: str, text: str) -> None:
        buffer = f"seed-{new_nonce()}"
        run = subprocess.run
        run(self.tmux_argv("load-buffer", "-b", buffer, "-"), input=text.encode(), check=True)
        paste = ("paste-buffer", "-p", "-r", "-d", "-b", buffer, "-t", pane_id)
        run(self.tmux_argv(*paste), check=True)
        run(self.tmux_argv("send-keys", "-t", pane_id, "Enter"), check=True)

    def start_task(self, task_id: str, request: str, to: str = "PLANNER") -> None:
        self.paste(
            self.panes[to],
            self.templates.render("task", msg_id=task_id, nonce=new_nonce(), request=request),
        )

    def scan(self, sender: str, screen: str) -> None:
        for m in BLOCK_RE.finditer(screen):
            try:
                header = json.loads(m.group(1))
                key = (str(header["id"]), str(header["nonce"]), str(header["type"]))
            except (ValueError, KeyError, TypeError):
                continue
            if key in self.seen:
                continue
            self.seen.add(key)
            self.blocks += 1
            self.forward(sender, header, _body(m.group(2)))

    def forward(self, sender: str, header: dict[str, t.Any], body: str) -> None:
        to = str(header.get("to", "")).upper()
        if to not in self.panes:
            self.finished.add(str(header["id"]))
            return
        template = "plan" if header["type"] == "plan" else "result"
        text = self.templates.render(
            template, msg_id=str(header["id"]), nonce=new_nonce(), body=body, sender=sender
        )
        self.paste(self.panes[to], text)

    def tick(self) -> None:
        for name, pane_id in self.panes.items():
            self.scan(name, self.capture(pane_id))

    def run(self, interval: float, until: Callable[[], bool], timeout: float) -> bool:
        """Poll every ``interval`` until ``until()``; False on timeout."""
        start = time.monotonic()
        n = 0
        while not until():
            if time.monotonic() - start > timeout:
                return False
            self.tick()
            n += 1
            time.sleep(max(0.0, start + n * interval - time.monotonic()))
        return True


def _body(raw: str) -> str:
    lines = [ln.lstrip(" \t●⏺") for ln in raw.split("\n")]
    text = "\n".join(lines)
    m = _TAG_RE.match(text)
    return m.group(2) if m else text
