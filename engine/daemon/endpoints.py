"""The Playground's chats with served endpoints, streamed by the engine itself: no model worker in between.

A worker process for a URL would only relay HTTP: it cost a Python start and the torch import (tens of seconds
on a busy laptop) before the first word, and a second process reading the stream slowed every token. Here the
engine opens the endpoint once (``GET /models``, in a thread), then each answer streams in its own thread and
its text goes to the event bus in chunks (at most every CHUNK_S seconds, as a worker sends them: Chunks), ending with
the same done or error event a worker's answer ends with.

An endpoint whose server has gone leaves the list: one on this machine (a serve job's, mostly) as soon as its
port no longer accepts connections, any other after an answer fails and its port is found closed.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from engine.api.failures import JobFailed
from engine.api.playground import Chunks, GenerateSettings, Message, ModelRef
from engine.api.protocol import INVALID_PARAMS, RpcError
from engine.api.specs import LOOPBACK_HOSTS
from engine.daemon.endpoint_chat import EndpointChat, read_key
from engine.daemon.eventbus import EventBus

CHUNK_S = 0.03


@dataclass
class Endpoint:
    """One endpoint the Playground talks to; ``describe`` reads as a worker's entry (no process, no memory)."""

    ref: ModelRef
    chat: EndpointChat
    last_used: float = field(default_factory=time.monotonic)
    open: dict[str, threading.Event] = field(default_factory=dict)  # rid -> its Stop

    def describe(self) -> dict[str, Any]:
        return {"model": self.ref.shown(), "label": self.ref.label(), "pid": None, "state": "ready", "kind": "chat",
                "info": {"task": "causal_lm", "name": self.chat.model, "runtime": "endpoint", "url": self.chat.url},
                "rss": 0, "busy": len(self.open), "idle_s": round(time.monotonic() - self.last_used, 1)}


async def listening(url: str, timeout: float) -> bool:
    """Whether the host and port of ``url`` accept a TCP connection now (without blocking the event loop)."""
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        _reader, writer = await asyncio.wait_for(asyncio.open_connection(parts.hostname or "", port), timeout)
    except (OSError, ValueError, asyncio.TimeoutError):
        return False
    writer.close()
    return True


def on_this_machine(url: str) -> bool:
    return (urlsplit(url).hostname or "") in LOOPBACK_HOSTS


def _failure(exc: JobFailed) -> RpcError:
    return RpcError(INVALID_PARAMS, str(exc), {"hint": exc.hint})


class Endpoints:
    """Endpoints by their reference's key; answers by request id."""

    def __init__(self, bus: EventBus, topic: Callable[[str], str]):
        self.bus, self.topic = bus, topic
        self.endpoints: dict[str, Endpoint] = {}
        self._owner: dict[str, Endpoint] = {}

    async def endpoint(self, ref: ModelRef) -> Endpoint:
        found = self.endpoints.get(ref.key())
        if found is None:
            def connect() -> EndpointChat:
                # A key file (a client on the engine's machine; resource_check allowed it), else the key sent.
                return EndpointChat(str(ref.url), read_key(ref.api_key_file) or ref.api_key)

            try:
                chat = await asyncio.to_thread(connect)
            except JobFailed as exc:
                raise _failure(exc) from exc
            found = self.endpoints.setdefault(ref.key(), Endpoint(ref, chat))
        found.last_used = time.monotonic()
        return found

    async def chat(self, ref: ModelRef, messages: list[dict[str, Any]], settings: dict[str, Any],
                   label: str = "") -> dict[str, Any]:
        """Start an answer streamed on the request's topic, as a worker's would be; ``label``: the model's name
        where the endpoint serves a model the user picked by another name (a run a serve job serves)."""
        try:
            parsed = GenerateSettings.model_validate(settings)
            turns = [Message.model_validate(m).model_dump() for m in messages]
        except ValueError as exc:
            raise RpcError(INVALID_PARAMS, str(exc).splitlines()[0][:500],
                           {"hint": "Check the request's settings and messages."}) from exc
        endpoint = await self.endpoint(ref)
        since = self.bus.next_seq() - 1
        rid = uuid.uuid4().hex[:16]
        stop = endpoint.open[rid] = threading.Event()
        self._owner[rid] = endpoint
        loop = asyncio.get_running_loop()
        loop.create_task(self._answer(endpoint, rid, turns, parsed, stop, loop))
        return {"request": rid, "topic": self.topic(rid), "since": since, "model": label or ref.label()}

    async def _answer(self, endpoint: Endpoint, rid: str, messages: list[dict[str, Any]],
                      settings: GenerateSettings, stop: threading.Event, loop: asyncio.AbstractEventLoop) -> None:
        topic = self.topic(rid)
        chunks = Chunks(lambda text: loop.call_soon_threadsafe(self.bus.publish, topic, {"text": text}), CHUNK_S)

        def answer() -> dict[str, Any]:
            result = endpoint.chat.answer(messages, settings, chunks, stop)
            chunks.flush()
            return result.stats()

        try:
            stats = await asyncio.to_thread(answer)
            self.bus.publish(topic, {"done": True, **stats})
        except JobFailed as exc:
            self.bus.publish(topic, {"error": str(exc), "hint": exc.hint})
            if not await listening(endpoint.chat.url, 2.0):
                self.forget(endpoint.ref)  # its server has gone: the next chat opens it afresh, or says so
        except Exception as exc:  # noqa: BLE001 - the answer's subscriber must hear of any end
            self.bus.publish(topic, {"error": f"{type(exc).__name__}: {exc}"[:500],
                                     "hint": "See the engine log; send again."})
            raise
        finally:
            endpoint.open.pop(rid, None)
            self._owner.pop(rid, None)
            endpoint.last_used = time.monotonic()

    def stop(self, rid: str) -> bool:
        endpoint = self._owner.get(rid)
        if endpoint is None or rid not in endpoint.open:
            return False
        endpoint.open[rid].set()
        return True

    async def forget_stopped(self) -> None:
        """Forget each idle endpoint on this machine whose port is closed (its serve job stopped); a loopback
        connect answers at once either way."""
        for endpoint in list(self.endpoints.values()):
            if not endpoint.open and on_this_machine(endpoint.chat.url) and not await listening(endpoint.chat.url, 0.2):
                self.forget(endpoint.ref)

    def list(self) -> list[dict[str, Any]]:
        return [e.describe() for e in self.endpoints.values()]

    def forget(self, ref: ModelRef) -> bool:
        endpoint = self.endpoints.pop(ref.key(), None)
        if endpoint is None:
            return False
        for stop in endpoint.open.values():
            stop.set()
        return True

    def close(self) -> None:
        for endpoint in list(self.endpoints.values()):
            self.forget(endpoint.ref)
