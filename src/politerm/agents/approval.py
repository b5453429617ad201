"""Approval policy: who answers an agent's tool-permission question, and how.

Per run, ``[routing] approval`` says what happens when an agent asks to run a tool:
``"ask"`` (the question waits for ``poli approve AGENT [--deny]``), ``"approve"`` or
``"deny"``. ``approval_patterns`` are regexes over the command the agent wants to run; a
command matching one is approved whatever the mode, so ``approval = "deny"`` with
patterns approves by pattern and denies the rest. A follow-up question (the profile's
``approval.follow_up``, aider's "Add command output to the chat?") gets the verdict of the
command decided right before it (:func:`follow`), whoever decided that one. Every decision
is recorded as an event with the screen lines it was made on; nothing is answered silently.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import typing as t

from politerm.agents.profile import ApprovalRequest
from politerm.errors import RoutingError

if t.TYPE_CHECKING:
    from collections.abc import Sequence

    from politerm.store import RunStore


class ApprovalMode(str, enum.Enum):
    """What the policy does with a question no pattern approves."""

    ASK = "ask"
    APPROVE = "approve"
    DENY = "deny"


class Decision(str, enum.Enum):
    """An answer to a tool-permission question."""

    APPROVE = "approve"
    DENY = "deny"


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The policy's answer (None: ask the user) and why."""

    decision: Decision | None
    reason: str


@dataclasses.dataclass(frozen=True)
class ApprovalPolicy:
    """Decides tool-permission questions for one run.

    Examples
    --------
    >>> p = ApprovalPolicy.of("deny", [r"^echo "])
    >>> p.decide(ApprovalRequest("Bash", "echo hi > out.txt", ())).decision
    <Decision.APPROVE: 'approve'>
    >>> p.decide(ApprovalRequest("Bash", "rm -rf /", ())).reason
    "policy 'deny': no approval pattern matches 'rm -rf /'"
    >>> ApprovalPolicy.of("ask").decide(ApprovalRequest("", "ls", ())).decision is None
    True
    """

    mode: ApprovalMode = ApprovalMode.ASK
    patterns: tuple[re.Pattern[str], ...] = ()

    @classmethod
    def of(cls, mode: str, patterns: Sequence[str] = ()) -> ApprovalPolicy:
        """Build a policy from configuration values."""
        return cls(ApprovalMode(mode), tuple(re.compile(p) for p in patterns))

    def decide(self, request: ApprovalRequest) -> Verdict:
        """The verdict on one question.

        A pattern approves only a command read in full: a box whose top scrolled out of
        reach may hide the part a pattern would reject.
        """
        for rx in self.patterns:
            if request.command and request.complete and rx.search(request.command):
                return Verdict(Decision.APPROVE, f"pattern {rx.pattern!r} matches the command")
        if self.mode is ApprovalMode.APPROVE:
            return Verdict(Decision.APPROVE, "policy 'approve': approve all")
        if self.mode is ApprovalMode.DENY:
            if not self.patterns:
                why = "deny all"
            elif not request.command or not request.complete:
                why = f"no command read in full for {describe(request)!r}"
                why += f" ({request.doubt})" if request.doubt else ""
            else:
                why = f"no approval pattern matches {request.command!r}"
            return Verdict(Decision.DENY, f"policy 'deny': {why}")
        return Verdict(None, "policy 'ask': waiting for `poli approve`")


@dataclasses.dataclass(frozen=True)
class Decided:
    """A command question just answered: what it asked, the answer, and who gave it."""

    request: ApprovalRequest
    decision: Decision
    by: str


def follow(decided: Decided) -> Verdict:
    """The verdict on a follow-up question: the one on the command just decided.

    Examples
    --------
    >>> run = ApprovalRequest("", "echo hi", (), "Run shell command?")
    >>> follow(Decided(run, Decision.APPROVE, "user")).reason
    'follows echo hi, approved by user'
    """
    done = "approved" if decided.decision is Decision.APPROVE else "denied"
    return Verdict(decided.decision, f"follows {describe(decided.request)}, {done} by {decided.by}")


