"""The language-model CUDA checks, on a GPU machine (after scripts/gpu_check.sh; under 2 minutes on one H200):

    python3 scripts/gpu_llm_check.py [--device cuda]      # writes llm_check.json into $OUT (or gpu-check/)

1. Ember's chat path (engine/inference) on CUDA: the built-in tiny-llama answers greedily on the GPU as on the
   CPU (the same text), with its tokens/s and time to first token on the GPU;
2. the OpenAI-compatible server (engine/serve/openai_api.py) over HTTP with that CUDA model: the streamed
   answer equals the in-process one;
3. torchao int4 weight-only (tinygemm) on CUDA, on a 0.16B Llama-shaped model with random weights (a bare
   GPU machine has no pretrained ones): logits' relative error against bf16, next-token agreement,
   the weights' bytes on the GPU and decode tokens/s, bf16 beside int4.

``--device cpu`` runs 1 and 2 on the CPU (plumbing only) and says 3 needs CUDA.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def chat_checks(device: str) -> dict:
    from engine.api.load_test import stream_once
    from engine.api.playground import GenerateSettings
    from engine.inference.models import open_model
    from engine.serve.openai_api import Service, server

    messages = [{"role": "user", "content": "Count to five, please."}]
    settings = GenerateSettings(temperature=0, max_new_tokens=24)
    _kind, on_cpu, _ = open_model({"builtin": "tiny-llama"}, "cpu")
    cpu = on_cpu.answer(messages, settings)
    _kind, on_dev, _ = open_model({"builtin": "tiny-llama"}, device)
    on_dev.answer(messages, settings)  # warm: CUDA's first kernels
    dev = on_dev.answer(messages, settings)
    out = {"device": device, "same_text_as_cpu": dev.text == cpu.text, "new_tokens": dev.new_tokens,
           "tokens_per_s": round(dev.new_tokens / dev.seconds, 1), "ttft_ms": round(1000 * (dev.ttft_s or 0), 2)}
    httpd = server(Service("chat", on_dev, "tiny-llama", 64), "127.0.0.1", 0)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    try:
        streamed = stream_once(url, "tiny-llama", messages[0]["content"], 24, temperature=0)
    finally:
        httpd.shutdown()
        httpd.server_close()
    out["server"] = {"same_text": streamed["text"] == dev.text, "tokens": streamed["tokens"],
                     "ttft_ms": round(1000 * (streamed["ttft_s"] or 0), 2)}
    return out


def int4_check() -> dict:
    import torch
    from torchao.quantization import Int4WeightOnlyConfig, quantize_
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                         num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=1024)
    base = LlamaForCausalLM(config).to("cuda", torch.bfloat16).eval()
    ids = torch.randint(0, config.vocab_size, (4, 128), device="cuda")

    def weight_bytes() -> int:
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated()

    before = weight_bytes()
    quant = copy.deepcopy(base)
    copied = weight_bytes() - before
    # tinygemm's layout: torchao's default (plain) needs the mslk kernels, which pip does not bring along
    quantize_(quant, Int4WeightOnlyConfig(group_size=128, int4_packing_format="tile_packed_to_4d"))
    torch.cuda.empty_cache()
    after = weight_bytes() - before
    with torch.inference_mode():
        ref, got = base(ids).logits.float(), quant(ids).logits.float()
    rel = ((got - ref).abs().mean() / ref.abs().mean()).item()
    agree = (got.argmax(-1) == ref.argmax(-1)).float().mean().item()

    def decode_tps(model) -> float:
        prompt = ids[:1, :16]
        with torch.inference_mode():
            model.generate(prompt, max_new_tokens=8, do_sample=False, min_new_tokens=8)  # warm
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            model.generate(prompt, max_new_tokens=128, do_sample=False, min_new_tokens=128)
            torch.cuda.synchronize()
        return round(128 / (time.perf_counter() - t0), 1)

    return {"params_m": round(sum(p.numel() for p in base.parameters()) / 1e6, 1),
            "logits_relative_error": round(rel, 4), "next_token_agreement": round(agree, 4),
            "gpu_bytes_bf16": copied, "gpu_bytes_int4": after, "bytes_ratio": round(after / copied, 3),
            "decode_tokens_per_s_bf16": decode_tps(base), "decode_tokens_per_s_int4": decode_tps(quant)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = parser.parse_args()
    out_dir = Path(os.environ.get("OUT") or "gpu-check")
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict = {}
    for name, check in (("chat", lambda: chat_checks(args.device)),
                        ("int4_weight_only", int4_check if args.device == "cuda" else None)):
        if check is None:
            result[name] = {"skipped": "needs CUDA"}
            continue
        t0 = time.perf_counter()
        try:
            result[name] = {**check(), "seconds": round(time.perf_counter() - t0, 1)}
        except Exception as exc:  # noqa: BLE001 - every check reports, the next one still runs
            result[name] = {"error": f"{type(exc).__name__}: {exc}"[:800]}
        print(json.dumps({name: result[name]}), flush=True)
    (out_dir / "llm_check.json").write_text(json.dumps(result, indent=1))
    failed = [n for n, r in result.items() if "error" in r or r.get("same_text_as_cpu") is False
              or (r.get("server") or {}).get("same_text") is False]
    print(f"== llm check: {', '.join(failed) or 'all'} {'failed' if failed else 'passed'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
