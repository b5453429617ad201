"""A pane mirror never shows a secret, even one the terminal stream cut in two."""

from __future__ import annotations

import asyncio
import subprocess
import typing as t

from politerm.config import load_config
from politerm.store import RunStore
from politerm.testing.retry import aretry_until
from politerm.ui.live import HOLD_BACK, LiveState

if t.TYPE_CHECKING:
    import pathlib

    import libtmux

TOKEN = "ghp_" + "A1b2C3d4E5" * 2 + "F6g7H8i9J0" * 2
BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"

# Each piece is written on its own, a pause apart: the mirror gets them as separate chunks
# and flushes its held-back text in between.
SCRIPT = f"""
while [ ! -e go ]; do sleep 0.05; done
printf 'key {TOKEN[:20]}'; sleep 0.4
printf '{TOKEN[20:]} ok\\r\\n'; sleep 0.4
printf -- '-----BEGIN PRIVATE KEY-----\\r\\n{BODY}\\r\\n'; sleep 0.4
printf '{BODY[::-1]}\\r\\n-----END PRIVATE KEY-----\\r\\nall done\\r\\n'
sleep 600
"""


def _project(socket: str, tmp_path: pathlib.Path, script: str) -> pathlib.Path:
    """A project whose agent A1 runs ``script`` in a session of its own."""
    root = tmp_path / "proj"
    root.mkdir()
    (root / "poli.toml").write_text(f'[tmux]\nsocket = "{socket}"\n\n[store]\npath = "r.sqlite3"\n')
    (root / "leak.sh").write_text(script)
    tmux = ["tmux", "-L", socket]
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", "ours", "-c", str(root), "sh leak.sh"], check=True
    )
    subprocess.run([*tmux, "set-option", "-p", "-t", "ours", "@poli_agent", "A1"], check=True)
    subprocess.run([*tmux, "set-option", "-t", "ours", "@poli_project", str(root)], check=True)
    return root


async def test_a_secret_split_across_output_chunks_never_reaches_the_mirror(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    assert server.socket_name is not None
    root = _project(server.socket_name, tmp_path, SCRIPT)
    config = load_config(root, env={})
    chunks: list[bytes] = []
    with RunStore.open(config.store.resolved_path()) as store:
        async with LiveState(config, store, project=root) as live:
            mirror = await live.mirror("A1", chunks.append)
            try:
                (root / "go").touch()

                async def done() -> bool:
                    return b"all done" in b"".join(chunks)

                await aretry_until(done, 60, what="the script's last line in the mirror")
            finally:
                mirror.stop()
    shown = b"".join(chunks).decode("utf-8", errors="replace")
    assert len(chunks) >= 3, f"the pieces arrived as {len(chunks)} chunk(s): {chunks!r}"
    for secret in (TOKEN, TOKEN[:20], TOKEN[4:20], BODY, BODY[::-1]):
        assert secret not in shown, f"{secret[:12]}… reached the mirror: {shown!r}"
    assert "key [REDACTED:github-token] ok" in shown
    assert "[REDACTED:private-key]" in shown


async def test_a_stopped_mirror_sends_nothing_more_not_even_its_held_back_tail(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    assert server.socket_name is not None
    # The start of a token with no line end: the redactor holds it back for a moment.
    script = f"while [ ! -e go ]; do sleep 0.05; done\nprintf 'key {TOKEN[:12]}'\nsleep 600\n"
    root = _project(server.socket_name, tmp_path, script)
    config = load_config(root, env={})
    chunks: list[bytes] = []
    seen = asyncio.Event()
    with RunStore.open(config.store.resolved_path()) as store:
        async with LiveState(config, store, project=root) as live:
            mirror = await live.mirror("A1", chunks.append)

            def stop_at_once(_data: bytes) -> None:
                # A second mirror started later gets each chunk right after the first one
                # did, before the first one's hold-back ends.
                mirror.stop()
                seen.set()

            unsubscribe = (await live.mirror("A1", stop_at_once, redact=False)).stop
            try:
                (root / "go").touch()
                async with asyncio.timeout(60):
                    await seen.wait()
                await asyncio.sleep(HOLD_BACK * 10)
            finally:
                unsubscribe()
    assert chunks == [], f"a stopped mirror still sent {chunks!r}"
