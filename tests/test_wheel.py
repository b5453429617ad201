"""An installed politerm: the built wheel carries xterm.js and its fonts; ``poli web`` needs no npm.

The wheel is built by the real build backend (hatchling, with ``hatch_build.py`` fetching the
pinned npm packages, or taking them from the verified download cache ``.cache/npm``), installed
into a fresh virtual environment, and its own ``poli web`` runs there with a PATH that has tmux
and nothing of node. The fresh environment borrows politerm's dependencies from the test
environment (a plain path in a ``.pth`` file, whose own ``.pth`` files, the checkout's
editable hook among them, are not processed), so politerm itself comes from the wheel only and
the test needs no index.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import typing as t
import zipfile

from politerm.ui.web.jsdeps import PACKAGES
from tests.loophelpers import started
from tests.ui.uihelpers import ask_project, base_and_token, browser, web

if t.TYPE_CHECKING:
    import libtmux

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "POLI_WEB_ASSETS")}
    return {**env, **extra}


def build_wheel(out: pathlib.Path) -> pathlib.Path:
    """Build this checkout's wheel into ``out`` with the real backend and build hook."""
    env = _clean_env(POLI_JS_CACHE=str(ROOT / ".cache" / "npm"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(ROOT)],
        check=True, env=env, timeout=300, capture_output=True,
    )  # fmt: skip
    [wheel] = out.glob("politerm-*.whl")
    return wheel


def fresh_venv(where: pathlib.Path, wheel: pathlib.Path) -> pathlib.Path:
    """A new virtual environment with ``wheel`` installed; returns its ``bin``."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=60
    )
    python = where / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "-q", str(wheel)],
        check=True, env=_clean_env(), timeout=120, capture_output=True,
    )  # fmt: skip
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, env=_clean_env(), timeout=30,
    ).stdout.strip()  # fmt: skip
    (pathlib.Path(site) / "politerm_test_deps.pth").write_text(sysconfig.get_paths()["purelib"])
    return where / "bin"


def _where_assets(bin_dir: pathlib.Path, env: dict[str, str]) -> list[str]:
    """Where the installed politerm lives and where it finds xterm.js."""
    return subprocess.run(
        [str(bin_dir / "python"), "-c",
         "import politerm.ui.web.assets as a; print(a.__file__); print(a.node_modules())"],
        capture_output=True, text=True, env=env, timeout=60, check=True,
    ).stdout.split()  # fmt: skip


def _doctor(
    bin_dir: pathlib.Path, env: dict[str, str], cwd: pathlib.Path
) -> dict[str, dict[str, str]]:
    """The installed ``poli doctor --json``, by check."""
    out = subprocess.run(
        [str(bin_dir / "poli"), "doctor", "--json"],
        capture_output=True, text=True, env=env, timeout=120, cwd=cwd, check=False,
    ).stdout  # fmt: skip
    return {row["check"]: row for row in json.loads(out)}


def test_the_wheel_carries_the_pinned_files_and_their_licenses(tmp_path: pathlib.Path) -> None:
    wheel = build_wheel(tmp_path / "dist")
    names = set(zipfile.ZipFile(wheel).namelist())
    for pkg in PACKAGES:
        for rel in pkg.shipped:
            assert f"politerm/ui/web/js/{pkg.name}/{rel}" in names
    # the build wrote nothing into the tree and shipped nothing of the checkout's cache
    assert not (ROOT / "src" / "politerm" / "ui" / "web" / "js").exists()
    assert not any(".cache" in n or "node_modules" in n for n in names)


async def test_an_installed_wheel_serves_poli_web_without_npm(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    wheel = await asyncio.to_thread(build_wheel, tmp_path / "dist")
    bin_dir = await asyncio.to_thread(fresh_venv, tmp_path / "venv", wheel)
    # PATH: the fresh environment and tmux, nothing else (no npm, no node)
    tools = tmp_path / "tools"
    tools.mkdir()
    tmux = shutil.which("tmux")
    assert tmux is not None
    (tools / "tmux").symlink_to(tmux)
    env = _clean_env(PATH=f"{bin_dir}:{tools}")
    assert shutil.which("npm", path=env["PATH"]) is None
    assert shutil.which("node", path=env["PATH"]) is None
    found = await asyncio.to_thread(_where_assets, bin_dir, env)
    venv = str(tmp_path / "venv")
    assert found[0].startswith(venv), found
    assert found[1].startswith(venv) and found[1].endswith("politerm/ui/web/js"), found
    # its doctor agrees, and asks for no Chromium: the user's own browser shows the pages
    doctor = await asyncio.to_thread(_doctor, bin_dir, env, tmp_path)
    assert doctor["poli web"]["status"] == "OK", doctor["poli web"]
    assert doctor["poli web"]["detail"] == f"xterm.js and its fonts in {found[1]}"
    assert "browser tests" not in doctor

    root = tmp_path / "proj"
    assert server.socket_name is not None
    ask_project(root, server.socket_name)
    async with started(root), browser() as b:
        with web(root, env=env, exe=[str(bin_dir / "poli")]) as url:
            base, token = base_and_token(url)
            page = await b.new_page(viewport={"width": 1400, "height": 900})
            failed: list[str] = []
            page.on("requestfailed", lambda r: failed.append(r.url))
            page.on("response", lambda r: failed.append(r.url) if r.status >= 400 else None)
            await page.goto(f"{base}/agent/PLANNER?token={token}")
            # xterm.js runs: it drew the pane's first screen from the capture
            await page.wait_for_function(
                "() => window.poliTerm && window.poliFrames > 0", timeout=15_000
            )
            assert await page.locator(".xterm-rows").count() == 1
            assert failed == []
