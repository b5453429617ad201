"""Epic runs end to end on the scripted fake agent in real PTYs: the work queue, ``poli go``,
``--resume``, and the chunked omnibus summary. The bd adapter is in test_epic_bd.py; session
records, their migrations and redaction on every write path in test_epic_records.py."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import stat
import sys
import typing as t

import pytest

from politerm.config import load_config
from politerm.epic.go import EpicRunner, GoOptions
from politerm.epic.summary import chunk_texts
from politerm.errors import WorkItemError
from politerm.store.epics import EpicStore, RecordKind, SessionStatus, WorkState
from politerm.testing.fakeagent import prompts
from tests.epic_helpers import Project, add_items


@pytest.fixture
def project(tmp_path: pathlib.Path) -> Project:
    return Project(tmp_path / "repo")


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
        # one row per session's prompt in the journal of turns; each record points to its own
        for r in result.records:
            rows = store.journal_of("session_records", (r.id,))
            assert [(x.workflow, x.state.value, x.outcome) for x in rows] == [
                ("epic", "ended", "answered")
            ]
            with store._reading() as c:
                linked = c.execute(
                    "SELECT turn_id FROM session_records WHERE id = ?", (r.id,)
                ).fetchone()[0]
            assert linked == rows[0].id
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
