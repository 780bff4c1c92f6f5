"""The engine: an asyncio Unix-socket JSON-RPC server that outlives the GUI.

Run it with ``ember engine serve`` (foreground) or ``ember engine start``
(detached). One engine per runtime dir: it holds an flock on ``engine.lock``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import secrets
import signal
import socket
import sqlite3
import struct
import sys
import time
from pathlib import Path

import engine
from engine.api import paths as paths_mod
from engine.api import protocol
from engine.api.protocol import (
    FRAME_TOO_LARGE,
    HANDSHAKE_REQUIRED,
    MAX_FRAME_BYTES,
    UNAUTHORIZED,
    RpcError,
)
from engine.api.remote_engine import parse_address
from engine.daemon import tls
from engine.daemon.access import Access
from engine.daemon.eventbus import EventBus
from engine.daemon.handlers import Handlers
from engine.daemon.hosts import Hosts
from engine.daemon.inference import WorkerPool
from engine.daemon.jobs import JobManager
from engine.daemon.session import Session
from engine.daemon.store_guard import BACKUP_EVERY_S, backup, open_store

log = logging.getLogger("engine")
EXIT_ALREADY_RUNNING = 3


class AlreadyRunning(RuntimeError):
    pass


def acquire_lock(p: paths_mod.Paths) -> int:
    fd = os.open(p.lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip()
        os.close(fd)
        raise AlreadyRunning(f"An engine is already running for this data dir (pid {holder or '?'})") from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd


def write_token(p: paths_mod.Paths) -> str:
    token = secrets.token_hex(32)
    tmp = p.token.with_suffix(".tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)
    os.replace(tmp, p.token)
    return token


def peer_uid(sock: socket.socket | None) -> int | None:
    if sock is None or not hasattr(socket, "SO_PEERCRED"):
        return None
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid


LOGIN_FAILURES = 5  # failed logins from one address, or for one user, within LOGIN_WINDOW_S: refused a while
GLOBAL_LOGIN_FAILURES = 50  # failed logins from all addresses together within LOGIN_WINDOW_S: the network waits
LOGIN_WINDOW_S = 60.0
# A connection that has not said hello by then is answered with an error and closed: an idle socket
# costs the engine a file descriptor and memory, and nobody legitimate needs more than a round trip.
HELLO_TIMEOUT_S = 10.0
HELLO_TIMEOUT_ENV = "EMBER_HELLO_TIMEOUT_S"
LOGIN_HINT = "Check the token (ember users token NAME makes a new one)."


def hello_timeout() -> float:
    try:
        return max(0.1, float(os.environ.get(HELLO_TIMEOUT_ENV, HELLO_TIMEOUT_S)))
    except ValueError:
        return HELLO_TIMEOUT_S


class LoginLimits:
    """Failed network logins, counted per address, per user and over all addresses (docs/security.md).

    Guessing from many addresses stays slow too: past GLOBAL_LOGIN_FAILURES a minute, no network login
    is accepted for the rest of the minute (the local socket never counts and is never refused).
    """

    def __init__(self) -> None:
        self._failures: dict[str, list[float]] = {}  # "address:..." or "user:..." -> failure times
        self._all: list[float] = []

    def failed(self, address: str, user: str | None = None) -> None:
        now = time.monotonic()
        keys = [f"address:{address}"] + ([f"user:{user}"] if user else [])
        for key in keys:
            self._failures[key] = [*self._recent(self._failures.get(key, []), now), now]
        self._all = [*self._recent(self._all, now), now]
        if len(self._failures) > 4 * GLOBAL_LOGIN_FAILURES:  # many addresses: forget those gone quiet
            self._failures = {k: v for k, v in self._failures.items() if self._recent(v, now)}

    def refusal(self, address: str, user: str | None = None) -> str:
        """Why a login from ``address`` (as ``user``) is refused now, with the wait; '' when it is not."""
        now = time.monotonic()
        self._all = self._recent(self._all, now)
        wait = self._wait(self._all, GLOBAL_LOGIN_FAILURES, now)
        if wait:
            return f"Too many failed logins on this engine; try again in {wait:.0f} s"
        wait = self._wait(self._failures.get(f"address:{address}", []), LOGIN_FAILURES, now)
        if wait:
            return f"Too many failed logins from {address}; try again in {wait:.0f} s"
        wait = self._wait(self._failures.get(f"user:{user}", []), LOGIN_FAILURES, now) if user else 0.0
        if wait:
            return f"Too many failed logins for {user}; try again in {wait:.0f} s"
        return ""

    @staticmethod
    def _recent(times: list[float], now: float) -> list[float]:
        return [t for t in times if now - t < LOGIN_WINDOW_S]

    @classmethod
    def _wait(cls, times: list[float], limit: int, now: float) -> float:
        recent = cls._recent(times, now)
        return LOGIN_WINDOW_S - (now - recent[-limit]) if len(recent) >= limit else 0.0


class Engine:
    def __init__(self, p: paths_mod.Paths, max_concurrent: int = 2, listen: str | None = None,
                 cert: str | None = None, key: str | None = None):
        self.paths = p
        self.listen = listen
        self.tls: dict[str, str] = {}  # {listen, fingerprint, certificate} once the TLS listener is up
        self._cert, self._key = cert, key
        self.logins = LoginLimits()
        self.hello_timeout_s = hello_timeout()
        self.started_at = time.time()
        self.store, self.store_health = open_store(p.db, p.runs)
        self.access = Access(self.store)
        self.bus = EventBus(self.store)
        self.hosts = Hosts(p, self.store, self.bus)
        self.jobs = JobManager(p, self.store, self.bus, max_concurrent=max_concurrent, hosts=self.hosts)
        self.inference = WorkerPool(self.bus, p.runs, threads=self.jobs.free_cores, served=self.jobs.serving)
        self.sessions: set[Session] = set()
        self.token = ""
        self.stopping = asyncio.Event()
        self.handlers = Handlers(self)
        self._next_client = 1

    async def run(self) -> None:
        p = self.paths
        self.token = write_token(p)
        with contextlib.suppress(FileNotFoundError):
            p.socket.unlink()
        old_umask = os.umask(0o177)  # the socket is born 0600: no window where others can connect
        try:
            server = await asyncio.start_unix_server(self._on_connect, path=str(p.socket),
                                                     limit=MAX_FRAME_BYTES)
        finally:
            os.umask(old_umask)
        os.chmod(p.socket, 0o600)
        tls_server = await self._start_tls() if self.listen else None
        counts = self.jobs.rediscover()
        log.info("engine %s ready on %s (pid %d); jobs %s", engine.__version__, p.socket, os.getpid(), counts)
        if self.store_health["message"]:
            self.bus.publish("engine", {"state": "warning", "message": self.store_health["message"],
                                        "hint": "See engine.log; the damaged file is kept for inspection."})
        backups = asyncio.get_running_loop().create_task(self._backups())
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop, f"signal {sig.name}")
        async with server:
            await self.stopping.wait()
            self.bus.publish("engine", {"state": "stopping", "reason": self.stop_reason})
            self.bus.flush()
            server.close()
            if tls_server is not None:
                tls_server.close()
            for session in list(self.sessions):
                await session.close()
            backups.cancel()
            await self.jobs.close()
            await self.hosts.close()
            await self.inference.close()
        self.bus.flush()
        for f in (p.socket, p.token):
            with contextlib.suppress(FileNotFoundError):
                f.unlink()
        self.store.close()
        log.info("engine stopped (%s)", self.stop_reason)

    async def _backups(self) -> None:
        """A backup of the store now and every BACKUP_EVERY_S (SQLite's online backup: writes may go on)."""
        while True:
            try:
                self.store_health["last_backup"] = str(backup(self.store))
            except (OSError, sqlite3.Error) as exc:  # a full disk must not stop the engine; it is reported
                self.store_health["backup_error"] = str(exc)
                log.warning("store backup failed: %s", exc)
            await asyncio.sleep(BACKUP_EVERY_S)

    stop_reason = ""

    def request_stop(self, reason: str) -> None:
        self.stop_reason = reason
        self.stopping.set()

    async def _start_tls(self) -> asyncio.Server:
        """The TCP listener with TLS (docs/security.md): the team's certificate, or a self-signed one."""
        host, port = parse_address(self.listen or "")
        if self._cert and self._key:
            cert, key = Path(self._cert).expanduser(), Path(self._key).expanduser()
        else:
            cert, key = tls.self_signed(self.paths.home / "tls", (host,) if host not in ("0.0.0.0", "::") else ())
        server = await asyncio.start_server(self._on_connect_tcp, host, port, ssl=tls.server_context(cert, key),
                                            limit=MAX_FRAME_BYTES, ssl_handshake_timeout=10)
        bound = server.sockets[0].getsockname()
        self.tls = {"listen": f"{host}:{bound[1]}", "fingerprint": tls.fingerprint(cert), "certificate": str(cert)}
        log.info("listening on %s with TLS; certificate SHA-256 fingerprint %s", self.tls["listen"],
                 self.tls["fingerprint"])
        return server

    def login_failed(self, address: str, user: str | None = None) -> None:
        """A hello over the network failed: counts against the address, the user its token named, and all."""
        self.logins.failed(address, user)

    def login_refusal(self, address: str, user: str | None = None) -> RpcError | None:
        """The error a network login from ``address`` (as ``user``) gets now, or None when it may try."""
        why = self.logins.refusal(address, user)
        if not why:
            return None
        log.warning("refused a login from %s%s: %s", address, f" as {user}" if user else "", why)
        return RpcError(UNAUTHORIZED, why, {"hint": LOGIN_HINT})

    async def _on_connect_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("?",)
        address = str(peer[0])
        refused = self.login_refusal(address)
        if refused is not None:
            writer.write(protocol.encode(protocol.error(None, refused)))
            with contextlib.suppress(ConnectionError, OSError):
                await writer.drain()
                writer.close()
            return
        await self._session(reader, writer, address)

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        uid = peer_uid(writer.get_extra_info("socket"))
        if uid is not None and uid != os.getuid():
            log.warning("refused a connection from uid %s", uid)
            writer.close()
            return
        await self._session(reader, writer, None)

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, remote: str | None) -> None:
        session = Session(self, f"c{self._next_client}", writer, remote)
        self._next_client += 1
        self.sessions.add(session)
        try:
            await self._serve(session, reader)
        finally:
            self.sessions.discard(session)
            await session.close()

    async def _serve(self, session: Session, reader: asyncio.StreamReader) -> None:
        hello_by = time.monotonic() + self.hello_timeout_s
        while not session.closed:
            try:
                if session.authenticated:
                    line = await reader.readuntil(b"\n")
                else:  # the whole handshake, however slowly its bytes come, has one deadline
                    line = await asyncio.wait_for(reader.readuntil(b"\n"), max(0.0, hello_by - time.monotonic()))
            except TimeoutError:
                if session.authenticated:
                    return  # the socket's own timeout, not the handshake's
                log.warning("client %s%s sent no hello within %.0f s; closing it", session.id,
                            f" from {session.remote}" if session.remote else "", self.hello_timeout_s)
                session.send_error(None, RpcError(
                    HANDSHAKE_REQUIRED, f"No hello within {self.hello_timeout_s:g} s; closing this connection",
                    {"hint": "Send hello {token, protocol} as soon as the connection is open."}))
                await session.drain()
                return
            except asyncio.IncompleteReadError:
                return  # the client went away, possibly mid-line
            except asyncio.LimitOverrunError:
                session.send_error(None, RpcError(
                    FRAME_TOO_LARGE, f"Frame over the {MAX_FRAME_BYTES}-byte limit; closing this connection",
                    {"hint": "Split the request; large payloads belong in files referenced by path."}))
                await session.drain()
                return
            except (ConnectionError, OSError):
                return
            await session.handle_line(line)


def serve(max_concurrent: int = 2, listen: str | None = None, cert: str | None = None, key: str | None = None) -> int:
    """Run the engine in the foreground until stopped; returns the exit code."""
    p = paths_mod.resolve()
    paths_mod.ensure_private_dir(p.runtime)
    # Runs and the store may hold paths and specs a user considers private.
    p.home.mkdir(parents=True, exist_ok=True, mode=0o700)
    p.runs.mkdir(exist_ok=True, mode=0o700)
    try:
        lock_fd = acquire_lock(p)
    except AlreadyRunning as exc:
        sys.stderr.write(f"{exc}\n")
        return EXIT_ALREADY_RUNNING
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(Engine(p, max_concurrent=max_concurrent, listen=listen, cert=cert, key=key).run())
    finally:
        os.close(lock_fd)
    return 0

