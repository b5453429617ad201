"""The status view of many agents draws what a screen can show."""

from __future__ import annotations

import io
import typing as t

import pytest
from rich.console import Console

from politerm._internal.sanitize import escape_controls
from politerm.status import collect, render
from politerm.store import RunStore
from politerm.store.journal import JournalState, Serves, Workflow

if t.TYPE_CHECKING:
    import pathlib


def _text(renderable: t.Any) -> str:
    out = io.StringIO()
    Console(file=out, width=160, height=1000, color_system=None).print(renderable)
    return out.getvalue()


def test_a_capped_agents_table_draws_that_many_rows_and_counts_the_rest(
    tmp_path: pathlib.Path,
) -> None:
    with RunStore.open(tmp_path / "runs.sqlite3") as store:
        with store.batch():
            for i in range(60):
                store.upsert_agent(
                    f"IDLE{i:02d}", session="s", pane_id=f"%{i}", command="x", cwd=".",
                    profile="fake-plain", resume_command=None,
                )  # fmt: skip
        data = collect(store, events=0)
    every = _text(render(data))
    assert sum(f"IDLE{i:02d}" in every for i in range(60)) == 60
    assert "more" not in every
    capped = _text(render(data, max_agents=10))
    drawn = [i for i in range(60) if f"IDLE{i:02d}" in capped]
    assert drawn == list(range(9))
    assert "… 51 more" in capped and "poli status --json lists all" in capped
    # A cap the agents fit under changes nothing.
    assert _text(render(data, max_agents=60)) == every


def test_prompts_in_flight_are_listed_from_the_journal_of_turns(tmp_path: pathlib.Path) -> None:
    with RunStore.open(tmp_path / "runs.sqlite3") as store:
        store.upsert_agent(
            "W1", session="s", pane_id="%1", command="x", cwd=".", profile="fake-plain",
            resume_command=None,
        )  # fmt: skip
        serves = Serves(Workflow.PIPELINE, "pipeline-step", ("run-1", 2))
        open_row = store.journal_hand("W1", serves, text="do step 2", nonce="n2")
        done = store.journal_hand("W1", Serves(Workflow.EPIC, "session_records", ("s1",)), text="x")
        store.journal_move(done.id, JournalState.FAILED, outcome="stranded")
        data = collect(store, events=0)
    assert [(t["id"], t["state"], t["record_key"]) for t in data["turns"]] == [
        (open_row.id, "handed", ["run-1", 2])
    ]
    shown = _text(render(data))
    assert "prompts in flight" in shown and "pipeline-step run-1/2" in shown


def test_a_capped_table_escapes_the_rows_it_draws_not_every_agent(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A live redraw at 500 agents escaped every agent's row for the 40 it draws; the
    # escaping now costs the same for 20 agents as for 200 (counted, not timed).
    calls = [0]

    def counted(text: str) -> str:
        calls[0] += 1
        return escape_controls(text)

    monkeypatch.setattr("politerm.status.escape_controls", counted)  # counting, not changing
    counts = []
    for n in (20, 200):
        with RunStore.open(tmp_path / f"runs{n}.sqlite3") as store:
            with store.batch():
                for i in range(n):
                    store.upsert_agent(
                        f"A{i:03d}", session="s", pane_id=f"%{i}", command="x", cwd=".",
                        profile="fake-plain", resume_command=None,
                    )  # fmt: skip
            agents = store.list_agents()
            data = collect(store, events=0, agents=agents)
        calls[0] = 0
        text = _text(render(data, max_agents=10))
        counts.append(calls[0])
        assert f"… {n - 9} more" in text
    assert counts[0] == counts[1] > 0
