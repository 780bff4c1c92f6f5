"""Every parallel layout side by side in one run: samples/s, peak memory per rank and the pipeline's bubble.

    python benchmarks/parallel_bench.py                      (CPU, 2 processes: about 4 minutes)
    python benchmarks/parallel_bench.py --device cuda        (every layout that fits the GPUs at hand)
    python benchmarks/parallel_bench.py --json parallel.json --layouts single tp2 pp2-1f1b

Each layout is a real run of the recipe (torchrun, ``python -m engine.recipes.finetune``) on the same model and
data (a 25M-parameter Llama, 8 layers, from benchmarks/scaling_bench.py's ``small_model``; rows long enough to
be cut at ``--max-length``, so every layout computes full-width batches: a pipeline pads every batch to that
width, the others to their longest row), the same global batch (``--batch-size`` per data-parallel replica) and the same steps.
samples/s is the median over the steps after ``--warmup``; peak memory is each rank's own (CUDA: the allocator's
peak; CPU: the process's peak RSS, torch's runtime included). The ratio column is samples/s against the
one-process run measured in the same invocation.

Beside each measured peak, the fit estimate's peak per rank for the same spec on this machine (estimate.fit,
with the model's facts measured on the meta device), and its error.

The bubble: in theory a pipeline of p stages and m micro-batches idles (p-1)/(m+p-1) of each step, (p-1)/(2m+p-1)
interleaved. Measured here as 1 - (one process's step time / p) / (the pipeline's step time): the share of the
step the stages are not doing a p-th of the one-process work. That also counts the stages' communication and
any imbalance, so it is an upper bound of the bubble itself.
"""

from __future__ import annotations

import argparse
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
sys.path.insert(0, str(ROOT / "benchmarks"))

# name: (processes, distributed spec)
LAYOUTS: dict[str, tuple[int, dict[str, Any]]] = {
    "single": (1, {}),
    "ddp2": (2, {"strategy": "ddp"}),
    "fsdp2": (2, {"strategy": "fsdp"}),
    "tp2": (2, {"tensor_parallel": 2}),
    "pp2-gpipe": (2, {"pipeline_parallel": 2, "pipeline_schedule": "gpipe"}),
    "pp2-1f1b": (2, {"pipeline_parallel": 2, "pipeline_schedule": "1f1b"}),
    "pp2-interleaved": (2, {"pipeline_parallel": 2, "pipeline_schedule": "interleaved_1f1b"}),
    "fsdp2xtp2": (4, {"strategy": "fsdp", "tensor_parallel": 2}),
}


def long_rows(path: Path, rows: int = 256) -> Path:
    """Prompt/response rows past any --max-length here: every batch is exactly that wide."""
    import random

    rng = random.Random(0)
    words = "the a model layer stage batch token weight grad step data run loss rank mesh split".split()
    with path.open("w", encoding="utf-8") as f:
        for _ in range(rows):
            prompt = " ".join(rng.choice(words) for _ in range(12))
            response = " ".join(rng.choice(words) for _ in range(400))
            f.write(json.dumps({"prompt": prompt, "response": response}) + "\n")
    return path


def make_spec(args: argparse.Namespace, model_dir: Path, nproc: int, layout: dict[str, Any]) -> dict[str, Any]:
    replicas = nproc // (layout.get("tensor_parallel", 1) * layout.get("pipeline_parallel", 1))
    return {
        "task": "causal_lm", "device": args.device, "method": {"kind": "full"}, "model": {"path": str(model_dir)},
        "data": {"path": str(args.data), "max_length": args.max_length, "num_workers": 0},
        "distributed": {"strategy": "fsdp" if nproc > 1 else "single", "nproc": nproc, **layout,
                        "pipeline_microbatches": args.microbatches},
        # The same global batch for every layout: batch_size is per replica.
        "batch_size": args.batch_size // replicas,
        "max_steps": args.steps, "eval_every": 10**6, "checkpoint_every": 10**6, "memory_every": 1,
        "optim": {"lr": 1e-3}, "seed": 0, "speed": {"compile": "off"}, "generate_eval": {"prompts": 0},
    }


def add_estimates(args: argparse.Namespace, work: Path, model_dir: Path, rows: list[dict[str, Any]]) -> None:
    """The fit estimate's largest per-rank peak for each layout, and its error against the largest measured."""
    from engine.api.train_spec import TrainSpec
    from engine.estimate import machine
    from engine.estimate.facts import model_facts
    from engine.estimate.memory import estimate

    specs = {r["layout"]: TrainSpec.model_validate(make_spec(args, model_dir, *LAYOUTS[r["layout"]]))
             for r in rows if "peak_bytes" in r}
    if not specs:
        return
    facts = model_facts(next(iter(specs.values())))
    here = machine.info(work)
    for row in rows:
        spec = specs.get(row["layout"])
        if spec is None:
            continue
        reply = estimate(spec, facts, here)
        est = max(d["total"] for d in reply["devices"] if d["rank"] is not None)
        row["estimate_bytes"] = est
        row["estimate_error"] = est / max(row["peak_bytes"]) - 1


