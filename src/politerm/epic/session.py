"""One scoped agent session: deliver the prompt and wait for its fenced report.

The session is one turn on the agent driver (:func:`~politerm.driver.turn.run_turn` with
:meth:`~politerm.driver.turn.Expect.fenced_report`): its report error stops the session at
once, an agent idle without its report is nudged, a usage limit's wait does not count against
the timeout, a soft stop delivers the operator note and leaves a grace period to report, an
abort ends it. The agent's raw output goes, as it arrives, to the redacted transcript.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
import typing as t

from politerm.driver.turn import Expect, TurnOutcome
from politerm.errors import AgentExited, AgentTimeout
from politerm.protocol.report import Report, ReportStatus
from politerm.store.epics import SessionStatus
from politerm.store.journal import Serves, Workflow

if t.TYPE_CHECKING:
    from collections.abc import Callable

    from politerm.driver import AgentDriver
    from politerm.driver.stop import StopControl

#: What a session's turn ended as, when it did not end with a report.
_STATUS = {TurnOutcome.ABORTED: SessionStatus.ABORTED}
#: The turn's progress words as the session's status line says them.
_WORDS = {"answered": "report received"}


@dataclasses.dataclass(frozen=True)
class SessionOutcome:
    """How one session ended."""

    status: SessionStatus
    report: Report | None
    error: str | None
    started: float
    finished: float


async def run_session(
    driver: AgentDriver,
    *,
    prompt: str,
    session_id: str,
    timeout: float,
    grace: float,
    ready_timeout: float,
    stop: StopControl,
    note: str,
    on_state: Callable[[str], None],
) -> SessionOutcome:
    """Run one session on ``driver``'s just started agent (the caller stops it after).

    Parameters
    ----------
    driver
        The agent, started without waiting for it to be ready.
    prompt
        The layered prompt (asks for a ``poli:<session_id>`` report).
    session_id
        The UUID the report must carry.
    timeout
        Seconds from delivery until the session is given up without a report (the time
        the agent waits for a usage limit to reset is not counted).
    grace
        Seconds a soft stop leaves for the report before the session ends.
    ready_timeout
        Seconds the agent may take to become ready for the prompt.
    stop
        Operator stop requests (Ctrl-C, signals).
    note
        The operator note a soft stop delivers.
    on_state
        Told short state words for a status line.

    Returns
    -------
    SessionOutcome
        Never raises for an agent that misbehaves; the status and error say what happened.
    """
    started = time.time()

    def outcome(
        status: SessionStatus, report: Report | None = None, error: str | None = None
    ) -> SessionOutcome:
        return SessionOutcome(status, report, error, started, time.time())

    try:
        on_state("starting")
        try:
            if not await stop.unless_aborted(driver.wait_ready(ready_timeout)):
                return outcome(
                    SessionStatus.ABORTED, error="aborted by the operator before the prompt"
                )
        except (AgentExited, AgentTimeout) as exc:
            return outcome(SessionStatus.ERROR, error=str(exc))
        on_state("delivering")
        result = await driver.run_turn(
            prompt,
            Expect.fenced_report(session_id),
            timeout=timeout,
            nudge=lambda _nonce: nudge_text(session_id),
            stop=stop,
            wrap_up=note,
            grace=grace,
            on_progress=lambda word: on_state(_WORDS.get(word) or word),
            serves=Serves(Workflow.EPIC, "session_records", (session_id,)),
        )
        report = result.report
        if result.ok and report is not None:
            ok = report.status is ReportStatus.SUCCESS
            return outcome(SessionStatus.SUCCESS if ok else SessionStatus.NEEDS_HELP, report)
        return outcome(_STATUS.get(result.outcome, SessionStatus.ERROR), error=result.error)
    except BaseException as exc:
        # The agent is stopped after this: its prompt must not stay in flight in the journal.
        driver.abandon_turn(f"session cut short: {type(exc).__name__} {exc}".strip())
        raise
    finally:
        on_state("stopping")


def nudge_text(session_id: str) -> str:
    """What an agent that went idle without its report is told."""
    return (
        f"If you are finished, print your report now: the fenced poli:{session_id} block "
        "(status, commit_msg, details). If not, finish and then print it."
    )


def transcript_header(session_id: str, item: str) -> str:
    """The line a transcript starts each session with."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"===== poli session {session_id} item {item} {now} ====="
