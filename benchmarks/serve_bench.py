"""Ember's OpenAI-compatible server against the same runtime called bare: an answer streamed through
``/v1/chat/completions`` of a serve.model job against model.generate in this process, on the same model,
prompt and greedy settings, side by side.

    python benchmarks/serve_bench.py [--model smollm2-135m-instruct] [--tokens 64] [--rounds 5]

The server side is timed where a client sees it: from the HTTP request to the first streamed text (time to
first token) and to the end of the stream (tokens/s = the usage chunk's completion tokens / that time),
through the standard library's HTTP client (engine/api/load_test.py's stream_once, what ``ember bench-serve``
uses). The bare side is generate_bench.py's direct side. They alternate, one answer each per round, and each
figure is the median over rounds; the answers must be equal. Ratios server/bare (target: at least 0.95
for tokens/s; bare/server for time to first token, so higher is better too).

    python benchmarks/serve_bench.py --file export/gguf/model-q4_k_m.gguf   # llama.cpp behind the server
    python benchmarks/serve_bench.py --file export/onnx_genai/int4          # ONNX Runtime GenAI behind it

With ``--file`` the server serves a GGUF file or an ONNX-GenAI folder and the bare side is that runtime
called directly with its own generation loop (llama.cpp's greedy sampler, ONNX Runtime GenAI's Generator).

    python benchmarks/serve_bench.py --load [--workers 64] [--timeout 2] [--rounds 3]

``--load`` measures the HTTP server, not the model: a server of engine/serve/openai_api.py in this process on
127.0.0.1 (port 0) over the built-in tiny-llama, asked ``GET /v1/models`` (answered without the model) by raw
asyncio sockets: (1) 50 and (2) 200 simultaneous requests, beside the same burst against the same server with
socketserver's default listen backlog of 5 (the anchor: the kernel drops the SYNs that do not fit, and clients
retry after 1 s, 3 s, ...); (3) 100 half-sent requests (50 heads without their blank line, 50 bodies shorter
than their Content-Length) held open while 50 requests are sent, beside the same 50 with none held (the
anchor, alternating rounds), then how long the server took to close the half-sent ones (header and body
timeouts of ``--timeout`` s). It prints answered/total, latency p50/p99 and the ratios.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from generate_bench import PROMPT, TARGET, direct_side, report, run_rounds, setup  # noqa: E402 - shared


def bare_runtime_side(path: Path, tokens: int):
    """The file's runtime called directly with its own generation loop (llama.cpp's greedy sampler, ONNX Runtime
    GenAI's Generator): (text, new tokens, ttft_s, seconds)."""
    import numpy as np
    from transformers import AutoTokenizer

    from engine.inference.runtimes import runtime_of
    from engine.tasks.chat_templates import render_prompt

    folder = path.parent if path.is_file() else path
    tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    ids = tok(render_prompt(tok, PROMPT), add_special_tokens=False)["input_ids"]
    eos = tok.eos_token_id
    if runtime_of(path) == "llama.cpp":
        from llama_cpp import Llama

        from engine.inference.runtimes import DEFAULT_CONTEXT, _gguf_context

        # The context the server opens the file with: a different KV cache size changes llama.cpp's sums enough
        # to flip a near-tie in a 4-bit model's greedy answer.
        n_ctx = min(_gguf_context(path), DEFAULT_CONTEXT)
        llm = Llama(model_path=str(path), n_ctx=n_ctx, verbose=False, n_threads=os.cpu_count())

        def answer():
            t0, first, out = time.perf_counter(), None, []
            llm.reset()  # else generate() keeps the cached prompt and evaluates only its last token: other sums
            for token in llm.generate(ids, temp=0.0, top_k=1, repeat_penalty=1.0, reset=True):
                first = first or time.perf_counter()
                out.append(token)
                if token == eos or len(out) == tokens:
                    break
            return tok.decode(out, skip_special_tokens=True), len(out), first - t0, time.perf_counter() - t0
        return answer
    import onnxruntime_genai as og

    model = og.Model(str(path))

    def answer():
        t0, first, out = time.perf_counter(), None, []
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=len(ids) + tokens)
        gen = og.Generator(model, params)
        gen.append_tokens(np.asarray([ids], dtype=np.int32))
        while not gen.is_done() and len(out) < tokens:
            gen.generate_next_token()
            first = first or time.perf_counter()
            out.append(int(gen.get_next_tokens()[0]))
            if out[-1] == eos:
                break
        return tok.decode(out, skip_special_tokens=True), len(out), first - t0, time.perf_counter() - t0
    return answer


