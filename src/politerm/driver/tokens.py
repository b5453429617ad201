"""Token accounting per turn, task and run, from the agent's own transcript, and caps.

The :class:`TokenMeter` of an agent's driver follows its transcript (the profile's
``[transcript]``) from the moment a turn's prompt is confirmed, and reads the tokens the
new lines record with the format's :class:`~politerm.protocol.usage.UsageReader`. The
counts add up in the run store (free-form meta keys, so no schema change):

- ``tokens:agent:<name>``: every turn of that agent in this store (the run);
- ``tokens:task:<id>``: every turn of that task, whichever agent ran it;
- ``tokens:run``: everything in this store.

A ``tokens`` event records each turn's usage when it ends (none for a turn that read
none). With a :class:`Budget`, the first cap a turn goes over is reported by
:meth:`TokenMeter.over_budget`; the caller ends the turn with a ``budget`` event
(``run_turn`` returns OVER_BUDGET, the router fails the task). An agent without a
transcript, or with a format no reader knows, counts nothing, and its status shows ``-``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import typing as t

from politerm.errors import StoreError
from politerm.protocol.usage import Usage, usage_reader

if t.TYPE_CHECKING:
    import pathlib
    from collections.abc import Mapping

    from politerm.agents.profile import AgentProfile
    from politerm.driver.transcripts import Tail
    from politerm.store import RunStore

# The longest an answered turn waits for its usage to be written to the transcript.
USAGE_GRACE = 1.0


@dataclasses.dataclass(frozen=True)
class Budget:
    """Token caps (the ``[budget]`` configuration section); None: no cap."""

    turn_tokens: int | None = None
    task_tokens: int | None = None
    run_tokens: int | None = None


def _encode(u: Usage) -> str:
    return f"{u.input} {u.output} {u.cached}"


def _decode(value: str | None) -> Usage:
    """The usage a meta value holds (zero when unset or unreadable).

    Examples
    --------
    >>> _decode("10 2 4")
    Usage(input=10, output=2, cached=4)
    >>> _decode(None), _decode("junk")
    (Usage(input=0, output=0, cached=0), Usage(input=0, output=0, cached=0))
    """
    try:
        a, b, c = (int(x) for x in (value or "").split())
    except ValueError:
        return Usage()
    return Usage(a, b, c)


def stored_tokens(store: RunStore, key: str) -> Usage:
    """The tokens counted under ``key`` (``agent:NAME``, ``task:ID`` or ``run``)."""
    return _decode(store.get_meta(f"tokens:{key}"))


def all_stored_tokens(store: RunStore, kind: str) -> dict[str, Usage]:
    """Every count of one kind (``agent`` or ``task``) by name, in one store read."""
    prefix = f"tokens:{kind}:"
    return {k[len(prefix) :]: _decode(v) for k, v in store.meta_values(prefix).items()}


def add_tokens(store: RunStore, keys: t.Iterable[str], usage: Usage) -> None:
    """Add ``usage`` to every key's count, in one transaction."""
    with store.batch():
        for key in keys:
            store.set_meta(f"tokens:{key}", _encode(stored_tokens(store, key) + usage))


