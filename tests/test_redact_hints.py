"""Redaction skips a pattern only when no match is possible: the same result as every pattern.

:class:`~politerm.redact.Redactor` does not search a text with a built-in pattern when none
of that pattern's hint strings occurs in the text (case-folded); this must never let a
secret through that the pattern alone would have caught.
"""

from __future__ import annotations

import re
import typing as t

import pytest

from politerm.redact import BUILTIN_PATTERNS, Redactor, secret_tag


class Case(t.NamedTuple):
    test_id: str
    text: str


CASES = [
    Case("private-key", "x\n-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----"),
    Case("anthropic", "use sk-ant-" + "a" * 24),
    Case("openai", "key sk-proj-" + "b" * 30),
    Case("google", "AIza" + "c" * 35),
    Case("github", "ghp_" + "d" * 36 + " and github_pat_" + "e" * 22),
    Case("aws-access", "AKIA" + "F" * 16 + " ASIA" + "G" * 16),
    Case("aws-secret", "AWS_SECRET_ACCESS_KEY = " + "h" * 40),
    Case("slack", "xoxb-" + "1" * 12),
    Case("jwt", "eyJ" + "a" * 10 + ".eyJ" + "b" * 10 + "." + "c" * 10),
    Case("password-upper", "PASSWORD=hunter2"),
    Case("password-long-s", "paſſword=hunter2"),  # re.IGNORECASE matches ſ as s
    Case("kelvin-key", "api_\u212aey: topsecret"),  # and the Kelvin sign as k
    Case("tokens", "Auth_Token: abc; access_token='x y'; TOKEN=1"),
    Case("dotless-i", "AWS_SECRET = " + "i" * 40 + " and ıd=1"),
    Case("nothing", "a plan with no secret in it, only words and 42 numbers"),
    Case("custom", "the CODENAME-7 rollout"),
]


def _every_pattern(redactor: Redactor, text: str) -> str:
    found: dict[str, str] = {}
    for kind, rx in redactor.patterns:

        def one(match: re.Match[str], kind: str = kind) -> str:
            found[secret_tag(match.group(0))] = match.group(0)
            return f"[REDACTED:{kind}#{secret_tag(match.group(0))}]"

        text = rx.sub(one, text)
    return text


@pytest.mark.parametrize("case", CASES, ids=[c.test_id for c in CASES])
def test_skipping_patterns_by_their_hints_redacts_what_every_pattern_does(case: Case) -> None:
    redactor = Redactor([r"CODENAME-\d+"])
    out, _ = redactor.tagged(case.text)
    assert out == _every_pattern(redactor, case.text)
    if case.test_id != "nothing":
        assert "[REDACTED:" in out, f"{case.test_id}: nothing redacted in {out!r}"


def test_every_built_in_pattern_has_hints() -> None:
    redactor = Redactor()
    assert len(redactor.patterns) == len(BUILTIN_PATTERNS)
    assert all(h is not None for h in redactor._hints)
