"""The OpenAI-compatible HTTP API over one loaded model (docs/serve.md).

``GET /v1/models``; ``POST /v1/chat/completions`` and ``/v1/completions`` (``stream: true`` sends
server-sent events, ``data: {...}`` lines ending with ``data: [DONE]``, and ``stream_options.include_usage``
a last chunk with the token counts; the first piece of text goes at once, later ones are gathered for
STREAM_EVERY_S); ``POST /v1/classify`` for a classifier (every class's probability) and ``POST /v1/embeddings``
for a text classifier's encoder (its last hidden states averaged over each text's tokens).
Errors are OpenAI's ``{"error": {"message", "type", "param", "code"}}``.

The HTTP plumbing is engine/serve/http_server.py: a large listen backlog, a bounded pool of workers that
get a connection once its request head is in, read timeouts, a per-address connection cap and a body limit
(``Limits``). The model answers one request at a time, always on the same thread (``Service.call``), the others
queue, and the queue's length is in the figures. With an API key every route but ``/health`` wants ``Authorization: Bearer KEY`` (401
``invalid_api_key`` otherwise), compared in constant time and checked from the headers before any body is
read.
"""

from __future__ import annotations

import base64
import hmac
import json
import secrets
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from engine.api.playground import GenerateSettings
from engine.serve.http_server import Limits, PooledHandler, PooledServer
from engine.training.context import JobFailed

FINISH = {"eos": "stop", "stop_sequence": "stop", "user": "stop", "length": "length"}
STREAM_EVERY_S = 0.02  # a streamed answer's pieces are gathered for this long (50 events a second at most)


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


