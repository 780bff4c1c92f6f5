"""Tokens/s and MFU of a full fine-tune of a ~1B-parameter Llama: Ember's Trainer beside a plain PyTorch loop.

    python benchmarks/mfu_bench.py                          (1B model, bf16, one CUDA GPU; about 3 minutes on an H200)
    python benchmarks/mfu_bench.py --size tiny --device cpu (the same code on a small model, eager, about a minute)
    python benchmarks/mfu_bench.py --json mfu.json          (every figure, also written as JSON)

The model is built from a config with random weights (nothing is downloaded): hidden 2048, 16 layers, 32 query /
8 key-value heads, MLP 8192, a 32k vocabulary, with a small BPE tokenizer. The data is synthetic instruction JSONL
with rows of a few hundred tokens, so packing fills every sequence of data.max_length (2048) tokens.

Both sides get the best settings: bf16, packing, torch.compile, fused AdamW, flash attention when flash-attn is
installed (else PyTorch's scaled dot-product attention), gradient clipping and a linear schedule. They run in one
process on the same model weights and the same batches in the same order, interleaved step by step: after each of
Ember's steps (at its train event) the plain loop runs one step, so clock changes and noise hit both alike. Each
side's step ends with a device synchronize; Ember's time per step is from the end of one plain step to the next
train event, so everything Ember does between steps (events, memory reports, data loading) counts. The first
``--warmup`` steps (compilation) are left out; step times are medians.

MFU = achieved model FLOP/s / the device's peak, with the model FLOPs per token and the peak from engine.training.mfu
(the same figures Ember reports live). Targets: MFU >= 0.45 on H100/H200-class GPUs, Ember/plain >= 0.98.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MFU_TARGET = 0.45
RATIO_TARGET = 0.98
MFU_TARGET_GPUS = ("H100", "H200", "H800", "H20", "GH200")

SIZES: dict[str, dict[str, Any]] = {
    "1b": {"config": {"hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
                      "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 32768},
           "max_length": 2048, "batch_size": 8, "steps": 40, "warmup": 12, "rows": 1800, "words": (40, 420)},
    "tiny": {"config": {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                        "num_key_value_heads": 2, "intermediate_size": 352, "vocab_size": 1024},
             "max_length": 256, "batch_size": 4, "steps": 24, "warmup": 8, "rows": 400, "words": (8, 60)},
}

WORDS = ("the model learns to answer questions about data training steps and the gradient moves each weight a "
         "little toward lower loss while the batch of tokens flows through attention and the feed forward layers "
         "a good answer is short clear and correct so the user can act on it without guessing what was meant "
         "when the run ends the weights are saved and the report shows tokens per second memory and utilization "
         "please explain translate summarize list compare describe why how what which where when who").split()


# ---------------------------------------------------------------- inputs


def make_model_folder(path: Path, size: dict[str, Any], device: str) -> Path:
    """A Llama of ``size`` with random weights (bf16 on disk) and the tiny BPE tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from engine.tasks.causal_lm import CHAT_TEMPLATE, make_tiny_model_folder

    tok_dir = make_tiny_model_folder(path.parent / "tokenizer-source")
    tok = AutoTokenizer.from_pretrained(str(tok_dir), local_files_only=True)
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(path)
    cfg = dict(size["config"])
    cfg["vocab_size"] = max(cfg["vocab_size"], len(tok))  # unused rows beyond the tokenizer, as in real models
    config = LlamaConfig(**cfg, max_position_embeddings=max(4096, size["max_length"]), tie_word_embeddings=False,
                         pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    # Initialising a billion weights is much faster on the GPU; the file is the same either way.
    with torch.device(device if device.startswith("cuda") else "cpu"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    model.save_pretrained(path)
    del model
    return path


def write_data(folder: Path, size: dict[str, Any]) -> tuple[Path, Path]:
    """Instruction rows of varied length (a few hundred tokens at 1B size), deterministic."""
    rng = random.Random(0)
    lo, hi = size["words"]

    def row() -> str:
        prompt = " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo // 4 + 1, hi // 4 + 2)))
        response = " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))
        return json.dumps({"prompt": prompt.capitalize() + "?", "response": response.capitalize() + "."})

    train, val = folder / "train.jsonl", folder / "val.jsonl"
    train.write_text("".join(row() + "\n" for _ in range(size["rows"])), encoding="utf-8")
    val.write_text("".join(row() + "\n" for _ in range(8)), encoding="utf-8")  # the one final eval stays short
    return train, val


def make_spec(model_dir: Path, train: Path, val: Path, size: dict[str, Any], device: str, compile_: bool,
              steps: int) -> Any:
    from engine.api.train_spec import TrainSpec

    cuda = device.startswith("cuda")
    flash = cuda and importlib.util.find_spec("flash_attn") is not None
    return TrainSpec.model_validate({
        "task": "causal_lm", "device": "cuda" if cuda else "cpu", "precision": "bf16", "seed": 0,
        "model": {"path": str(model_dir)}, "method": {"kind": "full"},
        "data": {"path": str(train), "val_path": str(val), "max_length": size["max_length"], "packing": True,
                 # CPU: the loader in the training process (workers would take the cores the model needs).
                 "num_workers": None if cuda else 0},
        "batch_size": size["batch_size"], "max_steps": steps, "eval_every": 10**6, "checkpoint_every": 10**6,
        "optim": {"lr": 1e-4, "schedule": "linear"},
        "speed": {"attention": "flash_attention_2" if flash else "sdpa", "compile": "on" if compile_ else "off",
                  "optimizer_impl": "fused"},
    })


# ---------------------------------------------------------------- the two loops


class SideBySide:
    """Runs Ember's Trainer; at each of its train events, one step of the plain loop (see the module doc)."""

    def __init__(self, spec: Any, device: str, run_dir: Path):
        self.spec, self.device, self.run_dir = spec, device, run_dir
        self.cuda = device.startswith("cuda")
        self.info: dict[str, Any] = {}
        self.ember_events: list[dict[str, Any]] = []
        self.ember_times: list[float] = []
        self.plain_times: list[float] = []
        self.plain_tokens: list[float] = []
        self.plain_losses: list[float] = []
        self.plain_flops_per_token: float | None = None
        self.mark = 0.0

    def sync(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()

    def run(self) -> None:
        from engine.recipes.finetune import RankContext
        from engine.trainer.loop import Trainer
        from engine.training import dist

        world = dist.World(0, 0, 1, "cuda:0" if self.cuda else "cpu", "bench")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        rc = RankContext(self.run_dir, world)
        real_emit = rc.emit

        def emit(kind: str, **data: Any) -> None:
            real_emit(kind, **data)
            if kind == "run_info":
                self.info = data
                self._build_plain()
                self.sync()
                self.mark = time.perf_counter()
            elif kind == "train":
                self.sync()
                now = time.perf_counter()
                self.ember_times.append(now - self.mark)
                self.ember_events.append(data)
                self._plain_step()
                self.mark = time.perf_counter()

        rc.emit = emit  # type: ignore[method-assign]
        rc.log = lambda message: None  # type: ignore[method-assign]
        if self.cuda:
            import torch

            torch.cuda.set_device(0)
        self.trainer = Trainer(self.spec, world, rc, self.run_dir, save_model=False, checkpoints=False)
        self.trainer.run()

    def _build_plain(self) -> None:
        """What a user would write by hand: the same model file, compiled; fused AdamW; bf16 autocast."""
        import torch
        from torch.utils.data import DataLoader

        from engine.trainer.loop import make_schedule
        from engine.training import mfu

        tr = self.trainer
        spec, task, data = tr.spec, tr.task, tr.data  # the spec with Ember's "auto" choices made concrete
        model = task.build_model(spec, data)  # the same weights from the same folder, same attention kernel
        with contextlib.suppress(Exception):  # FLOPs are counted on the model as built, before compiling
            sample = data.collate([data.train[i] for i in range(min(2, len(data.train)))])
            self.plain_flops_per_token = mfu.flop_model(model, spec.task, sample).per_token(spec.data.max_length)
        model.to(tr.world.device).train()
        params = [p for p in model.parameters() if p.requires_grad]
        self.plain_params = params
        self.plain_opt = torch.optim.AdamW(params, lr=spec.optim.lr, weight_decay=spec.optim.weight_decay,
                                           fused=True)
        self.plain_sched = make_schedule(self.plain_opt, spec, tr.steps)
        self.plain_model = torch.compile(model) if spec.speed.compile == "on" else model
        speed = self.info.get("speed") or {}
        workers = int(speed.get("num_workers") or 0)
        order = tr.order  # the same batches in the same order as Ember's loader

        class Batches:
            def __iter__(self):
                return (indices for _e, _b, indices in order.iterate(0, 0))

        loader = DataLoader(data.train, batch_sampler=Batches(), collate_fn=data.collate, num_workers=workers,
                            pin_memory=self.cuda, persistent_workers=workers > 0,
                            **({"prefetch_factor": int(speed.get("prefetch_factor") or 2)} if workers else {}))
        self.plain_batches = iter(loader)

    def _plain_step(self) -> None:
        import torch

        t0 = time.perf_counter()
        batch = {k: (v.to(self.device, non_blocking=True) if hasattr(v, "to") else v)
                 for k, v in next(self.plain_batches).items()}
        with torch.autocast("cuda" if self.cuda else "cpu", dtype=torch.bfloat16):
            loss, stats = self.trainer.task.forward(self.plain_model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.plain_params, self.spec.optim.grad_clip or float("inf"))
        self.plain_opt.step()
        self.plain_sched.step()
        self.plain_opt.zero_grad(set_to_none=True)
        self.plain_losses.append(float(loss.detach()))  # a plain loop logs its loss too
        self.sync()
        self.plain_times.append(time.perf_counter() - t0)
        self.plain_tokens.append(float(stats.get("tokens", 0.0)))


# ---------------------------------------------------------------- figures


def summarize(bench: SideBySide, warmup: int, device_name: str) -> dict[str, Any]:
    from engine.training import mfu as mfu_mod

    ev = bench.ember_events[warmup:]
    if not ev:
        raise SystemExit(f"no steps after the {warmup} warm-up steps: raise --steps")
    info = bench.info
    ember_tokens = statistics.fmean(e.get("tokens_per_s", 0.0) * e.get("step_time_s", 0.0) for e in ev)
    plain_tokens = statistics.fmean(bench.plain_tokens[warmup:])
    ember_step = statistics.median(bench.ember_times[warmup:])
    plain_step = statistics.median(bench.plain_times[warmup:])
    ember_tps, plain_tps = ember_tokens / ember_step, plain_tokens / plain_step
    peak, source = info.get("peak_tflops"), info.get("peak_source", "")
    if peak is None:  # Ember's run_info may leave the peak out; the same table, asked directly
        peak, source = mfu_mod.device_peak(bench.trainer.world.device, "bf16", bench.spec.speed.peak_tflops)
    fpt_ember = info.get("flops_per_token")
    fpt = bench.plain_flops_per_token or fpt_ember

    def mfu_of(tokens_per_s: float) -> float | None:
        return mfu_mod.mfu(tokens_per_s * fpt, peak) if fpt and peak else None

    reported = [e["mfu"] for e in ev if e.get("mfu") is not None]
    tflops = [e["tflops"] for e in ev if e.get("tflops") is not None]
    padding = [e["padding_frac"] for e in ev if e.get("padding_frac") is not None]
    ratio = ember_tps / plain_tps
    target_applies = any(g in device_name for g in MFU_TARGET_GPUS)
    ember_mfu = mfu_of(ember_tps)
    return {
        "device": device_name, "model": info.get("model"), "total_params": info.get("total_params"),
        "trainable_params": info.get("trainable_params"), "speed": info.get("speed"),
        "seq_len": bench.spec.data.max_length, "batch_size": bench.spec.batch_size,
        "steps": len(bench.ember_events), "warmup_steps": warmup,
        "flops_per_token": fpt, "flops_per_token_ember": fpt_ember, "peak_tflops": peak, "peak_source": source,
        "ember": {"tokens_per_s": ember_tps, "median_step_s": ember_step, "tokens_per_step": ember_tokens,
                  "mfu": ember_mfu, "mfu_reported_median": statistics.median(reported) if reported else None,
                  "tflops_reported_median": statistics.median(tflops) if tflops else None,
                  "padding_frac_median": statistics.median(padding) if padding else None,
                  "final_loss": bench.ember_events[-1].get("loss")},
        "plain": {"tokens_per_s": plain_tps, "median_step_s": plain_step, "tokens_per_step": plain_tokens,
                  "mfu": mfu_of(plain_tps), "final_loss": bench.plain_losses[-1] if bench.plain_losses else None},
        "ratio": ratio, "ratio_target": RATIO_TARGET, "ratio_ok": ratio >= RATIO_TARGET,
        "mfu_target": MFU_TARGET, "mfu_target_applies": target_applies,
        "mfu_ok": (ember_mfu is not None and ember_mfu >= MFU_TARGET) if target_applies else None,
    }


def report(r: dict[str, Any]) -> None:
    def pct(x: float | None) -> str:
        return f"{100 * x:.1f}%" if x is not None else "n/a"

    n = r["total_params"] or 0
    params = f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"
    print(f"{r['device']}: {params}-parameter Llama, full fine-tune, batch {r['batch_size']} x {r['seq_len']} tokens "
          f"(packed), {r['steps']} steps, first {r['warmup_steps']} left out")
    print(f"settings: {json.dumps(r['speed'])}")
    fpt = f"{r['flops_per_token'] / 1e6:,.1f} MFLOP" if r["flops_per_token"] else "n/a"
    peak = f"{r['peak_tflops']:.4g}" if r["peak_tflops"] else "n/a"
    print(f"model FLOPs per token (training) {fpt}; peak {peak} TFLOP/s ({r['peak_source']})")
    for side in ("ember", "plain"):
        s = r[side]
        print(f"{side:>5}: {s['tokens_per_s']:,.0f} tokens/s, median step {1000 * s['median_step_s']:.1f} ms, "
              f"MFU {pct(s['mfu'])}, final loss {s['final_loss']:.4f}")
    e = r["ember"]
    print(f"ember's own events: MFU {pct(e['mfu_reported_median'])}, "
          f"{e['tflops_reported_median'] or 0:.4g} TFLOP/s, padding {pct(e['padding_frac_median'])}")
    print(f"ratio ember/plain {r['ratio']:.3f} ({'meets' if r['ratio_ok'] else 'MISSES'} the {RATIO_TARGET} target)")
    if r["mfu_target_applies"]:
        print(f"MFU {pct(e['mfu'])} ({'meets' if r['mfu_ok'] else 'MISSES'} the {pct(MFU_TARGET)} target "
              "for H100/H200-class GPUs)")
    else:
        print(f"MFU target ({pct(MFU_TARGET)}) applies to H100/H200-class GPUs only")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="1b")
    ap.add_argument("--device", choices=["cuda", "cpu"], default=None, help="default: cuda when available")
    ap.add_argument("--steps", type=int, help="Ember steps (each followed by a plain step); default per size")
    ap.add_argument("--warmup", type=int, help="steps left out (compilation); default per size")
    ap.add_argument("--compile", choices=["on", "off"], help="torch.compile on both sides; default: on for CUDA, "
                    "off on CPU (compiling takes minutes there, more than the short run it would speed up)")
    ap.add_argument("--json", type=Path, help="write every figure here")
    args = ap.parse_args()
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: this machine has no usable CUDA GPU; use --device cpu --size tiny")
    size = SIZES[args.size]
    steps, warmup = args.steps or size["steps"], args.warmup if args.warmup is not None else size["warmup"]
    work = Path(tempfile.mkdtemp(prefix="ember-mfu-"))
    os.environ.setdefault("EMBER_HOME", str(work / "home"))
    t0 = time.perf_counter()
    model_dir = make_model_folder(work / "model", size, device)
    train, val = write_data(work, size)
    compile_ = (args.compile or ("on" if device == "cuda" else "off")) == "on"
    spec = make_spec(model_dir, train, val, size, device, compile_, steps)
    prepared = time.perf_counter() - t0
    bench = SideBySide(spec, device, work / "run")
    bench.run()
    name = torch.cuda.get_device_name(0) if device == "cuda" else f"CPU ({os.cpu_count()} cores)"
    result = summarize(bench, warmup, name)
    result.update(size=args.size, prepare_s=prepared, total_s=time.perf_counter() - t0)
    report(result)
    print(f"took {result['total_s']:.0f} s ({prepared:.0f} s to write the model and data)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