# ---------------------------------------------------------------- --load: bursts and slow clients


def _percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


async def _one(port: int, raw: bytes) -> tuple[bool, float]:
    """One request on its own connection: (answered 200, seconds from connect to the end of the answer)."""
    import asyncio

    t0 = time.perf_counter()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(raw)
        answer = await asyncio.wait_for(reader.read(), 60)
        writer.close()
        return answer.startswith(b"HTTP/1.1 200"), time.perf_counter() - t0
    except (OSError, TimeoutError):
        return False, time.perf_counter() - t0


async def _burst(port: int, n: int) -> tuple[int, list[float]]:
    import asyncio

    raw = b"GET /v1/models HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"
    results = await asyncio.gather(*(_one(port, raw) for _ in range(n)))
    return sum(ok for ok, _ in results), [t for _, t in results]


async def _held(port: int, head_only: bool) -> float:
    """A half-sent request held open until the server closes it: the seconds that took (inf: never, in 60 s)."""
    import asyncio

    t0 = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 1000\r\n" if head_only else
                 b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nContent-Length: 1000\r\n\r\n{\"mess")
    try:
        await asyncio.wait_for(reader.read(), 60)  # until the server closes (after its 408)
        return time.perf_counter() - t0
    except (OSError, TimeoutError):
        return float("inf")
    finally:
        writer.close()


async def _with_held(port: int, n_held: int, n: int) -> tuple[int, list[float], list[float]]:
    import asyncio

    held = [asyncio.ensure_future(_held(port, i % 2 == 0)) for i in range(n_held)]
    await asyncio.sleep(0.2)  # all connected and half-sent before the requests go
    answered, latencies = await _burst(port, n)
    return answered, latencies, list(await asyncio.gather(*held))


def _line(name: str, answered: int, total: int, latencies: list[float]) -> str:
    return (f"{name:<44} {answered:>3}/{total:<3} answered   p50 {1000 * _percentile(latencies, 0.5):8.1f} ms   "
            f"p99 {1000 * _percentile(latencies, 0.99):8.1f} ms")


