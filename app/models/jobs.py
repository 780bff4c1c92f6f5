"""A job record in words: its summary, its name and title, its parent, its figures as text.

Rows are engine job records (``jobs.list`` and the ``jobs`` topic). Fine-tune facts come from the record's
``summary``; a record without one (an older engine) falls back to what its spec says. Plain Python: the Runs
table (app/widgets/jobs_table.py), the pages and the notifications read a job through these.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from app.text import format as fmt
from engine.api.job_terms import (
    EVALUATE,
    EXPORT,
    FINETUNE,
    LIVE_STATES,
    LORA_MERGE,
    PRUNE,
    QAT,
    QUANTIZE,
)
from engine.api.job_terms import is_system as is_system_kind

NONE = "—"


# -- reading a record ---------------------------------------------------------------------

def summary(job: dict[str, Any]) -> dict[str, Any]:
    """task, model, method, strategy, nproc, best, estimated_peak, measured_peak of a fine-tune.

    The engine's ``summary`` wins; without one, the spec says what it can.
    """
    found = dict(job.get("summary") or {})
    spec = job.get("spec") or {}
    if job.get("kind") == FINETUNE and isinstance(spec, dict):
        model = spec.get("model") or {}
        dist = spec.get("distributed") or {}
        path = str(model.get("path") or "").rstrip("/")
        fallback = {
            "task": spec.get("task"),
            "model": model.get("builtin") or model.get("arch")
            or (path.rsplit("/", 1)[-1] if path else None)
            or "built-in",  # the engine's summary names it; older records do not
            "method": (spec.get("method") or {}).get("kind", "lora"),
            "strategy": dist.get("strategy", "single"),
            "nproc": dist.get("nproc", 1),
        }
        for key, value in fallback.items():
            if found.get(key) is None:
                found[key] = value
    return found


def display_name(job: dict[str, Any]) -> str:
    return str(job.get("name") or job.get("id") or "")


# -- jobs made from another run (variants, exports) and the engine's own jobs -----------------

# What a job made of its parent, in a few words: "int8 of tickets-lora". Quantize and prune
# are refined from the spec (variant_word).
VARIANT_WORDS = {
    LORA_MERGE: "LoRA merge",
    QUANTIZE: "int8",
    QAT: "QAT int8",
    PRUNE: "pruned",
    EXPORT: "export",
    EVALUATE: "evaluation",
}
_MAX_PARENT_DEPTH = 8  # an export of a variant of a fine-tune is 2; a loop in bad records ends here

Lookup = Callable[[str], "dict[str, Any] | None"]


def is_system(job: dict[str, Any]) -> bool:
    return is_system_kind(str(job.get("kind") or ""))


def parent_id(job: dict[str, Any]) -> str | None:
    """The run this job was made from: the record's parent_id, else its spec's source (or teacher)."""
    spec = job.get("spec") if isinstance(job.get("spec"), dict) else {}
    distill = spec.get("distill") if isinstance(spec.get("distill"), dict) else {}
    found = job.get("parent_id") or spec.get("source_run") or distill.get("teacher_run")
    return str(found) if found else None


def variant_word(job: dict[str, Any]) -> str | None:
    """'int8', 'fp16', 'pruned 30%', 'export', 'distilled'...; None for a job made from nothing."""
    kind = str(job.get("kind") or "")
    spec = job.get("spec") if isinstance(job.get("spec"), dict) else {}
    if kind == QUANTIZE:
        return {"fp16": "fp16", "fp32": "fp32 fused", "static": "static int8"}.get(str(spec.get("mode")), "int8")
    if kind == PRUNE:
        ratio = spec.get("ratio")
        return f"pruned {ratio:.0%}" if isinstance(ratio, (int, float)) else "pruned"
    if kind == FINETUNE:
        return "distilled" if spec.get("distill") else None
    return VARIANT_WORDS.get(kind)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")


def run_title(job: dict[str, Any], lookup: Lookup | None = None, _depth: int = 0) -> str:
    """The job's name; for a variant or export named after its parent (as the wizards name them),
    'int8 of <parent>' instead, so two children of one run no longer read alike.

    A name the user chose is kept. ``lookup`` finds a record by id (None: names only).
    """
    name = display_name(job)
    word, parent = variant_word(job), parent_id(job)
    record = lookup(parent) if lookup and parent and _depth < _MAX_PARENT_DEPTH else None
    if word is None or record is None:
        return name
    parent_name = run_title(record, lookup, _depth + 1)  # "export of int8 of tickets"
    base = _slug(str(record.get("name") or record.get("id") or ""))
    own = str(job.get("name") or "")
    if own and own != job.get("kind") and not (base and own.startswith(base)):
        return name  # named by hand
    joint = "from" if word == "distilled" else "of"
    return f"{word} {joint} {parent_name}"


def run_summary(job: dict[str, Any], lookup: Lookup | None = None) -> dict[str, Any]:
    """summary(job), with task, model and method taken from the fine-tune it was made from
    when the job does not say (a compression variant or an export)."""
    info = summary(job)
    seen = {job.get("id")}
    current = job
    for _ in range(_MAX_PARENT_DEPTH):
        if all(info.get(key) for key in ("task", "model", "method")) or lookup is None:
            break
        parent = parent_id(current)
        record = lookup(parent) if parent and parent not in seen else None
        if record is None:
            break
        seen.add(parent)
        above = summary(record)
        for key in ("task", "model", "method"):
            if not info.get(key) and above.get(key):
                info[key] = above[key]
        current = record
    return info


def strategy_text(info: dict[str, Any]) -> str:
    strategy = info.get("strategy")
    if not strategy:
        return NONE
    nproc = info.get("nproc") or 1
    nodes = info.get("nodes") or []
    if len(nodes) > 1:
        return f"{strategy} × {nproc} on {len(nodes)} machines"
    return f"{strategy} × {nproc}" if nproc > 1 else str(strategy)


def metric_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def best_text(best: dict[str, Any] | None) -> str:
    """{metric, value, step} -> 'accuracy 0.91 @ step 40'."""
    if not best or best.get("value") is None:
        return NONE
    text = f"{best.get('metric', '')} {metric_value(best['value'])}".strip()
    return f"{text} @ step {best['step']}" if best.get("step") is not None else text


def peak_text(estimated: Any, measured: Any) -> str:
    """'estimated 1.2 GiB, measured 1.0 GiB (error +20%)': how far off the fit estimate was."""
    est = estimated if isinstance(estimated, (int, float)) and estimated > 0 else None
    meas = measured if isinstance(measured, (int, float)) and measured > 0 else None
    if est and meas:
        return f"estimated {fmt.size(est)}, measured {fmt.size(meas)} " \
               f"(error {(est - meas) / meas * 100:+.0f}%)"
    if meas:
        return f"measured {fmt.size(meas)}; no estimate was recorded"
    if est:
        return f"estimated {fmt.size(est)}; not measured yet"
    return "—"


def metrics_text(metrics: dict[str, Any]) -> str:
    return " · ".join(f"{k} {metric_value(v)}" for k, v in metrics.items()
                      if isinstance(v, (int, float)) and not isinstance(v, bool)) or "—"


def duration_seconds(job: dict[str, Any], now: float | None = None) -> float | None:
    start = fmt.to_epoch(job.get("started_at"))
    if start is None:
        return None
    end = fmt.to_epoch(job.get("ended_at"))
    if end is None:
        if job.get("state") not in LIVE_STATES:
            return None
        end = time.time() if now is None else now
    return max(0.0, end - start)


def state_text(job: dict[str, Any]) -> str:
    """The State column: a run handed to Slurm that still waits there says so, with its place in the queue."""
    state = str(job.get("state", ""))
    cluster = job.get("cluster") or {}
    if state == "running" and cluster.get("state") == "PENDING":
        place = cluster.get("position")
        return f"pending in Slurm (#{place})" if place else "pending in Slurm"
    return state


def cluster_text(cluster: dict[str, Any]) -> str:
    """A Slurm job in words: 'Slurm job 12 on partition gpu: pending, waiting for free nodes… (1st in line)'."""
    where = f" on partition {cluster['partition']}" if cluster.get("partition") else ""
    text = f"Slurm job {cluster.get('job_id', '?')}{where}: {str(cluster.get('state', '')).lower()}"
    if cluster.get("reason_text"):
        text += f", {cluster['reason_text']}"
    if cluster.get("position"):
        text += f" (number {cluster['position']} in the partition's queue)"
    if cluster.get("nodelist") and cluster.get("state") != "PENDING":
        text += f" on {cluster['nodelist']}"
    return text
