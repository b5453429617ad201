"""The service killed with SIGKILL, and restarted: every message delivered exactly once."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
import typing as t

from politerm.agents.state import AgentState
from politerm.engine import service
from politerm.engine.service import ServiceInfo, ServiceLock
from politerm.store.journal import Serves, Workflow
from politerm.store.mail import MailState
from politerm.testing.retry import aretry_until, retry_until
from tests.messaging.helpers import poli
from tests.messaging.mailroom import WAIT, Mailroom, marked, open_mailroom

if t.TYPE_CHECKING:
    import libtmux


def _serves(mail_id: str) -> Serves:
    return Serves(Workflow.MESSAGING, "mail", (mail_id,))


def _service(room: Mailroom) -> ServiceInfo:
    """The project's service, started, once its supervisor runs its child."""
    service.start(room.config, room.config_path)

    def running() -> ServiceInfo | None:
        info = ServiceLock.of(room.config).read()
        return info if info is not None and info.router is not None else None

    return retry_until(running, WAIT, what="the service's child")


def _restarted(room: Mailroom, first: ServiceInfo) -> bool:
    info = ServiceLock.of(room.config).read()
    return info is not None and info.router not in (None, first.router)


async def test_kill_9_of_the_service_between_send_and_delivery(room: Mailroom) -> None:
    """The service's process dies while a message waits for a busy receiver: delivered once."""
    await room.start_agent("ORCH")
    w1 = await room.start_agent("W1")
    m = room.messenger
    first = _service(room)
    assert first.router is not None
    slow = m.send("SLOW job", to="W1", sender=room.me("ORCH"))
    await room.state(slow.id, MailState.DELIVERED)
    pending = m.send("after the slow one", to="W1", sender=room.me("ORCH"))

    async def busy() -> bool:
        return (await w1.observe()).state is AgentState.BUSY

    await aretry_until(busy, WAIT, what="W1 busy")
    assert m.mailbox.require(pending.id).state is MailState.QUEUED
    os.kill(first.router, signal.SIGKILL)
    # its supervisor starts it again; the message is delivered once W1 is idle
    retry_until(lambda: _restarted(room, first), WAIT, what="a restarted service")
    done = await room.state(pending.id, MailState.DELIVERED)
    assert done.attempts == 1
    got = room.prompts("W1")
    assert len(marked(got, slow.id)) == 1
    assert len(marked(got, pending.id)) == 1
    assert len(got) == 2
    # one row per prompt in the journal of turns, each mail pointing to its own
    for mail in (slow, pending):
        rows = m.store.journal_of("mail", (mail.id,))
        assert [r.id for r in rows] == [m.mailbox.require(mail.id).turn_id]


async def test_kill_9_of_the_service_mid_delivery_delivers_once(room: Mailroom) -> None:
    """Killed with the request pasted and its Enter swallowed: the new one submits it."""
    await room.start_agent("ORCH")
    await room.start_agent("W1", scenario="swallow_first_enter_after_paste = true\n")
    m = room.messenger
    first = _service(room)
    assert first.router is not None
    mail = m.send("hello once", to="W1", sender=room.me("ORCH"))

    def swallowed() -> bool:
        return any(e["event"] == "swallowed_enter" for e in room.events("W1"))

    retry_until(swallowed, WAIT, interval=0.01, what="W1 to swallow the first Enter")
    os.kill(first.router, signal.SIGKILL)
    retry_until(lambda: _restarted(room, first), WAIT, what="a restarted service")
    done = await room.state(mail.id, MailState.DELIVERED, MailState.RESPONDED)
    # the new process found the text in the box (the Enter swallowed) and submitted it
    assert done.reason == "settled after a restart: submitted the text left in the box"
    assert len(marked(room.prompts("W1"), mail.id)) == 1, room.prompts("W1")
    assert done.attempts == 1


async def test_a_delivery_cut_short_is_settled_from_the_screen_not_sent_again(
    room: Mailroom,
) -> None:
    """The postman died after the paste (DELIVERING in the store): the next one settles it."""
    await room.start_agent("ORCH")
    w1 = await room.start_agent("W1")
    await room.start_agent("W2")
    m = room.messenger
    # W1: pasted and submitted, the postman died before writing DELIVERED
    a = m.send("first", to="W1", sender=room.me("ORCH"))
    a = m.change(a, MailState.DELIVERING, count_attempt=True) or a
    # the postman's driver wrote the row, typed, and died before the confirmation was kept
    m.store.journal_hand("W1", _serves(a.id), text=m.request_text(a), nonce=a.id)
    assert (await w1.deliver(m.request_text(a))).ok
    # W2: the postman died before pasting anything
    b = m.send("second", to="W2", sender=room.me("ORCH"))
    m.change(b, MailState.DELIVERING, count_attempt=True)
    room.start_postman()
    await room.state(a.id, MailState.DELIVERED)
    settled_b = await room.state(b.id, MailState.DELIVERED)
    # busy with it, or its nonce on screen, depending on when the postman looked
    reason = m.mailbox.require(a.id).reason or ""
    assert reason.startswith("settled after a restart: "), reason
    assert settled_b.attempts == 2
    assert len(marked(room.prompts("W1"), a.id)) == 1
    assert len(marked(room.prompts("W2"), b.id)) == 1
    # a: typed by the test, the postman's journal row says what it found; b: delivered
    (row_a,) = m.store.journal_of("mail", (a.id,))
    assert (row_a.state.value, row_a.outcome) == ("ended", "settled")
    assert reason == f"settled after a restart: {row_a.proof['rule']}"
    assert [r.id for r in m.store.journal_of("mail", (b.id,))] == [settled_b.turn_id]


