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

from engine.api.chain_spec import ChainSpec
from engine.api.job_terms import CHAIN, LORA_MERGE, PRUNE, QAT, QUANTIZE
from engine.api.variant_targets import TARGET_LABELS, variant_target

LATENCY_BASES = {"b1": "batch 1", "bN": "batch N"}
# Where the user will run the model; latencies count only where they were measured on that runtime.
DEPLOY_TARGETS = {"cpu": "a CPU (ONNX Runtime)", "gpu": "a GPU server", "jetson": "a Jetson"}
# A variant's own runtime (evaluation.json "target", engine/compress/variant.py target_of).
# Which variants can run where: CPU-form int8 and fused graphs are ONNX Runtime's CPU kernels (TensorRT
# reads neither), the TensorRT form and fp16 are for GPUs and Jetsons, float models (the parent, pruned,
# distilled, merged) run anywhere.
RUNS_ON = {"cpu": ("cpu",), "tensorrt": ("gpu", "jetson"), "gpu": ("gpu", "jetson"), "any": ("cpu", "gpu", "jetson")}
FORMS = {"tensorrt": "TensorRT form", "cpu": "CPU form"}  # static int8's two forms
CPU_RUNTIMES = ("onnxruntime-cpu", "torch", "llama.cpp", "onnxruntime-genai", "transformers")


@dataclass
class Row:
    job_id: str
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
    target: str = "any"  # the runtime this variant is made for: cpu | tensorrt | gpu | any (a float model)
    measured_with: str = ""  # the runtime its b1/bN figures come from (evaluation settings.runtime)
    deploy: str = "cpu"  # where the user will run it (the Compare page's choice): DEPLOY_TARGETS

    def runs_on(self, deploy: str) -> bool:
        """Whether this variant is made to run on ``deploy`` (DEPLOY_TARGETS)."""
        return deploy in RUNS_ON.get(self.target, ("cpu", "gpu", "jetson"))

    def measured_on(self, deploy: str) -> bool:
        """Whether this row's b1/bN latencies were measured where ``deploy`` runs it."""
        if not self.runs_on(deploy):
            return False
        if deploy == "cpu":
            return (self.measured_with or "onnxruntime-cpu") in CPU_RUNTIMES
        if deploy == "gpu":
            return self.measured_with == "onnxruntime-cuda"
        return False  # a Jetson: only its on-device figures (device_ms) count

    def device_ms(self) -> float | None:
        lat = (self.device or {}).get("latency_ms") or {}
        return _num(lat.get("median") or lat.get("mean"))

    def latency(self, basis: str) -> float | None:
        """The latency that counts for ``deploy``: measured on that runtime, or None."""
        if self.deploy == "jetson":
            return self.device_ms() if self.runs_on("jetson") else None
        if not self.measured_on(self.deploy):
            return None
        return self.b1_ms if basis == "b1" else self.bn_ms

    def latency_note(self) -> str:
        """Why ``latency`` is None for this deploy target ('' when it is not)."""
        if self.latency("b1") is not None or self.b1_ms is None:
            return ""
        made_for = TARGET_LABELS.get(self.target, self.target)
        where = DEPLOY_TARGETS.get(self.deploy, self.deploy)
        if not self.runs_on(self.deploy):
            if self.target == "cpu":
                return f"Made for {made_for}: its operators are ONNX Runtime's CPU kernels, not for {where}."
            return (f"Not its target runtime: made for {made_for}, measured with {self.measured_with or 'ONNX Runtime'}"
                    f" on a CPU, where it runs slowly. Its figures come from an export to TensorRT or a Jetson.")
        if self.deploy == "jetson":
            return "No figures from a Jetson yet: export this variant to a Jetson (Export) to time it there."
        return (f"Measured with {self.measured_with or 'ONNX Runtime on a CPU'}, not on a GPU: evaluate with "
                "eval.runtime onnxruntime-cuda on a GPU machine, or export to TensorRT.")

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
    if kind == CHAIN:
        try:
            return "chain: " + ChainSpec.model_validate(spec).label()
        except ValueError:
            return "chain"
    if kind == QUANTIZE:
        mode = spec.get("mode", "dynamic")
        if mode == "static":
            return f"int8 static ({FORMS.get(spec.get('target', 'tensorrt'), '?')})"
        return {"fp16": "fp16", "fp32": "fp32 fused"}.get(mode, f"int8 {mode}")
    if kind == QAT:
        return f"QAT int8 ({FORMS.get(spec.get('target', 'tensorrt'), '?')})"
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


def target_of(record: dict[str, Any], evaluation: dict[str, Any] | None) -> str:
    """The runtime a variant is made for: its evaluation's "target", else what its job spec says."""
    target = ((evaluation or {}).get("target") or {}).get("runtime")
    if target in TARGET_LABELS:
        return str(target)
    kind, spec = record.get("kind"), record.get("spec") or {}
    technique = {QUANTIZE: f"quantize.{spec.get('mode', 'dynamic')}", QAT: "qat", PRUNE: "prune",
                 LORA_MERGE: "lora_merge"}.get(str(kind)) or ("distill" if spec.get("distill") else "")
    return variant_target(technique, spec.get("target"))


