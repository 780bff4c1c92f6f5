"""``ember serve MODEL`` and ``ember bench-serve URL``: an OpenAI-compatible endpoint, and a load test of one.

``ember serve`` starts a serve.model job (engine/recipes/serve.py), prints its URL once it listens, then the
figures every few seconds until Ctrl-C, which stops the job (``--detach`` leaves it serving; ``ember jobs
stop ID`` ends it). ``ember bench-serve`` runs N streaming clients at once for T seconds against any
OpenAI-compatible URL (Ember's, vLLM's, llama.cpp's) and prints time to first token (p50, p99), tokens/s and
errors. Standard library HTTP only, so it measures the server, not a client library.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse
from typing import Any

from engine.api.job_terms import FINAL_STATES, SERVE
from engine.cli.chat import model_ref
from engine.cli.client import ensure_engine


def _serving(client: Any, job_id: str) -> list[dict[str, Any]]:
    events = client.call("events.query", topics=[f"run/{job_id}/serving"], limit=100_000)["events"]
    return [e["data"] for e in events]


def wait_listening(client: Any, job_id: str) -> list[dict[str, Any]]:
    """The job's serving events once it listens (the first holds the URL); [] when it ended first."""
    while not (seen := _serving(client, job_id)):
        if client.call("jobs.get", id=job_id)["state"] in FINAL_STATES:
            return []
        time.sleep(0.3)
    return seen


def cmd_serve(args: argparse.Namespace) -> int:
    spec: dict[str, Any] = {"model": model_ref(args.model), "port": args.port, "max_new_tokens": args.max_new_tokens,
                            "device": args.device}
    if args.name:
        spec["served_name"] = args.name
    with ensure_engine() as client:
        job = client.call("jobs.start", kind=SERVE, spec=spec, name=args.name or "")
        job_id = job["id"]
        print(f"job {job_id}: loading {args.model}...", file=sys.stderr, flush=True)
        seen = wait_listening(client, job_id)
        if not seen:
            state = client.call("jobs.get", id=job_id)
            error = state.get("error") or {}
            print(f"error: {error.get('message', state['state'])}", file=sys.stderr)
            if error.get("hint"):
                print(f"hint: {error['hint']}", file=sys.stderr)
            return 1
        url, name = seen[0]["url"], seen[0]["model"]
        print(url, flush=True)
        print(f"serving {name}: OpenAI-compatible (client = OpenAI(base_url={url!r}, api_key='unused'))",
              file=sys.stderr, flush=True)
        if args.detach:
            print(f"it keeps serving; stop it with: ember jobs stop {job_id}", file=sys.stderr)
            return 0
        shown = len(seen)
        try:
            while True:
                time.sleep(2.0)
                events = _serving(client, job_id)
                for f in events[shown:]:
                    if "requests" in f:
                        ttft = f.get("ttft_p50_s")
                        print(f"{f['requests']} requests ({f['requests_per_s']:.2f}/s), {f['tokens_per_s']:.1f} "
                              f"tokens/s, queue {f['queue']}, errors {f['errors']}"
                              + (f", first token p50 {ttft:.3f} s" if ttft is not None else ""), file=sys.stderr)
                shown = len(events)
                if client.call("jobs.get", id=job_id)["state"] in FINAL_STATES:
                    return 0
        except KeyboardInterrupt:
            client.call("jobs.stop", id=job_id)
            print(f"\nstopping {job_id}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- the load test


def stream_once(url: str, model: str, prompt: str, max_tokens: int, timeout: float = 120.0,
                temperature: float | None = None) -> dict[str, Any]:
    """One streamed chat completion: its text, time to first text, tokens (from the usage chunk) and seconds."""
    parts = urllib.parse.urlsplit(url.rstrip("/") + "/chat/completions")
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "stream": True, "stream_options": {"include_usage": True}}
    if temperature is not None:
        body["temperature"] = temperature
    t0 = time.perf_counter()
    ttft, tokens, text = None, 0, []
    try:
        conn.request("POST", parts.path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300].decode(errors='replace')}")
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            doc = json.loads(line[6:])
            if "error" in doc:
                raise RuntimeError(doc["error"].get("message", "error"))
            piece = "".join((c.get("delta") or {}).get("content") or "" for c in doc.get("choices") or [])
            if piece and ttft is None:
                ttft = time.perf_counter() - t0
            text.append(piece)
            if doc.get("usage"):
                tokens = int(doc["usage"].get("completion_tokens") or 0)
    finally:
        conn.close()
    return {"text": "".join(text), "ttft_s": ttft, "tokens": tokens, "seconds": time.perf_counter() - t0}


def load_test(url: str, clients: int, seconds: float, max_tokens: int, model: str | None = None,
              prompt: str = "Write a short story about a lighthouse.") -> dict[str, Any]:
    """``clients`` threads each streaming one request after another for ``seconds``; the figures of all."""
    if model is None:
        parts = urllib.parse.urlsplit(url.rstrip("/") + "/models")
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        conn.request("GET", parts.path)
        model = json.loads(conn.getresponse().read())["data"][0]["id"]
        conn.close()
    results: list[dict[str, Any]] = []
    errors: list[str] = []
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def client_loop() -> None:
        while time.monotonic() < end:
            try:
                r = stream_once(url, model, prompt, max_tokens)
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


def cmd_bench_serve(args: argparse.Namespace) -> int:
    result = load_test(args.url, args.clients, args.seconds, args.max_tokens, args.model)
    if args.json:
        print(json.dumps(result))
    else:
        p50, p99 = result["ttft_p50_s"], result["ttft_p99_s"]
        print(f"{result['requests']} requests from {result['clients']} clients in {result['seconds']} s: "
              f"{result['tokens_per_s']} tokens/s, {result['requests_per_s']} requests/s, "
              f"first token p50 {p50 if p50 is None else round(p50, 3)} s, p99 {p99 if p99 is None else round(p99, 3)} s, "
              f"{result['errors']} errors")
        for example in result["error_examples"]:
            print(f"  error: {example}", file=sys.stderr)
    return 1 if result["errors"] else 0


def add_parser(sub: Any) -> None:
    s = sub.add_parser("serve", help="serve a model behind an OpenAI-compatible endpoint on 127.0.0.1")
    s.add_argument("model", help="a finished job's id, a built-in model, a model folder, or owner/name[@rev]")
    s.add_argument("--port", type=int, default=8000, help="0: any free port")
    s.add_argument("--name", help="the model's name in /v1/models (default: the job id, built-in or Hub id)")
    s.add_argument("--max-new-tokens", type=int, default=512, help="the most tokens one answer may ask for")
    s.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    s.add_argument("--detach", action="store_true", help="print the URL and return; the job keeps serving")
    s.set_defaults(fn=cmd_serve)
    b = sub.add_parser("bench-serve", help="load-test an OpenAI-compatible URL: N streaming clients for T seconds")
    b.add_argument("url", help="the base URL, e.g. http://127.0.0.1:8000/v1")
    b.add_argument("--clients", type=int, default=8)
    b.add_argument("--seconds", type=float, default=10.0)
    b.add_argument("--max-tokens", type=int, default=32)
    b.add_argument("--model", help="default: the first model /v1/models lists")
    b.add_argument("--json", action="store_true")
    b.set_defaults(fn=cmd_bench_serve)
