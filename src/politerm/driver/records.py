"""An agent's own records of a prompt, kept on disk: its hook receipts and its transcript.

What an agent's screen showed dies with the agent (or with the tmux server); what its hooks
wrote to the session's channel and what the CLI wrote to its transcript stay. A recovery that
would send a prompt again (``poli up --resume``, a router settling a delivery a previous
router left DELIVERING) asks them first:

- :meth:`AgentRecords.submitted`: did the agent take this prompt? (a PROMPT receipt for it,
  or the prompt written as a user turn in the transcript);
- :meth:`AgentRecords.answer`: the blocks it wrote in answer (the transcript's blocks that
  carry the prompt's nonce: a nonce is new with each prompt, so only its answer carries it).

The transcript is located when the records are taken: a CLI restarted afterwards may begin
a new log, and the old one is the one that holds what the dead process wrote.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import typing as t

from politerm.driver.receipts import Source
from politerm.driver.transcriptcheck import holds_prompt, user_texts
from politerm.driver.transcripts import (
    hooked_home,
    locate_transcript,
    open_tail,
    own_conversation,
)
from politerm.errors import HookError
from politerm.hooks.channel import HookChannel, check_private
from politerm.hooks.events import HookKind, prompt_digest
from politerm.hooks.patterns import channel_redactor
from politerm.protocol import BlockParser
from politerm.protocol.transcript import TranscriptTail
from politerm.redact import TAG_RE, Redactor

if t.TYPE_CHECKING:
    import pathlib
    from collections.abc import Mapping

    from politerm.agents.profile import TranscriptSpec
    from politerm.driver.agent import AgentDriver
    from politerm.protocol.block import Block

log = logging.getLogger(__name__)


def plain_prompt(text: str) -> str:
    """The prompt as the agent saw it: vault markers reduced to what a receipt keeps.

    Examples
    --------
    >>> plain_prompt("use [REDACTED:github-token#0123456789abcdef] now")
    'use [REDACTED:github-token] now'
    """
    return TAG_RE.sub(lambda m: f"[REDACTED:{m['kind']}]", text)


@dataclasses.dataclass(frozen=True)
class AgentRecords:
    """Where one agent's own records are: its hook channel and its transcript.

    Attributes
    ----------
    name
        The agent.
    spec
        Its profile's transcript spec (None: it keeps none politerm reads).
    transcript
        The transcript file located when the records were taken, if any.
    cwd
        Its working directory (file-referenced block bodies, opencode's project).
    channel
        Its hook channel, if its hooks report to one.
    redactor
        What its hook redacts receipts with (the project's patterns kept beside the channel).
    session
        The CLI's own id of the conversation the agent was in ("" when none is known): the
        newest its hooks named, else the one the journal of turns recorded.
    """

    name: str
    spec: TranscriptSpec | None = None
    transcript: pathlib.Path | None = None
    cwd: pathlib.Path | None = None
    channel: pathlib.Path | None = None
    redactor: Redactor = dataclasses.field(default_factory=Redactor, compare=False, repr=False)
    session: str = ""

    @classmethod
    def find(
        cls,
        name: str,
        spec: TranscriptSpec | None,
        cwd: pathlib.Path | None,
        env: Mapping[str, str] | None = None,
        channel: pathlib.Path | None = None,
        session: str = "",
    ) -> AgentRecords:
        """Locate ``name``'s records now (before a restart may start a new transcript).

        ``session`` is the conversation id recorded before (the journal's); the agent's own
        conversation among those its hooks named wins over it.
        """
        redactor = Redactor()
        if channel is not None:
            try:
                check_private(channel)
                redactor = channel_redactor(channel)
                named = [e.session for e in HookChannel(channel, offset=0).read() if e.session]
                session = own_conversation(named, spec, cwd, env) or session
            except HookError as exc:
                log.warning("%s: hook receipts not read: %s", name, exc)
                channel = None
        path = None
        if spec is not None and cwd is not None:
            with contextlib.suppress(OSError):
                path = locate_transcript(spec, cwd, env, session)
        return cls(name, spec, path, cwd, channel, redactor, session)

    def submitted(self, text: str, nonce: str | None = None) -> tuple[Source, str] | None:
        """Which record shows the agent took ``text``, and how; None when none does.

        A receipt matches by the prompt's digest, or by its tail when the tail carries
        ``nonce`` (so an earlier prompt of the same template never matches).
        """
        plain = plain_prompt(text)
        if self.channel is not None:
            for e in HookChannel(self.channel, offset=0).read():
                if e.kind is not HookKind.PROMPT:
                    continue
                exact = bool(e.prompt_sha256) and e.prompt_sha256 == prompt_digest(plain)
                tail = nonce is not None and nonce in e.prompt_tail
                tail = tail and e.matches_prompt(plain, self.redactor)
                if exact or tail:
                    return Source.HOOK, (
                        f"{e.cli} hook {e.event} accepted the prompt ({e.prompt_len} chars)"
                    )
        if (
            self.spec is not None
            and self.transcript is not None
            and self.spec.format in ("claude", "codex", "gemini")
        ):
            texts: list[str] = []
            try:
                lines = TranscriptTail(self.transcript, self.spec.format).read_lines()
            except OSError as exc:
                log.warning("%s: transcript %s not read: %s", self.name, self.transcript, exc)
                lines = []
            for line in lines:
                texts.extend(user_texts(self.spec.format, line))
            if holds_prompt(texts, plain):
                return Source.TRANSCRIPT, (
                    f"{self.spec.format} transcript {self.transcript.name} holds the prompt"
                )
        return None

    def answer(self, nonce: str) -> list[Block]:
        """The blocks the transcript holds that carry ``nonce`` (in the order written)."""
        if self.spec is None or self.transcript is None or self.cwd is None:
            return []
        parser = BlockParser(detect_echo=False, message_dir=self.cwd)
        parser.expect_nonce(nonce)
        try:
            blocks = open_tail(self.spec, self.transcript, self.cwd).feed(parser)
        except OSError as exc:
            log.warning("%s: transcript %s not read: %s", self.name, self.transcript, exc)
            return []
        return [b for b in blocks if b.nonce == nonce]


async def records_of(driver: AgentDriver) -> AgentRecords:
    """The records of ``driver``'s agent (its hook channel found through its pane)."""
    receipts = await driver.hook_receipts()
    env = dict(driver.env)
    hooked_home(driver.profile.transcript, env, receipts)
    channel = receipts.channel.path if receipts is not None else None
    return AgentRecords.find(driver.name, driver.profile.transcript, driver.cwd, env, channel)


__all__ = ["AgentRecords", "plain_prompt", "records_of"]
