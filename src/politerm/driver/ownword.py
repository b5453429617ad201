"""The agent's own word about the prompt under way: its hook receipts and its transcript.

The screen is one witness of a delivery and of a turn's end; the agent itself is the other.
:class:`OwnWord` keeps what the driver needs to hear it: the hook receipts (given at start,
or found on attach through the pane's ``@poli_hooks`` option), the receipt position where
the last prompt began, and that prompt's transcript check. :mod:`politerm.driver.receiptwatch`
and :mod:`politerm.driver.turn` weigh its word against the screen.
"""

from __future__ import annotations

import logging
import typing as t

from politerm.driver.receipts import PANE_OPTION, Receipts, parse_option
from politerm.driver.receiptwatch import AgentChecks, PromptCheck
from politerm.driver.transcriptcheck import TranscriptCheck
from politerm.driver.transcripts import hooked_home
from politerm.errors import ControlModeError, HookError, TmuxError
from politerm.hooks.events import HookKind

if t.TYPE_CHECKING:
    import pathlib
    from collections.abc import Mapping

    from politerm.agents.profile import AgentProfile
    from politerm.terminal import Terminal

log = logging.getLogger(__name__)


class OwnWord:
    """What one agent says itself about its prompts (a part of the agent driver).

    Parameters
    ----------
    name
        The agent's name (for the log).
    profile
        Its profile: where its transcript is and what it records.
    term
        Its terminal, whose ``@poli_hooks`` option names receipts found on attach.
    cwd, env
        Its working directory and environment (where its transcript is).
    receipts
        Its hook receipts, when the caller has them (else looked up once, on first use).
    """

    def __init__(
        self,
        name: str,
        profile: AgentProfile,
        term: Terminal,
        cwd: pathlib.Path | None,
        env: Mapping[str, str],
        receipts: Receipts | None,
    ) -> None:
        self.name = name
        self.profile = profile
        self._term = term
        self.cwd = cwd
        self.env = env
        self.receipts = receipts
        self._looked = receipts is not None
        #: Receipts after this position belong to the last prompt delivered.
        self.mark = 0
        #: Its transcript was waited for once and never found: do not wait again.
        self.transcript_missing = False
        #: The last prompt's transcript check (its turn's end, where the records say it).
        self.transcript: TranscriptCheck | None = None

    async def find_receipts(self) -> Receipts | None:
        """The hook receipts: given, or found (once) through the pane's ``@poli_hooks``."""
        if self._looked:
            return self.receipts
        self._looked = True
        try:
            found = parse_option(await self._term.get_option(PANE_OPTION))
        except (TmuxError, ControlModeError):
            found = None
        if found is not None:
            try:
                self.receipts = Receipts.open(*found)
            except HookError as exc:
                log.warning("%s: hook receipts ignored: %s", self.name, exc)
        return self.receipts

    async def prompt(self, text: str | bytes) -> AgentChecks | None:
        """A prompt is about to be typed: what will confirm it (hook receipt, transcript)."""
        rc = await self.find_receipts()
        hook = None
        if rc is not None:
            self.mark = rc.mark()
            if rc.reports(HookKind.PROMPT):
                hook = PromptCheck(rc, self.mark, text)
        spec, transcript, env = self.profile.transcript, None, dict(self.env)
        hooked_home(spec, env, rc)  # Gemini's chat log is in the home its hooks gave it
        if spec is not None and spec.format != "aider" and self.cwd is not None:
            plain = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
            transcript = TranscriptCheck(spec, self.cwd, env, plain)
        self.transcript = transcript
        return AgentChecks(hook, transcript) if hook or transcript else None

    def turn_end(self) -> tuple[str | None, str | None]:
        """Who can say the turn ended (``hook``, ``transcript`` or None), and what it says now."""
        rc = self.receipts
        if rc is not None and rc.reports(HookKind.STOP) and not rc.silent:
            stop = rc.stop_since(self.mark)
            return "hook", None if stop is None else stop.describe()
        check = self.transcript
        if check is not None and check.spec.format in check.TURN_FORMATS:
            return "transcript", check.turn_over()
        return None, None
