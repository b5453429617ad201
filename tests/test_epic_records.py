"""Epic session records: their migrations, export/import, and redaction on every write path
(real-format sample secrets through a real run on the fake agent)."""

from __future__ import annotations

import json
import logging
import pathlib
import sqlite3
import stat

import pytest

from politerm.epic.records import export_lines, parse_lines
from politerm.store import RunStore, db
from politerm.store.epics import EpicStore
from tests.epic_helpers import Project

# Real-format sample secrets (not live credentials), one per built-in pattern family.
SECRETS = {
    "openai": "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" + "Q7",
    "anthropic": "sk-ant-api03-" + "x7Yz9AbCdEfGhIjKlMnOpQrStUvWx" + "-Zz",
    "google": "AIza" + "SyD4bC7eF0hI3kL6nO9qR2tU5wX8zA1cE4g",
    "github": "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "github_pat": "github_pat_" + "11ABCDEFG0123456789_abcdefghijABCDEFGHIJ",
    "aws": "AKIA" + "IOSFODNN7EXAMPLE",
    "aws_secret": "aws_secret_access_key=" + "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "slack": "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "jwt": "eyJhbGciOiJIUzI1NiJ9." + "eyJzdWIiOiIxMjM0NTY3ODkwIn0." + "dozjgNryP4J3jVmNHl0w5N",
    "password": "password=" + "hunter2-Sup3r",
    "custom": "ACME-" + "TOKEN-9f8e7d6c5b4a",
}
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEA1x2y3z4AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcd\n"
    "-----END RSA PRIVATE KEY-----"
)
# What must never reach disk: every secret, and the middle line of the key block.
FORBIDDEN = [
    *[v.split("=", 1)[-1] for v in SECRETS.values()],
    "MIIEowIBAAKCAQEA1x2y3z4AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcd",
]


# --- records, migrations, export/import ---------------------------------------------------


@pytest.mark.parametrize("version", range(1, db.SCHEMA_VERSION))
def test_migration_from_every_older_version(tmp_path: pathlib.Path, version: int) -> None:
    path = tmp_path / "runs.sqlite3"
    conn = db.connect(path, migrations=db.MIGRATIONS[:version])
    conn.execute(
        "INSERT INTO tasks (id, request, state, max_rounds, created, updated)"
        " VALUES ('t1', 'fix it', 'done', 3, 1.0, 2.0)"
    )
    conn.close()
    with RunStore.open(path) as store:
        assert store.schema_version == db.SCHEMA_VERSION
        task = store.get_task("t1")
        assert task is not None
        assert task.request == "fix it"
        es = EpicStore(store)
        item = es.add_item("E", "after the upgrade")
        assert es.ready_items("E") == [item]
        run = es.create_run(
            "r1", epic="E", repo_root="/", source="builtin", agent="x", config_hash="h"
        )
        assert es.get_run("r1") == run


def test_export_import_roundtrip(tmp_path: pathlib.Path) -> None:
    from politerm.store.epics import SessionRecord

    with RunStore.open(tmp_path / "a.sqlite3") as store:
        es = EpicStore(store)
        for n in range(3):
            es.add_record(
                SessionRecord(
                    id=f"s{n}",
                    kind="session",
                    epic="E",
                    status="success",
                    queued=float(n),
                    finished=float(n) + 0.5,
                    item_id=f"i{n}",
                    commit_summary=f"commit {n}",
                    flags=("--x",),
                    drift=("d",),
                )
            )
        lines = list(export_lines(es))
    records = parse_lines(lines)
    with RunStore.open(tmp_path / "b.sqlite3") as store:
        es = EpicStore(store)
        assert es.import_records(records) == (3, 0)
        assert es.import_records(records) == (0, 3)
        assert [r.to_json() for r in es.list_records()] == [json.loads(x) for x in lines]
    with pytest.raises(Exception, match=r"x.jsonl:2: unknown record keys: bogus"):
        parse_lines([lines[0], json.dumps({"bogus": 1})], source="x.jsonl")


# --- redaction ----------------------------------------------------------------------------