def set_deploy(rows: list[Row], deploy: str) -> None:
    """Where the user will run the model: every row's ``latency`` then counts only figures from there."""
    for row in rows:
        row.deploy = deploy


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
    row.measured_with = str(entry.get("runtime") or "")


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
        row = Row(job_id=f"{deployment.get('job')}:{fmt_name}/{kind}", name=str(deployment.get("name") or ""),
                  technique=title, state=str(deployment.get("state") or ""), metric_name="perplexity",
                  higher_is_better=False, metric=_num(check.get("perplexity")),
                  agreement=_num(check.get("token_agreement")), b1_ms=_per_token_ms(check.get("tokens_per_s")),
                  bn_ms=_per_token_ms(check.get("batch_tokens_per_s")), batch_n=check.get("batch") or None,
                  ttft_s=_num(check.get("ttft_s")),
                  size_bytes=f.get("bytes"), peak_bytes=check.get("peak_rss_bytes"), per_token=True,
                  runtime=str(check.get("runtime") or ""),
                  quality={k: v for k, v in (check.get("metrics") or {}).items() if _num(v) is not None},
                  measured_with=str(check.get("runtime") or ""),
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
    row.measured_with = "torch"
    row.bn_ms, row.batch_n, row.ttft_s = _per_token_ms(ref.get("batch_tokens_per_s")), ref.get("batch"), _num(ref.get("ttft_s"))
    row.size_bytes, row.params = ref.get("bytes"), ref.get("params")
    row.quality = {k: v for k, v in (ref.get("metrics") or {}).items() if _num(v) is not None}
    row.speedup = row.compression = 1.0


def build_rows(reply: dict[str, Any]) -> list[Row]:
    """The parent first, then each variant in the engine's order, then a language model's exported files."""
    parent = reply.get("parent") or {}
    task = (parent.get("summary") or {}).get("task") or (parent.get("spec") or {}).get("task")
    prow = Row(job_id=str(parent.get("id") or ""), name=str(parent.get("name") or parent.get("id") or ""),
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
        row = Row(job_id=str(job.get("id") or ""), name=str(job.get("name") or job.get("id") or ""),
                  technique=technique_label(job, doc), state=str(job.get("state") or ""), record=job,
                  error=str(error), device=latest_device(item.get("deployments")))
        if doc:
            task_here = doc.get("task") or task
            _fill(row, doc.get("variant"), task_here)
            row.target = target_of(job, doc)
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
    points = [(r.job_id, r.latency(basis), r.metric if r.higher_is_better else -r.metric)
              for r in rows if r.metric is not None and r.latency(basis) is not None]
    front = []
    for job_id, lat, score in points:
        dominated = any(o_lat <= lat and o_score >= score and (o_lat < lat or o_score > score)
                        for o_id, o_lat, o_score in points if o_id != job_id)
        if not dominated:
            front.append((lat, -score, job_id))
    return [job_id for _lat, _s, job_id in sorted(front)]


def recommend(rows: list[Row], max_latency_ms: float | None, max_drop: float | None,
              basis: str = "b1") -> tuple[Row | None, str]:
    """The smallest file among the variants that meet both limits, and a sentence saying why.

    A limit of None (or 0) is no limit. When none qualifies, the sentence says what
    each variant misses, so the user sees which limit to loosen.
    """
    measured = [r for r in rows if not r.is_parent and r.has_figures() and r.size_bytes]
    candidates = [r for r in measured if r.runs_on(r.deploy)]
    elsewhere = len(measured) - len(candidates)
    if measured and not candidates:
        return None, (f"None of the {len(measured)} variants is made for "
                      f"{DEPLOY_TARGETS.get(measured[0].deploy, measured[0].deploy)}: choose another Deploy on.")
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
    left_out = (f"\n({elsewhere} variant{'s' if elsewhere != 1 else ''} made for another runtime "
                f"left out)") if elsewhere else ""
    if not meeting:
        return None, "No variant meets both limits:\n" + "\n".join(f"• {m}" for m in misses) + left_out
    best = min(meeting, key=lambda r: (r.size_bytes, r.latency(basis) or 0.0))
    others = len(meeting) - 1
    tail = f" ({others} other{'s' if others != 1 else ''} also qualif{'y' if others != 1 else 'ies'})" if others else ""
    return best, (f"Recommended: {best.technique} ({best.name}), the smallest file that meets both limits{tail}."
                  + left_out)


CSV_COLUMNS = ("run_id", "name", "technique", "state", "is_parent", "metric_name", "metric",
               "delta_vs_parent", "agreement", "latency_b1_p50_ms", "latency_bN_p50_ms", "batch_N",
               "speedup_bN", "size_bytes", "compression_ratio", "params", "peak_memory_bytes",
               "pareto", "recommended", "device_host", "device_precision", "device_median_ms",
               "device_p99_ms", "device_throughput_qps")


def csv_records(rows: list[Row], front: list[str], recommended: str | None) -> list[list[Any]]:
    """A header and one line per row, with raw numbers (no units, no rounding)."""
    out: list[list[Any]] = [list(CSV_COLUMNS)]
    for r in rows:
        values = [r.job_id, r.name, r.technique, r.state, r.is_parent, r.metric_name, r.metric, r.delta,
                  r.agreement, r.b1_ms, r.bn_ms, r.batch_n, r.speedup, r.size_bytes, r.compression,
                  r.params, r.peak_bytes, r.job_id in front, r.job_id == recommended, *_device_values(r.device)]
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
