"""One client connection: handshake, dispatch, writes with a backlog limit."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

import engine
from engine.api import protocol
from engine.api.protocol import (
    HANDSHAKE_REQUIRED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    UNAUTHORIZED,
    UNSUPPORTED_VERSION,
    RpcError,
)
from engine.daemon import rpc_examples
from engine.daemon.access import LOCAL, User, token_hash
from engine.daemon.eventbus import MAX_CLIENT_BACKLOG

if TYPE_CHECKING:
    from engine.daemon.interfaces import EngineView as Engine

log = logging.getLogger(__name__)

# Methods that run a subprocess to look at inputs, or ask the Hub: answered concurrently with the rest.
BACKGROUND_METHODS = frozenset({"jobs.check", "data.preview", "data.inspect", "models.inspect", "estimate.fit",
                                "estimate.plan",
                                "models.search"})
NOBODY = User("?", "", ())  # before hello: no role, so no method is allowed
# Errors after which a connection is closed: the handshake failed.
CLOSING_CODES = frozenset({UNAUTHORIZED, HANDSHAKE_REQUIRED, UNSUPPORTED_VERSION})


class Session:
    def __init__(self, eng: Engine, client_id: str, writer: asyncio.StreamWriter, remote: str | None = None):
        self.engine = eng
        self.id = client_id
        self.remote = remote  # the peer's address over TCP+TLS; None on the local socket
        self.name = "?"
        self.user: User = NOBODY  # who hello said this is (engine/daemon/access.py)
        self.writer = writer
        self.authenticated = False
        self.closed = False
        self.subscriptions: set[int] = set()
        self._background: set[asyncio.Task] = set()  # requests answered while others go on
        self.examples = rpc_examples.enabled()  # the specification's example methods, for conformance tests

    # ---- output
    def write(self, data: bytes) -> None:
        if self.closed:
            return
        transport = self.writer.transport
        if transport.is_closing():
            self._drop_subscriptions()
            return
        if transport.get_write_buffer_size() > MAX_CLIENT_BACKLOG:
            log.warning("client %s is not reading; disconnecting it", self.id)
            self.closed = True
            self._drop_subscriptions()
            transport.abort()
            return
        self.writer.write(data)

    def send(self, msg: dict[str, Any]) -> None:
        self.write(protocol.encode(msg))

    def send_error(self, req_id: Any, err: RpcError) -> None:
        self.send(protocol.error(req_id, err))

    async def drain(self) -> None:
        if self.closed:
            return
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.drain()

    async def close(self) -> None:
        self._drop_subscriptions()
        for task in list(self._background):
            task.cancel()
        if not self.closed:
            self.closed = True
            with contextlib.suppress(ConnectionError, OSError):
                self.writer.close()
                await self.writer.wait_closed()

    def _drop_subscriptions(self) -> None:
        for sub_id in self.subscriptions:
            self.engine.bus.unsubscribe(sub_id)
        self.subscriptions.clear()

    # ---- input
    async def handle_line(self, line: bytes) -> None:
        """One frame: a request, a notification, or a batch of them (JSON-RPC 2.0, sections 4-6).

        Whatever the frame holds, it is answered and the connection goes on (or, for a failed
        handshake, is closed on purpose): see _guarded.
        """
        await self._guarded(self._handle(line), line)

    async def _handle(self, line: bytes) -> None:
        try:
            msg = protocol.decode(line)
        except RpcError as err:  # not JSON: the id cannot be known, so it is null (section 5)
            await self._fail(None, err)
            return
        if not self.authenticated:
            await self._greet(msg)
            return
        if isinstance(msg, list) and msg:
            work = self._batch(msg)
            background = any(_method_of(m) in BACKGROUND_METHODS for m in msg)
        else:
            work = self._single(msg)
            background = _method_of(msg) in BACKGROUND_METHODS
        if background:
            # Looking at a model or a dataset takes seconds in a subprocess; the
            # connection's other requests (job lists, stops) must not queue behind it.
            task = asyncio.create_task(self._guarded(work, line))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            return
        await work

    async def _guarded(self, work: Coroutine[Any, Any, None], line: bytes) -> None:
        """The last resort: a frame that makes the session itself fail (not a handler: _reply catches
        those) gets an internal error and one line in the log, and the connection reads the next frame."""
        try:
            await work
        except Exception as exc:  # noqa: BLE001 - one client's frame must never end its connection unanswered
            log.warning("client %s: could not handle a frame of %d bytes: %s: %.200r", self.id, len(line),
                        type(exc).__name__, str(exc))
            log.debug("the frame's traceback", exc_info=True)  # a client can cause this: not at INFO
            with contextlib.suppress(Exception):
                self.send_error(_id_of(line), RpcError(
                    INTERNAL_ERROR, "The engine could not handle this frame",
                    {"hint": "The engine log says why; please report it with the frame that caused it."}))
                await self.drain()

    async def _single(self, msg: Any) -> None:
        if msg == []:
            reply: dict[str, Any] | None = protocol.error(None, RpcError(
                INVALID_REQUEST, "An empty batch holds no request",
                {"hint": "Send at least one request in the array, or a single request object."}))
        else:
            reply = await self._reply(msg)
        if reply is not None:
            self.send(reply)
            await self.drain()

    async def _batch(self, msgs: list[Any]) -> None:
        """Section 6: one array of replies; notifications add none, and with none at all nothing is sent."""
        replies = []
        for msg in msgs:  # in order, so a batch's requests act in the order they were written
            reply = await self._reply(msg)
            if reply is not None:
                replies.append(reply)
        if replies:
            self.write(protocol.encode(replies))
            await self.drain()

    async def _reply(self, msg: Any) -> dict[str, Any] | None:
        """The reply to one request object; None for a notification, even one that failed (section 4.1).

        A message that is not a valid request object is answered whatever it holds: it is no notification.
        """
        try:
            req_id, method, params = protocol.parse_request(msg)
        except RpcError as err:
            return protocol.error(protocol.request_id(msg), err)
        quiet = protocol.is_notification(msg)
        try:
            result = await self._call(method, params)
        except RpcError as err:
            return None if quiet else protocol.error(req_id, err)
        except Exception:  # noqa: BLE001 - one bad request must never take the engine down
            log.exception("request %s from %s failed", method, self.id)
            return None if quiet else protocol.error(req_id, _internal_error())
        return None if quiet else protocol.result(req_id, result)

    async def _call(self, method: str, params: dict[str, Any] | list[Any]) -> Any:
        if self.examples and method in rpc_examples.METHODS:
            return rpc_examples.METHODS[method](params)
        if isinstance(params, list):
            if params and method in protocol.METHODS and method != "hello":
                raise RpcError(INVALID_PARAMS, f"{method} takes named parameters (an object), not an array",
                               {"hint": "docs/protocol.md lists each method's parameters by name."})
            params = {}  # an empty array is no parameters; an unknown method is refused as such below
        return await self.engine.handlers.dispatch(self, method, params)

    async def _fail(self, req_id: Any, err: RpcError) -> None:
        self.send_error(req_id, err)
        await self.drain()
        if err.code in CLOSING_CODES:
            await self.close()

    async def _greet(self, msg: Any) -> None:
        """Before hello: only a single hello request is read. Anything else ends the connection."""
        if isinstance(msg, list):
            await self._fail(None, RpcError(
                HANDSHAKE_REQUIRED, "The first request must be a single 'hello', not a batch",
                {"hint": "Send hello {token, protocol} on its own line first; batches work after it."}))
            return
        try:
            req_id, method, params = protocol.parse_request(msg)
        except RpcError as err:
            await self._fail(protocol.request_id(msg), err)
            return
        try:
            facts = self._handshake(method, params)
        except RpcError as err:
            if not protocol.is_notification(msg):
                await self._fail(req_id, err)
            elif err.code in CLOSING_CODES:
                await self.close()  # a notification is never answered, but the rule still holds
            return
        except Exception:  # noqa: BLE001 - one bad request must never take the engine down
            log.exception("hello from %s failed", self.id)
            if not protocol.is_notification(msg):
                await self._fail(req_id, _internal_error())
            return
        if not protocol.is_notification(msg):
            self.send(protocol.result(req_id, facts))
            await self.drain()

    def _raise_if_refused(self, user: str | None) -> None:
        refused = self.engine.login_refusal(self.remote or "?", user)
        if refused is not None:
            raise refused

    def _token_owner(self, token: Any) -> str | None:
        """The user a refused token names (revoked, expired, or the engine's own over the network), or None
        for a token nobody has: failures are counted against that user as well as the address."""
        if not isinstance(token, str) or not token:
            return None
        if self.engine.token and hmac.compare_digest(token.encode(), self.engine.token.encode()):
            return LOCAL.name
        row = self.engine.store.get_user(token_sha256=token_hash(token))
        return str(row["name"]) if row else None

    def _handshake(self, method: str, params: dict[str, Any] | list[Any]) -> dict[str, Any]:
        if method != "hello":
            raise RpcError(HANDSHAKE_REQUIRED, "The first request must be 'hello' with the engine token",
                           {"hint": "Send hello {token, protocol} first; see docs/protocol.md."})
        if not isinstance(params, dict):
            raise RpcError(INVALID_PARAMS, "hello takes named parameters: {token, protocol, client}")
        if self.remote is not None:  # too many failures from here or from everywhere: not even checked
            self._raise_if_refused(None)
        try:
            # The engine's own token makes a local admin: only on this machine's socket, never over the network.
            user = self.engine.access.authenticate(params.get("token"), self.engine.token,
                                                   network=self.remote is not None)
        except RpcError as err:
            log.warning("client %s%s: %s", self.id, f" from {self.remote}" if self.remote else "", err.message)
            if self.remote is not None and err.code == UNAUTHORIZED:
                self.engine.login_failed(self.remote, self._token_owner(params.get("token")))
            raise
        if self.remote is not None:  # the right token of a user whose logins failed too often waits too
            self._raise_if_refused(user.name)
        version = params.get("protocol", protocol.PROTOCOL_VERSION)
        if version != protocol.PROTOCOL_VERSION:
            raise RpcError(UNSUPPORTED_VERSION,
                           f"Protocol {str(version)[:20]!r} is not supported; "
                           f"this engine speaks {protocol.PROTOCOL_VERSION}",
                           {"hint": "Use a client and engine of the same Ember Studio version."})
        self.authenticated = True
        self.user = user
        self.name = str(params.get("client", "?"))[:64]
        return {
            "server": "ember-engine", "version": engine.__version__, "protocol": protocol.PROTOCOL_VERSION,
            "pid": os.getpid(), "client_id": self.id, "last_seq": self.engine.bus.last_seq, "user": user.public(),
        }


def _method_of(msg: Any) -> str | None:
    """A request's method name, or None; never an unhashable value a client put there."""
    method = msg.get("method") if isinstance(msg, dict) else None
    return method if isinstance(method, str) else None


def _id_of(line: bytes) -> protocol.RequestId:
    """The id to answer a frame with when handling it failed: its own when it is a single valid request."""
    try:
        return protocol.request_id(protocol.decode(line))
    except RpcError:
        return None


def _internal_error() -> RpcError:
    return RpcError(INTERNAL_ERROR, "Internal engine error",
                    {"hint": "The engine log has the traceback; please report it."})
