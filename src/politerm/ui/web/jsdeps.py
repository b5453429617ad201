"""The npm packages the web pages load: pinned, fetched from the npm registry, verified, unpacked.

xterm.js (and its fit addon) draws the panes; two fonts make the mirror readable anywhere:
DejaVu Sans Mono (box drawing) and the symbols subset of Noto Sans Symbols (``⎿`` and the rest
of the technical symbols agents print, which no common monospace font has). None of it is
committed. It is fetched by exact version and checked against the registry's sha512
``integrity`` before a byte is used:

- at wheel build time by ``hatch_build.py``, into the wheel (``politerm/ui/web/js``), so an
  installed politerm serves ``poli web`` with no npm and no network;
- by ``scripts/_setup.sh`` into the checkout's ``.cache/web`` (``python -m
  politerm.ui.web .cache/web``), or by hand into any ``DIR`` that ``POLI_WEB_ASSETS``
  then names.

Downloaded tarballs are kept in a cache (``POLI_JS_CACHE``, else ``$XDG_CACHE_HOME/politerm/npm``)
and re-verified on each use, so a second build works offline. This module uses only the
standard library and :mod:`politerm.errors`: the build hook loads it before politerm is
installed.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import os
import pathlib
import sys
import tarfile
import typing as t
import urllib.request

from politerm.errors import WebAssetsMissing

# The public registry; npm's own setting names a mirror instead.
_REGISTRY = "https://registry.npmjs.org"
_TIMEOUT = 60.0


@dataclasses.dataclass(frozen=True)
class Package:
    """One pinned npm package and the files of it the pages use."""

    name: str
    version: str
    integrity: str
    files: tuple[str, ...]

    @property
    def tarball(self) -> str:
        """The tarball's file name as the registry serves it.

        Examples
        --------
        >>> PACKAGES[0].tarball
        'xterm-6.0.0.tgz'
        """
        return f"{self.name.rsplit('/', 1)[-1]}-{self.version}.tgz"

    @property
    def shipped(self) -> tuple[str, ...]:
        """Every file unpacked: the used ones, the license and the manifest."""
        return (*self.files, "LICENSE", "package.json")


PACKAGES = (
    Package(
        "@xterm/xterm",
        "6.0.0",
        "sha512-TQwDdQGtwwDt+2cgKDLn0IRaSxYu1tSUjgKarSDkUM0ZNiSRXFpjxEsvc/Zgc5kq5omJ+V0a8/kIM2WD3sMOYg==",
        ("lib/xterm.js", "css/xterm.css"),
    ),
    Package(
        "@xterm/addon-fit",
        "0.11.0",
        "sha512-jYcgT6xtVYhnhgxh3QgYDnnNMYTcf8ElbxxFzX0IZo+vabQqSPAjC3c1wJrKB5E19VwQei89QCiZZP86DCPF7g==",
        ("lib/addon-fit.js",),
    ),
    Package(
        "@fontsource/dejavu-mono",
        "5.3.0",
        "sha512-TiW6o/iRt7rnm3c3ezO3V7mNDI6h2IYca1j8Krke5qebUUW9dXF+BFzXFgbCMyXBVfmUbYPmhOInEqdy9ZgblA==",
        ("files/dejavu-mono-latin-400-normal.woff2",),
    ),
    Package(
        "@fontsource/noto-sans-symbols",
        "5.3.0",
        "sha512-Al5jMC2ivI5JkBP3RpcEhkY3zel9CyS199TfKC/B1SAFVj8BJghUNX0tMif0CuhVLpVwZMacM/lHJx3wxdJZBQ==",
        ("files/noto-sans-symbols-symbols-400-normal.woff2",),
    ),
)

#: Files the pages load, relative to ``node_modules``.
FILES = tuple(f"{p.name}/{f}" for p in PACKAGES for f in p.files)


def default_cache() -> pathlib.Path:
    """Where downloaded tarballs are kept."""
    env = os.environ.get("POLI_JS_CACHE")
    if env:
        return pathlib.Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(pathlib.Path.home() / ".cache")
    return pathlib.Path(xdg) / "politerm" / "npm"


def matches(data: bytes, integrity: str) -> bool:
    """Whether ``data`` has the sha512 ``integrity`` the registry published.

    Examples
    --------
    >>> matches(b"", "sha512-" + base64.b64encode(hashlib.sha512(b"").digest()).decode())
    True
    >>> matches(b"x", "sha512-AAAA")
    False
    """
    algo, _, want = integrity.partition("-")
    got = base64.b64encode(hashlib.new(algo, data).digest()).decode()
    return got == want


def tarball(pkg: Package, cache: pathlib.Path) -> bytes:
    """``pkg``'s verified tarball: from ``cache``, else downloaded into it.

    Raises
    ------
    WebAssetsMissing
        When the registry cannot be reached or serves other bytes than the pinned ones.
    """
    kept = cache / pkg.tarball
    if kept.is_file():
        data = kept.read_bytes()
        if matches(data, pkg.integrity):
            return data
    registry = os.environ.get("NPM_CONFIG_REGISTRY") or _REGISTRY
    url = f"{registry.rstrip('/')}/{pkg.name}/-/{pkg.tarball}"
    try:
        with urllib.request.urlopen(url, timeout=_TIMEOUT) as response:
            data = t.cast("bytes", response.read())
    except OSError as exc:
        msg = f"cannot fetch {pkg.name}@{pkg.version} from {url}: {exc}"
        raise WebAssetsMissing(msg) from None
    if not matches(data, pkg.integrity):
        msg = f"{url} is not the pinned {pkg.name}@{pkg.version} (its sha512 differs)"
        raise WebAssetsMissing(msg)
    cache.mkdir(parents=True, exist_ok=True)
    part = kept.with_suffix(".part")
    part.write_bytes(data)
    part.replace(kept)
    return data


def unpack(pkg: Package, data: bytes, modules: pathlib.Path) -> None:
    """Write ``pkg``'s shipped files from its tarball ``data`` under ``modules/NAME``."""
    target = modules / pkg.name
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for rel in pkg.shipped:
            # Only the named files are read, by exact name: nothing in the archive chooses
            # where anything is written.
            member = tar.extractfile(f"package/{rel}")
            if member is None:
                msg = f"{pkg.name}@{pkg.version} has no {rel}"
                raise WebAssetsMissing(msg)
            out = target / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(member.read())


def installed(pkg: Package, modules: pathlib.Path) -> bool:
    """Whether ``modules`` holds every shipped file of ``pkg``'s pinned version."""
    manifest = modules / pkg.name / "package.json"
    if not manifest.is_file():
        return False
    try:
        version = json.loads(manifest.read_text()).get("version")
    except ValueError:
        return False
    return version == pkg.version and all((modules / pkg.name / f).is_file() for f in pkg.shipped)


def install(modules: pathlib.Path, cache: pathlib.Path | None = None) -> pathlib.Path:
    """Fetch (or reuse) each pinned package missing from ``modules`` and unpack it; returns it."""
    for pkg in PACKAGES:
        if not installed(pkg, modules):
            unpack(pkg, tarball(pkg, cache or default_cache()), modules)
    return modules


def main(argv: list[str] | None = None) -> int:
    """``python -m politerm.ui.web DIR``: install into ``DIR/node_modules``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m politerm.ui.web DIR", file=sys.stderr)
        return 2
    try:
        modules = install(pathlib.Path(args[0]) / "node_modules")
    except WebAssetsMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"xterm.js and the fonts are in {modules}")
    return 0
