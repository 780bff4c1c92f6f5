"""An engine on another machine, reached over TCP with TLS: its address, its certificate's fingerprint,
and the fingerprints this client has accepted (docs/security.md).

Like SSH's known_hosts: the first connection shows the fingerprint for the user to compare with what the
engine printed (``ember engine serve --listen``); once accepted it is remembered per address, and a
different certificate at that address later is refused, with both fingerprints. Stdlib only: the GUI,
the CLI and the tests use it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

DEFAULT_PORT = 7443


class CertificateMismatch(ConnectionError):
    """The engine presents a certificate other than the one accepted for its address before."""


class UnknownCertificate(ConnectionError):
    """No certificate was accepted for this address yet: the user must compare the fingerprint."""

    def __init__(self, address: str, fingerprint: str):
        super().__init__(f"The engine at {address} presents certificate {fingerprint}, not yet trusted. "
                         "Compare it with the fingerprint the engine printed when it started "
                         "(ember engine status on its machine), then accept it.")
        self.address, self.fingerprint = address, fingerprint


def parse_address(text: str) -> tuple[str, int]:
    """``host:port``, ``[v6]:port`` or ``host`` (port 7443) -> (host, port)."""
    text = text.strip()
    if not text:
        raise ValueError("No engine address: give host:port, e.g. gpu-server:7443")
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.lstrip(":") or str(DEFAULT_PORT)
    elif text.count(":") == 1:
        host, port = text.split(":")
    else:
        host, port = text, str(DEFAULT_PORT)
    if not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{text!r} is not host:port (a port from 1 to 65535; 0 to listen on any free one)")
    return host, int(port)


def fingerprint_of_der(der: bytes) -> str:
    """SHA-256 of a certificate, as colon-separated hex pairs (what browsers and openssl show)."""
    digest = hashlib.sha256(der).hexdigest().upper()
    return ":".join(digest[i:i + 2] for i in range(0, len(digest), 2))


class _PrivateMap:
    """address -> a string, in a small JSON file of this client's, written 0600 (atomically)."""

    def __init__(self, path: Path):
        self.path = path

    def _read(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, address: str) -> str | None:
        return self._read().get(address)

    def _set(self, address: str, value: str) -> None:
        data = self._read()
        data[address] = value
        self._write(data)

    def forget(self, address: str) -> None:
        data = self._read()
        if data.pop(address, None) is not None:
            self._write(data)

    def _write(self, data: dict[str, str]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, self.path)


class SavedLogins(_PrivateMap):
    """address -> the user's token for that engine, kept only when the user asks."""

    def save(self, address: str, token: str) -> None:
        self._set(address, token)


class KnownEngines(_PrivateMap):
    """address -> the accepted certificate fingerprint."""

    def accept(self, address: str, fingerprint: str) -> None:
        self._set(address, fingerprint)

    def check(self, address: str, fingerprint: str) -> None:
        """Raise unless ``fingerprint`` is the one accepted for ``address``."""
        known = self.get(address)
        if known is None:
            raise UnknownCertificate(address, fingerprint)
        if known != fingerprint:
            raise CertificateMismatch(
                f"The engine at {address} presents a DIFFERENT certificate ({fingerprint}) from the one accepted "
                f"before ({known}). Someone may be intercepting the connection, or the engine's certificate was "
                "replaced. Check with its administrator; forget the old one only if the change is expected.")
