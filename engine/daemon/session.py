"""One client connection: handshake, dispatch, writes with a backlog limit."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
from typing import TYPE_CHECKING, Any

import engine
from engine.api import protocol
from engine.api.protocol import (
    HANDSHAKE_REQUIRED,
    INTERNAL_ERROR,
    UNAUTHORIZED,
    UNSUPPORTED_VERSION,
    RpcError,
)
from engine.daemon.eventbus import MAX_CLIENT_BACKLOG

if TYPE_CHECKING:
    from engine.daemon.context import EngineView as Engine

log = logging.getLogger(__name__)

# Methods that run a subprocess to look at inputs: answered concurrently with the rest.
BACKGROUND_METHODS = frozenset({"jobs.check", "data.preview", "data.inspect", "models.inspect", "estimate.fit"})


class Session:
    def __init__(self, eng: Engine, client_id: str, writer: asyncio.StreamWriter):
        self.engine = eng
        self.id = client_id
        self.name = "?"
        self.writer = writer
        self.authenticated = False
        self.closed = False
        self.subscriptions: set[int] = set()
        self._background: set[asyncio.Task] = set()  # requests answered while others go on

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
        req_id = None
        try:
            msg = protocol.decode(line)
            if isinstance(msg, dict):
                raw_id = msg.get("id")
                req_id = raw_id if isinstance(raw_id, (int, str)) and not isinstance(raw_id, bool) else None
            req_id, method, params = protocol.parse_request(msg)
            if not self.authenticated:
                self._handshake(req_id, method, params)
                return
        except RpcError as err:
            await self._fail(req_id, err)
            return
        except Exception:  # noqa: BLE001 - one bad request must never take the engine down
            await self._internal_error(req_id)
            return
        if method in BACKGROUND_METHODS:
            # Looking at a model or a dataset takes seconds in a subprocess; the
            # connection's other requests (job lists, stops) must not queue behind it.
            task = asyncio.create_task(self._answer(req_id, method, params))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            return
        await self._answer(req_id, method, params)

    async def _answer(self, req_id: Any, method: str, params: dict[str, Any]) -> None:
        try:
            result = await self.engine.handlers.dispatch(self, method, params)
        except RpcError as err:
            await self._fail(req_id, err)
            return
        except Exception:  # noqa: BLE001 - one bad request must never take the engine down
            await self._internal_error(req_id)
            return
        if req_id is not None:
            self.send(protocol.result(req_id, result))
        await self.drain()

    async def _fail(self, req_id: Any, err: RpcError) -> None:
        self.send_error(req_id, err)
        await self.drain()
        if err.code in (UNAUTHORIZED, HANDSHAKE_REQUIRED, UNSUPPORTED_VERSION):
            await self.close()

    async def _internal_error(self, req_id: Any) -> None:
        log.exception("request from %s failed", self.id)
        self.send_error(req_id, RpcError(INTERNAL_ERROR, "Internal engine error",
                                         {"hint": "The engine log has the traceback; please report it."}))
        await self.drain()

    def _handshake(self, req_id: Any, method: str, params: dict[str, Any]) -> None:
        if method != "hello":
            raise RpcError(HANDSHAKE_REQUIRED, "The first request must be 'hello' with the engine token",
                           {"hint": "Send hello {token, protocol} first; see docs/protocol.md."})
        token = params.get("token")
        if not isinstance(token, str) or not hmac.compare_digest(token.encode(), self.engine.token.encode()):
            log.warning("client %s sent a wrong token", self.id)
            raise RpcError(UNAUTHORIZED, "Wrong token",
                           {"hint": "Read the token from engine.token in the engine's runtime dir."})
        version = params.get("protocol", protocol.PROTOCOL_VERSION)
        if version != protocol.PROTOCOL_VERSION:
            raise RpcError(UNSUPPORTED_VERSION,
                           f"Protocol {version!r} is not supported; this engine speaks {protocol.PROTOCOL_VERSION}",
                           {"hint": "Use a client and engine of the same Ember Studio version."})
        self.authenticated = True
        self.name = str(params.get("client", "?"))[:64]
        self.send(protocol.result(req_id, {
            "server": "ember-engine", "version": engine.__version__, "protocol": protocol.PROTOCOL_VERSION,
            "pid": os.getpid(), "client_id": self.id, "last_seq": self.engine.bus.last_seq,
        }))
