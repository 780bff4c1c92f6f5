"""Build, run and time a TensorRT engine on this machine's CUDA GPU (format ``tensorrt``).

Written from TensorRT's Python API documentation (8.6/10.x "Python API" and the developer guide's "The Python
API" chapter): ``trt.Builder`` -> ``create_network`` (explicit batch: flag ``EXPLICIT_BATCH`` on 8.x, the
only mode and flag 0 on 10.x) -> ``trt.OnnxParser.parse_from_file`` (reads external weights next to the file)
-> ``create_builder_config`` with ``set_memory_pool_limit(MemoryPoolType.WORKSPACE, bytes)`` and
``BuilderFlag.FP16``/``INT8`` -> one ``create_optimization_profile`` with ``set_shape(name, min, opt, max)`` per
dynamic input -> ``build_serialized_network``. Running uses the name-based I/O API (8.5+):
``engine.num_io_tensors``/``get_tensor_name``/``get_tensor_mode``/``get_tensor_dtype``,
``context.set_input_shape``, ``context.get_tensor_shape`` for outputs, ``context.set_tensor_address`` and
``context.execute_async_v3(stream)``. Buffers are torch CUDA tensors, so no pycuda/cuda-python is needed.

An engine only runs on the GPU model and TensorRT version it was built with; Jetson engines are built on the
Jetson (``engine.export.jetson_bundle``), never here.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from engine.training.context import JobFailed

PRECISIONS = ("fp32", "fp16", "int8")


def available() -> tuple[bool, str]:
    """(True, TensorRT version) when tensorrt imports and torch sees a CUDA GPU, else (False, why not)."""
    try:
        import tensorrt as trt
    except ImportError as exc:
        return False, f"the tensorrt Python package is not installed here ({exc})"
    try:
        import torch
    except ImportError as exc:
        return False, f"torch is not installed here ({exc})"
    if not torch.cuda.is_available():
        return False, "torch sees no CUDA GPU on this machine"
    return True, f"TensorRT {trt.__version__} on {torch.cuda.get_device_name(0)}"


def _logger():
    import tensorrt as trt

    return trt.Logger(trt.Logger.WARNING)


def _major() -> int:
    import tensorrt as trt

    return int(str(trt.__version__).split(".")[0])


def build_engine(onnx_path: str | Path, plan_path: str | Path, *, precision: str = "fp16",
                 shapes: dict[str, dict[str, list[int]]] | None = None, workspace_mb: int = 1024) -> dict[str, Any]:
    """Parse ``onnx_path``, build an engine and write it to ``plan_path``; returns {path, bytes, seconds, ...}."""
    ok, why = available()
    if not ok:
        raise JobFailed(f"cannot build a TensorRT engine here: {why}",
                        "install tensorrt (pip install tensorrt) on a machine with a CUDA GPU, or export format "
                        "jetson and build on the device.")
    if precision not in PRECISIONS:
        raise JobFailed(f"unknown precision {precision!r}", f"use one of: {', '.join(PRECISIONS)}")
    import tensorrt as trt

    t0 = time.monotonic()
    logger = _logger()
    builder = trt.Builder(logger)
    flags = 0 if _major() >= 10 else 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise JobFailed(f"TensorRT's ONNX parser rejected {onnx_path}: {errors[:600]}",
                        "run the TensorRT compatibility check (trt_compat) and follow its fixes.")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_mb) << 20)
    if precision in ("fp16", "int8"):
        config.set_flag(trt.BuilderFlag.FP16)
    if precision == "int8":
        config.set_flag(trt.BuilderFlag.INT8)  # explicit quantization: scales come from the QDQ nodes
    dynamic = [network.get_input(i) for i in range(network.num_inputs)
               if any(d < 0 for d in network.get_input(i).shape)]
    if dynamic:
        missing = [t.name for t in dynamic if t.name not in (shapes or {})]
        if missing:
            raise JobFailed(f"no min/opt/max shapes for the dynamic input(s) {', '.join(missing)}",
                            "pass shapes from engine.export.trtexec.profile_shapes.")
        profile = builder.create_optimization_profile()
        for t in dynamic:
            s = shapes[t.name]
            profile.set_shape(t.name, tuple(s["min"]), tuple(s["opt"]), tuple(s["max"]))
        config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise JobFailed("TensorRT could not build the engine (see the log above for the builder's reason)",
                        "try precision fp32, a larger workspace_mb, or smaller max shapes.")
    plan_path = Path(plan_path)
    plan_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = plan_path.with_name(plan_path.name + ".tmp")
    tmp.write_bytes(bytes(serialized))
    tmp.replace(plan_path)
    return {"path": str(plan_path), "bytes": plan_path.stat().st_size, "seconds": time.monotonic() - t0,
            "precision": precision, "tensorrt": trt.__version__, "shapes": shapes or {}}


def _torch_dtype(trt_dtype):
    import tensorrt as trt
    import torch

    table = {trt.DataType.FLOAT: torch.float32, trt.DataType.HALF: torch.float16, trt.DataType.INT32: torch.int32,
             trt.DataType.INT8: torch.int8, trt.DataType.BOOL: torch.bool}
    if hasattr(trt.DataType, "INT64"):
        table[trt.DataType.INT64] = torch.int64
    if hasattr(trt.DataType, "BF16"):
        table[trt.DataType.BF16] = torch.bfloat16
    return table[trt_dtype]


class Runner:
    """A deserialized engine with one execution context; ``__call__`` runs one batch of named inputs."""

    def __init__(self, plan_path: str | Path):
        ok, why = available()
        if not ok:
            raise JobFailed(f"cannot run a TensorRT engine here: {why}", "run it on a machine with a CUDA GPU.")
        import tensorrt as trt
        import torch

        self.runtime = trt.Runtime(_logger())
        self.engine = self.runtime.deserialize_cuda_engine(Path(plan_path).read_bytes())
        if self.engine is None:
            raise JobFailed(f"TensorRT cannot load {plan_path}",
                            "an engine runs only with the TensorRT version and GPU it was built on; build it again.")
        self.context = self.engine.create_execution_context()
        self.stream = torch.cuda.Stream()
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.inputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.outputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]

    def __call__(self, feeds: dict[str, Any]) -> dict[str, Any]:
        import torch

        keep = []  # buffers must outlive the asynchronous run
        for name in self.inputs:
            if name not in feeds:
                raise JobFailed(f"the batch has no {name!r}", f"the engine's inputs are {', '.join(self.inputs)}")
            value = feeds[name]
            value = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
            value = value.to("cuda", _torch_dtype(self.engine.get_tensor_dtype(name))).contiguous()
            keep.append(value)
            self.context.set_input_shape(name, tuple(value.shape))
            self.context.set_tensor_address(name, value.data_ptr())
        out = {}
        for name in self.outputs:
            shape = tuple(self.context.get_tensor_shape(name))
            buf = torch.empty(shape, dtype=_torch_dtype(self.engine.get_tensor_dtype(name)), device="cuda")
            out[name] = buf
            self.context.set_tensor_address(name, buf.data_ptr())
        self.stream.wait_stream(torch.cuda.current_stream())  # inputs were copied on the default stream
        if not self.context.execute_async_v3(self.stream.cuda_stream):
            raise JobFailed("TensorRT failed to run the engine", "check the input shapes against the profile.")
        self.stream.synchronize()
        del keep
        return out


def run(plan_path: str | Path, batches: list[dict[str, Any]], output: str = "logits") -> list[Any]:
    """The engine's ``output`` (torch CUDA tensors, float32) for each batch of named inputs."""
    runner = Runner(plan_path)
    return [runner(batch)[output].float() for batch in batches]


