"""Nothing outside the driver reaches into an :class:`AgentDriver`'s private parts.

Workflows, views and tests use the driver's public calls (state, approvals, blocks, turns);
its parts (tracker, approver, block reader, token meter, limiter, receipts, terminal) are
``_``-prefixed, and this check keeps every module outside ``driver/`` off them.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
DRIVER = ROOT / "src" / "politerm" / "driver"
# Tests of the block reader's and the transcript check's own bookkeeping on real CLIs:
# which copy of a block (screen or transcript) was seen has no public call.
INTERNALS = {"test_rendering.py", "test_transcripts.py", "test_receipts.py"}


def _private_names() -> set[str]:
    """Every ``_`` name an ``AgentDriver`` has: its parts and its private methods."""
    tree = ast.parse((DRIVER / "agent.py").read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "AgentDriver"]
    names = set()
    for node in ast.walk(cls):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and ast.unparse(node.value) == "self":
            names.add(node.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def _reaches(path: pathlib.Path, names: set[str]) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute) or node.attr not in names:
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue  # a class's own attribute of the same name
        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
    return found


def test_nothing_outside_the_driver_reaches_into_its_parts() -> None:
    names = _private_names()
    assert {"_term", "_tracker", "_approver", "_blocks", "_meter", "_limiter"} <= names
    files = [
        p
        for top in ("src", "tests", "bench")
        for p in sorted((ROOT / top).rglob("*.py"))
        if DRIVER not in p.parents and not (p.parent.name == "realcli" and p.name in INTERNALS)
    ]
    reached = [hit for path in files for hit in _reaches(path, names)]
    assert reached == [], "use the driver's public calls:\n" + "\n".join(reached)


def test_the_terminal_is_reached_only_through_named_calls() -> None:
    """No public attribute hands out the agent's pane or terminal: a caller says what it wants.

    (``host_gone()`` for the router's dead-server check, ``terminal_name`` for a step's pane
    record, ``pid()`` and ``stop()`` for a process check and a stop that keeps the screen.)
    """
    from politerm.driver import AgentDriver

    public = {n for n in dir(AgentDriver) if not n.startswith("_")}
    assert not {"pane", "term", "terminal"} & public
    assert {"host_gone", "terminal_name", "pid", "stop"} <= public


def test_no_workflow_waits_on_a_terminals_output_event() -> None:
    """Above the driver, a wait for an agent is ``driver.changed()``, never its output event."""
    below = {"driver", "tmux", "pty"}
    files = [
        p
        for p in sorted((ROOT / "src" / "politerm").rglob("*.py"))
        if not below & {q.name for q in p.parents} and p.name != "terminal.py"
    ]
    reached = [
        f"{p.relative_to(ROOT)}:{node.lineno}"
        for p in files
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.Attribute) and node.attr == "output_event"
    ]
    assert reached == [], "wait with driver.changed():\n" + "\n".join(reached)
