"""An HTTP/1.1 server that holds bursts and slow clients: a bounded pool of workers behind one thread that
waits for request heads (docs/serve.md, "Limits").

- The listen backlog is ``Limits.backlog`` (socketserver's default of 5 reset connections in a burst).
- One "gate" thread reads every connection's request head without blocking. A worker gets a connection only
  once its head is complete, so a client that sends half a head holds no worker; it is closed after
  ``header_timeout`` (a keep-alive connection waiting for its next request goes back to the gate too, with
  the same timeout). Connections whose heads are complete queue for the ``workers`` threads.
- A worker reads the body against a deadline (``body_timeout`` from when it got the head), so a client that
  sends fewer bytes than its Content-Length frees the worker at the deadline.
- A client address holding more than ``per_client`` connections is answered 429 (loopback addresses are
  exempt unless ``cap_loopback``: every local program and every SSH tunnel shares that address).
- At ``max_open`` connections the server stops accepting; the rest wait in the backlog.

The handler (``PooledHandler``) answers one request per dispatch: the standard library's parsing and
``do_GET``/``do_POST``; its body comes through ``read_body``, and when it answers without reading a body
it declares, the connection is closed after the answer.
"""

from __future__ import annotations

import json
import re
import selectors
import socket
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from ipaddress import ip_address
from queue import SimpleQueue
from typing import Any

LINGER_S = 2.0  # after the server closes its side, the client's unread bytes are drained this long (no RST)
HEAD_END = re.compile(rb"\r?\n\r?\n")


@dataclass(frozen=True)
class Limits:
    workers: int = 64  # threads answering requests
    backlog: int = 1024  # connections the kernel queues before accept (capped by net.core.somaxconn)
    header_timeout: float = 10.0  # seconds for a request line + headers (and an idle keep-alive connection)
    body_timeout: float = 30.0  # seconds for the body after its head; also each write's timeout
    per_client: int = 32  # open connections per client address, beyond which 429
    cap_loopback: bool = False  # apply per_client to loopback clients too
    max_body: int = 8 << 20  # a larger Content-Length is answered 413 without reading it
    max_head: int = 64 << 10  # a larger request head is answered 431
    max_open: int = 2048  # open connections at most (and fewer than the process's file limit)


@dataclass(eq=False)
class Connection:
    sock: socket.socket
    address: tuple[Any, ...]
    data: bytearray = field(default_factory=bytearray)  # read, not yet handled
    deadline: float = 0.0
    over_cap: bool = False  # answered 429 once its head is in
    lingering: bool = False  # our side is shut; draining until the client closes
    closed: bool = False


def _response(status: int, doc: bytes, extra: str = "") -> bytes:
    head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(doc)}\r\nConnection: close\r\n{extra}\r\n")
    return head.encode() + doc


class Reader:
    """The handler's rfile: the bytes the gate already read, then the socket, before a deadline."""

    def __init__(self, sock: socket.socket, data: bytearray, deadline: float, write_timeout: float):
        self.sock, self.buf, self.deadline, self.write_timeout = sock, data, deadline, write_timeout
        self.closed = False

    def _fill(self) -> bool:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request did not arrive in time")
        self.sock.settimeout(left)
        try:
            chunk = self.sock.recv(65536)
        finally:
            self.sock.settimeout(self.write_timeout)
        self.buf += chunk
        return bool(chunk)

    def _take(self, n: int) -> bytes:
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def readline(self, limit: int = -1) -> bytes:
        while True:
            end = self.buf.find(b"\n")
            if end >= 0 and (limit < 0 or end < limit):
                return self._take(end + 1)
            if 0 <= limit <= len(self.buf) or not self._fill():
                return self._take(len(self.buf) if limit < 0 else limit)

    def read(self, n: int = -1) -> bytes:
        while (n < 0 or len(self.buf) < n) and self._fill():
            pass
        return self._take(len(self.buf) if n < 0 else n)

    def close(self) -> None:
        self.closed = True


