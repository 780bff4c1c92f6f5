"""Examples (and tokens) per second from FLOPs: a first-order figure, before a run measures its own.

A training step costs about 2N FLOPs a token forward, 2N backward for the activation gradients
and 2N_trainable for the weight gradients (Kaplan et al. 2020's 6N, with frozen weights left
out); activation checkpointing adds one more forward. The forward matmul FLOPs per example are
measured on the meta device (facts), so convolutions and attention count too. They are divided
by a device's peak dense FLOP/s times an assumed utilization. Pure Python.
"""

from __future__ import annotations

from typing import Any

from engine.training.mfu import GPU_DEFAULT, GPU_PEAKS, gpu_peak

# Peak dense TFLOP/s per GPU: the table lives with the MFU code, which the running trainer uses too.
GPU_PEAK_TFLOPS = GPU_PEAKS
GPU_DEFAULT_TFLOPS = GPU_DEFAULT
GPU_UTILIZATION = 0.35  # model FLOPs utilization well-tuned training reaches; small models reach less
GPU_STEP_FLOOR_S = 0.002  # launch-bound minimum per micro-step, plus per repeated block below
GPU_BLOCK_FLOOR_S = 0.0006
CPU_GFLOPS_PER_CORE = 40.0  # achieved fp32 GFLOP/s per core in PyTorch training (AVX2/AVX-512 server cores)
CPU_STEP_FLOOR_S = 0.02  # Python, data loading and element-wise work per micro-step that FLOPs miss


def throughput(spec: Any, facts: dict[str, Any], machine: dict[str, Any], kind: str, nproc: int,
               total: int, trainable: int) -> dict[str, Any]:
    """{samples_per_s, tokens_per_s (text) or None, basis}: for all processes together."""
    forward = float(facts.get("flops_per_sample") or 0)
    base = max(1, int(facts.get("params_base") or total))
    factor = 2.0 + min(1.0, trainable / base) + (1.0 if spec.activation_checkpointing else 0.0)
    per_sample = forward * factor
    if per_sample <= 0:
        return {"samples_per_s": None, "tokens_per_s": None, "basis": "no FLOP count for this model"}
    half = spec.precision in ("bf16", "fp16")
    micro = spec.batch_size
    if kind == "cuda":
        gpus = machine.get("gpus") or [{"name": "unknown"}]
        peak, row = gpu_peak(str(gpus[0].get("name", "")), half)
        rate = peak * 1e12 * GPU_UTILIZATION
        floor = GPU_STEP_FLOOR_S + GPU_BLOCK_FLOOR_S * int(facts.get("num_blocks") or 1)
        step = max(per_sample * micro / rate, floor)
        samples = nproc * micro / step
        basis = (f"{forward / 1e9:.2f} GFLOP per example forward (measured) x {factor:.2f} for training, on "
                 f"{row} at {peak:.0f} TFLOP/s peak {'16-bit' if half else 'fp32'} x {GPU_UTILIZATION:.0%} "
                 f"utilization, at least {floor * 1e3:.1f} ms per micro-step (kernel launches); per GPU x {nproc}")
    else:
        cores = int((machine.get("cpu") or {}).get("cores") or 1)
        rate = cores * CPU_GFLOPS_PER_CORE * 1e9
        step = per_sample * micro * nproc / rate + CPU_STEP_FLOOR_S
        samples = nproc * micro / step
        basis = (f"{forward / 1e9:.2f} GFLOP per example forward (measured) x {factor:.2f} for training, on "
                 f"{cores} CPU cores at an assumed {CPU_GFLOPS_PER_CORE:.0f} GFLOP/s each, shared by the processes, "
                 f"plus {CPU_STEP_FLOOR_S * 1e3:.0f} ms per micro-step")
    seq = facts.get("seq_len")
    tokens = samples * seq if seq and spec.task != "image_classification" else None
    return {"samples_per_s": _sig(samples), "tokens_per_s": _sig(tokens) if tokens is not None else None,
            "basis": basis + (f"; tokens at the full {seq}-token length" if tokens is not None else "")}


def _sig(x: float) -> float:
    """Three significant digits: 0.00123 stays 0.00123, 12345 becomes 12300."""
    return float(f"{x:.3g}")
