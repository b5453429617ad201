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

    from politerm.redact import Redactor

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


def write_private(
    path: pathlib.Path,
    data: str | bytes,
    *,
    encoding: str = "utf-8",
    mode: int = FILE_MODE,
    sync: bool = False,
) -> None:
    """Write ``data`` to ``path`` atomically with mode 0600 (parents made 0700).

    ``mode`` replaces 0600 (an edited file keeps its own); with ``sync`` the file is on disk
    before the rename, and the rename before this returns (a queue a crash must not lose).

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
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(fd, mode)  # the umask may have removed bits we asked for; never added
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    try:
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync:
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


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


class RedactedFile:
    r"""A stream's text kept as redacted lines in a private file (0600, parents 0700).

    Chunks go in as they arrive; each complete line is cleaned (``clean``: a terminal's
    escapes dropped, say), redacted (private key blocks held until they end:
    :class:`~politerm.redact.LineRedactor`) and written. With ``max_line``, a line without
    its newline is written anyway once it is that long (a secret across the cut is not
    redacted: only for a transcript, never for a command's output). At :meth:`close` a last
    line is written as it came; with ``lines_only``, as a line of its own (its newline
    added, a blank one dropped), so the next session appended starts on a line.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> from politerm.redact import Redactor
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "out.log"
    >>> f = RedactedFile(p, Redactor(), header="== run ==")
    >>> f.write("token=sk-ant-api03-" + "a" * 40 + "\npart"); f.write("ial"); f.close()
    >>> p.read_text().split("\n")[::2], "sk-ant" in p.read_text(), f.redactions > 0
    (['== run ==', 'partial'], False, True)
    """

    def __init__(
        self,
        path: pathlib.Path,
        redactor: Redactor,
        *,
        clean: t.Callable[[str], str] = str,
        header: str = "",
        append: bool = True,
        max_line: int | None = None,
        lines_only: bool = False,
    ) -> None:
        from politerm.redact import LineRedactor

        private_dir(path.parent)
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
        self.path = path
        self._fd: int | None = os.open(path, flags, FILE_MODE)
        os.fchmod(self._fd, FILE_MODE)
        self._lines = LineRedactor(redactor)
        self._clean = clean
        self._max = max_line
        self._lines_only = lines_only
        self._tail = ""
        if header:
            self._put([header])

    @property
    def redactions(self) -> int:
        """How many secrets were replaced so far."""
        return self._lines.count

    def write(self, text: str) -> None:
        """Take the next chunk of the stream."""
        *complete, self._tail = (self._tail + text).split("\n")
        if self._max is not None and len(self._tail) > self._max:
            complete.append(self._tail)
            self._tail = ""
        self._put([out for line in complete for out in self._lines.push(self._clean(line))])

    def _put(self, lines: list[str], end: str = "\n") -> None:
        data = ("\n".join(lines) + end).encode("utf-8", "replace") if lines else b""
        while data and self._fd is not None:
            data = data[os.write(self._fd, data) :]

    def close(self) -> None:
        """Write what is left (redacted; a last line as it came) and close the file."""
        if self._fd is None:
            return
        if self._tail.strip() if self._lines_only else self._tail:
            last = self._lines.push(self._clean(self._tail))
            self._put(last, end="\n" if self._lines_only else "")
        self._tail = ""
        self._put(self._lines.flush())
        os.close(self._fd)
        self._fd = None
