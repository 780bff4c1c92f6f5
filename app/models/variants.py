"""The Variants view as data: rows from ``compress.variants``, the Pareto front, the recommendation.

Plain Python (no Qt, no numpy), so every figure the table, the chart, the CSV
and the recommendation show comes from one place and is easy to test.

Each variant's deltas (metric, speed-up, compression) are taken against the
parent entry measured *in that variant's own job* (same process, inputs,
threads and runtime; docs/compression.md); the parent row shows the parent's
own evaluation (``parent_evaluation``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.api.job_terms import LORA_MERGE, PRUNE, QAT, QUANTIZE

LATENCY_BASES = {"b1": "batch 1", "bN": "batch N"}


@dataclass
class Row:
    run_id: str
    name: str
    technique: str
    state: str
    is_parent: bool = False
    metric_name: str = "accuracy"
    higher_is_better: bool = True
    metric: float | None = None
    delta: float | None = None  # variant - its own parent: points for accuracy, raw for perplexity
    agreement: float | None = None
    b1_ms: float | None = None
    bn_ms: float | None = None
    batch_n: int | None = None
    speedup: float | None = None  # own parent p50 / variant p50 at batch N
    size_bytes: int | None = None
    compression: float | None = None  # own parent size / variant size
    params: int | None = None
    peak_bytes: int | None = None
    entry: dict[str, Any] | None = None  # this row's ENTRY
    parent_entry: dict[str, Any] | None = None  # the parent as measured in this variant's job
    record: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    device: dict[str, Any] | None = None  # the newest on-device benchmark of an export of this row (result.device)
    quality: dict[str, float] = field(default_factory=dict)  # a language model's answer scores (exact_match, rouge_l)
    per_token: bool = False  # b1_ms and bn_ms are milliseconds per generated token (a language model's file)
    runtime: str = ""  # where a language model's file was measured (llama.cpp, onnxruntime-genai, transformers)
    ttft_s: float | None = None  # a language model's time to its first token (median, one request at a time)

    def latency(self, basis: str) -> float | None:
        return self.b1_ms if basis == "b1" else self.bn_ms

    def drop(self) -> float | None:
        """How much worse than the parent (positive = worse): accuracy points, or perplexity."""
        if self.delta is None:
            return None
        return -self.delta if self.higher_is_better else self.delta

    def has_figures(self) -> bool:
        return self.metric is not None and self.b1_ms is not None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def headline(task: str | None, entry: dict[str, Any] | None) -> tuple[str, float | None, bool]:
    """(metric name, value, higher is better): accuracy, or perplexity for a causal LM."""
    metrics = (entry or {}).get("metrics") or {}
    if task == "causal_lm" or ("accuracy" not in metrics and "perplexity" in metrics):
        return "perplexity", _num(metrics.get("perplexity")), False
    return "accuracy", _num(metrics.get("accuracy")), True


def technique_label(record: dict[str, Any], evaluation: dict[str, Any] | None = None) -> str:
    """'int8 dynamic', 'pruned 30% params', 'distilled (3 layers)' ... from the job's kind and spec."""
    kind = record.get("kind") or ""
    spec = record.get("spec") or {}
    if kind == QUANTIZE:
        mode = spec.get("mode", "dynamic")
        return "fp16" if mode == "fp16" else f"int8 {mode}"
    if kind == QAT:
        return "QAT int8"
    if kind == PRUNE:
        ratio = spec.get("ratio")
        target = spec.get("target", "params")
        return f"pruned {ratio:.0%} {target}" if isinstance(ratio, (int, float)) else "pruned"
    if kind == LORA_MERGE:
        return "LoRA merged"
    if spec.get("distill"):
        layers = (spec.get("distill") or {}).get("student_layers")
        return f"distilled ({layers} layers)" if layers else "distilled"
    label = ((evaluation or {}).get("variant") or {}).get("label")
    return str(label or kind or "variant")


