"""Latency of the built-in MiniLM text classifier: torch eager vs ONNX Runtime fp32, fused fp32 and int8.

    python benchmarks/export_bench.py [--repeats 50] [--warmup 5] [--threads 0] [--max-length 128] [--json PATH]

Builds MiniLM (all-MiniLM-L6-v2) with the support-tickets head (untrained: latency and
parity do not depend on what the head learned), exports it to ONNX fp32 with
engine.export.onnx.export_onnx (what the export job writes: torch.export-based exporter,
opset 18, dynamic batch and sequence), the graph ONNX Runtime's transformer optimizer
makes of it (engine.compress.graph_opt.export_fused: exported with eager attention, then
fused attention, BiasGelu, EmbedLayerNorm; what the ORT package ships), makes a dynamic int8 copy of the fused graph (per channel) with
engine.compress.quantize.quantize_dynamic, and times the four at batch 1 and batch 8 on real validation examples (dynamic padding, as the
task's collate does; --max-length only truncates).

Timing is engine/evaluate's: TorchRunner (torch.inference_mode) and OrtRunner (ORT's
thread spinning off), the same thread count for all four (--threads, 0 = every core
this process may use), each warmed up and then called round robin with the order
rotating every round (engine.evaluate.latency.measure), so a busy machine slows all
four alike. The process runs with OMP_WAIT_POLICY=PASSIVE, as compression jobs do.

Prints per runtime and batch: p50, p90 and mean latency (ms), throughput (examples/s
at p50) and the p50 ratio against torch eager (the anchor). Target: ONNX Runtime fp32
no slower than eager at both batches (ratio <= 1.0), MET/MISSED per batch. Also the
largest fp32-vs-eager logit difference and the top-1 agreement of int8 with fp32 on
the examples of both batches. Misses are printed, not hidden: the exit status is 0
whatever the figures, 2 when a step refuses its input (JobFailed), 1 on a crash.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TASK = "text_classification"
BATCHES = (1, 8)
ANCHOR = "torch eager"
TARGET_RUNTIME = "onnxruntime fp32"
TARGET_RATIO = 1.0  # ONNX Runtime fp32 p50 / torch eager p50, at each batch size
FUSED = "onnxruntime fp32 fused"


class Timed:
    """A runner that keeps the wall time of each of its calls (for p90, which measure() does not report).

    measure() decides the schedule (warm-up, then rotating round robin); the first ``warmup``
    calls recorded here are its warm-up calls and are dropped.
    """

    def __init__(self, runner, label: str):
        self.runner = runner
        self.label = label
        self.times_ms: list[float] = []

    def run(self, batch):
        t0 = time.perf_counter()
        out = self.runner.run(batch)
        self.times_ms.append((time.perf_counter() - t0) * 1000.0)
        return out


def stats(times_ms: list[float], batch: int) -> dict:
    import numpy as np

    arr = np.asarray(times_ms)
    p50 = float(np.percentile(arr, 50))
    return {"batch": batch, "p50": p50, "p90": float(np.percentile(arr, 90)), "p95": float(np.percentile(arr, 95)),
            "mean": float(arr.mean()), "min": float(arr.min()), "repeats": len(times_ms),
            "throughput_per_s": batch / (p50 / 1000.0)}


def build(max_length: int):
    """The built-in MiniLM classifier (fp32, CPU, eval) and its validation data."""
    import torch

    from engine.api.train_spec import TrainSpec
    from engine.tasks import get_task

    spec = TrainSpec.model_validate({"task": TASK, "method": {"kind": "full"}, "data": {"max_length": max_length},
                                     "device": "cpu"})
    task = get_task(spec.task)
    data = task.load_data(spec)
    torch.manual_seed(0)  # the new head's initial weights: the same model every run
    model = task.build_model(spec, data).eval()
    return model, data


def print_table(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(x.ljust(w) for x, w in zip(r, widths, strict=True)).rstrip())


def run(args) -> dict:
    import numpy as np
    import onnxruntime as ort
    import torch

    from engine.compress.graph_opt import export_fused
    from engine.compress.quantize import quantize_dynamic
    from engine.evaluate import latency
    from engine.evaluate.runners import OrtRunner, TorchRunner, resolve_threads
    from engine.export.onnx import export_onnx

    threads = resolve_threads(args.threads)
    t0 = time.monotonic()
    model, data = build(args.max_length)
    need = sum(BATCHES)
    if len(data.val) < need:
        raise SystemExit(f"the validation split has {len(data.val)} examples; this benchmark needs {need}")
    # Distinct real examples per batch size: val[0] for batch 1, val[1..8] for batch 8.
    batches, start = {}, 0
    for b in BATCHES:
        batches[b] = data.collate([data.val[i] for i in range(start, start + b)])
        start += b
    built_s = time.monotonic() - t0

    with tempfile.TemporaryDirectory(prefix="ember-export-bench-") as tmp:
        fp32_path, int8_path = Path(tmp) / "model.onnx", Path(tmp) / "model.int8.onnx"
        t1 = time.monotonic()
        exported = export_onnx(model, TASK, batches[max(BATCHES)], fp32_path)
        export_s = time.monotonic() - t1
        t1 = time.monotonic()
        fused_path = Path(tmp) / "model.fused.onnx"
        graph = export_fused(model, TASK, batches[max(BATCHES)], fused_path)
        if not graph["path"]:
            raise SystemExit(f"the transformer optimizer did not apply: {graph['skipped']}")
        fuse_s = time.monotonic() - t1
        t1 = time.monotonic()
        quant = quantize_dynamic(fused_path, int8_path, per_channel=True)  # as compress.quantize's default
        quant_s = time.monotonic() - t1

        runners = [Timed(TorchRunner(model, TASK, threads, label=ANCHOR), ANCHOR),
                   Timed(OrtRunner(fp32_path, TASK, threads, label=TARGET_RUNTIME), TARGET_RUNTIME),
                   Timed(OrtRunner(fused_path, TASK, threads, label=FUSED), FUSED),
                   Timed(OrtRunner(int8_path, TASK, threads, label="onnxruntime int8"), "onnxruntime int8")]

        # Parity on the very batches that are timed (untimed calls).
        logits = {r.label: np.concatenate([r.runner.run(batches[b]) for b in BATCHES]) for r in runners}
        top1 = {k: v.argmax(-1) for k, v in logits.items()}
        parity = {
            "examples": int(len(top1[ANCHOR])),
            "fp32_vs_eager_max_abs_diff": float(np.abs(logits[TARGET_RUNTIME] - logits[ANCHOR]).max()),
            "fp32_vs_eager_top1_agreement": float((top1[TARGET_RUNTIME] == top1[ANCHOR]).mean()),
            "fused_vs_fp32_max_abs_diff": float(np.abs(logits[FUSED] - logits[TARGET_RUNTIME]).max()),
            "int8_vs_fp32_max_abs_diff": float(np.abs(logits["onnxruntime int8"] - logits[TARGET_RUNTIME]).max()),
            "int8_vs_fp32_top1_agreement": float((top1["onnxruntime int8"] == top1[TARGET_RUNTIME]).mean()),
        }

        results: dict[str, dict[str, dict]] = {r.label: {} for r in runners}
        t1 = time.monotonic()
        for b in BATCHES:
            for r in runners:
                r.times_ms.clear()
            latency.measure(runners, batches[b], warmup=args.warmup, repeats=args.repeats)
            for r in runners:
                results[r.label][f"b{b}"] = stats(r.times_ms[max(0, args.warmup):], b)
        timed_s = time.monotonic() - t1

    for per_batch in results.values():
        for key, figs in per_batch.items():
            figs["ratio_vs_eager"] = figs["p50"] / results[ANCHOR][key]["p50"]
    targets = {}
    for b in BATCHES:
        ratio = results[TARGET_RUNTIME][f"b{b}"]["ratio_vs_eager"]
        targets[f"b{b}"] = {"ratio": ratio, "max_ratio": TARGET_RATIO, "met": bool(ratio <= TARGET_RATIO)}

    return {
        "version": 1,
        "model": "minilm (all-MiniLM-L6-v2), untrained support-tickets head",
        "settings": {"threads": threads, "warmup": args.warmup, "repeats": args.repeats,
                     "max_length": args.max_length, "batch_sizes": list(BATCHES),
                     "seq_len": {f"b{b}": int(batches[b]["input_ids"].shape[1]) for b in BATCHES},
                     "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
                     "torch": torch.__version__, "onnxruntime": ort.__version__,
                     "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "graph": {"fused": graph["fused"], "nodes_before": graph["nodes_before"], "nodes_after": graph["nodes_after"]},
        "files": {"fp32_bytes": exported["bytes"], "int8_bytes": quant["bytes_after"], "opset": exported["opset"],
                  "exporter": exported.get("exporter"), "export_max_abs_diff": exported.get("max_abs_diff")},
        "seconds": {"build": built_s, "export": export_s, "fuse": fuse_s, "quantize": quant_s, "timing": timed_s},
        "latency_ms": results,
        "parity": parity,
        "target": {"runtime": TARGET_RUNTIME, "anchor": ANCHOR, "per_batch": targets},
    }


def report(doc: dict) -> None:
    s, f, p = doc["settings"], doc["files"], doc["parity"]
    seq = ", ".join(f"batch {k[1:]}: {v} tokens" for k, v in s["seq_len"].items())
    print(f"{doc['model']}; {s['threads']} threads (of {s['cores']} cores), {s['warmup']} warm-up + "
          f"{s['repeats']} timed runs per batch, runtimes interleaved; torch {s['torch']}, onnxruntime "
          f"{s['onnxruntime']}; padded length {seq}")
    g = doc["graph"]
    print(f"ONNX fp32 {f['fp32_bytes'] / 1e6:.1f} MB (opset {f['opset']}, {f['exporter']} exporter), "
          f"int8 dynamic (per channel, of the fused graph) {f['int8_bytes'] / 1e6:.1f} MB")
    print(f"transformer optimizer: {g['nodes_before']} -> {g['nodes_after']} nodes; "
          + ", ".join(f"{n} {op}" for op, n in g["fused"].items()))
    print()
    rows = [["runtime", "batch", "p50 ms", "p90 ms", "mean ms", "examples/s", "vs eager"]]
    for label, per_batch in doc["latency_ms"].items():
        for figs in per_batch.values():
            rows.append([label, str(figs["batch"]), f"{figs['p50']:.2f}", f"{figs['p90']:.2f}", f"{figs['mean']:.2f}",
                         f"{figs['throughput_per_s']:.1f}", f"{figs['ratio_vs_eager']:.2f}x"])
    print_table(rows)
    print()
    print("vs eager: p50 / torch eager's p50 at the same batch; examples/s: batch / p50.")
    print(f"Target: {doc['target']['runtime']} no slower than {doc['target']['anchor']} (ratio <= {TARGET_RATIO:.1f})")
    for key, t in doc["target"]["per_batch"].items():
        print(f"  batch {key[1:]}: {t['ratio']:.2f}x  {'MET' if t['met'] else 'MISSED'}")
    print(f"Parity on the {p['examples']} timed examples: fp32 vs eager max |diff| {p['fp32_vs_eager_max_abs_diff']:.2e}"
          f" (top-1 agreement {p['fp32_vs_eager_top1_agreement']:.3f}); fused vs fp32 max |diff| "
          f"{p['fused_vs_fp32_max_abs_diff']:.2e}; int8 vs fp32 top-1 agreement "
          f"{p['int8_vs_fp32_top1_agreement']:.3f} (max |diff| {p['int8_vs_fp32_max_abs_diff']:.3f})")
    sec = doc["seconds"]
    print(f"build {sec['build']:.1f} s, export {sec['export']:.1f} s, fuse {sec['fuse']:.1f} s, "
          f"quantize {sec['quantize']:.1f} s, "
          f"timing {sec['timing']:.1f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=50, help="timed calls per runtime and batch size")
    ap.add_argument("--warmup", type=int, default=5, help="untimed calls per runtime before each batch size")
    ap.add_argument("--threads", type=int, default=0, help="threads for every runtime (0 = every usable core)")
    ap.add_argument("--max-length", type=int, default=128, help="tokenizer truncation length")
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    args = ap.parse_args()
    if args.repeats < 1 or args.warmup < 0 or args.threads < 0 or args.max_length < 8:
        ap.error("--repeats must be >= 1, --warmup and --threads >= 0, --max-length >= 8")

    # Before torch is imported: OpenMP threads that spin between calls distort interleaved timing.
    from engine.launch.local import EVAL_ENV

    for key, value in EVAL_ENV.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    from engine.training.context import JobFailed

    try:
        doc = run(args)
    except JobFailed as exc:
        print(f"failed: {exc}", file=sys.stderr)
        hint = getattr(exc, "hint", "")
        if hint:
            print(f"hint: {hint}", file=sys.stderr)
        return 2
    report(doc)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
