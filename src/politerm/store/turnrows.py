"""The run store's turns: the prompt outstanding at each agent, and its state."""

from __future__ import annotations

from politerm.errors import TransitionRejected
from politerm.store._rows import _turn
from politerm.store._tables import insert
from politerm.store.journal import JournalRows
from politerm.store.models import Turn
from politerm.store.turns import TurnEnd, TurnState, turn_step


class TurnRows(JournalRows):
    """The run store's turns: the prompt outstanding at each agent.

    A turn is the loop's view of its prompts' rows in the journal of turns: ending it
    ends them in the same transaction (:meth:`end_turn`).

    Every change goes through :func:`politerm.store.turns.turn_step`: a turn starts
    DELIVERING, becomes WAITING on confirmed delivery, may be HOLDING (answered, but the
    agent still asks something), and ends with a :class:`~politerm.store.turns.TurnEnd`.
    """

    def start_turn(
        self,
        agent: str,
        *,
        nonce: str,
        task_id: str | None,
        message_id: int | None,
        start_line: int,
        state: TurnState = TurnState.DELIVERING,
    ) -> Turn:
        """Record the prompt now outstanding at ``agent``.

        Parameters
        ----------
        agent
            The agent prompted.
        nonce
            The prompt's nonce; replies must carry it.
        task_id
            The task the prompt belongs to, if any.
        message_id
            The message delivered in the prompt, if any.
        start_line
            Pane history row at which the agent's answer begins.
        state
            DELIVERING (the default: written before anything is typed), or WAITING for a
            prompt already confirmed.

        Raises
        ------
        TransitionRejected
            ``agent`` still has an open turn: it must end first (one prompt at a time).
        """
        now = self._clock()
        with self._writing() as c:
            prev = c.execute("SELECT nonce FROM turns WHERE agent = ?", (agent,)).fetchone()
            if prev is not None:
                msg = f"turn of {agent}: turn {prev[0]} is still open; end it first"
                raise TransitionRejected(msg)
            turn_step(f"turn of {agent}", None, TurnState.DELIVERING)
            said = {"agent": agent, "nonce": nonce, "task_id": task_id, "message_id": message_id}
            said |= {"start_line": start_line, "state": state.value}
            turn = _turn(insert(c, "turns", said | {"started": now}))
        self._audit.append("turn.start", **said)
        return turn

    def current_turn(self, agent: str) -> Turn | None:
        """Return the prompt outstanding at ``agent``, or None."""
        return self._one(_turn, "SELECT * FROM turns WHERE agent = ?", agent)

    def list_turns(self) -> list[Turn]:
        """Return every open turn (one query, whatever the number of agents)."""
        return self._all(_turn, "SELECT * FROM turns ORDER BY agent")

    def turns_of_task(self, task_id: str) -> list[Turn]:
        """Every open turn that belongs to ``task_id``."""
        return self._all(_turn, "SELECT * FROM turns WHERE task_id = ? ORDER BY agent", task_id)

    def set_turn_state(self, agent: str, nonce: str, state: TurnState) -> Turn | None:
        """Move ``agent``'s turn ``nonce`` to ``state``; None when that turn is not open.

        Raises
        ------
        TransitionRejected
            The state machine does not allow it.
        """
        with self._writing() as c:
            row = c.execute(
                "SELECT state FROM turns WHERE agent = ? AND nonce = ?", (agent, nonce)
            ).fetchone()
            if row is None:
                return None
            old = TurnState(row[0])
            turn_step(f"turn {nonce} of {agent}", old, state)
            row = c.execute(
                "UPDATE turns SET state = ? WHERE agent = ? AND nonce = ? RETURNING *",
                (state.value, agent, nonce),
            ).fetchone()
            turn = _turn(row)
        if old is not state:
            self._audit.append(
                "turn.state", agent=agent, nonce=nonce, old=old.value, new=state.value
            )
        return turn

    def end_turn(self, agent: str, nonce: str, reason: TurnEnd = TurnEnd.ANSWERED) -> bool:
        """End ``agent``'s turn if it is still the one with ``nonce``, saying why.

        Its prompts' open rows in the journal end with it (a HANDED one is ABANDONED, unless
        its message is still DELIVERING: its delivery or the recovery settles that one).

        Returns
        -------
        bool
            False when no turn with that nonce was outstanding (already ended, or replaced by
            a newer prompt, which is left alone).
        """
        with self._writing() as c:
            row = c.execute(
                "DELETE FROM turns WHERE agent = ? AND nonce = ? RETURNING state",
                (agent, nonce),
            ).fetchone()
            if row is not None:
                turn_step(f"turn {nonce} of {agent}", TurnState(row[0]), TurnState.ENDED)
                self.journal_end_nonce(agent, nonce, TurnEnd(reason).value)
        if row is not None:
            self._audit.append("turn.end", agent=agent, nonce=nonce, reason=TurnEnd(reason).value)
        return row is not None
