"""A variant evaluated side by side with its parent: the ``evaluation.json`` of docs/compression.md.

Both models see the same held-out examples (the first ``samples`` of ``data.val``),
the same latency batches (real validation examples padded as the task's collate
does), the same thread count and the same runtime; their latencies are measured
interleaved (engine/evaluate/latency.py) so the ratio is fair on a busy machine.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.evaluate import latency, metrics, peak_memory
from engine.evaluate.facts import file_bytes
from engine.evaluate.runners import resolve_threads
from engine.training.context import JobFailed

VERSION = 1
FILE_NAME = "evaluation.json"
# Runtime names the job spec may use for what the runners call themselves ("" and "auto": whatever they use).
_RUNTIME_ALIASES = {"torch": "torch-eager", "auto": ""}


@dataclass
class Candidate:
    """One side of the comparison: a runner plus the facts that do not come from running it."""

    job_id: str
    label: str
    runner: Any  # TorchRunner or OrtRunner
    size_path: str | os.PathLike | None = None  # the model file (or folder) whose bytes are its size
    params: int | None = None
    macs: int | None = None  # per example (engine.evaluate.facts.torch_facts)
    memory_file: str | os.PathLike | None = None  # .onnx or .pt (memory.save_module) for peak memory; None skips it


@dataclass
class EvalSettings:
    samples: int = 200  # held-out examples scored; 0 = all of data.val
    batch_size: int = 16  # N, the second latency batch
    warmup: int = 5
    repeats: int = 30
    threads: int = 0  # 0 = every core this process may use
    runtime: str = ""  # "" or "auto" = whatever both runners use (they must agree); "torch" = "torch-eager"


def _batches(data: Any, n: int, size: int) -> list[dict[str, Any]]:
    return [data.collate([data.val[j] for j in range(i, min(i + size, n))]) for i in range(0, n, size)]


def _latency_batch(data: Any, size: int) -> dict[str, Any]:
    """The first ``size`` validation examples (repeated if there are fewer), without labels."""
    batch = data.collate([data.val[i % len(data.val)] for i in range(size)])
    return {k: v for k, v in batch.items() if k != "labels"}


def _score(runner: Any, task_name: str, batches: list[dict[str, Any]], label_names: list[str]) -> tuple[dict, Any]:
    """(metrics, top-1 predictions) of one runner on the scoring batches."""
    import numpy as np

    if task_name == "causal_lm":
        loss_sum, tokens, preds = 0.0, 0, []
        for batch in batches:
            logits = runner.run(batch)
            s, t = metrics.lm_sums(logits, batch["input_ids"], batch["attention_mask"])
            loss_sum, tokens = loss_sum + s, tokens + t
            preds.append(metrics.lm_predictions(logits, batch["attention_mask"]))
        return metrics.language_model(loss_sum, tokens), np.concatenate(preds)
    logits = np.concatenate([runner.run(b) for b in batches])
    labels = np.concatenate([np.asarray(b["labels"]) for b in batches])
    return metrics.classification(logits, labels, label_names), logits.argmax(axis=1)


def _finite(value: Any) -> Any:
    """JSON without NaN/Infinity (which strict readers reject): non-finite numbers become null."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def evaluate_pair(parent: Candidate, variant: Candidate, data: Any, task_name: str, settings: EvalSettings,
                  log: Callable[[str], None] = print) -> dict[str, Any]:
    """Score, time and measure both candidates; the ``evaluation.json`` document (see the module doc)."""
    threads = resolve_threads(settings.threads)
    runtimes = {parent.runner.runtime, variant.runner.runtime}
    if len(runtimes) != 1:
        raise JobFailed(f"the parent runs in {parent.runner.runtime} and the variant in {variant.runner.runtime}",
                        "compare them in one runtime: export the parent to ONNX (engine.compress.onnx_export) "
                        "to compare it with an ONNX variant")
    runtime = runtimes.pop()
    asked = _RUNTIME_ALIASES.get(settings.runtime, settings.runtime)
    if asked and asked != runtime:
        raise JobFailed(f"the models run in {runtime}, not in {asked} as the settings ask",
                        f"build both runners for {asked}")
    for c in (parent, variant):
        if c.runner.threads != threads:
            raise JobFailed(f"{c.label} runs on {c.runner.threads} threads, the evaluation on {threads}",
                            "build both runners with the evaluation's thread count")
    n_val = len(data.val)
    if n_val == 0:
        raise JobFailed("there are no validation examples to evaluate on",
                        "fine-tune with a validation split (data.val_fraction or data.val_path)")
    n = n_val if settings.samples <= 0 else min(settings.samples, n_val)
    size = max(1, settings.batch_size)
    label_names = [str(x) for x in data.info.get("label_names") or []]

    log(f"scoring {parent.label} and {variant.label} on {n} validation examples ({runtime}, {threads} threads)")
    batches = _batches(data, n, size)
    parent_metrics, parent_pred = _score(parent.runner, task_name, batches, label_names)
    variant_metrics, variant_pred = _score(variant.runner, task_name, batches, label_names)
    agree = metrics.agreement(parent_pred, variant_pred)

    b1, bn = _latency_batch(data, 1), _latency_batch(data, size)
    lat: dict[str, list[dict[str, Any]]] = {}
    for key, batch in (("b1", b1), ("bN", bn)):
        log(f"timing batch {batch_len(batch)}: {settings.warmup} warm-up + {settings.repeats} interleaved calls each")
        lat[key] = latency.measure([parent.runner, variant.runner], batch, settings.warmup, settings.repeats)

    entries = []
    for i, c in enumerate((parent, variant)):
        mem = None
        if c.memory_file is not None:
            log(f"measuring the peak memory of {c.label} in a fresh process")
            mem = peak_memory.peak_memory(c.memory_file, task_name, bn, threads)
        timing = {k: {f: lat[k][i][f] for f in ("batch", "p50", "p95", "mean")} for k in ("b1", "bN")}
        p50 = timing["bN"]["p50"]
        entries.append({
            "run_id": c.job_id, "label": c.label, "runtime": c.runner.runtime,
            "metrics": (parent_metrics, variant_metrics)[i],
            "latency_ms": timing,
            "throughput_per_s": size / (p50 / 1000.0) if p50 > 0 else None,
            "size_bytes": file_bytes(c.size_path) if c.size_path is not None else None,
            "params": c.params, "macs": c.macs, "peak_memory_bytes": mem,
        })
    p, v = entries
    delta: dict[str, Any] = {}
    if task_name == "causal_lm":
        delta["perplexity"] = v["metrics"]["perplexity"] - p["metrics"]["perplexity"]
    else:
        delta["accuracy"] = v["metrics"]["accuracy"] - p["metrics"]["accuracy"]
    delta["latency_ratio"] = _ratio(v["latency_ms"]["bN"]["p50"], p["latency_ms"]["bN"]["p50"])
    delta["size_ratio"] = _ratio(v["size_bytes"], p["size_bytes"])
    seq_len = int(bn["input_ids"].shape[1]) if "input_ids" in bn else None
    doc = {
        "version": VERSION, "task": task_name, "samples": n,
        "settings": {"threads": threads, "warmup": settings.warmup, "repeats": settings.repeats,
                     "batch_sizes": [1, size], "runtime": runtime, "seq_len": seq_len},
        "parent": p, "variant": v, "agreement": agree, "delta": delta,
    }
    log(f"agreement {agree:.3f}; latency ratio {delta['latency_ratio']:.2f} at batch {size}"
        if delta["latency_ratio"] is not None else f"agreement {agree:.3f}")
    return _finite(doc)


def batch_len(batch: dict[str, Any]) -> int:
    return int(next(iter(batch.values())).shape[0])


def write(run_dir: str | os.PathLike, doc: dict[str, Any]) -> Path:
    """Write ``doc`` as ``run_dir/evaluation.json`` atomically (a reader never sees half a file)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    final = run_dir / FILE_NAME
    tmp = run_dir / (FILE_NAME + ".tmp")
    tmp.write_text(json.dumps(_finite(doc), indent=1, allow_nan=False), encoding="utf-8")
    os.replace(tmp, final)
    return final
