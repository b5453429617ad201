"""``poli demo messaging``: one agent asks another, the answer comes back to its pane."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import typing as t

from politerm.config import load_config
from politerm.demos._scratch import Outcome, Say, Scratch
from politerm.engine.session import Session
from politerm.messaging.postman import Postman
from politerm.messaging.service import Identity, Messenger
from politerm.store import RunStore
from politerm.store.mail import Capability, MailState
from politerm.testing.retry import aretry_until

REQUEST = "Count the flags in notes.txt."
ANSWER = "notes.txt lists 2 flags: --quiet and --verbose."
WAIT = 60.0
_ARRIVED = (MailState.DELIVERED, MailState.RESPONDED)


async def run(*, say: Say, keep: bool = False) -> Outcome:
    """PLANNER sends EXECUTER a READONLY request; the postman delivers it; EXECUTER answers.

    Both are the fake agent (echo scenario). The fake agent cannot run commands, so the
    demo answers for EXECUTER exactly as ``poli reply`` in its pane would.
    """
    scratch = Scratch.make("messaging")
    (scratch.root / "notes.txt").write_text("--quiet\n--verbose\n")
    fake = [sys.executable, "-m", "politerm.testing.fakeagent", "--mode", "claude"]
    fake += ["--scenario", "echo"]
    agent = f'command = {json.dumps(fake)}\nprofile = "fake-claude"\n'
    scratch.write_config(f"[agents.PLANNER]\n{agent}\n[agents.EXECUTER]\n{agent}")
    try:
        config = load_config(scratch.root, env={})
        with RunStore.open(config.store.resolved_path()) as store:
            session = Session(config, store)
            postman: asyncio.Task[None] | None = None
            try:
                await session.up(on_event=say)
                messenger = Messenger(config, store)
                panes = {n: store.get_agent(n) for n in ("PLANNER", "EXECUTER")}
                me = {n: Identity(n, a.pane_id if a else None) for n, a in panes.items()}
                postman = asyncio.ensure_future(Postman(messenger, say=say, settle=0.5).run())
                mail = messenger.send(
                    REQUEST, to="EXECUTER", capability=Capability.READONLY, sender=me["PLANNER"]
                )
                say(f"PLANNER → EXECUTER: {mail.id} queued (poli send --to EXECUTER)")

                def delivered(mail_id: str) -> t.Callable[[], t.Awaitable[bool]]:
                    async def check() -> bool:
                        if postman is not None and postman.done():
                            postman.result()  # a crashed postman ends the demo with its error
                        found = messenger.mailbox.get(mail_id)
                        return found is not None and found.state in _ARRIVED

                    return check

                await aretry_until(delivered(mail.id), WAIT, what=f"{mail.id} delivered")
                say(f"{mail.id}: delivered into EXECUTER's pane, submit confirmed")
                say(f"EXECUTER: poli reply --to {mail.id} {ANSWER!r}")
                messenger.reply(ANSWER, to=mail.id, responder=me["EXECUTER"])
                final = await messenger.wait_final(mail.id, WAIT)
                note = f"{mail.id}-r"  # the notification carrying the response back
                await aretry_until(delivered(note), WAIT, what=f"{note} delivered to PLANNER")
                say(f"{note}: the response line was pasted into PLANNER's pane")
            finally:
                if postman is not None:
                    postman.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await postman
                if not keep:
                    await session.down()
                await session.host.close()
        summary = [
            f"message {final.id}: {final.state.value} (READONLY, PLANNER → EXECUTER)",
            f"request:  {REQUEST}",
            f"response: {ANSWER}",
            f"files: request and response under {messenger.dir.path}",
        ]
        ok = final.state is MailState.RESPONDED
        return Outcome(ok, summary, scratch.keep_lines() if keep else [])
    finally:
        if not keep:
            await scratch.remove()
