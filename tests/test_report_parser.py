"""The fenced session report parser: a table of cases, each fed whole, split at every offset
into two chunks, and one character at a time; the result must be the same every time."""

from __future__ import annotations

import typing as t

import pytest

from politerm.errors import ReportError
from politerm.protocol.report import Report, ReportParser, ReportStatus

SID = "0f8fad5b-d9cb-469f-a165-70867728950e"
OTHER = "11111111-2222-4333-8444-555555555555"


class Case(t.NamedTuple):
    test_id: str
    text: str
    status: ReportStatus | None = None
    commit_msg: str = ""
    details: str = ""
    escalation: str | None = None
    error: str = ""
    #: The error must come from feed() (the live stream), not only from finish().
    immediate: bool = False
    drift: tuple[str, ...] = ()
    prefix: str = "poli"


CASES = [
    Case(
        "inline-details",
        f"noise before\n```poli:{SID}\nstatus: success\ncommit_msg: Add x\n"
        "details: Did x quickly.\n```\n",
        ReportStatus.SUCCESS,
        "Add x",
        "Did x quickly.",
    ),
    Case(
        "block-details",
        f"```poli:{SID}\nstatus: success\ncommit_msg: Add y\ndetails: |\n  first line\n"
        "    indented more\n\n  after a blank\n```\n",
        ReportStatus.SUCCESS,
        "Add y",
        "first line\n  indented more\n\nafter a blank",
    ),
    Case(
        "status-comment-copied",
        f"```poli:{SID}\nstatus: success            # or needs_help\ncommit_msg: Fix z\n```\n",
        ReportStatus.SUCCESS,
        "Fix z",
    ),
    Case(
        "hash-kept-outside-status",
        f"```poli:{SID}\nstatus: needs_help  # or success\ncommit_msg: Fix #123\n"
        "escalation: see #124  # why\n```\n",
        ReportStatus.NEEDS_HELP,
        "Fix #123",
        escalation="see #124  # why",
    ),
    Case(
        "obi-prefix",
        f"```obi:{SID}\nstatus: success\ncommit_msg: Old prompt\ndetails: |\n  body\n```\n",
        ReportStatus.SUCCESS,
        "Old prompt",
        "body",
        prefix="obi",
    ),
    Case(
        "obi-prefix-and-keys-any-case",
        f"```OBI:{SID}\nSTATUS: success\nCommit_Msg: Loud\nDetails: body\n```\n",
        ReportStatus.SUCCESS,
        "Loud",
        "body",
        prefix="obi",
    ),
    Case(
        "session-id-any-case",
        f"```poli:{SID.upper()}\nstatus: success\ncommit_msg: Upper\n```\n",
        ReportStatus.SUCCESS,
        "Upper",
    ),
    Case(
        "obi-missing-details",
        f"```obi:{SID}\nstatus: success\ncommit_msg: Short\n```\n",
        error="obi: report has no details",
        immediate=True,
    ),
    Case(
        "obi-unknown-field",
        f"```obi:{SID}\nstatus: success\ncommit_msg: x\nmood: happy\n```\n",
        error="unknown field 'mood' in an obi: report",
        immediate=True,
    ),
    Case(
        "claude-gutter",
        f"● Done.\n  ```poli:{SID}\n  status: success\n  commit_msg: Gutter\n  details: |\n"
        "    body line\n      nested\n  ```\n",
        ReportStatus.SUCCESS,
        "Gutter",
        "body line\n  nested",
    ),
    Case(
        "needs-help",
        f"```poli:{SID}\nstatus: needs_help\ncommit_msg: Blocked\ndetails: |\n  tried\n"
        "escalation: needs a key\n```\n",
        ReportStatus.NEEDS_HELP,
        "Blocked",
        "tried",
        "needs a key",
    ),
    Case(
        "ansi-and-crlf",
        f"\x1b[1m```poli:{SID}\x1b[0m\r\n\x1b[32mstatus:\x1b[0m success\r\n"
        "commit_msg: Colour\r\n```\r\n",
        ReportStatus.SUCCESS,
        "Colour",
    ),
    Case(
        "echoed-template-ignored",
        "> When you are done, end with\n> ```poli:<SESSION_UUID>\n> status: success\n"
        f">   details\n\nWorking...\n```poli:{SID}\nstatus: success\ncommit_msg: Real\n```\n",
        ReportStatus.SUCCESS,
        "Real",
    ),
    Case(
        "legacy-agrees",
        f"```poli:{SID}\nstatus: success\ncommit_msg: Same\n```\nSTATUS: SUCCESS\n"
        "COMMIT_MSG: Same\n",
        ReportStatus.SUCCESS,
        "Same",
    ),
    Case(
        "legacy-drift",
        f"```poli:{SID}\nstatus: success\ncommit_msg: Mine\n```\nSTATUS: success\n"
        "COMMIT_MSG: Theirs\nESCALATION: none\n",
        ReportStatus.SUCCESS,
        "Mine",
        drift=(
            "commit_msg: report says 'Mine', footer says 'Theirs'",
            "escalation: report says None, footer says 'none'",
        ),
    ),
    Case(
        "obi-footer-body-on-following-lines",
        f"```obi:{SID}\nstatus: success\ncommit_msg: Add x\ndetails: |\n  did x\n\n  and y\n```\n"
        "STATUS: success\nCOMMIT_MSG:\ndid x\n\nand y\n",
        ReportStatus.SUCCESS,
        "Add x",
        "did x\n\nand y",
        prefix="obi",
    ),
    Case(
        "footer-subject-and-body-then-prompt-box",
        f"● ```poli:{SID}\n  status: needs_help\n  commit_msg: Stuck\n  details: tried\n"
        "  escalation: needs a key\n  ```\n  STATUS: needs_help\n  COMMIT_MSG:\n  Stuck\n\n"
        "  tried\n  ESCALATION:\n  needs a key\n╭──────╮\n│ >    │\n╰──────╯\n",
        ReportStatus.NEEDS_HELP,
        "Stuck",
        "tried",
        "needs a key",
    ),
    Case(
        "footer-body-disagrees",
        f"```poli:{SID}\nstatus: success\ncommit_msg: Add x\ndetails: did x\n```\n"
        "COMMIT_MSG:\nsomething else\nentirely\n",
        ReportStatus.SUCCESS,
        "Add x",
        "did x",
        drift=("commit_msg: report says 'Add x', footer says 'something else\\nentirely'",),
    ),
    Case(
        "legacy-status-contradicts",
        f"STATUS: needs_help\n```poli:{SID}\nstatus: success\ncommit_msg: Mine\n```\n",
        error="the report's status is 'success' but the legacy footer's is 'needs_help'",
    ),
    Case(
        "legacy-template-status-is-drift",
        f"```poli:{SID}\nstatus: success\ncommit_msg: Mine\n```\nSTATUS: success|needs_help\n",
        ReportStatus.SUCCESS,
        "Mine",
        drift=("status: footer says 'success|needs_help', not success or needs_help",),
    ),
    Case(
        "wrapped-inline-details",
        f"```poli:{SID}\nstatus: success\ncommit_msg: Wrap\ndetails: a long line that the\n"
        "terminal wrapped\n```\n",
        ReportStatus.SUCCESS,
        "Wrap",
        "a long line that the\nterminal wrapped",
    ),
    Case(
        "uuid-mismatch",
        f"```poli:{OTHER}\nstatus: success\ncommit_msg: Not ours\n```\n",
        error=f"report fence for session {OTHER}, expected {SID}",
        immediate=True,
    ),
    Case(
        "template-placeholder-outside-echo",
        "```poli:<SESSION_UUID>\nstatus: success\n```\n",
        error="report fence for session <SESSION_UUID>",
        immediate=True,
    ),
    Case(
        "needs-help-without-escalation",
        f"```poli:{SID}\nstatus: needs_help\ncommit_msg: Stuck\n```\n",
        error="needs_help without an escalation",
        immediate=True,
    ),
    Case(
        "malformed-field",
        f"```poli:{SID}\nstatus: success\nthis is not a field\n```\n",
        error="malformed report line",
        immediate=True,
    ),
    Case(
        "bad-status",
        f"```poli:{SID}\nstatus: done-ish\ncommit_msg: x\n```\n",
        error="status must be success or needs_help, got 'done-ish'",
        immediate=True,
    ),
    Case(
        "duplicate-field",
        f"```poli:{SID}\nstatus: success\nstatus: success\n```\n",
        error="given twice",
        immediate=True,
    ),
    Case(
        "missing-commit-msg",
        f"```poli:{SID}\nstatus: success\ndetails: x\n```\n",
        error="no commit_msg",
        immediate=True,
    ),
    Case(
        "no-closing-fence",
        f"```poli:{SID}\nstatus: success\ncommit_msg: Open\n",
        error="was never closed",
    ),
    Case(
        "unknown-field-kept",
        f"```poli:{SID}\nstatus: success\ncommit_msg: x\nmood: happy\n```\n",
        ReportStatus.SUCCESS,
        "x",
    ),
    Case(
        "no-report",
        "I did some work but forgot the report.\nSTATUS: success\n",
        error="no ```poli:",
    ),
]


