"""trtexec command lines (build and benchmark) and its performance summary, per TensorRT version.

Sources:

- trtexec's ``--help`` text (NVIDIA/TensorRT ``samples/common/sampleOptions.cpp``) per release:
  8.x has ``--workspace=N  Set workspace size in MiB`` and, from 8.4, ``--memPoolSize=poolspec`` with
  ``poolfmt ::= pool:sizeInMiB`` (8.4/8.5: a bare number of MiB); from 8.6 the pool size "Supports the following
  base-2 suffixes: B, K, M, G"; ``--workspace`` is gone in 10.x. ``--minShapes/--optShapes/--maxShapes=spec``
  (``input0:1x3x256x256,input1:1x3x128x128``), ``--shapes=spec`` for inference, ``--fp16``, ``--int8``,
  ``--useDLACore=N``, ``--allowGPUFallback``, ``--saveEngine``, ``--loadEngine``, ``--duration=N`` (seconds),
  ``--warmUp=N`` (ms), ``--skipInference`` (8.2's option list prints "Skip inference"; 8.0 has ``--buildOnly``).
  A static model refuses explicit shapes ("Static model does not take explicit shapes"), so only inputs with a
  dynamic dimension get shape options.
- Output format: recorded trtexec runs (TensorRT 8.2.5 and 8.6.1/10.9 logs in public repositories; format in
  tests/data/trtexec_trt8.txt and trtexec_trt10.txt): the banner ``&&&& RUNNING TensorRT.trtexec [TensorRT
  v8205] # trtexec ...`` (MAJOR*1000+MINOR*100+PATCH; from 10.0 MAJOR*10000+MINOR*100+PATCH, ``v100300``),
  the ``=== Performance summary ===`` block with ``Throughput: 40.997 qps`` and ``Latency: min = ... ms, max = ...
  ms, mean = ... ms, median = ... ms, percentile(99%) = ... ms`` (8.2-8.4 print one percentile; later versions
  print ``percentile(90%)``, ``percentile(95%)``, ``percentile(99%)``), ``GPU Compute Time: ...`` alike, and
  the closing ``&&&& PASSED TensorRT.trtexec ...`` (or ``&&&& FAILED``).
"""

from __future__ import annotations

import math
import re
from typing import Any

from engine.export.trt_support import parse_version
from engine.training.context import JobFailed

TEXT_TASKS = ("text_classification", "causal_lm")
PRECISIONS = ("fp32", "fp16", "int8")


def _is_dynamic(dim: Any) -> bool:
    return not (isinstance(dim, int) and dim > 0)


def profile_shapes(inputs: list[dict[str, Any]], *, task_name: str, max_batch: int, opt_batch: int = 1,
                   seq_len: int | None = None, dynamic_batch: bool = True,
                   dynamic_sequence: bool = True) -> dict[str, dict[str, list[int]]]:
    """Min/opt/max shapes for each input that has a dynamic dimension (static inputs need none).

    ``inputs`` are ``[{name, dtype, shape}]`` with a string (or None) for a dynamic axis. Axis 0 is the batch:
    1..max_batch tuned for opt_batch, or max_batch throughout when ``dynamic_batch`` is off. For text tasks
    axis 1 is the sequence: 1..seq_len tuned for seq_len, or seq_len throughout when ``dynamic_sequence`` is off.
    """
    if max_batch < 1 or not 1 <= opt_batch <= max_batch:
        raise JobFailed(f"bad batch range: opt_batch {opt_batch}, max_batch {max_batch}",
                        "use 1 <= opt_batch <= max_batch.")
    out: dict[str, dict[str, list[int]]] = {}
    for spec in inputs:
        name, shape = spec["name"], list(spec["shape"])
        if not any(_is_dynamic(d) for d in shape):
            continue
        lo, opt, hi = [], [], []
        for axis, dim in enumerate(shape):
            if not _is_dynamic(dim):
                lo.append(dim), opt.append(dim), hi.append(dim)
            elif axis == 0:
                if dynamic_batch:
                    lo.append(1), opt.append(opt_batch), hi.append(max_batch)
                else:
                    lo.append(max_batch), opt.append(max_batch), hi.append(max_batch)
            elif axis == 1 and task_name in TEXT_TASKS:
                if not seq_len:
                    raise JobFailed(f"input {name!r} has a dynamic sequence axis but no seq_len was given",
                                    "set seq_len (the longest sequence the engine must take).")
                lo.append(1 if dynamic_sequence else seq_len), opt.append(seq_len), hi.append(seq_len)
            else:
                raise JobFailed(f"input {name!r} has a dynamic axis {axis} ({dim!r}) that the TensorRT profile "
                                f"cannot size", "export the model with that axis fixed (only the batch axis and, "
                                "for text, the sequence axis may be dynamic).")
        out[name] = {"min": lo, "opt": opt, "max": hi}
    return out


def _spec(shapes: dict[str, dict[str, list[int]]], which: str) -> str:
    return ",".join(f"{name}:{'x'.join(str(int(d)) for d in s[which])}" for name, s in shapes.items())


