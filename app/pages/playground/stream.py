"""One answer being generated: ``playground.chat``, then its events on ``playground/<request>``.

The reply names the topic and ``since`` (the last event before the answer's first), so subscribing with
that ``since`` misses nothing even when the model answers before the subscription is made. The events are
``{"status": "loading"}`` while the model loads, ``{"text": chunk}``, then ``{"done": true, ...figures}``
or ``{"error", "hint"}`` (engine/daemon/inference.py). Stop asks ``playground.stop``; a Stop pressed
before the engine has named the request is sent as soon as it does. The same flow as a script is
engine/cli/chat.py's stream_answer.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, Signal

from engine.api.protocol import RpcError


class AnswerStream(QObject):
    loading = Signal(str)  # the model's name: its worker is loading it
    text = Signal(str)  # a chunk of the answer, in order
    finished = Signal(dict)  # the done event's figures, with "text": the whole answer
    failed = Signal(str, str)  # message, hint

    def __init__(self, client: Any, parent: QObject | None = None):
        super().__init__(parent)
        self._client = client
        self.request: str | None = None
        self.topic = ""
        self.busy = False
        self._sub: Any = None
        self._stop_asked = False
        self._chunks: list[str] = []
        self._generation = 0  # replies to an answer given up on (New chat) are ignored
        client.disconnected.connect(self._connection_lost)

    def start(self, ref: dict[str, Any], messages: list[dict[str, str]], settings: dict[str, Any]) -> None:
        self._end()
        self._generation += 1
        generation = self._generation
        self.busy, self._stop_asked, self._chunks, self.request = True, False, [], None
        params = {"model": ref, "messages": messages, "settings": settings}
        self._client.request("playground.chat", params, lambda reply: self._started(generation, reply),
                             lambda err: self._refused(generation, err))

    def stop(self) -> None:
        """End the answer early; the done event that follows says stopped: user."""
        if not self.busy:
            return
        self._stop_asked = True
        if self.request:
            self._client.request("playground.stop", {"request": self.request}, None, lambda _err: None)

    def abandon(self) -> None:
        """Forget the answer (a new chat): stop it in the engine and drop what still arrives."""
        if self.busy:
            self.stop()
        self._generation += 1
        self._end()

    def text_so_far(self) -> str:
        return "".join(self._chunks)

    # -- the engine's side ------------------------------------------------------------------

    def _started(self, generation: int, reply: dict[str, Any]) -> None:
        if generation != self._generation:
            self._client.request("playground.stop", {"request": reply.get("request")}, None, lambda _err: None)
            return
        self.request, self.topic = str(reply["request"]), str(reply["topic"])
        self._sub = self._client.subscribe([self.topic], self._on_event, since=int(reply.get("since") or 0))
        if self._stop_asked:
            self._client.request("playground.stop", {"request": self.request}, None, lambda _err: None)

    def _refused(self, generation: int, err: RpcError) -> None:
        if generation == self._generation:
            self._fail(err.message, err.hint)

    def _on_event(self, topic: str, _seq: int, data: dict[str, Any]) -> None:
        if topic != self.topic or not self.busy:
            return
        if "text" in data:
            chunk = str(data["text"])
            self._chunks.append(chunk)
            self.text.emit(chunk)
        elif data.get("done"):
            figures = {**data, "text": self.text_so_far()}
            self._end()
            self.finished.emit(figures)
        elif "error" in data:
            self._fail(str(data.get("error") or "The answer failed"), str(data.get("hint") or ""))
        elif data.get("status") == "loading":
            self.loading.emit(str(data.get("model") or ""))

    def _fail(self, message: str, hint: str) -> None:
        self._end()
        self.failed.emit(message, hint)

    def _connection_lost(self) -> None:
        if self.busy:
            self._generation += 1
            self._fail("The connection to the engine was lost during the answer",
                       "Send the question again once the engine is back.")

    def _end(self) -> None:
        self.busy = False
        if self._sub is not None:
            self._client.unsubscribe(self._sub)
            self._sub = None
