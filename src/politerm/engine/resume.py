"""``poli up --resume``: what goes back in flight once the dead agents run again.

An agent restarted by a resume is a new process: whatever the dead one was given (a prompt
it was answering, one being typed into its box) went with it, and its old screen is no
evidence of anything the new one saw. So before any router routes to it:

- its open turn ends (``resumed``) — the prompt of a turn that was WAITING or HOLDING is to
  be sent again; a prompt handed to it (an open journal row) goes back to QUEUED (the new
  process provably has nothing in its box), so the router sends it like any other;
- every task that failed because an agent or the tmux server died goes back to the state it
  failed in;
- each prompt lost that way is queued again as one copy, unless a copy is still on its way
  (QUEUED, RETRIED or DELIVERING: that one is sent instead), or it was delivered to an
  agent that is still the same process (the copy would be a duplicate).

Before any of that, the dead agent's own records are read
(:class:`~politerm.driver.records.AgentRecords`, located before it was restarted): a
prompt found DELIVERING that its hook or transcript shows it took is DELIVERED (by that
source), and an answer its transcript holds for a prompt (a block with the prompt's nonce)
is applied as the router would have applied it on screen, routed on once; that prompt is
not sent again. An answer printed after the last router stopped reading, and then lost
with the screen, is not lost.

Each step is written before anything is typed, so a resume interrupted halfway and run
again sends nothing twice.
"""

from __future__ import annotations

import time
import typing as t

from politerm.driver.leftover import LeftOver, abandon
from politerm.engine.decide import ACTIVE, FOLLOW_UPS, PLANNER
from politerm.engine.routebase import RESUME_META, RESUME_MSG
from politerm.engine.sending import handed
from politerm.store.journal import JournalState
from politerm.store.models import MessageState, TaskState, Turn, TurnEnd, TurnState

if t.TYPE_CHECKING:
    from collections.abc import Mapping

    from politerm.config import Config
    from politerm.driver.receipts import Source
    from politerm.driver.records import AgentRecords
    from politerm.engine.router import Router
    from politerm.store import RunStore
    from politerm.store.models import Message, Task

# A copy of a lost prompt is not needed while one of these is still to be sent or settled.
_ON_ITS_WAY = frozenset({MessageState.QUEUED, MessageState.RETRIED, MessageState.DELIVERING})
# States of a message that reached an agent process.
_REACHED = frozenset({MessageState.DELIVERED, MessageState.ACKNOWLEDGED})


def resume_work(
    store: RunStore,
    config: Config,
    restarted: t.Collection[str],
    say: t.Callable[[str], None] = lambda _msg: None,
    *,
    records: Mapping[str, AgentRecords] | None = None,
    router: Router | None = None,
) -> None:
    """Put back in flight what died with the agents in ``restarted`` (or the tmux server).

    Parameters
    ----------
    store
        The run store of the session.
    config
        Agents and step timeouts.
    restarted
        The agents this resume started anew (their previous process is gone).
    say
        Progress lines for the user.
    records
        The restarted agents' own records, located before they were restarted.
    router
        Applies an answer found in a record as the router applies one read on screen
        (a router over the session's agents that is not running).
    """
    kept = _Kept(records or {}, router, say)
    for name in restarted:
        kept.settle_open_turn(store, name)
        with store.batch():
            _forget_lost_delivery(store, name, kept)
    for task in store.list_tasks():
        previous = store.get_meta(f"{RESUME_META}{task.id}")
        with store.batch():
            if task.state is TaskState.FAILED and previous:
                _reopen(store, config, task, TaskState(previous))
                say(f"task {task.id}: resumed ({previous})")
            elif task.state not in ACTIVE:
                continue
            for name in config.agents:
                _resend_once(store, task.id, name, restarted=name in restarted, kept=kept)


