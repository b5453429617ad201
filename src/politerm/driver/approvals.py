"""Answering one agent's tool-permission questions by the run's policy or by the user.

An :class:`Approver` looks at each screen on which the agent asks to run a tool. The
:class:`~politerm.agents.approval.ApprovalPolicy` approves or denies it at once; with policy
``ask`` the question is recorded in the run store as pending under the agent's key
(``approval:<key>``), where ``poli approve KEY`` (any process) answers it, and the keys are
pressed on the next look after the answer. A follow-up question (the profile's
``approval.follow_up``) right after a question this approver answered gets that answer
(:func:`~politerm.agents.approval.follow`); one the approver did not see answered (a
person answered the question before it in the pane) goes to the policy like any other.
A question still on screen HOLD seconds after our keys, never seen gone in between, lost
them: its answer is pressed again, never asked of the user a second time. Every decision is
an event with its evidence.
"""

from __future__ import annotations

import dataclasses
import time
import typing as t

from politerm.agents.approval import (
    ApprovalPolicy,
    Decided,
    Decision,
    PendingApproval,
    Verdict,
    clear_pending,
    describe,
    follow,
    get_pending,
    set_pending,
)
from politerm.agents.question import read_request

if t.TYPE_CHECKING:
    from politerm.agents.profile import AgentProfile
    from politerm.agents.question import ApprovalRequest
    from politerm.store import RunStore
    from politerm.terminal import Snapshot, Terminal

# After our keys, the question may stay on screen until the agent redraws: do not press
# again on the same screen, nor for the same question, within this many seconds (nor on any
# screen within _MIN_GAP). A question still there after HOLD lost our keys: it is decided
# again.
HOLD = 5.0
_MIN_GAP = 0.3


