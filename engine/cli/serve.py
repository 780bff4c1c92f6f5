"""``ember serve MODEL`` and ``ember bench-serve URL``: an OpenAI-compatible endpoint, and a load test of one.

``ember serve`` starts a serve.model job (engine/recipes/serve.py), prints its URL once it listens, then the
figures every few seconds until Ctrl-C, which stops the job (``--detach`` leaves it serving; ``ember jobs
stop ID`` ends it). ``ember bench-serve`` runs N streaming clients at once for T seconds against any
OpenAI-compatible URL (Ember's, vLLM's, llama.cpp's) and prints time to first token (p50, p99), tokens/s and
errors. Standard library HTTP only, so it measures the server, not a client library.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from engine.api.job_terms import FINAL_STATES, QUEUED, SERVE
from engine.api.load_test import load_test
from engine.cli.chat import model_ref
from engine.cli.client import ensure_engine


def _serving(client: Any, job_id: str) -> list[dict[str, Any]]:
    events = client.call("events.query", topics=[f"run/{job_id}/serving"], limit=100_000)["events"]
    return [e["data"] for e in events]


def wait_listening(client: Any, job_id: str, say: Any = None) -> list[dict[str, Any]]:
    """The job's serving events once it listens (the first holds the URL); [] when it ended first. ``say``
    gets a line each time the job's state changes: queued (with why it waits), then loading."""
    said = ""
    while not (seen := _serving(client, job_id)):
        state = client.call("jobs.get", id=job_id)["state"]
        if state in FINAL_STATES:
            return []
        if say is not None and state != said:
            said = state
            say(_waiting_line(client, job_id) if state == QUEUED else "loading the model...")
        time.sleep(0.3)
    return seen


def _waiting_line(client: Any, job_id: str) -> str:
    """'queued: <why it waits>' from the queue (cores or GPUs in use, jobs ahead of it)."""
    try:
        entry = next((j for j in client.call("queue.get")["jobs"] if j.get("id") == job_id), {})
    except Exception:  # noqa: BLE001 - the reason is a nicety; the state is said anyway
        entry = {}
    reason = entry.get("reason")
    return f"queued: {reason}" if reason else "queued: waiting for its turn (see: ember queue)"