async def test_poli_send_wait_starts_the_service_and_prints_the_response(room: Mailroom) -> None:
    await room.start_agent("W1")
    assert ServiceLock.of(room.config).read() is None
    env = {"POLI_CONFIG": str(room.config_path)}
    sender = asyncio.create_task(
        asyncio.to_thread(
            poli, room.root, "send", "--to", "W1", "--wait", "--timeout", "60", "ping", env=env
        )
    )

    async def delivered() -> str | None:
        rows = m_rows(room, "delivered")
        return rows[0]["id"] if rows else None

    msg_id = await aretry_until(delivered, WAIT, what="a delivered message")
    res = await asyncio.to_thread(
        poli, room.root, "reply", "--to", msg_id, "pong", env={**env, "POLI_AGENT": "W1"}
    )
    assert res.returncode == 0, res.stderr
    out = await sender
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().splitlines() == [msg_id, "pong"]
    # the project's service delivered it (and runs on)
    assert ServiceLock.of(room.config).read() is not None
    assert service.log_path(room.config).exists()


def m_rows(room: Mailroom, state: str) -> list[dict[str, t.Any]]:
    res = poli(
        room.root, "msg", "list", "--state", state, "--json", "--config", str(room.config_path)
    )
    rows: list[dict[str, t.Any]] = json.loads(res.stdout)
    return rows


async def test_poli_send_wait_fails_with_the_reason_of_a_dead_letter(room: Mailroom) -> None:
    w1 = await room.start_agent("W1")
    await w1.kill(grace=1.0)
    env = {"POLI_CONFIG": str(room.config_path)}
    res = await asyncio.to_thread(
        poli, room.root, "send", "--to", "W1", "--wait", "--timeout", "60", "hello", env=env
    )
    err = res.stderr.decode()
    assert res.returncode == 1
    assert "is dead: receiver W1" in err
    assert len(err.strip().splitlines()) == 1


async def test_ttl_expires_a_message_waiting_for_a_busy_receiver(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    assert server.socket_name is not None
    room = await open_mailroom(tmp_path, server.socket_name, routing="message_ttl = 3.0\n")
    try:
        await room.start_agent("ORCH")
        w1 = await room.start_agent("W1", scenario="[[rules]]\nmatch = 'SLOW'\nthink_time = 60.0\n")
        room.start_postman()
        m = room.messenger
        slow = m.send("SLOW", to="W1", sender=room.me("ORCH"), ttl=120)
        await room.state(slow.id, MailState.DELIVERED)

        async def busy() -> bool:
            return (await w1.observe()).state is AgentState.BUSY

        await aretry_until(busy, WAIT, what="W1 busy")
        late = m.send("too late", to="W1", sender=room.me("ORCH"))
        expired = await room.state(late.id, MailState.EXPIRED)
        assert expired.reason == "not delivered within its time to live"
        assert expired.attempts == 0
        assert marked(room.prompts("W1"), late.id) == []
    finally:
        await room.close()
        await room.server.close()


async def test_a_receiver_that_never_takes_the_text_makes_a_dead_letter_after_max_attempts(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    assert server.socket_name is not None
    room = await open_mailroom(tmp_path, server.socket_name, routing="max_attempts = 2\n")
    try:
        await room.start_agent("ORCH")
        await room.start_agent("W1", scenario="swallow_all_enters = true\n")
        room.start_postman()
        m = room.messenger
        mail = m.send("are you there", to="W1", sender=room.me("ORCH"))
        dead = await room.state(mail.id, MailState.DEAD, seconds=90)
        assert dead.attempts == 2
        assert dead.reason is not None
        assert dead.reason.startswith("not delivered after 2 attempts; last attempt 2: stranded")
        assert room.prompts("W1") == []  # never submitted, so never executed
    finally:
        await room.close()
        await room.server.close()


async def test_a_collapsed_paste_whose_turn_ended_is_settled_from_the_agents_transcript(
    room: Mailroom,
) -> None:
    """The postman died after a long request was submitted; the screen shows only a marker."""
    await room.start_agent("ORCH")
    w1 = await room.start_agent(
        "W1", scenario="think_time = 0.2\n", extra=["--transcript", ".fake-transcript.jsonl"]
    )
    m = room.messenger
    body = "".join(f"step {i}: check the thing\n" for i in range(40))
    a = m.send(body, to="W1", sender=room.me("ORCH"))
    a = m.change(a, MailState.DELIVERING, count_attempt=True) or a
    # the postman's driver wrote the row, typed, and died before the confirmation was kept
    m.store.journal_hand("W1", _serves(a.id), text=m.request_text(a), nonce=a.id)
    assert (await w1.deliver(m.request_text(a))).ok

    async def ready() -> bool:
        return (await w1.observe()).state is AgentState.READY

    await aretry_until(ready, WAIT, what="W1's turn over")
    history = "\n".join(await w1.history())
    assert "[Pasted text #1" in history
    assert f"Message {a.id}" not in history  # the screen cannot tell
    room.start_postman()
    done = await room.state(a.id, MailState.DELIVERED)
    assert done.reason == (
        "settled after a restart: the agent's own record: "
        "claude transcript .fake-transcript.jsonl holds the prompt"
    )
    assert done.attempts == 1
    assert len(marked(room.prompts("W1"), a.id)) == 1
