"""Where the secrets redacted from the run store are kept: memory, never a disk.

The store writes ``[REDACTED:kind#tag]`` in place of every secret (see
:meth:`politerm.redact.Redactor.tagged`), yet the agent a task or a message was meant for
must get the original. The secret is kept by tag in this process's memory and, when the
process knows the session's private tmux server, in a tmux paste buffer named
``poli-vault-<tag>`` — the server's memory — so that another ``poli`` process (the router,
after ``poli task`` wrote the task) can put it back. Delivery reveals the markers right
before the paste. A secret the vault no longer holds (the tmux server was restarted) is
delivered as its marker, and the caller records that.

Buffers are loaded by ``tmux load-buffer -`` on standard input, never on a command line.
"""

from __future__ import annotations

import subprocess
import threading
import typing as t

from politerm.redact import TAG_RE, reveal

if t.TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

BUFFER_PREFIX: t.Final = "poli-vault-"

_lock = threading.Lock()
_memory: dict[str, str] = {}
_sockets: dict[str, str] = {}  # tmux socket name -> tmux binary


def use_tmux(socket_name: str, tmux: str = "tmux") -> None:
    """Also keep secrets in the tmux server on ``socket_name`` (the session's own)."""
    with _lock:
        _sockets[socket_name] = tmux


def keep(found: dict[str, str]) -> None:
    """Keep secrets by tag: in memory, and in each known tmux server.

    Examples
    --------
    >>> keep({"00000000000000aa": "pw=1"})
    >>> lookup("00000000000000aa")
    'pw=1'
    """
    with _lock:
        new = {tag: value for tag, value in found.items() if _memory.get(tag) != value}
        _memory.update(new)
        sockets = dict(_sockets)
    for tag, value in new.items():
        for socket, tmux in sockets.items():
            # A server that is not running has nothing to keep; the memory copy still serves.
            subprocess.run(
                [tmux, "-L", socket, "load-buffer", "-b", BUFFER_PREFIX + tag, "-"],
                input=value.encode("utf-8"),
                capture_output=True,
                timeout=10,
                check=False,
            )


def served(socket_name: str, tmux: str = "tmux") -> bool:
    """Whether the tmux server on ``socket_name`` runs (so secrets kept there outlive us)."""
    proc = subprocess.run(
        [tmux, "-L", socket_name, "list-sessions"], capture_output=True, timeout=10, check=False
    )
    return proc.returncode == 0


def lookup(tag: str) -> str | None:
    """The secret of ``tag`` held in this process's memory."""
    with _lock:
        return _memory.get(tag)


def needs_reveal(text: str) -> bool:
    """Whether ``text`` holds a marker that a vault could fill.

    Examples
    --------
    >>> needs_reveal("plain"), needs_reveal("[REDACTED:jwt#0123456789abcdef]")
    (False, True)
    """
    return "[REDACTED:" in text and TAG_RE.search(text) is not None


async def reveal_text(
    text: str, fetch: Callable[[str], Awaitable[str | None]] | None = None
) -> tuple[str, list[str]]:
    """Put the secrets back into ``text``: from memory, else through ``fetch(tag)``.

    ``fetch`` reads the buffer from the session's tmux server (see :func:`tmux_fetcher`).

    Returns
    -------
    tuple
        The text and the tags no vault held.
    """
    if not needs_reveal(text):
        return text, []
    found: dict[str, str] = {}
    for match in TAG_RE.finditer(text):
        tag = match.group("tag")
        value = lookup(tag)
        if value is None and fetch is not None:
            value = await fetch(tag)
        if value is not None:
            found[tag] = value
    return reveal(text, found.get)


class _Client(t.Protocol):
    async def cmd(self, *args: str, timeout: float = 10.0) -> list[str]: ...


def tmux_fetcher(client: _Client) -> Callable[[str], Awaitable[str | None]]:
    """A ``fetch`` for :func:`reveal_text` reading ``poli-vault-<tag>`` over control mode.

    A buffer the client's server lacks is looked for in every server this process knows
    (:func:`socket_fetcher`): an agent on a further server of a session with many agents
    gets the secrets another ``poli`` process kept in the session's first server.
    """

    async def fetch(tag: str) -> str | None:
        from politerm.errors import TmuxError

        try:
            lines = await client.cmd("show-buffer", "-b", BUFFER_PREFIX + tag)
        except TmuxError:
            others = socket_fetcher()
            return await others(tag) if others is not None else None
        value = "\n".join(lines)
        with _lock:
            _memory[tag] = value
        return value

    return fetch


def socket_fetcher(timeout: float = 10.0) -> Callable[[str], Awaitable[str | None]] | None:
    """A ``fetch`` reading ``poli-vault-<tag>`` from each known tmux server, if any is known.

    For a terminal with no control connection (an epic session's headless PTY): the secret
    was kept by another ``poli`` process (``poli work add``) in the session's tmux server.
    """
    with _lock:
        sockets = dict(_sockets)
    if not sockets:
        return None

    async def fetch(tag: str) -> str | None:
        import asyncio

        for socket, tmux in sockets.items():
            proc = await asyncio.create_subprocess_exec(
                tmux, "-L", socket, "show-buffer", "-b", BUFFER_PREFIX + tag,
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            try:
                # Not wait_for: on Python 3.11 it drops a cancel that comes with its result.
                async with asyncio.timeout(timeout):
                    out, _ = await proc.communicate()
            except TimeoutError:
                proc.kill()
                await proc.wait()
                continue  # a server that does not answer holds nothing we can use
            if proc.returncode == 0:
                value = out.decode("utf-8", "replace")
                with _lock:
                    _memory[tag] = value
                return value
        return None

    return fetch


def reveal_sync(text: str, environ: t.Mapping[str, str]) -> str:
    """Put secrets back from the tmux server this process runs in (``$TMUX``), synchronously.

    For a helper process inside a pane (a headless pipeline step's wrapper), which has no
    control connection: one ``tmux show-buffer`` process per distinct secret.
    """
    if not needs_reveal(text):
        return text
    tmux_env = environ.get("TMUX", "")
    if tmux_env:
        where = ["-S", tmux_env.split(",", 1)[0]]
    elif environ.get("POLI_TMUX_SOCKET"):
        where = ["-L", environ["POLI_TMUX_SOCKET"]]
    else:
        return text
    found: dict[str, str] = {}
    for match in TAG_RE.finditer(text):
        tag = match.group("tag")
        if tag in found:
            continue
        proc = subprocess.run(
            ["tmux", *where, "show-buffer", "-b", BUFFER_PREFIX + tag],
            capture_output=True,
            timeout=10,
            check=False,
        )
        if proc.returncode == 0:
            found[tag] = proc.stdout.decode("utf-8", "replace")
    return reveal(text, found.get)[0]