@dataclasses.dataclass
class Approver:
    """Answers the questions of one agent.

    Parameters
    ----------
    key
        The name its pending questions are kept under; ``poli approve KEY`` answers them.
        Unique per store: the router uses the agent's name, a pipeline step
        ``<run id>.step-<n>``, an epic session ``epic.<session id>``.
    profile, term
        How to read the question and where to press the keys.
    policy
        Approve, deny, ask, patterns.
    store
        Where pending questions and events go; without one, policy ``ask`` questions wait
        for :meth:`answer` in this process.
    """

    key: str
    profile: AgentProfile
    term: Terminal
    policy: ApprovalPolicy
    store: RunStore | None = None
    asked: bool = False
    answered: int = 0
    last: ApprovalRequest | None = None
    """The question last answered, as read (from the history when its box was tall)."""
    _screen: tuple[str, ...] | None = None
    _at: float = 0.0
    _local: PendingApproval | None = None
    _box: tuple[tuple[str, ...], ApprovalRequest] | None = None
    # The question answered last with our keys, while a follow-up of it may come.
    _decided: Decided | None = None
    # The question our keys answered last (any answer), until a look shows it gone.
    _pressed: Decided | None = None

    @property
    def pending(self) -> PendingApproval | None:
        """The question waiting for the user, if any."""
        if self.store is not None:
            return get_pending(self.store, self.key)
        return self._local

    def answer(self, decision: Decision) -> None:
        """Answer the pending question from this process (stores answer via the store)."""
        if self._local is not None:
            self._local = dataclasses.replace(self._local, answer=decision)

    async def look(self, snap: Snapshot, *, task_id: str | None = None) -> str:
        """Handle the question on ``snap``; returns what happened.

        ``"answered"`` (keys pressed), ``"asked"`` (now waiting for the user), ``"waiting"``
        (still waiting), ``"held"`` (our keys were just pressed) or ``"none"``.
        """
        now = time.monotonic()
        if self._screen is not None and (
            now - self._at < _MIN_GAP or (snap.lines == self._screen and now - self._at < HOLD)
        ):
            return "held"
        request = self.profile.approval_request(snap)
        if request is None:  # a frame drawn in part: not a sign the question went
            return "none"
        if not request.complete and not request.follow_up:
            whole = await self._with_history(snap, request)
            if whole is None:
                return "none"
            request = whole
        if self._just_answered(request, now):
            # Our keys for this very question were pressed a moment ago; the agent has not
            # redrawn it away yet (a spinner or a moved selection changed the screen).
            return "held"
        what = describe(request)
        again = self._pressed if self._pressed and _same(self._pressed.request, request) else None
        self._pressed = None
        if again is not None:
            # Our keys were lost: the answer given stands (a person is not asked twice).
            verdict, by = Verdict(again.decision, f"pressed again after {HOLD:g}s"), again.by
        elif request.follow_up and self._decided is not None:
            verdict, by = follow(self._decided), "follow-up"
        else:
            verdict, by = self.policy.decide(request), "policy"
        decision, reason = verdict.decision, verdict.reason
        origin = by
        if decision is None:
            # Answered by a person: a follow-up of it is theirs to answer too.
            self._decided = None
            pending = self.pending
            if pending is None or (pending.question, pending.command) != (
                request.question,
                request.command,
            ):
                asked = PendingApproval(
                    self.key,
                    request.tool,
                    request.command,
                    request.evidence,
                    time.time(),
                    question=request.question,
                    doubt=request.doubt,
                    follow_up=request.follow_up,
                )
                self._set_pending(asked)
                self.asked = True
                self._event(
                    "approval-asked",
                    task_id,
                    f"{self.key} asks {asked.asks}: answer with `poli approve {self.key}` "
                    f"or `poli approve {self.key} --deny`",
                    {
                        "tool": request.tool,
                        "command": request.command,
                        "question": request.question,
                        "complete": request.complete,
                        "doubt": request.doubt,
                        "follow_up": request.follow_up,
                        "evidence": list(request.evidence),
                    },
                )
                return "asked"
            if pending.answer is None:
                self.asked = True
                return "waiting"
            decision, by, reason = pending.answer, "user", _answered_from(pending.by)
            origin = pending.by or "cli"
        spec = self.profile.approval
        keys = spec.approve if decision is Decision.APPROVE else spec.deny
        await self.term.send_keys(*keys)
        self._screen, self._at = snap.lines, now
        self.answered += 1
        self.last = request
        self._pressed = Decided(request, decision, by)
        if again is None:
            self._decided = None if request.follow_up else self._pressed
        if self.asked or by == "user":
            self._clear_pending()
            self.asked = False
        done = "approved" if decision is Decision.APPROVE else "denied"
        self._event(
            "approval",
            task_id,
            f"{done} {what} for {self.key} ({by}: {reason}; keys {'+'.join(keys)})",
            {
                "decision": decision.value,
                "by": by,
                "origin": origin,
                "reason": reason,
                "tool": request.tool,
                "command": request.command,
                "question": request.question,
                "complete": request.complete,
                "doubt": request.doubt,
                "follow_up": request.follow_up,
                "keys": list(keys),
                "evidence": list(request.evidence),
            },
        )
        return "answered"

    def _just_answered(self, request: ApprovalRequest, now: float) -> bool:
        """Whether ``request`` is the question our keys answered less than HOLD ago."""
        last = self.last
        return (
            last is not None
            and self._screen is not None
            and now - self._at < HOLD
            and _same(request, last)
        )

    def left(self, *, task_id: str | None = None) -> None:
        """A look found no question: the one answered last is gone (or was never kept)."""
        self._pressed = None
        if self.asked:
            self.gone(task_id=task_id)

    async def _with_history(
        self, snap: Snapshot, request: ApprovalRequest
    ) -> ApprovalRequest | None:
        """Read a question whose box starts above the screen again, with the history.

        Every terminal keeps history (a tmux pane, a PTY); the box is read once per
        screen, since it does not change while the question waits. None: the screen moved
        between the two reads, look again (a box read in part is never decided on a race).
        """
        if self._box is not None and self._box[0] == snap.lines:
            return self._box[1]
        found = request
        lines = await self.term.capture_history()
        offset = len(lines) - len(snap.lines)
        # The screen's first line may be the tail of a line wrapped out of history,
        # which the joined history capture holds as part of that line.
        if offset < 0 or tuple(lines[offset + 1 :]) != snap.lines[1:]:
            return None
        again = read_request(self.profile, lines, trailing_spaces=snap.trailing_spaces)
        if again is not None and again.question == request.question:
            found = again
        self._box = (snap.lines, found)
        return found

    def gone(self, *, task_id: str | None = None) -> None:
        """The question asked of the user left the screen without our keys."""
        self.asked = False
        self._decided = None
        pending = self.pending
        if pending is None:
            return
        self._clear_pending()
        self._event(
            "approval-gone",
            task_id,
            f"{self.key}'s question about {pending.what} was answered in its pane",
            None,
        )

    def _set_pending(self, pending: PendingApproval) -> None:
        if self.store is not None:
            set_pending(self.store, pending)
        else:
            self._local = pending

    def _clear_pending(self) -> None:
        if self.store is not None:
            clear_pending(self.store, self.key)
        self._local = None

    def _event(
        self, kind: str, task_id: str | None, detail: str, data: dict[str, t.Any] | None
    ) -> None:
        if self.store is not None:
            self.store.add_event(kind, task_id=task_id, agent=self.key, detail=detail, data=data)


def _same(a: ApprovalRequest, b: ApprovalRequest) -> bool:
    """Whether two readings are one question (asked, naming the same tool and command)."""
    return (a.question, a.command, a.tool) == (b.question, b.command, b.tool)


def _answered_from(origin: str) -> str:
    """How a person's answer reached the question, for the event log.

    Examples
    --------
    >>> _answered_from("cli"), _answered_from("web:pixel"), _answered_from("dash")
    ('answered with `poli approve`', 'answered from the web page (device pixel)', \
'answered from the dashboard')
    """
    if origin.startswith("web:"):
        return f"answered from the web page (device {origin.removeprefix('web:')})"
    return {
        "web": "answered from the web page",
        "dash": "answered from the dashboard",
        "": "answered with `poli approve`",
        "cli": "answered with `poli approve`",
    }.get(origin, f"answered from {origin}")
