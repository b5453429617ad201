"""The views start with only what they use (issue 25: ``poli dash`` first paint at 500 rows).

``poli dash`` and ``poli status`` draw from the store and the observer; they never run a
turn. Importing the turn machinery (protocol parsers and jsonschema, the PTY runner and
pyte, the pipeline runner, the transcript readers, watchfiles) was a third of the
dashboard's start. The driver, agents and protocol packages name their modules' classes on
first use, so importing one small module of them no longer imports the rest.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import politerm.agents
import politerm.driver
import politerm.protocol

#: Modules only a turn, a pipeline or a mirrored pane needs.
HEAVY = (
    "jsonschema",
    "pyte",
    "ptyprocess",
    "watchfiles",
    "politerm.protocol.parser",
    "politerm.pty.runner",
    "politerm.driver.agent",
    "politerm.driver.host",
    "politerm.pipeline.ops",
    "politerm.driver.transcripts",
)


def _imported(code: str) -> set[str]:
    """The modules a fresh interpreter has after running ``code``."""
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return set(json.loads(out.stdout.splitlines()[-1]))


@pytest.mark.parametrize(
    "code",
    [
        "import politerm.ui.dash.app",
        # `poli status` reads the router's lock: where the locks are must not bring the driver.
        (
            "import politerm.cli.status\n"
            "from politerm.engine.service import ServiceLock\n"
            "ServiceLock('s', 'poli-x').path"
        ),
    ],
)
def test_a_view_imports_no_turn_machinery(code: str) -> None:
    assert sorted(_imported(code) & set(HEAVY)) == []


def test_the_packages_still_name_every_public_class() -> None:
    for package in (politerm.driver, politerm.agents, politerm.protocol):
        for name in package.__all__:
            assert getattr(package, name) is not None, (package.__name__, name)
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        _ = politerm.driver.Nope
