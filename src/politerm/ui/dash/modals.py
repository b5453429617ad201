"""The dashboard's dialogs: confirm an action, type an answer, answer a gate."""

from __future__ import annotations

import typing as t

from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

if t.TYPE_CHECKING:
    from textual.app import ComposeResult

CSS = """
ConfirmScreen, AskScreen, GateScreen { align: center middle; }
#dialog { width: 90; max-width: 95%; height: auto; border: thick $warning; padding: 1 2;
          background: $surface; }
#question { margin: 1 0; color: $text; }
#keys { color: $text-muted; }
"""

R = t.TypeVar("R")


class _Dialog(ModalScreen[R]):
    """A title, the exact question (never markup), an optional input, the keys."""

    KEYS = ""
    WITH_INPUT = False

    def __init__(self, title: str, question: str) -> None:
        super().__init__()
        self.title_text = title
        self.question = question

    def compose(self) -> ComposeResult:
        """The dialog box."""
        with Vertical(id="dialog"):
            yield Label(self.title_text, id="title")
            yield Static(self.question, id="question", markup=False)
            if self.WITH_INPUT:
                yield Input(placeholder="your answer", id="answer")
            yield Label(self.KEYS, id="keys")


class ConfirmScreen(_Dialog[bool]):
    """Shows exactly what will be answered; ``y`` confirms, ``n``/escape cancels."""

    KEYS = "y: yes   n: no"
    BINDINGS: t.ClassVar = [
        Binding("y,enter", "answer(True)", "yes"),
        Binding("n,escape", "answer(False)", "no"),
    ]

    def action_answer(self, yes: bool) -> None:
        """Close with the answer."""
        self.dismiss(yes)


class AskScreen(_Dialog[str | None]):
    """Shows a question and takes a typed answer (enter sends, escape cancels)."""

    KEYS = "enter: send   escape: cancel"
    WITH_INPUT = True
    AUTO_FOCUS = "#answer"
    BINDINGS: t.ClassVar = [Binding("escape", "cancel", "cancel")]

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Send the typed answer."""
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        """Close without an answer."""
        self.dismiss(None)


class GateScreen(_Dialog[str | None]):
    """A pipeline gate: y continue, n abort, r re-run, s skip; escape cancels."""

    KEYS = "y: continue   n: abort   r: re-run   s: skip   escape: cancel"
    BINDINGS: t.ClassVar = [
        Binding("y", "answer('y')", "continue"),
        Binding("n", "answer('n')", "abort"),
        Binding("r", "answer('r')", "re-run"),
        Binding("s", "answer('s')", "skip"),
        Binding("escape", "answer(None)", "cancel"),
    ]

    def action_answer(self, reply: str | None) -> None:
        """Close with the gate answer."""
        self.dismiss(reply)
