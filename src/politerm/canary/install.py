"""Installing the newest published version of each agent CLI into a cache of its own.

npm CLIs go to ``<cache>/<cli>-<version>`` (``npm install --prefix``), aider to a virtualenv
``<cache>/aider-<version>``. A version already in the cache is not installed again. The
newest version is asked of the registry with its own client (``npm view``, ``pip index
versions``), one question per CLI.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import platformdirs

from politerm.errors import CanaryError

# name -> (registry package, binary name); aider comes from PyPI.
NPM: dict[str, tuple[str, str]] = {
    "claude": ("@anthropic-ai/claude-code", "claude"),
    "codex": ("@openai/codex", "codex"),
    "gemini": ("@google/gemini-cli", "gemini"),
    "opencode": ("opencode-ai", "opencode"),
}
PYPI = {"aider": "aider-chat"}
CLIS = (*NPM, *PYPI)


@dataclasses.dataclass(frozen=True)
class InstalledCli:
    """One CLI ready to run: its binary and version, and whether it was installed now."""

    cli: str
    version: str
    binary: pathlib.Path
    fresh: bool = False


def default_cache() -> pathlib.Path:
    """``~/.cache/politerm/canary`` (or the platform's equivalent)."""
    return platformdirs.user_cache_path("politerm") / "canary"


def _run(argv: list[str], what: str, timeout: float = 900) -> str:
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, check=False, env=os.environ
        )
    except FileNotFoundError:
        msg = f"cannot {what}: {argv[0]} is not installed"
        raise CanaryError(msg) from None
    except subprocess.TimeoutExpired:
        msg = f"cannot {what}: `{' '.join(argv)}` took over {timeout:g}s"
        raise CanaryError(msg) from None
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        msg = f"cannot {what}: `{' '.join(argv[:4])} …` exited {proc.returncode}: {tail}"
        raise CanaryError(msg)
    return proc.stdout


def newest_version(cli: str) -> str:
    """The newest published version of ``cli``, asked of its registry.

    Raises
    ------
    CanaryError
        Unknown CLI, or the registry could not be asked.
    """
    if cli in NPM:
        npm = shutil.which("npm") or "npm"
        out = _run([npm, "view", NPM[cli][0], "version"], f"ask npm for {cli}'s version", 120)
        return out.strip().splitlines()[-1].strip()
    if cli in PYPI:
        pip = [sys.executable, "-m", "pip", "index", "versions", PYPI[cli]]
        out = _run([*pip, "--disable-pip-version-check"], f"ask PyPI for {cli}'s version", 120)
        m = re.search(rf"^{re.escape(PYPI[cli])} \(([^)]+)\)", out, re.MULTILINE)
        if m is None:
            msg = f"cannot read {cli}'s newest version from pip's answer: {out.strip()[:200]}"
            raise CanaryError(msg)
        return m.group(1)
    msg = f"no canary recipe for {cli!r} (known: {', '.join(CLIS)})"
    raise CanaryError(msg)


def _binary(cli: str, home: pathlib.Path) -> pathlib.Path:
    if cli in NPM:
        return home / "node_modules" / ".bin" / NPM[cli][1]
    return home / "bin" / "aider"


def installed_version(cli: str, home: pathlib.Path) -> str | None:
    """The version of ``cli`` installed under ``home``, if any."""
    if cli in NPM:
        manifest = home / "node_modules" / NPM[cli][0] / "package.json"
        try:
            return str(json.loads(manifest.read_text())["version"])
        except (OSError, ValueError, KeyError):
            return None
    for dist in home.glob("lib/python*/site-packages/aider_chat-*.dist-info"):
        return dist.name.removeprefix("aider_chat-").removesuffix(".dist-info")
    return None


def install(cli: str, version: str, cache: pathlib.Path) -> InstalledCli:
    """Install ``cli`` at ``version`` under ``cache`` unless it is there already.

    Raises
    ------
    CanaryError
        The install failed; the message has the installer's last lines.
    """
    home = cache / f"{cli}-{version}"
    binary = _binary(cli, home)
    if installed_version(cli, home) == version and binary.exists():
        return InstalledCli(cli, version, binary)
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    if cli in NPM:
        npm = shutil.which("npm") or "npm"
        _run(
            [npm, "install", "--prefix", str(home), "--no-audit", "--no-fund",
             "--loglevel=error", f"{NPM[cli][0]}@{version}"],
            f"install {cli} {version}",
        )  # fmt: skip
    else:
        python = home / "bin" / "python"
        if not python.exists():
            _run([sys.executable, "-m", "venv", str(home)], f"make a virtualenv for {cli}")
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        _run([*pip, f"{PYPI[cli]}=={version}"], f"install {cli} {version}")
    if not binary.exists():
        msg = f"{cli} {version} installed, but {binary} is missing; remove {home} and run again"
        raise CanaryError(msg)
    return InstalledCli(cli, version, binary, fresh=True)


def binary_version(cli: str, binary: pathlib.Path) -> str:
    """The version an installed ``binary`` reports (``--version``), e.g. ``2.1.197``.

    Raises
    ------
    CanaryError
        It does not run, or prints no version.
    """
    out = _run([str(binary), "--version"], f"ask {binary} for its version", 60)
    m = re.search(r"\d+\.\d+\.\d+(?:[-.+]\w+)*", out)
    if m is None:
        msg = f"{cli}: {binary} --version printed no version: {out.strip()[:120]!r}"
        raise CanaryError(msg)
    return m.group(0)
