"""What a driver writes about its agent in the run store, apart from its turns.

The agent's row follows the state the driver read (at once, or in the caller's own commit),
a STUCK agent is reported once, a disagreement between the agent's own events and its
screen is recorded once as ``drift``, and the conversation id its CLI named in its hook
receipts goes to the journal of turns (``poli up --resume`` resumes that conversation).
"""

from __future__ import annotations

import contextlib
import logging
import typing as t

from politerm.agents.state import AgentState
from politerm.driver.transcripts import own_conversation
from politerm.errors import StoreError

if t.TYPE_CHECKING:
    import pathlib

    from politerm.agents.profile import TranscriptSpec
    from politerm.agents.state import StateReading
    from politerm.driver.receipts import Drift, Receipts
    from politerm.store import RunStore

log = logging.getLogger(__name__)


class AgentRow:
    """One agent's row, events and conversation id in ``store`` (nothing without a store).

    ``env`` is the driver's own mapping (a Gemini agent's home is added to it once its
    hooks tell it), read when its conversation is looked for.
    """

    def __init__(
        self,
        name: str,
        store: RunStore | None,
        transcript: TranscriptSpec | None,
        cwd: pathlib.Path | None,
        env: dict[str, str],
    ) -> None:
        self.name = name
        self.store = store
        self._transcript, self._cwd, self._env = transcript, cwd, env
        self._stuck_reported = False
        self._due: str | None = None  # the state for the store row, until write()
        self._written: str | None = None  # what this driver last wrote there
        #: The conversation id last recorded in the journal ("" before one).
        self.conversation = ""
        self._checked = 0  # how many receipts had been read when it was looked for
        self.drifts: list[Drift] = []
        self._drift_seen: set[str] = set()

    def saw(self, reading: StateReading, task_id: str | None) -> None:
        """A look read ``reading``: its state is due in the row, a new STUCK is reported."""
        if reading.state is AgentState.STUCK and not self._stuck_reported:
            self._stuck_reported = True
            why = f"{self.name} is stuck ({reading.rule}): " + " | ".join(reading.evidence)
            self.event("stuck", task_id, why)
        elif reading.state is not AgentState.STUCK:
            self._stuck_reported = False
        self._due = reading.state.value

    def write(self, receipts: Receipts | None) -> None:
        """Bring the row up to the last look (no-op if it is), and the conversation id."""
        self.follow_conversation(receipts)
        state, self._due = self._due, None
        if state is None or self.store is None:
            return
        try:
            # Unread when the row was ours at the last write and the state has changed since.
            if self._written is None or self._written == state:
                agent = self.store.get_agent(self.name)
                if agent is None or agent.state == state:
                    return
            # A display row the next look rewrites: no fsync on the way to an agent.
            with self.store.batch(durable=False):
                self.store.set_agent_state(self.name, state)
            self._written = state
        except StoreError:
            self._written = None

    def ready(self) -> None:
        """The agent came up ready: its row (if it has one) says so, without an fsync."""
        if self.store is not None:
            with contextlib.suppress(StoreError), self.store.batch(durable=False):
                if self.store.get_agent(self.name) is not None:
                    self.store.set_agent_state(self.name, AgentState.READY.value)

    def follow_conversation(self, receipts: Receipts | None) -> None:
        """Record the conversation its CLI last named in ``receipts`` (once it is its own)."""
        rc = receipts
        if rc is None or self.store is None:
            return
        # A CLI may name its conversation after the turn's end was seen on screen (Codex's
        # notify hook, a process of its own, comes late under load): a look reads what came.
        if rc.channel.size() > rc.channel.offset:
            rc.poll()
        if len(rc.events) == self._checked:
            return
        self._checked = len(rc.events)
        named = [e.session for e in rc.events if e.session]
        if not named or named[-1] == self.conversation:
            return
        session = own_conversation(named, self._transcript, self._cwd, self._env)
        if session and session != self.conversation:
            try:
                # On its newest row in the journal of turns; its next prompt's row carries it.
                self.store.journal_conversation(self.name, session)
                self.conversation = session
            except StoreError:
                log.warning("%s: conversation id %s not recorded", self.name, session)

    def drift(self, drift: Drift, *, key: str | None, task_id: str | None) -> None:
        """Record that the agent's own event and its screen disagreed (once per ``key``)."""
        k = key or str(drift)
        if k in self._drift_seen:
            return
        self._drift_seen.add(k)
        self.drifts.append(drift)
        log.warning("%s drift: %s", self.name, drift)
        with contextlib.suppress(StoreError):
            self.event("drift", task_id, str(drift))

    def event(self, kind: str, task_id: str | None, detail: str) -> None:
        """Add an event about this agent to the store (when it has one)."""
        if self.store is not None:
            self.store.add_event(kind, task_id=task_id, agent=self.name, detail=detail)