def version() -> str:
    """The installed TensorRT's version ('10.3.0.26'); JobFailed when tensorrt is not installed."""
    try:
        import tensorrt as trt
    except ImportError as exc:
        raise JobFailed("the tensorrt Python package is not installed here",
                        "pip install tensorrt on a machine with an NVIDIA GPU.") from exc
    return str(trt.__version__)


def _opt_batch(runner: Runner, shapes: dict[str, dict[str, list[int]]] | None) -> dict[str, Any]:
    """Inputs at the profile's opt shapes: token id 1 and mask 1 for integer inputs, random floats otherwise."""
    import torch

    feeds = {}
    for name in runner.inputs:
        shape = (shapes or {}).get(name, {}).get("opt") or list(runner.engine.get_tensor_shape(name))
        if any(int(d) < 0 for d in shape):
            raise JobFailed(f"no opt shape for the dynamic input {name!r}", "pass the profile's shapes.")
        dtype = _torch_dtype(runner.engine.get_tensor_dtype(name))
        if dtype.is_floating_point:
            feeds[name] = torch.randn(*[int(d) for d in shape], device="cuda").to(dtype)
        else:
            feeds[name] = torch.ones(*[int(d) for d in shape], dtype=dtype, device="cuda")
    return feeds


def benchmark(plan_path: str | Path, shapes: dict[str, dict[str, list[int]]] | None = None, *,
              duration_s: float = 3.0, batch: dict[str, Any] | None = None, warmup: int = 10) -> dict[str, Any]:
    """Time repeated runs of one batch (``batch``, or inputs at the profile's opt shapes) for ``duration_s``:
    {latency_ms {min,max,mean,median,p90,p95,p99}, throughput_qps, runs, batch}, like trtexec's summary
    (wall time per run, host copies of the outputs excluded)."""
    import statistics

    runner = Runner(plan_path)
    feeds = batch if batch is not None else _opt_batch(runner, shapes)
    for _ in range(max(0, warmup)):
        runner(feeds)
    times, end = [], time.monotonic() + float(duration_s)
    while time.monotonic() < end or len(times) < 5:
        t = time.perf_counter()
        runner(feeds)
        times.append((time.perf_counter() - t) * 1000)
    ordered = sorted(times)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]

    first = next(iter(feeds.values()))
    return {"latency_ms": {"min": ordered[0], "max": ordered[-1], "mean": statistics.fmean(times),
                           "median": statistics.median(times), "p90": pct(90), "p95": pct(95), "p99": pct(99)},
            "throughput_qps": len(times) / (sum(times) / 1000), "runs": len(times),
            "batch": int(first.shape[0]) if getattr(first, "shape", None) else 1}
