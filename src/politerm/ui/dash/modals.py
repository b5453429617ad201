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


class ConfirmScreen(ModalScreen[bool]):
    """Shows exactly what will be answered; ``y`` confirms, ``n``/escape cancels."""

    BINDINGS: t.ClassVar = [
        Binding("y,enter", "answer(True)", "yes"),
        Binding("n,escape", "answer(False)", "no"),
    ]

    def __init__(self, title: str, question: str) -> None:
        super().__init__()
        self.title_text = title
        self.question = question

    def compose(self) -> ComposeResult:
        """The widgets."""
        with Vertical(id="dialog"):
            yield Label(self.title_text, id="title")
            yield Static(self.question, id="question", markup=False)
            yield Label("y: yes   n: no", id="keys")

    def action_answer(self, yes: bool) -> None:
        """Close with the answer."""
        self.dismiss(yes)


class AskScreen(ModalScreen[str | None]):
    """Shows a question and takes a typed answer (enter sends, escape cancels)."""

    AUTO_FOCUS = "#answer"

    BINDINGS: t.ClassVar = [Binding("escape", "cancel", "cancel")]

    def __init__(self, title: str, question: str) -> None:
        super().__init__()
        self.title_text = title
        self.question = question

    def compose(self) -> ComposeResult:
        """The widgets."""
        with Vertical(id="dialog"):
            yield Label(self.title_text, id="title")
            yield Static(self.question, id="question", markup=False)
            yield Input(placeholder="your answer", id="answer")
            yield Label("enter: send   escape: cancel", id="keys")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Send the typed answer."""
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        """Close without an answer."""
        self.dismiss(None)


class GateScreen(ModalScreen[str | None]):
    """A pipeline gate: y continue, n abort, r re-run, s skip; escape cancels."""

    BINDINGS: t.ClassVar = [
        Binding("y", "answer('y')", "continue"),
        Binding("n", "answer('n')", "abort"),
        Binding("r", "answer('r')", "re-run"),
        Binding("s", "answer('s')", "skip"),
        Binding("escape", "answer(None)", "cancel"),
    ]

    def __init__(self, title: str, question: str) -> None:
        super().__init__()
        self.title_text = title
        self.question = question

    def compose(self) -> ComposeResult:
        """The widgets."""
        with Vertical(id="dialog"):
            yield Label(self.title_text, id="title")
            yield Static(self.question, id="question", markup=False)
            keys = "y: continue   n: abort   r: re-run   s: skip   escape: cancel"
            yield Label(keys, id="keys")

    def action_answer(self, reply: str | None) -> None:
        """Close with the gate answer."""
        self.dismiss(reply)
