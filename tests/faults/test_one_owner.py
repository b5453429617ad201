"""One owner per agent: the router's prompts and the message lanes share the agent's driver.

A loop prompt and a message to one agent, each at its exact moment (a driver hook holds
the loop prompt pasted and not yet submitted while the message's lane comes for the same
agent), never go into each other; and a task routed in the foreground (``run_task``: the
demos, the canary) delivers the messages sent meanwhile, as the project's service does.
Ground truth is the fake agent's own log: the prompts it was really given, whole, each
once, and nothing typed was wiped out of its box.
"""

from __future__ import annotations

import asyncio
import typing as t

import pytest

from politerm.agents.approval import Decision, answer_pending, get_pending
from politerm.engine.loop import submit
from politerm.engine.session import Session
from politerm.messaging.routing import run_task, serve
from politerm.messaging.service import USER, Identity, Messenger
from politerm.store.mail import MailState
from politerm.store.models import TaskState
from politerm.testing.retry import aretry_until
from tests.loophelpers import (
    EXECUTER_HEAD,
    EXECUTER_OK,
    RESULT,
    rule,
    started,
    write_project,
)

if t.TYPE_CHECKING:
    import pathlib

    import libtmux

    from politerm.driver import AgentDriver
    from politerm.engine.session import Drivers
    from tests.loophelpers import Loop

pytestmark = pytest.mark.timeout(300)

TASK = 120.0  # bound on one task in these tests
ARRIVE = 60.0  # bound on the message's writer coming for the agent
NOTE = "a note for the planner"
FROM_USER = Identity(USER, None)  # sent from a plain terminal (poli send)


def _project(
    server: libtmux.Server, tmp_path: pathlib.Path, executer: str = EXECUTER_OK, extra: str = ""
) -> pathlib.Path:
    """The loop's project on the test's tmux server."""
    assert server.socket_name is not None
    write_project(tmp_path / "proj", server.socket_name, executer=executer, extra=extra)
    return tmp_path / "proj"


class Door(asyncio.Lock):
    """An agent's ``typing`` lock that tells when a second writer waits at it."""

    def __init__(self) -> None:
        super().__init__()
        self.knocked = asyncio.Event()

    async def acquire(self) -> t.Literal[True]:
        if self.locked():
            self.knocked.set()
        return await super().acquire()


class Held(Session):
    """The session as the router attaches it, with PLANNER's loop prompt held in its box.

    Right before the submit key of PLANNER's first prompt (the task's, pasted), a message
    to PLANNER is sent and the hook waits until its writer came: waiting at PLANNER's
    door, or (two owners) its own attempt over. Only then is the loop prompt submitted.
    """

    def __init__(self, messenger: Messenger) -> None:
        super().__init__(messenger.config, messenger.store)
        self.m = messenger
        self.door = Door()
        self.mail_id: str | None = None

    async def attach(self) -> Drivers:
        agents = await super().attach()
        planner = agents["PLANNER"]
        planner.typing = self.door
        planner.on("before-submit", lambda: self._message_now(planner))
        return agents

    async def _message_now(self, planner: AgentDriver) -> None:
        if self.mail_id is not None:
            return
        mail = self.m.send(NOTE, to="PLANNER", sender=FROM_USER)
        self.mail_id = mail.id

        async def came() -> bool:
            now = self.m.mailbox.require(mail.id)
            tried = now.state is not MailState.QUEUED or now.attempts > 0
            return self.door.knocked.is_set() or (tried and now.state is not MailState.DELIVERING)

        await aretry_until(came, ARRIVE, interval=0.05, what=f"{planner.name}'s message writer")


async def test_a_message_coming_while_a_loop_prompt_is_pasted_waits_for_its_submit(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    """The lane comes for PLANNER while the task's prompt sits pasted in its box."""
    async with started(_project(server, tmp_path)) as loop:
        messenger = Messenger(loop.config, loop.store)
        held = Held(messenger)
        submit(loop.store, loop.config, "make hello", task_id="T-mid")

        def over() -> bool:
            task = loop.store.get_task("T-mid")
            mail = messenger.mailbox.get(held.mail_id) if held.mail_id else None
            done = task is not None and task.state.is_terminal
            return done and mail is not None and mail.state is MailState.DELIVERED

        async with asyncio.timeout(TASK):
            await serve(messenger, until=over, session=held)
        assert held.mail_id is not None
        note = messenger.request_text(messenger.mailbox.require(held.mail_id))
        log = loop.log("PLANNER")
        # Nothing typed was wiped out of the box to make room for another writer.
        assert [e for e in log if e["event"] == "cleared"] == []
        # The task's prompt, pasted first, was submitted first, whole.
        first = next(str(e["text"]) for e in log if e["event"] == "prompt")
        assert first.startswith("TASK_ID=T-mid\n") and note not in first, first
        _planner_got(loop, note, "T-mid")
        assert held.door.knocked.is_set()  # the lane came while the prompt was in the box
        task = loop.store.get_task("T-mid")
        assert task is not None and task.state is TaskState.DONE, task


def _planner_got(loop: Loop, note: str, task_id: str) -> None:
    """PLANNER's log: the task's prompt, the message and the executer's result, each once."""
    typed = [e for e in loop.log("PLANNER") if e["event"] == "prompt"]
    texts = [str(e["text"]) for e in typed]
    assert len([x for x in texts if x.startswith(f"TASK_ID={task_id}\n")]) == 1, texts
    assert texts.count(note) == 1, texts
    assert len([x for x in texts if x.lstrip().startswith("EXECUTER replied:")]) == 1, texts
    assert len(texts) == 3, texts
    assert [e["queued"] for e in typed] == [False, False, False]


async def test_a_message_sent_while_run_task_routes_is_delivered_by_it(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    """A task routed in this process delivers a message to PLANNER sent meanwhile.

    EXECUTER asks a question that only the test answers, and only once the message was
    delivered: the task cannot end before, so a router without the lanes never delivers it.
    """
    asking = 'approval = "Bash(echo hi > hello.txt)"\n'
    executer = EXECUTER_HEAD + rule(r"\AYou received a PLANNER plan block:", RESULT, asking)
    root = _project(server, tmp_path, executer=executer, extra='[routing]\napproval = "ask"\n')
    async with started(root) as loop:
        messenger = Messenger(loop.config, loop.store)
        sent: list[str] = []

        async def user() -> None:
            async def asked() -> bool:
                return get_pending(loop.store, "EXECUTER") is not None

            await aretry_until(asked, TASK, what="EXECUTER's question")
            mail = messenger.send(NOTE, to="PLANNER", sender=FROM_USER)
            sent.append(mail.id)

            async def delivered() -> bool:
                return messenger.mailbox.require(mail.id).state is MailState.DELIVERED

            await aretry_until(delivered, ARRIVE, what=f"{mail.id} to be delivered meanwhile")
            answer_pending(loop.store, "EXECUTER", Decision.APPROVE)

        async with asyncio.TaskGroup() as group:
            group.create_task(user())
            routed = group.create_task(
                run_task(loop.config, loop.store, "make hello", task_id="T-run", timeout=TASK)
            )
        (mail_id,) = sent
        _planner_got(loop, messenger.request_text(messenger.mailbox.require(mail_id)), "T-run")
        assert routed.result().state is TaskState.DONE, routed.result()
