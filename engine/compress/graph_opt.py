"""ONNX Runtime's transformer optimizer on an exported ``model.onnx``: fused attention, LayerNorm, GELU.

The exporter writes a transformer as hundreds of small ops (each LayerNorm is seven,
each GELU five, each attention a dozen reshapes, transposes and matmuls).
``onnxruntime.transformers.optimizer`` rewrites those patterns into ONNX Runtime's
fused kernels (``Attention``, ``BiasGelu``, ``EmbedLayerNormalization``). It runs its
Python fusions only (``opt_level=0``): the file stays portable, and ONNX Runtime applies
its own hardware-specific optimizations when it loads it, as for any model. Residual
Add + LayerNormalization are not fused into ``SkipLayerNormalization``: its CPU kernel
is slower than the two ops (engine/evaluate/runners.py, ``SLOW_CPU_FUSIONS``).

- ``family`` says which optimizer a model's architecture takes (``bert`` for BERT-style
  encoders, ``gpt2`` for GPT-2); others are left as exported.
- ``optimize`` writes the optimized file, checks it against the original on probe
  inputs (``TOLERANCE``) and reports the fused-operator counts.

``attention`` says how the attention is fused (``ATTENTION``): "packed" (one ``Attention``
node holding the query, key and value weights as one matrix, embeddings fused with their
LayerNorm) for fp32 and dynamic int8 (which quantizes it as ``QAttention``); "separate"
for static int8 and QAT (``MultiHeadAttention`` reads the query, key and value
projections, which stay MatMuls of their own, and the embedding lookups stay Gathers:
those quantize each projection and each embedding table as a node of its own, which a
packed node would hide); "none" to leave the attention as exported. Either fused form
runs the attention core (scores, mask, softmax, weighted sum) in one kernel instead of a
dozen ops. Measured on the bench's MiniLM, dynamic int8 per channel: packed 0.44x of
fp32's latency at batch 16, separate 0.49x, the same predictions (agreement 0.981).

A graph the optimizer cannot improve or that no longer matches is not used: the
report says why and ``path`` is None, and the caller keeps the exported file.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from pathlib import Path
from typing import Any

from engine.compress.quantize import probe_feeds

TOLERANCE = 1e-4  # max abs logit difference, optimized vs exported (fp32, CPU)
PROBES = ((1, 16), (3, 9))  # (batch, sequence) of the parity check's made-up inputs
# config.model_type -> onnxruntime.transformers optimizer model type
FAMILIES = {"bert": "bert", "roberta": "bert", "xlm-roberta": "bert", "distilbert": "bert", "electra": "bert",
            "camembert": "bert", "mpnet": "bert", "deberta": "bert", "gpt2": "gpt2"}
ATTENTION = ("packed", "separate", "none")
FUSED_OPS = ("Attention", "MultiHeadAttention", "EmbedLayerNormalization", "SkipLayerNormalization",
             "LayerNormalization", "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization", "BiasGelu",
             "Gelu", "FastGelu")


def family(model: Any) -> str | None:
    """The optimizer's model type for a torch model (``config.model_type``), or None when it has none."""
    config = getattr(model, "config", None)
    return FAMILIES.get(str(getattr(config, "model_type", "") or ""))


def shape(model: Any) -> tuple[int, int]:
    """(heads, hidden size) for the attention fusion; (0, 0) when the layers' heads differ (a pruned model:
    the optimizer takes one head count for the whole graph, so its attention stays unfused)."""
    config = getattr(model, "config", None)
    heads = int(getattr(config, "num_attention_heads", 0) or getattr(config, "n_head", 0) or 0)
    hidden = int(getattr(config, "hidden_size", 0) or getattr(config, "n_embd", 0) or 0)
    per_layer = {int(m.num_attention_heads) for m in model.modules()
                 if hasattr(m, "num_attention_heads") and hasattr(m, "attention_head_size")}
    if not heads or not hidden or per_layer - {heads}:
        return 0, 0
    return heads, hidden


@contextlib.contextmanager
def eager_attention(model: Any):
    """Export with transformers' eager attention: ONNX Runtime's attention fusion matches that pattern (the
    SDPA path exports as a graph it does not recognise; both compute the same, within 1e-7)."""
    config = getattr(model, "config", None)
    before = getattr(config, "_attn_implementation", None)
    switch = before not in (None, "eager") and hasattr(model, "set_attn_implementation")
    if switch:
        try:
            model.set_attn_implementation("eager")
        except (ValueError, ImportError, AttributeError):
            switch = False
    try:
        yield
    finally:
        if switch:
            model.set_attn_implementation(before)


def export_fused(model: Any, task_name: str, example: dict[str, Any], dst: Path, *,
                 attention: str = "packed") -> dict[str, Any]:
    """Export ``model`` for fusion (eager attention) beside ``dst``, then ``optimize`` it into ``dst``."""
    from engine.compress.onnx_export import export_onnx

    model_type = family(model)
    if model_type is None:
        return _unsupported(attention)
    raw = dst.with_name(f"{dst.stem}.unfused.onnx")
    with eager_attention(model):
        export_onnx(model, task_name, example, raw)
    heads, hidden = shape(model)
    try:
        report = optimize(raw, dst, model_type, attention=attention if heads > 0 else "none", heads=heads,
                          hidden=hidden)
    finally:
        raw.unlink(missing_ok=True)
    if attention != "none" and not heads:
        report["attention_note"] = "attention left unfused: the layers have different head counts (pruned)"
    return report