class TokenMeter:
    """Counts one agent's tokens from its transcript; see the module docstring."""

    def __init__(
        self,
        name: str,
        profile: AgentProfile,
        *,
        cwd: pathlib.Path | None,
        env: Mapping[str, str],
        store: RunStore | None,
        budget: Budget | None = None,
    ) -> None:
        self.name = name
        self.spec = profile.transcript
        self.reader = usage_reader(self.spec.format) if self.spec is not None else None
        self.cwd = cwd
        self.env = env
        self.store = store
        self.budget = budget or Budget()
        self.turn = Usage()
        self.task_id: str | None = None
        self.open = False
        self._tail: Tail | None = None
        self._from_start = False
        self._marked: tuple[Tail | None] | None = None  # the transcript's end before a paste
        self._seen: dict[str, Usage] = {}

    @property
    def works(self) -> bool:
        """The agent keeps a transcript whose tokens can be read."""
        return self.reader is not None and self.cwd is not None

    def mark(self) -> None:
        """A prompt is about to be pasted: its turn counts what the transcript gains from now.

        Taken before the paste, because a quick agent may answer (and write its usage)
        before the delivery is confirmed. A turn still open keeps its own place.
        """
        if self.open or not self.works:
            return
        tail = self._locate()
        if tail is not None:
            tail.skip_to_end()
        self._marked = (tail,)

    def start_turn(self, task_id: str | None) -> None:
        """A prompt was confirmed: count from the mark before its paste, else from now.

        A nudge for the open turn's task keeps the turn.
        """
        if self.open and task_id == self.task_id:
            return
        self.turn, self.task_id, self.open = Usage(), task_id, True
        self._seen = {}
        if self._marked is not None:
            (self._tail,) = self._marked
        else:
            self._tail = self._locate()
            if self._tail is not None:
                self._tail.skip_to_end()
        self._marked = None
        # A transcript that does not exist yet is this session's: counted from its start.
        self._from_start = self._tail is None

    def _locate(self) -> Tail | None:
        if not self.works or self.spec is None or self.cwd is None:
            return None
        # Imported here: the views read the stored counts only (``poli status``, ``poli dash``)
        # and should not import the transcript readers to start.
        from politerm.driver.transcripts import locate_transcript, open_tail

        path = locate_transcript(self.spec, self.cwd, self.env)
        return open_tail(self.spec, path, self.cwd) if path is not None else None

    def poll(self) -> Usage:
        """Read what the transcript gained; add it to the turn, task and run counts."""
        if not self.open or self.reader is None:
            return Usage()
        if self._tail is None:
            self._tail = self._locate()
            if self._tail is None:
                return Usage()
            if not self._from_start:
                self._tail.skip_to_end()
        try:
            entries = self.reader(self._tail.read_lines())
        except OSError:
            return Usage()
        new = Usage()
        for key, usage in entries:
            if key is None:
                new += usage
            else:
                # A message written again counts its growth only.
                new += usage - self._seen.get(key, Usage())
                self._seen[key] = usage
        if new:
            self.turn += new
            keys = [f"agent:{self.name}", "run"]
            if self.task_id is not None:
                keys.append(f"task:{self.task_id}")
            if self.store is not None:
                with contextlib.suppress(StoreError):
                    add_tokens(self.store, keys, new)
        return new

    def over_budget(self) -> str | None:
        """The first cap this turn, its task or the run has gone over, in words; or None."""
        if not self.open:
            return None
        b = self.budget
        # The stored counts are read only for a cap that is set (one look = one step).
        checks: list[tuple[str, int | None, t.Callable[[], Usage]]] = [
            ("turn", b.turn_tokens, lambda: self.turn)
        ]
        store = self.store
        if store is not None:
            if self.task_id is not None:
                key = f"task:{self.task_id}"
                checks.append(
                    (f"task {self.task_id}", b.task_tokens, lambda: stored_tokens(store, key))
                )
            checks.append(("run", b.run_tokens, lambda: stored_tokens(store, "run")))
        for what, cap, usage in checks:
            if cap is None:
                continue
            used = usage()
            if used.total > cap:
                return (
                    f"{self.name}: the {what} used {used.words()}, over the budget of "
                    f"{cap:,} tokens ([budget] {what.split()[0]}_tokens)"
                )
        return None

    async def settle(self, grace: float = USAGE_GRACE) -> None:
        """Wait (at most ``grace`` s) for an answered turn's usage to reach the transcript.

        A CLI can draw its answer before it writes the answer's usage (Claude Code writes
        its transcript a moment later); a turn that has counted nothing yet reads the
        transcript again until it has, so the usage is not lost when the turn closes.
        With no transcript at all by then (none where the profile looks; the CLIs that
        keep one have written the prompt's line to it when it was submitted) no usage can
        come: the turn ends at once, and a node's reply to a router on another node is not
        held back by ``grace``.
        """
        if not self.open or not self.works or self.turn:
            return
        loop = asyncio.get_running_loop()
        end = loop.time() + grace
        while not self.poll() and self._tail is not None and loop.time() < end:
            await asyncio.sleep(0.05)

    def end_turn(self) -> Usage:
        """The turn is over: read the last lines, record a ``tokens`` event, return its usage."""
        if not self.open:
            return Usage()
        self.poll()
        self.open = False
        if self.store is not None and self.turn:
            with contextlib.suppress(StoreError):
                self.store.add_event(
                    "tokens",
                    task_id=self.task_id,
                    agent=self.name,
                    detail=f"{self.name}'s turn used {self.turn.words()}",
                )
        return self.turn
