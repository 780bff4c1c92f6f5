"""The GUI's connection to the engine: JSON-RPC 2.0 over a QLocalSocket, or over TCP with TLS (QSslSocket)
to an engine on another machine, its certificate pinned by fingerprint (engine/api/remote_engine.py).

Everything is asynchronous and runs on the Qt event loop: ``request`` returns
at once and the callback runs when the reply line arrives. Subscriptions are
kept here, not on the server, so that after a reconnect they are re-sent with
``since=<last seq seen>`` and a page never misses an event or sees one twice.
The wire format is docs/protocol.md.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtNetwork import QAbstractSocket, QLocalSocket, QSslSocket

from engine.api import paths as engine_paths
from engine.api import protocol
from engine.api.remote_engine import (
    CertificateMismatch,
    KnownEngines,
    UnknownCertificate,
    fingerprint_of_der,
    parse_address,
)

log = logging.getLogger(__name__)

# Client-side error codes, outside the range the engine uses, so a page can tell
# "the engine said no" from "the request never got an answer".
NOT_CONNECTED = -32090
CONNECTION_LOST = -32091

Callback = Callable[[Any], None]
ErrorCallback = Callable[[protocol.RpcError], None]
EventCallback = Callable[[str, int, dict], None]


@dataclass
class Subscription:
    """A page's interest in some topics; survives reconnects."""

    topics: list[str]
    callback: EventCallback | None
    # Highest seq delivered to this subscription. None = live only, nothing seen yet.
    last_seq: int | None = None
    server_id: int | None = field(default=None, repr=False)

    def matches(self, topic: str) -> bool:
        return protocol.topic_matches(topic, self.topics)


@dataclass
class _Pending:
    method: str
    callback: Callback | None
    error_callback: ErrorCallback | None


