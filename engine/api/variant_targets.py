"""Where a compression variant runs fast: one rule for the engine (``evaluation.json`` ``target``) and the GUI.

A static int8 graph in the TensorRT form (symmetric int8 activations) takes ONNX Runtime's slow path on a
CPU (MiniLM: 5.5x the fp32 latency at batch 1), and fp16 is slower than fp32 on most CPUs: measured there,
their latencies say nothing about their deployment. Stdlib only.
"""

from __future__ import annotations

TARGET_LABELS = {"cpu": "ONNX Runtime on a CPU", "tensorrt": "TensorRT (GPU server, Jetson)",
                 "gpu": "a GPU (TensorRT or ONNX Runtime CUDA)", "any": "any runtime (a float model)"}


def variant_target(technique: str, int8_form: str | None = None) -> str:
    """cpu | tensorrt | gpu | any for a technique ("quantize.static", "qat", "prune", ...) and, for static
    int8 and QAT, its form (the specs' ``target``, TensorRT when unset)."""
    if technique in ("quantize.static", "qat"):
        return "tensorrt" if (int8_form or "tensorrt") == "tensorrt" else "cpu"
    if technique == "quantize.fp16":
        return "gpu"
    if technique.startswith("quantize."):
        return "cpu"  # int8 dynamic, the fused fp32 graph
    return "any"  # pruned, distilled, merged: smaller float models run wherever the parent does