def build_command(onnx_name: str, plan_name: str, *, precision: str = "fp16",
                  shapes: dict[str, dict[str, list[int]]] | None = None, workspace_mb: int = 1024,
                  dla_core: int | None = None, tensorrt_version: str = "10.3") -> list[str]:
    """trtexec's arguments to build ``plan_name`` from ``onnx_name`` on that TensorRT version."""
    if precision not in PRECISIONS:
        raise JobFailed(f"unknown precision {precision!r}", f"use one of: {', '.join(PRECISIONS)}")
    ver = parse_version(tensorrt_version)[:2]
    cmd = ["trtexec", f"--onnx={onnx_name}", f"--saveEngine={plan_name}"]
    mb = max(1, int(workspace_mb))
    if ver >= (8, 6):
        cmd.append(f"--memPoolSize=workspace:{mb}M")
    elif ver >= (8, 4):
        cmd.append(f"--memPoolSize=workspace:{mb}")  # 8.4/8.5: "pool:sizeInMiB", no unit suffixes yet
    else:
        cmd.append(f"--workspace={mb}")
    if precision == "fp16":
        cmd.append("--fp16")
    elif precision == "int8":
        cmd += ["--int8", "--fp16"]  # layers outside the QDQ regions run in fp16 rather than fp32
    if shapes:
        cmd += [f"--minShapes={_spec(shapes, 'min')}", f"--optShapes={_spec(shapes, 'opt')}",
                f"--maxShapes={_spec(shapes, 'max')}"]
    if dla_core is not None:
        cmd += [f"--useDLACore={int(dla_core)}", "--allowGPUFallback"]
    cmd.append("--skipInference" if ver >= (8, 2) else "--buildOnly")
    return cmd


def bench_command(plan_name: str, *, shapes: dict[str, dict[str, list[int]]] | None = None,
                  duration_s: float = 10.0, tensorrt_version: str = "10.3", dla_core: int | None = None,
                  warmup_ms: int = 500) -> list[str]:
    """trtexec's arguments to time ``plan_name`` at the profile's opt shapes for ``duration_s`` seconds."""
    parse_version(tensorrt_version)  # a bad version string fails here, like in build_command
    cmd = ["trtexec", f"--loadEngine={plan_name}"]
    if shapes:
        cmd.append(f"--shapes={_spec(shapes, 'opt')}")
    if dla_core is not None:
        cmd.append(f"--useDLACore={int(dla_core)}")
    cmd += [f"--warmUp={int(warmup_ms)}", f"--duration={max(1, math.ceil(duration_s))}"]
    return cmd


_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_STAT_KEYS = {"min": "min", "max": "max", "mean": "mean", "median": "median"}


def _stats(body: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in re.findall(rf"(min|max|mean|median|percentile\(\d+(?:\.\d+)?%\))\s*=\s*({_NUM})\s*ms",
                                 body):
        if key.startswith("percentile"):
            pct = key[len("percentile("):-2]
            out[f"p{pct.rstrip('0').rstrip('.') if '.' in pct else pct}"] = float(value)
        else:
            out[_STAT_KEYS[key]] = float(value)
    return out


def parse_output(text: str) -> dict[str, Any]:
    """The performance summary of a trtexec run: {tensorrt_version, throughput_qps, latency_ms, gpu_compute_ms,
    passed}. Raises ValueError when the text has no performance summary (a build-only or failed run)."""
    marker = "=== Performance summary ==="
    if marker not in text:
        tail = " | ".join(line.strip() for line in text.strip().splitlines()[-3:])[:300]
        raise ValueError(f"no trtexec performance summary ('{marker}') in the output"
                         + (f"; it ends with: {tail}" if tail else "; the output is empty"))
    summary = text[text.rindex(marker):]
    version = None
    m = re.search(r"^&&&& RUNNING TensorRT\.trtexec \[TensorRT v(\d+)\]", text, re.M)
    if m:
        version = ".".join(str(x) for x in parse_version(m.group(1)))
    else:
        m = re.search(r"TensorRT version:\s*(\d+(?:\.\d+)+)", text)
        version = m.group(1) if m else None
    m = re.search(rf"Throughput:\s*({_NUM})\s*qps", summary)
    if not m:
        raise ValueError("the trtexec performance summary has no 'Throughput: ... qps' line")
    latency = gpu = None
    for line in summary.splitlines():
        body = re.sub(r"^.*?\[I\]\s*", "", line).strip()
        if body.startswith("Latency:"):
            latency = _stats(body)
        elif body.startswith("GPU Compute Time:"):
            gpu = _stats(body)
    if not latency:
        raise ValueError("the trtexec performance summary has no 'Latency: min = ...' line")
    return {"tensorrt_version": version, "throughput_qps": float(m.group(1)), "latency_ms": latency,
            "gpu_compute_ms": gpu or {}, "passed": bool(re.search(r"^&&&& PASSED TensorRT\.trtexec", text, re.M))}
