"""Shared by the POLI:MSG protocol's tests: recorded screens, a plain block, a nonced one."""

from __future__ import annotations

import pathlib

from politerm.protocol import render_block

SCREENS = pathlib.Path(__file__).parent / "fixtures" / "screens"

BLOB = (
    "5feceb666b86b273d4735e3a4e0740854b227777ef2d127de7f6c0117902699b"
    "2c62423219581e274a44dc154fc82b266b51d4313fdba35f8527a891e629fa65"
)

HEADER = {"to": "EXECUTER", "type": "plan", "id": "T1"}
PLAIN = render_block(HEADER, "1. do the thing\n2. check the thing", inner_tag="PLAN")

NONCE = "a1b2c3"
WITH_NONCE = render_block({**HEADER, "nonce": NONCE}, "go", inner_tag="PLAN")


def _screen(name: str) -> str:
    return (SCREENS / name).read_text(encoding="utf-8")


def _echo(block: str, first: str, rest: str) -> str:
    lines = block.splitlines()
    return "\n".join([first + lines[0], *(rest + ln for ln in lines[1:])])
