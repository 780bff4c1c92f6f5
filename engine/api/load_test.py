"""A load test of an OpenAI-compatible endpoint: N streaming clients for T seconds (docs/serve.md).

Standard library HTTP only, so it measures the server, not a client library, and it runs anywhere: ``ember
bench-serve URL`` and the Playground's Load test button call the same ``load_test``; benchmarks/serve_bench.py
times single requests with ``stream_once``.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Content-Type": "application/json", **({"Authorization": f"Bearer {api_key}"} if api_key else {})}


def _connection(parts: urllib.parse.SplitResult, timeout: float) -> http.client.HTTPConnection:
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return cls(parts.hostname, parts.port, timeout=timeout)


def http_get(url: str, api_key: str | None = None, timeout: float = 30.0) -> tuple[int, bytes]:
    """(status, body) of ``GET url``; OSError when nothing answers."""
    parts = urllib.parse.urlsplit(url)
    conn = _connection(parts, timeout)
    try:
        conn.request("GET", parts.path, headers=_headers(api_key))
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def list_models(url: str, api_key: str | None = None, timeout: float = 30.0) -> list[str]:
    """The ids ``GET {url}/models`` lists; RuntimeError with the server's message when it refuses."""
    status, raw = http_get(url.rstrip("/") + "/models", api_key, timeout)
    if status != 200:
        raise RuntimeError(f"HTTP {status}: {_message(raw)}")
    return [m["id"] for m in json.loads(raw)["data"]]


def _message(raw: bytes) -> str:
    try:
        return str(json.loads(raw)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return raw[:300].decode(errors="replace")


def stream_events(url: str, route: str, body: dict[str, Any], api_key: str | None = None,
                  timeout: float = 120.0, stop: threading.Event | None = None) -> Iterator[dict[str, Any]]:
    """POST ``body`` (``stream: true``) to ``{url}/{route}`` and yield each server-sent event's JSON; an error
    event or status raises RuntimeError with the server's message. ``stop`` set: the connection closes."""
    parts = urllib.parse.urlsplit(url.rstrip("/") + "/" + route)
    conn = _connection(parts, timeout)
    try:
        conn.request("POST", parts.path, json.dumps(body), _headers(api_key))
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {_message(resp.read())}")
        for raw in resp:
            if stop is not None and stop.is_set():
                return
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            doc = json.loads(line[6:])
            if "error" in doc:
                raise RuntimeError(doc["error"].get("message", "error"))
            yield doc
    finally:
        conn.close()


def stream_once(url: str, model: str, prompt: str, max_tokens: int, timeout: float = 120.0,
                temperature: float | None = None, api_key: str | None = None) -> dict[str, Any]:
    """One streamed chat completion: its text, time to first text, tokens (from the usage chunk) and seconds."""
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": prompt}],
                            "max_tokens": max_tokens, "stream": True, "stream_options": {"include_usage": True}}
    if temperature is not None:
        body["temperature"] = temperature
    t0 = time.perf_counter()
    ttft, tokens, text = None, 0, []
    for doc in stream_events(url, "chat/completions", body, api_key, timeout):
        piece = "".join((c.get("delta") or {}).get("content") or "" for c in doc.get("choices") or [])
        if piece and ttft is None:
            ttft = time.perf_counter() - t0
        text.append(piece)
        if doc.get("usage"):
            tokens = int(doc["usage"].get("completion_tokens") or 0)
    return {"text": "".join(text), "ttft_s": ttft, "tokens": tokens, "seconds": time.perf_counter() - t0}


def load_test(url: str, clients: int, seconds: float, max_tokens: int, model: str | None = None,
              prompt: str = "Write a short story about a lighthouse.", api_key: str | None = None) -> dict[str, Any]:
    """``clients`` threads each streaming one request after another for ``seconds``; the figures of all."""
    if model is None:
        model = list_models(url, api_key)[0]
    results: list[dict[str, Any]] = []
    errors: list[str] = []
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def client_loop() -> None:
        while time.monotonic() < end:
            try:
                r = stream_once(url, model, prompt, max_tokens, api_key=api_key)
            except Exception as exc:  # noqa: BLE001 - counted and reported
                with lock:
                    errors.append(f"{type(exc).__name__}: {exc}")
                continue
            with lock:
                results.append(r)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client_loop) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ttfts = sorted(r["ttft_s"] for r in results if r["ttft_s"] is not None)

    def pct(p: float) -> float | None:
        return ttfts[min(len(ttfts) - 1, int(p * len(ttfts)))] if ttfts else None

    tokens = sum(r["tokens"] for r in results)
    return {"model": model, "clients": clients, "seconds": round(wall, 2), "requests": len(results),
            "errors": len(errors), "error_examples": errors[:3], "tokens": tokens,
            "tokens_per_s": round(tokens / wall, 2) if wall else 0.0,
            "requests_per_s": round(len(results) / wall, 3) if wall else 0.0,
            "ttft_p50_s": pct(0.5), "ttft_p99_s": pct(0.99)}
