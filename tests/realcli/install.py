"""Install the five real agent CLIs into ``.cache/realcli/`` (git-ignored) when missing.

npm packages go to ``.cache/realcli/npm`` (``npm install --prefix``), aider to its own
virtualenv ``.cache/realcli/aider``. Versions are pinned to the ones ``realcli.md`` was
written against; a pin that can no longer be installed falls back to the latest release,
with a warning. One ``flock`` serialises installs across test processes.

opencode's own dependencies go to ``.cache/realcli/npm/opencode-config``, installed as
opencode installs them into ``~/.config/opencode`` on every start where they are missing
(``@opencode-ai/plugin`` at opencode's own version, from the registry).
:func:`politerm.canary.recipes.prepare` links them into each scratch home, so that no start
of a test depends on the registry (see :mod:`politerm.canary.recipes` for why it matters).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
import typing as t
import warnings

from politerm.canary.recipes import OPENCODE_SEED

if t.TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = pathlib.Path(__file__).resolve().parents[2]
CACHE = pathlib.Path(os.environ.get("POLI_REALCLI_CACHE", ROOT / ".cache" / "realcli"))
NPM_PREFIX = CACHE / "npm"
AIDER_VENV = CACHE / "aider"
OPENCODE_CONFIG = NPM_PREFIX / OPENCODE_SEED
OPENCODE_PLUGIN = "@opencode-ai/plugin"

# name -> (registry package, pinned version, binary name)
NPM: dict[str, tuple[str, str, str]] = {
    "claude": ("@anthropic-ai/claude-code", "2.1.197", "claude"),
    "codex": ("@openai/codex", "0.169.0", "codex"),
    "gemini": ("@google/gemini-cli", "0.61.0", "gemini"),
    "opencode": ("opencode-ai", "1.18.33", "opencode"),
}
AIDER = ("aider-chat", "0.86.2")
NAMES = (*NPM, "aider")


class InstallError(RuntimeError):
    """A CLI could not be installed; the message says which, how, and what the tool said."""


@dataclasses.dataclass(frozen=True)
class Installed:
    """The binaries, their versions, and how long installing took (0 when cached)."""

    bins: dict[str, pathlib.Path]
    versions: dict[str, str]
    seconds: float


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / "install.lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run(argv: list[str], what: str, timeout: float = 900) -> None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError as exc:
        msg = f"cannot install {what}: {exc.filename} is not installed"
        raise InstallError(msg) from None
    except subprocess.TimeoutExpired:
        msg = f"cannot install {what}: `{' '.join(argv)}` took over {timeout:g}s"
        raise InstallError(msg) from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
        msg = f"cannot install {what}: `{' '.join(argv)}` exited {proc.returncode}:\n" + "\n".join(
            tail
        )
        raise InstallError(msg)


def npm_version(package: str, prefix: pathlib.Path = NPM_PREFIX) -> str | None:
    """The version of ``package`` installed under ``prefix`` (the CLIs'), if any."""
    manifest = prefix / "node_modules" / package / "package.json"
    try:
        return str(json.loads(manifest.read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


def aider_version() -> str | None:
    """The version of aider-chat in the cache virtualenv, if any."""
    for dist in AIDER_VENV.glob("lib/python*/site-packages/aider_chat-*.dist-info"):
        return dist.name.removeprefix("aider_chat-").removesuffix(".dist-info")
    return None


def _install_npm(missing: list[str]) -> None:
    npm = shutil.which("npm")
    if npm is None:
        msg = "cannot install " + ", ".join(missing) + ": npm is not on PATH (install Node.js)"
        raise InstallError(msg)
    specs = [f"{NPM[n][0]}@{NPM[n][1]}" for n in missing]
    base = [npm, "install", "--prefix", str(NPM_PREFIX), "--no-audit", "--no-fund"]
    try:
        _run([*base, "--loglevel=error", *specs], ", ".join(specs))
    except InstallError as pinned:
        # A pin that was unpublished: take the latest, and say so.
        latest = [NPM[n][0] for n in missing]
        try:
            _run([*base, "--loglevel=error", *latest], ", ".join(latest))
        except InstallError:
            raise pinned from None
        warnings.warn(
            f"pinned versions unavailable ({pinned}); installed the latest {latest}",
            stacklevel=2,
        )


def _install_opencode_config(version: str) -> None:
    """Install opencode's config-directory dependencies as opencode does (exact, no scripts).

    Into a scratch directory first, moved into place once complete: a half-done install
    must not look like one to seed homes with.
    """
    npm = shutil.which("npm")
    spec = f"{OPENCODE_PLUGIN}@{version}"
    if npm is None:
        msg = f"cannot install {spec}: npm is not on PATH (install Node.js)"
        raise InstallError(msg)
    scratch = OPENCODE_CONFIG.with_name(OPENCODE_CONFIG.name + ".new")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    _run(
        [npm, "install", "--prefix", str(scratch), "--save-exact", "--ignore-scripts",
         "--no-audit", "--no-fund", "--loglevel=error", spec],
        spec,
    )  # fmt: skip
    shutil.rmtree(OPENCODE_CONFIG, ignore_errors=True)
    scratch.rename(OPENCODE_CONFIG)


def _install_aider() -> None:
    name, version = AIDER
    python = AIDER_VENV / "bin" / "python"
    if not python.exists():
        _run([sys.executable, "-m", "venv", str(AIDER_VENV)], "the aider virtualenv")
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    try:
        _run([*pip, f"{name}=={version}"], f"{name}=={version}")
    except InstallError as pinned:
        try:
            _run([*pip, name], name)
        except InstallError:
            raise pinned from None
        warnings.warn(f"{name}=={version} unavailable; installed the latest", stacklevel=2)


def ensure_installed(names: t.Iterable[str] = NAMES) -> Installed:
    """Install what is missing (or at another version) and return the binaries.

    Raises
    ------
    InstallError
        A CLI could not be installed or its binary does not run.
    """
    wanted = list(names)
    start = time.monotonic()
    with _locked():
        missing = [n for n in wanted if n in NPM and npm_version(NPM[n][0]) != NPM[n][1]]
        if missing:
            _install_npm(missing)
        opencode = npm_version(NPM["opencode"][0]) if "opencode" in wanted else None
        if opencode is not None and npm_version(OPENCODE_PLUGIN, OPENCODE_CONFIG) != opencode:
            _install_opencode_config(opencode)
        if "aider" in wanted and aider_version() != AIDER[1]:
            _install_aider()
    seconds = time.monotonic() - start
    bins: dict[str, pathlib.Path] = {}
    versions: dict[str, str] = {}
    for n in wanted:
        if n == "aider":
            path, version = AIDER_VENV / "bin" / "aider", aider_version()
        else:
            path, version = NPM_PREFIX / "node_modules" / ".bin" / NPM[n][2], npm_version(NPM[n][0])
        if not path.exists() or version is None:
            msg = f"{n}: installed, but {path} is missing; remove {CACHE} and run again"
            raise InstallError(msg)
        bins[n], versions[n] = path, version
    return Installed(bins, versions, seconds if missing or seconds > 1 else 0.0)
