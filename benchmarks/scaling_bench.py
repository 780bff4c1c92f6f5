"""Samples/s of the fine-tune recipe on 1, 2, ... processes with DDP, FSDP2, ZeRO-2 and ZeRO-3; scaling efficiency.

    python benchmarks/scaling_bench.py                  (CPU: 1 and 2 processes; a few minutes)
    python benchmarks/scaling_bench.py --device cuda    (1, 2, 4, ... up to every GPU; --nproc caps it)
    python benchmarks/scaling_bench.py --json scaling.json --strategies ddp fsdp

Every figure comes from a real run of the recipe as users start it: torchrun with
``python -m engine.recipes.finetune --config spec.yaml --run-dir DIR``, one run per strategy and process count.
The model is a small Llama trained in full (so FSDP and ZeRO have parameters, gradients and optimizer state to
shard): the built-in tiny-llama on CPU, a 25M-parameter one (``--model small``) by default on GPU; data is the
built-in tiny-instructions. samples/s is read from the run's train events (all processes together), the median over
the steps after ``--warmup``. Scaling efficiency = samples/s(n) / (n x samples/s(1)), with samples/s(1) the same
strategy on one process. On CPU each process gets one thread (OMP_NUM_THREADS=1), so n processes use n cores; a
machine with fewer free cores than processes shows it as lost efficiency. torch.compile is off: compile time
would swamp the short runs, and it is not what this measures.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STRATEGIES = {
    "ddp": {"strategy": "ddp"},
    "fsdp": {"strategy": "fsdp"},
    "zero2": {"strategy": "deepspeed", "zero_stage": 2},
    "zero3": {"strategy": "deepspeed", "zero_stage": 3},
}
SMALL = {"hidden_size": 512, "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 8,
         "intermediate_size": 1408}


def process_counts(most: int) -> list[int]:
    """1, 2, 4, ... and ``most`` itself."""
    counts, n = [], 1
    while n < most:
        counts.append(n)
        n *= 2
    return counts + [most]


def small_model(folder: Path) -> Path:
    """The tiny-llama tokenizer with a wider, deeper Llama (random weights)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from engine.tasks.causal_lm import make_tiny_model_folder

    make_tiny_model_folder(folder)  # tokenizer files (and a tiny model, replaced below)
    tiny = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config = LlamaConfig(**SMALL, vocab_size=tiny["vocab_size"], max_position_embeddings=2048,
                         tie_word_embeddings=True, pad_token_id=tiny["pad_token_id"],
                         bos_token_id=tiny["bos_token_id"], eos_token_id=tiny["eos_token_id"])
    torch.manual_seed(0)
    for stale in folder.glob("*.safetensors"):
        stale.unlink()
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def make_spec(args: argparse.Namespace, model_dir: Path | None, strategy: str, nproc: int) -> dict[str, Any]:
    cuda = args.device == "cuda"
    return {
        "task": "causal_lm", "device": args.device, "method": {"kind": "full"},
        "model": {"path": str(model_dir)} if model_dir else {"builtin": "tiny-llama"},
        "data": {"max_length": args.max_length, "num_workers": None if cuda else 0},
        "distributed": {**STRATEGIES[strategy], "nproc": nproc},
        "batch_size": args.batch_size, "max_steps": args.steps, "eval_every": 10**6, "checkpoint_every": 10**6,
        "optim": {"lr": 1e-3}, "seed": 0, "speed": {"compile": "off"},
    }