def describe(request: ApprovalRequest) -> str:
    r"""One line naming what the agent asks to run, e.g. ``Bash(echo hi)``.

    Examples
    --------
    >>> describe(ApprovalRequest("Bash", "echo hi", ()))
    'Bash(echo hi)'
    >>> describe(ApprovalRequest("", "", ("Allow execution of [Shell]?",)))
    'Allow execution of [Shell]?'
    >>> describe(ApprovalRequest("Bash", "cat > f <<'EOF'\na\nEOF", ()))
    "Bash(cat > f <<'EOF' … +2 lines)"
    """
    if request.command:
        first, *more = request.command.split("\n")
        command = f"{first} … +{len(more)} lines" if more else first
        return f"{request.tool}({command})" if request.tool else command
    if request.question:
        return request.question
    return request.evidence[0] if request.evidence else "a tool"


# --- questions waiting for the user (policy "ask") ----------------------------------------
#
# A pending question lives in the run store's meta table under ``approval:<AGENT>`` as JSON,
# so ``poli status`` shows it and ``poli approve`` (another process) answers it; the router
# sees the answer on its next store tick and presses the keys.

_PENDING = "approval:"


@dataclasses.dataclass(frozen=True)
class PendingApproval:
    """A question an agent asked that waits for ``poli approve``."""

    agent: str
    tool: str
    command: str
    evidence: tuple[str, ...]
    asked: float
    answer: Decision | None = None
    question: str = ""
    doubt: str = ""
    follow_up: bool = False
    by: str = ""
    """Where the answer came from: ``cli``, ``web``, ``web:DEVICE``, ``dash`` (see
    :func:`answer_pending`)."""

    @property
    def what(self) -> str:
        """What the agent asks to run (the question when no command was read)."""
        return describe(ApprovalRequest(self.tool, self.command, self.evidence, self.question))

    @property
    def asks(self) -> str:
        """What the agent asks, as it reads after its name.

        ``to run Bash(echo hi)`` when a command was read; else the question in quotes and
        why no command is named: a follow-up question asks none, and a command that could
        not be read is said so, with the screen lines it was looked for in.

        Examples
        --------
        >>> PendingApproval("X", "Bash", "echo hi", (), 0.0).asks
        'to run Bash(echo hi)'
        >>> PendingApproval("X", "", "", ("Add output?",), 0.0, question="Add output?",
        ...                 follow_up=True).asks
        '"Add output?" (a follow-up question; it names no command)'
        >>> PendingApproval("X", "", "", ("Proceed?", "│ EOF"), 0.0, question="Proceed?",
        ...                 doubt="its box scrolled away").asks
        '"Proceed?" (its command could not be read: its box scrolled away; screen: │ EOF)'
        """
        if self.command:
            return f"to run {self.what}"
        if self.follow_up:
            return f'"{self.question}" (a follow-up question; it names no command)'
        why = self.doubt or "no command was read"
        screen = " | ".join(self.evidence[1:])
        return f'"{self.question or self.what}" (its command could not be read: {why}' + (
            f"; screen: {screen})" if screen else ")"
        )

    def answered(self, decision: Decision) -> str:
        """One line saying what ``decision`` answered, for ``poli approve``.

        Examples
        --------
        >>> PendingApproval("X", "Bash", "echo hi", (), 0.0).answered(Decision.DENY)
        'denied: X may not run Bash(echo hi)'
        >>> PendingApproval("X", "", "", (), 0.0, question="Add output? [Yes]:",
        ...                 follow_up=True).answered(Decision.APPROVE)
        'approved: X asked "Add output? [Yes]:", answered yes'
        """
        done = "approved" if decision is Decision.APPROVE else "denied"
        if self.command:
            not_ = " not" if decision is Decision.DENY else ""
            return f"{done}: {self.agent} may{not_} run {self.what}"
        yes = "yes" if decision is Decision.APPROVE else "no"
        return f'{done}: {self.agent} asked "{self.question or self.what}", answered {yes}'


