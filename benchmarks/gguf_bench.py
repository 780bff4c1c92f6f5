"""GGUF q4_k_m against the f16 GGUF and the PyTorch model it came from: size, tokens/s and perplexity, side by side.

    python benchmarks/gguf_bench.py [--model smollm2-135m-instruct] [--tokens 64] [--rounds 5] [--texts 32]

The built-in model is converted with llama.cpp's own converter (f16) and quantized with its quantizer
(q4_k_m), as the export job does (engine/export/llm_formats.py). Each of the three then answers the same
prompt greedily through the same loop (engine/export/llm_check.py: the prompt in one call, then a token at a
time with the runtime's key/value cache), one answer each per round with the order alternating, so a burst
of other work slows all alike; tokens/s is the median over rounds. Perplexity: the first ``--texts``
conversations of the built-in short-answers validation data, the same token ids for all three. Printed as
ratios against f16 and against PyTorch.
"""

from __future__ import annotations

import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from generate_bench import PROMPT, SETTLE_S, setup  # noqa: E402 - shared


def main() -> int:
    args, folder = setup(__doc__, "gguf-bench", with_texts=True)
    import torch
    from transformers import AutoModelForCausalLM

    from engine.evaluate.answers import read_messages
    from engine.export import llm_check, llm_formats
    from engine.tasks.causal_lm import DATASETS, load_tokenizer
    from engine.tasks.chat_templates import render_prompt, template_text

    if why := llm_formats.gguf_missing():
        print(f"cannot run: {why}; {llm_formats.SETUP_HINT}")
        return 2
    work = Path(tempfile.mkdtemp(prefix="ember-gguf-bench-"))
    f16, q4 = work / "model-f16.gguf", work / "model-q4_k_m.gguf"
    t0 = time.perf_counter()
    llm_formats.convert_gguf(folder, f16, "f16")
    llm_formats.quantize_gguf(f16, q4, "q4_k_m")
    print(f"converted and quantized in {time.perf_counter() - t0:.1f} s (llama.cpp's converter and quantizer)")

    tok = load_tokenizer(folder)
    prompt = tok(render_prompt(tok, PROMPT), add_special_tokens=False)["input_ids"]
    rows = read_messages(DATASETS["short-answers"] / "validation.jsonl")[: args.texts]
    texts = [tok(tok.apply_chat_template(r, chat_template=template_text(tok), tokenize=False),
                 add_special_tokens=False)["input_ids"] for r in rows]
    n_ctx = max(len(prompt) + args.tokens, *(len(t) for t in texts)) + 8
    model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True, dtype=torch.float32).eval()
    sides = {"torch": llm_check.TorchRuntime(model),
             "f16": llm_check.LlamaCppRuntime(f16, n_ctx, all_positions=False),
             "q4_k_m": llm_check.LlamaCppRuntime(q4, n_ctx, all_positions=False)}
    sizes = {"torch": sum(p.stat().st_size for p in folder.glob("*.safetensors")),
             "f16": f16.stat().st_size, "q4_k_m": q4.stat().st_size}

    speed: dict[str, list[float]] = {name: [] for name in sides}
    for rt in sides.values():  # warm up
        llm_check.greedy(rt, prompt, 4, set())
    for r in range(args.rounds):
        for name in list(sides) if r % 2 == 0 else list(sides)[::-1]:
            time.sleep(SETTLE_S)
            out, _first, seconds = llm_check.greedy(sides[name], prompt, args.tokens, set())
            speed[name].append(len(out) / seconds)
    ppl = {}
    for name in sides:
        rt = llm_check.LlamaCppRuntime(f16 if name == "f16" else q4, n_ctx) if name != "torch" else sides["torch"]
        total = [llm_check.nll(rt, t) for t in texts]
        ppl[name] = math.exp(sum(s for s, _ in total) / sum(n for _, n in total))

    tps = {name: statistics.median(v) for name, v in speed.items()}
    print(f"model {args.model}, {args.tokens} new tokens greedy, {args.rounds} rounds; perplexity on {len(texts)} "
          "short-answers conversations; CPU")
    print(f"  {'':<7} {'size':>10} {'tokens/s':>9} {'perplexity':>11}")
    for name in sides:
        print(f"  {name:<7} {sizes[name] / 2**20:8.1f} MiB {tps[name]:9.1f} {ppl[name]:11.3f}"
              f"   (rounds: {', '.join(f'{v:.1f}' for v in speed[name])})")
    for base in ("f16", "torch"):
        print(f"q4_k_m / {base}: size {sizes['q4_k_m'] / sizes[base]:.3f}, tokens/s {tps['q4_k_m'] / tps[base]:.3f}, "
              f"perplexity {ppl['q4_k_m'] / ppl[base] - 1:+.2%}")
    print(f"f16 / torch: size {sizes['f16'] / sizes['torch']:.3f}, tokens/s {tps['f16'] / tps['torch']:.3f}, "
          f"perplexity {ppl['f16'] / ppl['torch'] - 1:+.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