def optimize(src: str | Path, dst: str | Path, model_type: str | None, *, attention: str = "packed",
             heads: int = 0, hidden: int = 0) -> dict[str, Any]:
    """Fuse ``src`` into ``dst``; the report: ``{"path", "model_type", "fused", "nodes_before", "nodes_after",
    "max_abs_diff", "skipped"}`` (``path`` None and ``skipped`` saying why when the export is kept).

    ``heads`` and ``hidden`` (``shape(model)``) are needed for the attention fusion: the
    optimizer cannot read them from the exported graph."""
    import onnx

    src, dst = Path(src), Path(dst)
    if attention not in ATTENTION:
        raise ValueError(f"attention must be one of {ATTENTION}, not {attention!r}")
    if model_type is None:
        return _unsupported(attention)
    report: dict[str, Any] = {"path": None, "model_type": model_type, "attention": attention, "fused": {},
                              "skipped": ""}
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    # Read once: the node count, the probe inputs of the parity check, and the optimizer's input.
    model = onnx.load(str(src))
    report["nodes_before"] = len(model.graph.node)
    probes = [probe_feeds(model, batch, seq) for batch, seq in PROBES]
    options = FusionOptions(model_type)
    options.enable_attention = attention != "none"
    options.use_multi_head_attention = attention == "separate"
    options.enable_embed_layer_norm = attention != "separate"
    options.enable_gelu_approximation = False  # exact GELU: the logits must not move
    # Residual Add + LayerNormalization stay as they are: ONNX Runtime's CPU SkipLayerNormalization is
    # slower than them (engine/evaluate/runners.py, SLOW_CPU_FUSIONS).
    options.enable_skip_layer_norm = False
    options.enable_bias_skip_layer_norm = False
    # It logs every fusion it tries, under top-level logger names (its modules import each other as
    # "fusion_attention", ...): quiet everything below ERROR for the call.
    before_disable = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            optimized = optimize_model(model, model_type=model_type, num_heads=heads, hidden_size=hidden,
                                       optimization_options=options, opt_level=0)
    except Exception as exc:  # noqa: BLE001 - the fusions raise plain exceptions on graphs they do not expect
        report["skipped"] = f"the optimizer failed: {' '.join(str(exc).split())[:200]}"
        return report
    finally:
        logging.disable(before_disable)
    fused = {op: n for op, n in optimized.get_fused_operator_statistics().items() if n and op in FUSED_OPS}
    report["fused"] = fused
    report["nodes_after"] = len(optimized.model.graph.node)
    if not fused:
        report["skipped"] = "nothing to fuse"
        return report
    dst.parent.mkdir(parents=True, exist_ok=True)
    fused_file = dst.with_name(f".{dst.name}.fused-{os.getpid()}")
    tmp = dst.with_name(f".{dst.name}.tmp-{os.getpid()}")
    optimized.save_model_to_file(str(fused_file))
    del optimized
    try:
        # ONNX shape inference knows no com.microsoft ops, so the tensors after the first fused node would be
        # untyped and the quantizers could not place Q/DQ pairs there: ORT's pre-processing (symbolic shape
        # inference, basic optimizations, tagged as done) types every tensor once, here.
        report["shapes"] = _pre_process(fused_file, tmp)
    finally:
        fused_file.unlink(missing_ok=True)
    diff = max_abs_diff(src, tmp, probes)
    report["max_abs_diff"] = diff
    if not diff <= TOLERANCE:
        tmp.unlink(missing_ok=True)
        report["skipped"] = f"the optimized graph's logits differ by {diff:.3g} (tolerance {TOLERANCE:g})"
        return report
    os.replace(tmp, dst)
    report["path"] = str(dst)
    return report


def _pre_process(src: Path, dst: Path) -> str:
    from onnxruntime.quantization.shape_inference import quant_pre_process

    with contextlib.redirect_stdout(io.StringIO()):
        try:
            quant_pre_process(str(src), str(dst), auto_merge=True)
            return "symbolic"
        except Exception:  # noqa: BLE001 - symbolic inference can fail on an odd graph; keep the fused one
            os.replace(src, dst)
            return "none"


def max_abs_diff(a: str | Path, b: str | Path, probes: list[dict[str, Any]]) -> float:
    """Largest output difference between two models on the same made-up inputs."""
    import numpy as np

    from engine.compress.onnx_export import session

    sa, sb = session(a, threads=1), session(b, threads=1)
    diff = 0.0
    for feeds in probes:
        for x, y in zip(sa.run(None, feeds), sb.run(None, feeds), strict=True):
            diff = max(diff, float(np.abs(np.asarray(x, np.float32) - np.asarray(y, np.float32)).max()))
    return diff


def _unsupported(attention: str) -> dict[str, Any]:
    return {"path": None, "model_type": None, "attention": attention, "fused": {},
            "skipped": "no transformer optimizer for this architecture"}


def speedup(unfused: Path, fused: Path, task_name: str, batch: dict[str, Any], repeats: int = 10) -> dict[str, Any]:
    """Median latency of both files on one batch, timed in alternation (engine.evaluate.latency)."""
    from engine.evaluate import latency
    from engine.evaluate.runners import OrtRunner

    a, b = latency.measure([OrtRunner(unfused, task_name), OrtRunner(fused, task_name)], batch, warmup=1,
                           repeats=repeats)
    return {"batch": a["batch"], "unfused_ms": round(a["p50"], 3), "fused_ms": round(b["p50"], 3),
            "speedup": round(a["p50"] / b["p50"], 3)}