class EngineClient(QObject):
    """Line-framed JSON-RPC client of the engine, with Qt signals for what happens."""

    connected = Signal(dict)  # the engine's hello reply: version, pid, last_seq, ...
    disconnected = Signal()
    event = Signal(str, int, dict)  # topic, seq, data (each seq once)
    error = Signal(str)  # a plain-language message for the user or the log
    # A request sent without an error callback failed: method, RpcError (then `error` as text too).
    request_failed = Signal(str, object)
    # A remote engine's certificate is not the accepted one: address, fingerprint, "unknown" or "changed".
    certificate_refused = Signal(str, str, str)
    hello_refused = Signal(object)  # the engine refused the token (an RpcError): wrong, revoked, expired

    def __init__(self, client_name: str = "ember-gui", parent: QObject | None = None):
        super().__init__(parent)
        self._client_name = client_name
        self._local = QLocalSocket(self)
        self._local.connected.connect(self._send_hello)
        # stateChanged, not disconnected: a refused connect never was "connected", so Qt
        # sends no `disconnected` for it, but the state always returns to Unconnected.
        self._local.stateChanged.connect(lambda _s: self._on_socket_state(self._local))
        self._local.readyRead.connect(self._read)
        self._tls = QSslSocket(self)
        self._tls.setPeerVerifyMode(QSslSocket.PeerVerifyMode.VerifyNone)  # identity: the pinned fingerprint
        self._tls.encrypted.connect(self._check_certificate)
        self._tls.stateChanged.connect(lambda _s: self._on_socket_state(self._tls))
        self._tls.readyRead.connect(self._read)
        self._socket: QLocalSocket | QSslSocket = self._local
        self.remote: str | None = None  # host:port of a remote engine, while connected to one
        self._known: KnownEngines | None = None
        self._buffer = bytearray()
        self._next_id = 1
        self._pending: dict[int, _Pending] = {}
        self._subscriptions: list[Subscription] = []
        self._server: dict[str, Any] | None = None  # hello reply; set = handshake done
        self._last_seq = 0
        self._attempting = False  # between connect_to_engine() and the end of that connection
        self._was_open = False

    # -- connection ---------------------------------------------------------

    @property
    def is_connected(self) -> bool:
        """True once the hello handshake has succeeded."""
        return self._server is not None

    @property
    def server(self) -> dict[str, Any]:
        return dict(self._server or {})

    @property
    def last_seq(self) -> int:
        """The highest event seq this client knows the engine has reached."""
        return self._last_seq

    def connect_to_engine(self, paths: engine_paths.Paths | None = None) -> bool:
        """Start connecting; ``connected`` or ``disconnected`` follows.

        Returns False at once (and emits nothing) when there is no engine to
        try: no token file means no engine has started in this runtime dir.
        """
        paths = paths or engine_paths.resolve()
        try:
            self._token = engine_paths.read_token(paths)
        except OSError:
            return False
        self._begin(self._local, None)
        self._local.connectToServer(str(paths.socket))
        return True

    def connect_remote(self, address: str, token: str, known: KnownEngines | None = None) -> None:
        """Start connecting to the engine at ``address`` over TLS as the user of ``token``; ``connected``,
        ``certificate_refused`` (then ``disconnected``) or ``disconnected`` follows."""
        host, port = parse_address(address)
        self._token = token
        self._known = known or KnownEngines(engine_paths.known_engines_file())
        self._begin(self._tls, address)
        self._tls.connectToHostEncrypted(host, port)

    def _begin(self, sock: QLocalSocket | QSslSocket, remote: str | None) -> None:
        if not self._unconnected():
            # Replacing a connection nobody reported closed: settle what waited on it.
            self._abort_quietly()
            self._server = None
            self._fail_pending()
        self._socket, self.remote = sock, remote
        self._buffer.clear()
        self._attempting = True
        self._was_open = False

    def _unconnected(self) -> bool:
        if isinstance(self._socket, QLocalSocket):
            return self._socket.state() == QLocalSocket.LocalSocketState.UnconnectedState
        return self._socket.state() == QAbstractSocket.SocketState.UnconnectedState

    def _check_certificate(self) -> None:
        """TLS is up: the certificate must be the one accepted for this address before hello is sent."""
        presented = fingerprint_of_der(bytes(self._tls.peerCertificate().toDer().data()))
        try:
            assert self._known is not None and self.remote is not None
            self._known.check(self.remote, presented)
        except (UnknownCertificate, CertificateMismatch) as exc:
            kind = "unknown" if isinstance(exc, UnknownCertificate) else "changed"
            if kind == "changed":  # an alarm; an unknown one is the first connection's question
                self.error.emit(str(exc))
            self.certificate_refused.emit(self.remote or "", presented, kind)
            self._tls.abort()
            return
        self._send_hello()

    def close(self) -> None:
        """Drop the connection; pending requests fail with CONNECTION_LOST."""
        self._abort_quietly()
        self._connection_ended()

    def _abort_quietly(self) -> None:
        if not self._unconnected():
            self._socket.blockSignals(True)
            self._socket.abort()
            self._socket.blockSignals(False)

    def _send_hello(self) -> None:
        self._was_open = True
        params = {"token": self._token, "protocol": protocol.PROTOCOL_VERSION,
                  "client": self._client_name}
        self._send("hello", params, self._on_hello, self._on_hello_refused)

    def _on_hello(self, reply: dict[str, Any]) -> None:
        self._server = reply
        self._last_seq = max(self._last_seq, int(reply.get("last_seq") or 0))
        for sub in self._subscriptions:
            self._send_subscribe(sub)
        self.connected.emit(reply)

    def _on_hello_refused(self, err: protocol.RpcError) -> None:
        if err.code == CONNECTION_LOST:
            return  # the connection ended before the engine answered (say, the window quit): not a refusal
        self.error.emit(f"The engine refused this client: {err}")
        self.hello_refused.emit(err)
        self._socket.abort()

    def _on_socket_state(self, sock: QObject) -> None:
        if sock is self._socket and self._unconnected():
            self._connection_ended()

    def _connection_ended(self) -> None:
        if not self._attempting:
            return  # already reported, or close() was called
        self._attempting = False
        was_connected = self._was_open
        self._was_open = False
        self._server = None
        for sub in self._subscriptions:
            sub.server_id = None
        self._fail_pending()
        if was_connected:
            log.info("engine connection closed")
        self.disconnected.emit()

    def _fail_pending(self) -> None:
        # No error signal for these: the connection banner already says what happened.
        pending, self._pending = self._pending, {}
        lost = protocol.RpcError(CONNECTION_LOST, "The connection to the engine was lost",
                                 {"hint": "The request may or may not have run; check and retry."})
        for p in pending.values():
            if p.error_callback is not None:
                self._call(p.error_callback, lost)

    # -- requests -----------------------------------------------------------

    def request(self, method: str, params: dict[str, Any] | None = None,
                callback: Callback | None = None,
                error_callback: ErrorCallback | None = None) -> int | None:
        """Send a request; ``callback(result)`` or ``error_callback(RpcError)`` follows.

        Without an error_callback, errors other than CONNECTION_LOST are emitted
        on ``error``. Callbacks run on the GUI thread. Returns the
        request id, or None when not connected (the error callback then runs on
        the next turn of the event loop, never inside this call).
        """
        if not self.is_connected:
            err = protocol.RpcError(NOT_CONNECTED, "Not connected to the engine",
                                    {"hint": "Wait for the engine to reconnect, then try again."})
            QTimer.singleShot(0, self, lambda: self._fail(method, err, error_callback))
            return None
        return self._send(method, params, callback, error_callback)

    def _send(self, method: str, params: dict[str, Any] | None,
              callback: Callback | None, error_callback: ErrorCallback | None) -> int:
        req_id = self._next_id
        self._next_id += 1
        self._pending[req_id] = _Pending(method, callback, error_callback)
        self._socket.write(protocol.encode(protocol.request(req_id, method, params)))
        return req_id

    def _fail(self, method: str, err: protocol.RpcError,
              error_callback: ErrorCallback | None) -> None:
        if error_callback is not None:
            self._call(error_callback, err)
        else:
            self.request_failed.emit(method, err)
            self.error.emit(f"{method}: {err}")

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        """Run a page's callback. A bug in one page must not stall the lines queued behind it."""
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - logged with its traceback, shown in the status bar
            log.exception("callback %r failed", fn)
            self.error.emit(f"Internal error in {getattr(fn, '__qualname__', fn)}; see the log.")

    # -- subscriptions --------------------------------------------------------

    def subscribe(self, topics: list[str], callback: EventCallback | None = None,
                  since: int | None = None) -> Subscription:
        """Follow ``topics`` (globs) from ``since`` (None: live only) across reconnects."""
        sub = Subscription(list(topics), callback, since)
        self._subscriptions.append(sub)
        if self.is_connected:
            self._send_subscribe(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        if sub not in self._subscriptions:
            return
        self._subscriptions.remove(sub)
        if self.is_connected and sub.server_id is not None:
            self._send("unsubscribe", {"subscription": sub.server_id}, None, lambda _e: None)

    def _send_subscribe(self, sub: Subscription) -> None:
        params: dict[str, Any] = {"topics": sub.topics}
        if sub.last_seq is not None:
            params["since"] = sub.last_seq

        def done(reply: dict[str, Any]) -> None:
            sub.server_id = reply.get("subscription")
            if sub not in self._subscriptions:  # unsubscribed while the request was in flight
                self._send("unsubscribe", {"subscription": sub.server_id}, None, lambda _e: None)
            elif sub.last_seq is None:
                # A live-only subscription has seen everything up to replay_to: from now
                # on a reconnect asks for what came after it.
                sub.last_seq = int(reply.get("replay_to") or self._last_seq)

        self._send("subscribe", params, done, None)

    # -- reading --------------------------------------------------------------

    def _read(self) -> None:
        self._buffer += bytes(self._socket.readAll().data())
        while True:
            end = self._buffer.find(b"\n")
            if end < 0:
                break
            line = bytes(self._buffer[:end])
            del self._buffer[:end + 1]
            if line.strip():
                self._handle_line(line)
            if not self._open():
                return
        if len(self._buffer) > protocol.MAX_FRAME_BYTES:
            self.error.emit("The engine sent a frame over 1 MiB; reconnecting.")
            self._socket.abort()

    def _open(self) -> bool:
        if isinstance(self._socket, QLocalSocket):
            return self._socket.state() == QLocalSocket.LocalSocketState.ConnectedState
        return self._socket.state() == QAbstractSocket.SocketState.ConnectedState

    def _handle_line(self, line: bytes) -> None:
        try:
            msg = protocol.decode(line)
        except protocol.RpcError as exc:
            self.error.emit(f"Unreadable message from the engine: {exc}")
            return
        if not isinstance(msg, dict):
            return
        if msg.get("method") == "event":
            self._dispatch_event(msg.get("params") or {})
            return
        pending = self._pending.pop(msg.get("id"), None) if "id" in msg else None
        if pending is None:
            log.warning("reply to an unknown request: %s", json.dumps(msg)[:200])
            return
        if "error" in msg:
            self._fail(pending.method, protocol.RpcError.from_json(msg["error"] or {}),
                       pending.error_callback)
        elif pending.callback is not None:
            self._call(pending.callback, msg.get("result"))

    def _dispatch_event(self, params: dict[str, Any]) -> None:
        topic = str(params.get("topic", ""))
        seq = int(params.get("seq") or 0)
        data = params.get("data")
        data = data if isinstance(data, dict) else {"value": data}
        if seq > self._last_seq:
            self._last_seq = seq
        server_id = params.get("subscription")
        if server_id is not None:
            # The engine names the subscription an event is for; one it no longer has
            # here (unsubscribed while the event was on its way) gets nothing.
            targets = [s for s in self._subscriptions if s.server_id == server_id]
        else:
            targets = [s for s in self._subscriptions if s.matches(topic)]
        # Each subscription keeps its own high-water mark, so an event replayed after a
        # reconnect, or sent for two overlapping subscriptions, reaches it once.
        fresh = False
        for sub in targets:
            if sub.last_seq is not None and seq <= sub.last_seq:
                continue
            sub.last_seq = seq
            fresh = True
            if sub.callback is not None:
                self._call(sub.callback, topic, seq, data)
        if fresh:
            self.event.emit(topic, seq, data)
