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


def main() -> int:
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
