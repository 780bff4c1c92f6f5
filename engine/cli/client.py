"""A small blocking client of the engine, for the CLI, tests, benchmarks and scripts.

    with BlockingClient.connect() as c:
        job = c.call("jobs.start", kind="system.probe", spec={})
        sub = c.subscribe([f"run/{job['id']}/*"], since=0)
        for ev in c.events(timeout=30): ...
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import shlex
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

from engine.api import paths as paths_mod
from engine.api.protocol import MAX_FRAME_BYTES, PROTOCOL_VERSION, RpcError, encode, request
from engine.api.remote_engine import (
    CertificateMismatch,
    KnownEngines,
    UnknownCertificate,
    fingerprint_of_der,
    parse_address,
)


class EngineNotRunning(ConnectionError):
    """No engine answers on the socket."""


class ChangedCertificate(CertificateMismatch):
    """The engine at ``address`` presents ``presented``, not the ``pinned`` certificate accepted for it before."""

    def __init__(self, message: str, address: str, presented: str, pinned: str):
        super().__init__(message)
        self.address, self.presented, self.pinned = address, presented, pinned


class BlockingClient:
    def __init__(self, sock: socket.socket, timeout: float = 30.0):
        self.sock = sock
        self.timeout = timeout
        self._buf = bytearray()
        self._ids = itertools.count(1)
        self._events: collections.deque[dict[str, Any]] = collections.deque()
        self.server: dict[str, Any] = {}

    @classmethod
    def connect(cls, p: paths_mod.Paths | None = None, client: str = "ember-cli",
                timeout: float = 30.0, token: str | None = None) -> BlockingClient:
        p = p or paths_mod.resolve()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(str(p.socket))
            if token is None:
                token = paths_mod.read_token(p)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            sock.close()
            raise EngineNotRunning(f"No engine is running ({p.socket}: {exc.strerror})") from None
        except OSError:
            sock.close()
            raise
        return cls._greet(sock, timeout, token, client)

    @classmethod
    def connect_tls(cls, address: str, token: str, known: KnownEngines | None = None, client: str = "ember-cli",
                    timeout: float = 30.0, accept: str | None = None) -> BlockingClient:
        """An engine on another machine (``ember engine serve --listen``), over TCP with TLS.

        Its certificate must be the one ``known`` accepted for ``address`` before (else UnknownCertificate,
        with the fingerprint to compare, or CertificateMismatch); ``accept`` is a fingerprint the user has
        compared: it is remembered when the engine presents exactly that one.
        """
        host, port = parse_address(address)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.check_hostname = False  # identity is the pinned fingerprint, as SSH's host keys
        ctx.verify_mode = ssl.CERT_NONE
        raw = socket.create_connection((host, port), timeout=timeout)
        try:
            sock = ctx.wrap_socket(raw, server_hostname=host)
        except (ssl.SSLError, OSError):
            raw.close()
            raise
        presented = fingerprint_of_der(sock.getpeercert(binary_form=True) or b"")
        known = known or KnownEngines(paths_mod.known_engines_file())
        try:
            if accept is not None and accept.upper() == presented and known.get(address) in (None, presented):
                known.accept(address, presented)
            known.check(address, presented)
        except CertificateMismatch as exc:
            sock.close()
            # With both fingerprints kept apart from the words: the CLI lays them out for comparing.
            raise ChangedCertificate(str(exc), address, presented, known.get(address) or "") from None
        except ConnectionError:
            sock.close()
            raise
        return cls._greet(sock, timeout, token, client)

    @classmethod
    def _greet(cls, sock: socket.socket, timeout: float, token: str, client: str) -> BlockingClient:
        """The hello handshake on a fresh connection; the client, or the socket closed and the error raised."""
        c = cls(sock, timeout)
        try:
            c.server = c.call("hello", token=token, protocol=PROTOCOL_VERSION, client=client)
        except BaseException:
            c.close()
            raise
        return c

    def __enter__(self) -> BlockingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    # ---- framing
    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_message(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next frame, or None on timeout. Raises ConnectionError when the engine hangs up."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line = bytes(self._buf[: nl + 1])
                del self._buf[: nl + 1]
                return json.loads(line)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(1 << 20)
            except TimeoutError:
                return None
            if not chunk:
                raise ConnectionError("The engine closed the connection")
            self._buf += chunk
            if len(self._buf) > 4 * MAX_FRAME_BYTES and b"\n" not in self._buf:
                raise ConnectionError("The engine sent an oversized frame")

    # ---- requests
    def call(self, method: str, **params: Any) -> Any:
        req_id = next(self._ids)
        self.send_raw(encode(request(req_id, method, params)))
        deadline = time.monotonic() + self.timeout
        while True:
            msg = self.read_message(deadline - time.monotonic())
            if msg is None:
                raise TimeoutError(f"No reply to {method} within {self.timeout:.0f} s")
            if msg.get("id") is None and "error" in msg and "method" not in msg:
                raise RpcError.from_json(msg["error"])  # about the connection itself (refused, frame too large)
            if msg.get("id") == req_id and ("result" in msg or "error" in msg):
                if "error" in msg:
                    raise RpcError.from_json(msg["error"])
                return msg["result"]
            if msg.get("method") == "event":
                self._events.append(msg["params"])

    def subscribe(self, topics: list[str], since: int | None = None) -> int:
        params: dict[str, Any] = {"topics": topics}
        if since is not None:
            params["since"] = since
        return int(self.call("subscribe", **params)["subscription"])

    def next_event(self, timeout: float | None = None) -> dict[str, Any] | None:
        if self._events:
            return self._events.popleft()
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while (remaining := deadline - time.monotonic()) > 0:
            msg = self.read_message(remaining)
            if msg is None:
                return None
            if msg.get("method") == "event":
                return msg["params"]
        return None

    def events(self, timeout: float = 30.0) -> Iterator[dict[str, Any]]:
        """Events until ``timeout`` seconds pass with none."""
        while (ev := self.next_event(timeout)) is not None:
            yield ev


def engine_command() -> list[str]:
    return [sys.executable, "-m", "engine", "serve"]


def spawn_engine(p: paths_mod.Paths | None = None) -> subprocess.Popen:
    """Start an engine detached from the caller (own session), logging to engine.log."""
    p = p or paths_mod.resolve()
    p.home.mkdir(parents=True, exist_ok=True)
    with open(p.engine_log, "ab") as log:
        return subprocess.Popen(engine_command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True, env=dict(os.environ))


def ensure_engine(p: paths_mod.Paths | None = None, timeout: float = 20.0,
                  client: str = "ember-cli") -> BlockingClient:
    """Connect to the engine, starting one first if none answers; with ``EMBER_ENGINE=host:port`` set, to that
    engine over TLS instead, as the user whose token ``EMBER_TOKEN`` holds (docs/security.md)."""
    remote = os.environ.get("EMBER_ENGINE")
    if remote:
        token = os.environ.get("EMBER_TOKEN", "")
        if not token:
            raise EngineNotRunning(f"EMBER_ENGINE is {remote} but EMBER_TOKEN is empty: set it to your user token")
        try:
            return BlockingClient.connect_tls(remote, token, client=client, timeout=timeout,
                                              accept=os.environ.get("EMBER_ENGINE_FINGERPRINT"))
        except (UnknownCertificate, CertificateMismatch):
            raise  # the caller explains them (certificate_advice)
        except ValueError as exc:
            raise EngineNotRunning(f"EMBER_ENGINE is {remote!r}: {exc}") from None
        except OSError as exc:  # refused, unknown host, timed out, not TLS on that port
            raise EngineNotRunning(f"Cannot reach the engine at {remote} (EMBER_ENGINE): {exc}. Check the address, "
                                   "and that the engine runs there with `ember engine serve --listen`.") from None
    p = p or paths_mod.resolve()
    try:
        return BlockingClient.connect(p, client=client)
    except EngineNotRunning:
        pass
    proc = spawn_engine(p)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return BlockingClient.connect(p, client=client)
        except (EngineNotRunning, RpcError, ConnectionError):
            if proc.poll() not in (None, 0, 3):
                raise EngineNotRunning(
                    f"The engine exited with code {proc.returncode}; see {p.engine_log}") from None
            time.sleep(0.05)
    raise EngineNotRunning(f"The engine did not answer within {timeout:.0f} s; see {p.engine_log}")


def certificate_advice(exc: ConnectionError, argv: list[str]) -> str:
    """What the CLI prints for an engine certificate that is new or changed: the fingerprints to compare and
    the exact commands that go on (``argv``: this command's arguments, to repeat with the fingerprint)."""
    again = "ember " + shlex.join(argv)
    if isinstance(exc, UnknownCertificate):
        address, presented = exc.address, exc.fingerprint
        offered = os.environ.get("EMBER_ENGINE_FINGERPRINT")
        first = (f"EMBER_ENGINE_FINGERPRINT is {offered}, but the engine at {address} presents another certificate."
                 if offered else f"The engine at {address} is not known on this machine yet.")
        return (f"{first}\nIts certificate's SHA-256 fingerprint:\n  {presented}\n"
                "Compare it with the fingerprint the engine printed when it started (`ember engine serve "
                "--listen`; `ember engine status --json` on its machine shows it too).\n"
                f"If they are the same, accept it by running the command again with it:\n"
                f"  EMBER_ENGINE_FINGERPRINT={presented} {again}\n"
                f"It is remembered for {address} from then on. If they differ, do not accept it: someone may be "
                "intercepting the connection.")
    address = getattr(exc, "address", os.environ.get("EMBER_ENGINE", "?"))
    presented, pinned = getattr(exc, "presented", "?"), getattr(exc, "pinned", "?")
    return (f"WARNING: the engine at {address} presents a DIFFERENT certificate from the one accepted for it "
            f"before.\n  accepted before: {pinned}\n  presented now:   {presented}\n"
            "Someone may be intercepting the connection, or the engine's certificate was replaced. Your token "
            "was not sent. Ask the engine's administrator for its fingerprint (`ember engine status --json` on its "
            "machine).\n"
            "Only if the change is expected, forget the old certificate and accept the new one:\n"
            f"  ember engine forget {shlex.quote(address)}\n"
            f"  EMBER_ENGINE_FINGERPRINT={presented} {again}")


def forget_certificate(address: str) -> tuple[int, str]:
    """Drop the certificate accepted for ``address`` (after a legitimate change): exit code and what to print."""
    known = KnownEngines(paths_mod.known_engines_file())
    pinned = known.get(address)
    if pinned is None:
        return 1, (f"No certificate is accepted for {address} on this machine: nothing to forget. Give the address "
                   "exactly as EMBER_ENGINE names it.")
    known.forget(address)
    return 0, (f"Forgot the certificate accepted for {address} ({pinned}). The next connection shows the "
               "engine's fingerprint to compare and accept.")
