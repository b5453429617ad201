"""Taking over an obi setup: ``poli config import-obi`` and ``poli import`` of obi's results
log, through the real CLI (fixtures written in obi's formats under tests/fixtures/obi), and
sessions that end with obi's fence and legacy footer, run end to end on the fake agent."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import stat
import subprocess
import sys

from politerm.compat.obi import ledger_records
from politerm.config import load_config
from politerm.store.epics import EpicStore
from tests.epic_helpers import Project, add_items

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "obi"


def poli(cwd: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "politerm", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HOME": str(cwd)},
        check=False,
    )


def test_import_obi_writes_a_working_poli_toml(tmp_path: pathlib.Path) -> None:
    shutil.copy(FIXTURES / "obi.toml", tmp_path / "obi.toml")
    out = poli(tmp_path, "config", "import-obi", "obi.toml", "-o", "poli.toml")
    assert out.returncode == 0, out.stderr
    toml = (tmp_path / "poli.toml").read_text()
    assert stat.S_IMODE((tmp_path / "poli.toml").stat().st_mode) == 0o600
    prompts = tmp_path / ".poli" / "prompts"
    assert stat.S_IMODE(prompts.stat().st_mode) == 0o700
    for name in ("obi-base.md", "obi-summary.md", "obi-epic-payments.md"):
        assert stat.S_IMODE((prompts / name).stat().st_mode) == 0o600
    # What has no equivalent is said in comments, the results log with its import command.
    assert "# results_log ~/obi/results.log: import its records with `poli import" in toml
    assert "summary.max_commits" in toml
    assert "confirm_before_run" in toml
    config = load_config(tmp_path, env={})
    assert config.epic.agent == "codex"
    assert config.epic.commands["codex"] == [
        "codex",
        "--model",
        "gpt-5-codex",
        "--sandbox",
        "workspace-write",
        "--ask-for-approval",
        "on-request",
        "--search",
    ]
    assert config.epic.base_prompt is not None
    assert "Run the tests before you report." in (tmp_path / config.epic.base_prompt).read_text()
    assert config.epic.epic_prompt is not None
    assert "payments module" in (tmp_path / config.epic.epic_prompt).read_text()
    assert config.epic.summary_prompt is not None
    # An existing poli.toml is not overwritten without --force.
    again = poli(tmp_path, "config", "import-obi", "obi.toml", "-o", "poli.toml")
    assert again.returncode == 1
    assert again.stderr.strip() == "poli: poli.toml exists; pass --force to overwrite it"
    # Without -o the TOML goes to stdout; `poli config` alone still prints the configuration.
    printed = poli(tmp_path, "config", "import-obi", "obi.toml")
    assert printed.stdout == toml
    assert json.loads(poli(tmp_path, "config").stdout)["epic"]["agent"] == "codex"


def test_a_bad_obi_toml_is_one_line(tmp_path: pathlib.Path) -> None:
    (tmp_path / "obi.toml").write_text('[codex]\nextra_args = "--search"\n')
    out = poli(tmp_path, "config", "import-obi", "obi.toml")
    assert out.returncode == 1
    assert out.stderr.strip() == "poli: obi.toml: codex.extra_args must be a list of strings"
    (tmp_path / "obi.toml").write_text("[codex\n")
    out = poli(tmp_path, "config", "import-obi", "obi.toml")
    assert out.returncode == 1
    assert out.stderr.startswith("poli: obi.toml: not TOML:")
    assert len(out.stderr.strip().splitlines()) == 1


def test_poli_import_reads_obis_results_log(tmp_path: pathlib.Path) -> None:
    (tmp_path / "poli.toml").write_text('[store]\npath = "runs.sqlite3"\n')
    shutil.copy(FIXTURES / "results.log", tmp_path / "results.log")
    out = poli(tmp_path, "import", "results.log")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "3 record(s) imported, 0 already present"
    again = poli(tmp_path, "import", "results.log")
    assert again.stdout.strip() == "0 record(s) imported, 3 already present"
    logged = poli(tmp_path, "log", "--json")
    assert logged.returncode == 0, logged.stderr
    records = {r["id"]: r for r in json.loads(logged.stdout)}
    done = records["1d0c5d64-2f4e-4d4b-9a59-0d6f3c1e0a01"]
    assert done["status"] == "success"
    assert done["item_id"] == "app-7f2.1"
    assert done["epic"] == "app-7f2"
    assert done["commit_summary"] == "Add the refund endpoint"
    assert done["commit_body"] == "Adds POST /refunds.\nTests cover partial refunds."
    assert round(done["finished"] - done["started"], 6) == round(750.0 - 0.123456, 6)
    assert done["flags"] == [
        "--sandbox",
        "workspace-write",
        "--ask-for-approval",
        "on-request",
        "--search",
    ]
    helped = records["2e1d6e75-3f5f-4e5c-8b6a-1e7f4d2f1b02"]
    assert helped["status"] == "needs_help"
    assert helped["escalation"] == "Which ledger table owns refunds?"
    # An entry older than obi.v2, with Go's zero time for "never started".
    assert records["old-0001"]["started"] is None


def test_a_bad_results_log_line_names_file_and_line(tmp_path: pathlib.Path) -> None:
    (tmp_path / "poli.toml").write_text('[store]\npath = "runs.sqlite3"\n')
    lines = (FIXTURES / "results.log").read_text().splitlines()
    bad = json.loads(lines[0]) | {"status": "done"}
    (tmp_path / "bad.log").write_text(lines[0] + "\n" + json.dumps(bad) + "\n")
    out = poli(tmp_path, "import", "--format", "obi", "bad.log")
    assert out.returncode == 1
    assert out.stderr.strip() == (
        "poli: bad.log:2: obi status must be success or needs_help, got 'done'"
    )


def test_ledger_lines_map_every_field() -> None:
    records = ledger_records((FIXTURES / "results.log").read_text().splitlines())
    assert [r.item_id for r in records] == ["app-7f2.1", "app-7f2.2", None]
    first = records[0]
    assert first.model == "gpt-5-codex"
    assert first.transcript_path == "/home/u/.config/obi/transcripts/1d0c.log"
    assert first.config_hash == "ab12"
    assert first.repo_root == "/src/app"
    assert first.run_id == first.id


def test_an_imported_results_log_leaves_no_secret_on_disk(tmp_path: pathlib.Path) -> None:
    import sqlite3

    (tmp_path / "poli.toml").write_text('[store]\npath = "runs.sqlite3"\n')
    secret = "sk-ant-api03-" + "Q1w2E3r4T5y6U7i8O9p0AsDfGh" + "-Jk"
    entry = json.loads((FIXTURES / "results.log").read_text().splitlines()[0])
    entry |= {"commit_details": f"Used key {secret} to test.", "escalation": secret}
    (tmp_path / "leaky.log").write_text(json.dumps(entry) + "\n")
    out = poli(tmp_path, "import", "leaky.log")
    assert out.returncode == 0, out.stderr
    logged = json.loads(poli(tmp_path, "log", "--json").stdout)
    assert "Used key" in logged[0]["commit_body"] and secret not in logged[0]["commit_body"]
    sqlite3.connect(tmp_path / "runs.sqlite3").execute("PRAGMA wal_checkpoint(TRUNCATE)").close()
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.name != "leaky.log":
            assert secret.encode() not in path.read_bytes(), path


async def test_obis_footer_with_values_on_following_lines_records_no_drift(
    tmp_path: pathlib.Path,
) -> None:
    # Each agent prints an obi: fence, then the footer as obi's prompt asks for it: values on
    # the lines after their keys (COMMIT_MSG's multi-line body, STATUS, ESCALATION).
    project = Project(tmp_path / "repo")
    add_items(project, ("o-1", "OBI FOOTER please", ()), ("o-2", "OBI ESCALATES please", ()))
    result, _ = await project.go(summary=False)
    by_item = {r.item_id: r for r in result.records}
    done, helped = by_item["o-1"], by_item["o-2"]
    assert (done.status, done.error, done.drift) == ("success", None, ())
    assert done.commit_body == "Changed the code for o-1.\n\nRan the tests."
    assert (helped.status, helped.error, helped.drift) == ("needs_help", None, ())
    assert helped.escalation == "Which table owns refunds?"
    with project.store() as store:
        states = {i.id: i.state for i in EpicStore(store).list_items("E")}
    assert states == {"o-1": "done", "o-2": "needs_help"}
