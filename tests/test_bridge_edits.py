"""File modifications on real files: byte-exact, newline-preserving, errors that say where."""

from __future__ import annotations

import typing as t

import pytest

from politerm.bridge.edits import plan_edits, write_planned
from politerm.bridge.executor import apply_edits_exactly_once
from politerm.bridge.models import AgentActionDetails, FileAction, FileModificationInstruction, Tool
from politerm.errors import EditError

if t.TYPE_CHECKING:
    import pathlib


def mod(**kw: t.Any) -> FileModificationInstruction:
    return FileModificationInstruction.model_validate({"file_path": "f.txt", **kw})


def apply(
    tmp_path: pathlib.Path, before: bytes | None, *mods: FileModificationInstruction
) -> bytes:
    path = tmp_path / "f.txt"
    if before is not None:
        path.write_bytes(before)
    write_planned(plan_edits(mods, tmp_path))
    return path.read_bytes()


class EditCase(t.NamedTuple):
    test_id: str
    before: bytes
    mod: dict[str, t.Any]
    after: bytes


CASES: list[EditCase] = [
    EditCase(
        "replace-content",
        b"old\n",
        {"action": "replace_content", "content": "new\r\nx"},
        b"new\r\nx",
    ),
    EditCase("append", b"a\nb\n", {"action": "append_content", "content": "c\n"}, b"a\nb\nc\n"),
    EditCase(
        "append-no-final-newline", b"a\nb", {"action": "append_content", "content": "c"}, b"a\nb\nc"
    ),
    EditCase(
        "append-crlf",
        b"a\r\n",
        {"action": "append_content", "content": "b\nc\n"},
        b"a\r\nb\r\nc\r\n",
    ),
    EditCase(
        "insert-before",
        b"a\nb\nc\n",
        {"action": "insert_before_line", "line_marker": "b", "content": "X"},
        b"a\nX\nb\nc\n",
    ),
    EditCase(
        "insert-after",
        b"a\nb\nc\n",
        {"action": "insert_after_line", "line_marker": "b", "content": "X\nY"},
        b"a\nb\nX\nY\nc\n",
    ),
    EditCase(
        "insert-after-last-unterminated",
        b"a\nb",
        {"action": "insert_after_line", "line_marker": "b", "content": "X"},
        b"a\nb\nX",
    ),
    EditCase(
        "marker-twice-first",
        b"k=1\nz\nk=2\n",
        {"action": "insert_after_line", "line_marker": "k=", "content": "X"},
        b"k=1\nX\nz\nk=2\n",
    ),
    EditCase(
        "marker-twice-second",
        b"k=1\nz\nk=2\n",
        {
            "action": "insert_before_line",
            "line_marker": "k=",
            "content": "X",
            "marker_occurrence": 2,
        },
        b"k=1\nz\nX\nk=2\n",
    ),
    EditCase(
        "marker-twice-all",
        b"k=1\nz\nk=2\n",
        {
            "action": "insert_after_line",
            "line_marker": "k=",
            "content": "X",
            "marker_occurrence": "all",
        },
        b"k=1\nX\nz\nk=2\nX\n",
    ),
    EditCase(
        "crlf-insert",
        b"a\r\nb\r\nc\r\n",
        {"action": "insert_after_line", "line_marker": "b", "content": "X\nY\n"},
        b"a\r\nb\r\nX\r\nY\r\nc\r\n",
    ),
    EditCase(
        "delete-lines",
        b"1\n2\n3\n4\n",
        {"action": "delete_lines", "start_line_number": 2, "end_line_number": 3},
        b"1\n4\n",
    ),
    EditCase(
        "delete-last-unterminated",
        b"1\n2\n3",
        {"action": "delete_lines", "start_line_number": 3, "end_line_number": 3},
        b"1\n2",
    ),
    EditCase(
        "replace-lines-crlf",
        b"1\r\n2\r\n3\r\n",
        {
            "action": "replace_lines",
            "start_line_number": 2,
            "end_line_number": 2,
            "replacement_content": "two\nTWO",
        },
        b"1\r\ntwo\r\nTWO\r\n3\r\n",
    ),
    EditCase(
        "replace-lines-5-10",
        b"".join(b"%d\n" % i for i in range(1, 13)),
        {"action": "replace_lines", "start_line_number": 5, "end_line_number": 10, "content": "Y"},
        b"1\n2\n3\n4\nY\n11\n12\n",
    ),
    EditCase(
        "untouched-bytes-stay",
        b"a\x0cb\n\xe2\x80\xa8x\n\tc \n",
        {"action": "insert_after_line", "line_marker": "x", "content": "N"},
        b"a\x0cb\n\xe2\x80\xa8x\nN\n\tc \n",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.test_id for c in CASES])
def test_each_action_on_a_real_file(tmp_path: pathlib.Path, case: EditCase) -> None:
    assert apply(tmp_path, case.before, mod(**case.mod)) == case.after


class ErrorCase(t.NamedTuple):
    test_id: str
    before: bytes | None
    mod: dict[str, t.Any]
    error: str


