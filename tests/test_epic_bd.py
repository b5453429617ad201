"""Epic runs on bd: the adapter against a stand-in speaking bd's documented JSON, and
``poli go`` taking its items from bd when bd is on PATH."""

from __future__ import annotations

import json
import os
import pathlib
import sys
import typing as t

import pytest

from politerm.epic.items import BdSource
from politerm.testing.fakeagent import prompts
from tests.epic_helpers import Project

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
