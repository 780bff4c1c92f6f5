"""The engine's TLS listener's certificate: the team's own, or a self-signed one made on first use.

The self-signed certificate (ECDSA P-256, ten years, this machine's names and addresses) and its key live
in ``<data>/tls/`` (the key 0600). Clients check it the way SSH checks a host key: by its SHA-256
fingerprint, shown by ``ember engine serve --listen`` and ``engine.status``, confirmed by the user once and
remembered; a different certificate later is refused (engine/api/remote_engine.py).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import ssl
from pathlib import Path

from engine.api.remote_engine import fingerprint_of_der


def self_signed(folder: Path, extra_names: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """``(cert, key)`` in ``folder``, made now unless they exist."""
    cert, key = folder / "engine.crt", folder / "engine.key"
    if cert.exists() and key.exists():
        return cert, key
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    private = ec.generate_private_key(ec.SECP256R1())
    host = socket.gethostname()
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in dict.fromkeys(("localhost", host, *extra_names)) if n]
    for addr in ("127.0.0.1", "::1"):
        names.append(x509.IPAddress(ipaddress.ip_address(addr)))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"Ember Studio engine on {host}")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                   .public_key(private.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=3650))
                   .add_extension(x509.SubjectAlternativeName(names), critical=False)
                   .sign(private, hashes.SHA256()))
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return cert, key


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


def fingerprint(cert: Path) -> str:
    return fingerprint_of_der(ssl.PEM_cert_to_DER_cert(cert.read_text()))
