"""Epic sessions on the agent driver: approvals by policy and by `poli approve`, and an agent
that goes idle without its report is nudged, then fails within the profile's idle limits."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import typing as t

import pytest

from politerm.agents.approval import get_pending, pending_keys
from politerm.config import load_config
from politerm.epic.go import EpicRunner, GoOptions
from politerm.store.epics import SessionStatus
from politerm.store.journal import JournalRow, JournalState, Workflow
from politerm.testing.retry import aretry_until
from tests.epic_helpers import Project, add_items

if t.TYPE_CHECKING:
    from politerm.store import RunStore

GO = 120.0  # bound on one `poli go` in these tests


def _append(project: Project, text: str) -> None:
    toml = project.root / "poli.toml"
    toml.write_text(toml.read_text() + text)


def _records(project: Project) -> list[t.Any]:
    from politerm.store.epics import EpicStore

    with project.store() as store:
        return EpicStore(store).list_records()


async def test_idle_without_report_is_nudged_then_fails(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agents = pathlib.Path(os.environ["XDG_CONFIG_HOME"]) / "politerm" / "agents"
    agents.mkdir(parents=True)
    (agents / "fake-plain-idle.toml").write_text(
        'extends = "fake-plain"\nidle_after = 1.0\nidle_nudges = 1\n'
    )
    project = Project(tmp_path / "repo")
    text = (project.root / "poli.toml").read_text()
    text = text.replace('agent = "fake-plain"', 'agent = "fake-plain-idle"')
    text = text.replace("fake-plain = [", "fake-plain-idle = [")
    (project.root / "poli.toml").write_text(text)
    add_items(project, ("E-1", "Stay SILENT", ()))
    async with asyncio.timeout(GO):
        result, _ = await project.go(summary=False)
    [record] = [r for r in _records(project) if r.kind == "session"]
    assert record.status == SessionStatus.ERROR.value
    assert "went idle without its poli:" in (record.error or "")
    assert "after each of 1 nudge(s)" in (record.error or "")
    prompts = [e["text"] for e in _log(project) if e["event"] == "prompt"]
    assert len(prompts) == 2 and prompts[1].startswith("If you are finished, print your report")
    assert result is not None


def _log(project: Project) -> list[dict[str, t.Any]]:
    from politerm.testing.fakeagent import read_log

    return read_log(project.log)


async def test_approval_answered_by_policy(tmp_path: pathlib.Path) -> None:
    project = Project(tmp_path / "repo")
    _append(project, '[routing]\napproval = "approve"\n')
    add_items(project, ("E-1", "APPROVE the change", ()))
    async with asyncio.timeout(GO):
        await project.go(summary=False)
    [record] = [r for r in _records(project) if r.kind == "session"]
    assert record.status == SessionStatus.SUCCESS.value, record.error
    assert (project.root / "approved.txt").read_text() == "ok\n"
    with project.store() as store:
        [event] = [e for e in store.list_events(limit=500) if e.kind == "approval"]
    assert event.data["by"] == "policy" and (event.agent or "").startswith("epic.")


async def test_approval_answered_with_poli_approve(tmp_path: pathlib.Path) -> None:
    project = Project(tmp_path / "repo")
    _append(project, '[routing]\napproval = "ask"\n')
    add_items(project, ("E-1", "APPROVE the change", ()))
    go = asyncio.create_task(project.go(summary=False))
    try:
        with project.store() as store:

            async def asked() -> bool:
                return bool(pending_keys(store))

            await aretry_until(asked, 60, what="the session's approval question")
            [key] = pending_keys(store)
            assert key.startswith("epic.")
            assert not (project.root / "approved.txt").exists()
            done = await asyncio.to_thread(project.poli, "approve", key)
            assert done.returncode == 0, done.stderr
            async with asyncio.timeout(GO):
                await go
            assert get_pending(store, key) is None
    finally:
        go.cancel()
    [record] = [r for r in _records(project) if r.kind == "session"]
    assert record.status == SessionStatus.SUCCESS.value, record.error
    assert (project.root / "approved.txt").read_text() == "ok\n"


# --- an exception mid-turn: the session's journal row does not stay in flight ------------


async def test_a_session_cut_by_an_exception_mid_turn_abandons_its_journal_row(
    tmp_path: pathlib.Path,
) -> None:
    # `poli go | head`: the status line's write fails once the prompt is in (BrokenPipeError).
    project = Project(tmp_path / "repo")
    add_items(project, ("E-1", "Stay SILENT", ()))

    def say(line: str) -> None:
        if line.endswith(": working"):
            raise BrokenPipeError(32, "Broken pipe")

    config = load_config(project.root, env={})
    with project.store() as store:
        runner = EpicRunner(
            config,
            store,
            GoOptions(epic="E", yes=True, interactive=False),
            cwd=project.root,
            say=say,
        )
        with pytest.raises(BrokenPipeError):
            async with asyncio.timeout(GO):
                await runner.go()
        [row] = [r for r in _rows(store) if r.workflow == "epic"]
    assert row.delivered is not None  # it was mid-turn: the prompt was in
    assert (row.state, row.outcome) == (
        JournalState.ABANDONED,
        "session cut short: BrokenPipeError [Errno 32] Broken pipe",
    )


async def test_a_session_cancelled_mid_turn_abandons_its_journal_row(
    tmp_path: pathlib.Path,
) -> None:
    project = Project(tmp_path / "repo")
    add_items(project, ("E-1", "Stay SILENT", ()))
    go = asyncio.create_task(project.go(summary=False))
    with project.store() as store:

        async def delivered() -> bool:
            return any(r.delivered for r in store.journal_open(workflow=Workflow.EPIC))

        try:
            await aretry_until(delivered, GO, what="the session's prompt delivered")
        finally:
            go.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await go
        [row] = [r for r in _rows(store) if r.workflow == "epic"]
    assert (row.state, row.outcome) == (JournalState.ABANDONED, "session cut short: CancelledError")


def _rows(store: RunStore) -> list[JournalRow]:
    """Every row of the journal of turns, oldest first."""
    with store._reading() as c:
        ids = [r[0] for r in c.execute("SELECT id FROM turn_journal ORDER BY id")]
    return [row for i in ids if (row := store.journal_row(i)) is not None]
