"""A loop turn as fleet work: what the router posts for an agent on another node, and the reply.

The router hands a turn to an agent hosted elsewhere by posting a :class:`TurnWork` (the
prompt as the store keeps it — redacted —, its nonce, the task and the blocks that answer
it) and applies the :class:`TurnReply` the hosting node sends back: whether the prompt got
in, how the turn ended, and the answering block, read there by the same ``run_turn`` a
local workflow uses. Both are plain JSON-ready mappings on the wire (:meth:`payload`).
"""

from __future__ import annotations

import dataclasses
import typing as t

from politerm.errors import RoutingError
from politerm.protocol.block import Block

#: The work kind of a loop turn (``poli node`` runs it with ``run_turn``).
TURN_KIND: t.Final = "turn"
#: The work kind of an answer to an agent's question (an approval given on any node).
ANSWER_KIND: t.Final = "answer"
#: A turn's outcome when its node's ``[budget]`` stopped it (the router fails the task).
OVER_BUDGET: t.Final = "over_budget"
#: Not an outcome: the fleet's budget breaker paused the work before it was typed; it goes
#: on by itself when the cap allows (the router shows it and waits).
PAUSED: t.Final = "paused"
#: The suffix of an agent's answer stream: answers are claimed while its turn runs.
ANSWER_SUFFIX: t.Final = ".answer"
#: The stream of answers to the questions of the router's tasks (``poli answer`` on a node
#: whose store does not hold the task): claimed by the router holding the fleet's router
#: role, never by a node (no agent's name holds a ``.``).
TASK_ANSWERS: t.Final = "router.tasks" + ANSWER_SUFFIX


def answer_stream(agent: str) -> str:
    """The stream of answers to ``agent``'s questions (apart from its turns' stream).

    Examples
    --------
    >>> answer_stream("EXECUTER"), answered_agent("EXECUTER.answer")
    ('EXECUTER.answer', 'EXECUTER')
    """
    return f"{agent}{ANSWER_SUFFIX}"


def answered_agent(stream: str) -> str | None:
    """The agent an answer stream is for; None for a turn stream."""
    return stream[: -len(ANSWER_SUFFIX)] if stream.endswith(ANSWER_SUFFIX) else None


@dataclasses.dataclass(frozen=True)
class TurnWork:
    """One loop turn for the node that hosts ``agent``.

    Parameters
    ----------
    work_id
        Unique per attempt of the router's message (message id and nonce): posting it
        again is the same work.
    agent
        Who types it.
    text
        The prompt, as the store keeps it (secrets redacted).
    nonce
        The turn's nonce: the answering block carries it.
    task_id
        The task (the answering block's id).
    timeout
        Seconds the turn may take from confirmed delivery (the step's timeout).
    answers
        The block types that answer it (empty: any but ``status``, as in the loop; a
        bridge task's: ``done``, ``failed``).
    """

    work_id: str
    agent: str
    text: str
    nonce: str
    task_id: str | None
    timeout: float
    answers: tuple[str, ...] = ()

    def payload(self) -> dict[str, t.Any]:
        """The work's payload on the queue.

        Examples
        --------
        >>> w = TurnWork("loop-3-ab12", "EXECUTER", "do it", "ab12", "T1", 60.0)
        >>> TurnWork.from_payload(w.work_id, w.agent, w.payload()) == w
        True
        >>> b = TurnWork("bridge-ab12", "EXECUTER", "do it", "ab12", "t1", 60.0, ("done", "failed"))
        >>> TurnWork.from_payload(b.work_id, b.agent, b.payload()).answers
        ('done', 'failed')
        """
        out: dict[str, t.Any] = {
            "text": self.text,
            "nonce": self.nonce,
            "task": self.task_id,
            "timeout": self.timeout,
        }
        if self.answers:
            out["answers"] = list(self.answers)
        return out

    @classmethod
    def from_payload(cls, work_id: str, agent: str, payload: t.Mapping[str, t.Any]) -> TurnWork:
        """Read a turn's work back (the node's side).

        Raises
        ------
        RoutingError
            A field is missing or of the wrong type.
        """
        try:
            task = payload.get("task")
            return cls(
                work_id,
                agent,
                str(payload["text"]),
                str(payload["nonce"]),
                None if task is None else str(task),
                float(payload["timeout"]),
                tuple(str(a) for a in payload.get("answers", ())),
            )
        except (KeyError, TypeError, ValueError) as exc:
            msg = f"work {work_id}: not a turn ({exc!r})"
            raise RoutingError(msg) from exc


@dataclasses.dataclass(frozen=True)
class TurnReply:
    """How a remote turn went, as its node reports it.

    Parameters
    ----------
    delivered
        The prompt got in (confirmed by the driver on that node).
    outcome
        The driver's delivery outcome when it did not get in (``stranded``, ``blocked``,
        ``agent_exited``), else the turn's (``answered``, ``timeout``, ``idle``, …).
    blocks
        The answering block(s), as read on the node.
    error
        What went wrong, in the driver's words.
    node, epoch
        Who ran it, under which lease.
    """

    delivered: bool
    outcome: str
    blocks: tuple[Block, ...] = ()
    error: str = ""
    node: str = ""
    epoch: int = 0

    @property
    def paused_by(self) -> str | None:
        """The budget breaker's reason when this "reply" is a pause (:data:`PAUSED`)."""
        return self.error if self.outcome == PAUSED else None

    def payload(self) -> dict[str, t.Any]:
        """The reply on the queue.

        Examples
        --------
        >>> r = TurnReply(True, "answered", (Block("PLANNER", "result", "T1", "ok"),), node="b")
        >>> TurnReply.from_payload(r.payload()).blocks[0].body
        'ok'
        """
        return {
            "delivered": self.delivered,
            "outcome": self.outcome,
            "blocks": [{"header": b.full_header(), "body": b.body} for b in self.blocks],
            "error": self.error,
            "node": self.node,
            "epoch": self.epoch,
        }

    @classmethod
    def from_payload(cls, payload: t.Mapping[str, t.Any]) -> TurnReply:
        """Read a reply back (the router's side); a malformed one is a failed turn."""
        try:
            blocks = tuple(
                Block.from_header(b["header"], str(b.get("body", "")))
                for b in payload.get("blocks", ())
            )
            return cls(
                bool(payload["delivered"]),
                str(payload["outcome"]),
                blocks,
                str(payload.get("error", "")),
                str(payload.get("node", "")),
                int(payload.get("epoch", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            return cls(False, "invalid", error=f"a malformed reply from its node: {exc!r}")
