"""obi's legacy footer: values on the key's line or on the lines after it, and the
cross-check against the fenced report (a table of footers as obi's prompt asks for them)."""

from __future__ import annotations

import typing as t

import pytest

from politerm.protocol.footer import MAX_LINES, FooterReader
from politerm.protocol.report import Report, ReportStatus, cross_check


class Case(t.NamedTuple):
    test_id: str
    lines: tuple[str, ...]
    values: dict[str, str]


CASES = [
    Case(
        "same-line",
        ("STATUS: success", "COMMIT_MSG: Add x"),
        {"STATUS": "success", "COMMIT_MSG": "Add x"},
    ),
    Case(
        "body-on-following-lines",
        ("STATUS: success", "COMMIT_MSG:", "Add x", "", "- did x", "- did y"),
        {"STATUS": "success", "COMMIT_MSG": "Add x\n\n- did x\n- did y"},
    ),
    Case(
        "every-key-on-following-lines",
        ("STATUS:", "needs_help", "COMMIT_MSG:", "Stuck", "ESCALATION:", "needs a key", "ok"),
        {"STATUS": "needs_help", "COMMIT_MSG": "Stuck", "ESCALATION": "needs a key\nok"},
    ),
    Case(
        "inline-then-continued",
        ("COMMIT_MSG: Add x", "and more"),
        {"COMMIT_MSG": "Add x\nand more"},
    ),
    Case(
        "bold-keys",
        ("**STATUS:** success", "**COMMIT_MSG:** Add x"),
        {"STATUS": "success", "COMMIT_MSG": "Add x"},
    ),
    Case(
        "ends-at-input-box",
        ("COMMIT_MSG:", "Add x", "╭────╮", "│ >  │", "later"),
        {"COMMIT_MSG": "Add x"},
    ),
    Case(
        "ends-at-codex-prompt",
        ("COMMIT_MSG:", "Add x", "› ", "⏎ send"),
        {"COMMIT_MSG": "Add x"},
    ),
    Case("last-footer-wins", ("STATUS: needs_help", "STATUS: success"), {"STATUS": "success"}),
    Case("lower-case-is-prose", ("status: fine", "commit_msg: x"), {}),
    Case("prose-before-any-key", ("I am done.", "All good"), {}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.test_id for c in CASES])
def test_footer_values(case: Case) -> None:
    reader = FooterReader()
    for line in case.lines:
        reader.line(line)
    assert reader.values() == case.values


def test_a_runaway_value_is_bounded() -> None:
    reader = FooterReader()
    reader.line("COMMIT_MSG:")
    for i in range(MAX_LINES * 3):
        reader.line(f"line {i}")
    value = reader.values()["COMMIT_MSG"]
    assert value.startswith("line 0\n")
    assert value.endswith(f"line {MAX_LINES - 2}")
    assert not reader.line("one more")


REPORT = Report("s", ReportStatus.SUCCESS, "Add x", details="did x\nand y")


class Check(t.NamedTuple):
    test_id: str
    footer: dict[str, str]
    error: str | None
    drift: tuple[str, ...]


CHECKS = [
    Check("details-as-obi-defines", {"STATUS": "success", "COMMIT_MSG": "did x\nand y"}, None, ()),
    Check("subject-only", {"COMMIT_MSG": "Add x"}, None, ()),
    Check("subject-and-body", {"COMMIT_MSG": "Add x\n\ndid x\nand y"}, None, ()),
    Check("status-case-insensitive", {"STATUS": "SUCCESS"}, None, ()),
    Check(
        "status-contradicts",
        {"STATUS": "needs_help"},
        "the report's status is 'success' but the legacy footer's is 'needs_help'",
        (),
    ),
    Check(
        "commit-disagrees",
        {"COMMIT_MSG": "Other"},
        None,
        ("commit_msg: report says 'Add x', footer says 'Other'",),
    ),
    Check(
        "escalation-where-none",
        {"ESCALATION": "why"},
        None,
        ("escalation: report says None, footer says 'why'",),
    ),
    Check("empty-escalation-agrees", {"ESCALATION": ""}, None, ()),
]


@pytest.mark.parametrize("case", CHECKS, ids=[c.test_id for c in CHECKS])
def test_cross_check(case: Check) -> None:
    assert cross_check(REPORT, case.footer) == (case.error, case.drift)
