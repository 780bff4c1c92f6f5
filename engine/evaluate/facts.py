"""Model facts for the evaluation: parameters, multiply-accumulates and bytes on disk.

MACs are counted with ``torch.utils.flop_counter.FlopCounterMode`` on one real
forward pass: it counts the matrix products and convolutions aten actually runs
(``mm``/``addmm``/``bmm``/``convolution``, attention included), and MACs are its
FLOPs / 2. Elementwise work (norms, activations, pooling) is not counted, as in
the usual MAC figures. The CPU's fused attention kernel has no formula in torch,
so it gets the standard one here. The figure is per example: the pass's count
divided by the batch size, at the batch's (padded) sequence length.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from engine.training.context import JobFailed


def _cpu_attention_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    from torch.utils.flop_counter import sdpa_flop_count

    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _task_of(batch: dict[str, Any]) -> str:
    if "pixel_values" in batch:
        return "image_classification"
    if "labels" in batch and getattr(batch["labels"], "dim", lambda: 1)() == 2:
        return "causal_lm"  # per-token labels
    return "text_classification"


def torch_facts(module: Any, example_batch: dict[str, Any], task_name: str | None = None) -> dict[str, int]:
    """{"params": sum of numel over parameters, "macs": MACs per example on ``example_batch``}."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from engine.evaluate.runners import TorchRunner

    params = sum(p.numel() for p in module.parameters())
    runner = TorchRunner(module, task_name or _task_of(example_batch), threads=torch.get_num_threads())
    mapping = {}
    cpu_attention = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if cpu_attention is not None:
        mapping[cpu_attention] = _cpu_attention_flops
    counter = FlopCounterMode(display=False, custom_mapping=mapping)
    with counter:
        runner.run(example_batch)
    size = int(next(iter(example_batch.values())).shape[0])
    return {"params": int(params), "macs": int(counter.get_total_flops() // 2 // max(1, size))}


def onnx_params(path: str | os.PathLike) -> int:
    """Elements in an ONNX model's initializers: its parameter count (quantized: weights plus scales and zero points)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    total = 0
    for init in model.graph.initializer:
        n = 1
        for d in init.dims:
            n *= d
        total += n
    return int(total)


def file_bytes(path_or_dir: str | os.PathLike) -> int:
    """Bytes of a file, or of every file under a folder (an ONNX model with external data, a model/ folder)."""
    path = Path(path_or_dir)
    if path.is_file():
        return path.stat().st_size
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    raise JobFailed(f"cannot measure the size of {path}: it does not exist", "check the model path")