class _Kept:
    """What the dead agents' own records settle: deliveries they took, answers they wrote."""

    def __init__(
        self,
        records: Mapping[str, AgentRecords],
        router: Router | None,
        say: t.Callable[[str], None],
    ) -> None:
        self.records = records if router is not None else {}
        self.router = router
        self.say = say

    def settle_open_turn(self, store: RunStore, name: str) -> None:
        """Settle ``name``'s open turn from its records: taken, then answered."""
        rec = self.records.get(name)
        turn = store.current_turn(name)
        if rec is None or turn is None or turn.message_id is None:
            return
        msg = store.get_message(turn.message_id)
        if msg is None or msg.task_id is None:
            return
        if msg.state is MessageState.DELIVERING:
            taken = self.taken(name, msg)
            if taken is None:
                return  # no record of it: the new process gets it (see below)
            self.delivered(store, name, msg, turn.nonce, taken, live=True)
            turn = store.current_turn(name)
            if turn is None:
                return
        self.answered(store, name, turn)

    def taken(self, name: str, msg: Message) -> tuple[Source, str] | None:
        """Which of ``name``'s records shows it took ``msg`` (DELIVERING), if one does."""
        rec = self.records.get(name)
        if rec is None or not msg.text:
            return None
        return rec.submitted(msg.text, msg.turn_nonce)

    def delivered(
        self,
        store: RunStore,
        name: str,
        msg: Message,
        nonce: str,
        taken: tuple[Source, str],
        *,
        live: bool,
    ) -> None:
        """``msg`` DELIVERED by the record showing it taken (not ``live``: its turn is over).

        Its open journal row is DELIVERED with that record as its proof (its turn's end then
        ENDS it), before the message leaves DELIVERING.
        """
        assert self.router is not None
        source, evidence = taken
        result = LeftOver("delivered", "the agent's own record", (evidence,), (source,))
        proof = {"rule": result.rule, "sources": [source.value], "evidence": [evidence]}
        for row, handed_msg in handed(store, name):
            if handed_msg.id == msg.id:
                store.journal_move(row.id, JournalState.DELIVERED, proof=proof)
        self.router.sending.outcome(
            name, msg, nonce, result.confirmed(), follow_up=False, recovered=True, told=live
        )
        self.say(f"{name}: the {msg.type} message was taken ({evidence})")

    def answered(self, store: RunStore, name: str, turn: Turn) -> bool:
        """Apply the answer ``name``'s transcript holds for ``turn``; True if it ended it."""
        rec, router = self.records.get(name), self.router
        if rec is None or router is None:
            return False
        blocks = rec.answer(turn.nonce)
        if not blocks:
            return False
        ended = False
        for block in blocks:
            with store.batch():
                router.effects.apply_block(name, turn, block)
            store.add_event(
                "recovered",
                task_id=turn.task_id,
                agent=name,
                detail=f"{block.type} block read back from {name}'s transcript "
                f"({rec.transcript}); its prompt is not sent again",
            )
            self.say(f"task {turn.task_id}: {name}'s {block.type} block read from its transcript")
            if block.type != "status":
                ended = True
                break
        return ended


