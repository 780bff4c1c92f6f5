"""The planner's recommendations for Llama 3.2 1B and Llama 3.1 8B on 1, 2 and 8 GPUs of 24, 80 and 141 GB, as
the Markdown table in docs/parallelism.md.

    .venv/bin/python scripts/planner_table.py [--facts-json tests/fixtures/llama_facts.json]

The models' facts are measured on PyTorch's meta device from their published configs (no weights: nothing is
downloaded), exactly as the wizard measures a local model; --facts-json also writes them, for tests/engine/
test_planner.py. Full fine-tune, bf16, batch 8 of 2048 tokens per replica, AdamW.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GiB = 1 << 30
# The published configs (meta-llama/Llama-3.2-1B, meta-llama/Llama-3.1-8B), the fields that size the model.
CONFIGS = {
    "llama-3.2-1b": {"hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 32,
                     "num_key_value_heads": 8, "num_hidden_layers": 16, "head_dim": 64, "tie_word_embeddings": True},
    "llama-3.1-8b": {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
                     "num_key_value_heads": 8, "num_hidden_layers": 32, "head_dim": 128, "tie_word_embeddings": False},
}
COMMON = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256,
          "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "torch_dtype": "bfloat16",
          "bos_token_id": 128000, "eos_token_id": 128001}
KEEP = ("params_base", "params_total", "params_trainable", "by_method", "largest_layer_params",
        "largest_block_params", "num_blocks", "matmul_params", "quantizable_params", "activation_bytes_per_sample",
        "seq_len", "flops_per_sample", "hidden_size", "num_layers", "num_heads", "vocab_size")
SPEC = {"task": "causal_lm", "method": {"kind": "full"}, "data": {"max_length": 2048}, "batch_size": 8,
        "precision": "bf16", "generate_eval": {"prompts": 0}}


def measure(name: str, work: Path) -> dict:
    from engine.api.train_spec import TrainSpec
    from engine.estimate.facts import model_facts
    from engine.tasks import causal_lm

    folder = work / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**COMMON, **CONFIGS[name]}))
    causal_lm.check_model_folder = lambda _folder: []  # a config alone: the meta device needs no weights
    facts = model_facts(TrainSpec.model_validate({**SPEC, "model": {"path": str(folder)}}))
    return {k: facts[k] for k in KEEP if k in facts}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--facts-json", type=Path, help="write the measured facts here too")
    args = ap.parse_args()
    from engine.api.train_spec import TrainSpec
    from engine.estimate.planner import plan

    with tempfile.TemporaryDirectory() as tmp:
        facts = {name: measure(name, Path(tmp)) for name in CONFIGS}
    if args.facts_json:
        args.facts_json.write_text(json.dumps(facts, indent=1) + "\n")
    spec = TrainSpec.model_validate(SPEC)
    print("| model | GPUs | recommended layout | memory per GPU | fit | speed (GPUs' worth) | layouts that fit |")
    print("|---|---|---|---|---|---|---|")
    for name, f in facts.items():
        for gpus in (1, 2, 8):
            for gb in (24, 80, 141):
                result = plan(spec, f, gpus, gb * GiB)
                best = result["plans"][0]
                layout = best["layout"] if best["verdict"] != "will_not_fit" else \
                    f"none fits (closest: {best['layout']})"
                print(f"| {name} ({f['params_base'] / 1e9:.2f}B) | {gpus} x {gb} GB | {layout} | "
                      f"{best['memory_per_gpu'] / GiB:.1f} GiB | {best['verdict'].replace('_', ' ')} | "
                      f"{best['throughput']:.2f} | {result['fitting']} of {result['considered']} |")


if __name__ == "__main__":
    main()