def _fill(row: Row, entry: dict[str, Any] | None, task: str | None) -> None:
    row.entry = entry
    if not entry:
        return
    row.metric_name, row.metric, row.higher_is_better = headline(task, entry)
    latency = entry.get("latency_ms") or {}
    row.b1_ms = _num((latency.get("b1") or {}).get("p50"))
    row.bn_ms = _num((latency.get("bN") or {}).get("p50"))
    batch = (latency.get("bN") or {}).get("batch")
    row.batch_n = int(batch) if isinstance(batch, int) else None
    row.size_bytes = entry.get("size_bytes")
    row.params = entry.get("params")
    row.peak_bytes = entry.get("peak_memory_bytes")


def latest_device(deployments: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    """The newest finished export with device figures (the engine lists them newest first)."""
    for d in deployments or []:
        device = d.get("device") or {}
        if d.get("state") == "succeeded" and (device.get("latency_ms") or device.get("throughput_qps")
                                              or device.get("tokens_per_s")):
            return {**device, "job": d.get("job")}
    return None


def device_text(device: dict[str, Any] | None) -> str:
    """'1.02 ms · 950/s' from a device entry: median latency and throughput; a language model's (llama.cpp on
    the device): '41.2 tok/s · first token 180 ms'."""
    if not device:
        return ""
    if device.get("runtime") == "llama.cpp":
        tps, first = _num(device.get("tokens_per_s")), _num(device.get("ttft_ms"))
        return " · ".join(([f"{tps:.1f} tok/s"] if tps is not None else [])
                          + ([f"first token {first:.0f} ms"] if first is not None else []))
    median = _num((device.get("latency_ms") or {}).get("median") or (device.get("latency_ms") or {}).get("mean"))
    qps = _num(device.get("throughput_qps"))
    parts = ([f"{median:.2f} ms"] if median is not None else []) + ([f"{qps:.0f}/s"] if qps is not None else [])
    return " · ".join(parts)


def _ratio(top: float | None, bottom: float | None) -> float | None:
    return top / bottom if top is not None and bottom else None


FILE_TITLES = {"hf": "merged checkpoint", "gguf": "GGUF", "onnx_genai": "ONNX-GenAI"}


def _per_token_ms(tokens_per_s: Any) -> float | None:
    value = _num(tokens_per_s)
    return 1000.0 / value if value else None


def llm_rows(deployment: dict[str, Any]) -> list[Row]:
    """One row per file of a language-model export (engine/daemon/job_records.py llm_files), measured in its
    own runtime against the source model in the same job."""
    llm = deployment.get("llm") or {}
    ref = llm.get("reference") or {}
    rows = []
    for f in llm.get("files") or []:
        check = f.get("check") or {}
        fmt_name, kind = str(f.get("format")), str(f.get("kind"))
        title = FILE_TITLES.get(fmt_name, fmt_name) + ("" if kind == fmt_name else f" {kind}")
        row = Row(run_id=f"{deployment.get('job')}:{fmt_name}/{kind}", name=str(deployment.get("name") or ""),
                  technique=title, state=str(deployment.get("state") or ""), metric_name="perplexity",
                  higher_is_better=False, metric=_num(check.get("perplexity")),
                  agreement=_num(check.get("token_agreement")), b1_ms=_per_token_ms(check.get("tokens_per_s")),
                  bn_ms=_per_token_ms(check.get("batch_tokens_per_s")), batch_n=check.get("batch") or None,
                  ttft_s=_num(check.get("ttft_s")),
                  size_bytes=f.get("bytes"), peak_bytes=check.get("peak_rss_bytes"), per_token=True,
                  runtime=str(check.get("runtime") or ""),
                  quality={k: v for k, v in (check.get("metrics") or {}).items() if _num(v) is not None},
                  entry={"check": check, "path": f.get("path")}, parent_entry=ref)
        device = deployment.get("device") or {}
        if fmt_name == "gguf" and device.get("gguf_type") == kind and not device.get("stopped"):
            row.device = device  # this very file, timed on the Jetson
        ref_ppl = _num(ref.get("perplexity"))
        if row.metric is not None and ref_ppl is not None:
            row.delta = row.metric - ref_ppl
        row.compression = _ratio(_num(ref.get("bytes")), _num(row.size_bytes))
        row.speedup = _ratio(_per_token_ms(ref.get("tokens_per_s")), row.b1_ms)
        rows.append(row)
    return rows


def _parent_from_reference(row: Row, deployments: list[dict[str, Any]]) -> None:
    """A language model's parent row, from the newest export's reference (PyTorch, measured in that job)."""
    ref = next(((d.get("llm") or {}).get("reference") for d in deployments
                if d.get("state") == "succeeded" and (d.get("llm") or {}).get("reference")), None)
    if not ref or row.metric is not None:
        return
    row.metric_name, row.higher_is_better, row.metric = "perplexity", False, _num(ref.get("perplexity"))
    row.b1_ms, row.per_token, row.runtime = _per_token_ms(ref.get("tokens_per_s")), True, "torch"
    row.bn_ms, row.batch_n, row.ttft_s = _per_token_ms(ref.get("batch_tokens_per_s")), ref.get("batch"), _num(ref.get("ttft_s"))
    row.size_bytes, row.params = ref.get("bytes"), ref.get("params")
    row.quality = {k: v for k, v in (ref.get("metrics") or {}).items() if _num(v) is not None}
    row.speedup = row.compression = 1.0


def build_rows(reply: dict[str, Any]) -> list[Row]:
    """The parent first, then each variant in the engine's order, then a language model's exported files."""
    parent = reply.get("parent") or {}
    task = (parent.get("summary") or {}).get("task") or (parent.get("spec") or {}).get("task")
    prow = Row(run_id=str(parent.get("id") or ""), name=str(parent.get("name") or parent.get("id") or ""),
               technique="parent", state=str(parent.get("state") or ""), is_parent=True, record=parent)
    _fill(prow, reply.get("parent_evaluation"), task)
    if prow.entry:
        prow.speedup, prow.compression = 1.0, 1.0
    prow.device = latest_device(reply.get("parent_deployments"))
    rows = [prow]
    for item in reply.get("variants") or []:
        job = item.get("job") or {}
        doc = item.get("evaluation")
        error = (job.get("error") or {}).get("message") or ""
        row = Row(run_id=str(job.get("id") or ""), name=str(job.get("name") or job.get("id") or ""),
                  technique=technique_label(job, doc), state=str(job.get("state") or ""), record=job,
                  error=str(error), device=latest_device(item.get("deployments")))
        if doc:
            task_here = doc.get("task") or task
            _fill(row, doc.get("variant"), task_here)
            own = doc.get("parent")
            row.parent_entry = own
            _name, parent_metric, _hib = headline(task_here, own)
            if row.metric is not None and parent_metric is not None:
                diff = row.metric - parent_metric
                row.delta = diff * 100 if row.higher_is_better else diff
            row.agreement = _num(doc.get("agreement"))
            own_bn = _num((((own or {}).get("latency_ms") or {}).get("bN") or {}).get("p50"))
            row.speedup = _ratio(own_bn, row.bn_ms)
            row.compression = _ratio(_num((own or {}).get("size_bytes")), _num(row.size_bytes))
        rows.append(row)
    exports = [d for d in reply.get("parent_deployments") or [] if d.get("state") == "succeeded" and d.get("llm")]
    _parent_from_reference(prow, exports)
    for deployment in exports:
        rows += llm_rows(deployment)
    return rows


def pareto_front(rows: list[Row], basis: str = "b1") -> list[str]:
    """Run ids on the front (no other row is at least as fast and as good, and better in one), by latency."""
    points = [(r.run_id, r.latency(basis), r.metric if r.higher_is_better else -r.metric)
              for r in rows if r.metric is not None and r.latency(basis) is not None]
    front = []
    for run_id, lat, score in points:
        dominated = any(o_lat <= lat and o_score >= score and (o_lat < lat or o_score > score)
                        for o_id, o_lat, o_score in points if o_id != run_id)
        if not dominated:
            front.append((lat, -score, run_id))
    return [run_id for _lat, _s, run_id in sorted(front)]


def recommend(rows: list[Row], max_latency_ms: float | None, max_drop: float | None,
              basis: str = "b1") -> tuple[Row | None, str]:
    """The smallest file among the variants that meet both limits, and a sentence saying why.

    A limit of None (or 0) is no limit. When none qualifies, the sentence says what
    each variant misses, so the user sees which limit to loosen.
    """
    candidates = [r for r in rows if not r.is_parent and r.has_figures() and r.size_bytes]
    if not candidates:
        return None, "No measured variant yet: a variant is listed here once its job has evaluated it."
    unit = "points" if candidates[0].higher_is_better else "perplexity"
    what = "accuracy drop" if candidates[0].higher_is_better else "perplexity rise"
    misses: list[str] = []
    meeting: list[Row] = []
    for row in candidates:
        reasons = []
        latency = row.latency(basis)
        if max_latency_ms and (latency is None or latency >= max_latency_ms):
            reasons.append(f"{latency:.2f} ms ≥ {max_latency_ms:g} ms" if latency is not None else "no latency")
        drop = row.drop()
        if max_drop and (drop is None or drop >= max_drop):
            reasons.append(f"{what} {drop:.2f} ≥ {max_drop:g} {unit}" if drop is not None else f"no {what}")
        if reasons:
            misses.append(f"{row.technique}: {', '.join(reasons)}")
        else:
            meeting.append(row)
    if not meeting:
        return None, "No variant meets both limits:\n" + "\n".join(f"• {m}" for m in misses)
    best = min(meeting, key=lambda r: (r.size_bytes, r.latency(basis) or 0.0))
    others = len(meeting) - 1
    tail = f" ({others} other{'s' if others != 1 else ''} also qualif{'y' if others != 1 else 'ies'})" if others else ""
    return best, f"Recommended: {best.technique} ({best.name}), the smallest file that meets both limits{tail}."


CSV_COLUMNS = ("run_id", "name", "technique", "state", "is_parent", "metric_name", "metric",
               "delta_vs_parent", "agreement", "latency_b1_p50_ms", "latency_bN_p50_ms", "batch_N",
               "speedup_bN", "size_bytes", "compression_ratio", "params", "peak_memory_bytes",
               "pareto", "recommended", "device_host", "device_precision", "device_median_ms",
               "device_p99_ms", "device_throughput_qps")


def csv_records(rows: list[Row], front: list[str], recommended: str | None) -> list[list[Any]]:
    """A header and one line per row, with raw numbers (no units, no rounding)."""
    out: list[list[Any]] = [list(CSV_COLUMNS)]
    for r in rows:
        values = [r.run_id, r.name, r.technique, r.state, r.is_parent, r.metric_name, r.metric, r.delta,
                  r.agreement, r.b1_ms, r.bn_ms, r.batch_n, r.speedup, r.size_bytes, r.compression,
                  r.params, r.peak_bytes, r.run_id in front, r.run_id == recommended, *_device_values(r.device)]
        out.append(["" if v is None else v for v in values])
    return out


def _device_values(device: dict[str, Any] | None) -> list[Any]:
    d = device or {}
    lat = d.get("latency_ms") or {}
    return [d.get("host"), d.get("precision"), lat.get("median"), lat.get("p99"), d.get("throughput_qps")]


def per_class_pair(row: Row) -> tuple[list[dict[str, Any]], list[list[int]] | None, list[str]]:
    """For a variant: per-class rows {label, parent_f1, variant_f1, delta} and confusion (variant - parent)."""
    parent = ((row.parent_entry or {}).get("metrics")) or {}
    mine = ((row.entry or {}).get("metrics")) or {}
    by_label = {c.get("label"): c for c in parent.get("per_class") or []}
    classes = []
    for c in mine.get("per_class") or []:
        p = by_label.get(c.get("label")) or {}
        pf, vf = _num(p.get("f1")), _num(c.get("f1"))
        classes.append({"label": c.get("label"), "parent_f1": pf, "variant_f1": vf,
                        "delta": vf - pf if pf is not None and vf is not None else None,
                        "support": c.get("support")})
    labels = list(mine.get("labels") or parent.get("labels") or [c["label"] for c in classes])
    a, b = parent.get("confusion"), mine.get("confusion")
    diff = None
    if a and b and len(a) == len(b) and all(len(x) == len(y) for x, y in zip(a, b, strict=True)):
        diff = [[int(y) - int(x) for x, y in zip(ra, rb, strict=True)] for ra, rb in zip(a, b, strict=True)]
    return classes, diff, labels