def run(chunks: t.Iterable[str]) -> tuple[object, bool]:
    """Feed ``chunks``; return (Report or error message, whether feed() signalled an error)."""
    parser = ReportParser(SID)
    signalled = False
    for chunk in chunks:
        for signal in parser.feed(chunk):
            if isinstance(signal, ReportError):
                signalled = True
    try:
        return parser.finish(), signalled
    except ReportError as exc:
        return str(exc), signalled


def check(case: Case, outcome: object, signalled: bool) -> None:
    if case.error:
        assert isinstance(outcome, str), outcome
        assert case.error in outcome
        assert signalled == case.immediate
        return
    assert isinstance(outcome, Report), outcome
    assert outcome.session_id == SID
    assert outcome.status is case.status
    assert outcome.commit_msg == case.commit_msg
    assert outcome.details == case.details
    assert outcome.escalation == case.escalation
    assert outcome.drift == case.drift
    assert outcome.prefix == case.prefix
    assert not signalled


@pytest.mark.parametrize("case", CASES, ids=[c.test_id for c in CASES])
def test_whole(case: Case) -> None:
    check(case, *run([case.text]))


@pytest.mark.parametrize("case", CASES, ids=[c.test_id for c in CASES])
def test_split_at_every_offset(case: Case) -> None:
    whole = run([case.text])
    for i in range(len(case.text) + 1):
        got = run([case.text[:i], case.text[i:]])
        assert got == whole, f"split at {i}: {case.text[:i]!r} | {case.text[i:]!r}"
    check(case, *whole)


