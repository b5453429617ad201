"""A politerm agent as the manager's brain (e.g. a ``claude`` TUI in a pane).

The planning prompt is delivered with confirmation by the agent driver, and the reply is read
from a fenced report (``poli:<reply id>``) whose ``details`` hold the whole answer — an
instruction, ``NEED_USER_INPUT: …``, ``TASK_COMPLETE …`` or ``SYSTEM_ERROR: …`` — so the
engine parses it exactly like an API model's reply.
"""

from __future__ import annotations

import pathlib
import secrets
import typing as t

from politerm.driver import Expect, Host, TurnOutcome
from politerm.errors import AgentError, BrainError, BrainReplyError, BrainTimeout, TmuxError
from politerm.manager.pane import session_name, start_agent
from politerm.store.journal import Serves, Workflow

if t.TYPE_CHECKING:
    from politerm.config import Config
    from politerm.driver import AgentDriver
    from politerm.store import RunStore

BRAIN_AGENT: t.Final = "BRAIN"

REPLY_TEMPLATE: t.Final = """\
{system}

{prompt}

---
Give your answer as a report in exactly this shape, replacing <STEP_ID> with this reply's id,
STEP_ID={reply_id}

```poli:<STEP_ID>
status: success
commit_msg: reply
details: |
  Your whole answer: the instruction, or NEED_USER_INPUT: …, or TASK_COMPLETE …,
  or SYSTEM_ERROR: …
```"""


class AgentBrain:
    """The brain as an agent TUI in the private tmux server (started once, then reused).

    Parameters
    ----------
    config
        ``[manager.brain] agent`` (profile) and ``command``, tmux and timeouts.
    store
        Where the driver records events and pending approvals.
    host
        The terminal host (default: the configured private tmux server); the brain runs in
        its own session there.
    """

    def __init__(
        self, config: Config, store: RunStore | None = None, *, host: Host | None = None
    ) -> None:
        self.config = config
        self.settings = config.manager.brain
        self.store = store
        self._host = (host or Host.of(config)).on(session_name(config, "brain"))
        self._own_host = host is None
        self._driver: AgentDriver | None = None

    @property
    def label(self) -> str:
        """``agent:<profile>``."""
        return f"agent:{self.settings.agent}"

    async def _agent(self) -> AgentDriver:
        if self._driver is None or self._driver.dead:
            try:
                self._driver = await start_agent(
                    self.config,
                    self._host,
                    name=BRAIN_AGENT,
                    profile=self.settings.agent,
                    argv=self.settings.command,
                    setting="manager.brain.command",
                    cwd=pathlib.Path.cwd(),
                    store=self.store,
                )
            except (AgentError, TmuxError) as exc:
                msg = f"the brain agent ({self.settings.agent}) could not start: {exc}"
                raise BrainError(msg) from None
        return self._driver

    async def ask(self, prompt: str, *, system: str) -> str:
        """Deliver the prompt and read the reply from the agent's fenced report.

        Raises
        ------
        BrainTimeout
            No report within ``call_timeout`` (or the agent went idle without one).
        BrainReplyError
            The report was malformed.
        BrainError
            The agent exited, got stuck or could not be typed into.
        """
        driver = await self._agent()
        reply_id = f"brain-{secrets.token_hex(4)}"
        text = REPLY_TEMPLATE.format(system=system, prompt=prompt, reply_id=reply_id)
        result = await driver.run_turn(
            text,
            Expect.fenced_report(reply_id),
            timeout=self.settings.call_timeout,
            serves=Serves(Workflow.MANAGER, "brain-call", (reply_id,)),
        )
        if result.outcome is TurnOutcome.ANSWERED and result.report is not None:
            return result.report.details or result.report.commit_msg
        if result.outcome in (TurnOutcome.TIMEOUT, TurnOutcome.IDLE):
            msg = f"{self.label}: {result.error}"
            raise BrainTimeout(msg)
        if result.outcome is TurnOutcome.REPORT_ERROR:
            msg = f"{self.label}: {result.error}"
            raise BrainReplyError(msg)
        msg = f"{self.label}: {result.outcome.value}: {result.error}"
        raise BrainError(msg)

    async def kill(self) -> None:
        """End the brain agent's process tree (if it was started), then close as :meth:`aclose`."""
        if self._driver is not None:
            await self._driver.kill()
        await self.aclose()

    async def aclose(self) -> None:
        """Leave the agent running (the next manager attaches to it); close tmux clients."""
        self._driver = None
        if self._own_host:
            await self._host.close()
