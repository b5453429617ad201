"""What ``./scripts/demo`` installs: only what the demo runs (tmux, politerm), nothing else.

The real script runs under bash in a copy of ``scripts/`` with a PATH that holds tmux and the
few tools the script itself calls, and recorders in place of what installs (``apt-get``,
``sudo``, ``npm``) and of the checkout's ``.venv`` (its ``python`` and ``poli``): each logs its
command line and does nothing. Chromium and notify-send are absent, as on a fresh machine, so
a setup step that wanted them would call ``apt-get``. (The test setup, ``scripts/test``,
installs them: CI runs it.)
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent
RECORDER = '#!/bin/sh\necho "$(basename "$0") $*" >> "$SETUP_LOG"\n'


def _recorder(path: pathlib.Path) -> None:
    path.write_text(RECORDER)
    path.chmod(0o755)


def test_the_demo_installs_only_tmux_and_politerm(tmp_path: pathlib.Path) -> None:
    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT / "scripts", checkout / "scripts")
    venv_bin = checkout / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    for name in ("python", "poli"):
        _recorder(venv_bin / name)
    tools = tmp_path / "tools"
    tools.mkdir()
    for name in ("apt-get", "sudo", "npm"):
        _recorder(tools / name)
    for name in ("tmux", "dirname", "basename", "id"):
        found = shutil.which(name)
        assert found is not None, name
        (tools / name).symlink_to(found)
    for absent in ("chromium", "notify-send", "dbus-daemon"):
        assert shutil.which(absent, path=str(tools)) is None
    log = tmp_path / "setup.log"
    log.touch()
    env = {"PATH": str(tools), "HOME": str(tmp_path), "SETUP_LOG": str(log)}
    bash = shutil.which("bash")
    assert bash is not None
    done = subprocess.run(
        [bash, str(checkout / "scripts" / "demo")],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == [
        "python -m pip install -q --upgrade pip>=25.1",
        "python -m pip install -q -e .",
        "poli demo",
    ], done.stderr
    # and it fetched nothing for the web pages (no .cache)
    assert {p.name for p in checkout.iterdir()} == {"scripts", ".venv"}
