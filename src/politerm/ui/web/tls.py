"""The TLS certificate of ``poli web --remote``: the user's own, or one we make and keep.

A made certificate is self-signed (ECDSA P-256, valid for the names the phone uses), kept
with its key in ``<user state>/web/tls/`` (files 0600, folder 0700) and reused while it
covers those names and has more than a month to run. Nobody vouches for it: the person
checks the SHA-256 fingerprint ``poli web`` prints against the one the phone's browser shows
(or installs ``cert.pem`` on the phone as trusted).
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import pathlib
import typing as t

import platformdirs
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from politerm._internal.private import private_dir, write_private
from politerm.errors import UiError

_VALID = datetime.timedelta(days=397)  # what browsers accept for a server certificate
_RENEW = datetime.timedelta(days=30)
_KEY_USAGE = dict.fromkeys(
    ("content_commitment", "key_encipherment", "data_encipherment", "key_agreement",
     "crl_sign", "encipher_only", "decipher_only"),
    False,
) | {"digital_signature": True, "key_cert_sign": True}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Certificate:
    """A certificate and key on disk, and the certificate's SHA-256 fingerprint."""

    cert: pathlib.Path
    key: pathlib.Path
    fingerprint: str
    generated: bool


def tls_dir() -> pathlib.Path:
    """Where a made certificate is kept (``<user state>/web/tls``)."""
    return platformdirs.user_state_path("politerm") / "web" / "tls"


def fingerprint(cert: x509.Certificate) -> str:
    """The SHA-256 fingerprint as browsers show it: hex pairs joined by colons."""
    return _colons(cert.fingerprint(hashes.SHA256()))


def _colons(digest: bytes) -> str:
    return ":".join(f"{b:02X}" for b in digest)


def user_certificate(cert: pathlib.Path, key: pathlib.Path) -> Certificate:
    """The user's certificate and key, checked to load and to belong together.

    Raises
    ------
    UiError
        A file is missing or unreadable, not PEM, or the key is not the certificate's.
    """
    try:
        loaded = x509.load_pem_x509_certificate(cert.read_bytes())
    except (OSError, ValueError) as exc:
        msg = f"--cert {cert}: not a readable PEM certificate ({_why(exc)})"
        raise UiError(msg) from None
    try:
        private = serialization.load_pem_private_key(key.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        msg = f"--key {key}: not a readable unencrypted PEM private key ({_why(exc)})"
        raise UiError(msg) from None
    if private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ) != loaded.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ):
        msg = f"--key {key} is not the key of --cert {cert}"
        raise UiError(msg)
    return Certificate(cert, key, fingerprint(loaded), generated=False)


def self_signed(names: t.Sequence[str], *, directory: pathlib.Path | None = None) -> Certificate:
    """A self-signed certificate for ``names`` (host names or IP addresses), made if needed.

    The one kept in ``directory`` is reused when it names all of ``names`` and stays valid
    for more than 30 days; otherwise a new key and certificate replace it.
    """
    directory = directory or tls_dir()
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    kept = _kept(cert_path, key_path, names)
    if kept is not None:
        return Certificate(cert_path, key_path, fingerprint(kept), generated=False)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"politerm {names[0]}")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALID)
        .add_extension(x509.SubjectAlternativeName([_general_name(n) for n in names]), False)
        # Its own issuer: a client may trust this file as the authority (httpx ``verify=``).
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(**_KEY_USAGE),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    private_dir(directory)
    write_private(
        key_path,
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
    write_private(cert_path, cert.public_bytes(serialization.Encoding.PEM))
    return Certificate(cert_path, key_path, fingerprint(cert), generated=True)


def _kept(cert: pathlib.Path, key: pathlib.Path, names: t.Sequence[str]) -> x509.Certificate | None:
    if not (cert.is_file() and key.is_file()):
        return None
    try:
        loaded = x509.load_pem_x509_certificate(cert.read_bytes())
        san = loaded.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, x509.ExtensionNotFound):
        return None
    if loaded.not_valid_after_utc - datetime.datetime.now(datetime.UTC) < _RENEW:
        return None
    covered = set(san)
    return loaded if all(_general_name(n) in covered for n in names) else None


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _why(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).splitlines()[0]