ERRORS: list[ErrorCase] = [
    ErrorCase(
        "insert-into-missing-file",
        None,
        {"action": "insert_after_line", "line_marker": "a", "content": "x"},
        "insert_after_line into a file that does not exist",
    ),
    ErrorCase(
        "replace-missing-file",
        None,
        {"action": "replace_content", "content": "x"},
        "set create_if_missing",
    ),
    ErrorCase(
        "marker-absent",
        b"a\nb\n",
        {"action": "insert_after_line", "line_marker": "zzz", "content": "x"},
        "no line contains the marker 'zzz'",
    ),
    ErrorCase(
        "occurrence-too-high",
        b"m\nm\n",
        {"action": "insert_after_line", "line_marker": "m", "content": "x", "marker_occurrence": 3},
        "appears 2 time(s), not 3",
    ),
    ErrorCase(
        "range-past-end",
        b"1\n2\n",
        {"action": "delete_lines", "start_line_number": 2, "end_line_number": 5},
        "bad line range 2-5: the file has 2 line(s)",
    ),
    ErrorCase(
        "bad-utf8",
        b"ok\n\xff\xfe\n",
        {"action": "append_content", "content": "x"},
        "not valid UTF-8 (byte 0xff at offset 3)",
    ),
]


@pytest.mark.parametrize("case", ERRORS, ids=[c.test_id for c in ERRORS])
def test_impossible_edits_fail_with_where_and_write_nothing(
    tmp_path: pathlib.Path, case: ErrorCase
) -> None:
    path = tmp_path / "f.txt"
    if case.before is not None:
        path.write_bytes(case.before)
    with pytest.raises(EditError) as info:
        plan_edits([mod(**case.mod)], tmp_path)
    assert case.error in str(info.value)
    assert str(path) in str(info.value)
    assert (path.read_bytes() if path.exists() else None) == case.before


def test_create_if_missing_makes_a_private_file(tmp_path: pathlib.Path) -> None:
    out = apply(
        tmp_path, None, mod(action="replace_content", content="hi\n", create_if_missing=True)
    )
    assert out == b"hi\n"
    assert (tmp_path / "f.txt").stat().st_mode & 0o777 == 0o600


def test_several_edits_apply_in_order_and_a_late_failure_changes_nothing(
    tmp_path: pathlib.Path,
) -> None:
    (tmp_path / "g.txt").write_bytes(b"g\n")
    (tmp_path / "f.txt").write_bytes(b"a\nb\n")
    good = [
        mod(action="append_content", content="c\n"),
        mod(action="insert_before_line", line_marker="c", content="bb"),
    ]
    bad = FileModificationInstruction(
        file_path="g.txt", action=FileAction.DELETE_LINES, start_line_number=1, end_line_number=9
    )
    with pytest.raises(EditError, match=r"file_modifications\[2\]"):
        plan_edits([*good, bad], tmp_path)
    assert (tmp_path / "f.txt").read_bytes() == b"a\nb\n"
    write_planned(plan_edits(good, tmp_path))
    assert (tmp_path / "f.txt").read_bytes() == b"a\nb\nbb\nc\n"


def test_file_mode_is_kept(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "f.txt"
    path.write_bytes(b"a\n")
    path.chmod(0o751)
    apply(tmp_path, None, mod(action="append_content", content="b"))
    assert path.stat().st_mode & 0o777 == 0o751


def _action(tmp_path: pathlib.Path, mods: list[FileModificationInstruction]) -> AgentActionDetails:
    planned = plan_edits(mods, tmp_path)
    return AgentActionDetails(
        tool_to_call=Tool.EDIT_FILE,
        file_modifications=mods,
        original_sha256={str(p.path): p.before_sha256 for p in planned},
        expected_sha256={str(p.path): p.after_sha256 for p in planned},
        executor="builtin",
        work_dir=str(tmp_path / "w"),
    )


def test_edits_settle_from_evidence_exactly_once(tmp_path: pathlib.Path) -> None:
    f, g = tmp_path / "f.txt", tmp_path / "g.txt"
    f.write_bytes(b"f\n")
    g.write_bytes(b"g\n")
    mods = [
        FileModificationInstruction(
            file_path="f.txt", action=FileAction.APPEND_CONTENT, content="F\n"
        ),
        FileModificationInstruction(
            file_path="g.txt", action=FileAction.APPEND_CONTENT, content="G\n"
        ),
    ]
    action = _action(tmp_path, mods)
    # A crash after the first file was written: only the second is written on resume.
    f.write_bytes(b"f\nF\n")
    assert apply_edits_exactly_once(action, tmp_path) == [g]
    assert (f.read_bytes(), g.read_bytes()) == (b"f\nF\n", b"g\nG\n")
    # Settling again changes nothing: never appended twice.
    assert apply_edits_exactly_once(action, tmp_path) == []
    assert (f.read_bytes(), g.read_bytes()) == (b"f\nF\n", b"g\nG\n")
    # Someone else changed a file meanwhile: refused, nothing written.
    g.write_bytes(b"theirs\n")
    f.write_bytes(b"f\n")
    with pytest.raises(EditError, match="changed since the task was prepared"):
        apply_edits_exactly_once(action, tmp_path)
    assert f.read_bytes() == b"f\n"
