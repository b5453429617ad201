"""A project's ``[redact] patterns`` reach the hook command and the driver that reads it.

The hook runs in the agent's CLI and never reads ``poli.toml``: the launch keeps the patterns
beside the channel, the hook command (run as the CLIs run it) redacts its receipt with them,
and the driver matches a prompt with the receipt using the same ones. The real CLI path is
``tests/realcli/test_receipts.py::test_a_project_pattern_secret_stays_out_of_the_receipts``.
"""

from __future__ import annotations

import json
import typing as t

import pytest

from politerm.driver.receipts import Receipts, prepare_hooks
from politerm.driver.records import AgentRecords, plain_prompt
from politerm.errors import HookError
from politerm.hooks.channel import HookChannel
from politerm.hooks.events import HookKind
from politerm.hooks.patterns import patterns_path
from politerm.redact import Redactor
from tests.test_hooks import emit, mode

if t.TYPE_CHECKING:
    import pathlib

PATTERN = r"ACME-TOKEN-[A-Z0-9]{20}"
# Matches the project's pattern and none of the built-in ones.
TOKEN = "ACME-TOKEN-" + "7Q" * 10


def test_the_hook_redacts_with_the_projects_patterns_and_the_driver_matches(
    tmp_path: pathlib.Path,
) -> None:
    assert Redactor().redact(TOKEN) == TOKEN  # the built-in patterns alone let it through
    setup = prepare_hooks("A", "claude", ["claude"], {}, tmp_path / "hooks", [PATTERN])
    assert setup.channel is not None
    kept = patterns_path(setup.channel)
    assert mode(kept) == 0o600 and json.loads(kept.read_text()) == {"patterns": [PATTERN]}
    # The secret at the very start and the very end (in the head and tail excerpts), and
    # one across the cut of the head: redacted whole, then cut.
    prompt = f"{TOKEN} deploy {'x' * 100} {TOKEN} {'y' * 150} (nonce=abc123) {TOKEN}"
    emit(setup.channel, "claude", "UserPromptSubmit", {"prompt": prompt, "session_id": TOKEN})
    emit(setup.channel, "claude", "Notification", {"message": f"Allow {TOKEN}?"})
    text = setup.channel.read_text()
    assert "ACME-TOKEN" not in text and "7Q7Q" not in text, text
    rc = setup.receipts()
    assert rc is not None
    # The store keeps the prompt with markers, and the driver compares those.
    marked = plain_prompt(Redactor([PATTERN]).tagged(prompt)[0])
    assert marked.startswith("[REDACTED:custom] deploy")
    found = rc.prompt_receipt(0, marked)
    assert found is not None and found.prompt_head.startswith("[REDACTED:custom] deploy")
    assert found.prompt_tail.endswith("(nonce=abc123) [REDACTED:custom]")
    assert rc.prompt_receipt(0, prompt) is not None  # the original, by its digest
    assert rc.prompt_receipt(0, "another prompt") is None
    # Without the project's patterns the driver could not tell the receipt was this prompt's.
    blind = Receipts("claude", HookChannel(setup.channel, offset=0))
    assert blind.prompt_receipt(0, prompt.replace(TOKEN, "ACME-TOKEN-" + "8R" * 10)) is None
    # A recovery reads the same receipts from disk, with the same patterns.
    records = AgentRecords.find("A", None, None, None, setup.channel)
    assert records.submitted(marked, "abc123") is not None


def test_a_relaunch_without_patterns_removes_them(tmp_path: pathlib.Path) -> None:
    setup = prepare_hooks("A", "claude", ["claude"], {}, tmp_path / "hooks", [PATTERN])
    assert setup.channel is not None and patterns_path(setup.channel).exists()
    prepare_hooks("A", "claude", ["claude"], {}, tmp_path / "hooks")
    assert not patterns_path(setup.channel).exists()


def test_patterns_that_cannot_be_trusted_leave_no_excerpt(tmp_path: pathlib.Path) -> None:
    setup = prepare_hooks("A", "claude", ["claude"], {}, tmp_path / "hooks", [PATTERN])
    assert setup.channel is not None
    kept = patterns_path(setup.channel)
    kept.chmod(0o644)  # anyone could have read it, or put it there
    emit(setup.channel, "claude", "UserPromptSubmit", {"prompt": f"{TOKEN} deploy"})
    (line,) = setup.channel.read_text().splitlines()
    receipt = json.loads(line)
    assert receipt["kind"] == HookKind.NOTICE.value and "prompt" not in receipt, receipt
    with pytest.raises(HookError, match="not a private file of this user"):
        setup.receipts()
    kept.chmod(0o600)
    kept.write_text('{"patterns": "ACME"}')
    with pytest.raises(HookError, match="not a JSON object with a list of strings"):
        setup.receipts()
