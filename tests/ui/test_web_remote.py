"""``poli web --remote``: TLS, per-device tokens, the QR code, the guards, on 127.x only.

Every server here is a real ``poli web`` process (uvicorn, TLS with the certificate it made)
on a loopback address other than 127.0.0.1, so a client's own source address can stand for
"another machine" (httpx's ``local_address``) without leaving this one.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import hashlib
import json
import pathlib
import socket
import ssl
import subprocess
import typing as t

import httpx
import pytest
import websockets
import zxingcpp
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from politerm.errors import UiError
from politerm.store import RunStore
from politerm.testing.retry import retry_until
from politerm.ui.web.devices import Devices, hash_token
from politerm.ui.web.qr import qr_matrix, read_qr_text
from politerm.ui.web.tls import fingerprint, self_signed
from tests.loophelpers import started
from tests.ui.test_notify import Receiver
from tests.ui.uihelpers import ask_project, browser, poli, screenshot_path

if t.TYPE_CHECKING:
    import libtmux

HOST = "127.0.0.2"
GUESSER = "127.0.0.9"  # the address a bad client connects from
_PLAIN = '[tmux]\nsocket = "poli-web-none"\n\n[store]\npath = "runs.sqlite3"\n\n'


@dataclasses.dataclass
class Remote:
    """A running ``poli web --remote`` and what it printed."""

    proc: subprocess.Popen[str]
    origin: str
    cert: pathlib.Path
    fingerprint: str
    device_url: str | None
    qr: str
    lines: list[str]

    def tls(self) -> ssl.SSLContext:
        """A client context that trusts exactly the certificate the server made."""
        return ssl.create_default_context(cafile=str(self.cert))


@contextlib.contextmanager
def remote_web(root: pathlib.Path, *args: str) -> t.Iterator[Remote]:
    """``poli web --remote --host 127.0.0.2 ARGS`` running, its start-up lines parsed."""
    proc = poli(root, "web", "--remote", "--host", HOST, *args)
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        while not lines or lines[-1] != "Ctrl-C stops it.":
            line = proc.stdout.readline()
            if not line:  # poli exited
                _, err = proc.communicate(timeout=10)
                pytest.fail(f"poli web --remote stopped: {lines!r} {err!r}")
            lines.append(line.rstrip("\n"))
        origin = lines[0].split(": ", 1)[1].rstrip("/")
        cert = pathlib.Path(lines[1].removeprefix("TLS certificate ").split(" (")[0])
        device_url = None
        qr: list[str] = []
        if lines[3].startswith("device "):
            device_url = lines[3].split(": ", 1)[1]
            qr = lines[4:-2]
        yield Remote(proc, origin, cert, lines[2].split()[-1], device_url, "\n".join(qr), lines)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _stderr(remote: Remote) -> str:
    remote.proc.terminate()
    _, err = remote.proc.communicate(timeout=15)
    return err


def _peer_der(origin: str, context: ssl.SSLContext) -> bytes:
    host, port = origin.removeprefix("https://").rsplit(":", 1)
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def der_fingerprint(der: bytes) -> str:
    """The SHA-256 fingerprint of a DER certificate as browsers show it (hex pairs, colons)."""
    return ":".join(f"{b:02X}" for b in hashlib.sha256(der).digest())


def _decode(drawn: list[list[bool]]) -> str:
    """What a QR decoder reads from modules drawn 4x4 pixels each, as a camera would see them."""
    scale = 4
    height, width = len(drawn) * scale, len(drawn[0]) * scale
    image = bytes(
        0 if drawn[y // scale][x // scale] else 255 for y in range(height) for x in range(width)
    )
    [found] = zxingcpp.read_barcodes(memoryview(image).cast("B", (height, width)))
    return str(found.text)


def _cli(root: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    proc = poli(root, *args)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


async def test_remote_pairs_a_phone_over_tls_with_a_qr_code_and_a_fingerprint(
    tmp_path: pathlib.Path,
) -> None:
    (tmp_path / "poli.toml").write_text(_PLAIN)
    with remote_web(tmp_path) as remote:
        assert remote.lines[0] == f"poli web (remote, read-only): {remote.origin}/"
        assert remote.origin.startswith(f"https://{HOST}:")
        assert remote.lines[1].endswith("(self-signed, made here)")
        url = remote.device_url
        assert url is not None and url.startswith(f"{remote.origin}/?token=")
        token = url.split("=", 1)[1]
        # the fingerprint printed is the certificate's, and the one the server presents
        made = x509.load_pem_x509_certificate(remote.cert.read_bytes())
        assert remote.fingerprint == fingerprint(made)
        assert der_fingerprint(_peer_der(remote.origin, remote.tls())) == remote.fingerprint
        # a client that trusts only the usual authorities refuses it: nobody vouches for it
        with pytest.raises(ssl.SSLCertVerificationError):
            _peer_der(remote.origin, ssl.create_default_context())
        # the QR code is segno's code of the URL, and a decoder reads the URL from it
        drawn = read_qr_text(remote.qr)
        expected = qr_matrix(url)
        assert drawn[: len(expected)] == expected
        assert _decode(drawn) == url
        # the device's URL over TLS: the token moves to a TLS-only cookie, out of the address
        async with httpx.AsyncClient(verify=remote.tls()) as phone:
            first = await phone.get(url)
            assert first.status_code == 303 and first.headers["location"] == "/"
            cookie = first.headers["set-cookie"].lower()
            assert "secure" in cookie and "httponly" in cookie and "samesite=strict" in cookie
            page = await phone.get(remote.origin + "/")
            assert page.status_code == 200 and "<html" in page.text.lower()
            assert token not in page.text  # no script on the page can read it
            overview = await phone.get(remote.origin + "/api/overview")
            assert overview.status_code == 200 and "agents" in overview.json()
        # no plain HTTP on that port
        async with httpx.AsyncClient() as plain:
            with pytest.raises(httpx.HTTPError):
                await plain.get(remote.origin.replace("https://", "http://") + "/", params={
                    "token": token})  # fmt: skip
    # what is kept: the token's hash only, every file 0600
    web_dir = tmp_path / "home" / ".local" / "state" / "politerm" / "web"
    kept = (web_dir / "devices.json").read_text()
    assert token not in kept and hash_token(token) in kept
    for path in (
        web_dir / "devices.json",
        web_dir / "tls" / "cert.pem",
        web_dir / "tls" / "key.pem",
    ):
        assert path.stat().st_mode & 0o777 == 0o600, path
    assert web_dir.stat().st_mode & 0o777 == 0o700
    # started again, the certificate is kept and nobody new is paired
    with remote_web(tmp_path) as again:
        assert again.fingerprint == remote.fingerprint and again.device_url is None
        assert "(self-signed, made here)" not in again.lines[1]
        assert again.lines[3] == "paired devices: phone (pair another: --device NAME)"


async def test_remote_refuses_guessers_revoked_devices_and_cross_origin_posts(
    tmp_path: pathlib.Path,
) -> None:
    (tmp_path / "poli.toml").write_text(_PLAIN)
    with remote_web(tmp_path) as remote:
        assert remote.device_url is not None
        token = remote.device_url.split("=", 1)[1]
        guess = httpx.AsyncHTTPTransport(verify=remote.tls(), local_address=GUESSER)
        async with (
            httpx.AsyncClient(verify=remote.tls(), headers={"X-Poli-Token": token}) as phone,
            httpx.AsyncClient(transport=guess) as guesser,
        ):
            api = remote.origin + "/api/overview"
            # a wrong token: 401 ten times, then 429 whatever it sends, with when to retry
            for n in range(9):
                wrong = await guesser.get(api, params={"token": f"guess-{n}"})
                assert wrong.status_code == 401, n
            # the path it asks for is logged, but never as terminal controls
            hostile = remote.origin + "/%1b%5d0;pwned%07%1b%5b2J"
            assert (await guesser.get(hostile, params={"token": "guess-9"})).status_code == 401
            blocked = await guesser.get(api, params={"token": token})
            assert blocked.status_code == 429 and int(blocked.headers["retry-after"]) > 0
            # ... while the phone, from another address, goes on
            assert (await phone.get(api)).status_code == 200
            # read-only: an action from the page's own origin is refused as read-only
            body = {"agent": "EXECUTER", "asked": 1.0, "command": "x"}
            own = {"Origin": remote.origin}
            act = await phone.post(remote.origin + "/api/approve", json=body, headers=own)
            assert act.status_code == 403 and "read-only" in act.json()["error"]
            referer = {"Referer": remote.origin + "/agent/EXECUTER"}
            act = await phone.post(remote.origin + "/api/approve", json=body, headers=referer)
            assert act.status_code == 403 and "read-only" in act.json()["error"]
            # another origin, or none at all, is refused before anything else
            for headers in ({"Origin": "https://evil.example"}, {"Origin": "null"},
                            {"Referer": "https://evil.example/"}, {}):  # fmt: skip
                cross = await phone.post(remote.origin + "/api/approve", json=body, headers=headers)
                assert cross.status_code == 403, headers
                assert cross.json()["error"] == "refused: not from this monitor's own page"
            ws = remote.origin.replace("https://", "wss://") + f"/ws/overview?token={token}"
            with pytest.raises(websockets.InvalidStatus):
                async with websockets.connect(ws, ssl=remote.tls(), origin="https://evil.example"):  # type: ignore[arg-type]
                    pass
            async with websockets.connect(ws, ssl=remote.tls(), origin=remote.origin) as live:  # type: ignore[arg-type]
                assert "agents" in json.loads(await asyncio.wait_for(live.recv(), 10))
            # another device is paired while it runs; the first is revoked
            added = await asyncio.to_thread(_cli, tmp_path, "web", "devices", "add", "tablet")
            assert added.returncode == 0, added.stderr
            tablet_url = added.stdout.splitlines()[0].split(": ", 1)[1]
            assert tablet_url.startswith(remote.origin + "/?token=")
            listed = await asyncio.to_thread(_cli, tmp_path, "web", "devices")
            assert [line.split("\t")[0] for line in listed.stdout.splitlines()] == [
                "phone", "tablet"]  # fmt: skip
            revoked = await asyncio.to_thread(_cli, tmp_path, "web", "devices", "revoke", "phone")
            assert (revoked.returncode, revoked.stdout) == (0, "revoked phone\n")
            assert (await phone.get(api)).status_code == 401
            tablet = tablet_url.split("=", 1)[1]
            assert (await phone.get(api, headers={"X-Poli-Token": tablet})).status_code == 200
            again = await asyncio.to_thread(_cli, tmp_path, "web", "devices", "revoke", "phone")
            assert again.returncode == 1
            assert again.stderr == "poli: no device named 'phone' (paired: tablet)\n"
        err = _stderr(remote)
    # every bad token is logged, with the address and never the token tried
    assert err.count(f"bad or missing token from {GUESSER}") == 10, err
    assert "guess-" not in err and "Traceback" not in err
    assert "\x1b" not in err and "\x07" not in err and "pwned" in err
    with RunStore.open(tmp_path / "runs.sqlite3") as store:
        events = store.list_events(limit=500)
    refused = [e for e in events if e.kind == "web-auth-refused"]
    assert [e.data["client"] for e in refused].count(GUESSER) == 10
    assert all("guess-" not in e.detail and "\x1b" not in e.detail for e in refused)
    assert any("pwned" in e.data["path"] for e in refused)
    [block] = [e for e in events if e.kind == "web-auth-blocked"]
    assert block.data["client"] == GUESSER


async def test_remote_actions_from_a_phone_in_chromium_carry_its_name(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    assert server.socket_name is not None
    root = tmp_path / "proj"
    ask_project(root, server.socket_name)
    async with started(root) as loop:
        with remote_web(root, "--allow-actions", "--device", "pixel") as remote:
            assert remote.lines[0].startswith("poli web (remote, actions allowed): ")
            assert remote.device_url is not None
            # Chromium trusts this one certificate by its key's fingerprint, as a person does
            # who compared it on the phone's certificate screen.
            spki = x509.load_pem_x509_certificate(remote.cert.read_bytes()).public_key()
            der = spki.public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            pin = base64.b64encode(hashlib.sha256(der).digest()).decode()
            async with browser(f"--ignore-certificate-errors-spki-list={pin}") as b:
                phone = await b.new_context(
                    viewport={"width": 412, "height": 915}, is_mobile=True, has_touch=True
                )
                page = await phone.new_page()
                await page.goto(remote.device_url)
                assert page.url == remote.origin + "/"  # the token left the address bar
                router = poli(root, "task", "make hello", "--id", "T-web", "--timeout", "90")
                try:
                    approve = page.locator("#inbox button.approve")
                    await approve.wait_for(state="visible", timeout=60_000)
                    await page.screenshot(path=str(screenshot_path(tmp_path, "web-remote.png")))
                    await approve.tap()
                    await page.locator("#confirm button.yes").tap()
                    await asyncio.to_thread(
                        retry_until,
                        lambda: (root / "executer" / "out.txt").is_file(),
                        60,
                        what="the executer wrote out.txt after the phone's approval",
                    )
                    out, err = await asyncio.to_thread(router.communicate, None, 90)
                    assert router.returncode == 0, (out, err)
                finally:
                    if router.poll() is None:
                        router.kill()
        [action] = [e for e in loop.store.list_events(limit=300) if e.kind == "ui-action"]
        assert action.data == {"action": "approve", "by": "web:pixel"}
        assert action.detail.startswith("web:pixel: approve ")


async def test_remote_notifications_link_to_the_page_without_a_token(
    tmp_path: pathlib.Path,
) -> None:
    async with Receiver() as rx:
        (tmp_path / "poli.toml").write_text(
            _PLAIN + f'[notify]\ndesktop = false\nwebhook = "http://127.0.0.1:{rx.port}/hook"\n'
        )
        with remote_web(tmp_path) as remote:
            assert remote.device_url is not None
            token = remote.device_url.split("=", 1)[1]
            with RunStore.open(tmp_path / "runs.sqlite3") as store:
                secret = "sk-ant-" + "x" * 40
                store.add_event("stuck", agent="PLANNER", detail=f"stuck after {secret}")
                await rx.wait_for(1)
    [(_, _, body)] = rx.posts
    notice = json.loads(body)
    assert notice["link"] == remote.origin + "/"
    assert token not in body.decode() and secret not in body.decode()


async def test_remote_serves_the_users_certificate_and_refuses_a_wrong_key(
    tmp_path: pathlib.Path,
) -> None:
    (tmp_path / "poli.toml").write_text(_PLAIN)
    mine = self_signed([HOST], directory=tmp_path / "mine")
    other = self_signed(["127.0.0.3"], directory=tmp_path / "other")
    with remote_web(tmp_path, "--cert", str(mine.cert), "--key", str(mine.key)) as remote:
        assert remote.cert == mine.cert and remote.fingerprint == mine.fingerprint
        assert "made here" not in remote.lines[1]
        assert der_fingerprint(_peer_der(remote.origin, remote.tls())) == mine.fingerprint
    for args, said in (
        (("--cert", str(mine.cert), "--key", str(other.key)),
         f"poli: --key {other.key} is not the key of --cert {mine.cert}"),
        (("--cert", str(mine.cert)), "poli: --cert and --key go together"),
        (("--cert", str(mine.key), "--key", str(mine.key)),
         f"poli: --cert {mine.key}: not a readable PEM certificate"),
    ):  # fmt: skip
        done = await asyncio.to_thread(_cli, tmp_path, "web", "--remote", "--host", HOST, *args)
        assert done.returncode == 1 and done.stderr.startswith(said), (args, done.stderr)
        assert len(done.stderr.splitlines()) == 1


async def test_beyond_loopback_only_with_tls_and_remote_options_only_with_it(
    tmp_path: pathlib.Path,
) -> None:
    # Each is refused before anything is bound.
    for args, said in (
        (("--host", "0.0.0.0"), "poli: --host 0.0.0.0 listens beyond this machine: use --remote"),
        (("--host", "0.0.0.0", "--token", "x" * 20), "poli: --host 0.0.0.0 listens beyond"),
        (("--remote", "--host", "0.0.0.0"), "poli: --host 0.0.0.0 listens on every address"),
        (("--remote", "--token", "x" * 20), "poli: --token is for the loopback monitor"),
        (("--device", "phone",), "poli: --device goes with --remote"),
        (("--hostname", "box.lan",), "poli: --hostname goes with --remote"),
    ):  # fmt: skip
        done = await asyncio.to_thread(_cli, tmp_path, "web", *args)
        assert done.returncode == 1 and done.stderr.startswith(said), (args, done.stderr)
        assert "Traceback" not in done.stderr


def test_devices_keep_hashes_only_and_say_what_is_wrong(tmp_path: pathlib.Path) -> None:
    devices = Devices(tmp_path / "web" / "devices.json")
    token = devices.add("phone")
    assert devices.check(token) == "phone" and devices.check(token + "x") is None
    assert token not in devices.path.read_text()
    assert devices.path.stat().st_mode & 0o777 == 0o600
    with pytest.raises(UiError, match="already paired"):
        devices.add("phone")
    with pytest.raises(UiError, match="use 1-40 letters"):
        devices.add("my phone")
    # another process revokes it: this one sees the file change at the next check
    Devices(devices.path).revoke("phone")
    assert devices.check(token) is None
    with pytest.raises(UiError, match=r"no device named 'phone' \(paired: none\)"):
        devices.revoke("phone")
    devices.path.write_text("[1, 2]")
    with pytest.raises(UiError, match="not a devices file"):
        devices.list()


async def test_devices_add_prints_the_url_and_qr_code_or_only_the_token(
    tmp_path: pathlib.Path,
) -> None:
    # no remote monitor has run yet: the token alone, with how to use it
    alone = await asyncio.to_thread(_cli, tmp_path, "web", "devices", "add", "laptop")
    assert alone.returncode == 0, alone.stderr
    first = alone.stdout.splitlines()[0]
    assert first.startswith("device laptop: token ")
    token = first.rsplit(" ", 1)[1]
    assert Devices().check(token) == "laptop"
    # with --url: the URL, and a QR code that reads as it
    given = await asyncio.to_thread(
        _cli, tmp_path, "web", "devices", "add", "tablet", "--url", "https://box.lan:8443/"
    )
    lines = given.stdout.splitlines()
    url = lines[0].split(": ", 1)[1]
    assert url.startswith("https://box.lan:8443/?token=")
    assert _decode(read_qr_text("\n".join(lines[1:-1]))) == url
    assert lines[-1] == "The token is not shown again."
    for args, said in (
        (("add", "x", "--url", "http://box.lan:8443"), "poli: --url 'http://box.lan:8443': give"),
        (("add", "my phone"), "poli: device name 'my phone': use 1-40 letters"),
        (("add", "laptop"), "poli: device 'laptop' is already paired"),
        (("revoke", "nobody"), "poli: no device named 'nobody' (paired: laptop, tablet)"),
    ):
        done = await asyncio.to_thread(_cli, tmp_path, "web", "devices", *args)
        assert done.returncode == 1 and done.stderr.startswith(said), (args, done.stderr)