def cmd_serve(args: argparse.Namespace) -> int:
    spec: dict[str, Any] = {"model": model_ref(args.model), "port": args.port, "max_new_tokens": args.max_new_tokens,
                            "device": args.device}
    if args.name:
        spec["served_name"] = args.name
    if args.host:
        spec["host"] = args.host
    if args.bind:
        spec["bind"] = args.bind
    for key in ("backend", "tensor_parallel", "vllm_python"):
        if getattr(args, key) is not None:
            spec[key] = getattr(args, key)
    if args.api_key_file:
        spec["api_key_file"] = os.path.abspath(os.path.expanduser(args.api_key_file))
    with ensure_engine() as client:
        job = client.call("jobs.start", kind=SERVE, spec=spec, name=args.name or "")
        job_id = job["id"]
        print(f"job {job_id}: serving {args.model}", file=sys.stderr, flush=True)
        seen = wait_listening(client, job_id, lambda line: print(f"job {job_id}: {line}", file=sys.stderr,
                                                                  flush=True))
        if not seen:
            state = client.call("jobs.get", id=job_id)
            error = state.get("error") or {}
            print(f"error: {error.get('message', state['state'])}", file=sys.stderr)
            if error.get("hint"):
                print(f"hint: {error['hint']}", file=sys.stderr)
            return 1
        url, name = seen[0]["url"], seen[0]["model"]
        print(url, flush=True)
        if seen[0].get("host"):
            print(f"served on {seen[0]['host']} at {seen[0]['remote_url']}; forwarded here by the engine",
                  file=sys.stderr, flush=True)
        key_file = seen[0].get("api_key_file")
        if key_file:
            print(f"listening on {seen[0].get('bind')}; clients send the API key in {key_file} "
                  f"(client = OpenAI(base_url={url!r}, api_key=open({key_file!r}).read().strip()))",
                  file=sys.stderr, flush=True)
        else:
            print(f"serving {name}: OpenAI-compatible (client = OpenAI(base_url={url!r}, api_key='unused'))",
                  file=sys.stderr, flush=True)
        if args.detach:
            print(f"it keeps serving; stop it with: ember stop {job_id}", file=sys.stderr)
            return 0
        shown = len(seen)
        try:
            while True:
                time.sleep(2.0)
                events = _serving(client, job_id)
                for f in events[shown:]:
                    if "requests" in f:
                        ttft = f.get("ttft_p50_s")
                        speed = f.get("tokens_per_s")  # None: no answer ended since the last line
                        print(f"{f['requests']} requests ({f['requests_per_s']:.2f}/s)"
                              + (f", {speed:.1f} tokens/s" if speed is not None else "")
                              + f", queue {f['queue']}, errors {f['errors']}"
                              + (f", first token p50 {ttft:.3f} s" if ttft is not None else ""), file=sys.stderr)
                shown = len(events)
                if client.call("jobs.get", id=job_id)["state"] in FINAL_STATES:
                    return 0
        except KeyboardInterrupt:
            client.call("jobs.stop", id=job_id)
            print(f"\nstopping {job_id}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- the load test


def cmd_bench_serve(args: argparse.Namespace) -> int:
    key = None
    if args.api_key_file:
        with open(os.path.expanduser(args.api_key_file)) as f:
            key = f.read().strip()
    result = load_test(args.url, args.clients, args.seconds, args.max_tokens, args.model, api_key=key)
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
    s = sub.add_parser("serve", help="serve a model behind an OpenAI-compatible endpoint (127.0.0.1 unless --bind)")
    s.add_argument("model", help="a finished job's id, a built-in model, a model folder, or owner/name[@rev]")
    s.add_argument("--port", type=int, default=8000, help="0: any free port")
    s.add_argument("--name", help="the model's name in /v1/models (default: the job id, built-in or Hub id)")
    s.add_argument("--max-new-tokens", type=int, default=512, help="the most tokens one answer may ask for")
    s.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    s.add_argument("--detach", action="store_true", help="print the URL and return; the job keeps serving")
    s.add_argument("--host", help="an SSH host (ember hosts list) to serve on: MODEL is a folder or file here, copied "
                                  "there; the URL printed is a port of this machine forwarded to it")
    s.add_argument("--bind", help="the address to listen on (default 127.0.0.1); any other, e.g. 0.0.0.0, needs an "
                                  "API key: the job writes one to its folder unless --api-key-file names one")
    s.add_argument("--api-key-file", help="a file holding the key clients must send (Authorization: Bearer KEY)")
    s.add_argument("--backend", choices=("auto", "ember", "vllm"),
                   help="auto (default): vLLM where CUDA GPUs and vLLM are, else Ember's server")
    s.add_argument("--tensor-parallel", type=int, help="vLLM: GPUs to split the model across (default: all)")
    s.add_argument("--vllm-python", help="vLLM: the Python that has it (default: the engine's)")
    s.set_defaults(fn=cmd_serve)
    b = sub.add_parser("bench-serve", help="load-test an OpenAI-compatible URL: N streaming clients for T seconds")
    b.add_argument("url", help="the base URL, e.g. http://127.0.0.1:8000/v1")
    b.add_argument("--clients", type=int, default=8)
    b.add_argument("--seconds", type=float, default=10.0)
    b.add_argument("--max-tokens", type=int, default=32)
    b.add_argument("--model", help="default: the first model /v1/models lists")
    b.add_argument("--api-key-file", help="a file holding the server's API key")
    b.add_argument("--json", action="store_true")
    b.set_defaults(fn=cmd_bench_serve)
