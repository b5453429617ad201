"""A response answers only the request it names, once, and only if written after its delivery.

The states a request goes through on the sender's side, and the fault tested at each moment:

- QUEUED: an old response line on the sender's screen (the previous request's notification)
  must not answer it once it is delivered (by the same postman or one started later);
- DELIVERING / DELIVERED: a hand-written file from before the delivery is refused; a file
  naming another request answers that one only (out-of-order replies);
- RESPONDED: the same line seen again (on screen, by a new postman) changes nothing and is
  not taken by the next request.
"""

from __future__ import annotations

import os
import time
import typing as t

import pytest

from politerm.agents.state import AgentState
from politerm.messaging.answers import Take, judge
from politerm.messaging.protocol import ResponseLine, response_line
from politerm.store.mail import Capability, Mail, MailKind, MailState
from politerm.testing.retry import aretry_until
from tests.messaging.mailroom import WAIT, Mailroom

if t.TYPE_CHECKING:
    from politerm.messaging.service import Messenger


def _mail(mail_id: str, state: MailState, began: float | None, pane: str = "%2") -> Mail:
    return Mail(
        mail_id, MailKind.REQUEST, "s", "ORCH", "%1", "W", pane, Capability.WRITABLE,
        None, "b", 0, "", None, state, None, 1, 3, 0.0, began or 5.0, 999.0, began, began,
        None,
    )  # fmt: skip


class Case(t.NamedTuple):
    test_id: str
    file_name: str
    written: float
    waiting: list[Mail]
    named: Mail | None
    used_by: Mail | None
    take: Take
    answers: str | None


A_DONE = _mail("m-a", MailState.RESPONDED, 10.0)
B = _mail("m-b", MailState.DELIVERED, 20.0)
C = _mail("m-c", MailState.DELIVERED, 30.0)
D_CLAIMED = _mail("m-d", MailState.DELIVERING, None)  # claimed at 5.0, not yet confirmed
Q = _mail("m-q", MailState.QUEUED, None)
OTHER = _mail("m-o", MailState.DELIVERED, 20.0, pane="%9")

CASES = [
    Case("old-notification-next", "m-a.response", 11, [B], A_DONE, A_DONE, Take.KNOWN, None),
    Case("names-a-queued-request", "m-q.md", 40, [B], Q, None, Take.REFUSED, None),
    Case("names-an-answered-request", "m-a.md", 40, [B], A_DONE, None, Take.REFUSED, None),
    Case("out-of-order-names-the-newer", "m-c.md", 40, [B, C], C, None, Take.ANSWER, "m-c"),
    Case("named-but-written-before", "m-c.md", 25, [B, C], C, None, Take.REFUSED, None),
    Case("named-while-delivering", "m-d.md", 6, [D_CLAIMED], D_CLAIMED, None, Take.ANSWER, "m-d"),
    Case("free-name-oldest-first", "answer.md", 40, [B, C], None, None, Take.ANSWER, "m-b"),
    Case("free-name-written-between", "answer.md", 25, [C, B], None, None, Take.ANSWER, "m-b"),
    Case("free-name-from-before-all", "answer.md", 15, [B, C], None, None, Take.REFUSED, None),
    Case("free-name-from-another-pane", "answer.md", 40, [OTHER], None, None, Take.REFUSED, None),
    Case("free-name-used-already", "answer.md", 40, [B], None, A_DONE, Take.KNOWN, None),
    Case("nothing-waits", "answer.md", 40, [], None, None, Take.REFUSED, None),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.test_id for c in CASES])
def test_which_request_a_response_line_answers(case: Case) -> None:
    verdict = judge(
        ResponseLine("%2", f"/m/{case.file_name}"),
        file_name=case.file_name,
        written=case.written,
        waiting=case.waiting,
        named=case.named,
        used_by=case.used_by,
    )
    assert verdict.take is case.take
    if case.answers is not None:
        assert verdict.mail is not None
        assert verdict.mail.id == case.answers
    if case.take is Take.REFUSED:
        assert verdict.why


# --- the real thing: ORCH and W1 on the fake agent, a real postman ----------------------


async def _rejections(m: Messenger) -> list[str]:
    events = m.store.list_events(limit=500)
    return [e.detail or "" for e in events if e.kind == "mail.rejected"]


async def _show(room: Mailroom, line: str) -> None:
    """Put ``line`` on ORCH's screen as a submitted prompt (as a pasted notification is)."""
    orch = room.drivers["ORCH"]

    async def orch_idle() -> bool:
        return (await orch.observe()).state is AgentState.READY

    await aretry_until(orch_idle, WAIT, what="ORCH idle")
    result = await orch.deliver(line)
    assert result.ok, result.evidence


async def _barrier(room: Mailroom, tag: str) -> None:
    """Show a line the postman must refuse, and wait for the refusal.

    The postman reads the sender's screen top to bottom in one pass: once this line (the
    lowest) is refused, every line shown before it was judged too.
    """
    outside = room.root / f"barrier-{tag}.md"
    outside.write_text(tag)
    await _show(room, response_line(room.pane("W1"), str(outside)))

    async def seen() -> bool:
        return any(f"barrier-{tag}.md" in why for why in await _rejections(room.messenger))

    await aretry_until(seen, WAIT, what=f"the postman refused barrier {tag}")


async def _reply(room: Mailroom, mail: Mail, text: str) -> Mail:
    room.messenger.reply(text, to=mail.id, responder=room.me("W1"))
    done = await room.state(mail.id, MailState.RESPONDED)
    await room.state(f"{mail.id}-r", MailState.DELIVERED)  # the line is on ORCH's screen
    return done