def _forget_lost_delivery(store: RunStore, name: str, kept: _Kept) -> None:
    """End the open turn of a restarted agent; remember its prompt to be sent again."""
    lost = handed(store, name)  # its prompts in flight, as the journal of turns has them
    turn = store.current_turn(name)
    if turn is not None:
        store.end_turn(name, turn.nonce, TurnEnd.RESUMED)
        msg = store.get_message(turn.message_id) if turn.message_id is not None else None
        if msg is not None and msg.task_id is not None:
            if msg.state is MessageState.DELIVERED:
                # The process that got it is gone: it is over, and a copy takes its place.
                store.transition(msg.id, MessageState.ACKNOWLEDGED)
            if turn.state is not TurnState.DELIVERING or msg.state in _REACHED:
                store.set_meta(f"{RESUME_MSG}{msg.task_id}:{name}", str(msg.id))
        for m in store.list_messages(recipient=name, task_id=turn.task_id):
            if m.type in FOLLOW_UPS and m.state in (MessageState.QUEUED, MessageState.RETRIED):
                store.transition(m.id, MessageState.DEAD, error="its agent was restarted")
    for row, msg in lost:
        taken = None if msg.type in FOLLOW_UPS else kept.taken(name, msg)
        if taken is None:
            abandon(store, row, TurnEnd.RESUMED.value)
        if msg.type in FOLLOW_UPS:
            store.transition(msg.id, MessageState.DEAD, error="its agent was restarted")
        elif taken is not None:
            # The dead process took it: DELIVERED, and over with that process; its answer
            # (or one copy) takes its place.
            kept.delivered(store, name, msg, row.nonce or "", taken, live=False)
            store.journal_move(row.id, JournalState.ENDED, outcome=TurnEnd.RESUMED.value)
            if msg.task_id is not None:
                store.set_meta(f"{RESUME_MSG}{msg.task_id}:{name}", str(msg.id))
        else:
            # The new process has an empty box and never saw it: send it like a new one.
            store.transition(
                msg.id, MessageState.QUEUED, expect=MessageState.DELIVERING,
                error="its agent was restarted before the delivery was confirmed",
            )  # fmt: skip
            store.add_event(
                "requeued",
                task_id=msg.task_id,
                agent=name,
                detail=f"{msg.type} message was mid-delivery when {name} died; sent again",
            )


def _reopen(store: RunStore, config: Config, task: Task, state: TaskState) -> None:
    """A task failed because an agent or the server died goes back to ``state``."""
    store.update_task(task.id, state=state, clear=("error",))
    store.set_meta(f"{RESUME_META}{task.id}", "")
    exp = store.get_expectation(task.id)
    sender = exp.sender if exp else (PLANNER if state is TaskState.PLANNING else "EXECUTER")
    timeouts = config.timeouts
    total = timeouts.plan if sender == PLANNER else timeouts.exec
    # The clock restarts when the step's prompt is confirmed delivered.
    store.set_expectation(
        task.id,
        sender=sender,
        type=exp.type if exp else ("plan" if sender == PLANNER else "result"),
        deadline=time.time() + total,
    )
    store.add_event("resumed", task_id=task.id, detail=f"back to {state.value}")


def _resend_once(store: RunStore, task_id: str, name: str, *, restarted: bool, kept: _Kept) -> None:
    """Queue one copy of the prompt ``name`` lost for ``task_id``, if it needs one."""
    key = f"{RESUME_MSG}{task_id}:{name}"
    raw = store.get_meta(key)
    if not raw:
        return
    store.set_meta(key, "")
    msg = store.get_message(int(raw))
    if msg is None:
        return
    if restarted and msg.turn_nonce and msg.state in _REACHED:
        # Its turn ended when the agent died; the answer may have been written all the same.
        gone = Turn(name, msg.turn_nonce, task_id, msg.id, 0, time.time())
        if kept.answered(store, name, gone):
            return
    root = msg.dedupe_key.split(":resume")[0]
    copies = [
        m
        for m in store.list_messages(task_id=task_id, recipient=name)
        if m.dedupe_key == root or m.dedupe_key.startswith(f"{root}:resume")
    ]
    if any(m.state in _ON_ITS_WAY for m in copies):
        return  # that one is sent (or settled from the screen) instead
    if not restarted and any(m.state in _REACHED for m in copies):
        return  # the same process has it: a copy would be a duplicate
    store.add_message(
        task_id=task_id,
        sender=msg.sender,
        recipient=msg.recipient,
        type=msg.type,
        msg_id=msg.msg_id,
        body=msg.body,
        header=msg.header,
        nonce=msg.nonce,
        dedupe_key=f"{root}:resume{len(copies)}",
    )
    store.add_event(
        "requeued", task_id=task_id, agent=name, detail=f"{msg.type} message sent again"
    )
    kept.say(f"task {task_id}: the {msg.type} message to {name} is sent again")


__all__ = ["resume_work"]
