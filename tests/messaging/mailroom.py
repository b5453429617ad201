"""A session of fake agents that message each other: ORCH and workers, a postman, logs."""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import sys
import typing as t

from politerm.agents.profile import load_profile
from politerm.driver import AgentDriver, Host
from politerm.driver.launch import prepare_launch
from politerm.engine import service
from politerm.messaging.postman import Postman
from politerm.messaging.service import Identity, Messenger
from politerm.store import RunStore
from politerm.store.mail import Mail, MailState
from politerm.testing.fakeagent import prompts, read_log
from politerm.testing.retry import aretry_until
from politerm.tmux.server import TmuxServer
from tests.messaging.helpers import config_of, write_config

if t.TYPE_CHECKING:
    from politerm.config import Config

READY = 30.0
WAIT = 45.0

WORKER = """
think_time = 0.3
[[rules]]
match = 'SLOW'
think_time = 4.0
reply = "slow work done"
[[rules]]
match = '(?s)capability=READONLY.*WRITE (?P<file>\\S+)'
approval = "Bash(echo hi > {file})"
write_file = { path = "{file}", content = "hi" }
reply = "wrote {file}"
deny_reply = "not allowed to write {file}"
[[rules]]
match = '(?s)capability=WRITABLE.*WRITE (?P<file>\\S+)'
approval = "Bash(echo hi > {file})"
write_file = { path = "{file}", content = "hi" }
reply = "wrote {file}"
deny_reply = "not allowed to write {file}"
"""


def marked(prompts: list[bytes], mail_id: str) -> list[bytes]:
    """The prompts that carry message ``mail_id`` (its ``Message <id>`` line)."""
    return [p for p in prompts if f"Message {mail_id} ".encode() in p]


@dataclasses.dataclass
class Mailroom:
    root: pathlib.Path
    config_path: pathlib.Path
    config: Config
    server: TmuxServer
    messenger: Messenger
    drivers: dict[str, AgentDriver] = dataclasses.field(default_factory=dict)
    postman_task: asyncio.Task[None] | None = None
    postman_lines: list[str] = dataclasses.field(default_factory=list)

    def log(self, name: str) -> pathlib.Path:
        return self.root / f"{name}.jsonl"

    def prompts(self, name: str) -> list[bytes]:
        return prompts(self.log(name))

    def events(self, name: str) -> list[dict[str, t.Any]]:
        return read_log(self.log(name))

    def pane(self, name: str) -> str:
        return self.drivers[name].terminal_name

    def me(self, name: str) -> Identity:
        return Identity(name, self.pane(name))

    async def start_agent(
        self, name: str, scenario: str = WORKER, extra: t.Sequence[str] = ()
    ) -> AgentDriver:
        path = self.root / f"{name}.toml"
        path.write_text(scenario)
        fake = [sys.executable, "-m", "politerm.testing.fakeagent", "--mode", "claude"]
        argv = [*fake, "--scenario", str(path), "--log", str(self.log(name)), "--name", name]
        argv += extra
        argv, env = prepare_launch(
            self.config, name, "fake-claude", argv, {}, config_file=self.config_path
        )
        driver = await AgentDriver.start(
            name,
            load_profile("fake-claude"),
            argv=argv,
            env=env,
            host=Host(self.server, "mail"),
            cwd=self.root,
            ready_timeout=READY,
        )
        self.messenger.store.upsert_agent(
            name,
            session="mail",
            pane_id=driver.terminal_name,
            command=" ".join(argv),
            cwd=str(self.root),
            profile="fake-claude",
            resume_command=None,
        )
        self.drivers[name] = driver
        return driver

    def start_postman(self) -> None:
        postman = Postman(
            self.messenger,
            Host(TmuxServer(self.server.socket_name, config_dir=self.server.config_dir), "mail"),
            say=self.postman_lines.append,
            settle=0.5,
        )
        self.postman_task = asyncio.ensure_future(postman.run())

    async def stop_postman(self) -> None:
        if self.postman_task is not None:
            self.postman_task.cancel()
            await asyncio.gather(self.postman_task, return_exceptions=True)
            self.postman_task = None

    async def state(self, mail_id: str, *states: MailState, seconds: float = WAIT) -> Mail:
        async def check() -> Mail | None:
            if self.postman_task is not None and self.postman_task.done():
                self.postman_task.result()  # a crashed postman fails the test with its error
            mail = self.messenger.mailbox.require(mail_id)
            return mail if mail.state in states else None

        wanted = "/".join(s.value for s in states)
        return await aretry_until(check, seconds, interval=0.05, what=f"{mail_id} {wanted}")

    def stop_service(self) -> None:
        """Stop the project's service ``poli send`` started (it delivers in the background)."""
        service.stop(self.config)

    async def close(self) -> None:
        self.stop_service()
        await self.stop_postman()
        for driver in self.drivers.values():
            await driver.kill(grace=1.0)
        self.messenger.store.close()


async def open_mailroom(
    root: pathlib.Path, socket: str, routing: str = 'approval = "approve"\n'
) -> Mailroom:
    """``routing`` holds extra keys of the ``[routing]`` table."""
    cfg_path = write_config(root, socket=socket, extra=routing)
    config = config_of(cfg_path)
    server = TmuxServer(socket, config_dir=root / "tmuxconf")
    await server.ensure_session("mail")
    messenger = Messenger(config, RunStore.open(config.store.resolved_path()))
    return Mailroom(root, cfg_path, config, server, messenger)
