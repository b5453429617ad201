"""A delivery blocked after its submit: the receiver has the prompt, so it is never typed again."""

from __future__ import annotations

from politerm.store.journal import JournalState
from politerm.store.mail import Mail, MailState
from politerm.testing.retry import aretry_until
from tests.messaging.mailroom import WAIT, Mailroom, marked

# The approval question comes up the moment the prompt is submitted (think_time 0), so the
# delivery ends BLOCKED with the text submitted. A second prompt would crash the agent right
# after its submit: the retry that must never happen would fail, not just repeat.
ASKS_AT_ONCE = """
think_time = 0.3
[[rules]]
match = 'ASK FIRST'
think_time = 0
approval = "Bash(echo hi > asked.txt)"
write_file = { path = "asked.txt", content = "hi" }
reply = "wrote asked.txt"

[faults]
crash_at = "after_submit"
crash_share = 1.0
crash_after = 1
"""


async def test_a_delivery_blocked_after_its_submit_is_delivered_once(room: Mailroom) -> None:
    await room.start_agent("ORCH")
    await room.start_agent("W1", ASKS_AT_ONCE)
    m = room.messenger
    mail = m.send("ASK FIRST", to="W1", sender=room.me("ORCH"))
    room.start_postman()

    # Settled: the mail delivered or dead and its turn's row closed; or a lane that stopped
    # (what a rejected journal move does) and leaves it stuck.
    async def settled() -> Mail | None:
        if any("stopped" in line for line in room.postman_lines):
            return m.mailbox.require(mail.id)
        now = m.mailbox.require(mail.id)
        rows = m.store.journal_of("mail", (mail.id,))
        if now.state in (MailState.DELIVERED, MailState.DEAD) and not any(r.open for r in rows):
            return now
        return None

    done = await aretry_until(settled, WAIT, interval=0.05, what=f"{mail.id} settled")
    assert [ln for ln in room.postman_lines if "stopped" in ln] == []
    # ground truth: the receiver got the prompt once, and the approval was answered by policy
    assert len(marked(room.prompts("W1"), mail.id)) == 1, room.prompts("W1")
    assert [e["approved"] for e in room.events("W1") if e["event"] == "approval"] == [True]
    assert (room.root / "asked.txt").read_text() == "hi"
    assert done.state is MailState.DELIVERED, done.reason
    assert done.attempts == 1
    # one row, the turn followed to its end
    (row,) = m.store.journal_of("mail", (mail.id,))
    assert (row.id, row.state, row.outcome) == (done.turn_id, JournalState.ENDED, "idle")
    assert row.proof["outcome"] == "blocked"
