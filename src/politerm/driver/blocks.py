"""The block stream of one agent: tagged blocks of the current turn, from screen and transcript.

The turn's window starts at the pane history row where the agent's answer begins
(:func:`turn_start`). It is read back with tmux's own row numbers (``capture-pane -S``), so
rows tmux wrapped and then joined (``-J``) cannot shift it: the window is counted in the
same units as the capture. The agent's own transcript, when its profile names one, is
parsed too and cross-checked with the screen (``cross-check``/``drift`` events); a block
the screen lost is taken from the transcript.
"""

from __future__ import annotations

import dataclasses
import typing as t

from politerm.driver.transcripts import Tail, locate_transcript, open_tail
from politerm.protocol import BlockParser, cross_check
from politerm.protocol.contract import AfterPrompt, nonceless
from politerm.protocol.echo import last_prompt_line

if t.TYPE_CHECKING:
    import pathlib
    from collections.abc import Sequence

    from politerm.agents.profile import AgentProfile
    from politerm.protocol.block import Block
    from politerm.store import RunStore
    from politerm.terminal import Snapshot, Terminal

BlockKey = tuple[str | None, str, str]


def turn_start(snap: Snapshot) -> int:
    """The pane history row where an answer to a prompt sent now begins (-1: whole screen).

    Rows count as tmux numbers them (history rows, then screen rows), the unit
    ``capture-pane -S`` takes; an alternate screen has no history, so its turn is the
    whole screen.

    Examples
    --------
    >>> from politerm.terminal import Snapshot
    >>> turn_start(Snapshot(("a", "b"), cursor_y=1, history_size=40))
    41
    >>> turn_start(Snapshot(("a",), alternate_screen=True))
    -1
    """
    return -1 if snap.alternate_screen else snap.history_size + snap.cursor_y


@dataclasses.dataclass(frozen=True)
class Rejected:
    """A candidate block of this turn that was not accepted, and why.

    ``old``: a block of another turn (its nonce is not this turn's), ignored as it should be.
    """

    line: int
    reason: str
    old: bool = False


NONE_REJECTED: t.Final = "no block was rejected"


def rejected_fact(reasons: Sequence[str], ignored: int) -> str:
    """The fact a timeout states about a turn's blocks: which were rejected, or that none was.

    ``reasons`` are the rejected candidates' reasons (the last three are named);
    ``ignored`` counts old blocks of earlier turns, which are not a mistake.

    Examples
    --------
    >>> rejected_fact([], 0)
    'no block was rejected'
    >>> rejected_fact([], 2)
    'no block was rejected (2 old blocks of earlier turns ignored, as they should be)'
    >>> rejected_fact(["a", "b", "c", "d"], 1)
    'rejected blocks: b; c; d (+1 more); 1 old block of an earlier turn ignored'
    """
    if ignored == 1:
        old = "1 old block of an earlier turn ignored"
    else:
        old = f"{ignored} old blocks of earlier turns ignored"
    if not reasons:
        return f"no block was rejected ({old}, as they should be)" if ignored else NONE_REJECTED
    text = f"rejected blocks: {_last_three(reasons)}"
    return f"{text}; {old}" if ignored else text


def _last_three(reasons: Sequence[str]) -> str:
    more = len(reasons) - 3
    return "; ".join(reasons[-3:]) + (f" (+{more} more)" if more > 0 else "")


@dataclasses.dataclass(frozen=True)
class Window:
    """A turn's window, for :meth:`BlockReader.read_window`."""

    start_line: int
    nonce: str
    prompt: str | None
    """The turn's prompt, whose echo a block without a nonce must follow."""
    task_id: str | None
    nonce_required: bool = True
    after_echo: bool = False
    """Read only what follows the prompt's echo (blocks carry no nonce: position decides)."""