def load_main() -> int:
    import argparse
    import asyncio
    import tempfile
    import threading

    ap = argparse.ArgumentParser(description="The OpenAI-compatible server under bursts and slow clients")
    ap.add_argument("--load", action="store_true", required=True)
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--timeout", type=float, default=2.0, help="the header and body timeouts, seconds")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    os.environ["EMBER_HOME"] = tempfile.mkdtemp(prefix="ember-serve-load-")
    from engine.inference.models import open_model
    from engine.serve.http_server import Limits
    from engine.serve.openai_api import Handler, Service, server

    kind, model, _ = open_model({"builtin": "tiny-llama"}, "cpu")
    service = Service(kind, model, "tiny-llama", 16)
    quiet = type("QuietHandler", (Handler,), {"service": service, "log_message": lambda *_: None})

    def start(limits: Limits):
        httpd = server(service, "127.0.0.1", 0, limits)
        httpd.RequestHandlerClass = quiet  # one log line per request would time the terminal
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return httpd

    limits = Limits(workers=args.workers, header_timeout=args.timeout, body_timeout=args.timeout)
    servers = {"now": start(limits), "backlog 5": start(Limits(workers=args.workers, backlog=5))}
    port = servers["now"].server_address[1]
    print(f"server: {args.workers} workers, backlog {limits.backlog}, header/body timeouts {args.timeout:g} s; "
          f"GET /v1/models on 127.0.0.1; {args.rounds} rounds, latencies pooled over them")
    ok = True
    asyncio.run(_burst(port, 20))  # warm up
    for n in (50, 200):
        rows: dict[str, tuple[int, list[float]]] = {name: (0, []) for name in servers}
        for _ in range(args.rounds):
            for name, httpd in servers.items():
                answered, lat = asyncio.run(_burst(httpd.server_address[1], n))
                rows[name] = (rows[name][0] + answered, rows[name][1] + lat)
        for name, (answered, lat) in rows.items():
            print(_line(f"{n} at once, {'this server' if name == 'now' else 'listen backlog 5 (anchor)'}",
                        answered, n * args.rounds, lat))
        ratio = _percentile(rows["backlog 5"][1], 0.99) / _percentile(rows["now"][1], 0.99)
        print(f"  p99 backlog 5 / this server: {ratio:.1f}x")
        ok &= rows["now"][0] == n * args.rounds

    alone: tuple[int, list[float]] = (0, [])
    held_rows: tuple[int, list[float]] = (0, [])
    closed: list[float] = []
    for _ in range(args.rounds):  # alternating, so both sides see the same machine
        answered, lat = asyncio.run(_burst(port, 50))
        alone = (alone[0] + answered, alone[1] + lat)
        answered, lat, held = asyncio.run(_with_held(port, 100, 50))
        held_rows = (held_rows[0] + answered, held_rows[1] + lat)
        closed += held
    print(_line("50 at once, none held (anchor)", *alone[:1], 50 * args.rounds, alone[1]))
    print(_line("50 at once, 100 half-sent held", *held_rows[:1], 50 * args.rounds, held_rows[1]))
    print(f"  p50 held / none held: {_percentile(held_rows[1], 0.5) / _percentile(alone[1], 0.5):.2f}x, "
          f"p99: {_percentile(held_rows[1], 0.99) / _percentile(alone[1], 0.99):.2f}x")
    done = [t for t in closed if t != float("inf")]
    print(f"half-sent closed by the server: {len(done)}/{len(closed)}, after p50 {_percentile(done, 0.5):.2f} s, "
          f"max {max(done, default=float('nan')):.2f} s (timeout {args.timeout:g} s)")
    ok &= held_rows[0] == 50 * args.rounds and len(done) == len(closed)
    for httpd in servers.values():
        httpd.shutdown()
        httpd.server_close()
    return 0 if ok else 1


def main() -> int:
    if "--load" in sys.argv[1:]:
        return load_main()
    args, folder = setup(__doc__, "serve-bench", with_file=True)
    path = Path(args.file).resolve() if args.file else None
    from engine.api import paths
    from engine.api.load_test import stream_once
    from engine.cli.client import ensure_engine
    from engine.cli.serve import wait_listening

    with ensure_engine(paths.resolve(), timeout=30, client="serve-bench") as client:
        client.timeout = 600
        model = {"path": str(path)} if path else {"builtin": args.model}
        job = client.call("jobs.start", kind="serve.model", spec={"model": model, "port": 0, "device": "cpu"})
        seen = wait_listening(client, job["id"])
        assert seen, client.call("jobs.logs", id=job["id"])["lines"][-20:]
        url = seen[0]["url"]
        prompt = PROMPT[0]["content"]

        def server():
            r = stream_once(url, seen[0]["model"], prompt, args.tokens, temperature=0)
            return r["text"], r["tokens"], r["ttft_s"], r["seconds"]

        bare = bare_runtime_side(path, args.tokens) if path else direct_side(folder, args.tokens)
        server()  # warm both sides up
        bare()
        rows = run_rounds({"bare": bare, "server": server}, args.rounds)
        runtime = seen[0].get("runtime") or "transformers"
        print(f"model {path.name if path else args.model}, {rows['bare'][0][1]} new tokens, greedy, {args.rounds} "
              f"rounds, {runtime} on the CPU")
        tps = report(rows, "bare", "server")
        client.call("jobs.stop", id=job["id"])  # jobs outlive the engine: the server is stopped first
        for _ in range(600):
            if client.call("jobs.get", id=job["id"])["state"] != "stopping":
                break
            time.sleep(0.1)
        client.call("engine.shutdown")  # the benchmark's own engine (its data folder is a temporary one)
        return 0 if tps >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