def run_once(args: argparse.Namespace, work: Path, model_dir: Path | None, strategy: str, nproc: int,
             env: dict[str, str]) -> dict[str, Any]:
    import yaml

    run_dir = work / f"{strategy}-{nproc}"
    run_dir.mkdir(parents=True)
    spec_file = work / f"{strategy}-{nproc}.yaml"
    spec_file.write_text(yaml.safe_dump(make_spec(args, model_dir, strategy, nproc)), encoding="utf-8")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "-m", "engine.recipes.finetune", "--config", str(spec_file), "--run-dir", str(run_dir)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=args.run_timeout)
        code, tail = proc.returncode, (proc.stdout + proc.stderr)[-1500:]
    except subprocess.TimeoutExpired as exc:
        code, tail = None, f"timed out after {args.run_timeout} s: {str(exc.stderr or '')[-1000:]}"
    wall = time.perf_counter() - t0
    events = []
    if (run_dir / "events.jsonl").exists():
        for line in (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    kind = lambda e: e.get("kind") or e.get("type")  # noqa: E731
    train = [e.get("data", e) for e in events if kind(e) == "train"]
    errors = [e.get("data", e).get("message", "") for e in events if kind(e) == "error"]
    row: dict[str, Any] = {"strategy": strategy, "nproc": nproc, "wall_s": wall, "returncode": code,
                           "steps": len(train)}
    measured = [e["samples_per_s"] for e in train if e.get("step", 0) > args.warmup and "samples_per_s" in e]
    if code != 0 or not measured:
        row["error"] = (errors[0] if errors else tail.strip().splitlines()[-1] if tail.strip() else "no train events")
        return row
    row["samples_per_s"] = statistics.median(measured)
    row["step_time_s"] = statistics.median(e["step_time_s"] for e in train if e.get("step", 0) > args.warmup)
    return row


def add_efficiency(rows: list[dict[str, Any]]) -> None:
    """samples/s(n) / (n x samples/s(1)) of the same strategy; where that strategy's one-process run failed,
    against DDP on one process (one process is plain training whatever the strategy), and the row says so."""
    ones = {r["strategy"]: r["samples_per_s"] for r in rows if r["nproc"] == 1 and r.get("samples_per_s")}
    for row in rows:
        base = ones.get(row["strategy"])
        if base is None and "ddp" in ones:
            base, row["baseline"] = ones["ddp"], "ddp x1"
        if row.get("samples_per_s") and base:
            row["efficiency"] = row["samples_per_s"] / (row["nproc"] * base)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--nproc", type=int, help="most processes (default: 2 on CPU, every GPU on CUDA)")
    ap.add_argument("--strategies", nargs="+", choices=sorted(STRATEGIES), default=list(STRATEGIES))
    ap.add_argument("--model", choices=["tiny-llama", "small"], help="default: tiny-llama on CPU, small on CUDA")
    ap.add_argument("--batch-size", type=int, default=8, help="per process")
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=8, help="steps left out of the median")
    ap.add_argument("--run-timeout", type=int, default=300, help="seconds one run may take")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: this machine has no usable CUDA GPU; use --device cpu")
    most = args.nproc or (torch.cuda.device_count() if args.device == "cuda" else 2)
    model = args.model or ("small" if args.device == "cuda" else "tiny-llama")
    work = Path(tempfile.mkdtemp(prefix="ember-scaling-"))
    env = {**os.environ, "EMBER_HOME": str(work / "home"), "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])])}
    if args.device == "cpu":
        env["OMP_NUM_THREADS"] = "1"
    os.environ["EMBER_HOME"] = env["EMBER_HOME"]
    if model == "small":
        model_dir: Path | None = small_model(work / "small-llama")
    else:
        from engine.tasks.causal_lm import ensure_tiny_llama

        ensure_tiny_llama()  # written once, before the runs, so no run pays for it
        model_dir = None
    counts = process_counts(most)
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for strategy in args.strategies:
        if strategy.startswith("zero") and importlib.util.find_spec("deepspeed") is None:
            print(f"{strategy}: skipped, DeepSpeed is not installed (pip install deepspeed)")
            rows += [{"strategy": strategy, "nproc": n, "skipped": "deepspeed is not installed"} for n in counts]
            continue
        for n in counts:
            row = run_once(args, work, model_dir, strategy, n, env)
            rows.append(row)
            print(f"  {strategy} x{n}: " + (f"{row['samples_per_s']:.1f} samples/s" if "samples_per_s" in row
                                            else f"failed: {row['error']}") + f" ({row['wall_s']:.0f} s)", flush=True)
    add_efficiency(rows)
    where = torch.cuda.get_device_name(0) if args.device == "cuda" else f"CPU ({os.cpu_count()} cores)"
    print(f"\n{where}: {model}, full fine-tune, batch {args.batch_size} per process x {args.max_length} tokens, "
          f"{args.steps} steps, median after step {args.warmup}")
    print(f"{'strategy':<9}{'nproc':>6}{'samples/s':>12}{'efficiency':>12}")
    for row in rows:
        sps = f"{row['samples_per_s']:.1f}" if "samples_per_s" in row else "skipped" if "skipped" in row else "failed"
        eff = f"{row['efficiency']:.2f}" if "efficiency" in row else "-"
        note = f"  (vs {row['baseline']})" if "baseline" in row else f"  {row['error'][:70]}" if "error" in row else ""
        print(f"{row['strategy']:<9}{row['nproc']:>6}{sps:>12}{eff:>12}{note}")
    total = time.perf_counter() - t0
    print(f"took {total:.0f} s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "device": where, "model": model, "batch_size_per_process": args.batch_size, "max_length": args.max_length,
            "steps": args.steps, "warmup": args.warmup, "total_s": total, "rows": rows}, indent=1), encoding="utf-8")
    if any("error" in r for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
