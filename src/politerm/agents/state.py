"""Agent states and the evidence that decided them."""

from __future__ import annotations

import dataclasses
import enum


class AgentState(str, enum.Enum):
    """What an agent's screen says it is doing."""

    STARTING = "starting"
    READY = "ready"
    BUSY = "busy"
    WAITING_APPROVAL = "waiting_approval"
    DIALOG = "dialog"
    ERROR = "error"
    STUCK = "stuck"
    LIMITED = "limited"
    EXITED = "exited"
    UNKNOWN = "unknown"


@dataclasses.dataclass(frozen=True)
class StateReading:
    """One detection: the state, the screen lines that decided it, and the input box text.

    ``input_text`` is None when the profile cannot see an input area on this screen, and
    ``""`` when the input area is there and empty. ``reset_at`` (epoch seconds) is when a
    LIMITED agent's limit resets, when its screen says.
    """

    state: AgentState
    evidence: tuple[str, ...] = ()
    input_text: str | None = None
    rule: str = ""
    dialog: str | None = None
    reset_at: float | None = None
