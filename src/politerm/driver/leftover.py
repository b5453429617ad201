"""What a crash left of a delivery: the one recovery of a prompt handed to an agent.

What was in flight is the journal of turns' open rows (:mod:`politerm.store.journal`): the
driver writes a prompt's row before anything is typed, so a prompt without one was never
typed. :func:`resume` settles one open row: a DELIVERED row's turn goes on; a HANDED one
was cut between the paste and its confirmation, and leaves three possible states behind.
:func:`left_over` reads which one from the agent itself, so the prompt is never pasted
twice and never lost:

- delivered: the agent works on it, the turn's nonce is on screen (outside the input box),
  or the agent's own record (its prompt hook, its transcript) holds the text;
- pasted: our text (or the CLI's collapsed-paste marker) sits unsubmitted in the input box;
- neither: nothing of it is there (delivery clears anyone else's words first).
"""

from __future__ import annotations

import dataclasses
import typing as t

from politerm.agents.state import AgentState
from politerm.driver.delivery import DeliveryResult, Outcome
from politerm.driver.records import records_of
from politerm.store.journal import JournalState

if t.TYPE_CHECKING:
    from politerm.driver.agent import AgentDriver
    from politerm.driver.receipts import Source
    from politerm.store import RunStore
    from politerm.store.journal import JournalRow
    from politerm.terminal import Snapshot


@dataclasses.dataclass(frozen=True)
class LeftOver:
    """What :func:`left_over` found.

    ``resumed`` is what :func:`~politerm.driver.turn.run_turn` is told (``"delivered"``: only
    watch; ``"pasted"``: submit the text in the box; None: deliver it); ``rule`` says why.
    """

    resumed: t.Literal["pasted", "delivered"] | None
    rule: str
    evidence: tuple[str, ...] = ()
    sources: tuple[Source, ...] = ()

    def confirmed(self, turn_id: int | None = None) -> DeliveryResult:
        """What was found, as a delivery confirmed without typing anything now."""
        return DeliveryResult(
            Outcome.DELIVERED, self.evidence, 0, True, 0.0, self.rule, self.sources, turn_id
        )


async def left_over(
    driver: AgentDriver, snap: Snapshot, text: str, nonce: str | None, start_line: int | None
) -> LeftOver:
    """How far the delivery of ``text`` (turn ``nonce``, from ``start_line``) got."""
    reading = driver.profile.detect(snap)
    if reading.state in (AgentState.BUSY, AgentState.WAITING_APPROVAL):
        return LeftOver("delivered", "the agent is working on it", reading.evidence)
    if nonce and start_line is not None:
        lines = await driver._blocks.lines(snap, start_line)
        # Our nonce in the turn's window (not in the input box): it echoed or answered it.
        if not reading.input_text and any(nonce in ln for ln in lines):
            return LeftOver("delivered", "its nonce is on screen", tuple(lines[-3:]))
    # The agent's own record (its prompt hook, its transcript) outlives its screen.
    taken = (await records_of(driver)).submitted(text, nonce)
    if taken is not None:
        return LeftOver("delivered", "the agent's own record", (taken[1],), (taken[0],))
    if reading.input_text and pasted(driver, reading.input_text, text):
        return LeftOver("pasted", "our text is in the input box", (reading.input_text,))
    return LeftOver(None, "nothing of it is there")


async def resume(driver: AgentDriver, row: JournalRow, text: str, snap: Snapshot) -> LeftOver:
    """Settle journal row ``row`` (the prompt ``text``, open after a crash) on ``snap``.

    A DELIVERED row was confirmed: only its answer is awaited. A HANDED one is read off the
    agent (:func:`left_over`, the window from the row's start line, or the whole history
    when it has none); when the agent has it, the row is DELIVERED with what was found.
    """
    if row.delivered is not None:
        return LeftOver("delivered", "its journal row says delivered", (row.head,))
    start = row.start_line if row.start_line is not None else 0
    found = await left_over(driver, snap, text, row.nonce, start)
    if found.resumed == "delivered":
        proof = {"rule": found.rule, "evidence": list(found.evidence[-3:])}
        driver.confirmed_earlier(
            text, row.serves, proof, nonce=row.nonce, start_line=row.start_line
        )
    return found


def abandon(store: RunStore, row: JournalRow, why: str) -> None:
    """ABANDON an open row no driver can settle (its agent or its record is gone)."""
    store.journal_move(row.id, JournalState.ABANDONED, outcome=why)


def pasted(driver: AgentDriver, box: str, text: str) -> bool:
    """Whether the input box shows (the start of) ``text``, or a collapsed paste of it."""
    if driver.profile.paste_marker_in([box]):
        return True
    flat = " ".join(text.split())
    return bool(box) and " ".join(box.split())[:40] in flat
