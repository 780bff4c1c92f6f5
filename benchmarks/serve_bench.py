"""Ember's OpenAI-compatible server against the same runtime called bare: an answer streamed through
``/v1/chat/completions`` of a serve.model job against model.generate in this process, on the same model,
prompt and greedy settings, side by side.

    python benchmarks/serve_bench.py [--model smollm2-135m-instruct] [--tokens 64] [--rounds 5]

The server side is timed where a client sees it: from the HTTP request to the first streamed text (time to
first token) and to the end of the stream (tokens/s = the usage chunk's completion tokens / that time),
through the standard library's HTTP client (engine/api/load_test.py's stream_once, what ``ember bench-serve``
uses). The bare side is generate_bench.py's direct side. They alternate, one answer each per round, and each
figure is the median over rounds; the answers must be equal. Ratios server/bare (target: at least 0.95
for tokens/s; bare/server for time to first token, so higher is better too). The transformers backend
is the one served today; llama.cpp and ONNX Runtime GenAI sides come with those backends.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from generate_bench import PROMPT, TARGET, direct_side, report, run_rounds, setup  # noqa: E402 - shared


def main() -> int:
    args, folder = setup(__doc__, "serve-bench")
    from engine.api import paths
    from engine.api.load_test import stream_once
    from engine.cli.client import ensure_engine
    from engine.cli.serve import wait_listening

    with ensure_engine(paths.resolve(), timeout=30, client="serve-bench") as client:
        client.timeout = 600
        job = client.call("jobs.start", kind="serve.model", spec={"model": {"builtin": args.model}, "port": 0,
                                                                  "device": "cpu"})
        seen = wait_listening(client, job["id"])
        assert seen, client.call("jobs.logs", id=job["id"])["lines"][-20:]
        url = seen[0]["url"]
        prompt = PROMPT[0]["content"]

        def server():
            r = stream_once(url, args.model, prompt, args.tokens, temperature=0)
            return r["text"], r["tokens"], r["ttft_s"], r["seconds"]

        bare = direct_side(folder, args.tokens)
        server()  # warm both sides up
        bare()
        rows = run_rounds({"bare": bare, "server": server}, args.rounds)
        print(f"model {args.model}, {rows['bare'][0][1]} new tokens, greedy, {args.rounds} rounds, transformers "
              "on the CPU")
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