class Writer:
    """The handler's wfile: whole writes (sendall), under the socket's write timeout."""

    def __init__(self, sock: socket.socket):
        self.sock, self.closed = sock, False

    def write(self, b: bytes) -> int:
        self.sock.sendall(b)
        return len(b)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class PooledHandler(BaseHTTPRequestHandler):
    """One request per dispatch on a Connection the gate hands over (its head already read)."""

    protocol_version = "HTTP/1.1"
    server: PooledServer
    _body_done = False

    @classmethod
    def error_doc(cls, status: int, message: str, code: str) -> dict[str, Any]:
        """The JSON body of an answer the gate gives on its own (429, 431); a server's API may override it."""
        return {"error": {"message": message, "code": code}}

    def setup(self) -> None:
        self.conn: Connection = self.request
        self.request = self.connection = self.conn.sock
        limits = self.server.limits
        self.connection.settimeout(limits.body_timeout)
        if self.disable_nagle_algorithm:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
        self.rfile = Reader(self.connection, self.conn.data, time.monotonic() + limits.body_timeout,
                            limits.body_timeout)
        self.wfile = Writer(self.connection)

    def handle(self) -> None:
        self.close_connection = True
        self.handle_one_request()
        if self._body_pending():  # its bytes would be read as the next request
            self.close_connection = True

    def finish(self) -> None:
        if isinstance(getattr(self, "rfile", None), Reader):
            self.conn.data = self.rfile.buf  # a pipelined next request, if any

    def handle_expect_100(self) -> bool:
        # "100 Continue" asks the client for its body: read_body sends it, after do_GET/do_POST have checked
        # the request (its API key), not the standard library before them.
        self._expect_continue = True
        return True

    def content_length(self) -> int:
        """The declared body length (0 without one); ValueError when it is not a whole number."""
        raw = (self.headers.get("Content-Length") or "0").strip()
        if not raw.isdigit():
            raise ValueError(raw)
        return int(raw)

    def read_body(self, length: int) -> bytes:
        """The body (shorter when the client closes first); TimeoutError past the body deadline."""
        if getattr(self, "_expect_continue", False) and length:
            self.wfile.write(f"{self.protocol_version} 100 Continue\r\n\r\n".encode())
            self._expect_continue = False
        raw = self.rfile.read(length)
        self._body_done = len(raw) == length
        return raw

    def _body_pending(self) -> bool:
        headers = getattr(self, "headers", None)
        if headers is None or self._body_done:
            return False
        return (headers.get("Content-Length") or "0").strip() != "0" or "Transfer-Encoding" in headers

    def end_headers(self) -> None:
        if self._body_pending() and not self.close_connection:
            self.send_header("Connection", "close")  # sets close_connection
        super().end_headers()


class Gate:
    """The thread that reads request heads (and drains closing connections) for every connection at once."""

    def __init__(self, server: PooledServer):
        self.server = server
        self.selector = selectors.DefaultSelector()
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        self.selector.register(self.wake_r, selectors.EVENT_READ)
        self.incoming: deque[Connection] = deque()
        self.stopping = False
        self.thread = threading.Thread(target=self.run, name="http-gate", daemon=True)
        self.thread.start()

    def add(self, conn: Connection | None) -> None:
        """Called from any thread: wait for this connection's next head (or its close, when lingering)."""
        if conn is not None and self.stopping:
            self.server.close(conn)
            return
        if conn is not None:
            self.incoming.append(conn)
        try:
            self.wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # a wake-up is already pending, or the gate is stopping

    def stop(self) -> None:
        self.stopping = True
        self.add(None)
        self.thread.join(timeout=5)

    def run(self) -> None:
        while not self.stopping:
            for key, _ in self.selector.select(timeout=0.25):
                if key.fileobj is self.wake_r:
                    self._take_incoming()
                else:
                    self._readable(key.data)
            self._expire(time.monotonic())
        for key in list(self.selector.get_map().values()):
            if key.data is not None:
                self.server.close(key.data)
        while self.incoming:
            self.server.close(self.incoming.popleft())
        self.selector.close()
        self.wake_r.close()
        self.wake_w.close()

    def _take_incoming(self) -> None:
        try:
            while self.wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass
        while self.incoming and not self.stopping:
            conn = self.incoming.popleft()
            conn.sock.setblocking(False)
            if not conn.lingering and HEAD_END.search(conn.data):  # a pipelined request: no wait
                self._head_in(conn)
                continue
            self.selector.register(conn.sock, selectors.EVENT_READ, conn)

    def _readable(self, conn: Connection) -> None:
        try:
            chunk = conn.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:  # the client closed
            self._drop(conn)
            return
        if conn.lingering:
            return  # drained and thrown away
        conn.data += chunk
        if HEAD_END.search(conn.data):
            self.selector.unregister(conn.sock)
            self._head_in(conn)
        elif len(conn.data) > self.server.limits.max_head:
            self._refuse(conn, 431, "the request's head is larger than 64 KiB", "request_too_large")

    def _head_in(self, conn: Connection) -> None:
        if conn.over_cap:
            self.selector.register(conn.sock, selectors.EVENT_READ, conn)
            self._refuse(conn, 429, f"more than {self.server.limits.per_client} connections from "
                                    f"{conn.address[0]} at once: wait for an answer before sending more",
                         "rate_limit_exceeded", "Retry-After: 1\r\n")
        else:
            conn.sock.setblocking(True)
            self.server.dispatch(conn)

    def _refuse(self, conn: Connection, status: int, message: str, code: str, extra: str = "") -> None:
        """Answer without a worker (a small write into an empty send buffer), then drain and close."""
        try:
            conn.sock.send(self._answer(status, message, code, extra))
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._drop(conn)
            return
        conn.lingering, conn.deadline = True, time.monotonic() + LINGER_S

    def _answer(self, status: int, message: str, code: str, extra: str = "") -> bytes:
        doc = json.dumps(self.server.RequestHandlerClass.error_doc(status, message, code)).encode()
        return _response(status, doc, extra)

    def _drop(self, conn: Connection) -> None:
        self.selector.unregister(conn.sock)
        self.server.close(conn)

    def _expire(self, now: float) -> None:
        for key in list(self.selector.get_map().values()):
            conn = key.data
            if conn is not None and now >= conn.deadline:
                if conn.data and not conn.lingering:  # a head begun and never finished (an idle one: no answer)
                    try:
                        conn.sock.send(self._answer(408, f"the request's head did not arrive within "
                                                         f"{self.server.limits.header_timeout:g} s", "timeout"))
                    except OSError:
                        pass
                self._drop(conn)


