"""The driver's pen on the journal of turns (:mod:`politerm.store.journal`).

The driver writes the journal's rows: its delivery writes a prompt's row HANDED before
anything is typed, DELIVERED or FAILED with what the delivery saw, and its turn ENDED with
the turn's outcome (ABANDONED when its caller gives the turn up). Only closing a row happens
elsewhere: a loop turn's end (``RunStore.end_turn``), a row no driver will settle
(:func:`politerm.driver.leftover.abandon`), a fleet node's fenced attempt. A workflow says
which record a prompt serves (:class:`~politerm.store.journal.Serves`) and gets the row's
id back (``DeliveryResult.turn_id``, ``TurnResult.turn_id``); it never opens a row itself.
Nudges, a soft stop's note and a usage limit's "continue" belong to the turn's row.
"""

from __future__ import annotations

import dataclasses
import typing as t

from politerm.store.journal import JournalState

if t.TYPE_CHECKING:
    from collections.abc import Callable

    from politerm.driver.delivery import DeliveryResult
    from politerm.store import RunStore
    from politerm.store.journal import JournalRow, Serves


def proof_of(result: DeliveryResult) -> dict[str, t.Any]:
    """What a delivery saw, as its row keeps it: outcome, rule, sources, last evidence."""
    return {
        "outcome": result.outcome.value,
        "rule": result.rule,
        "sources": list(result.sources),
        "submits": result.submits,
        "evidence": list(result.evidence[-3:]),
    }


class TurnLog:
    """One driver's rows in the journal of turns (none without a store or a record).

    Parameters
    ----------
    agent
        The driver's agent name.
    store
        The run store, if the driver has one.
    """

    def __init__(self, agent: str, store: RunStore | None) -> None:
        self.agent = agent
        self.store = store
        #: The row of the prompt handed last, until its turn ended.
        self.current: int | None = None

    def hand(
        self,
        serves: Serves | None,
        text: str | bytes,
        *,
        nonce: str | None,
        start_line: int | None,
        conversation: str | None,
    ) -> JournalRow | None:
        """Write (or take over) the row of a prompt about to be typed."""
        if serves is None or self.store is None:
            return None
        plain = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        # Intent, followed within moments by the delivery's outcome: no fsync on the way to
        # the agent (RunStore.batch); a lost row is a prompt the recovery reads off the agent.
        with self.store.batch(durable=False):
            row = self.store.journal_hand(
                self.agent,
                serves,
                text=plain,
                nonce=nonce,
                start_line=start_line,
                conversation=conversation,
            )
        self.current = row.id
        return row

    def delivered(
        self,
        turn_id: int | None,
        result: DeliveryResult,
        then: Callable[[DeliveryResult], None] | None = None,
    ) -> DeliveryResult:
        """DELIVERED when the prompt got in (or was submitted and asked about), else FAILED.

        ``then(result)`` (the caller's record of the outcome) is written in the same commit:
        a crash leaves both or neither, so an open row is all a recovery needs to read.
        """
        result = dataclasses.replace(result, turn_id=turn_id)
        if self.store is None or turn_id is None:
            if then is not None:
                then(result)
            return result
        got_in = result.got_in
        # DELIVERED alone is synced by the caller's record of it, or at the turn's end.
        with self.store.batch(durable=then is not None or not got_in):
            state = JournalState.DELIVERED if got_in else JournalState.FAILED
            outcome = None if got_in else result.outcome.value
            self.store.journal_move(turn_id, state, outcome=outcome, proof=proof_of(result))
            if then is not None:
                then(result)
        if not got_in and self.current == turn_id:
            self.current = None
        return result

    def confirmed(self, turn_id: int | None, proof: t.Mapping[str, t.Any]) -> None:
        """DELIVERED on evidence found after a crash (nothing was typed now)."""
        if turn_id is not None and self.store is not None:
            self.store.journal_move(turn_id, JournalState.DELIVERED, proof=proof)

    def ended(
        self, turn_id: int | None, outcome: str, *, conversation: str | None, given_up: bool = False
    ) -> None:
        """The turn is over: ENDED (never confirmed: FAILED), ABANDONED if ``given_up``."""
        row = None if turn_id is None or self.store is None else self.store.journal_row(turn_id)
        if self.store is not None and row is not None and row.open:
            done = JournalState.ENDED if row.delivered is not None else JournalState.FAILED
            done = JournalState.ABANDONED if given_up else done
            self.store.journal_move(row.id, done, outcome=outcome, conversation=conversation)
        if self.current == turn_id:
            self.current = None