def secret_scenario(tmp_path: pathlib.Path) -> pathlib.Path:
    """The agent prints every sample secret, and its report carries them too."""
    dump = "\n".join(f"{k}: {v}" for k, v in SECRETS.items())
    body = "\n".join(f"  {v}" for v in SECRETS.values())
    path = tmp_path / "leaky.toml"
    path.write_text(
        "mode = 'plain'\nthink_time = 0.1\n[[rules]]\n"
        "match = '(?s)SESSION_UUID=(?P<uuid>[0-9a-f-]{36})'\n"
        f"reply = '''Here are the keys:\n{dump}\n{PEM}\n"
        "```poli:{uuid}\nstatus: needs_help\n"
        f"commit_msg: Rotate {SECRETS['openai']}\ndetails: |\n{body}\n"
        f"escalation: leaked {SECRETS['github']} and {SECRETS['password']}\n```'''\n"
    )
    return path


async def test_redaction_on_every_write_path(tmp_path: pathlib.Path) -> None:
    project = Project(tmp_path / "repo", scenario=str(secret_scenario(tmp_path)))
    with project.store() as store:
        EpicStore(store).add_item(
            "E", f"Use {SECRETS['anthropic']}", body=f"with {SECRETS['aws_secret']}", item_id="s-1"
        )
    logfile = tmp_path / "poli.log"
    tee = tmp_path / "tee.log"
    real = logging.getLogRecordFactory()
    result, _ = await project.go(tee=tee, summary=False)
    assert logging.getLogRecordFactory() is real
    record = result.records[0]
    assert record.status == "needs_help"
    assert record.redaction.startswith("redacted (")
    assert "[REDACTED:openai-key]" in (record.commit_summary or "")
    # Logs written while a run is going are redacted too.
    from politerm.redact import Redactor, install_log_redaction

    restore = install_log_redaction(Redactor(["ACME-TOKEN-[0-9a-f]+"]))
    handler = logging.FileHandler(logfile)
    logging.getLogger("politerm").addHandler(handler)
    try:
        logging.getLogger("politerm.epic").warning("agent said %s", SECRETS["custom"])
    finally:
        restore()
        logging.getLogger("politerm").removeHandler(handler)
        handler.close()
    # Export through the CLI to a file.
    exported = tmp_path / "export.jsonl"
    out = project.poli("export", "--jsonl", "-o", str(exported))
    assert out.returncode == 0, out.stderr
    assert stat.S_IMODE(exported.stat().st_mode) == 0o600
    logged = project.poli("log", "--json")
    assert logged.returncode == 0
    # Import a file that still carries raw secrets (an older politerm's export).
    raw = dict(json.loads(exported.read_text().splitlines()[0]))
    raw |= {"id": "imported", "commit_body": " ".join(SECRETS.values())}
    (tmp_path / "raw.jsonl").write_text(json.dumps(raw) + "\n")
    imported = project.poli("import", str(tmp_path / "raw.jsonl"))
    assert imported.stdout.strip() == "1 record(s) imported, 0 already present"
    # Now look at every byte politerm wrote.
    # Every file but the test's own inputs (scenario, raw import file, fake agent's log).
    mine = {
        tmp_path / "leaky.toml",
        tmp_path / "raw.jsonl",
        project.log,
        project.root / "poli.toml",
    }
    paths = [p for p in tmp_path.rglob("*") if p.is_file() and p not in mine]
    paths = [p for p in paths if ".git" not in p.parts and "home" not in p.parts]
    wrote = {p.name for p in paths}
    assert {"runs.sqlite3", "runs.sqlite3.audit.jsonl", "tee.log", "export.jsonl"} <= wrote
    assert "poli.log" in wrote
    sqlite3.connect(project.store_path).execute("PRAGMA wal_checkpoint(TRUNCATE)").close()
    for p in paths:
        data = p.read_bytes()
        for secret in FORBIDDEN:
            assert secret.encode() not in data, f"{secret[:12]}... reached {p}"
    for out_text in (logged.stdout, out.stdout):
        for secret in FORBIDDEN:
            assert secret not in out_text
    tee_text = tee.read_text()
    assert "[REDACTED:private-key]" in tee_text
    assert "[REDACTED:custom]" in tee_text
    assert stat.S_IMODE(tee.stat().st_mode) == 0o600
    for p in (project.store_path, project.store_path.with_name("runs.sqlite3.audit.jsonl")):
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
