"""The POLI:MSG contract: bodies referenced by file in the message folder, and the ones
rejected (traversal, absolute, missing, symlink escapes, checksum mismatch)."""

from __future__ import annotations

import hashlib
import pathlib
import typing as t

import pytest

from politerm.errors import BlockRejected
from politerm.protocol import Block, BlockParser, parse_blocks, render_block, resolve_file_body
from tests.protocol_helpers import HEADER, PLAIN

# --- file-referenced bodies -------------------------------------------------------------


@pytest.fixture
def msgs(tmp_path: pathlib.Path) -> pathlib.Path:
    folder = tmp_path / "session" / "msgs"
    folder.mkdir(parents=True)
    (folder / "T1-plan.md").write_text("1. a long plan\n2. more\n", encoding="utf-8")
    (tmp_path / "session" / "secret.txt").write_text("secret", encoding="utf-8")
    return folder


def _file_block(ref: str, sha: str | None = None) -> Block:
    header: dict[str, t.Any] = {**HEADER, "file": ref}
    if sha is not None:
        header["sha256"] = sha
    (block,) = parse_blocks(render_block(header, "see file", inner_tag="PLAN")).blocks
    return block


SHA = hashlib.sha256(b"1. a long plan\n2. more\n").hexdigest()


@pytest.mark.parametrize("ref", ["msgs/T1-plan.md", "T1-plan.md", "./T1-plan.md"])
def test_file_body_resolved(msgs: pathlib.Path, ref: str) -> None:
    block = _file_block(ref, SHA)
    assert block.body == "see file"
    resolved = resolve_file_body(block, msgs)
    assert resolved.body == "1. a long plan\n2. more"
    assert resolved.file == ref


class FileCase(t.NamedTuple):
    test_id: str
    ref: str
    sha: str | None
    reason: str


FILE_CASES = [
    FileCase("traversal", "../secret.txt", None, "escapes the message folder"),
    FileCase("traversal-prefixed", "msgs/../../session/secret.txt", None, "escapes"),
    FileCase("absolute", "/etc/passwd", None, "absolute paths are not allowed"),
    FileCase("missing", "T9-plan.md", None, "not found in the message folder"),
    FileCase("directory", ".", None, "not a regular file"),
    FileCase("sha-mismatch", "T1-plan.md", "0" * 64, "does not match header"),
]


@pytest.mark.parametrize("case", FILE_CASES, ids=[c.test_id for c in FILE_CASES])
def test_file_body_rejected(msgs: pathlib.Path, case: FileCase) -> None:
    with pytest.raises(BlockRejected, match=case.reason):
        resolve_file_body(_file_block(case.ref, case.sha), msgs)


def test_file_body_symlink_escape(msgs: pathlib.Path) -> None:
    (msgs / "link.md").symlink_to(msgs.parent / "secret.txt")
    with pytest.raises(BlockRejected, match="escapes the message folder"):
        resolve_file_body(_file_block("link.md"), msgs)


def test_file_body_symlink_inside_is_fine(msgs: pathlib.Path) -> None:
    (msgs / "alias.md").symlink_to(msgs / "T1-plan.md")
    assert resolve_file_body(_file_block("alias.md", SHA), msgs).body.startswith("1. a long")


def test_parser_resolves_files_and_rejects_bad_ones(msgs: pathlib.Path) -> None:
    good = render_block({**HEADER, "file": "msgs/T1-plan.md", "sha256": SHA}, "see file")
    bad = render_block({**HEADER, "id": "T2", "file": "../secret.txt"}, "see file")
    parser = BlockParser(message_dir=msgs)
    blocks = parser.scan_screen(f"{good}\n{bad}")
    assert [b.body for b in blocks] == ["1. a long plan\n2. more"]
    assert [r.reason for r in parser.rejections] == [
        "file '../secret.txt': escapes the message folder"
    ]


def test_block_without_file_is_unchanged(msgs: pathlib.Path) -> None:
    (block,) = parse_blocks(PLAIN).blocks
    assert resolve_file_body(block, msgs) is block
