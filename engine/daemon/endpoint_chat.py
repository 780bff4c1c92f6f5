"""Chat with a model another server serves: any OpenAI-compatible endpoint (Ember's serve job here or on an SSH
host, vLLM, llama.cpp's server), so the Playground and ``ember chat`` try what is deployed (docs/serve.md).

``EndpointChat`` answers as ``ChatModel`` does (``answer``, ``complete``, streamed text, Stop, an ``Answer``
with the token counts and time to first token) by streaming ``/chat/completions`` and ``/completions``. The
server applies its own chat template (``template`` other than ``model`` is noted, not applied); the sampling
settings go as OpenAI's fields plus ``top_k`` and ``repetition_penalty``, which vLLM and Ember read.

Standard library HTTP only: the engine itself streams from the endpoint (engine/daemon/endpoints.py), with no
model worker between, so a chat is as fast as the server. Each answer may carry its own Stop event, so several
chats with one endpoint run at once.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.api.failures import JobFailed
from engine.api.load_test import list_models, stream_events
from engine.api.playground import Answer, GenerateSettings

FINISHED = {"stop": "eos", "length": "length"}
MAX_KEY_BYTES = 4096
KEY = re.compile(rb"[\x21-\x7e]*")  # one token of printable ASCII: what an Authorization header can carry


def read_key(path: str | None) -> str | None:
    if not path:
        return None
    try:
        with open(Path(path).expanduser(), "rb") as f:
            raw = f.read(MAX_KEY_BYTES + 1)
    except OSError as exc:
        raise JobFailed(f"Cannot read the API key file {path}: {exc.strerror or exc}",
                        "Name the file the serve job wrote (its log says where), or the key file the server's "
                        "owner gave you.") from exc
    key = raw.strip()
    # What the file holds is never repeated in a message: a wrong file may be anything (a private key).
    if len(raw) > MAX_KEY_BYTES or not KEY.fullmatch(key):
        raise JobFailed(f"The file {path} does not hold an API key (one line of printable characters)",
                        "Name the file the serve job wrote (api_key in its folder), or send the key itself.")
    return key.decode() or None


class EndpointChat:
    """The model ``url`` serves (the first ``/models`` lists), reached over HTTP."""

    def __init__(self, url: str, api_key: str | None = None, timeout: float = 300.0):
        self.url, self.api_key, self.timeout = url.rstrip("/"), api_key, timeout
        self.stop_event = threading.Event()
        try:
            models = list_models(self.url, api_key, timeout=30)
        except OSError as exc:
            raise JobFailed(f"Cannot reach {self.url}: {exc.strerror or exc}",
                            "Check that the server runs and the URL ends in /v1 (Ember's serve job shows its "
                            "URL; a server on another machine may need an SSH tunnel).") from exc
        except (RuntimeError, ValueError, KeyError) as exc:
            hint = ("Give the server's API key file." if "401" in str(exc) else
                    "Is this an OpenAI-compatible server? GET /v1/models should list its model.")
            raise JobFailed(f"{self.url} refused to list its models: {self._safe(exc)}", hint) from exc
        if not models:
            raise JobFailed(f"{self.url} serves no model", "Start the server with a model loaded.")
        self.model = models[0]

    def _safe(self, exc: Exception) -> str:
        """An error's text without the key, should a server or library echo a header back."""
        text = str(exc)[:500]
        return text.replace(self.api_key, "[key]") if self.api_key else text

    def _body(self, settings: GenerateSettings) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "stream": True, "stream_options": {"include_usage": True},
                                "max_tokens": settings.max_new_tokens, "temperature": settings.temperature,
                                "top_p": settings.top_p}
        if settings.top_k:
            body["top_k"] = settings.top_k
        if settings.repetition_penalty != 1.0:
            body["repetition_penalty"] = settings.repetition_penalty
        if settings.stop:
            body["stop"] = list(settings.stop)
        if settings.seed is not None:
            body["seed"] = settings.seed
        return body

    def answer(self, messages: list[dict[str, str]], settings: GenerateSettings,
               on_text: Callable[[str], None] = lambda _t: None, stop: threading.Event | None = None) -> Answer:
        msgs = ([{"role": "system", "content": settings.system}] if settings.system else []) + [
            {"role": m["role"], "content": m["content"]} for m in messages]
        warnings = ([f"the server applies its own chat template; '{settings.template}' was not used"]
                    if settings.template != "model" else [])
        return self._stream("chat/completions", {**self._body(settings), "messages": msgs}, on_text, warnings,
                            stop)

    def complete(self, text: str, settings: GenerateSettings,
                 on_text: Callable[[str], None] = lambda _t: None, stop: threading.Event | None = None) -> Answer:
        return self._stream("completions", {**self._body(settings), "prompt": text}, on_text, [], stop)

    def _stream(self, route: str, body: dict[str, Any], on_text: Callable[[str], None],
                warnings: list[str], stop: threading.Event | None = None) -> Answer:
        if stop is None:  # one answer at a time, stopped through the chat's own event (as ChatModel is)
            stop = self.stop_event
            stop.clear()
        answer = Answer(warnings=warnings)
        t0 = time.perf_counter()
        parts: list[str] = []
        try:
            for doc in stream_events(self.url, route, body, self.api_key, self.timeout, stop):
                for choice in doc.get("choices") or []:
                    piece = (choice.get("delta") or {}).get("content") or choice.get("text") or ""
                    if piece:
                        if answer.ttft_s is None:
                            answer.ttft_s = time.perf_counter() - t0
                        parts.append(piece)
                        on_text(piece)
                    if choice.get("finish_reason"):
                        answer.stopped = FINISHED.get(choice["finish_reason"], "eos")
                if usage := doc.get("usage"):
                    answer.prompt_tokens = int(usage.get("prompt_tokens") or 0)
                    answer.new_tokens = int(usage.get("completion_tokens") or 0)
        except OSError as exc:
            raise JobFailed(f"The link to {self.url} broke: {exc.strerror or exc}",
                            "Check that the server still runs, then send again.") from exc
        except RuntimeError as exc:
            raise JobFailed(f"{self.url} answered with an error: {self._safe(exc)}",
                            "Change what it names (a setting beyond the server's limits, say) and send again.") from exc
        if stop.is_set():
            answer.stopped = "user"
        answer.text = "".join(parts)
        answer.seconds = time.perf_counter() - t0
        if not answer.new_tokens:  # a server that sends no usage: count streamed pieces, about one a token
            answer.new_tokens = len(parts)
        return answer