def _file_limit() -> int:
    """The process's soft limit on open files (-1: none known; Windows has no resource module)."""
    try:
        import resource

        return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return -1


class PooledServer(HTTPServer):
    """HTTPServer whose accept loop hands connections to the Gate, and the Gate complete heads to workers."""

    def __init__(self, address: tuple[str, int], handler: type[PooledHandler], limits: Limits | None = None):
        self.limits = limits or Limits()
        self.request_queue_size = self.limits.backlog
        files = _file_limit()
        self.max_open = min(self.limits.max_open, max(16, files - 64) if files > 0 else self.limits.max_open)
        self.open_by_address: Counter[str] = Counter()
        self.open_count = 0
        self.state = threading.Condition()
        self.closing = False
        self.work: SimpleQueue[Connection | None] = SimpleQueue()
        self.workers: list[threading.Thread] = []
        self.gate: Gate | None = None
        super().__init__(address, handler)  # binding may fail (a busy port): it calls server_close() first
        self.gate = Gate(self)
        self.workers = [threading.Thread(target=self._work_loop, name=f"http-worker-{i}", daemon=True)
                        for i in range(self.limits.workers)]
        for t in self.workers:
            t.start()

    def _capped(self, host: str) -> bool:
        try:
            return self.limits.cap_loopback or not ip_address(host.split("%")[0]).is_loopback
        except ValueError:
            return True

    def process_request(self, request: socket.socket, client_address: Any) -> None:
        """From the accept loop: count the connection and give it to the gate. At max_open it waits here, so
        the next clients wait in the backlog (not reset)."""
        host = str(client_address[0])
        with self.state:
            while self.open_count >= self.max_open and not self.closing:
                self.state.wait(0.25)
            if self.closing:
                request.close()
                return
            self.open_count += 1
            self.open_by_address[host] += 1
            over = self._capped(host) and self.open_by_address[host] > self.limits.per_client
        self.gate.add(Connection(request, client_address, deadline=time.monotonic() + self.limits.header_timeout,
                                 over_cap=over))

    def dispatch(self, conn: Connection) -> None:
        self.work.put(conn)

    def _work_loop(self) -> None:
        while (conn := self.work.get()) is not None:
            self._answer(conn)

    def _answer(self, conn: Connection) -> None:
        handler = None
        try:
            handler = self.RequestHandlerClass(conn, conn.address, self)
        except OSError:
            pass  # the client went away or timed out mid-request: nothing to answer
        except Exception:  # noqa: BLE001 - one bad request never stops the worker
            self.handle_error(conn.sock, conn.address)
        if handler is not None and not handler.close_connection and not self.closing:
            conn.deadline = time.monotonic() + self.limits.header_timeout  # idle keep-alive: a head's timeout
            self.gate.add(conn)
            return
        self.close_gently(conn)

    def close_gently(self, conn: Connection) -> None:
        """Shut our side, then let the gate drain what the client still sends until it closes (a close with
        unread bytes would reset the connection, and the client could lose the answer before reading it)."""
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self.close(conn)
            return
        conn.lingering, conn.deadline = True, time.monotonic() + LINGER_S
        self.gate.add(conn)

    def close(self, conn: Connection) -> None:
        with self.state:
            if conn.closed:
                return
            conn.closed = True
            self.open_count -= 1
            host = str(conn.address[0])
            self.open_by_address[host] -= 1
            if self.open_by_address[host] <= 0:
                del self.open_by_address[host]
            self.state.notify_all()
        conn.sock.close()

    def shutdown(self) -> None:
        """serve_forever() returns; an accept waiting at max_open gives up, keep-alive connections end."""
        with self.state:
            self.closing = True
            self.state.notify_all()
        super().shutdown()

    def server_close(self) -> None:
        """No new connections; open ones are closed; an answer in progress finishes on its (daemon) worker."""
        with self.state:
            self.closing = True
            self.state.notify_all()
        super().server_close()
        if self.gate is not None:
            self.gate.stop()
        for _ in self.workers:
            self.work.put(None)
