"""One way to run a model for evaluation, whatever its runtime: ``run(batch) -> float32 logits``.

Both runners take a collated batch (a dict of torch tensors, or numpy arrays) and
feed the model only the inputs it takes. ``threads=0`` means every core this
process may use; both runtimes are given the same count (``torch.set_num_threads``,
ORT ``intra_op_num_threads``) so a latency ratio compares models, not thread pools.

Thread pools that busy-wait distort interleaved timing. ORT's is told to sleep
(below). torch's OpenMP pool reads ``OMP_WAIT_POLICY`` only when torch is loaded, so
the process that evaluates should start with ``engine.launch.local.EVAL_ENV`` in its environment:
measured here (MiniLM, 2 threads, 2 loaded cores), torch b1 took 284 ms with the
default policy and 73 ms with PASSIVE (1 thread: 62 ms either way).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# Environment for a process that measures latency (set before torch is imported; see the module doc).
from engine.threads import cpu_threads
from engine.training.context import JobFailed

# The model inputs each task's collate produces (labels are never fed).
TASK_INPUTS = {
    "text_classification": ("input_ids", "attention_mask", "token_type_ids"),
    "image_classification": ("pixel_values",),
    "causal_lm": ("input_ids", "attention_mask"),
}

# ONNX Runtime's input type names and the numpy dtype to feed them.
_ORT_DTYPES = {"tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(float)": "float32",
               "tensor(float16)": "float16", "tensor(double)": "float64", "tensor(bool)": "bool"}

# ONNX Runtime graph rewrites that make a CPU model slower, left off in every session the engine opens (and in
# the ort_infer.py of an export). SkipLayerNormFusion turns a transformer's residual Add + LayerNormalization
# into SkipLayerNormalization, whose CPU kernel (onnxruntime 1.32) took 435 us on a [16, 32, 384] tensor where
# Add + Add + LayerNormalization took 96 us (Sapphire Rapids, 2 threads): MiniLM's dynamic int8 went from 0.57x
# to 0.44x of fp32's latency at batch 16 without it (benchmarks/compress_bench.py).
SLOW_CPU_FUSIONS = ["SkipLayerNormFusion"]


def resolve_threads(threads: int = 0) -> int:
    """``threads`` when positive, else ``OMP_NUM_THREADS``, else the cores this process may run on."""
    return cpu_threads(threads)


def task_inputs(task_name: str) -> tuple[str, ...]:
    if task_name not in TASK_INPUTS:
        raise JobFailed(f"cannot evaluate task '{task_name}'", f"use one of: {', '.join(TASK_INPUTS)}")
    return TASK_INPUTS[task_name]


def _numpy(value: Any) -> Any:
    import numpy as np

    if hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    return np.asarray(value)


class TorchRunner:
    """A torch module in eval mode, run under ``torch.inference_mode`` on the CPU."""

    runtime = "torch-eager"

    def __init__(self, module: Any, task_name: str, threads: int = 0, label: str = "torch"):
        self.module = module.eval()
        self.task_name = task_name
        self.inputs = task_inputs(task_name)
        self.threads = resolve_threads(threads)
        self.label = label
        self._use_threads()

    def _use_threads(self) -> None:
        # The torch thread pool is per process: set it again before each call so two
        # runners (or other code) with another count cannot change what this one measures.
        import torch

        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)

    def run(self, batch: dict[str, Any]) -> Any:
        import numpy as np
        import torch

        self._use_threads()
        feed = {k: v if isinstance(v, torch.Tensor) else torch.from_numpy(np.asarray(v))
                for k, v in batch.items() if k in self.inputs}
        with torch.inference_mode():
            if self.task_name == "image_classification":
                out = self.module(feed["pixel_values"])
            elif self.task_name == "causal_lm":
                out = self.module(**feed, use_cache=False)
            else:
                out = self.module(**feed)
        if not isinstance(out, torch.Tensor):  # a transformers ModelOutput, or a tuple from a plain module
            out = out.logits if hasattr(out, "logits") else out[0]
        return out.float().numpy()


class OrtRunner:
    """An ONNX Runtime session of an ``.onnx`` file on the CPU or (where available) CUDA."""

    def __init__(self, path: str | os.PathLike, task_name: str, threads: int = 0, provider: str = "cpu",
                 label: str = "onnx"):
        import onnxruntime as ort

        self.path = Path(path)
        self.task_name = task_name
        task_inputs(task_name)
        self.threads = resolve_threads(threads)
        self.label = label
        if provider not in ("cpu", "cuda"):
            raise JobFailed(f"unknown ONNX Runtime provider '{provider}'", "use 'cpu' or 'cuda'")
        if not self.path.is_file():
            raise JobFailed(f"ONNX model not found: {self.path}", "export the model to ONNX first, or check the path")
        providers = ["CPUExecutionProvider"]
        if provider == "cuda":
            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise JobFailed("ONNX Runtime cannot use CUDA here (no CUDAExecutionProvider in this install)",
                                "evaluate with runtime onnxruntime-cpu, or install onnxruntime-gpu on a machine "
                                "with an NVIDIA GPU")
            providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
        self.runtime = f"onnxruntime-{provider}"
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.threads
        opts.inter_op_num_threads = 1  # sequential execution: one pool of `threads`, as torch has
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        # ORT's threads busy-wait for more work after each run by default. Latency is measured with the
        # runners interleaved (engine/evaluate/latency.py): a spinning pool would steal the cores from
        # the next runner, and on a busy machine from itself (measured here on 2 loaded cores: MiniLM b1
        # 54 ms spinning, 10 ms not). Threads that sleep when idle keep the comparison fair.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
        try:
            self.session = ort.InferenceSession(str(self.path), sess_options=opts, providers=providers,
                                                disabled_optimizers=SLOW_CPU_FUSIONS if provider == "cpu" else None)
        except Exception as exc:  # noqa: BLE001 - ORT raises its own Fail/InvalidGraph/... types
            first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
            raise JobFailed(f"ONNX Runtime cannot load {self.path.name}: {first}",
                            "the file is damaged or uses operators this ONNX Runtime lacks; export it again") from exc
        if provider == "cuda" and "CUDAExecutionProvider" not in self.session.get_providers():
            raise JobFailed("ONNX Runtime fell back to the CPU: the CUDA provider did not start",
                            "check the CUDA and cuDNN libraries onnxruntime-gpu needs, or use onnxruntime-cpu")
        self.input_names = [i.name for i in self.session.get_inputs()]
        self._dtypes = {i.name: _ORT_DTYPES.get(i.type) for i in self.session.get_inputs()}
        outputs = [o.name for o in self.session.get_outputs()]
        self.output_name = "logits" if "logits" in outputs else outputs[0]

    def feeds(self, batch: dict[str, Any]) -> dict[str, Any]:
        """The session's inputs from a collated batch, in the dtypes the graph declares."""
        missing = [n for n in self.input_names if n not in batch]
        if missing:
            raise JobFailed(f"the ONNX model needs inputs the batch lacks: {', '.join(missing)}",
                            f"this model was not exported for {self.task_name}; export it from a {self.task_name} run")
        out = {}
        for name in self.input_names:
            arr = _numpy(batch[name])
            dtype = self._dtypes.get(name)
            out[name] = arr.astype(dtype, copy=False) if dtype else arr
        return out

    def run(self, batch: dict[str, Any]) -> Any:
        import numpy as np

        (logits,) = self.session.run([self.output_name], self.feeds(batch))
        return np.asarray(logits, dtype=np.float32)
