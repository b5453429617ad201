"""Epic runs end to end on the scripted fake agent in real PTYs: the work queue, ``poli go``,
``--resume``, the bd adapter (against a stand-in speaking bd's JSON), session records and
their migrations, redaction on every write path, and the chunked omnibus summary."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pathlib
import sqlite3
import stat
import subprocess
import sys
import textwrap
import typing as t

import pytest

import politerm
from politerm.config import load_config
from politerm.epic.go import EpicRunner, GoOptions, GoResult
from politerm.epic.items import BdSource
from politerm.epic.records import export_lines, parse_lines
from politerm.epic.summary import chunk_texts
from politerm.errors import WorkItemError
from politerm.store import RunStore, db
from politerm.store.epics import EpicStore, RecordKind, SessionStatus, WorkState
from politerm.testing.fakeagent import prompts

SRC = pathlib.Path(politerm.__file__).resolve().parent.parent

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


class Project:
    """A git work tree with a poli.toml whose epic agent is the fake agent in plain mode."""

    def __init__(
        self,
        root: pathlib.Path,
        scenario: str = "epic-items",
        source: str = "builtin",
        socket: str = "poli-test-unused",
    ) -> None:
        self.root = root
        self.log = root / "fakeagent.jsonl"
        root.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        argv = [sys.executable, "-m", "politerm.testing.fakeagent", "--mode", "plain"]
        argv += ["--scenario", scenario, "--log", str(self.log)]
        (root / "poli.toml").write_text(
            textwrap.dedent(
                f"""
                [store]
                path = "state/runs.sqlite3"
                [timeouts]
                ready = 20
                [tmux]
                socket = "{socket}"
                [epic]
                agent = "fake-plain"
                source = "{source}"
                grace = 10
                session_timeout = 30
                [epic.commands]
                fake-plain = {json.dumps(argv)}
                [redact]
                patterns = ['ACME-TOKEN-[0-9a-f]+']
                """
            )
        )

    @property
    def store_path(self) -> pathlib.Path:
        return self.root / "state" / "runs.sqlite3"

    def store(self) -> RunStore:
        return RunStore.open(self.store_path)

    async def go(self, epic: str = "E", **options: t.Any) -> tuple[GoResult, list[str]]:
        config = load_config(self.root, env={})
        lines: list[str] = []
        opts = GoOptions(epic=epic, yes=True, interactive=False, **options)
        with self.store() as store:
            runner = EpicRunner(config, store, opts, cwd=self.root, say=lines.append)
            result = await runner.go()
        return result, lines

    def poli(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
        }
        return subprocess.run(
            [sys.executable, "-m", "politerm", *args],
            cwd=self.root,
            env=env,
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


@pytest.fixture
def project(tmp_path: pathlib.Path) -> Project:
    return Project(tmp_path / "repo")


def add_items(project: Project, *specs: tuple[str, str, tuple[str, ...]]) -> None:
    with project.store() as store:
        es = EpicStore(store)
        for item_id, title, after in specs:
            es.add_item("E", title, item_id=item_id, depends_on=after)


# --- the built-in queue -------------------------------------------------------------------


def test_queue_ready_means_unblocked(project: Project) -> None:
    with project.store() as store:
        es = EpicStore(store)
        es.add_item("E", "low", item_id="low", priority=4)
        es.add_item("E", "high", item_id="high", priority=0)
        es.add_item("E", "blocked", item_id="blocked", priority=0, depends_on=["low"])
        es.add_item("F", "other epic", item_id="f1")
        assert [i.id for i in es.ready_items("E")] == ["high", "low"]
        es.set_item_state("low", WorkState.DONE)
        assert [i.id for i in es.ready_items("E")] == ["high", "blocked"]
        es.set_item_state("high", WorkState.NEEDS_HELP, note="why")
        assert [i.id for i in es.ready_items("E")] == ["blocked"]
        with pytest.raises(WorkItemError, match="does not exist"):
            es.add_item("E", "x", depends_on=["nope"])
        with pytest.raises(WorkItemError, match="already exists"):
            es.add_item("E", "x", item_id="low")
        with pytest.raises(WorkItemError, match="priority"):
            es.add_item("E", "x", priority=9)


def test_work_cli(project: Project) -> None:
    empty = project.poli("export")
    assert (empty.returncode, empty.stdout) == (0, "")
    assert empty.stderr == (
        "poli: no session records to export; `poli go EPIC` records one per session\n"
    )
    none_of = project.poli("export", "--epic", "E")
    assert none_of.stderr.startswith("poli: no session records of epic E to export")
    assert project.poli("work", "add", "E", "First", "--id", "w-1", "-p", "1").stdout == "w-1\n"
    assert project.poli("work", "add", "E", "Second", "--after", "w-1").stdout == "E-2\n"
    listed = project.poli("work", "list", "E", "--ready", "--json")
    assert [i["id"] for i in json.loads(listed.stdout)] == ["w-1"]
    shown = json.loads(project.poli("work", "show", "E-2").stdout)
    assert shown["depends_on"] == ["w-1"]
    assert project.poli("work", "done", "w-1").stdout == "w-1: done\n"
    assert "E-2" in project.poli("work", "list", "E", "--ready").stdout
    bad = project.poli("work", "show", "nope")
    assert bad.returncode == 1
    assert bad.stderr.strip() == "poli: no work item 'nope'"


# --- poli go --------------------------------------------------------------------------------


async def test_epic_of_three_items_one_needs_help(project: Project) -> None:
    add_items(
        project,
        ("a-1", "First thing", ()),
        ("a-2", "NEEDS HELP with the second", ()),
        ("a-3", "Third after the first", ("a-1",)),
    )
    result, lines = await project.go()
    assert result.state == "done"
    assert [(r.item_id, r.status) for r in result.records] == [
        ("a-1", "success"),
        ("a-2", "needs_help"),
        ("a-3", "success"),
    ]
    first, helped, _ = result.records
    assert first.commit_summary == "Do a-1: First thing"
    assert first.commit_body == "Changed the code for a-1.\nRan the tests."
    assert first.drift == ()
    assert helped.escalation is not None
    assert "API key" in helped.escalation
    assert any("not retried" in line for line in lines)
    for r in result.records:
        assert r.run_id == result.run_id
        assert r.agent_binary == sys.executable
        assert r.flags[:2] == ("-m", "politerm.testing.fakeagent")
        assert r.model is None  # python's -m names the program, not a model
        assert r.queued <= (r.started or 0) <= (r.finished or 0)
        assert r.config_hash and r.repo_root == str(project.root)
        assert r.transcript_path and pathlib.Path(r.transcript_path).is_file()
        assert stat.S_IMODE(pathlib.Path(r.transcript_path).stat().st_mode) == 0o600
    # The summary was written at the end, from every record.
    assert result.summary is not None
    assert result.summary.kind == RecordKind.SUMMARY.value
    assert result.summary.commit_summary == "Summary part 1 of 1"
    assert result.summary.model is None
    summary_log = pathlib.Path(result.summary.transcript_path or "")
    assert summary_log.is_file(), result.summary.transcript_path
    assert "item E:summary" in summary_log.read_text()
    reported = sum(1 for r in result.records if r.commit_summary)
    assert f"epic E: summarizing {reported} record(s) with a report" in "\n".join(lines)
    with project.store() as store:
        es = EpicStore(store)
        assert {i.id: i.state for i in es.list_items("E")} == {
            "a-1": "done",
            "a-2": "needs_help",
            "a-3": "done",
        }
    # Each session got one prompt; the needs_help item is not retried by a second run.
    sent = [p.decode() for p in prompts(project.log)]
    assert sum("Work item a-2 " in p for p in sent) == 1
    again, _ = await project.go(summary=False)
    assert again.records == []
    assert sum("Work item a-2 " in p.decode() for p in prompts(project.log)) == 1


async def test_bad_reports_stop_the_session_at_once(project: Project) -> None:
    add_items(
        project,
        ("b-1", "WRONG UUID please", ()),
        ("b-2", "NO ESCALATION please", ()),
        ("b-3", "CRASH please", ()),
        ("b-4", "DRIFT please", ()),
        ("b-5", "CONTRADICT please", ()),
    )
    result, _ = await project.go(summary=False)
    by_item = {r.item_id: r for r in result.records}
    assert by_item["b-1"].status == "error"
    assert "report fence for session 00000000" in (by_item["b-1"].error or "")
    assert by_item["b-2"].status == "error"
    assert "needs_help without an escalation" in (by_item["b-2"].error or "")
    assert by_item["b-3"].status == "error"
    assert "exited" in (by_item["b-3"].error or "")
    # Stopped at once: the agent was killed by us (SIGTERM), not left to run to a timeout.
    for r in (by_item["b-1"], by_item["b-2"]):
        assert (r.finished or 0) - (r.started or 0) < 10
    exits = [e for e in _log(project) if e["event"] == "exit"]
    assert exits and all(e["reason"] == "SIGTERM" for e in exits)
    assert by_item["b-4"].status == "success"
    assert by_item["b-4"].drift == (
        "commit_msg: report says 'Do b-4', footer says 'Did b-4 in two goes.'",
    )
    # A footer status contradicting the fence stops the session, as obi does.
    assert by_item["b-5"].status == "error"
    assert "the legacy footer's is 'needs_help'" in (by_item["b-5"].error or "")
    with project.store() as store:
        states = {i.id: i.state for i in EpicStore(store).list_items("E")}
    # Failed sessions give their item back (to be tried again with --resume).
    assert states == {"b-1": "open", "b-2": "open", "b-3": "open", "b-4": "done", "b-5": "open"}


def _log(project: Project) -> list[dict[str, t.Any]]:
    from politerm.testing.fakeagent import read_log

    return read_log(project.log)


async def test_resume_skips_items_finished_in_that_run(project: Project) -> None:
    add_items(project, ("r-1", "First", ()), ("r-2", "CRASH once", ()), ("r-3", "Third", ()))
    first, _ = await project.go(summary=False)
    assert [(r.item_id, r.status) for r in first.records] == [
        ("r-1", "success"),
        ("r-2", "error"),
        ("r-3", "success"),
    ]
    assert first.exit_code == 1
    assert first.run_id is not None
    with project.store() as store:
        es = EpicStore(store)
        # As if the run died between recording r-1 and closing it in the queue.
        es.set_item_state("r-1", WorkState.OPEN)
        es.set_item_state("r-2", WorkState.OPEN)
    before = len(prompts(project.log))
    resumed, lines = await project.go(resume=first.run_id, summary=False)
    assert resumed.run_id == first.run_id
    assert any("1 item(s) already finished" in line or "2 item(s)" in line for line in lines)
    # r-1 (finished in that run) is skipped; only the crashed r-2 runs again.
    assert [r.item_id for r in resumed.records] == ["r-2"]
    new = [p.decode() for p in prompts(project.log)[before:]]
    assert len(new) == 1
    assert "Work item r-2 " in new[0]
    with project.store() as store:
        run = EpicStore(store).get_run(first.run_id)
        assert run is not None
        assert run.state == "done"


async def test_resume_unknown_run(project: Project) -> None:
    from politerm.errors import EpicError

    with pytest.raises(EpicError, match="no run 'nope'"):
        await project.go(resume="nope")


def test_go_cli_dry_run_and_non_tty(project: Project) -> None:
    add_items(project, ("d-1", "Dry one", ()))
    dry = project.poli("go", "E", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    fake = f"{sys.executable} -m politerm.testing.fakeagent --mode plain"
    assert dry.stdout.startswith(f"agent fake-plain: {fake} --scenario epic-items"), dry.stdout
    assert f"each session runs that in a headless PTY, in {project.root}" in dry.stdout
    assert "Work item d-1 (priority 2): Dry one" in dry.stdout
    assert "```poli:<SESSION_UUID>" in dry.stdout
    refused = project.poli("go", "E", input="")
    assert refused.returncode == 2
    assert "pass --yes" in refused.stderr
    ran = project.poli("go", "E", "--yes", "--no-interactive", "--no-summary")
    assert ran.returncode == 0, ran.stderr
    assert "d-1: success: Do d-1: Dry one" in ran.stderr
    log = json.loads(project.poli("log", "--json", "--epic", "E").stdout)
    assert [(r["item_id"], r["status"]) for r in log] == [("d-1", "success")]
    assert project.poli("log").stdout.count("Do d-1") == 1


async def test_go_in_tmux_panes(tmp_path: pathlib.Path) -> None:
    socket = f"poli-epic-{os.getpid()}-{tmp_path.name[-20:]}"
    project = Project(tmp_path / "repo", socket=socket)
    add_items(project, ("m-1", "In a pane", ()), ("m-2", "NEEDS HELP in a pane", ()))
    try:
        result, lines = await project.go(tmux=True, summary=False)
    finally:
        kill = await asyncio.create_subprocess_exec(
            "tmux", "-L", socket, "kill-server", stderr=asyncio.subprocess.DEVNULL
        )
        await kill.wait()
    assert [(r.item_id, r.status) for r in result.records] == [
        ("m-1", "success"),
        ("m-2", "needs_help"),
    ]
    assert any("in tmux pane %" in line for line in lines)


# --- bd -------------------------------------------------------------------------------------

BD_STANDIN = '''#!{python}
"""A stand-in for bd speaking its documented --json shapes (arrays of issues)."""
import json, pathlib, sys
root = pathlib.Path.cwd() / ".beads"
db = root / "issues.json"
issues = json.loads(db.read_text())
args = sys.argv[1:]
with (root / "calls.jsonl").open("a") as log:
    log.write(json.dumps(args) + "\\n")
if "--json" not in args:
    sys.exit("stand-in only speaks --json")
args.remove("--json")
cmd, rest = args[0], args[1:]
def opt(name):
    return rest[rest.index(name) + 1] if name in rest else None
def by_id(i):
    for issue in issues:
        if issue["id"] == i:
            return issue
    sys.exit(f"Error: issue {{i}} not found")
if cmd == "ready":
    closed = {{i["id"] for i in issues if i["status"] == "closed"}}
    out = [i for i in issues if i["status"] == "open" and i.get("parent") == opt("--parent")
           and all(d["depends_on_id"] in closed for d in i.get("dependencies", []))]
    out.sort(key=lambda i: i["priority"])
elif cmd == "show":
    out = [by_id(rest[0])]
elif cmd == "update":
    issue = by_id(rest[0])
    issue["status"] = opt("--status") or issue["status"]
    if opt("--notes"):
        issue["notes"] = opt("--notes")
    out = [issue]
elif cmd == "close":
    issue = by_id(rest[0])
    issue["status"] = "closed"
    issue["close_reason"] = opt("--reason")
    out = [issue]
else:
    sys.exit(f"unknown command {{cmd}}")
db.write_text(json.dumps(issues))
print(json.dumps(out))
'''


def _issue(i: str, title: str, prio: int, deps: tuple[str, ...] = ()) -> dict[str, t.Any]:
    return {
        "id": i,
        "title": title,
        "description": f"Description of {i}",
        "status": "open",
        "priority": prio,
        "issue_type": "task",
        "parent": "bd-epic",
        "created_at": "2025-01-10T10:00:00Z",
        "dependencies": [{"depends_on_id": d, "type": "blocks"} for d in deps],
    }


def install_bd(root: pathlib.Path, bindir: pathlib.Path) -> pathlib.Path:
    beads = root / ".beads"
    beads.mkdir()
    epic = _issue("bd-epic", "The epic", 1) | {"issue_type": "epic", "parent": None}
    issues = [
        epic,
        _issue("bd-a1", "Later thing", 3, ("bd-a2",)),
        _issue("bd-a2", "Urgent thing", 0),
        _issue("bd-a3", "NEEDS HELP thing", 2),
    ]
    (beads / "issues.json").write_text(json.dumps(issues))
    bindir.mkdir()
    bd = bindir / "bd"
    bd.write_text(BD_STANDIN.format(python=sys.executable))
    bd.chmod(0o755)
    return beads


def test_bd_adapter_against_standin(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    install_bd(root, tmp_path / "bin")
    bd = BdSource(str(tmp_path / "bin" / "bd"), root)
    ready = bd.ready("bd-epic")
    assert [(i.id, i.priority, i.body) for i in ready] == [
        ("bd-a2", 0, "Description of bd-a2"),
        ("bd-a3", 2, "Description of bd-a3"),
    ]
    assert bd.epic_info("bd-epic") == ("The epic", "Description of bd-epic")
    bd.claim(ready[0])
    bd.close(ready[0], "Did it")
    assert [i.id for i in bd.ready("bd-epic")] == ["bd-a3", "bd-a1"]
    bd.needs_help(ready[1], "a person must decide")
    assert [i.id for i in bd.ready("bd-epic")] == ["bd-a1"]
    calls = [json.loads(x) for x in (root / ".beads" / "calls.jsonl").read_text().splitlines()]
    assert calls[0] == ["ready", "--parent", "bd-epic", "--json"]
    assert ["update", "bd-a2", "--status", "in_progress", "--json"] in calls
    assert ["close", "bd-a2", "--reason", "Did it", "--json"] in calls
    note = "needs help: a person must decide"
    assert ["update", "bd-a3", "--status", "blocked", "--notes", note, "--json"] in calls


async def test_go_uses_bd_when_on_path(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = Project(tmp_path / "repo", source="auto")
    beads = install_bd(project.root, tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    result, lines = await project.go("bd-epic", summary=False)
    assert "items from bd" in lines[0]
    assert [(r.item_id, r.status) for r in result.records] == [
        ("bd-a2", "success"),
        ("bd-a3", "needs_help"),
        ("bd-a1", "success"),
    ]
    issues = {i["id"]: i for i in json.loads((beads / "issues.json").read_text())}
    assert issues["bd-a2"]["status"] == "closed"
    assert issues["bd-a2"]["close_reason"] == "Do bd-a2: Urgent thing"
    assert issues["bd-a3"]["status"] == "blocked"
    # The epic prompt layer came from `bd show`.
    assert "The epic" in prompts(project.log)[0].decode()


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


# --- the omnibus summary ------------------------------------------------------------------


def test_chunking_packs_in_order_and_splits_long_texts() -> None:
    texts = [f"record {n} " + "x" * 30 for n in range(10)]
    chunks = chunk_texts(texts, 100)
    assert all(len(c) <= 100 for c in chunks)
    assert "".join(chunks).count("record") == 10
    assert chunks[0].startswith("record 0")
    long = chunk_texts(["y" * 250], 100)
    assert [len(c) for c in long] == [100, 100, 50]


async def test_summary_chunks_then_combines(project: Project) -> None:
    from politerm.store.epics import SessionRecord

    with project.store() as store:
        es = EpicStore(store)
        for n in range(8):
            es.add_record(
                SessionRecord(
                    id=f"rec-{n}",
                    kind="session",
                    epic="E",
                    status="success",
                    queued=float(n),
                    finished=float(n),
                    item_id=f"E-{n}",
                    commit_summary=f"Commit number {n}",
                    commit_body=f"Body {n}: " + "words " * 20,
                )
            )
        # A session that ended without a report has nothing to summarize: not counted.
        es.add_record(
            SessionRecord(
                id="rec-err", kind="session", epic="E", status="error", queued=9.0, error="x"
            )
        )
    limit = 1100
    config = load_config(project.root, env={})
    lines: list[str] = []
    with project.store() as store:
        opts = GoOptions(epic="E", yes=True, interactive=False, chunk_chars=limit)
        runner = EpicRunner(config, store, opts, cwd=project.root, say=lines.append)
        summary = await runner.summarize()
    sent = [p.decode() for p in prompts(project.log)]
    parts = [p for p in sent if p.startswith("SUMMARIZE")]
    combines = [p for p in sent if p.startswith("COMBINE")]
    assert len(parts) >= 3
    assert len(combines) == 1
    assert all(len(p) <= limit for p in sent)
    # Newest first: the first chunk starts with the newest record.
    assert "[E-7]" in parts[0]
    assert parts[0].index("[E-7]") < parts[0].index("[E-6]")
    assert f"part 1 of {len(parts)}" in parts[0]
    assert summary.kind == "summary"
    assert summary.commit_summary == f"Epic narrative from {len(parts)} partial summaries"
    assert "epic E: summarizing 8 record(s) with a report (1 without one left out)" in lines
    # One transcript for the summary: every summarizer session's output, in order.
    log = pathlib.Path(summary.transcript_path or "").read_text()
    assert log.count("===== poli session ") == len(parts) + len(combines)
    with project.store() as store:
        kinds = [r.kind for r in EpicStore(store).list_records(epic="E")]
    assert kinds.count("summary") == 1
    result = project.poli("summarize", "E", "--no-interactive", "--chunk-chars", "5000")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Summary part 1 of 1")


async def test_summary_after_go_and_no_summary(project: Project) -> None:
    add_items(project, ("n-1", "One", ()))
    result, _ = await project.go(summary=False)
    assert result.summary is None
    assert SessionStatus(result.records[0].status) is SessionStatus.SUCCESS