async def test_each_request_gets_its_own_answer_after_the_previous_notification(
    room: Mailroom,
) -> None:
    await room.start_agent("ORCH")
    await room.start_agent("W1")
    room.start_postman()
    m = room.messenger
    orch = room.me("ORCH")
    texts = {}
    for n in range(3):
        mail = m.send(f"question {n}", to="W1", sender=orch)
        reached = await room.state(mail.id, MailState.DELIVERED, MailState.RESPONDED)
        assert reached.state is MailState.DELIVERED, f"{n}: answered with {reached.response_path}"
        if n == 1:
            # a postman started later (as `poli send --wait` starts one) reads the screen anew
            await room.stop_postman()
            room.start_postman()
        # the previous request's `[RESPONSE from=%2] <file>` line is on ORCH's screen now
        await _barrier(room, f"q{n}")
        assert m.mailbox.require(mail.id).state is MailState.DELIVERED
        done = await _reply(room, mail, f"answer {n}")
        texts[mail.id] = m.response_text(done)
        assert texts[mail.id] == f"answer {n}"
    assert sorted(texts.values()) == ["answer 0", "answer 1", "answer 2"]


async def test_hand_written_answers_out_of_order_and_from_before(room: Mailroom) -> None:
    await room.start_agent("ORCH")
    await room.start_agent("W1")
    m = room.messenger
    orch = room.me("ORCH")
    old = m.dir.write("answer.md", b"written before anything was asked")
    # well before: a quick postman begins a delivery within the mtime slack of a file
    # written just now, and then that file may be its answer
    an_hour_ago = time.time() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    first = m.send("question A", to="W1", sender=orch)
    second = m.send("question B", to="W1", sender=orch)
    room.start_postman()
    await room.state(first.id, MailState.DELIVERED)
    await room.state(second.id, MailState.DELIVERED)

    # a file from before the requests were delivered answers neither
    await _show(room, response_line("%99", str(old)))
    await _show(room, response_line(room.pane("W1"), str(old)))
    # a path is not a secret: the refusal names /etc/passwd as it is
    await _show(room, response_line(room.pane("W1"), "/etc/passwd"))
    await _barrier(room, "old")
    assert any(
        why.endswith(
            f"/etc/passwd: not inside the session's message directory {m.dir.path.resolve()}"
        )
        for why in await _rejections(m)
    ), await _rejections(m)
    assert any(
        "answer.md was written before" in why and first.id in why for why in await _rejections(m)
    ), await _rejections(m)
    assert m.mailbox.require(first.id).state is MailState.DELIVERED

    # out of order: B's answer first, its file named after B
    b_file = m.dir.write(f"{second.id}.md", b"B by hand")
    line = response_line(room.pane("W1"), str(b_file))
    await _show(room, line)
    done_b = await room.state(second.id, MailState.RESPONDED)
    assert m.response_text(done_b) == "B by hand"
    await _barrier(room, "after-b")
    assert m.mailbox.require(first.id).state is MailState.DELIVERED

    # then A's, named anywhere in the file's name
    a_file = m.dir.write(f"answer-{first.id}.txt", b"A by hand")
    line = response_line(room.pane("W1"), str(a_file))
    await _show(room, line)
    done_a = await room.state(first.id, MailState.RESPONDED)
    assert m.response_text(done_a) == "A by hand"

    # a third request: the lines still on screen (A's and B's files) answer nothing new,
    # even for a postman that never saw them; a free-named file written now answers it
    third = m.send("question C", to="W1", sender=orch)
    await room.stop_postman()
    room.start_postman()
    await room.state(third.id, MailState.DELIVERED)
    for used in (b_file, a_file):
        line = response_line(room.pane("W1"), str(used))
        await _show(room, line)
    await _barrier(room, "after-c")
    assert m.mailbox.require(third.id).state is MailState.DELIVERED
    fresh = m.dir.write("answer-c.md", b"C by hand")
    line = response_line(room.pane("W1"), str(fresh))
    await _show(room, line)
    done_c = await room.state(third.id, MailState.RESPONDED)
    assert m.response_text(done_c) == "C by hand"


async def test_replies_out_of_order_each_answer_their_own_request(room: Mailroom) -> None:
    await room.start_agent("ORCH")
    await room.start_agent("W1")
    m = room.messenger
    orch = room.me("ORCH")
    first = m.send("question A", to="W1", sender=orch)
    second = m.send("question B", to="W1", sender=orch)
    room.start_postman()
    await room.state(first.id, MailState.DELIVERED)
    await room.state(second.id, MailState.DELIVERED)
    # B answered first: its notification line is on ORCH's screen while A still waits
    done_b = await _reply(room, second, "answer B")
    await _barrier(room, "after-b")
    assert m.mailbox.require(first.id).state is MailState.DELIVERED
    done_a = await _reply(room, first, "answer A")
    assert (m.response_text(done_a), m.response_text(done_b)) == ("answer A", "answer B")
    # a third request, with both lines on screen and a postman that never saw them
    third = m.send("question C", to="W1", sender=orch)
    await room.stop_postman()
    room.start_postman()
    await room.state(third.id, MailState.DELIVERED)
    await _barrier(room, "after-c")
    assert m.mailbox.require(third.id).state is MailState.DELIVERED
    done_c = await _reply(room, third, "answer C")
    assert m.response_text(done_c) == "answer C"