@dataclasses.dataclass
class BlockReader:
    """Reads one agent's blocks for the turn in progress.

    Parameters
    ----------
    name
        The agent (for events).
    profile
        Its transcript spec.
    term
        Its terminal.
    cwd, env
        Where file-referenced bodies and its transcript live.
    store
        Where rejections and cross-checks are recorded as events, if given.
    """

    name: str
    profile: AgentProfile
    term: Terminal
    cwd: pathlib.Path | None = None
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    store: RunStore | None = None
    screen_blocks: dict[BlockKey, Block] = dataclasses.field(default_factory=dict)
    transcript_blocks: dict[BlockKey, Block] = dataclasses.field(default_factory=dict)
    rejected: list[Rejected] = dataclasses.field(default_factory=list)
    ignored: int = 0
    """Old blocks (of earlier turns) seen and ignored this turn."""
    _checked: set[BlockKey] = dataclasses.field(default_factory=set)
    _left_open: set[tuple[int, str]] = dataclasses.field(default_factory=set)
    _tail: Tail | None = None

    def __post_init__(self) -> None:
        # A screen block counts once two reads in a row show it the same: a capture taken
        # while a full-screen CLI repaints can show it closed but half drawn. A profile
        # whose agent draws each screen in one write (block_settle 0) needs no second look.
        settle = self.profile.block_settle > 0
        self.parser = BlockParser(detect_echo=True, message_dir=self.cwd, settle=settle)
        self.tparser = BlockParser(detect_echo=False, message_dir=self.cwd)
        # The window's other readings, each looking only at what changed since the last.
        self._after = AfterPrompt()
        self._unnonced = BlockParser(nonce=None, detect_echo=True)

    def new_turn(self) -> None:
        """Forget the rejections of the previous turn (blocks stay, for cross-checks)."""
        self.rejected.clear()
        self._unnonced = BlockParser(nonce=None, detect_echo=True)
        self.ignored = 0

    def after_prompt(self, lines: t.Sequence[str], prompt: str | None) -> int:
        """Where the window's text after the echo of ``prompt`` begins (:class:`AfterPrompt`)."""
        return self._after(lines, prompt)

    def nonceless(self, lines: t.Sequence[str], task_id: str | None) -> list[Block]:
        """The turn's new complete blocks without a nonce and with ``task_id``.

        See :func:`~politerm.protocol.contract.nonceless`; each is reported once a turn.
        """
        return nonceless(lines, task_id, self._unnonced)

    async def lines(self, snap: Snapshot, start_line: int) -> list[str]:
        """The turn's window: the lines from ``start_line`` to the end of the screen."""
        if snap.alternate_screen or start_line < 0:
            return list(snap.lines)
        return await self.term.lines_from(snap, start_line)

    async def read(
        self,
        snap: Snapshot,
        start_line: int,
        nonce: str | None,
        *,
        task_id: str | None = None,
    ) -> list[Block]:
        """Every block of this turn seen now: the screen's, then the transcript's new ones.

        The same block is returned once (the parser remembers what it showed); callers act
        on each block once, by its :attr:`~politerm.protocol.block.Block.dedupe_key`.
        Rejected candidates are kept in :attr:`rejected` and recorded as events.
        """
        lines = await self.lines(snap, start_line)
        blocks, rejections = self.scan(lines, nonce)
        self.report(rejections, task_id=task_id)
        return blocks

    async def read_window(self, snap: Snapshot, w: Window, *, idle: bool = False) -> list[Block]:
        """The new blocks of turn ``w`` seen now, each bound to the turn's nonce.

        Like :meth:`read`, for a caller that keeps the turn itself (the router): a block
        without a nonce in the turn's window is this turn's; with ``w.nonce_required``, one
        that dropped it is accepted (with a ``warning`` event) only when it follows the
        echo of ``w.prompt`` and carries ``w.task_id``. ``idle`` reports a block left open
        as rejected.
        """
        start_line, nonce, prompt, task_id = w.start_line, w.nonce, w.prompt, w.task_id
        lines = await self.lines(snap, start_line)
        after = self.after_prompt(lines, prompt)
        if w.after_echo:
            lines = lines[after:]
        fresh, rejections = self.scan(lines, nonce if w.nonce_required else None)
        fresh = [dataclasses.replace(b, nonce=nonce) if b.nonce is None else b for b in fresh]
        accepted: set[int] = set()
        if w.nonce_required:
            extra, accepted = self._nonceless(
                snap, start_line, lines, after, nonce, prompt, task_id
            )
            fresh += extra
        if idle and not fresh:
            rejections += self.unfinished()
        self.report([r for r in rejections if r.line not in accepted], task_id=task_id)
        return fresh

    def _nonceless(
        self,
        snap: Snapshot,
        start_line: int,
        lines: list[str],
        after: int,
        nonce: str,
        prompt: str | None,
        task_id: str | None,
    ) -> tuple[list[Block], set[int]]:
        """Blocks that dropped the nonce, when provably this turn's, and their line numbers.

        Provably: printed after the turn's prompt (after its start row on the normal screen,
        or on a redrawn screen after the echo of this turn's prompt) and carrying the turn's
        task id. Their missing-nonce rejections are then not reported.
        """
        if snap.alternate_screen or start_line < 0:
            echo = last_prompt_line(lines, prompt)
            if echo < 0:
                return [], set()
            after = max(after, echo + 1)
        out = []
        seen: set[int] = set()
        for block in self.nonceless(lines[after:], task_id):
            bound = dataclasses.replace(block, nonce=nonce)
            key = (bound.nonce, bound.type, bound.id)
            seen.add(block.line + after)
            if key in self.screen_blocks:
                continue
            self.screen_blocks[key] = bound
            if self.store is not None:
                self.store.add_event(
                    "warning",
                    task_id=task_id,
                    agent=self.name,
                    detail=f"accepted a {block.type} block without a nonce: it follows the "
                    f"turn's prompt and carries task id {block.id}",
                )
            out.append(bound)
        return out, seen

    def scan(self, lines: list[str], nonce: str | None) -> tuple[list[Block], list[Rejected]]:
        """Parse ``lines`` (a turn's window) and the transcript; the blocks and rejections.

        Rejections are returned, not recorded: a caller that accepts some of them another
        way reports the rest with :meth:`report`.
        """
        self.parser.expect_nonce(nonce)
        before = len(self.parser.rejections)
        out = []
        for block in self.parser.scan_screen(lines):
            key = (block.nonce, block.type, block.id)
            self.screen_blocks[key] = block
            self._cross_check(key)
            out.append(block)
        out.extend(self.transcript(nonce))
        for block in self.parser.unsettled:
            # Its transcript's copy, the text as written, shows it whole: no need to wait
            # for another look (the turn may end on the transcript's copy before it).
            key = (block.nonce, block.type, block.id)
            raw = self.transcript_blocks.get(key)
            if raw is not None and key not in self.screen_blocks and cross_check(block, raw).agree:
                self.screen_blocks[key] = block
                self._cross_check(key)
        rejections = [Rejected(r.line, r.reason, r.old) for r in self.parser.rejections[before:]]
        return out, rejections

    def report(self, rejections: list[Rejected], *, task_id: str | None = None) -> None:
        """Keep ``rejections`` for this turn and record each as a ``rejected`` event.

        An old block (of an earlier turn) is counted in :attr:`ignored` and recorded as an
        ``ignored`` event: it is not a mistake of this turn.
        """
        for rej in rejections:
            if rej.old:
                self.ignored += 1
            else:
                self.rejected.append(rej)
            if self.store is not None:
                self.store.add_event(
                    "ignored" if rej.old else "rejected",
                    task_id=task_id,
                    agent=self.name,
                    detail=f"line {rej.line}: {rej.reason}",
                )

    def unfinished(self) -> list[Rejected]:
        """The candidate the last screen scan left open, as a rejection (once per candidate).

        For an agent that sits idle: a block whose closing tag was never recognised would
        otherwise be lost without a reason. Report the result with :meth:`report`.
        """
        pending = self.parser.pending
        if pending is None or (pending.line, pending.text) in self._left_open:
            return []
        self._left_open.add((pending.line, pending.text))
        what = (
            "no closing [[/POLI:MSG]] was recognised"
            if pending.reason.startswith("no closing")
            else "its header never ended with '}]]'"
        )
        return [Rejected(pending.line, f"the agent went idle with a block open: {what}")]

    def transcript(self, nonce: str | None) -> list[Block]:
        """New blocks from the agent's own transcript that the screen has not shown."""
        spec = self.profile.transcript
        if spec is None or self.cwd is None:
            return []
        # Looked up each time: a CLI may start a new log (Gemini CLI when a prompt was
        # queued during its start-up, Claude Code after /clear); blocks seen stay seen.
        path = locate_transcript(spec, self.cwd, self.env)
        if path is not None and (self._tail is None or self._tail.path != path):
            self._tail = open_tail(spec, path, self.cwd)
        if self._tail is None:
            return []
        self.tparser.expect_nonce(nonce)
        fresh = []
        for block in self._tail.feed(self.tparser):
            key = (block.nonce, block.type, block.id)
            self.transcript_blocks[key] = block
            self._cross_check(key)
            if key not in self.screen_blocks:
                fresh.append(block)
        return fresh

    def rejections_fact(self) -> str:
        """The turn's rejected candidates (and old blocks ignored), for an error message."""
        return rejected_fact([f"line {r.line}: {r.reason}" for r in self.rejected], self.ignored)

    def _cross_check(self, key: BlockKey) -> None:
        screen, raw = self.screen_blocks.get(key), self.transcript_blocks.get(key)
        if screen is None or raw is None or key in self._checked:
            return
        self._checked.add(key)
        if self.store is None:
            return
        check = cross_check(screen, raw)
        task_id = raw.id if self.store.get_task(raw.id) else None
        if check.agree:
            self.store.add_event(
                "cross-check",
                task_id=task_id,
                agent=self.name,
                detail=f"{raw.type} block: screen and transcript agree",
            )
        else:
            self.store.add_event(
                "drift",
                task_id=task_id,
                agent=self.name,
                detail=f"{raw.type} block differs from the transcript: "
                + "; ".join(check.mismatches),
            )