@pytest.mark.parametrize("case", CASES, ids=[c.test_id for c in CASES])
def test_one_character_at_a_time(case: Case) -> None:
    check(case, *run(list(case.text)))


def test_error_is_signalled_before_the_stream_ends() -> None:
    parser = ReportParser(SID)
    assert parser.feed(f"work...\n```poli:{OTHER}") == []
    signals = parser.feed("\n")
    assert len(signals) == 1
    assert isinstance(signals[0], ReportError)
    assert parser.done
    # Nothing after the error changes it.
    assert parser.feed(f"```poli:{SID}\nstatus: success\ncommit_msg: x\n```\n") == []
    with pytest.raises(ReportError, match="expected"):
        parser.finish()


def test_report_is_signalled_at_the_closing_fence() -> None:
    parser = ReportParser(SID)
    assert parser.feed(f"```poli:{SID}\nstatus: success\ncommit_msg: x\n") == []
    signals = parser.feed("```\n")
    assert [type(s) for s in signals] == [Report]
    # A redraw of the same report is not a second report.
    assert parser.feed(f"```poli:{SID}\nstatus: success\ncommit_msg: x\n```\n") == []


def test_unknown_fields_of_a_poli_fence_are_kept() -> None:
    text = f"```poli:{SID}\nstatus: success\ncommit_msg: x\nMood: happy\n```\n"
    report, _ = run([text])
    assert isinstance(report, Report), report
    assert report.extra == {"mood": "happy"}
