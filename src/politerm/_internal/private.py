"""Private files: every file politerm writes with content is 0600, every folder it makes 0700.

``Path.mkdir(parents=True, mode=0o700)`` gives the mode to the last folder only, and the
umask filters it; ``Path.write_text`` creates files 0644. These helpers set the modes on
everything they create, parents included, whatever the umask. Existing folders are left as
they are (a project directory is the user's business), existing files are replaced through
a private temporary file and a rename, so a reader never sees half a file.
"""

from __future__ import annotations

import contextlib
import os
import typing as t

if t.TYPE_CHECKING:
    import pathlib

FILE_MODE: t.Final = 0o600
DIR_MODE: t.Final = 0o700


def private_dir(directory: pathlib.Path) -> pathlib.Path:
    """Create ``directory`` and its missing parents with mode 0700; return it.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> d = private_dir(root / "a" / "b")
    >>> oct((root / "a").stat().st_mode & 0o777), oct(d.stat().st_mode & 0o777)
    ('0o700', '0o700')
    """
    missing: list[pathlib.Path] = []
    d = directory
    while not d.exists():
        missing.append(d)
        if d.parent == d:
            break
        d = d.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process won the race
            d.mkdir(mode=DIR_MODE)
            # mkdir's mode is filtered by the umask; ours must hold regardless.
            d.chmod(DIR_MODE)
    return directory


def write_private(path: pathlib.Path, data: str | bytes, *, encoding: str = "utf-8") -> None:
    """Write ``data`` to ``path`` atomically with mode 0600 (parents made 0700).

    Examples
    --------
    >>> import pathlib, tempfile
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "x" / "f.txt"
    >>> write_private(p, "hello")
    >>> p.read_text(), oct(p.stat().st_mode & 0o777)
    ('hello', '0o600')
    """
    private_dir(path.parent)
    raw = data.encode(encoding) if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{id(raw):x}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)  # the umask may have removed bits we asked for; never added
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    tmp.replace(path)


def append_private(path: pathlib.Path, data: str, *, encoding: str = "utf-8") -> None:
    """Append ``data`` to ``path``, creating it 0600 (parents 0700) if it is missing.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "log"
    >>> append_private(p, "a"); append_private(p, "b")
    >>> p.read_text(), oct(p.stat().st_mode & 0o777)
    ('ab', '0o600')
    """
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        os.write(fd, data.encode(encoding))
    finally:
        os.close(fd)
