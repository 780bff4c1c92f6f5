"""The Playground's speed: an answer through the engine's inference worker against model.generate called
directly on the same model, prompt and settings, side by side.

    python benchmarks/generate_bench.py [--model smollm2-135m-instruct] [--tokens 64] [--rounds 5]

Both sides decode greedily the same number of new tokens (the answers are compared: they must be equal). The
worker side is timed where a user sees it, in a client of a real engine (started here with its own data
folder): from the playground.chat request to the first streamed text (time to first token) and to the done
event (tokens/s = new tokens / that time). The direct side is timed around model.generate in this process
(its first token from a streamer). The two alternate, one answer each per round, so a burst of other work on
a shared machine slows both alike; each figure is the median over rounds. The worker is loaded (warm) before
the first round, as the Playground keeps it. Ratios worker/direct (target: at least 0.95 for tokens/s;
for time to first token direct/worker, so higher is better too).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET = 0.95
# OpenMP threads spin for a while after their last parallel region: a pause between answers keeps one
# side's idle spinning out of the other side's timing.
SETTLE_S = 0.5
PROMPT = [{"role": "user", "content": "Write a short story about a lighthouse keeper who finds a message in a bottle."}]


def direct_side(folder: Path, tokens: int):
    """A closure answering the prompt with model.generate: (text, new tokens, ttft_s, seconds)."""
    import torch
    from transformers import AutoModelForCausalLM

    from engine.tasks.causal_lm import load_tokenizer
    from engine.tasks.chat_templates import render_prompt

    tok = load_tokenizer(folder)
    model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True, dtype=torch.float32).eval()
    ids = tok(render_prompt(tok, PROMPT), add_special_tokens=False, return_tensors="pt")["input_ids"]

    class FirstToken:
        def __init__(self):
            self.calls, self.at = 0, None

        def put(self, _value):
            self.calls += 1
            if self.calls == 2 and self.at is None:  # the first call is the prompt
                self.at = time.perf_counter()

        def end(self):
            pass

    def answer():
        streamer = FirstToken()
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens,
                                 do_sample=False, repetition_penalty=1.0, pad_token_id=tok.pad_token_id or 0,
                                 streamer=streamer)
        seconds = time.perf_counter() - t0
        new = out[0, ids.shape[1]:]
        return tok.decode(new, skip_special_tokens=True), int(new.shape[0]), streamer.at - t0, seconds

    return answer


def worker_side(client, ref: dict, tokens: int):
    def answer():
        t0 = time.perf_counter()
        first = []

        def on_text(_t):
            if not first:
                first.append(time.perf_counter())

        from engine.cli.chat import stream_answer

        done = stream_answer(client, ref, PROMPT, {"temperature": 0, "max_new_tokens": tokens}, on_text)
        seconds = time.perf_counter() - t0
        return done["text"], int(done["new_tokens"]), first[0] - t0, seconds

    return answer


def run_rounds(sides: dict, rounds: int) -> dict[str, list]:
    """Each side answers once a round, the order alternating, after a pause; every answer must be the same.
    A side is a function returning (text, new tokens, ttft_s, seconds)."""
    names = list(sides)
    rows: dict[str, list] = {name: [] for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            time.sleep(SETTLE_S)
            rows[name].append(sides[name]())
    texts = {row[0] for rs in rows.values() for row in rs}
    assert len(texts) == 1, texts
    return rows


def report(rows: dict[str, list], base: str, other: str, target: float = TARGET) -> float:
    """Print each side's medians and the ratios other/base; returns the tokens/s ratio."""
    med = {side: {"tps": statistics.median(row[1] / row[3] for row in rs),
                  "ttft": statistics.median(row[2] for row in rs)} for side, rs in rows.items()}
    for side in (base, other):
        spread = [f"{row[1] / row[3]:.1f}" for row in rows[side]]
        print(f"  {side:<7} {med[side]['tps']:7.1f} tokens/s  first token {med[side]['ttft'] * 1000:6.1f} ms"
              f"   (rounds: {', '.join(spread)} tokens/s)")
    tps = med[other]["tps"] / med[base]["tps"]
    print(f"ratio {other}/{base} tokens/s: {tps:.3f} (target >= {target})")
    print(f"ratio {base}/{other} time to first token: {med[base]['ttft'] / med[other]['ttft']:.3f}")
    return tps


def setup(doc: str, name: str, with_file: bool = False, with_texts: bool = False) -> tuple[argparse.Namespace, Path]:
    """The options (--model, --tokens, --rounds; --file with ``with_file``), a temporary data folder for the
    benchmark's own engine, and the built-in model's folder."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct", help="a built-in causal LM")
    if with_file:
        ap.add_argument("--file", help="a GGUF file or an ONNX-GenAI folder (with its tokenizer) to serve instead")
    if with_texts:
        ap.add_argument("--texts", type=int, default=32, help="conversations the perplexity is measured on")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    os.environ["EMBER_HOME"] = tempfile.mkdtemp(prefix=f"ember-{name}-")
    os.environ.setdefault("EMBER_MODELS_DIR", str(Path.home() / ".cache" / "ember-bench-models"))
    from engine.api.train_spec import TrainSpec
    from engine.tasks import causal_lm

    folder, issues = causal_lm.resolve_model_dir(TrainSpec(task="causal_lm", model={"builtin": args.model}))
    assert folder is not None and not issues, issues
    return args, folder


def main() -> int:
    args, folder = setup(__doc__, "generate-bench")
    from engine.api import paths
    from engine.cli.client import ensure_engine

    with ensure_engine(paths.resolve(), timeout=30, client="generate-bench") as client:
        client.timeout = 600
        ref = {"builtin": args.model}
        worker, direct = worker_side(client, ref, args.tokens), direct_side(folder, args.tokens)
        worker()  # load the worker (the Playground keeps it warm) and warm both sides up
        direct()
        rows = run_rounds({"direct": direct, "worker": worker}, args.rounds)
        print(f"model {args.model}, {rows['direct'][0][1]} new tokens, greedy, {args.rounds} rounds, torch threads "
              f"{__import__('torch').get_num_threads()}")
        tps = report(rows, "direct", "worker")
        client.call("engine.shutdown")  # the benchmark's own engine (its data folder is a temporary one)
        return 0 if tps >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
