"""What a crash left of a delivery: the one recovery of a prompt handed to an agent.

A watcher (the router, a pipeline runner) that died between pasting a prompt and recording
its confirmation leaves three possible states behind. :func:`left_over` reads which one from
the agent itself, so the prompt is never pasted twice and never lost:

- delivered: the agent works on it, the turn's nonce is on screen (outside the input box),
  or the agent's own record (its prompt hook, its transcript) holds the text;
- pasted: our text (or the CLI's collapsed-paste marker) sits unsubmitted in the input box;
- neither: nothing of it is there (delivery clears anyone else's words first).
"""

from __future__ import annotations

import dataclasses
import typing as t

from politerm.agents.state import AgentState
from politerm.driver.records import records_of

if t.TYPE_CHECKING:
    from politerm.driver.agent import AgentDriver
    from politerm.driver.receipts import Source
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


def pasted(driver: AgentDriver, box: str, text: str) -> bool:
    """Whether the input box shows (the start of) ``text``, or a collapsed paste of it."""
    if driver.profile.paste_marker_in([box]):
        return True
    flat = " ".join(text.split())
    return bool(box) and " ".join(box.split())[:40] in flat