@dataclass
class Stats:
    """What the job reports every few seconds: requests, tokens, time to first token, the queue. ``done_tokens``
    and ``done_s`` add up the finished answers' tokens and seconds: their ratio is tokens/s as Ember defines it
    everywhere (engine.api.playground.tokens_per_s)."""

    requests: int = 0
    errors: int = 0
    tokens: int = 0
    done_tokens: int = 0
    done_s: float = 0.0
    active: int = 0
    waiting: int = 0
    ttft: deque = field(default_factory=lambda: deque(maxlen=200))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, **delta: float) -> None:
        with self.lock:
            for name, value in delta.items():
                setattr(self, name, getattr(self, name) + value)

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            ttft = sorted(self.ttft)
            return {"requests": self.requests, "errors": self.errors, "tokens": self.tokens, "active": self.active,
                    "queue": self.waiting, "ttft_p50_s": ttft[len(ttft) // 2] if ttft else None,
                    "done_tokens": self.done_tokens, "done_s": self.done_s}


class Service:
    """The model behind the routes: a ChatModel (engine/inference/chat.py) or a Classifier."""

    def __init__(self, kind: str, model: Any, name: str, max_new_tokens: int, api_key: str | None = None):
        self.kind, self.model, self.name, self.max_new_tokens = kind, model, name, max_new_tokens
        self.api_key = api_key
        # One thread runs every model call, one at a time. Not the HTTP worker that took the request: each
        # thread that enters PyTorch's OpenMP parallel regions keeps a team of threads of its own, and once
        # several teams exist generation on 2 cores ran a third slower (15 instead of 22 tokens/s for SmolLM2,
        # measured here), which made a served model slower than the same model in the Playground's worker.
        self.runner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model")
        self.stats = Stats()
        self.created = int(time.time())

    def call(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` on the model's thread, after the calls before it; its result or its exception."""
        return self.runner.submit(fn).result()

    def close(self) -> None:
        """No new calls; the one in progress (and those queued) end first."""
        self.runner.shutdown(wait=True)

    def check_key(self, header: str | None) -> None:
        if self.api_key is None:
            return
        given = (header or "").removeprefix("Bearer ").strip()
        if not given:
            raise ApiError(401, "This server wants an API key: send Authorization: Bearer KEY (the OpenAI client's "
                                "api_key); the key is in the file the serve job names", code="invalid_api_key")
        if not hmac.compare_digest(given.encode(), self.api_key.encode()):
            raise ApiError(401, "Incorrect API key: use the one in the file the serve job names",
                           code="invalid_api_key")

    # -- requests into settings ---------------------------------------------------------------

    def check_model(self, body: dict[str, Any]) -> None:
        if body.get("model") not in (None, self.name):
            raise ApiError(404, f"The model {body.get('model')!r} does not exist here; this server serves "
                                f"{self.name!r} (GET /v1/models)", "model", "model_not_found")

    def settings(self, body: dict[str, Any]) -> GenerateSettings:
        self.check_model(body)
        if int(body.get("n") or 1) != 1:
            raise ApiError(400, "n must be 1: one answer per request", "n")
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or self.max_new_tokens
        if not isinstance(max_tokens, int) or not 1 <= max_tokens <= self.max_new_tokens:
            raise ApiError(400, f"max_tokens must be a whole number from 1 to {self.max_new_tokens} (the job's "
                                "max_new_tokens)", "max_tokens")
        stop = body.get("stop") or []
        values = {"temperature": body.get("temperature", 1.0), "top_p": body.get("top_p", 1.0),
                  "top_k": body.get("top_k", 0), "max_new_tokens": max_tokens,
                  "repetition_penalty": body.get("repetition_penalty", 1.0),
                  "stop": [stop] if isinstance(stop, str) else stop, "seed": body.get("seed")}
        try:
            return GenerateSettings.model_validate({k: v for k, v in values.items() if v is not None})
        except ValidationError as err:
            first = err.errors()[0]
            raise ApiError(400, f"{'.'.join(map(str, first['loc']))}: {first['msg']}",
                           str(first["loc"][0]) if first["loc"] else None) from None

    @staticmethod
    def messages(body: dict[str, Any]) -> list[dict[str, str]]:
        raw = body.get("messages")
        if not isinstance(raw, list) or not raw:
            raise ApiError(400, "messages must be a non-empty list of {role, content}", "messages")
        out = []
        for m in raw:
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
            role = m.get("role") if isinstance(m, dict) else None
            if role == "developer":
                role = "system"
            if role not in ("system", "user", "assistant") or not isinstance(content, str):
                raise ApiError(400, "each message needs a role (system, user or assistant) and text content",
                               "messages")
            out.append({"role": role, "content": content})
        return out

    # -- answering --------------------------------------------------------------------------------

    def prepare(self, chat: bool, body: dict[str, Any]) -> tuple[GenerateSettings, list[dict[str, str]] | str]:
        """The request's settings and its messages (chat) or prompt text (completion); ApiError when bad."""
        settings = self.settings(body)
        if chat:
            return settings, self.messages(body)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise ApiError(400, "prompt must be a text (one prompt per request)", "prompt")
        return settings, prompt

    def run(self, settings: GenerateSettings, given: list[dict[str, str]] | str, on_text: Any) -> Any:
        """Generate on the model's thread (the queue is who waits for it); the figures are counted here."""
        self.stats.add(waiting=1)

        def generate() -> Any:
            self.stats.add(waiting=-1, active=1)
            try:
                if isinstance(given, str):
                    return self.model.complete(given, settings, on_text)
                return self.model.answer(given, settings, on_text)
            finally:
                self.stats.add(active=-1)

        answer = self.call(generate)
        self.stats.add(tokens=answer.new_tokens, done_tokens=answer.new_tokens, done_s=answer.seconds)
        if answer.ttft_s is not None:
            with self.stats.lock:
                self.stats.ttft.append(answer.ttft_s)
        return answer


def _usage(answer: Any) -> dict[str, int]:
    return {"prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.new_tokens,
            "total_tokens": answer.prompt_tokens + answer.new_tokens}


class Handler(PooledHandler):
    server_version = "EmberStudio"
    # TCP_NODELAY: a streamed event is a small write; with Nagle's algorithm it could wait for the client's
    # delayed ACK of the one before (up to 40 ms on Linux), which shows as a later first token.
    disable_nagle_algorithm = True
    service: Service  # set on the class server() makes
    _streaming = False  # this request's event stream has started

    @classmethod
    def error_doc(cls, status: int, message: str, code: str) -> dict[str, Any]:
        return ApiError(status, message, code=code).body()

    def log_message(self, fmt: str, *args: Any) -> None:  # to stdout.log, one line a request
        sys.stdout.write(f"{time.strftime('%H:%M:%S')} {self.address_string()} {fmt % args}\n")
        sys.stdout.flush()

    def _json(self, status: int, doc: dict[str, Any]) -> None:
        raw = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _body(self) -> dict[str, Any]:
        """The JSON body; called after the API key is checked, so a client without it never gets it read."""
        limits = self.server.limits
        try:
            length = self.content_length()
        except ValueError:
            raise ApiError(400, "Content-Length must be a whole number of bytes") from None
        if length > limits.max_body:  # refused before a byte of it is read
            raise ApiError(413, f"the request is {length:,} bytes; at most {limits.max_body:,} are read",
                           code="request_too_large")
        try:
            raw = self.read_body(length)
        except TimeoutError:
            raise ApiError(408, f"the body did not arrive within {limits.body_timeout:g} s of the request's "
                                "headers", code="timeout") from None
        if len(raw) < length:
            raise ApiError(400, f"the body ended after {len(raw):,} of its {length:,} bytes")
        try:
            body = json.loads(raw or b"{}")
        except (ValueError, UnicodeDecodeError):
            raise ApiError(400, "the body is not JSON") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the body must be a JSON object")
        return body

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.rstrip("/") not in ("/health", ""):
            try:
                self.service.check_key(self.headers.get("Authorization"))
            except ApiError as err:
                self._error(err)
                return
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            svc = self.service
            self._json(200, {"object": "list", "data": [{"id": svc.name, "object": "model", "created": svc.created,
                                                         "owned_by": "ember-studio"}]})
        elif self.path.rstrip("/") in ("/health", ""):
            self._json(200, {"status": "ok", "model": self.service.name})
        else:
            self._error(ApiError(404, f"No route GET {self.path}; see /v1/models", code="not_found"))

    def do_POST(self) -> None:  # noqa: N802
        svc = self.service
        svc.stats.add(requests=1)
        try:
            svc.check_key(self.headers.get("Authorization"))
            body = self._body()
            route = self.path.rstrip("/")
            if route in ("/v1/chat/completions", "/v1/completions"):
                if svc.kind != "chat":
                    raise ApiError(400, f"{svc.name} is a classifier: POST /v1/classify", code="wrong_model_kind")
                self._generate(route.endswith("chat/completions"), body)
            elif route == "/v1/classify":
                self._classify(body)
            elif route == "/v1/embeddings":
                self._embeddings(body)
            else:
                raise ApiError(404, f"No route POST {self.path}; the routes are /v1/chat/completions, "
                                    "/v1/completions, /v1/classify and /v1/embeddings", code="not_found")
        except ApiError as err:
            svc.stats.add(errors=1)
            self._error(err)
        except Exception as exc:  # noqa: BLE001 - the client gets a 500 and the job keeps serving
            svc.stats.add(errors=1)
            self._error(ApiError(500, f"{type(exc).__name__}: {exc}", kind="server_error"))

    def _error(self, err: ApiError) -> None:
        if self._streaming:  # headers are out: the error goes as an event
            self._event(err.body())
            self._event_raw(b"data: [DONE]\n\n")
            return
        self._json(err.status, err.body())

    def _classify(self, body: dict[str, Any]) -> None:
        svc = self.service
        if svc.kind != "classify":
            raise ApiError(400, f"{svc.name} is a language model: POST /v1/chat/completions", code="wrong_model_kind")
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise ApiError(400, "input must be a text or a list of texts", "input")
        results = svc.call(lambda: [svc.model.predict(text=t) for t in texts])
        self._json(200, {"object": "list", "model": svc.name, "data": [
            {"index": i, "label": r["label"], "labels": r["labels"], "probs": r["probs"]}
            for i, r in enumerate(results)]})

    def _embeddings(self, body: dict[str, Any]) -> None:
        """OpenAI's embeddings for a text encoder (a text classifier's): the mean of its last hidden states."""
        svc = self.service
        if svc.kind != "classify" or not hasattr(svc.model, "embed"):
            raise ApiError(400, f"{svc.name} is a language model: /v1/embeddings serves text encoders (a text "
                                "classifier's)", code="wrong_model_kind")
        svc.check_model(body)
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
            raise ApiError(400, "input must be a text or a list of texts (token ids are not taken)", "input")
        encoding = body.get("encoding_format") or "float"
        if encoding not in ("float", "base64"):
            raise ApiError(400, "encoding_format must be float or base64", "encoding_format")
        try:
            vectors, tokens = svc.call(lambda: svc.model.embed(texts))
        except JobFailed as exc:
            raise ApiError(400, f"{exc}", code="wrong_model_kind") from None
        if encoding == "base64":  # little-endian float32, as OpenAI sends it (its Python client asks for this)
            vectors = [base64.b64encode(struct.pack(f"<{len(v)}f", *v)).decode() for v in vectors]
        self._json(200, {"object": "list", "model": svc.name,
                         "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
                         "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    # -- generation -------------------------------------------------------------------------------

    def _generate(self, chat: bool, body: dict[str, Any]) -> None:
        svc = self.service
        rid = ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(12)
        created = int(time.time())
        kind = "chat.completion" if chat else "text_completion"
        settings, given = svc.prepare(chat, body)  # a bad request is a plain 4xx, before any stream starts
        if not body.get("stream"):
            answer = svc.run(settings, given, lambda _t: None)
            choice: dict[str, Any] = {"index": 0, "finish_reason": FINISH.get(answer.stopped, "stop")}
            if chat:
                choice["message"] = {"role": "assistant", "content": answer.text}
            else:
                choice.update(text=answer.text, logprobs=None)
            self._json(200, {"id": rid, "object": kind, "created": created, "model": svc.name,
                             "choices": [choice], "usage": _usage(answer)})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self._streaming = True
        self.close_connection = True
        chunk_kind = "chat.completion.chunk" if chat else "text_completion"

        def chunk(delta: dict[str, Any] | None, text: str | None, finish: str | None) -> dict[str, Any]:
            choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
            if chat:
                choice["delta"] = delta or {}
            else:
                choice.update(text=text or "", logprobs=None)
            return {"id": rid, "object": chunk_kind, "created": created, "model": svc.name, "choices": [choice]}

        if chat:
            self._event(chunk({"role": "assistant", "content": ""}, None, None))

        pending: list[str] = []
        flushed = [0.0]  # when the last piece went out (0: none yet, so the first goes at once)

        def flush() -> None:
            if pending:
                text = "".join(pending)
                pending.clear()
                self._event(chunk({"content": text}, text, None))
                flushed[0] = time.monotonic()

        def on_text(text: str) -> None:
            # The first piece at once (time to first token); then at most one event per STREAM_EVERY_S, so a fast
            # runtime's tokens do not each cost a write, a flush and a wake-up of the client.
            if text:
                pending.append(text)
                if not flushed[0] or time.monotonic() - flushed[0] >= STREAM_EVERY_S:
                    flush()

        answer = svc.run(settings, given, on_text)
        flush()
        self._event(chunk({}, "", FINISH.get(answer.stopped, "stop")))
        if (body.get("stream_options") or {}).get("include_usage"):
            self._event({"id": rid, "object": chunk_kind, "created": created, "model": svc.name, "choices": [],
                         "usage": _usage(answer)})
        self._event_raw(b"data: [DONE]\n\n")

    def _event(self, doc: dict[str, Any]) -> None:
        self._event_raw(b"data: " + json.dumps(doc).encode() + b"\n\n")

    def _event_raw(self, raw: bytes) -> None:
        try:
            self.wfile.write(raw)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            # The client went away (or stopped reading for a write timeout): end its answer now, so the next one
            # in the queue starts.
            stop = getattr(self.service.model, "stop_event", None)
            if stop is not None:
                stop.set()


def server(service: Service, host: str, port: int, limits: Limits | None = None) -> PooledServer:
    """Bound and listening (port 0 takes a free one: ``server_address[1]``); serve_forever() answers.
    ``limits``: workers, backlog, header and body timeouts, the per-address cap, the body limit (Limits())."""
    handler = type("BoundHandler", (Handler,), {"service": service})
    return PooledServer((host, port), handler, limits)