def _key(agent: str) -> str:
    return f"{_PENDING}{agent}"


def get_pending(store: RunStore, agent: str) -> PendingApproval | None:
    """The question ``agent`` waits on, if any."""
    return _pending(agent, store.get_meta(_key(agent)))


def _pending(agent: str, raw: str | None) -> PendingApproval | None:
    if not raw:
        return None
    data = json.loads(raw)
    answer = data.get("answer")
    return PendingApproval(
        agent=agent,
        tool=data.get("tool", ""),
        command=data.get("command", ""),
        evidence=tuple(data.get("evidence", ())),
        asked=float(data.get("asked", 0.0)),
        answer=Decision(answer) if answer else None,
        question=data.get("question", ""),
        doubt=data.get("doubt", ""),
        follow_up=bool(data.get("follow_up", False)),
        by=data.get("by", ""),
    )


def set_pending(store: RunStore, pending: PendingApproval) -> None:
    """Record (or update) the question ``pending.agent`` waits on."""
    data = {
        "tool": pending.tool,
        "command": pending.command,
        "evidence": list(pending.evidence),
        "asked": pending.asked,
        "answer": pending.answer.value if pending.answer else None,
        "question": pending.question,
        "doubt": pending.doubt,
        "follow_up": pending.follow_up,
        "by": pending.by,
    }
    store.set_meta(_key(pending.agent), json.dumps(data))


def clear_pending(store: RunStore, agent: str) -> None:
    """Forget ``agent``'s question (answered, or gone from its screen)."""
    store.set_meta(_key(agent), "")


def answer_pending(
    store: RunStore, agent: str, decision: Decision, *, by: str = "cli"
) -> PendingApproval:
    """Answer ``agent``'s pending question; the router presses the keys.

    ``by`` says where the answer came from (``cli``, ``web``, ``web:DEVICE``, ``dash``): the
    answer's event and the event of the keys pressed for it name it.

    Raises
    ------
    RoutingError
        ``agent`` has no question waiting.
    """
    pending = get_pending(store, agent)
    if pending is None:
        msg = f"agent {agent} has no approval question waiting (see `poli status`)"
        raise RoutingError(msg)
    answered = dataclasses.replace(pending, answer=decision, by=by)
    set_pending(store, answered)
    store.add_event(
        "approval-answer",
        agent=agent,
        detail=f"user ({by}): {decision.value} {pending.what}",
        data={
            "decision": decision.value,
            "command": pending.command,
            "question": pending.question,
            "by": "user",
            "origin": by,
        },
    )
    return answered


def pending_keys(store: RunStore) -> list[str]:
    """The keys of every question waiting for ``poli approve``, in any workflow."""
    return [key[len(_PENDING) :] for key in store.meta_keys(_PENDING)]


def find_pending_key(store: RunStore, name: str) -> str | None:
    """The pending question's key that ``name`` names (case-insensitive), if any."""
    for key in pending_keys(store):
        if key.upper() == name.upper():
            return key
    return None


def list_pending(store: RunStore, agents: Sequence[str]) -> list[PendingApproval]:
    """The pending questions of ``agents``."""
    # One read of every question, not one per agent (a view of 500 agents asks this often).
    waiting = store.meta_values(_PENDING)
    out = []
    for name in agents:
        pending = _pending(name, waiting.get(_key(name)))
        if pending is not None:
            out.append(pending)
    return out


def all_pending(store: RunStore) -> list[PendingApproval]:
    """Every question waiting for ``poli approve``, in any workflow, by key."""
    out = []
    for key, raw in sorted(store.meta_values(_PENDING).items()):
        pending = _pending(key[len(_PENDING) :], raw)
        if pending is not None:
            out.append(pending)
    return out