def run_layout(args: argparse.Namespace, work: Path, model_dir: Path, name: str, env: dict[str, str]) -> dict:
    import yaml

    nproc, layout = LAYOUTS[name]
    run_dir = work / name
    spec_file = work / f"{name}.yaml"
    spec_file.write_text(yaml.safe_dump(make_spec(args, model_dir, nproc, layout)), encoding="utf-8")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "-m", "engine.recipes.finetune", "--config", str(spec_file), "--run-dir", str(run_dir)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=args.run_timeout)
    row: dict[str, Any] = {"layout": name, "nproc": nproc, "wall_s": time.perf_counter() - t0}
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()] \
        if (run_dir / "events.jsonl").exists() else []
    train = [e for e in events if e["kind"] == "train" and e["step"] > args.warmup]
    errors = [e["message"] for e in events if e["kind"] == "error"]
    if proc.returncode != 0 or not train:
        row["error"] = errors[0] if errors else (proc.stderr.strip().splitlines() or ["no train events"])[-1]
        return row
    row["samples_per_s"] = statistics.median(e["samples_per_s"] for e in train)
    row["step_time_s"] = statistics.median(e["step_time_s"] for e in train)
    peaks: dict[int, int] = {}
    for e in events:
        if e["kind"] == "memory":
            for r in e["ranks"]:
                peaks[r["rank"]] = max(peaks.get(r["rank"], 0), int(r.get("peak") or 0))
    row["peak_bytes"] = [peaks[r] for r in sorted(peaks)]
    info = next((e for e in events if e["kind"] == "run_info"), {})
    if info.get("pipeline"):
        row["bubble_theory"] = info["pipeline"]["bubble"]
        row["stages"] = info["pipeline"]["stages"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--layouts", nargs="+", choices=list(LAYOUTS), default=list(LAYOUTS))
    ap.add_argument("--batch-size", type=int, default=8, help="the global batch, split over the replicas")
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--steps", type=int, default=14)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--run-timeout", type=int, default=600)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import torch
    from scaling_bench import small_model

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: this machine has no usable CUDA GPU; use --device cpu")
    work = Path(tempfile.mkdtemp(prefix="ember-parallel-"))
    env = {**os.environ, "EMBER_HOME": str(work / "home"), "PYTHONPATH": str(ROOT)}
    if args.device == "cpu":
        env["OMP_NUM_THREADS"] = "1"  # n processes use n cores
    os.environ["EMBER_HOME"] = env["EMBER_HOME"]
    model_dir = small_model(work / "small-llama")
    args.data = long_rows(work / "long-rows.jsonl")
    gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for name in args.layouts:
        if args.device == "cuda" and LAYOUTS[name][0] > gpus:
            rows.append({"layout": name, "nproc": LAYOUTS[name][0], "skipped": f"needs {LAYOUTS[name][0]} GPUs"})
            continue
        row = run_layout(args, work, model_dir, name, env)
        rows.append(row)
        print(f"  {name}: " + (f"{row['samples_per_s']:.2f} samples/s" if "samples_per_s" in row
                               else f"failed: {row['error']}") + f" ({row['wall_s']:.0f} s)", flush=True)
    add_estimates(args, work, model_dir, rows)
    one = next((r for r in rows if r["layout"] == "single" and "samples_per_s" in r), None)
    cores = os.cpu_count() or 1
    where = torch.cuda.get_device_name(0) if args.device == "cuda" else f"CPU ({cores} cores, one thread a process)"
    print(f"\n{where}: 25M Llama (8 layers), full fine-tune, global batch {args.batch_size} x {args.max_length} "
          f"tokens, {args.steps} steps, median after step {args.warmup}")
    print(f"{'layout':<17}{'procs':>6}{'samples/s':>11}{'ratio':>7}{'peak/rank (MiB)':>24}{'estimate':>10}"
          f"{'error':>8}{'bubble theory':>15}{'measured':>10}")
    for row in rows:
        if "samples_per_s" not in row:
            print(f"{row['layout']:<17}{row['nproc']:>6}  {row.get('skipped') or 'failed: ' + row['error'][:60]}")
            continue
        ratio = f"{row['samples_per_s'] / one['samples_per_s']:.2f}" if one else "-"
        peaks = "/".join(f"{b / 2**20:.0f}" for b in row["peak_bytes"])
        theory = measured = ""
        if "bubble_theory" in row and one:
            pp = len(row["stages"]) // (2 if row["layout"].endswith("interleaved") else 1)
            row["bubble_measured"] = 1 - (one["step_time_s"] / pp) / row["step_time_s"]
            theory, measured = f"{row['bubble_theory']:.0%}", f"{row['bubble_measured']:.0%}"
        est = f"{row['estimate_bytes'] / 2**20:.0f}" if row.get("estimate_bytes") else "-"
        err = f"{row['estimate_error']:+.0%}" if "estimate_error" in row else "-"
        print(f"{row['layout']:<17}{row['nproc']:>6}{row['samples_per_s']:>11.2f}{ratio:>7}{peaks:>24}{est:>10}"
              f"{err:>8}{theory:>15}{measured:>10}")
    if args.device == "cpu" and any(r["nproc"] > cores for r in rows):
        print(f"(rows with more processes than the {cores} cores share them: their speed is not the layout's)")
    total = time.perf_counter() - t0
    print(f"took {total:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"device": where, "rows": rows, "total_s": total}, indent=1))
    if any("error" in r for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
